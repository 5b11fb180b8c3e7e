"""What a golden test compiles and runs, and the compiles themselves (through the cache).

`plan` resolves a test's artifacts (URLs through the download cache; a dry run only names
where they would be) and completes each module's flags the way IREE CI's runners do: the ROCm
chip flag in the compiler's spelling when the module names no chip itself, the SKU's tuner
file as `--iree-codegen-transform-dialect-library` on the main module, and, for modules of
the torch layout, the scheduling statistics dump that IREE CI's torch_models runner adds to
every compile (so a module's quality, compstat and benchmark tests share one vmfb).
`compile_modules` turns a plan into vmfbs; `goldens check` and `bench goldens` both use it.

Without weights, IREE CI's older files are compile-only; when such a module still reads
parameters, it runs here on splat weights (`iree-compile --iree-parameter-splat`), which
checks that it runs, not what it computes.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from runner.base.errors import BadInput, RunnerError, ToolFailed
from runner.base.fileio import sha256_file
from runner.base.iree_flags import rocm_chip_flag
from runner.base.iree_tools import CompilerInfo, found_path
from runner.base.paths import cache_dir, caches_writable
from runner.config.sources import is_url, resolve_source
from runner.goldens.random_weights import random_weights
from runner.goldens.testfile import GoldenTest, ModuleDef, TensorRef
from runner.goldens.thresholds import Thresholds
from runner.inputs.paths import is_inside, suite_ref
from runner.model.compile import CompileResult, compile_key, compile_mlir

TUNER_FLAG = "--iree-codegen-transform-dialect-library"  # IREE CI's per-SKU spec flag
TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path"  # the user-facing spelling
STATS_FORMAT_FLAG = "--iree-scheduling-dump-statistics-format"
STATS_FILE_FLAG = "--iree-scheduling-dump-statistics-file"
STATS_FILE = "compilation_info.json"


DEFAULT_SKU, DEFAULT_CHIP = "mi300", "gfx942"  # IREE CI's defaults for SKU and ROCM_CHIP


@dataclass(frozen=True)
class CheckOptions:
    sku: str = DEFAULT_SKU
    rocm_chip: str = DEFAULT_CHIP
    tuning_spec: Path | None = None
    tuner_dir: Path | None = None
    out: Path | None = None
    dry_run: bool = False
    offline: bool | None = None
    compile_only: bool = False
    device: str | None = None  # overrides the file's `device` (e.g. local-sync)
    require_goldens: bool = True  # generate runs without the old outputs when it must
    strict: bool = False  # a test that compares nothing fails instead of warning
    timeout: float | None = None  # seconds per test; its processes are killed past it


@dataclass(frozen=True)
class PlannedModule:
    module: ModuleDef
    mlir: Path
    flags: tuple[str, ...]
    stats: Path | None  # where its compile writes the scheduling statistics


@dataclass(frozen=True)
class TestPlan:
    test: GoldenTest
    modules: tuple[PlannedModule, ...]
    weights: Path | None  # the one scope-`model` archive the in-process run loads
    weights_kind: str | None  # "real", "random", "splat" or None
    inputs: tuple[Path, ...]
    outputs: tuple[Path | None, ...]  # None: golden unavailable (generate only)
    thresholds: Thresholds
    device: str
    expect_compile_failure: bool
    notes: tuple[str, ...] = ()
    parameters: tuple[tuple[str, Path], ...] = ()  # every (scope, archive), in order
    spec_paths: dict[str, Path] = field(default_factory=dict)  # argspec `where` -> its file

    @property
    def run_mlir(self) -> Path:
        """The module the run's function is looked up in: the last one loaded."""
        return [m for m in self.modules if m.module.load][-1].mlir


def where(test: GoldenTest, field_name: str) -> str:
    return f"{test.path}: {field_name}"


def _ref(ref: str, base_dir: Path, at: str, opts: CheckOptions) -> Path:
    """Fetches through the cache, or (dry run) names the path it would be read from; a
    local reference outside the test's directory is refused unread (runner.inputs.paths)."""
    suite_ref(ref, base_dir, at)
    return resolve_source(ref, base_dir=base_dir, where=at, download=not opts.dry_run,
                          offline_mode=opts.offline, must_exist=not opts.dry_run)


def _golden(test: GoldenTest, ref: TensorRef, opts: CheckOptions, notes: list[str]
            ) -> Path | None:
    try:
        return _ref(ref.source, test.base_dir, ref.where, opts)
    except RunnerError as e:
        if opts.require_goldens:
            raise
        notes.append(f"old golden unavailable, not compared: {e}")
        return None


def tuner_spec(test: GoldenTest, opts: CheckOptions) -> tuple[Path | None, str | None]:
    """The SKU's tuner file, looked up like IREE CI's runners do (next to the tests)."""
    ref = test.tuner_file.get(opts.sku)
    if ref is None:
        return None, None
    at = where(test, f"tuner_file.{opts.sku}")
    if is_url(ref) or ref.startswith("file://") or Path(ref).is_absolute():
        return _ref(ref, test.base_dir, at, opts), None
    dirs = [d for d in (opts.tuner_dir, test.base_dir, test.base_dir.parent,
                        test.base_dir.parent.parent) if d is not None]
    for d in dirs:
        if (d / ref).is_file() and is_inside(d / ref, d):
            return d / ref, None
    if opts.dry_run:
        return test.base_dir / ref, (f"tuner file {ref} for {opts.sku} not found (looked in "
                                     f"{', '.join(map(str, dirs))}); pass --tuner-dir")
    raise BadInput(f"tuner file {ref!r} for SKU {opts.sku} not found in "
                   f"{', '.join(map(str, dirs))}", where=at,
                   fix="pass --tuner-dir DIR (where IREE CI keeps its specs), another "
                   "--sku, or --tuning-spec PATH")


def uses_parameters(mlir: Path) -> bool:
    """Whether the module reads named parameters (so it needs an archive to run)."""
    needle = b"parameter.named<"
    with open(mlir, "rb") as f:
        tail = b""
        while block := f.read(1 << 22):
            if needle in tail + block:
                return True
            tail = block[-len(needle):]
    return False


@cache
def _splat_flag(compiler: str) -> str:
    """`--iree-parameter-splat` (3.13); older compilers spell it `--iree-opt-splat-parameters`."""
    out = subprocess.run([compiler, "--help-hidden"], capture_output=True, text=True,
                         check=False).stdout
    return "--iree-parameter-splat" if "--iree-parameter-splat=" in out \
        else "--iree-opt-splat-parameters"


def splat_weights(mlir: Path, compiler: CompilerInfo, dry_run: bool = False
                  ) -> tuple[Path, list[str]]:
    """A cached archive of splat values for every parameter the module reads."""
    key = sha256_file(mlir) if mlir.is_file() else "<sha256 of the MLIR>"
    path = cache_dir() / "splat" / f"{key}.irpa"
    command = [compiler.path, str(mlir), f"{_splat_flag(compiler.path)}={path}",
               "--compile-to=global-optimization", "-o", "/dev/null"]
    if dry_run or path.is_file():
        return path, command
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{time.monotonic_ns()}.tmp.irpa")
    proc = subprocess.run([*command[:2], f"{command[2].split('=')[0]}={tmp}", *command[3:]],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise ToolFailed(f"cannot make splat weights: {proc.stderr.strip()[-2000:]}",
                         where=str(mlir), fix="give the test weights (`real_weights`)")
    tmp.replace(path)
    return path, command


def _dump_paths(test: GoldenTest, flags: tuple[str, ...], which: str) -> list[str]:
    """Relative statistics files go to a fixed per-test folder in the cache, not the
    current directory: IREE CI writes them next to the vmfb, and a fixed path keeps the
    cache key."""
    out = []
    prefix = f"{STATS_FILE_FLAG}="
    for flag in flags:
        if flag.startswith(prefix) and not Path(flag[len(prefix):]).is_absolute():
            folder = cache_dir() / "compile-stats" / test.name.replace("/", "__") / which
            if caches_writable():  # iree-compile does not make it (a dry run runs none)
                folder.mkdir(parents=True, exist_ok=True)
            flag = prefix + str(folder / flag[len(prefix):])
        out.append(flag)
    return out


def compile_stats_path(mlir: Path, flags: tuple[str, ...], compiler: CompilerInfo) -> Path:
    """The statistics file of (mlir, flags, compiler): keyed like the vmfb it describes, so
    it is reused exactly while that vmfb is."""
    key = compile_key(mlir, flags, compiler)[:32] if mlir.is_file() else \
        "<key: known once the MLIR is fetched>"
    return cache_dir() / "compile-stats" / key / STATS_FILE


def _module_flags(test: GoldenTest, module: ModuleDef, mlir: Path, opts: CheckOptions,
                  compiler: CompilerInfo, notes: list[str]) -> tuple[list[str], Path | None]:
    if module.stats:  # ours replace the module's own (IREE CI's come last and win)
        flags = [f for f in module.compiler_flags
                 if not f.startswith((STATS_FORMAT_FLAG, STATS_FILE_FLAG))]
    else:
        flags = _dump_paths(test, module.compiler_flags, module.name)
    if test.backend == "rocm":
        if module.chip is None:
            flags.append(rocm_chip_flag(opts.rocm_chip, compiler))
        elif module.chip != opts.rocm_chip:
            notes.append(f"module {module.name} compiles for {module.chip} (its own flag), "
                         f"not --rocm-chip {opts.rocm_chip}")
    if module is test.modules[0]:
        spec, note = tuner_spec(test, opts)
        if note:
            notes.append(note)
        if spec is not None:
            flags.append(f"{TUNER_FLAG}={spec}")
        if opts.tuning_spec is not None:
            flags.append(f"{TUNING_SPEC_FLAG}={opts.tuning_spec.resolve()}")
    if not module.stats:
        return flags, None
    stats = compile_stats_path(mlir, tuple(flags), compiler)
    return [*flags, f"{STATS_FORMAT_FLAG}=json", f"{STATS_FILE_FLAG}={stats}"], stats


def expects_compile_failure(test: GoldenTest, chip: str) -> bool:
    """IREE CI xfails the compile when ROCM_CHIP is listed: the quality runner for any
    file, the older regression runner for its rocm test only."""
    if test.schema == "regression" and test.backend != "rocm":
        return False
    return chip in test.compile_chip_expecting_to_fail


def _parameters(test: GoldenTest, opts: CheckOptions, compiler: CompilerInfo
                ) -> tuple[tuple[str, Path], ...]:
    out = []
    for w in test.weights:
        if w.kind == "random":
            assert w.module is not None and w.seed is not None
            mlir = _ref(w.module.mlir, w.module.base_dir, w.module.where, opts)
            path = random_weights(mlir, w.seed, w.where, dry_run=opts.dry_run)
        else:
            path = _ref(w.source, test.base_dir, w.where, opts)
        out.append((w.scope, path))
    return tuple(out)


def _spec_paths(test: GoldenTest, opts: CheckOptions) -> dict[str, Path]:
    """Every argspec `url` fetched, as IREE's runner fetches them (outputs included); an old
    golden may be missing while `generate` makes its successor."""
    found = {}
    for spec in (*test.input_specs, *test.output_specs, *test.expected_specs):
        if spec.url is None:
            continue
        try:
            found[spec.where] = _ref(spec.url, test.base_dir, f"{spec.where}.url", opts)
        except RunnerError:
            if opts.require_goldens or spec not in test.expected_specs:
                raise
    return found


def common_run_args(p: TestPlan, scratch: Path) -> list[str]:
    """What IREE's torch_models runner hands `iree-run-module` and `iree-benchmark-module`
    after the modules (test_base.py `_get_common_run_args`): `--parameters=<scope>=<file>` per
    weight, then `--input=`, `--output=` and `--expected_output=` as `<value>=@<file>` (either
    part alone when the other is absent), then `run_args` as written. The tool writes an
    `--output` into `scratch`, not over the cached download IREE's runner would overwrite."""
    t = p.test
    args = [f"--parameters={scope}={path}" for scope, path in p.parameters]
    for flag, specs in (("--input", t.input_specs), ("--output", t.output_specs),
                        ("--expected_output", t.expected_specs)):
        for i, spec in enumerate(specs):
            parts = [] if spec.value is None else [spec.value]
            if spec.url is not None:
                path = p.spec_paths.get(spec.where, Path(f"<{spec.url}>"))
                if flag == "--output":
                    path = scratch / f"output{i}_{Path(spec.url.split('?', 1)[0]).name}"
                parts.append(f"@{path}")
            args.append(f"{flag}={'='.join(parts)}")
    return [*args, *t.run_args]


def plan(test: GoldenTest, opts: CheckOptions, compiler: CompilerInfo) -> TestPlan:
    notes: list[str] = []
    modules = []
    for module in test.modules:
        mlir = _ref(module.mlir, module.base_dir, module.where, opts)
        flags, stats = _module_flags(test, module, mlir, opts, compiler, notes)
        modules.append(PlannedModule(module, mlir, tuple(flags), stats))
    run = test.runs and not opts.compile_only
    weights, kind = None, None
    parameters = _parameters(test, opts, compiler) if run else ()
    if parameters:
        model = [path for scope, path in parameters if scope == "model"]
        weights = model[0] if len(model) == 1 == len(parameters) else None
        kind = "random" if any(w.kind == "random" for w in test.weights) else "real"
    elif run and test.schema == "quality" and modules[0].mlir.is_file() \
            and uses_parameters(modules[0].mlir):
        # IREE CI's quality runner compiles a file without real_weights with a splat
        # archive and runs on it; the regression and torch_models runners pass none.
        weights, kind = splat_weights(modules[0].mlir, compiler, dry_run=True)[0], "splat"
        parameters = (("model", weights),)
        notes.append("no weights: running on splat weights (checks that it runs, "
                     "not its numbers)")
    inputs = tuple(_ref(r.source, test.base_dir, r.where, opts) for r in test.inputs) \
        if run else ()
    outputs = tuple(_golden(test, r, opts, notes) for r in test.outputs) if run else ()
    thresholds = Thresholds.parse(test.threshold_args, where(test, "threshold_args"))
    return TestPlan(
        test=test, modules=tuple(modules), weights=weights, weights_kind=kind,
        inputs=inputs, outputs=outputs, thresholds=thresholds,
        device=opts.device or test.device,
        expect_compile_failure=expects_compile_failure(test, opts.rocm_chip),
        notes=tuple(notes), parameters=parameters,
        spec_paths=_spec_paths(test, opts) if run else {})


def check_spec(spec: Path) -> None:
    """`iree-compile` ignores a transform library it cannot parse (it prints errors and
    exits 0), so a broken spec would silently test nothing: parse it with iree-opt first
    (where no iree-opt is found, iree-compile's own diagnostics are all there is)."""
    opt = found_path("iree-opt")
    if opt is None:
        return
    proc = subprocess.run([opt, str(spec), "-o", "/dev/null"], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise ToolFailed(f"tuning spec does not parse:\n{proc.stderr.strip()[-1500:]}",
                         where=str(spec), fix="fix the spec (iree-opt must accept it)")


def placeholder(c: CompileResult) -> CompileResult:
    """A dry run of an MLIR not fetched yet cannot know its cache key: say so plainly."""
    if Path(c.mlir).is_file():
        return c
    vmfb = str(cache_dir() / "vmfb" / f"<key of {Path(c.mlir).name}: known once fetched>.vmfb")
    return replace(c, vmfb=vmfb, command=[*c.command[:-1], vmfb])


def compile_module(m: PlannedModule, compiler: CompilerInfo, dry_run: bool = False
                   ) -> CompileResult:
    """One module through the compile cache. A cached vmfb whose statistics file is gone is
    compiled again, as IREE CI recompiles a module missing either file."""
    if not dry_run:
        for flag in m.flags:
            if flag.startswith((f"{TUNER_FLAG}=", f"{TUNING_SPEC_FLAG}=")):
                check_spec(Path(flag.split("=", 1)[1]))
    if m.stats is not None and not dry_run:
        m.stats.parent.mkdir(parents=True, exist_ok=True)
    result = compile_mlir(m.mlir, m.flags, dry_run=dry_run, compiler=compiler)
    if m.stats is not None and not dry_run and not m.stats.is_file():
        Path(result.vmfb).unlink(missing_ok=True)
        result = compile_mlir(m.mlir, m.flags, compiler=compiler)
    return placeholder(result)


def dispatch_count(stats: Path) -> int:
    """`stream-aggregate.execution.dispatch-count`, what IREE CI's compstat tests compare."""
    try:
        raw = json.loads(stats.read_text())
        return int(raw["stream-aggregate"]["execution"]["dispatch-count"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ToolFailed(f"cannot read the dispatch count: {e}", where=str(stats),
                         fix=f"compile with {STATS_FORMAT_FLAG}=json") from e
