"""The GPU check's cost on this machine: `runner gpu-check prepare`, then what of `run` a CPU
can do, timed.

    python3 scripts/bench_gpu_check.py [--out DIR] [--record]
    python3 scripts/bench_gpu_check.py --profile h100-seeded [--out DIR] [--record]

With the `cpu` profile (the default): `runner gpu-check prepare --profile cpu --batch-sizes
1,2 --no-wheels` into a fresh carry (with a fresh $RUNNER_CACHE_DIR, so every module is
compiled: a lab's first prepare), then `runner gpu-check run` from it; record `gpu_check_cpu`.

With a GPU profile (`h100-seeded`: seeded SDXL at full size, compiled for the GPU here):
`runner gpu-check prepare --profile P` as a lab runs it (its default batch sizes, with the
wheels), into a fresh cache, then the one part of `run` whose cost is the machine's and not
the GPU's: the carry's `weights` steps (`runner export weights --from ...`, exactly as `run`
starts them), which write the seeded weights on the GPU machine. It records each prepare
step's seconds, the carry's size (before the weights), and each weights step's seconds
(`weights_first_s` the first export's, `weights_rest_s` the others') and the bytes they
wrote (`written_gb`, a file once); a second export links the first one's CLIP and UNet, and
`linked_gb` is what the export directories hold as links, not written again;
record `gpu_check_<profile>`.

Each prints one JSON line; docs/gpu-check.md shows the records.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import REPO, add_record_option, emit


def tree_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1)


def stored_gb(path: Path) -> float:
    """What the files under `path` take on disk, a hard-linked file once."""
    inodes = {(s.st_dev, s.st_ino): s.st_size for s in
              (p.stat() for p in path.rglob("*") if p.is_file())}
    return round(sum(inodes.values()) / 1e9, 2)


def exports_gb(exports: Path) -> float:
    """The export directories' files, a hard link as often as it is named (the weights'
    links by sha256 beside them left out)."""
    from runner.model.seeded_weights import SHARED_DIR

    return round(sum(tree_mb(d) for d in exports.iterdir()
                     if d.is_dir() and d.name != SHARED_DIR) / 1e3, 2)


def runner(*args: str, env: dict[str, str]) -> float:
    """`python -m runner ARGS` to its end (exit 0 required); its wall seconds."""
    return timed([sys.executable, "-m", "runner", *args], env)


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, check=False, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return round(time.perf_counter() - t0, 1)


def on_cpu(root: Path, env: dict[str, str]) -> dict:
    carry, results = root / "carry", root / "results"
    prepare_s = runner("gpu-check", "prepare", "--profile", "cpu", "--batch-sizes", "1,2",
                       "--no-wheels", "--out", str(carry), env=env)
    run_s = runner("gpu-check", "run", "--carry", str(carry), "--out", str(results), env=env)
    summary = json.loads((results / "gpu_check.json").read_text())
    return {
        "prepare_s": prepare_s, "run_s": run_s, "carry_mb": tree_mb(carry),
        "cache_mb": tree_mb(carry / "cache"), "tiny_cpu_mb": tree_mb(carry / "tiny-cpu"),
        "status": summary["status"],
        "steps_s": {s["name"]: s["seconds"] for s in summary["steps"]},
        "mlperf_samples_per_s": (summary.get("mlperf") or {}).get("samples_per_s")}


def for_gpu(profile: str, root: Path, env: dict[str, str]) -> dict:
    sys.path.insert(0, str(REPO))
    from runner.gpucheck.plan import CARRY_MANIFEST, WEIGHTS, plan_run

    carry = root / "carry"
    prepare_s = runner("gpu-check", "prepare", "--profile", profile, "--out", str(carry),
                       env=env)
    manifest = json.loads((carry / CARRY_MANIFEST).read_text())
    weights = [s for s in plan_run(carry, manifest, root / "results", None)
               if s.kind == WEIGHTS]
    run_env = {**env, "RUNNER_CACHE_DIR": str(carry / "cache")}  # as `run` gives its steps
    exports = carry / "cache" / "exports"
    sizes = {"carry_mb": tree_mb(carry), "wheels_mb": tree_mb(carry / "wheels"),
             "cache_mb": tree_mb(carry / "cache")}  # as copied: before the weights
    before, apparent = stored_gb(exports), exports_gb(exports)
    weights_s = [timed(s.argv, run_env) for s in weights]
    written = round(stored_gb(exports) - before, 2)
    return {
        "prepare_s": prepare_s, **sizes,
        "batch_sizes": manifest["batch_sizes"], "backend": manifest["backend"],
        "chip": manifest["chip"],
        "prepare_steps_s": {s["step"]: s["seconds"] for s in manifest["compiled"]},
        "weights_exports": [s.name.removeprefix("weights ") for s in weights],
        "weights_s": weights_s, "weights_first_s": weights_s[0] if weights_s else 0.0,
        "weights_rest_s": round(sum(weights_s[1:]), 1),
        "weights_total_s": round(sum(weights_s), 1), "written_gb": written,
        "linked_gb": round(exports_gb(exports) - apparent - written, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu",
                        help="cpu (prepare and run here) or a GPU profile such as h100-seeded "
                        "(prepare and the weights steps here)")
    parser.add_argument("--out", type=Path, help="keep the carry and results here "
                        "(default: a temporary directory)")
    add_record_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        root = args.out or Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(REPO), "RUNNER_PROGRESS": "off",
               "RUNNER_CACHE_DIR": str(root / "cache"),
               "RUNNER_RESULTS_URL": str(root / "results.sqlite")}
        if args.profile == "cpu":
            emit("gpu_check_cpu", on_cpu(root, env), args.record)
        else:
            emit(f"gpu_check_{args.profile.replace('-', '_')}",
                 for_gpu(args.profile, root, env), args.record)


if __name__ == "__main__":
    main()
