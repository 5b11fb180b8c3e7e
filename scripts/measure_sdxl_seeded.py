"""Measures the seeded full-size SDXL lab path on this machine: export, then iree-compile of
every module with a profile's flags (default mi325x: gfx942), one module at a time.

    python scripts/measure_sdxl_seeded.py --out DIR [--profile mi325x] [--batch-size 32]

Per step: wall time and peak RSS (GNU time's "Maximum resident set size"), file sizes, and
per module the dispatch and executable counts from IREE's scheduling statistics (the
`--iree-scheduling-dump-statistics-*` flags IREE CI adds). Writes `measure_bs<N>.json`.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from runner.base.iree_tools import compiler_info
from runner.config.exports import ExportSource
from runner.config.model_config import ModelConfig
from runner.config.profile import load_profile
from runner.model.export.store import ensure_export


def timed(argv: list[str], log: Path) -> dict:
    """Runs `argv` under GNU time; wall seconds, peak RSS (GB) and exit status."""
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(["/usr/bin/time", "-v", *argv], stdout=f, stderr=subprocess.STDOUT,
                              check=False)
    text = log.read_text(errors="replace")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    return {"seconds": round(time.perf_counter() - start, 1), "exit": proc.returncode,
            "peak_rss_gb": round(int(rss.group(1)) / 1e6, 2) if rss else None,
            "command": shlex.join(argv)}


def dispatch_counts(stats_file: Path) -> dict:
    """Sums IREE's per-module scheduling statistics (the JSON the dump flag writes)."""
    if not stats_file.is_file():
        return {}
    text = stats_file.read_text()
    return {key: sum(int(v) for v in re.findall(rf'"{key}":\s*(\d+)', text))
            for key in ("dispatch-count", "executable-count", "command-buffer-count")
            if f'"{key}"' in text}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--profile", default="mi325x")
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batch = args.batch_size
    results: dict = {"batch_size": batch}
    export = timed([sys.executable, "-m", "runner", "export", "sdxl", "--seeded",
                    "--batch-sizes", str(batch)], out / f"export_bs{batch}.log")
    results["export"] = export
    model = ModelConfig.load(ensure_export(ExportSource(None, "sdxl", "float16"), [batch],
                                           [batch]))
    results["files_mb"] = {p.name: round(p.stat().st_size / 1e6, 1)
                           for p in sorted(model.base_dir.iterdir()) if p.is_file()}
    profile = load_profile(args.profile)
    compiler = compiler_info()
    for name in model.submodels:
        for i, mlir in enumerate(model.mlir_sources(name, batch)):
            key = name if i == 0 else f"{name}_pipeline"
            vmfb, stats = out / f"{key}_bs{batch}.vmfb", out / f"{key}_bs{batch}.stats.json"
            argv = [compiler.path, mlir, *profile.target.flags_for(key, compiler),
                    "--iree-scheduling-dump-statistics-format=json",
                    f"--iree-scheduling-dump-statistics-file={stats}", "-o", str(vmfb)]
            step = timed(argv, out / f"{key}_bs{batch}.compile.log")
            step["vmfb_mb"] = round(vmfb.stat().st_size / 1e6, 2) if vmfb.is_file() else None
            step.update(dispatch_counts(stats))
            results[key] = step
            (out / f"measure_bs{batch}.json").write_text(json.dumps(results, indent=2) + "\n")
            print(json.dumps({key: step}), flush=True)
    results["compiler"] = f"{compiler.version} @ {compiler.commit}"
    (out / f"measure_bs{batch}.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
