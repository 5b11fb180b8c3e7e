"""`runner bench ...`: throughput sweeps, stage latencies, tuning-spec A/B, benchmark goldens.

`register(subparsers)` adds the `bench` command to the main `runner` parser.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from runner.base.errors import RunnerError
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.base.outdir import REFUSES, RESUMES, Rerun
from runner.batch.cluster import add_slurm_arguments
from runner.clihelp import add_out, add_profile, document, profile_overrides, renamed
from runner.goldens.cli import selection_flags
from runner.goldens.plan import DEFAULT_SKU
from runner.inputs.cliargs import COUNT, DURATION, MAX_COUNT, count_list

STAGE_REPETITIONS = 5


def _ints(text: str | None, flag: str) -> tuple[int | None, ...]:
    """`1,2` -> (1, 2); absent -> (None,): the profile's own value."""
    if text is None:
        return (None,)
    try:
        return tuple(count_list(text))
    except argparse.ArgumentTypeError:
        raise RunnerError(f"`{flag} {text}` is not a comma list of whole numbers from 1 to "
                          f"{MAX_COUNT}", where=flag, fix=f"e.g. {flag} 1,2") from None


def _profile(args: argparse.Namespace):
    from runner.config.profile import load_profile

    return load_profile(args.profile, profile_overrides(args.set))


def _run_argv(args: argparse.Namespace) -> tuple[str, ...]:
    """The `runner run` prefix each layout's reproduce.sh re-runs (layout flags follow)."""
    out = ["run", "--profile", args.profile]
    for item in args.set or []:
        out += ["--set", item]
    return tuple(out)


def _golden_options(args: argparse.Namespace):
    from runner.bench.goldens import GoldenOptions

    return GoldenOptions(
        sku=args.sku or os.environ.get("SKU", "").strip() or DEFAULT_SKU,
        rocm_chip=args.rocm_chip,
        quality_dir=Path(args.quality_dir) if getattr(args, "quality_dir", None) else None,
        files_dir=Path(args.files_dir) if getattr(args, "files_dir", None) else None,
        device=getattr(args, "golden_device", None), dry_run=args.dry_run,
        offline=getattr(args, "offline", None), repetitions=args.repetitions,
        min_time=args.min_time, warmup=args.warmup, strict=getattr(args, "strict", False),
        out=Path(args.out) / "goldens" if args.out and not args.dry_run else None)


def _slurm(args: argparse.Namespace):
    """Slurm options with --executor slurm; Slurm flags without it are a mistake."""
    from runner.batch.cluster import FLAGS, given_slurm_options, slurm_options

    if args.executor == "slurm":
        return slurm_options(args)
    given = [FLAGS[f] for f in given_slurm_options(args) if f != "image"]  # --image: docker too
    if given:
        raise RunnerError(f"{given[0]} is a Slurm option", where=given[0],
                          fix="add --executor slurm")
    return None


def cmd_bench(args: argparse.Namespace) -> int:
    from runner.bench.bench import run_bench
    from runner.bench.report import markdown
    from runner.bench.result import BenchOptions
    from runner.bench.stages import BenchSettings

    profile = _profile(args)
    spec = Path(args.ab_tuning_spec) if args.ab_tuning_spec else None
    goldens = tuple(Path(p) for p in args.goldens) if args.goldens is not None else ()
    if args.goldens == []:
        from runner.bench.goldens import DEFAULT_BENCH_SUITE

        goldens = (DEFAULT_BENCH_SUITE,)
    opts = BenchOptions(
        count=args.count, devices=tuple(args.devices) if args.devices else (None,),
        cpds=_ints(args.cpd, "--cpd"), batch_sizes=_ints(args.batch_size, "--batch-size"),
        throughput=not args.no_throughput, stages=not args.no_stages,
        stage_filter=tuple(args.stage or ()),
        settings=BenchSettings(repetitions=args.repetitions or STAGE_REPETITIONS,
                               min_time=args.min_time,
                               warmup=args.warmup, extra_flags=tuple(args.benchmark_flag or ())),
        ab_tuning_spec=spec, dump_tuning_specs=args.dump_tuning_specs, goldens=goldens,
        golden_options=_golden_options(args), dry_run=args.dry_run,
        run_argv=_run_argv(args), argv=tuple(args.argv), executor=args.executor,
        iree=tuple(v for spec in args.iree or () for v in spec.split(",") if v.strip()),
        image=args.image, slurm=_slurm(args))
    report = run_bench(profile, Path(args.out) if args.out else None, opts,
                       attempt=args.attempt)
    if not args.dry_run:
        print(markdown(report))
    return report.exit_code


def cmd_goldens(args: argparse.Namespace) -> int:
    from runner.bench.bench import BENCH_JSON, BENCH_MD, versions
    from runner.bench.goldens import check_benchmarks, load_benchmarks
    from runner.bench.report import goldens_markdown
    from runner.goldens.cli import module_dirs, selection

    benches = load_benchmarks([Path(p) for p in args.paths], selection(args), module_dirs(args))
    results = check_benchmarks(benches, _golden_options(args))
    code = 0 if all(r.ok for r in results) else 1
    if args.out and not args.dry_run:
        out = Path(args.out)
        atomic_write_json(out / BENCH_JSON, {"kind": "bench-goldens", "versions": versions(),
                                             "argv": list(args.argv), "exit_code": code,
                                             "goldens": [r.to_dict() for r in results]})
        atomic_write_text(out / BENCH_MD, "\n".join(goldens_markdown(results)) + "\n")
        print(f"reports: {out / BENCH_JSON}, {out / BENCH_MD}", file=sys.stderr)
    counts = {s: sum(r.status == s for r in results) for s in {r.status for r in results}}
    print(f"{len(results)} benchmark goldens: {json.dumps(counts, sort_keys=True)}",
          file=sys.stderr)
    return code


def _golden_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sku", help=f"which golden_* entry applies (default: $SKU, else "
                   f"{DEFAULT_SKU}, as `runner goldens check`)")
    p.add_argument("--rocm-chip", default="gfx942",
                   help="ROCm chip to compile for (default: gfx942)")


def _benchmark_flags(p: argparse.ArgumentParser) -> None:
    """One spelling for iree-benchmark-module's settings, stage latencies and goldens alike."""
    p.add_argument("--repetitions", type=COUNT, metavar="N",
                   help="--benchmark_repetitions (default: stage latencies "
                   f"{STAGE_REPETITIONS}, goldens the file's own)")
    p.add_argument("--min-time", help="--benchmark_min_time per repetition, e.g. 0.2s or 20x")
    p.add_argument("--warmup", type=DURATION,
                   help="--benchmark_min_warmup_time in seconds (goldens: replaces the file's)")
    for old in ("repetitions", "min-time", "warmup"):
        renamed(p, f"--golden-{old}", f"--{old}", "one setting for stages and goldens")


def register(subparsers) -> argparse.ArgumentParser:
    bench = subparsers.add_parser(
        "bench", help="throughput per layout (sweeps), stage latencies, tuning-spec A/B, "
        "benchmark goldens -> bench.json + bench.md",
        description="Without a subcommand: run the layout(s) and measure stage latencies. "
        "`runner bench goldens` checks IREE CI-style benchmark goldens.")
    add_profile(bench)
    g = bench.add_argument_group("layouts (comma lists sweep every combination)")
    g.add_argument("--devices", action="append", metavar="IDS",
                   help="device IDs as in `runner run` (0-1, 0,2); repeat the flag for "
                   "variants: --devices 0 --devices 0-1")
    g.add_argument("--cpd", help="pipeline processes per device ID, e.g. 1,2")
    g.add_argument("--batch-size", help="batch sizes, e.g. 1,2")
    r = bench.add_argument_group("where the layouts run, and which IREE builds")
    r.add_argument("--executor", choices=["local", "docker", "slurm"], default="local",
                   help="local (default): one run after another here; docker: the same in "
                   "harness containers; slurm: one Slurm job per combination, all at once")
    r.add_argument("--iree", action="append", metavar="SPECS",
                   help="IREE builds to compare, comma list: wheels:<version>, "
                   "source:<sha> (a bare SHA means source:), build-dir:<path>; each is "
                   "built as a harness image and compiles and runs its own modules")
    r.add_argument("--image", help="one prebuilt harness image instead of --iree")
    add_slurm_arguments(bench, resumable=False)
    bench.add_argument("--count", type=COUNT, default=32,
                       help="samples 0..N-1 per layout (default: 32)")
    add_out(bench, "directory for runs, inputs, bench.json and bench.md",
            Rerun(REFUSES, "finished layouts and stage latencies are not measured again; an "
                  "interrupted layout is measured again from its start, since a throughput is "
                  "one attempt's", ("bench.json",)), required=False)
    bench.add_argument("--dry-run", action="store_true",
                       help="print every command and run it would start; run nothing")
    m = bench.add_argument_group("iree-benchmark-module (stage latencies and goldens)")
    _benchmark_flags(m)
    m.add_argument("--benchmark-flag", action="append", metavar="FLAG",
                   help="extra iree-benchmark-module flag, e.g. --device_allocator=caching")
    m.add_argument("--stage", action="append", choices=["clip", "unet_step", "unet", "vae"],
                   help="only this stage (repeatable; default: every stage the model has)")
    bench.add_argument("--no-throughput", action="store_true", help="skip the layout runs")
    bench.add_argument("--no-stages", action="store_true", help="skip the stage latencies")
    t = bench.add_argument_group("tuning specs")
    t.add_argument("--ab-tuning-spec", metavar="SPEC.mlir",
                   help="compare stage latencies compiled without and with this spec")
    t.add_argument("--dump-tuning-specs", action="store_true",
                   help="dump the final tuning specs into <out>/tuning-specs/")
    gg = bench.add_argument_group("benchmark goldens")
    gg.add_argument("--goldens", nargs="*", metavar="FILES|DIR",
                    help="also check these benchmark goldens (no value: goldens/tiny-bench)")
    _golden_flags(gg)
    bench.set_defaults(func=cmd_bench)
    document(bench, "runner bench --profile cpu --count 32 --batch-size 1,2 --cpd 1,2 "
             "--out runs/bench",
             "runner bench --profile tiny --ab-tuning-spec goldens/tiny-bench/"
             "tiny_bmm_spec_cpu.mlir --no-throughput",
             "runner bench --profile mi325x --executor slurm --nodes 1 --slurm-partition mi325x "
             "--batch-size 1,2 --iree a1b2c3d,d4e5f6a --out /shared/runs/sweep",
             out="a directory: one run dir per layout, bench.json, bench.md")

    sub = bench.add_subparsers(dest="bench_command", metavar="{goldens}")
    p = sub.add_parser("goldens", help="check IREE CI-style benchmark goldens: time, "
                       "dispatch count, module size")
    p.add_argument("paths", nargs="*", metavar="FILES|DIR",
                   help="benchmark JSONs or directories (default: goldens/tiny-bench)")
    _golden_flags(p)
    selection_flags(p)
    _benchmark_flags(p)
    p.add_argument("--quality-dir", help="where the matching quality tests are "
                   "(default: the file's quality_test field, or ../../quality_tests/<model>)")
    p.add_argument("--files-dir", help="IREE CI's test files: e2e MLIR, tuner specs")
    p.add_argument("--device", dest="golden_device",
                   help="runtime device instead of the file's (e.g. local-sync)")
    p.add_argument("--offline", action="store_true", default=None,
                   help="use only cached downloads")
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    add_out(p, "write bench.json and bench.md here",
            Rerun(RESUMES, "nothing: the goldens are checked again, the reports written at "
                  "the end"), required=False)
    p.add_argument("--strict", action="store_true",
                   help="a field IREE CI's runner does not read fails the file (default: a "
                   "warning)")
    p.set_defaults(func=cmd_goldens)
    document(p, "runner bench goldens goldens/tiny-bench --sku cpu",
             "runner bench goldens --sku mi300 --rocm-chip gfx942 --dry-run",
             "runner bench goldens goldens/tiny-torch --marker cpu -k clip",
             out="a directory for bench.json and bench.md")
    return bench
