#!/usr/bin/env python3
"""Benchmark the docker layer against baselines measured in the same run.

1. Image builds: a first build (every layer rebuilt, `no_cache`, pip downloads included),
   a rebuild after a code-only change (IREE layers from the layer cache), and a rebuild of
   unchanged inputs (the content-tag hit). Ratios are against the first build.
2. Container start: `docker run --rm IMAGE true` (CLI) and the SDK's run+wait+remove, against
   starting a local `python3 -c pass`; plus `python3 -c pass` inside a container, which is
   the floor of a worker container's start.

Usage: scripts/bench_docker.py [--source wheels:3.13.0] [--runs 10] [--skip-first-build]
Needs a running engine (scripts/docker_setup.sh).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.docker.engine import connect  # noqa: E402
from runner.docker.image import build_image, parse_source  # noqa: E402


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _median(fn, runs: int) -> float:
    fn()  # warm-up: page cache, image layers, interpreter files
    return statistics.median(_timed(fn) for _ in range(runs))


def _project_copy(tmp: Path, marker: str) -> Path:
    """A copy of the runner checkout with one extra module, so `marker` changes its hash."""
    root = tmp / f"project-{marker}"
    root.mkdir()
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(REPO / "runner", root / "runner",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (root / "runner" / "_bench_marker.py").write_text(f"MARKER = {marker!r}\n")
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="wheels:3.13.0")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--skip-first-build", action="store_true",
                        help="skip the no-cache build (it re-downloads the IREE wheels)")
    add_record_option(parser)
    args = parser.parse_args()
    client = connect()
    source = parse_source(args.source, where="--source")
    quiet = None

    with tempfile.TemporaryDirectory() as tmp:
        project = _project_copy(Path(tmp), "a")
        print(f"images: {args.source} on runner-base:bookworm", flush=True)
        first = None
        if not args.skip_first_build:
            first = build_image(source, client=client, progress=quiet, no_cache=True,
                                project_dir=project).seconds
            print(f"  first build (no layer cache)      {first:8.1f} s", flush=True)
        else:
            build_image(source, client=client, progress=quiet, project_dir=project)
        project = _project_copy(Path(tmp), f"b-{time.time_ns()}")
        code_only = build_image(source, client=client, progress=quiet, project_dir=project)
        print(f"  rebuild after a code-only change  {code_only.seconds:8.1f} s", flush=True)
        hits = [build_image(source, client=client, progress=quiet, project_dir=project)
                for _ in range(3)]
        assert all(h.cached for h in hits), "unchanged inputs must be a cache hit"
        hit = statistics.median(h.seconds for h in hits)
        print(f"  rebuild, unchanged inputs (hit)   {hit:8.2f} s")
        if first:
            print(f"  ratio first / hit                 {first / hit:8.0f} x")
            print(f"  ratio first / code-only           {first / code_only.seconds:8.1f} x")
        image = code_only.tag

    def local() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    def cli_true() -> None:
        subprocess.run(["docker", "run", "--rm", "--network", "host", image, "true"],
                       check=True, capture_output=True)

    def cli_python() -> None:
        subprocess.run(["docker", "run", "--rm", "--network", "host", image,
                        "python3", "-c", "pass"], check=True, capture_output=True)

    def sdk_true() -> None:
        box = client.containers.run(image, ["true"], detach=True, network_mode="host")
        box.wait()
        box.remove()

    print(f"\ncontainer start, median of {args.runs}:")
    base = _median(local, args.runs)
    print(f"  local `python3 -c pass`                    {base * 1000:8.1f} ms  (baseline)")
    starts = {}
    for key, label, fn in (("cli_true", "`docker run --rm IMAGE true` (CLI)", cli_true),
                           ("sdk_true", "SDK run + wait + remove, `true`", sdk_true),
                           ("cli_python", "`docker run --rm IMAGE python3 -c pass`",
                            cli_python)):
        if fn is not sdk_true and shutil.which("docker") is None:
            continue
        starts[key] = t = _median(fn, args.runs)
        print(f"  {label:42s} {t * 1000:8.1f} ms  ({t / base:5.1f} x baseline)")
    container = starts.get("cli_true", starts["sdk_true"])
    emit("bench_docker", {
        "first_build_s": round(first, 1) if first else None,
        "code_only_rebuild_s": round(code_only.seconds, 1), "rebuild_hit_s": round(hit, 2),
        "first_vs_hit": round(first / hit) if first else None,
        "process_start_ms": round(base * 1000, 1),
        "container_start_ms": round(container * 1000, 1),
        "container_vs_process": round(container / base, 1),
        "container_starts_ms": {k: round(v * 1000, 1) for k, v in starts.items()}},
        args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
