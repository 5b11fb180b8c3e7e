"""Batch-run harness benchmark on the cpu profile, one run, everything as ratios:

1. harness throughput (1 worker on core 0, through the run lifecycle) vs a bare in-process loop
   over the same modules on the same core (aim >= 0.97);
2. scaling from 1 to 2 workers on 2 cores (aim >= 1.8x);
3. aggregation write speed (MLPerf log, hex) vs a plain copy of the same raw bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

from measured import add_record_option, emit

from runner.batch.aggregate import aggregate
from runner.config.layout import CPU_IDS_FLAG
from runner.config.mlperf_data import load_captions
from runner.config.profile import load_profile
from runner.lifecycle import execute_run
from runner.model.compiled_model import compile_model
from runner.model.pipeline.loader import open_pipeline
from runner.rundir.store import SampleStore


def bare_loop(count: int) -> float:
    """Samples/s of a plain loop on core 0 with modules already loaded (no harness)."""
    profile = load_profile("cpu")
    os.sched_setaffinity(0, {0})
    try:
        with open_pipeline(compile_model(profile, 1), [f"{CPU_IDS_FLAG}=0"]) as pipeline:
            captions = load_captions()
            start = time.perf_counter()
            for i in range(count):
                pipeline.generate([captions[i]])
            seconds = time.perf_counter() - start
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return count / seconds


def harness(count: int, devices: str, out: Path) -> tuple[float, Path]:
    profile = load_profile("cpu")
    profile = dataclasses.replace(profile, layout=profile.layout.with_overrides(devices=devices))
    run_dir = out / f"devices-{devices}"
    outcome = execute_run(run_dir, profile, list(range(count)),
                          ["run", "--profile", "cpu", "--devices", devices])
    assert outcome.complete
    return count / outcome.seconds, run_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=48)
    add_record_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        bare = bare_loop(args.count)
        one, run_dir = harness(args.count, "0", out)
        two, _ = harness(args.count, "0-1", out)
        agg = aggregate(run_dir)
        raw = out / "raw.bin"
        start = time.perf_counter()
        with open(raw, "wb") as f:
            for _, image in SampleStore(run_dir).iter_samples():
                f.write(image.tobytes())
            f.flush()
            os.fsync(f.fileno())
        copy_src_s = time.perf_counter() - start
        start = time.perf_counter()
        shutil.copyfile(raw, out / "raw-copy.bin")
        copy_s = time.perf_counter() - start
    emit("bench_run", {
        "bench": "run", "count": args.count,
        "bare_loop_samples_per_s": round(bare, 3),
        "harness_1_worker_samples_per_s": round(one, 3),
        "harness_vs_bare": round(one / bare, 3),
        "harness_2_workers_samples_per_s": round(two, 3),
        "scaling_1_to_2_workers": round(two / one, 3),
        "aggregate_mb_per_s": round(agg.mb_per_s, 1),
        "decode_and_write_raw_mb_per_s": round(agg.raw_bytes / 1e6 / copy_src_s, 1),
        "plain_copy_mb_per_s": round(agg.raw_bytes / 1e6 / copy_s, 1),
        "aggregate_vs_plain_copy": round(agg.mb_per_s / (agg.raw_bytes / 1e6 / copy_s), 3),
    }, args.record)


if __name__ == "__main__":
    main()
