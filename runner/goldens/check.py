"""`runner goldens check`: IREE CI's quality tests, compiled through the cache and run in-process.

For each test: resolve its artifacts (URLs through the download cache), compile the MLIR
(and the pipeline MLIR) with the file's flags plus what IREE CI adds (the ROCm chip flag in
the compiler's spelling, the SKU's tuner file as `--iree-codegen-transform-dialect-library`),
call `run_function` through the IREE Python runtime with `real_weights` as parameter scope
`model`, and compare the first k results with the k expected outputs under the file's
`threshold_args`. `plan` alone gives the exact `iree-compile` commands and an equivalent
`iree-run-module` line, which is all `--dry-run` prints.

Without `real_weights`, IREE CI's files are compile-only; when such a module still reads
parameters, it runs here on splat weights (`iree-compile --iree-parameter-splat`), which
checks that it runs, not what it computes.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np

from runner.compile import CompileResult, CompilerInfo, compile_mlir, compiler_info, rocm_chip_flag
from runner.errors import RunnerError
from runner.fileio import sha256_file
from runner.goldens.testfile import GoldenTest, TensorRef
from runner.goldens.thresholds import OutputComparison, Thresholds, compare
from runner.paths import cache_dir
from runner.sources import is_url, redact_url, resolve
from runner.tensors import read_tensor, tensor_format, write_tensor

TUNER_FLAG = "--iree-codegen-transform-dialect-library"  # IREE CI's per-SKU spec flag
TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path"  # the user-facing spelling
STATUSES = ("passed", "failed", "error", "xfailed", "xpassed", "planned")


@dataclass(frozen=True)
class CheckOptions:
    sku: str = "mi300"
    rocm_chip: str = "gfx942"
    tuning_spec: Path | None = None
    tuner_dir: Path | None = None
    out: Path | None = None
    dry_run: bool = False
    offline: bool | None = None
    compile_only: bool = False
    device: str | None = None  # overrides the file's `device` (e.g. local-sync)
    require_goldens: bool = True  # generate runs without the old outputs when it must


@dataclass(frozen=True)
class TestPlan:
    test: GoldenTest
    mlir: Path
    pipeline_mlir: Path | None
    weights: Path | None
    weights_kind: str | None  # "real", "splat" or None
    inputs: tuple[Path, ...]
    outputs: tuple[Path | None, ...]  # None: golden unavailable (generate only)
    compile_flags: tuple[str, ...]
    pipeline_flags: tuple[str, ...]
    thresholds: Thresholds
    device: str
    expect_compile_failure: bool
    notes: tuple[str, ...] = ()


@dataclass
class TestResult:
    test: GoldenTest
    status: str = "planned"
    phase: str = ""
    message: str = ""
    compile_seconds: float = 0.0
    compile_cached: bool = True
    run_seconds: float = 0.0
    outputs: list[OutputComparison] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    actual: tuple[np.ndarray, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "xfailed", "xpassed", "planned")

    def to_dict(self) -> dict:
        return {"name": self.test.name, "file": str(self.test.path), "status": self.status,
                "phase": self.phase, "message": self.message,
                "compile_seconds": self.compile_seconds, "compile_cached": self.compile_cached,
                "run_seconds": self.run_seconds,
                "outputs": [o.to_dict() for o in self.outputs],
                "commands": [shlex.join(c) for c in self.commands], "notes": self.notes}


def _where(test: GoldenTest, field_name: str) -> str:
    return f"{test.path}: {field_name}"


def _ref(test: GoldenTest, ref: str, where: str, opts: CheckOptions) -> Path:
    """Fetches through the cache, or (dry run) names the path it would be read from."""
    return resolve(ref, base_dir=test.base_dir, where=where, download=not opts.dry_run,
                   offline_mode=opts.offline, must_exist=not opts.dry_run)


def _golden(test: GoldenTest, ref: TensorRef, opts: CheckOptions, notes: list[str]
            ) -> Path | None:
    try:
        return _ref(test, ref.source, ref.where, opts)
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
    where = _where(test, f"tuner_file.{opts.sku}")
    if is_url(ref) or ref.startswith("file://") or Path(ref).is_absolute():
        return _ref(test, ref, where, opts), None
    dirs = [d for d in (opts.tuner_dir, test.base_dir, test.base_dir.parent,
                        test.base_dir.parent.parent) if d is not None]
    for d in dirs:
        if (d / ref).is_file():
            return d / ref, None
    if opts.dry_run:
        return test.base_dir / ref, (f"tuner file {ref} for {opts.sku} not found (looked in "
                                     f"{', '.join(map(str, dirs))}); pass --tuner-dir")
    raise RunnerError(f"tuner file {ref!r} for SKU {opts.sku} not found in "
                      f"{', '.join(map(str, dirs))}", where=where,
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
        raise RunnerError(f"cannot make splat weights: {proc.stderr.strip()[-2000:]}",
                          where=str(mlir), fix="give the test `real_weights`")
    tmp.replace(path)
    return path, command


# Flags naming a side file iree-compile writes; IREE CI runs it in the vmfb's directory.
DUMP_FLAGS = ("--iree-scheduling-dump-statistics-file=",)


def _dump_paths(test: GoldenTest, flags: tuple[str, ...], which: str) -> list[str]:
    """Relative dump files go to a fixed per-test folder in the cache, not the current
    directory: IREE CI writes them next to the vmfb, and a fixed path keeps the cache key."""
    out = []
    for flag in flags:
        prefix = next((p for p in DUMP_FLAGS if flag.startswith(p)), None)
        if prefix and not Path(flag[len(prefix):]).is_absolute():
            folder = cache_dir() / "compile-stats" / test.name.replace("/", "__") / which
            folder.mkdir(parents=True, exist_ok=True)
            flag = prefix + str(folder / flag[len(prefix):])
        out.append(flag)
    return out


def plan(test: GoldenTest, opts: CheckOptions, compiler: CompilerInfo) -> TestPlan:
    notes = []
    mlir = _ref(test, test.mlir, _where(test, "mlir"), opts)
    pipeline = (_ref(test, test.pipeline_mlir, _where(test, "pipeline_mlir"), opts)
                if test.pipeline_mlir else None)
    flags = _dump_paths(test, test.compiler_flags, "model")
    pipeline_flags = _dump_paths(test, test.pipeline_compiler_flags, "pipeline")
    if test.backend == "rocm":
        chip = rocm_chip_flag(opts.rocm_chip, compiler)
        flags.append(chip)
        pipeline_flags.append(chip)
    spec, note = tuner_spec(test, opts)
    if note:
        notes.append(note)
    if spec is not None:
        flags.append(f"{TUNER_FLAG}={spec}")
    if opts.tuning_spec is not None:
        flags.append(f"{TUNING_SPEC_FLAG}={opts.tuning_spec.resolve()}")
    run = not (test.compile_only or opts.compile_only)
    weights, kind = None, None
    if test.real_weights and run:
        weights, kind = _ref(test, test.real_weights, _where(test, "real_weights"), opts), "real"
    elif run and mlir.is_file() and uses_parameters(mlir):
        weights, kind = splat_weights(mlir, compiler, dry_run=True)[0], "splat"
        notes.append("no real_weights: running on splat weights (checks that it runs, "
                     "not its numbers)")
    inputs = tuple(_ref(test, r.source, r.where, opts) for r in test.inputs) if run else ()
    outputs = tuple(_golden(test, r, opts, notes) for r in test.outputs) if run else ()
    thresholds = Thresholds.parse(test.threshold_args, _where(test, "threshold_args"))
    if thresholds.passthrough:
        notes.append(f"threshold_args passed through unread: {list(thresholds.passthrough)}")
    return TestPlan(
        test=test, mlir=mlir, pipeline_mlir=pipeline, weights=weights, weights_kind=kind,
        inputs=inputs, outputs=outputs, compile_flags=tuple(flags),
        pipeline_flags=tuple(pipeline_flags), thresholds=thresholds,
        device=opts.device or test.device,
        expect_compile_failure=(test.backend == "rocm"
                                and opts.rocm_chip in test.compile_chip_expecting_to_fail),
        notes=tuple(notes))


def count_results(mlir: Path, function: str) -> int | None:
    """How many results `function` returns, read off the MLIR text (None if unknown)."""
    try:
        if mlir.stat().st_size > 1 << 30:
            return None
        text = mlir.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(rf"func(?:\.func)?\s+(?:public\s+)?@{re.escape(function)}\s*\(", text)
    if not match:
        return None
    i, depth = match.end(), 1
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    rest = text[i:i + 20000].lstrip()
    if not rest.startswith("->"):
        return 0
    rest = rest[2:].lstrip()
    if not rest.startswith("("):
        return 1
    depth, count, end = 0, 1, len(rest)
    for pos, ch in enumerate(rest):
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
            if depth == 0:
                end = pos
                break
        elif ch == "," and depth == 1:
            count += 1
    return count if rest[1:end].strip() else 0


def _tensor_arg(flag: str, ref: TensorRef, path: Path, out: Path | None, i: int) -> str:
    """`--input=<value>=@file` as IREE CI writes it; `.irpa` blobs (which iree-run-module
    cannot read) are named by the `.npy` copy `check` writes into --out."""
    if tensor_format(path) == ".irpa":
        copy = (out or Path(".")) / f"{flag.strip('-')}{i}.npy"
        return f"{flag}=@{copy}"
    return f"{flag}={ref.value}=@{path}" if ref.value else f"{flag}=@{path}"


def run_module_command(p: TestPlan, vmfbs: list[str], out: Path | None,
                       n_results: int | None) -> list[str]:
    """The `iree-run-module` line equivalent to what `check` does in-process."""
    t = p.test
    cmd = ["iree-run-module", f"--device={p.device}", f"--module={vmfbs[0]}",
           f"--function={t.run_function}", *t.threshold_args]
    cmd += [_tensor_arg("--input", r, path, out, i)
            for i, (r, path) in enumerate(zip(t.inputs, p.inputs, strict=True))]
    cmd += ["--expected_output=(ignored)" if path is None
            else _tensor_arg("--expected_output", r, path, out, i)
            for i, (r, path) in enumerate(zip(t.outputs, p.outputs, strict=True))]
    if n_results is not None and p.outputs:
        cmd += ["--expected_output=(ignored)"] * max(0, n_results - len(p.outputs))
    if p.weights is not None:
        cmd.append(f"--parameters=model={p.weights}")
    cmd += [f"--module={v}" for v in vmfbs[1:]]
    return cmd


def check_spec(spec: Path) -> None:
    """`iree-compile` ignores a transform library it cannot parse (it prints errors and
    exits 0), so a broken spec would silently test nothing: parse it with iree-opt first."""
    opt = shutil.which("iree-opt")
    if opt is None:
        return
    proc = subprocess.run([opt, str(spec), "-o", "/dev/null"], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise RunnerError(f"tuning spec does not parse:\n{proc.stderr.strip()[-1500:]}",
                          where=str(spec), fix="fix the spec (iree-opt must accept it)")


def _specs_in(flags: tuple[str, ...]) -> list[Path]:
    return [Path(f.split("=", 1)[1]) for f in flags
            if f.startswith((f"{TUNER_FLAG}=", f"{TUNING_SPEC_FLAG}="))]


def _test_dir(opts: CheckOptions, test: GoldenTest) -> Path | None:
    return opts.out / test.name.replace("/", "__") if opts.out else None


def _placeholder(c: CompileResult) -> CompileResult:
    """A dry run of an MLIR not fetched yet cannot know its cache key: say so plainly."""
    if Path(c.mlir).is_file():
        return c
    vmfb = str(cache_dir() / "vmfb" / "<key: known once the MLIR is fetched>.vmfb")
    return replace(c, vmfb=vmfb, command=[*c.command[:-1], vmfb])


def run_test(test: GoldenTest, opts: CheckOptions, compiler: CompilerInfo | None = None
             ) -> TestResult:
    """Plans, compiles, runs and compares one test; never raises for a test's own failure."""
    compiler = compiler or compiler_info()
    result = TestResult(test)
    try:
        p = plan(test, opts, compiler)
    except RunnerError as e:
        result.status, result.phase, result.message = "error", "setup", str(e)
        return result
    result.notes.extend(p.notes)
    out = _test_dir(opts, test)
    # Compile.
    compiled: list[CompileResult] = []
    try:
        if not opts.dry_run:
            for spec in _specs_in(p.compile_flags):
                check_spec(spec)
        compiled.append(compile_mlir(p.mlir, p.compile_flags, dry_run=opts.dry_run,
                                     compiler=compiler))
        if p.pipeline_mlir is not None:
            compiled.append(compile_mlir(p.pipeline_mlir, p.pipeline_flags,
                                         dry_run=opts.dry_run, compiler=compiler))
        if p.weights_kind == "splat":
            _, command = splat_weights(p.mlir, compiler, dry_run=opts.dry_run)
            result.commands.append(command)
    except RunnerError as e:
        result.compile_seconds = sum(c.seconds for c in compiled)
        if p.expect_compile_failure:
            result.status, result.phase = "xfailed", "compile"
            result.message = f"compile failed as expected on {opts.rocm_chip}"
        else:
            result.status, result.phase, result.message = "failed", "compile", str(e)
        return result
    compiled = [_placeholder(c) for c in compiled]
    result.commands[:0] = [c.command for c in compiled]
    result.compile_seconds = sum(c.seconds for c in compiled)
    result.compile_cached = all(c.cached for c in compiled)
    run = not (test.compile_only or opts.compile_only)
    vmfbs = [c.vmfb for c in compiled] if test.add_pipeline_module else [compiled[0].vmfb]
    if run:
        n_results = count_results(p.pipeline_mlir if test.add_pipeline_module
                                  and p.pipeline_mlir else p.mlir, test.run_function)
        result.commands.append(run_module_command(p, vmfbs, out, n_results))
    if opts.dry_run:
        return result
    if p.expect_compile_failure:
        result.status, result.phase = "xpassed", "compile"
        result.message = (f"compiled on {opts.rocm_chip}, which the test expects to fail: "
                          "consider removing it from compile_chip_expecting_to_fail")
        return result
    if not run:
        result.status, result.phase, result.message = "passed", "compile", "compile only"
        return result
    _run_and_compare(p, [Path(v) for v in vmfbs], result, out)
    return result


def _run_and_compare(p: TestPlan, vmfbs: list[Path], result: TestResult,
                     out: Path | None) -> None:
    from runner.pipeline.iree_session import IreeSession, ModuleFiles

    test = p.test
    expect_fail = test.run_test_expecting_to_fail
    try:
        inputs = [read_tensor(path, ref.spec) for ref, path in
                  zip(test.inputs, p.inputs, strict=True)]
        expected = [None if path is None else read_tensor(path, ref.spec)
                    for ref, path in zip(test.outputs, p.outputs, strict=True)]
    except RunnerError as e:
        result.status, result.phase, result.message = "error", "inputs", str(e)
        return
    if out is not None:
        for flag, refs, paths, arrays in (("input", test.inputs, p.inputs, inputs),
                                          ("expected_output", test.outputs, p.outputs,
                                           expected)):
            for i, (_, path, array) in enumerate(zip(refs, paths, arrays, strict=True)):
                if path is not None and tensor_format(path) == ".irpa":
                    write_tensor(out / f"{flag}{i}.npy", array)
    try:
        session = IreeSession(p.device)
    except RunnerError as e:
        result.status, result.phase, result.message = "error", "run", str(e)
        return
    start = time.perf_counter()
    try:
        session.load(ModuleFiles(test.name, tuple(vmfbs), p.weights))
        fn = session.function(test.name, test.run_function, _where(test, "run_function"))
        actual = fn(*inputs)
    except RunnerError as e:
        result.run_seconds = time.perf_counter() - start
        if expect_fail:
            result.status, result.phase, result.message = "xfailed", "run", str(e)
        else:
            result.status, result.phase, result.message = "failed", "run", str(e)
        return
    finally:
        session.close()
    result.run_seconds = time.perf_counter() - start
    result.actual = actual
    if len(expected) > len(actual):
        result.status, result.phase = ("xfailed" if expect_fail else "failed"), "compare"
        result.message = (f"{len(expected)} expected outputs but {test.run_function} "
                          f"returned {len(actual)} results")
        return
    if result.commands and len(actual) > len(expected) and expected:
        cmd = result.commands[-1]
        cmd += ["--expected_output=(ignored)"] * (len(actual) - len(expected)
                                                  - cmd.count("--expected_output=(ignored)"))
    result.outputs = [compare(i, redact_url(ref.source), exp, act, p.thresholds)
                      for i, (ref, exp, act) in enumerate(zip(test.outputs, expected,
                                                              actual, strict=False))
                      if exp is not None]
    failed = [o for o in result.outputs if not o.passed]
    if out is not None:
        for o in failed:
            write_tensor(out / f"actual_output{o.index}.npy", actual[o.index])
    result.phase = "compare"
    if failed:
        result.status = "xfailed" if expect_fail else "failed"
        result.message = "\n".join(o.describe() for o in failed)
    elif expect_fail:
        result.status = "xpassed"
        result.message = ("matched, though the test expects the run to fail: consider "
                          "removing run_test_expecting_to_fail")
    else:
        result.status = "passed"


@dataclass
class CheckReport:
    results: list[TestResult]
    options: CheckOptions
    compiler: CompilerInfo
    seconds: float

    @property
    def exit_code(self) -> int:
        return 0 if all(r.ok for r in self.results) else 1

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.results) for s in STATUSES
                if any(r.status == s for r in self.results)}


def check(tests: list[GoldenTest], opts: CheckOptions, *, echo: bool = True) -> CheckReport:
    """Runs every test; with `opts.out`, writes junit.xml, summary.md and results.json."""
    from runner.goldens.report import console_line, write_reports

    compiler = compiler_info()
    start = time.perf_counter()
    results = []
    for test in tests:
        result = run_test(test, opts, compiler)
        results.append(result)
        if echo:
            print(console_line(result, opts.dry_run), flush=True)
    report = CheckReport(results, opts, compiler, time.perf_counter() - start)
    if opts.out is not None and not opts.dry_run:
        write_reports(report, opts.out)
    if echo and not opts.dry_run:
        counts = ", ".join(f"{n} {s}" for s, n in report.counts().items())
        print(f"{len(results)} tests in {report.seconds:.1f}s: {counts}", file=sys.stderr)
    return report
