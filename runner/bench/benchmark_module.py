"""`iree-benchmark-module`: build its command lines, run them, read their JSON.

Latency is the mean `real_time` over `--benchmark_repetitions` (the `mean` aggregate row,
which is what IREE CI's benchmark tests compare against `golden_time_ms`); with one
repetition Google Benchmark writes no aggregates, so the lone iteration row is used.
The function is looked up in the *last* `--module=` only (checked with 3.13: naming an
earlier module's function fails with NOT_FOUND), so a stage lists a submodel's modules up
to the one that exports its function: `run_forward` needs the unet module alone,
`produce_image_latents` the unet module and the pipeline module that calls into it.
"""

from __future__ import annotations

import json
import mmap
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.errors import BadInput, StepFailed, ToolFailed
from runner.base.fileio import atomic_write_text
from runner.base.iree_tools import tool_path
from runner.base.signals import import_held
from runner.base.spread import spread

TOOL = "iree-benchmark-module"
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
REPETITIONS_FLAG = "--benchmark_repetitions"
MIN_TIME_FLAG = "--benchmark_min_time"
WARMUP_FLAG = "--benchmark_min_warmup_time"


@dataclass(frozen=True)
class BenchCommand:
    """One `iree-benchmark-module` invocation; `env` holds only what differs from ours and
    `prefix` what runs it (a worker's NUMA binding and `taskset`), so the process runs, and
    the printed command reproduces, exactly the device view of the worker it stands for.
    `argv[0]` is the bare tool name, so a printed (dry-run) line reads the same on the lab
    machine it is meant for; `run` execs the tool runner.base.iree_tools resolves here."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    prefix: tuple[str, ...] = ()

    def text(self) -> str:
        env = [f"{k}={v}" for k, v in sorted(self.env.items())]
        return shlex.join([*(["env", *env] if env else []), *self.prefix, *self.argv])

    @property
    def device(self) -> str:
        """Its `--device=` value ("" when it names none)."""
        return next((a.split("=", 1)[1] for a in self.argv if a.startswith("--device=")), "")

    def launch_argv(self) -> list[str]:
        """What is executed: the prefix, then the tool as found (not a bare name)."""
        return [*self.prefix, tool_path(TOOL), *self.argv[1:]]


@dataclass(frozen=True)
class Latency:
    """Per-call wall time of one benchmarked function, in milliseconds."""

    mean_ms: float
    median_ms: float
    stddev_ms: float
    min_ms: float
    repetitions: int
    iterations: int  # calls per repetition (Google Benchmark picks it from --benchmark_min_time)
    mean_is_aggregate: bool = True  # False: no `mean` row (one repetition), mean computed here
    times_ms: tuple[float, ...] = ()  # each repetition's per-call time, in the order run

    def to_dict(self) -> dict:
        out: dict = {k: round(v, 6) if isinstance(v, float) else v
                     for k, v in self.__dict__.items()}
        out["times_ms"] = [round(t, 6) for t in self.times_ms]
        if self.times_ms:  # the repetitions' median and its interval (runner.base.spread)
            out["spread"] = spread(out["times_ms"]).to_dict()
        return out


def _ms(row: dict, where: str) -> float:
    unit = row.get("time_unit", "ns")
    if unit not in _UNIT_MS or not isinstance(row.get("real_time"), int | float):
        raise StepFailed(f"benchmark row {row.get('name')!r} has no real_time in a known unit",
                         where=where, fix="use an iree-benchmark-module that writes "
                         "--benchmark_format=json (IREE 3.x)")
    return float(row["real_time"]) * _UNIT_MS[unit]


def parse_benchmark_json(text: str, where: str = TOOL) -> Latency:
    """The latency in `iree-benchmark-module --benchmark_format=json` output."""
    # StepFailed, not ToolFailed: a profiled run reads a ToolFailed as "profiling is not
    # available here", and an unreadable result is the measurement's failure, not that.
    try:
        rows = json.loads(text)["benchmarks"]
    except (ValueError, KeyError, TypeError) as e:
        raise StepFailed(f"not Google Benchmark JSON output: {e}", where=where,
                         fix="run iree-benchmark-module with --benchmark_format=json") from e
    if len(rows) and rows[0].get("error_occurred"):
        raise StepFailed(f"benchmark failed: {rows[0].get('error_message')}", where=where,
                         fix="run the printed iree-benchmark-module command by hand to see it "
                         "fail")
    runs = [r for r in rows if r.get("run_type", "iteration") == "iteration"]
    if not runs:
        raise StepFailed("the output holds no benchmark runs", where=where,
                          fix="run the printed iree-benchmark-module command by hand; check "
                          "--benchmark-flag values")
    in_order = tuple(_ms(r, where) for r in runs)
    times = sorted(in_order)
    aggregates = {r.get("aggregate_name"): _ms(r, where) for r in rows
                  if r.get("run_type") == "aggregate"}
    mean = aggregates.get("mean", sum(times) / len(times))
    median = aggregates.get("median", times[len(times) // 2])
    stddev = aggregates.get("stddev", 0.0)
    return Latency(mean, median, stddev, times[0], len(runs), int(runs[0].get("iterations", 0)),
                   "mean" in aggregates, in_order)


def with_overrides(flags: Sequence[str], repetitions: int | None = None,
                   min_time: str | None = None, warmup: float | None = None) -> list[str]:
    """`flags` with the repetition / time flags replaced (appended when absent)."""
    over = {REPETITIONS_FLAG: repetitions, MIN_TIME_FLAG: min_time, WARMUP_FLAG: warmup}
    out = [f for f in flags
           if not any(f.startswith(k + "=") for k, v in over.items() if v is not None)]
    out += [f"{k}={v}" for k, v in over.items() if v is not None]
    return out


def command(*, device: str, modules: Sequence[Path | str], function: str,
            inputs: Sequence[str], parameters: Sequence[Path | str] = (),
            flags: Sequence[str] = (), env: Mapping[str, str] | None = None,
            runtime_flags: Sequence[str] = (), prefix: Sequence[str] = ()) -> BenchCommand:
    """`inputs` as `--input=` takes them: `@file.npy` or a shape-only `1x64xi64` (zeros)."""
    argv = [TOOL, f"--device={device}", *runtime_flags,
            *[f"--parameters=model={p}" for p in parameters],
            *[f"--module={m}" for m in modules], f"--function={function}",
            *[f"--input={i}" for i in inputs], "--benchmark_format=json", *flags]
    return BenchCommand(tuple(argv), dict(env or {}), tuple(prefix))


def run_benchmark(cmd: BenchCommand, raw_out: Path | None = None, timeout: float | None = None
                  ) -> Latency:
    """Runs the command (never through a shell); keeps its raw JSON next to the results."""
    try:
        proc = subprocess.run(cmd.launch_argv(), capture_output=True, text=True, check=False,
                              env={**os.environ, **cmd.env}, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise ToolFailed(f"{TOOL} ran past {timeout}s",
                         fix=f"reproduce with: {cmd.text()}") from e
    if proc.returncode != 0:
        output = (proc.stderr or proc.stdout).strip()
        raise ToolFailed(f"{TOOL} failed (exit {proc.returncode}):\n{output[-2000:]}",
                         returncode=proc.returncode, output=output,
                         fix=f"reproduce with: {cmd.text()}")
    if raw_out is not None:
        atomic_write_text(raw_out, proc.stdout)
    return parse_benchmark_json(proc.stdout, str(raw_out or TOOL))


def exported_functions(vmfb: Path) -> set[str]:
    """The function names a compiled module exports (read with the IREE runtime)."""
    rt = import_held("iree.runtime")

    try:
        with open(vmfb, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        module = rt.VmModule.wrap_buffer(rt.VmInstance(), mapped, close_buffer=True)
        return set(module.function_names)
    except (OSError, RuntimeError, ValueError) as e:
        raise BadInput(f"not a loadable IREE module: {e}", where=str(vmfb),
                       fix="compile it again with the IREE that runs it "
                       "(`runner compile`)") from e


def modules_for(vmfbs: Sequence[Path], function: str, where: str,
                fallback: int | None = None) -> tuple[Path, ...]:
    """`vmfbs` up to and including the first that exports `function`.

    For a dry run whose modules are not compiled yet, `fallback` says how many to take
    (None: all of them), since nothing can be inspected.
    """
    if not all(Path(v).is_file() for v in vmfbs):
        return tuple(vmfbs[: fallback or len(vmfbs)])
    for i, vmfb in enumerate(vmfbs):
        if function in exported_functions(Path(vmfb)):
            return tuple(vmfbs[: i + 1])
    known = sorted(set().union(*(exported_functions(Path(v)) for v in vmfbs)))
    raise BadInput(f"no module exports {function!r} (they export {known})", where=where,
                   fix="name a function the compiled modules export")
