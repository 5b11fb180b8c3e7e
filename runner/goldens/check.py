"""`runner goldens check`: IREE CI's quality and compstat tests, compiled through the cache,
judged as IREE CI's own runners judge them (iree-test-suites, `fields.IREE_TEST_SUITES_COMMIT`).

For each test: `plan` resolves its artifacts and completes its flags (see `plan.py`); each
module is compiled once through the cache. A quality test then calls its function through the
IREE Python runtime with its weights as parameter scope `model` and compares its results with
the expected outputs under the file's thresholds (iree-run-module's semantics,
`thresholds.py`; their number must match, as the tool requires). Whatever that in-process run
cannot do exactly as the tool would (run_args it does not read, `outputs`, several weights or
another scope, no `--function`, literal argument values) goes through the real
`iree-run-module` with the exact arguments IREE CI's runner builds, judged by its exit status:
never a silent drop (`tool_reason`). A compstat test compares the compile's dispatch count
(`stream-aggregate.execution.dispatch-count` of the scheduling statistics) and the vmfb's
size in bytes with `golden_dispatch_count` and `golden_binary_size`: each must be <= its
golden, as IREE CI's torch_models runner asserts; both numbers and the delta are reported.
`--dry-run` prints the exact `iree-compile` commands and the `iree-run-module` line.

The older runners' verdicts are kept: `compile_chip_expecting_to_fail` is an expected failure
that is not compiled, `compile_only` a skipped run, `run_test_expecting_to_fail` an expected
failure that is not run, and a run whose `run_function` / `device` is unset fails (they pass
the string None). A field IREE CI's runner does not read is a warning. A test that compares
nothing (no expected outputs, a compstat test with no goldens) passes with a warning. Both
fail under `strict`. With a `timeout`, each test runs in its own process group, killed
(iree-compile included) when the time is up.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from runner.base.errors import BadInput, RunnerError
from runner.base.iree_tools import CompilerInfo, compiler_info, found_path
from runner.config.sources import redact_url
from runner.goldens.plan import (
    CheckOptions,
    TestPlan,
    common_run_args,
    compile_module,
    dispatch_count,
    plan,
    splat_weights,
    where,
)
from runner.goldens.report import console_line, write_reports
from runner.goldens.result import CheckReport, StatCheck, TestResult
from runner.goldens.testfile import THRESHOLD_ARG_PREFIXES, GoldenTest, TensorRef
from runner.goldens.thresholds import compare
from runner.model.compile import CompileResult
from runner.model.tensors import read_tensor, tensor_format, write_tensor

if TYPE_CHECKING:
    import numpy as np

# run_args the in-process run reads; any other sends the run through iree-run-module.
IN_PROCESS_RUN_ARGS = ("--function=", "--device=", *THRESHOLD_ARG_PREFIXES)


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


def tool_reason(p: TestPlan) -> str | None:
    """Why this run must go through the real `iree-run-module` (None: the in-process run
    does exactly what the tool would). IREE's runners hand everything to the tool; the
    in-process run reads inputs, expected outputs, thresholds, one `model` archive, the
    function and the device, and nothing else."""
    t = p.test
    if t.schema != "torch":
        return (f"threshold_args it does not read: {list(p.thresholds.passthrough)}"
                if p.thresholds.passthrough else None)
    if not any(a.startswith("--function=") for a in t.run_args):
        return "run_args name no --function (iree-run-module picks the module's own)"
    other = [a for a in t.run_args if not a.startswith(IN_PROCESS_RUN_ARGS)]
    if other:
        return f"run_args it does not read: {other}"
    if t.output_specs:
        return "`outputs` (--output=)"
    if len(p.parameters) != (p.weights is not None):
        return "weights other than one archive of scope `model`: " + ", ".join(
            f"{scope}={path.name}" for scope, path in p.parameters)
    if len(t.inputs) != len(t.input_specs) or len(t.outputs) != len(t.expected_specs):
        return "inputs or expected outputs that are not tensor files with a type"
    return None


def run_module_command(p: TestPlan, vmfbs: list[str], out: Path | None,
                       device: str | None = None) -> list[str]:
    """The `iree-run-module` line IREE CI's runner builds for this test. torch_models: the
    modules, then `common_run_args`. The older runners: device, main module, function,
    threshold args, inputs and expected outputs, the `model` archive, then the pipeline
    module. `.irpa` blobs (which the tool cannot read) are named by the `.npy` copy `check`
    writes into --out."""
    t = p.test
    if t.schema == "torch":
        args = common_run_args(p, out or Path("."))
        if device:  # --device overrides the file's
            args = [a for a in args if not a.startswith("--device=")] + [f"--device={device}"]
        return ["iree-run-module", *[f"--module={v}" for v in vmfbs], *args]
    cmd = ["iree-run-module", f"--device={p.device}", f"--module={vmfbs[0]}",
           f"--function={t.run_function}", *t.threshold_args]
    cmd += [_tensor_arg("--input", r, path, out, i)
            for i, (r, path) in enumerate(zip(t.inputs, p.inputs, strict=True))]
    cmd += ["--expected_output=(ignored)" if path is None
            else _tensor_arg("--expected_output", r, path, out, i)
            for i, (r, path) in enumerate(zip(t.outputs, p.outputs, strict=True))]
    cmd += [f"--parameters={scope}={path}" for scope, path in p.parameters]
    cmd += [f"--module={v}" for v in vmfbs[1:]]
    return cmd


def _test_dir(opts: CheckOptions, test: GoldenTest) -> Path | None:
    return opts.out / test.name.replace("/", "__") if opts.out else None


def _quiet(_: str) -> None:
    return None


def run_test(test: GoldenTest, opts: CheckOptions, compiler: CompilerInfo | None = None,
             on_phase: Callable[[str], None] = _quiet) -> TestResult:
    """Plans, compiles, runs and compares one test; never raises for a test's own failure.
    `on_phase` hears what it is doing (for the timeout's message)."""
    compiler = compiler or compiler_info()
    if opts.timeout is not None and not opts.dry_run:
        return _run_isolated(test, opts, compiler)
    result = TestResult(test)
    result.warnings.extend(test.unknown)
    _run_steps(test, opts, compiler, on_phase, result)
    _nothing_compared(result, opts)
    _unknown_fields(result, opts)
    return result


def _run_steps(test: GoldenTest, opts: CheckOptions, compiler: CompilerInfo,
               on_phase: Callable[[str], None], result: TestResult) -> None:
    """The verdicts in the order IREE CI's runners reach them: an expected compile failure
    (not compiled), the compile, `compile_only` (skipped), an expected run failure (not
    run), then the run and its comparison."""
    try:
        p = plan(test, opts, compiler)
    except RunnerError as e:
        result.status, result.phase, result.message = "error", "setup", str(e)
        return
    result.notes.extend(p.notes)
    if p.expect_compile_failure and not opts.dry_run:
        result.status, result.phase = "xfailed", "compile"
        result.message = (f"expected to fail on {opts.rocm_chip} "
                          "(compile_chip_expecting_to_fail): not compiled, as IREE CI's "
                          "runner xfails it before compiling")
        return
    out = _test_dir(opts, test)
    compiled = _compile_all(p, compiler, opts, on_phase, result)
    if compiled is None:
        return
    run = test.runs and not opts.compile_only
    vmfbs = [c.vmfb for c, m in zip(compiled, p.modules, strict=True) if m.module.load]
    if run:
        result.tool = tool_reason(p)
        result.commands.append(run_module_command(p, vmfbs, out, opts.device))
        if result.tool:
            result.notes.append(f"run through iree-run-module itself: {result.tool}")
    if p.expect_compile_failure:
        result.notes.append(f"IREE CI expects this compile to fail on {opts.rocm_chip} "
                            "(compile_chip_expecting_to_fail) and does not compile it")
    if not opts.dry_run:
        _run_verdict(p, compiled, vmfbs, bool(run), opts, on_phase, result, out)


def _compile_all(p: TestPlan, compiler: CompilerInfo, opts: CheckOptions,
                 on_phase: Callable[[str], None], result: TestResult
                 ) -> list[CompileResult] | None:
    """The plan's modules compiled (and its splat weights made), their commands and times
    recorded; None when a compile fails, which is then the test's verdict."""
    compiled: list[CompileResult] = []
    try:
        for m in p.modules:
            on_phase(f"compiling {m.module.name}")
            compiled.append(compile_module(m, compiler, opts.dry_run))
        if p.weights_kind == "splat":
            _, command = splat_weights(p.modules[0].mlir, compiler, dry_run=opts.dry_run)
            result.commands.append(command)
    except RunnerError as e:
        result.compile_seconds = sum(c.seconds for c in compiled)
        result.status, result.phase, result.message = "failed", "compile", str(e)
        return None
    result.commands[:0] = [c.command for c in compiled]
    result.compile_seconds = sum(c.seconds for c in compiled)
    result.compile_cached = all(c.cached for c in compiled)
    return compiled


def _run_verdict(p: TestPlan, compiled: list[CompileResult], vmfbs: list[str], run: bool,
                 opts: CheckOptions, on_phase: Callable[[str], None], result: TestResult,
                 out: Path | None) -> None:
    """The verdict once compiled: a compstat test's statistics, a test IREE CI skips or
    xfails before running (never run here either), or the run and its comparison."""
    test = p.test
    if test.kind == "compstat":
        _compstat(p, compiled[0], result)
    elif test.compile_only and not opts.compile_only:
        result.status, result.phase = "skipped", "run"
        result.message = "compile_only: compiled, not run (IREE CI skips the run)"
    elif not run:
        result.status, result.phase, result.message = "passed", "compile", "compile only"
    elif test.run_test_expecting_to_fail:
        result.status, result.phase = "xfailed", "run"
        result.message = ("run_test_expecting_to_fail: not run, as IREE CI's runner xfails "
                          "it before running")
    elif test.unset:
        result.status, result.phase = "failed", "run"
        result.message = (f"{' and '.join(f'`{k}`' for k in test.unset)} not set: IREE CI's "
                          "runner passes the string None (--function=None, --device=None) "
                          "and iree-run-module fails")
    elif result.tool:
        on_phase("running iree-run-module")
        _run_tool(p, vmfbs, result, out, opts.device)
    else:
        on_phase(f"running {test.run_function}")
        _run_and_compare(p, [Path(v) for v in vmfbs], result, out)


def _run_tool(p: TestPlan, vmfbs: list[str], result: TestResult, out: Path | None,
              device: str | None) -> None:
    """The run as IREE CI's runner does it: `iree-run-module` with its exact arguments,
    judged by its exit status (the tool compares the expected outputs itself)."""
    tool = found_path("iree-run-module")
    if tool is None:
        result.status, result.phase = "error", "run"
        result.message = ("`iree-run-module` was found nowhere (--iree-tools, $IREE_TOOL_PATH, "
                          "PATH, the iree-base-runtime package): pip install iree-base-runtime")
        return
    with tempfile.TemporaryDirectory(prefix="goldens-run-") as scratch:
        folder = out or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        argv = run_module_command(p, vmfbs, folder, device)
        start = time.perf_counter()
        try:
            proc = subprocess.run([tool, *argv[1:]], capture_output=True, text=True,
                                  errors="replace", cwd=folder, check=False)
        except OSError as e:
            result.status, result.phase, result.message = "error", "run", str(e)
            return
        result.run_seconds = time.perf_counter() - start
    result.phase = "compare" if p.test.expected_specs or p.test.outputs else "run"
    if proc.returncode == 0:
        result.status = "passed"
        return
    tail = "\n".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-20:])
    result.status = "failed"
    result.message = f"iree-run-module failed (exit {proc.returncode}):\n{tail[-3000:]}"


def _compstat(p: TestPlan, compiled: CompileResult, result: TestResult) -> None:
    test, stats = p.test, p.modules[0].stats
    result.phase = "compstat"
    try:
        if stats is None:
            raise BadInput("this module was compiled without the statistics dump",
                           where=where(test, "module"),
                           fix="give the compstat test its own module (IREE CI compiles "
                           "compstat modules with the dump flags)")
        count = dispatch_count(stats)
    except RunnerError as e:
        result.status, result.message = "error", str(e)
        return
    result.stats = [StatCheck("dispatch_count", count, test.golden_dispatch_count),
                    StatCheck("binary_size", Path(compiled.vmfb).stat().st_size,
                              test.golden_binary_size)]
    over = [s for s in result.stats if s.ok is False]
    result.status = "failed" if over else "passed"
    result.message = "; ".join(s.describe() for s in over)
    for s in result.stats:
        if s.ok and s.delta:
            result.notes.append(f"{s.name} is {-s.delta} below its golden: consider "
                                "lowering the golden")


def _nothing_compared(result: TestResult, opts: CheckOptions) -> None:
    """A passing test that compared nothing is a warning, or with `strict` a failure."""
    test = result.test
    if result.status != "passed":
        return
    if test.kind == "compstat" and all(s.golden is None for s in result.stats):
        what = ("no golden_dispatch_count or golden_binary_size: the statistics were "
                "measured, not compared", "module")
    elif test.kind == "quality" and not result.outputs and not (
            result.tool and (test.outputs or test.expected_specs)):
        what = (f"no {test.outputs_field}: the run was not compared with anything",
                test.outputs_field)
    else:
        return
    if opts.strict:
        result.status, result.message = "failed", f"{what[0]} (--strict)"
        return
    result.warnings.append(f"{what[0]} ({test.path}: {what[1]}); --strict makes this a "
                           "failure")


def _unknown_fields(result: TestResult, opts: CheckOptions) -> None:
    """Fields IREE's runner does not read are warnings; under `strict`, a failure."""
    if opts.strict and result.test.unknown and result.ok and result.status != "planned":
        result.status, result.phase = "failed", "setup"
        result.message = (f"{len(result.test.unknown)} field(s) IREE CI's runner does not "
                          "read (--strict): " + "; ".join(result.test.unknown))


def _child(conn, test: GoldenTest, opts: CheckOptions, compiler: CompilerInfo) -> None:
    """Runs one test in a process group of its own, so a timeout can kill its compiles."""
    os.setpgrp()
    try:
        result = run_test(test, replace(opts, timeout=None), compiler,
                          lambda phase: conn.send(("phase", phase)))
        conn.send(("result", result))
    finally:
        conn.close()


def _run_isolated(test: GoldenTest, opts: CheckOptions, compiler: CompilerInfo
                  ) -> TestResult:
    assert opts.timeout is not None
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, test, opts, compiler), daemon=True)
    start = time.perf_counter()
    proc.start()
    send.close()
    doing = "starting"
    try:
        while (left := start + opts.timeout - time.perf_counter()) > 0 and receive.poll(left):
            kind, value = receive.recv()
            if kind == "result":
                proc.join()
                return value
            doing = value
    except EOFError:
        proc.join()
        return TestResult(test, status="error", phase="run", message=(
            f"the test's process ended (exit code {proc.exitcode}) while {doing}"))
    except BaseException:  # a signal: the test's processes end before this one does
        _kill_group(proc)
        raise
    finally:
        receive.close()
    _kill_group(proc)
    seconds = time.perf_counter() - start
    return TestResult(test, status="error", phase="timeout", run_seconds=seconds, message=(
        f"timed out after {opts.timeout:g}s (--timeout) while {doing}; the test's processes "
        "(iree-compile, the run) were killed"))


def _stop_resource_tracker() -> None:
    """The resource tracker the first spawned test started, ended once the tests are done.
    It ignores SIGTERM and ends only when this process does, so the CLI's stop of what a
    command started waited out its whole grace for it (10 s) before a SIGKILL, on every
    `--timeout` check. Nothing is registered with it (a pipe, no named semaphores)."""
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        stop()


def _kill_group(proc) -> None:
    """The test's process and everything it started (its own process group), waited for."""
    try:
        if proc.pid is not None:
            os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # it had not made its group yet
        proc.kill()
    proc.join()


def _compare_outputs(p: TestPlan, result: TestResult, expected: list[np.ndarray | None],
                     actual: Sequence[np.ndarray], out: Path | None) -> None:
    """The test's verdict on what its function returned: each output with an expected
    value compared within the plan's thresholds; a failing output is kept in `out`."""
    test = p.test
    if expected and len(expected) != len(actual):
        # iree-run-module: "expected N list elements but M provided"
        result.status, result.phase = "failed", "compare"
        result.message = (f"{len(expected)} expected outputs but {test.run_function} "
                          f"returned {len(actual)} results (iree-run-module fails this too)")
        return
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
        result.status = "failed"
        result.message = "\n".join(o.describe() for o in failed)
    else:
        result.status = "passed"


def _run_and_compare(p: TestPlan, vmfbs: list[Path], result: TestResult,
                     out: Path | None) -> None:
    from runner.model.pipeline.iree_session import IreeSession, ModuleFiles

    test = p.test
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
                if path is not None and array is not None and tensor_format(path) == ".irpa":
                    write_tensor(out / f"{flag}{i}.npy", array)
    try:
        session = IreeSession(p.device)
    except RunnerError as e:
        result.status, result.phase, result.message = "error", "run", str(e)
        return
    start = time.perf_counter()
    try:
        session.load(ModuleFiles(test.name, tuple(vmfbs), p.weights))
        fn = session.function(test.name, test.run_function, where(test, "run_function"))
        actual = fn(*inputs)
    except RunnerError as e:
        result.run_seconds = time.perf_counter() - start
        result.status, result.phase, result.message = "failed", "run", str(e)
        return
    finally:
        session.close()
    result.run_seconds = time.perf_counter() - start
    result.actual = actual
    _compare_outputs(p, result, expected, actual, out)


def check(tests: list[GoldenTest], opts: CheckOptions, *, echo: bool = True) -> CheckReport:
    """Runs every test; with `opts.out`, writes junit.xml, summary.md and results.json."""
    compiler = compiler_info()
    start = time.perf_counter()
    results = []
    try:
        for test in tests:
            result = run_test(test, opts, compiler)
            results.append(result)
            if echo:
                print(console_line(result, opts.dry_run), flush=True)
    finally:
        if opts.timeout is not None and not opts.dry_run:
            _stop_resource_tracker()
    report = CheckReport(results, opts, compiler, time.perf_counter() - start)
    if opts.out is not None and not opts.dry_run:
        write_reports(report, opts.out)
    if echo and not opts.dry_run:
        counts = ", ".join(f"{n} {s}" for s, n in report.counts().items())
        print(f"{len(results)} tests in {report.seconds:.1f}s: {counts}", file=sys.stderr)
    return report
