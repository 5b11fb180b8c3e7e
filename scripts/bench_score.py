"""Benchmark: accuracy scoring throughput and the Frechet distance, against baselines measured
in the same run.

1. One set of images scored twice with the same backbones: batch size 1 (MLPerf's script's
   default) and `--batch-size` (default 16); images/s of each, their ratio, and how far the
   two runs' scores are apart (on CPU: bit-identical).
2. The Frechet distance on 2048-d statistics (the images' against the tiny model's shipped
   reference): MLPerf's scipy `sqrtm` path against the eigenvalue path; seconds, ratio, and
   the relative difference of the two values.

    python scripts/bench_score.py                       # tiny oracle images of qsl 0-31
    python scripts/bench_score.py --run RUN_DIR --profile sdxl --device cuda
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.accuracy.calibrate import STATS_NAME, TINY_ACCURACY_DIR  # noqa: E402
from runner.accuracy.evaluate import open_backbones, plan_scoring, resolve_profile  # noqa: E402
from runner.accuracy.frechet import frechet_eigh, frechet_sqrtm, load_statistics  # noqa: E402
from runner.accuracy.samples import open_source, parse_ids  # noqa: E402
from runner.accuracy.score import ScoreSettings, score_samples  # noqa: E402
from runner.accuracy.settings import accuracy_settings  # noqa: E402
from runner.config.mlperf_data import load_captions  # noqa: E402


def images_of(run: Path | None, profile_name: str, samples: str, tmp: Path):
    if run is None:
        from runner.accuracy.oracle_runs import oracle_run
        from runner.config.profile import load_profile

        print(f"generating tiny oracle images for qsl {samples} ...", file=sys.stderr)
        run = oracle_run(tmp / "oracle", load_profile(profile_name),
                         list(parse_ids(samples)), progress=False)
    source = open_source(run)
    profile = resolve_profile(source, profile_name if run is None else None)
    size = profile.model.image_size
    return list(source.iter_samples((size, size, 3))), profile, source


def timed_score(images, captions, backbones, batch_size: int):
    settings = ScoreSettings(batch_size=batch_size, progress=False)
    start = time.perf_counter()
    result = score_samples(iter(images), captions, settings, backbones, None)
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, help="score this run's images (default: tiny oracle)")
    p.add_argument("--profile", default="tiny")
    p.add_argument("--samples", default="0-31", help="oracle sample ids when --run is absent")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--statistics", type=Path, default=TINY_ACCURACY_DIR / STATS_NAME,
                   help="2048-d reference statistics for the Frechet timing")
    add_record_option(p)
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        images, profile, source = images_of(args.run, args.profile, args.samples, Path(tmp))
    captions = load_captions()
    backbones = open_backbones(plan_scoring(source, profile, captions, allow_subset=True),
                               device=args.device)
    settings = accuracy_settings(profile)
    print(f"{len(images)} images {images[0][1].shape}, {backbones.info.label}, "
          f"device {args.device}, backbones {settings.backbones}")

    timed_score(images[:2], captions, backbones, 2)  # warm-up (allocator, kernels)
    base, t_base = timed_score(images, captions, backbones, 1)
    fast, t_fast = timed_score(images, captions, backbones, args.batch_size)
    ips_base, ips_fast = len(images) / t_base, len(images) / t_fast
    clip_diff = np.max(np.abs(np.subtract(base.clip_per_sample, fast.clip_per_sample)))
    print("\nscoring (Inception + CLIP), same images, same backbones")
    print(f"  batch 1 (MLPerf's default): {ips_base:8.2f} images/s")
    print(f"  batch {args.batch_size:<3}                 : {ips_fast:8.2f} images/s   "
          f"ratio {ips_fast / ips_base:.2f}x")
    print(f"  CLIP score {base.clip!r} vs {fast.clip!r}; max per-sample diff {clip_diff:.3g}")
    print(f"  mu max diff {np.max(np.abs(base.mu - fast.mu)):.3g}, "
          f"sigma max diff {np.max(np.abs(base.sigma - fast.sigma)):.3g}")

    ref = load_statistics(args.statistics)
    start = time.perf_counter()
    slow = frechet_sqrtm(ref.mu, ref.sigma, base.mu, base.sigma)
    t_slow = time.perf_counter() - start
    start = time.perf_counter()
    quick = frechet_eigh(ref.mu, ref.sigma, base.mu, base.sigma)
    t_quick = time.perf_counter() - start
    batched = frechet_sqrtm(ref.mu, ref.sigma, fast.mu, fast.sigma)
    print(f"\nFrechet distance, 2048-d ({args.statistics.name})")
    print(f"  scipy sqrtm (MLPerf): {t_slow:7.2f} s  FID {slow.value!r}")
    print(f"  eigh (fast path)    : {t_quick:7.2f} s  FID {quick.value!r}   "
          f"ratio {t_slow / t_quick:.2f}x, relative difference "
          f"{abs(quick.value - slow.value) / abs(slow.value):.2e}")
    print(f"  FID from the batch-{args.batch_size} features: {batched.value!r} (relative "
          f"difference {abs(batched.value - slow.value) / abs(slow.value):.2e})")
    relative = abs(quick.value - slow.value) / abs(slow.value)
    emit("bench_score", {
        "images": len(images), "images_per_pass": args.batch_size, "device": args.device,
        "batch_1_images_per_s": round(ips_base, 2), "batched_images_per_s": round(ips_fast, 2),
        "batched_vs_batch_1": round(ips_fast / ips_base, 2),
        "frechet_sqrtm_s": round(t_slow, 2), "frechet_eigh_s": round(t_quick, 2),
        "sqrtm_vs_eigh": round(t_slow / t_quick, 1),
        "frechet_relative_difference": float(f"{relative:.2e}")},
        args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
