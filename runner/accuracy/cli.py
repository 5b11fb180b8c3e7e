"""`runner score | compare | calibrate | oracle`: the accuracy subcommands.

`register(subparsers)` adds them to the main `runner` parser (runner/cli/main.py).
Exit codes: each command's `Exits` (runner.cli.grammar).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from runner.base.outdir import RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    ACCURACY_FAILED,
    DISK_FULL,
    SAMPLES_MISSING,
    Exits,
    add_dry_run,
    add_metrics,
    add_out,
    add_profile,
    add_require_full,
    add_samples,
    add_worst,
    document,
    renamed,
    shared,
)
from runner.config.overrides import profile_from_args
from runner.config.reads import ProfileReads
from runner.inputs.cliargs import COUNT, PERCENT, SCALE, SEED

# The profile fields `runner oracle` acts on (runner.config.reads): the model its PyTorch
# pipeline runs and its count; a `--set` of another is refused.
ORACLE_READS = ProfileReads("oracle", ("name", "count", "model"))

COMPARE_JSON = "compare.json"


def _device(name: str | None) -> str:
    if name:
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _add_backbone_flags(p: argparse.ArgumentParser) -> None:
    add_profile(p, default=None, with_set=False)
    shared(p, "--fid-weights", metavar="PATH",
           help="pt_inception-2015-12-05-6726825d.pth (default: $RUNNER_FID_WEIGHTS, else "
           "the cache's mlperf/ dir)")
    shared(p, "--clip-weights", metavar="PATH",
           help="OpenAI's ViT-B-32.pt (default: $RUNNER_CLIP_WEIGHTS, else the cache)")
    shared(p, "--images-per-pass", type=COUNT, default=1, metavar="N",
           help="images per Inception/CLIP forward pass (default: 1, as MLPerf's script; "
           "larger is faster and equal to ~1e-8)")
    renamed(p, "--batch-size", "--images-per-pass N",
            "--batch-size is the layout's batch in `runner run`")
    shared(p, "--torch-device", choices=["cpu", "cuda"],
           help="torch device scoring runs on (default: cuda when torch sees one, else cpu)")
    renamed(p, "--device", "--torch-device cpu|cuda", "--device is IREE's runtime device in "
            "`runner goldens`")


def cmd_score(ctx: CommandContext) -> int:
    from runner.accuracy.evaluate import evaluate_run
    from runner.config.profile import parse_metrics

    args = ctx.args
    metrics = parse_metrics(args.metrics, "--metrics") if args.metrics else None
    if args.dry_run:
        from runner.accuracy.evaluate import score_plan

        print("\n".join(score_plan(Path(args.run_dir), profile=args.profile,
                                   log=Path(args.log) if args.log else None, metrics=metrics,
                                   fid_weights=args.fid_weights,
                                   clip_weights=args.clip_weights)))
        return 0
    score = evaluate_run(Path(args.run_dir), profile=args.profile,
                         log=Path(args.log) if args.log else None,
                         require_full=args.require_full, fid_weights=args.fid_weights,
                         clip_weights=args.clip_weights, batch_size=args.images_per_pass,
                         device=_device(args.torch_device), metrics=metrics)
    r = score.result
    cached = " (cached)" if r.frechet_cached else ""
    print(f"{r.n} samples scored in {r.seconds:.1f}s ({r.images_per_second:.2f} images/s) "
          f"+ Frechet {r.frechet_seconds:.1f}s{cached}; profile {score.plan.profile.name}; "
          f"{r.backbones.label}")
    print("\n".join(r.files_lines()))
    for line in score.verdict.lines():
        print(line)
    print(f"wrote {score.json_path} and {score.txt_path}")
    return score.verdict.exit_code


def cmd_compare(ctx: CommandContext) -> int:
    from runner.accuracy.compare import compare_runs, write_comparison
    from runner.accuracy.evaluate import resolve_profile
    from runner.accuracy.samples import open_source

    args = ctx.args
    if args.dry_run:
        from runner.accuracy.compare import compare_plan

        print("\n".join(compare_plan(Path(args.run_a), Path(args.run_b),
                                     Path(args.out) / COMPARE_JSON if args.out else None)))
        return 0
    shape = None
    sources = [open_source(Path(args.run_a)), open_source(Path(args.run_b))]
    if any(s.kind == "log" for s in sources):
        size = resolve_profile(next(s for s in sources if s.kind == "log"),
                               args.profile).model.image_size
        shape = (size, size, 3)
    comparison = compare_runs(Path(args.run_a), Path(args.run_b), shape)
    print(comparison.table(args.worst))
    if args.out:
        path = Path(args.out) / COMPARE_JSON
        write_comparison(path, comparison, args.worst)
        print(f"wrote {path}")
    return 0


def cmd_calibrate(ctx: CommandContext) -> int:
    from runner.accuracy.calibrate import calibrate, calibrate_plan

    args = ctx.args
    if args.dry_run:
        print("\n".join(calibrate_plan(
            Path(args.run_dir), Path(args.out), profile=args.profile,
            reference_run=Path(args.reference_run) if args.reference_run else None,
            fid_percent=args.fid_percent, clip_percent=args.clip_percent,
            fid_weights=args.fid_weights, clip_weights=args.clip_weights)))
        return 0
    cal = calibrate(Path(args.run_dir), Path(args.out), profile=args.profile,
                    reference_run=Path(args.reference_run) if args.reference_run else None,
                    fid_percent=args.fid_percent, clip_percent=args.clip_percent,
                    fid_weights=args.fid_weights, clip_weights=args.clip_weights,
                    batch_size=args.images_per_pass, device=_device(args.torch_device),
                    command=[shlex.join(["runner", *sys.argv[1:]])])
    print(f"FID  {cal.fid!r} +/- {cal.fid_percent}% -> {list(cal.fid_range)}")
    print(f"CLIP {cal.clip!r} +/- {cal.clip_percent}% -> {list(cal.clip_range)}")
    print(f"samples {cal.samples}; statistics {cal.statistics}")
    print(f"wrote {cal.out}/accuracy.yaml (paste into the profile) and calibration.json")
    return 0


def cmd_oracle(ctx: CommandContext) -> int:
    from runner.accuracy.oracle_runs import Perturbation, oracle_plan, oracle_run
    from runner.accuracy.samples import chosen_ids

    args = ctx.args
    perturbation = Perturbation(args.guidance, args.latent_noise, args.noise_seed)
    profile = profile_from_args(args, ORACLE_READS)
    ids = chosen_ids(args.count, args.samples, args.ids, None, profile.count)
    if args.dry_run:
        print("\n".join(oracle_plan(Path(args.out), profile, ids, perturbation)))
        return 0
    out = oracle_run(Path(args.out), profile, ids, perturbation)
    print(f"wrote {out}/manifest.json and {out}/images/")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score", help="MLPerf FID + CLIP of a run, judged against the profile's ranges",
        description="Scores a run dir (run.json + samples/), a generate dir (manifest.json + "
                    "images/) or an MLPerf accuracy log; writes accuracy.json and accuracy.txt "
                    "into RUN_DIR. Fewer samples than the ranges were set for are scored and "
                    "labelled a subset, not judged (exit 0) unless --require-full.")
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="run dir, generate dir, or any dir with --log")
    _add_backbone_flags(p)
    add_require_full(p)
    add_metrics(p)
    p.add_argument("--log", metavar="PATH", help="score this mlperf_log_accuracy.json "
                   "(default: the run's images)")
    add_dry_run(p, "what it would score (samples, metrics, the weights and statistics it "
                "found) and the files it would write")
    p.set_defaults(func=cmd_score)
    document(p, "runner score runs/main",
             "runner score runs/main --metrics fid      # FID alone: no CLIP weights needed",
             "runner score runs/smoke --require-full      # a subset fails instead of 'not judged'",
             "runner score ANY_DIR --profile mi325x --log mlperf_log_accuracy.json",
             exits=Exits(verdict=ACCURACY_FAILED,
                         incomplete=SAMPLES_MISSING, scores=True))

    p = subparsers.add_parser("compare", help="per-image PSNR/SSIM between two runs")
    p.add_argument("run_a", metavar="RUN_A", help="a run dir, generate dir or accuracy log dir")
    p.add_argument("run_b", metavar="RUN_B", help="the other one")
    add_out(p, f"write the comparison as {COMPARE_JSON} here",
            Rerun(RESUMES, "nothing: the runs are compared again", (COMPARE_JSON,)),
            required=False, default="none: printed only")
    add_worst(p, 10)
    add_profile(p, default=None, none_means="the one the run recorded; for an accuracy log, "
                "it gives the image size", with_set=False)
    add_dry_run(p, "the samples both runs hold and the file it would write")
    p.set_defaults(func=cmd_compare)
    document(p, "runner compare runs/a runs/b", "runner compare runs/a runs/b --out cmp",
             out=f"a directory for {COMPARE_JSON}, every per-image difference",
             exits=Exits(incomplete=DISK_FULL))

    p = subparsers.add_parser(
        "calibrate", help="reference statistics and ranges from a known-good run",
        description="Scores a known-good run and writes accuracy.yaml (ranges: its scores "
                    "+/- the percentages) and calibration.json into --out; with "
                    "--reference-run, also fid_statistics.npz from that run's images.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the known-good run")
    add_out(p, "directory for accuracy.yaml and calibration.json",
            Rerun(RESUMES, "nothing: the run is scored again, the files written at the end",
                  ("calibration.json",)))
    p.add_argument("--reference-run", metavar="DIR",
                   help="images whose statistics become the FID reference (disjoint prompts; "
                   "default: the shipped statistics)")
    p.add_argument("--fid-percent", type=PERCENT, default=2.0,
                   help="FID range half-width in percent (default: 2, as MLPerf)")
    p.add_argument("--clip-percent", type=PERCENT, default=0.2,
                   help="CLIP range half-width in percent (default: 0.2, as MLPerf)")
    _add_backbone_flags(p)
    add_dry_run(p, "what it would score (samples, weights, statistics) and the files it "
                "would write")
    p.set_defaults(func=cmd_calibrate)
    document(p, "runner calibrate runs/known-good --out calib --fid-percent 2 --clip-percent 0.2",
             out="a directory: accuracy.yaml, calibration.json (and fid_statistics.npz)",
             exits=Exits(incomplete=DISK_FULL))

    p = subparsers.add_parser(
        "oracle", help="tiny-model images from the PyTorch oracle (optionally perturbed)")
    add_out(p, "directory for manifest.json and images/",
            Rerun(RESUMES, "nothing: it is one short process, its images are made again",
                  ("manifest.json",)))
    add_samples(p)
    add_profile(p, default="tiny")
    p.add_argument("--guidance", type=SCALE, help="replace the guidance scale (default: "
                   "the model's, 8.0)")
    p.add_argument("--latent-noise", type=SCALE, default=0.0,
                   help="add N(0, s^2) noise to the fixed initial latent (default: 0)")
    p.add_argument("--noise-seed", type=SEED, default=0,
                   help="seed of that noise (default: 0)")
    add_dry_run(p, "the images it would generate and where")
    p.set_defaults(func=cmd_oracle)
    document(p, "runner oracle --count 32 --out runs/oracle",
             "runner oracle --guidance 2.0 --out runs/g2     # a deliberately broken run",
             exits=Exits(incomplete=DISK_FULL))
