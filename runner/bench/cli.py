"""`runner bench ...`: throughput sweeps, stage latencies, tuning-spec A/B, benchmark goldens.

`register(subparsers)` adds the `bench` command to the main `runner` parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.base.outdir import REFUSES, RESUMES, Rerun
from runner.batch.cluster import SLURM_FLAGS
from runner.bench.dispatch_profile import DEFAULT_CALLS, MAX_CALLS
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DEFAULT_PROFILE,
    DISK_FULL,
    Exits,
    add_dry_run,
    add_executor,
    add_image,
    add_iree,
    add_out,
    add_profile,
    add_results,
    add_run_inputs,
    add_share_gpus,
    add_slurm,
    document,
    renamed,
    shared,
)
from runner.config.overrides import profile_from_args
from runner.config.reads import ProfileReads
from runner.goldens.cli import benchmark_paths_arg, golden_target_flags, selection_flags
from runner.goldens.plan import DEFAULT_CHIP
from runner.inputs.cliargs import COUNT, DURATION, integer
from runner.inputs.iree_build import IMAGE_KINDS
from runner.inputs.paths import suite_path

# The profile fields each command acts on (runner.config.reads): a `--set` of another is
# refused. A benchmark runs the model on the layout, its count samples per layout; `bench
# goldens` takes the machine (backend, chip, SKU) from the target, and the layout is
# checked against that backend.
BENCH_READS = ProfileReads("bench", ("name", "count", "model", "target", "layout"),
                           but=("target.sku",))
GOLDENS_READS = ProfileReads("bench goldens", ("target.backend", "target.chip", "target.sku",
                                               "layout"))

STAGE_REPETITIONS = 5
JUDGED = ("passed", "failed", "error")  # a golden that was measured and judged (or broke)


def _run_argv(args: argparse.Namespace) -> tuple[str, ...]:
    """The `runner run` prefix each layout's reproduce.sh re-runs (layout flags follow)."""
    out = ["run", "--profile", args.profile]
    for item in args.set or []:
        out += ["--set", item]
    if args.partition:
        out += ["--partition", args.partition]
    if args.share_gpus:
        out.append("--share-gpus")
    return tuple(out)


def _golden_target(args: argparse.Namespace) -> tuple[str, str, str]:
    """(SKU, ROCm chip, what chose the SKU): the flags, else $SKU/$ROCM_CHIP as IREE CI's
    runners read them, else the profile's machine (`target.sku`; a cpu target is `cpu`, so
    the default profile judges this host's CPU goldens)."""
    from runner.goldens.cli import selection
    from runner.goldens.select import ENV_SKU, from_env

    chosen = selection(args)
    given = "--sku" if from_env(args.sku, ENV_SKU)[1] == "flag" else f"${ENV_SKU}"
    name = args.profile or DEFAULT_PROFILE
    if chosen.sku and chosen.rocm_chip:
        if args.set:  # the profile is not read at all
            key = args.set[0].partition("=")[0]
            raise BadInput("`--set` is not read by `runner bench goldens` when the SKU and "
                           "the ROCm chip are given", where=f"--set {key}",
                           fix="drop --set, or drop --sku/--rocm-chip to take them from the "
                           "profile")
        return chosen.sku, chosen.rocm_chip, given
    target = profile_from_args(args, GOLDENS_READS, name, layout=()).target
    chip = chosen.rocm_chip or (target.chip if target.backend == "hip" else DEFAULT_CHIP)
    if chosen.sku:
        return chosen.sku, chip, given
    if target.golden_sku is None:
        raise BadInput(f"profile {name} names no SKU for its {target.backend} target, so "
                       "no benchmark golden can be chosen", where="--sku",
                       fix="pass --sku (IREE CI's name of this machine: mi300, mi325, "
                       "mi355, cpu) or set target.sku in the profile")
    return target.golden_sku, chip, f"profile {name}'s target"


def _golden_options(args: argparse.Namespace, sku: str, rocm_chip: str):
    """As `runner goldens check` reads them, the SKU and chip chosen by `_golden_target`."""
    from runner.bench.goldens import GoldenOptions

    return GoldenOptions(
        sku=sku, rocm_chip=rocm_chip,
        quality_dir=Path(args.quality_dir) if args.quality_dir else None,
        files_dir=Path(args.files_dir) if args.files_dir else None,
        device=args.device, dry_run=args.dry_run, offline=args.offline,
        repetitions=args.repetitions, min_time=args.min_time, warmup=args.warmup,
        strict=args.strict, out=Path(args.out) / "goldens" if args.out and not args.dry_run
        else None)


def _slurm(args: argparse.Namespace):
    """Slurm options with --executor slurm; Slurm flags without it are a mistake."""
    from runner.batch.cluster import given_slurm_options, slurm_options

    if args.executor == "slurm":
        return slurm_options(args)
    given = [SLURM_FLAGS[f] for f in given_slurm_options(args) if f != "image"]  # docker too
    if given:
        raise BadInput(f"{given[0]} is a Slurm option", where=given[0],
                       fix="add --executor slurm")
    return None


def cmd_bench(ctx: CommandContext) -> int:
    from runner.accuracy.samples import chosen_ids
    from runner.bench.bench import run_bench
    from runner.bench.report import markdown
    from runner.bench.result import BenchOptions
    from runner.bench.stages import BenchSettings

    args = ctx.args
    profile = profile_from_args(args, BENCH_READS, layout=("partition",))
    spec = suite_path(args.ab_tuning_spec) if args.ab_tuning_spec else None
    ids = chosen_ids(args.count, args.samples, args.ids, None, profile.count)
    sweep = {k: tuple(getattr(args, k) or (None,))
             for k in ("devices", "cpd", "batch_size", "vae_batch_size")}
    opts = BenchOptions(
        sample_ids=tuple(ids), devices=sweep["devices"], cpds=sweep["cpd"],
        batch_sizes=sweep["batch_size"], vae_batch_sizes=sweep["vae_batch_size"],
        throughput=not args.no_throughput, stages=not args.no_stages,
        stage_filter=tuple(args.stage or ()),
        settings=BenchSettings(repetitions=args.repetitions or STAGE_REPETITIONS,
                               min_time=args.min_time,
                               warmup=args.warmup, extra_flags=tuple(args.benchmark_flag or ()),
                               dispatch_calls=args.dispatches or 0),
        ab_tuning_spec=spec, dump_tuning_specs=args.dump_tuning_specs, dry_run=args.dry_run,
        run_argv=_run_argv(args), argv=tuple(ctx.argv), executor=args.executor,
        iree=tuple(v for spec in args.iree or () for v in spec.split(",") if v.strip()),
        image=args.image, slurm=_slurm(args))
    report = run_bench(profile, Path(args.out) if args.out else None, opts,
                       attempt=ctx.attempt)
    if not args.dry_run:
        print(markdown(report))
    return report.exit_code


def cmd_goldens(ctx: CommandContext) -> int:
    from runner.base.provenance import runner_provenance
    from runner.bench.bench import BENCH_JSON, BENCH_MD, versions
    from runner.bench.goldens import check_benchmarks, load_benchmarks, require_goldens
    from runner.bench.report import goldens_markdown
    from runner.goldens.cli import module_dirs, selection

    args = ctx.args
    benches = load_benchmarks([suite_path(p) for p in args.paths], selection(args),
                              module_dirs(args))
    sku, chip, chosen_by = _golden_target(args)
    require_goldens(benches, sku, chosen_by)
    results = check_benchmarks(benches, _golden_options(args, sku, chip))
    code = 0 if all(r.ok for r in results) else 1
    if args.out and not args.dry_run:
        out = Path(args.out)
        atomic_write_json(out / BENCH_JSON, {"kind": "bench-goldens", "versions": versions(),
                                             "profile": args.profile or DEFAULT_PROFILE,
                                             "runner": runner_provenance(),
                                             "argv": list(ctx.argv), "exit_code": code,
                                             "goldens": [r.to_dict() for r in results]})
        atomic_write_text(out / BENCH_MD, "\n".join(goldens_markdown(results)) + "\n")
        print(f"reports: {out / BENCH_JSON}, {out / BENCH_MD}", file=sys.stderr)
    counts = {s: sum(r.status == s for r in results) for s in {r.status for r in results}}
    print(f"{len(results)} benchmark goldens: {json.dumps(counts, sort_keys=True)}",
          file=sys.stderr)
    if not args.dry_run and not any(r.status in JUDGED for r in results):
        raise BadInput(f"no benchmark golden was judged (sku {sku}): "
                       + "; ".join(f"{r.name}: {r.status} {r.message}".strip()
                                   for r in results), where="--sku/--rocm-chip",
                       fix="check goldens this machine's SKU and chip have (each line says "
                       "why its test was not judged)")
    return code


def _benchmark_flags(parser: argparse.ArgumentParser,
                     p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """One spelling for iree-benchmark-module's settings, stage latencies and goldens alike,
    declared in `p` (the parser or a group of it); their old --golden-X spellings are
    refused by `parser`, naming the new one."""
    shared(p, "--repetitions", type=COUNT, metavar="N",
           help="--benchmark_repetitions (default: stage latencies "
           f"{STAGE_REPETITIONS}, goldens the file's own)")
    shared(p, "--min-time", metavar="TIME",
           help="--benchmark_min_time per repetition, e.g. 0.2s or 20x (default: "
           "iree-benchmark-module's own; goldens the file's own)")
    shared(p, "--warmup", type=DURATION, metavar="S",
           help="--benchmark_min_warmup_time in seconds (default: none; goldens the file's "
           "own)")
    for old in ("repetitions", "min-time", "warmup"):
        renamed(parser, f"--golden-{old}", f"--{old}", "one setting for stages and goldens")


def register(subparsers) -> argparse.ArgumentParser:
    bench = subparsers.add_parser(
        "bench", help="throughput per layout (sweeps), stage latencies, tuning-spec A/B, "
        "benchmark goldens -> bench.json + bench.md",
        description="Without a subcommand: run the layout(s) and measure stage latencies. "
        "`runner bench goldens` checks IREE CI-style benchmark goldens.")
    add_run_inputs(bench, sweep=True, samples_note="; each layout makes them")
    r = bench.add_argument_group("where the layouts run, and which IREE builds")
    add_executor(r, "local", "; local and docker: one run after another on this host, "
                 "slurm: one Slurm job per combination, all at once")
    add_iree(r, many=True, kinds=IMAGE_KINDS,
             note="; each is built as a harness image and compiles and runs "
             "its own modules (default: this host's IREE)")
    add_image(r, "; one prebuilt image instead of --iree")
    add_slurm(bench, resumable=False)
    add_share_gpus(bench)
    add_out(bench, "directory for runs, inputs, bench.json and bench.md",
            Rerun(REFUSES, "finished layouts and stage latencies are not measured again; an "
                  "interrupted layout is measured again from its start, since a throughput is "
                  "one attempt's", ("bench.json",)), required=False,
            default="none: needed unless --dry-run")
    add_dry_run(bench, "every image build, compile, `runner run` and sbatch command it would "
                "start")
    add_results(bench)
    m = bench.add_argument_group("iree-benchmark-module (stage latencies)")
    _benchmark_flags(bench, m)
    m.add_argument("--benchmark-flag", action="append", metavar="FLAG",
                   help="extra iree-benchmark-module flag, e.g. --device_allocator=caching "
                   "(repeatable; default: none)")
    shared(m, "--stage", action="append", choices=["clip", "unet_step", "unet", "vae"],
           help="only this stage (repeatable; default: every stage the model has)")
    m.add_argument("--dispatches", nargs="?", type=integer(1, MAX_CALLS), const=DEFAULT_CALLS,
                   metavar="CALLS",
                   help="also time each stage's dispatches, two ways: IREE's HAL profiler "
                   f"(IREE >= 3.12; a second run of CALLS calls, default when given: "
                   f"{DEFAULT_CALLS}; a Perfetto trace) where the driver has it, and every "
                   "dispatch of one recorded call (a HAL replay) run alone by "
                   "iree-benchmark-executable, on any driver; top dispatches, time per kind, "
                   "dispatch vs unprofiled wall time (default: not timed)")
    bench.add_argument("--no-throughput", action="store_true", help="skip the layout runs")
    bench.add_argument("--no-stages", action="store_true", help="skip the stage latencies")
    t = bench.add_argument_group("tuning specs")
    t.add_argument("--ab-tuning-spec", metavar="SPEC.mlir",
                   help="compare stage latencies compiled without and with this spec (a path, or "
                   "a shipped suite's file: tiny-bench/tiny_bmm_spec_cpu.mlir; default: none)")
    t.add_argument("--dump-tuning-specs", action="store_true",
                   help="dump the final tuning specs into <out>/tuning-specs/")
    renamed(bench, "--goldens", "runner bench goldens FILES|DIR", "benchmark goldens are "
            "their own subcommand", nargs="*")
    bench.set_defaults(func=cmd_bench)
    document(bench, "runner bench --profile cpu --count 32 --batch-size 1,2 --cpd 1,2 "
             "--out runs/bench",
             "runner bench --profile tiny --ab-tuning-spec tiny-bench/tiny_bmm_spec_cpu.mlir "
             "--no-throughput --out runs/ab",
             "runner bench --profile tiny --no-throughput --dispatches --out runs/profile",
             "runner bench --profile mi325x --executor slurm --nodes 1 --slurm-partition mi325x "
             "--batch-size 1,2 --iree source:a1b2c3d,source:d4e5f6a --out /shared/runs/sweep",
             out="a directory: one run dir per layout, bench.json, bench.md",
             exits=Exits(verdict="a layout run, a stage benchmark or the A/B comparison failed",
                         incomplete=DISK_FULL))

    sub = bench.add_subparsers(dest="bench_command", metavar="{goldens}")
    p = sub.add_parser("goldens", help="check IREE CI-style benchmark goldens: time, "
                       "dispatch count, module size")
    benchmark_paths_arg(p)
    add_profile(p, default=None, none_means=f"{DEFAULT_PROFILE}, this host's CPU")
    golden_target_flags(p, sku_default="$SKU, else the profile's target.sku (a cpu target: "
                        "cpu); no golden for it: exit 2",
                        chip_default=f"$ROCM_CHIP, else a hip profile's target.chip, else "
                        f"{DEFAULT_CHIP}")
    selection_flags(p)
    _benchmark_flags(p, p)
    p.add_argument("--quality-dir", metavar="DIR",
                   help="where the matching quality tests are (default: the file's "
                   "quality_test field, or ../../quality_tests/<model>)")
    p.add_argument("--files-dir", metavar="DIR", help="IREE CI's test files: e2e MLIR, tuner "
                   "specs (default: beside the benchmark files)")
    add_dry_run(p, "the iree-compile and iree-benchmark-module commands")
    add_results(p)
    add_out(p, "write bench.json and bench.md here",
            Rerun(RESUMES, "nothing: the goldens are checked again, the reports written at "
                  "the end"), required=False)
    p.set_defaults(func=cmd_goldens)
    document(p, "runner bench goldens tiny-bench --sku cpu",
             "runner bench goldens --profile tiny --dry-run",
             "runner bench goldens tiny-torch --marker cpu -k clip",
             out="a directory for bench.json and bench.md",
             exits=Exits(verdict="a benchmark is over its golden",
                         incomplete=DISK_FULL))
    return bench
