"""IREE CI's benchmark goldens, both layouts, checked here.

An older benchmark file (`sharktank_models/benchmarks/<model>/*.json`) names no MLIR: IREE
CI benchmarks the module its quality test of the same name compiled
(`quality_tests/<model>/<name>.json`), with the file's `inputs` as shape-only
`--input=1x64xi64` (zero-filled) and its `benchmark_flags`. The verdicts follow IREE CI's
runner (model_benchmark_run.py): each golden is checked only when set and non-zero; the
`mean` aggregate's `real_time` (so more than one repetition) must be <= `golden_time_ms[sku]`
x `golden_time_tolerance_multiplier[sku]` (which must then exist: IREE's runner fails
without it), the compile's `stream-aggregate.execution.dispatch-count` <=
`golden_dispatch[sku]`, and the main module's size in bytes <= `golden_size[sku]`;
`specific_chip_to_ignore` skips the file. A count or size below its golden passes and is
reported, so a golden left behind by an improvement is visible.

IREE CI's torch_models layout (`type: benchmark`) carries its own `modules`, `weights`,
`inputs` (a `url` is fed, a bare shape is zeros), `outputs`, `expected_outputs`, `run_args`
and one `golden_time_ms` for the SKU its markers name. The command is the one its runner
builds (`_torch_command`), and it passes when the fastest repetition's `real_time` is <= the
golden x `tolerance_factor` (1.1 by default), as its runner judges it. Its modules compile
exactly as `goldens check` compiles them (statistics included), so the dispatch count and
size are reported for it too.

For the older layout the quality test is found, in order, in `--quality-dir`, at the file's
own `quality_test` field (a path relative to it; IREE CI ignores unknown fields), or where
IREE CI keeps it (`../../quality_tests/<model>/`). The e2e file (`modules` +
`mlir_file_name`) loads every listed submodel's module and weights, then its own compiled
pipeline.

For an older quality test, dispatch counts come from
`--iree-scheduling-dump-statistics-format=json` and
`--iree-scheduling-dump-statistics-file=<path>`, written by a pass in the stream phase. So
the benchmarked vmfb is compiled with exactly the quality test's flags (the same cache entry
`goldens check` uses), and the statistics by a second compile that stops after the stream
phase (`--compile-to=stream`: the same count, checked on the tiny unet, in a fifth of the
time: no code generation). Its file is keyed by the MLIR, flags and compiler, so it belongs to
exactly the module it describes, and is reused while that key holds.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.conditions import Conditions, Watch
from runner.base.errors import BadInput, RunnerError, ToolFailed
from runner.base.fileio import sha256_file
from runner.base.iree_flags import rocm_chip_flag
from runner.base.iree_tools import CompilerInfo, compiler_info
from runner.base.paths import GOLDENS_DIR, cache_dir
from runner.bench import benchmark_module as bm
from runner.goldens.plan import (
    STATS_FILE_FLAG,
    STATS_FORMAT_FLAG,
    CheckOptions,
    TestPlan,
    common_run_args,
    compile_module,
    dispatch_count,
    placeholder,
    plan,
    splat_weights,
)
from runner.goldens.select import Selection, marked_skus, select
from runner.goldens.testfile import (
    ANY_SKU,
    BenchmarkTest,
    GoldenTest,
    file_kind,
    find_test_files,
    golden_for,
    load_benchmark_file,
    load_test_file,
)
from runner.inputs.paths import suite_ref
from runner.model.compile import compile_key, compile_mlir

DEFAULT_BENCH_SUITE = GOLDENS_DIR / "tiny-bench"
BENCH_STATUSES = ("passed", "failed", "error", "skipped", "unchecked", "planned")


@dataclass(frozen=True)
class GoldenOptions:
    sku: str = "cpu"
    rocm_chip: str = "gfx942"
    quality_dir: Path | None = None
    files_dir: Path | None = None  # e2e `mlir_file_name`, tuner files (IREE CI's test files)
    device: str | None = None
    dry_run: bool = False
    offline: bool | None = None
    repetitions: int | None = None  # None: the file's own benchmark_flags
    min_time: str | None = None
    warmup: float | None = None
    timeout: float | None = 900.0
    out: Path | None = None  # keeps each file's raw benchmark JSON (<out>/<model>/<name>.json)
    strict: bool = False  # a field IREE CI's runner does not read fails the file


@dataclass
class CheckLine:
    """One golden comparison: time, dispatches or size."""

    name: str
    measured: float | None
    golden: float
    limit: float
    ok: bool | None  # None: not measured (dry run, error)
    note: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class GoldenResult:
    name: str
    file: str
    sku: str
    function: str
    status: str = "planned"
    message: str = ""
    latency: bm.Latency | None = None
    dispatch_count: int | None = None
    size_bytes: int | None = None
    vmfb_sha256: str | None = None  # the main module timed: the history names its change
    checks: list[CheckLine] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conditions: Conditions | None = None  # what else the machine did while it was timed

    @property
    def ok(self) -> bool:
        return self.status not in ("failed", "error")

    def check(self, name: str) -> CheckLine | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict:
        return {"name": self.name, "file": self.file, "sku": self.sku,
                "function": self.function, "status": self.status, "message": self.message,
                "latency_ms": self.latency.to_dict() if self.latency else None,
                "dispatch_count": self.dispatch_count, "size_bytes": self.size_bytes,
                "vmfb_sha256": self.vmfb_sha256,
                "checks": [c.to_dict() for c in self.checks], "commands": self.commands,
                "notes": self.notes, "warnings": self.warnings,
                "conditions": self.conditions.to_dict() if self.conditions else None}


@dataclass(frozen=True)
class _Compiled:
    vmfbs: tuple[Path, ...]  # main module, then the pipeline module if any
    weights: Path | None
    stats: Path | None
    commands: tuple[str, ...]
    plan: TestPlan


def load_benchmarks(paths: list[Path], selection: Selection | None = None,
                    module_dirs: tuple[Path, ...] = ()) -> list[BenchmarkTest]:
    """Benchmark files of either layout; a directory's other files (quality and compstat
    tests, module definitions) are left out."""
    paths = paths or [DEFAULT_BENCH_SUITE]
    found = [load_benchmark_file(p, module_dirs) for p in find_test_files(paths)
             if p in paths or file_kind(p) == "benchmark"]
    return select(((b, b.submodel) for b in found), selection or Selection(), paths)


def quality_candidates(bench: BenchmarkTest, quality_dir: Path | None = None,
                       stem: str | None = None) -> list[Path]:
    """Where the quality test a benchmark file takes its module from may be, in the order
    they are tried: `goldens propose` writes its files so that the same places hold it."""
    stem = stem or bench.path.stem
    candidates = []
    if quality_dir is not None:
        candidates.append(quality_dir / f"{stem}.json")
    own = bench.extra.get("quality_test")
    if isinstance(own, str) and stem == bench.path.stem:
        # Our own field: a quality test in this suite or a sibling suite (tiny-bench names
        # ../tiny/), never further out.
        suite_ref(str(Path(bench.path.parent.name) / own), bench.path.parent.parent,
                  f"{bench.path}: quality_test")
        candidates.append(bench.path.parent / own)
    candidates.append(bench.path.resolve().parent.parent.parent / "quality_tests" / bench.model
                      / f"{stem}.json")
    return candidates


def quality_test_for(bench: BenchmarkTest, opts: GoldenOptions, stem: str | None = None
                     ) -> GoldenTest:
    candidates = quality_candidates(bench, opts.quality_dir, stem)
    for path in candidates:
        if path.is_file():
            tests = [t for t in load_test_file(path) if t.backend == bench.backend]
            if tests:
                return tests[0]
    raise BadInput(f"no quality test {stem or bench.path.stem}.json to take the module from "
                   f"(looked at {', '.join(map(str, candidates))})", where=str(bench.path),
                   fix="pass --quality-dir DIR (IREE CI's quality_tests/<model>/) or set "
                   '"quality_test": "<path>" in the benchmark file')


STATS_PHASE = "stream"


def stats_command(mlir: Path, flags: tuple[str, ...], compiler: CompilerInfo
                  ) -> tuple[list[str], Path]:
    """The compile that writes the dispatch statistics for (mlir, flags), and its file."""
    base = tuple(f for f in flags if not f.startswith((STATS_FORMAT_FLAG, STATS_FILE_FLAG)))
    key = compile_key(mlir, base, compiler)[:32] if mlir.is_file() else "<key>"
    path = cache_dir() / "compile-stats" / "bench" / key / "compilation_info.json"
    return [compiler.path, str(mlir), *base, f"{STATS_FORMAT_FLAG}=json",
            f"{STATS_FILE_FLAG}={path}", f"--compile-to={STATS_PHASE}", "-o", "/dev/null"], path


def write_stats(command: list[str], path: Path) -> None:
    """Runs the statistics compile into a scratch file, then renames it into place."""
    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(f".{time.monotonic_ns()}.tmp")
    argv = [f"{STATS_FILE_FLAG}={scratch}" if a.startswith(STATS_FILE_FLAG) else a
            for a in command]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not scratch.is_file():
        scratch.unlink(missing_ok=True)
        raise ToolFailed(f"the statistics compile failed: {proc.stderr.strip()[-1500:]}",
                         fix=f"reproduce with: {shlex.join(command)}")
    scratch.replace(path)


def compile_quality(test: GoldenTest, opts: GoldenOptions, compiler: CompilerInfo,
                    with_stats: bool = True) -> _Compiled:
    """The test's modules and weights, compiled as IREE CI does, plus statistics: a
    torch-layout module's own compile writes them; an older quality test's module gets
    the separate stream-phase compile."""
    runnable = dataclasses.replace(test, inputs=(), outputs=(), compile_only=False,
                                   kind="benchmark")
    check_opts = CheckOptions(sku=opts.sku, rocm_chip=opts.rocm_chip, tuner_dir=opts.files_dir,
                              dry_run=opts.dry_run, offline=opts.offline)
    p = plan(runnable, check_opts, compiler)
    results = [compile_module(m, compiler, opts.dry_run) for m in p.modules]
    commands = [shlex.join(r.command) for r in results]
    stats = p.modules[0].stats
    if with_stats and stats is None:
        stats_cmd, stats = stats_command(p.modules[0].mlir, p.modules[0].flags, compiler)
        commands.append(shlex.join(stats_cmd))
        if not opts.dry_run:
            write_stats(stats_cmd, stats)
    if p.weights_kind == "splat":
        _, splat_cmd = splat_weights(p.modules[0].mlir, compiler, dry_run=opts.dry_run)
        commands.append(shlex.join(splat_cmd))
    return _Compiled(tuple(Path(r.vmfb) for r in results), p.weights, stats, tuple(commands),
                     p)


def _e2e(bench: BenchmarkTest, opts: GoldenOptions, compiler: CompilerInfo
         ) -> tuple[list[Path], list[Path], list[str]]:
    """IREE CI's e2e file: every listed submodel's main module and weights, then the
    pipeline compiled from `mlir_file_name` with the file's `compile_flags`."""
    modules: list[Path] = []
    weights: list[Path] = []
    commands: list[str] = []
    for name in bench.extra["modules"]:
        stem = f"{str(name).removeprefix(bench.model + '_')}_{bench.backend}"
        built = compile_quality(quality_test_for(bench, opts, stem), opts, compiler,
                                with_stats=False)
        modules.append(built.vmfbs[0])
        if built.weights is not None:
            weights.append(built.weights)
        commands.extend(built.commands)
    mlir_name = bench.extra.get("mlir_file_name")
    if not isinstance(mlir_name, str) or not mlir_name:
        raise BadInput("an e2e benchmark with `modules` needs `mlir_file_name`",
                       where=f"{bench.path}: mlir_file_name",
                       fix="add mlir_file_name: the e2e MLIR the modules feed")
    dirs = [d for d in (opts.files_dir, bench.path.parent) if d is not None]
    mlir = next((d / mlir_name for d in dirs if (d / mlir_name).is_file()), dirs[0] / mlir_name)
    flags = [str(f) for f in bench.extra.get("compile_flags", [])]
    if bench.backend == "rocm":
        flags.append(rocm_chip_flag(opts.rocm_chip, compiler))
    if not mlir.is_file() and not opts.dry_run:
        raise BadInput(f"{mlir_name} not found in {', '.join(map(str, dirs))}",
                       where=f"{bench.path}: mlir_file_name",
                       fix="pass --files-dir DIR (where IREE CI keeps its test files)")
    pipeline = placeholder(compile_mlir(mlir, tuple(flags), dry_run=opts.dry_run,
                                         compiler=compiler))
    commands.append(shlex.join(pipeline.command))
    return [*modules, Path(pipeline.vmfb)], weights, commands


def _verdicts(bench: BenchmarkTest, result: GoldenResult) -> None:
    """IREE CI's rules. Older layout (model_benchmark_run.py): each golden is checked only
    when set and non-zero; the mean must be <= golden_time_ms[sku] x
    golden_time_tolerance_multiplier[sku], which must then exist. torch_models
    (benchmark_test.py): the fastest repetition <= golden_time_ms x tolerance_factor (1.1)."""
    sku = result.sku
    torch = bench.time_statistic == "min"
    golden_time = golden_for(bench.golden_time_ms, sku)
    if golden_time is not None and (torch or golden_time):
        golden = float(golden_time)
        tol = golden_for(bench.golden_time_tolerance_multiplier, sku)
        if tol is None:
            raise BadInput(f"golden_time_ms has {sku} but golden_time_tolerance_multiplier "
                           "does not: IREE CI's runner fails on golden x None",
                           where=f"{bench.path}: golden_time_tolerance_multiplier",
                           fix=f'add "{sku}": 1.1 to golden_time_tolerance_multiplier')
        latency = result.latency
        measured = None if latency is None else (latency.min_ms if torch else latency.mean_ms)
        note = (f"fastest repetition, tolerance x{tol:g} (IREE CI's torch_models rule)"
                if torch else f"mean, tolerance x{tol:g}")
        result.checks.append(CheckLine(
            "time_ms", measured, golden, golden * tol,
            None if measured is None else measured <= golden * tol, note))
    golden_count = golden_for(bench.golden_dispatch, sku)
    if golden_count:
        count = result.dispatch_count
        note = ""
        if count is not None and count < golden_count:
            note = f"{golden_count - count} fewer dispatches than the golden: consider lowering it"
        result.checks.append(CheckLine("dispatch_count", count, golden_count, golden_count,
                                       None if count is None else count <= golden_count, note))
    golden_size = golden_for(bench.golden_size, sku)
    if golden_size:
        size = result.size_bytes
        result.checks.append(CheckLine("size_bytes", size, golden_size, golden_size,
                                       None if size is None else size <= golden_size))


def _torch_command(built: _Compiled, opts: GoldenOptions) -> bm.BenchCommand:
    """iree-benchmark-module as IREE CI's torch_models runner builds it: `--benchmark_format=
    json`, every module, then the test's weights, inputs (files fed, shapes alone as zeros),
    outputs and expected outputs (which the tool accepts and ignores) and run_args; the
    repetition/time overrides and --device replace theirs."""
    scratch = opts.out / built.plan.test.model if opts.out else Path(tempfile.gettempdir())
    args = bm.with_overrides(common_run_args(built.plan, scratch), opts.repetitions,
                             opts.min_time, opts.warmup)
    if opts.device:
        args = [a for a in args if not a.startswith("--device=")] + [f"--device={opts.device}"]
    loaded = [v for v, m in zip(built.vmfbs, built.plan.modules, strict=True) if m.module.load]
    return bm.BenchCommand((bm.TOOL, "--benchmark_format=json",
                            *[f"--module={v}" for v in loaded], *args))


def file_sku(bench: BenchmarkTest, sku: str) -> str:
    """The SKU a file is judged for: a torch-layout golden is for the SKU its markers
    name, whatever --sku says; any other file's is `sku`."""
    return next(iter(marked_skus(bench.markers)), sku) \
        if ANY_SKU in bench.golden_time_ms else sku


def _goldens(bench: BenchmarkTest) -> tuple[dict, dict, dict]:
    return bench.golden_time_ms, bench.golden_dispatch, bench.golden_size


def has_goldens(bench: BenchmarkTest, sku: str) -> bool:
    """Whether any golden of the file applies to `sku` (set and non-zero, as IREE CI reads
    them): a file without one is measured but judges nothing."""
    sku = file_sku(bench, sku)
    time = golden_for(bench.golden_time_ms, sku)
    return (time is not None and (bench.time_statistic == "min" or bool(time))) \
        or bool(golden_for(bench.golden_dispatch, sku)) or bool(golden_for(bench.golden_size, sku))


def require_goldens(benches: list[BenchmarkTest], sku: str, chosen_by: str) -> None:
    """Refuses, before anything compiles, a check where no file has a golden for `sku`:
    every test would end UNCHECKED, which says nothing about the build."""
    if not benches or any(has_goldens(b, sku) for b in benches):
        return
    have = sorted({k for b in benches for g in _goldens(b) for k, v in g.items()
                   if v and k != ANY_SKU})
    raise BadInput(
        f"none of the {len(benches)} benchmark file(s) has goldens for sku {sku} "
        f"({chosen_by}), so nothing would be judged; they have goldens for "
        f"{', '.join(have) or 'no SKU'}", where="--sku",
        fix=(f"on a machine of one of those SKUs pass --sku {have[0]} (or its profile: "
             "--profile NAME), or check goldens written for this machine's SKU")
        if have else "check goldens that set golden_time_ms, golden_dispatch or golden_size")


def check_benchmark(bench: BenchmarkTest, opts: GoldenOptions,
                    compiler: CompilerInfo | None = None) -> GoldenResult:
    """Compiles (through the cache), benchmarks and judges one file; never raises for the
    file's own failure."""
    compiler = compiler or compiler_info()
    result = GoldenResult(bench.name, str(bench.path), file_sku(bench, opts.sku),
                          bench.function)
    result.warnings.extend(bench.unknown)
    _run_benchmark(bench, opts, compiler, result)
    if opts.strict and bench.unknown and result.ok and result.status != "planned":
        result.status = "failed"
        result.message = (f"{len(bench.unknown)} field(s) IREE CI's runner does not read "
                          "(--strict): " + "; ".join(bench.unknown))
    return result


def _compiled_benchmark(bench: BenchmarkTest, opts: GoldenOptions, compiler: CompilerInfo
                        ) -> tuple[bm.BenchCommand, list[str], Path | None, Path | None]:
    """The benchmark's modules compiled and its iree-benchmark-module command: an
    end-to-end file names its modules, a torch-layout one is its module test's, any other
    is compiled as the quality test of the same submodel. Also the compile commands, the
    compile statistics and the main vmfb (None where there are none to read)."""
    main_vmfb: Path | None = None
    if "modules" in bench.extra:
        modules, weights, commands = _e2e(bench, opts, compiler)
        stats = None
    elif bench.module_test is not None:
        built = compile_quality(bench.module_test, opts, compiler)
        main_vmfb, stats, commands = built.vmfbs[0], built.stats, list(built.commands)
        return _torch_command(built, opts), commands, stats, main_vmfb
    else:
        test = quality_test_for(bench, opts)
        built = compile_quality(test, opts, compiler)
        main_vmfb, stats, commands = built.vmfbs[0], built.stats, list(built.commands)
        weights = [built.weights] if built.weights else []
        # The function may live in the pipeline module (produce_image_latents); a dry
        # run cannot look, so it assumes the quality test's own function does.
        loaded = [v for v, m in zip(built.vmfbs, test.modules, strict=True) if m.load]
        in_pipeline = len(loaded) > 1 and bench.function == test.run_function
        modules = list(bm.modules_for(loaded, bench.function,
                                      f"{bench.path}: function_run",
                                      fallback=len(loaded) if in_pipeline else 1))
    cmd = bm.command(device=opts.device or bench.device, modules=modules,
                     function=bench.function, inputs=[str(s) for s in bench.inputs],
                     parameters=weights,
                     flags=bm.with_overrides(bench.benchmark_flags, opts.repetitions,
                                             opts.min_time, opts.warmup))
    return cmd, commands, stats, main_vmfb


def _timed(cmd: bm.BenchCommand, raw: Path | None, opts: GoldenOptions,
           result: GoldenResult) -> bm.Latency:
    """The benchmark run, and what else the machine did meanwhile (a note where others
    took a share of it: the time then says as much about them as about the build)."""
    watch = Watch().start()
    result.latency = bm.run_benchmark(cmd, raw, timeout=opts.timeout)
    result.conditions = watch.stop()
    if result.conditions.beside_foreign_load:
        result.notes.append(f"timed beside foreign load: {result.conditions.line()}")
    return result.latency


def _run_benchmark(bench: BenchmarkTest, opts: GoldenOptions, compiler: CompilerInfo,
                   result: GoldenResult) -> None:
    ignore = bench.extra.get("specific_chip_to_ignore") or []
    if opts.rocm_chip in ignore:  # IREE CI skips it whatever the backend
        result.status = "skipped"
        result.message = f"the file ignores chip {opts.rocm_chip} (specific_chip_to_ignore)"
        return
    if not has_goldens(bench, opts.sku):
        result.notes.append(f"no goldens for sku {opts.sku} (the file has "
                            f"{sorted(bench.golden_time_ms)}): measured only")
    try:
        if bench.unset and not opts.dry_run:
            raise BadInput(f"{' and '.join(f'`{k}`' for k in bench.unset)} not set: IREE "
                           "CI's runner passes the string None (--device=None, "
                           "--function=None) and iree-benchmark-module fails",
                           where=str(bench.path), fix="set both fields in the file")
        cmd, commands, stats, main_vmfb = _compiled_benchmark(bench, opts, compiler)
        result.commands.extend(commands)
        result.commands.append(cmd.text())
        if opts.dry_run:
            _verdicts(bench, result)
            return
        if stats is not None:
            result.dispatch_count = dispatch_count(stats)
        if main_vmfb is not None:
            result.size_bytes = main_vmfb.stat().st_size
            result.vmfb_sha256 = sha256_file(main_vmfb)
        print(f"bench goldens: {result.name} ({bench.function}) ...", file=sys.stderr,
              flush=True)
        raw = opts.out / bench.model / f"{bench.path.stem}.json" if opts.out else None
        latency = _timed(cmd, raw, opts, result)
        if bench.time_statistic == "mean" and not latency.mean_is_aggregate:
            raise ToolFailed("the output has no `mean` row (one repetition): IREE CI's "
                             "runner fails (\"Benchmark results was not found\")",
                             where=str(bench.path),
                             fix="keep --benchmark_repetitions above 1")
        _verdicts(bench, result)
    except RunnerError as e:
        result.status, result.message = "error", str(e)
        return
    failed = [c for c in result.checks if c.ok is False]
    if failed:
        result.status = "failed"
        result.message = "; ".join(
            f"{c.name} {c.measured:g} > {c.limit:g} (golden {c.golden:g}, {c.note})"
            if c.name == "time_ms" else f"{c.name} {c.measured:g} > golden {c.golden:g}"
            for c in failed)
    else:
        result.status = "passed" if result.checks else "unchecked"


def check_benchmarks(benches: list[BenchmarkTest], opts: GoldenOptions) -> list[GoldenResult]:
    compiler = compiler_info()
    results = []
    for bench in benches:
        result = check_benchmark(bench, opts, compiler)
        results.append(result)
        print(console_lines(result, opts.dry_run), flush=True)
    return results


def console_lines(r: GoldenResult, dry_run: bool = False) -> str:
    lines = [f"{r.status.upper():9} {r.name} [{r.sku}] {r.function}"]
    for c in r.checks:
        if c.measured is not None:
            verdict = "ok" if c.ok else "OVER"
            lines.append(f"          {c.name}: {c.measured:g} (limit {c.limit:g}, golden "
                         f"{c.golden:g}) {verdict}" + (f"; {c.note}" if c.note else ""))
    if r.message and r.status != "passed":
        lines.extend("          " + m for m in r.message.splitlines())
    lines.extend(f"          warning: {w}" for w in r.warnings)
    lines.extend(f"          note: {n}" for n in r.notes)
    if dry_run:
        lines.extend(r.commands)
    return "\n".join(lines)
