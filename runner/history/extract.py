"""What a finished command measured, read from the files it wrote: one extraction, used at
the end of a command (runner/history/record.py) and by `runner history import DIR`.

Each command's out dir already holds its results; nothing here measures anything:

| command | read from |
|---|---|
| run | results.json (else the run's report, collected again), run.json |
| bench | bench.json (layouts, stage latencies, dispatch profiles), each layout's run.json |
| bench goldens | bench.json (`kind: bench-goldens`): time, dispatch count, size vs goldens |
| mlperf | mlperf.json (each LoadGen test, accuracy), work/run.json |
| validate | validate.json (build, scores, throughput) and run/ as a run |
| goldens check | results.json (each test's verdict, compile statistics), attempt.json |

Which command wrote a directory is its attempt record's (attempt.json), else the file only
that command writes. A directory of none of them is refused, naming what was looked for.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.base.outdir import RECORD, read_record
from runner.base.spread import Spread
from runner.history.environment import Environment, module_hashes
from runner.history.model import Metric, Result

MAX_JSON_BYTES = 64 << 20
TOP_DISPATCHES = 40  # per profiled stage: the rest is a tail of microsecond dispatches
RUN_CMD, BENCH_CMD, BENCH_GOLDENS_CMD, MLPERF_CMD, VALIDATE_CMD, GOLDENS_CHECK_CMD = (
    "run", "bench", "bench goldens", "mlperf", "validate", "goldens check")
RECORDED = (RUN_CMD, BENCH_CMD, BENCH_GOLDENS_CMD, MLPERF_CMD, VALIDATE_CMD, GOLDENS_CHECK_CMD)
# The file only that command writes, for a directory without an attempt record.
MARKERS = ((VALIDATE_CMD, "validate.json"), (MLPERF_CMD, "mlperf.json"), (RUN_CMD, "run.json"),
           (BENCH_CMD, "bench.json"), (GOLDENS_CHECK_CMD, "junit.xml"))
HOST_ARM = "host"  # a bench layout run with this host's IREE (runner.bench.sweep)
OUT_FIX = "pass the --out of a run, bench, bench goldens, mlperf, validate or goldens check"


def _json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise BadInput("larger than any file the runner writes", where=str(path),
                           fix=OUT_FIX)
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput("missing: the command did not finish writing its results",
                       where=str(path), fix=OUT_FIX) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadInput(f"cannot be read: {e}", where=str(path), fix=OUT_FIX) from None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _time(text: Any) -> datetime | None:
    """A runner timestamp (`2026-11-28T13:46:30+0000`, ISO) as naive UTC."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            when = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z")
        except ValueError:
            return None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when


def recorded_command(out: Path) -> str:
    """Which command wrote `out` (see the module docstring)."""
    record = read_record(out)
    if record is not None:
        command = str(record["command"])
        if command not in RECORDED:
            raise BadInput(f"`runner {command}` keeps no results for the history",
                           where=str(out / RECORD), fix=OUT_FIX)
        return command
    for command, marker in MARKERS:
        if (out / marker).is_file():
            if command == BENCH_CMD and _obj(_json(out / marker)).get("kind") == "bench-goldens":
                return BENCH_GOLDENS_CMD
            return command
    raise BadInput("holds no results of a command the history records (looked for "
                   f"{RECORD}, {', '.join(m for _, m in MARKERS)})", where=str(out), fix=OUT_FIX)


def extract(out: Path, command: str | None = None) -> list[Result]:
    """The results of the command that wrote `out` (one per IREE build it measured)."""
    out = Path(os.path.abspath(Path(out).expanduser()))
    if not out.is_dir():
        raise BadInput("not a directory", where=str(out), fix=OUT_FIX)
    command = command or recorded_command(out)
    base = _Base.of(out, command)
    try:
        return READERS[command](out, base)
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise BadInput(f"not results as the runner writes them ({type(e).__name__}: {e})",
                       where=str(out), fix=OUT_FIX) from None


class _Base:
    """What every result of one out dir shares: the command, when it finished (its attempt
    record's end, else its files' time), where, the command line, the environment its
    attempt ran in."""

    def __init__(self, out: Path, command: str, finished: datetime, machine: str,
                 exit_code: int | None, argv: list[str], started: str = "",
                 runner: dict[str, Any] | None = None, environment: Environment | None = None):
        self.out, self.command, self.finished = out, command, finished
        self.machine, self.exit_code, self.argv = machine, exit_code, argv
        self.runner = runner or {}
        self.environment = environment
        # The identity's time is when the attempt started: a later `--resume` that finds
        # nothing to do rewrites when it ended, and must not make it a new result.
        self.started = started or finished.isoformat()

    @classmethod
    def of(cls, out: Path, command: str) -> _Base:
        record = read_record(out) or {}
        attempts = [a for a in record.get("attempts") or [] if isinstance(a, dict)]
        last = attempts[-1] if attempts else {}
        finished = _time(last.get("ended"))
        if finished is None:
            newest = max((p.stat().st_mtime for p in out.iterdir() if p.is_file()),
                         default=out.stat().st_mtime)
            finished = datetime.fromtimestamp(newest, timezone.utc).replace(tzinfo=None)
        code = last.get("exit_code")
        return cls(out, command, finished.replace(microsecond=0), str(last.get("host") or ""),
                   code if isinstance(code, int) else None,
                   [str(a) for a in record.get("argv") or []], str(last.get("started") or ""),
                   _obj(last.get("runner")), Environment.from_dict(last.get("environment")))

    def _environment(self, modules: dict[str, str], fields: dict[str, Any]) -> Environment | None:
        """The attempt's environment with the result's runner and modules; None where
        neither was recorded (an out dir of a runner before environments)."""
        if self.environment is None and not modules:
            return None
        return (self.environment or Environment()).with_runner(
            {"version": fields["runner_version"], "commit": fields["runner_commit"]}
        ).with_modules(modules)

    def result(self, metrics: list[Metric], part: str = "",
               modules: dict[str, str] | None = None, **fields: Any) -> Result:
        fields.setdefault("machine", self.machine)
        if not fields.get("runner_version"):  # the attempt's runner, where the files name none
            fields["runner_version"] = str(self.runner.get("version") or "")
            fields["runner_commit"] = str(self.runner.get("commit") or "")
        fields = {k: ("" if v is None else v) for k, v in fields.items()}
        fields["environment"] = self._environment(modules or {}, fields)
        identity = "\0".join([self.command, str(self.out), self.started, part])
        details = {"argv": self.argv, **fields.pop("details", {})}
        return Result(key=hashlib.sha256(identity.encode()).hexdigest()[:40],
                      command=self.command, out_dir=str(self.out), finished_at=self.finished,
                      exit_code=self.exit_code, metrics=tuple(metrics), details=details,
                      **fields)


# --- a run dir -----------------------------------------------------------------------------


def _run_report(run_dir: Path) -> dict[str, Any]:
    """The run's results.json, or the same record collected from the run now (a run whose
    reports were not written: validate's, mlperf's)."""
    path = run_dir / "results.json"
    if path.is_file():
        return _obj(_json(path))
    from runner.report.collect import collect
    from runner.report.results import results

    return results(collect(run_dir))


LAYOUT_WORDS = (("partition", "partition"), ("devices", "devices"), ("cpd", "cpd"),
                ("batch_size", "bs"), ("vae_batch_size", "vae bs"))


def _layout_text(layout: dict[str, Any]) -> str:
    """`devices 0-7, cpd 1, bs 32, vae bs 1`: a layout as one series label."""
    return ", ".join(f"{word} {layout[k]}" for k, word in LAYOUT_WORDS
                     if layout.get(k) not in (None, ""))


def _device(manifest: dict[str, Any]) -> str:
    target = _obj(_obj(manifest.get("profile_config")).get("target"))
    backend, chip = target.get("backend"), target.get("chip")
    return ":".join(str(p) for p in (backend, chip) if p) or str(
        _obj(manifest.get("layout")).get("backend") or "")


def _iree(iree: dict[str, Any]) -> dict[str, Any]:
    """compiler_/runtime_ version and commit from a provenance record (run.json's `iree`,
    bench.json's `versions`)."""
    compiler = _obj(iree.get("compiler")) or _obj(iree.get("iree.compiler"))
    runtime = _obj(iree.get("iree.runtime"))
    return {"compiler_version": str(compiler.get("version") or ""),
            "compiler_commit": str(compiler.get("commit") or "").replace("unknown", ""),
            "runtime_version": str(runtime.get("version") or ""),
            "runtime_commit": str(runtime.get("commit") or "").replace("unknown", "")}


def _manifest(run_dir: Path) -> dict[str, Any]:
    return _obj(_json(run_dir / "run.json"))


class _Numbers:
    """A run report's numbers read strictly: a field that holds something else than a
    number (a string where a time belongs) refuses the file, naming it and the field,
    rather than being skipped or ending in a traceback."""

    def __init__(self, where: str):
        self.where = where

    def get(self, value: Any, field: str) -> float | None:
        if value is None:
            return None
        number = _num(value)
        if number is None:
            raise BadInput(f"`{field}` is {json.dumps(value)[:60]}, not a number",
                           where=f"{self.where}: {field}",
                           fix="write the run's reports again (`runner report RUN_DIR`), or "
                           "leave this run dir out of the import")
        return number


def _range_metric(name: str, check: Any, read: _Numbers, judged: bool) -> Metric | None:
    """A score with its range; its verdict only where it was `judged` (a subset's score is
    not: the ranges hold for the full set)."""
    check = _obj(check)
    value = read.get(check.get("score"), f"scores.{name}.score")
    if value is None:
        return None
    low, high = [*list(check.get("range") or []), None, None][:2]
    verdict = None if not judged or "pass" not in check else (
        "pass" if check["pass"] else "fail")
    return Metric(name, "", value, None, read.get(low, f"scores.{name}.range[0]"),
                  read.get(high, f"scores.{name}.range[1]"), verdict)


def _stage_means(workers: list[Any], read: _Numbers) -> dict[str, float]:
    """Each stage's ms per call over the run's workers, weighted by the samples each made."""
    sums: dict[str, list[float]] = {}
    for i, w in enumerate(workers):
        w = _obj(w)
        weight = read.get(w.get("samples"), f"workers[{i}].samples") or 1.0
        for stage, ms in _obj(w.get("stage_ms")).items():
            value = read.get(ms, f"workers[{i}].stage_ms.{stage}")
            if value is not None:
                total = sums.setdefault(stage, [0.0, 0.0])
                total[0] += value * weight
                total[1] += weight
    return {stage: s / n for stage, (s, n) in sums.items() if n}


def run_metrics(report: dict[str, Any], where: str = "results.json") -> list[Metric]:
    """A run's numbers: FID and CLIP with MLPerf's ranges (judged only on the full set),
    samples/s, ms per stage."""
    read = _Numbers(where)
    scores = _obj(report.get("scores"))
    judged = not scores.get("subset") and scores.get("verdict") != "subset"
    out = [m for m in (_range_metric("fid", scores.get("fid"), read, judged),
                       _range_metric("clip", scores.get("clip"), read, judged))
           if m is not None]
    rate = read.get(_obj(report.get("timings")).get("samples_per_s"), "timings.samples_per_s")
    if rate is not None:
        out.append(Metric("samples_per_s", "", rate))
    out += [Metric("stage_ms", stage, ms) for stage, ms
            in sorted(_stage_means(list(report.get("workers") or []), read).items())]
    return out


def _run_fields(run_dir: Path, report: dict[str, Any]) -> dict[str, Any]:
    manifest = _manifest(run_dir)
    host = _obj(report.get("host")) or _obj(manifest.get("host"))
    return {"profile": str(report.get("profile") or manifest.get("profile") or ""),
            "model": str(report.get("model") or _obj(manifest.get("model")).get("name") or ""),
            "layout": _layout_text(_obj(manifest.get("layout"))),
            "device": _device(manifest), "machine": str(host.get("hostname") or ""),
            **_iree(_obj(manifest.get("iree")))}


def _run_conditions(run_dir: Path) -> dict[str, Any]:
    """What else the machine did while the run's last attempt ran, where it was kept."""
    attempts = [_obj(a) for a in _manifest(run_dir).get("attempts") or []]
    kept = next((a["conditions"] for a in reversed(attempts)
                 if isinstance(a.get("conditions"), dict)), None)
    return {"conditions": kept} if kept else {}


def _run(out: Path, base: _Base) -> list[Result]:
    report = _run_report(out)
    metrics = run_metrics(report, str(out / "results.json"))
    return [base.result(metrics, verdict=str(report.get("verdict") or ""),
                        details=_run_conditions(out), modules=module_hashes(_manifest(out)),
                        **_run_fields(out, report))]


# --- bench, bench goldens ------------------------------------------------------------------


def _stage_metrics(stage: dict[str, Any]) -> list[Metric]:
    subject = f"{stage.get('stage')} bs{stage.get('batch_size')}"
    out = []
    mean = _num(_obj(stage.get("latency_ms")).get("mean_ms"))
    if mean is not None:
        out.append(Metric("stage_ms", subject, mean))
    profile = _obj(stage.get("dispatch_profile"))
    count = _num(profile.get("dispatches_per_call"))
    if count is not None:
        out.append(Metric("dispatch_count", subject, count))
    for row in list(profile.get("dispatches") or [])[:TOP_DISPATCHES]:
        ms = _num(_obj(row).get("ms_per_call"))
        if ms is not None:
            out.append(Metric("dispatch_ms", f"{subject}: {row.get('key') or row.get('name')}",
                              ms))
    return out


def _stage_noise(stages: list[Any]) -> dict[str, Any]:
    """Each timed stage's repetitions (median, interval) and conditions, by its subject."""
    spreads, conditions = {}, {}
    for stage in map(_obj, stages):
        subject = f"{stage.get('stage')} bs{stage.get('batch_size')}"
        spread = _obj(stage.get("latency_ms")).get("spread")
        if Spread.from_dict(spread) is not None:
            spreads[subject] = spread
        if isinstance(stage.get("conditions"), dict):
            conditions[subject] = stage["conditions"]
    return {"spread": spreads, "conditions": conditions}


def _bench(out: Path, base: _Base) -> list[Result]:
    bench = _obj(_json(out / "bench.json"))
    versions = _obj(bench.get("versions"))
    groups: dict[str, list[dict[str, Any]]] = {}
    for layout in bench.get("layouts") or []:
        arm = str(_obj(layout).get("iree") or "")
        groups.setdefault("" if arm == HOST_ARM else arm, []).append(_obj(layout))
    results = []
    for build, layouts in (groups or {"": []}).items():
        metrics: list[Metric] = []
        modules: dict[str, str] = {}
        fields: dict[str, Any] = {"profile": str(bench.get("profile") or ""),
                                  "model": str(bench.get("model") or ""), "build": build,
                                  "machine": str(_obj(versions.get("host")).get("hostname")
                                                 or base.machine), **_iree(versions)}
        for layout in layouts:
            rate = _num(layout.get("samples_per_s"))
            if layout.get("status") == "ok" and rate is not None:
                metrics.append(Metric("samples_per_s", str(layout.get("label")), rate))
            run_dir = layout.get("run_dir")
            if run_dir and (Path(run_dir) / "run.json").is_file():
                manifest = _manifest(Path(run_dir))
                modules.update(module_hashes(manifest, f"{layout.get('label')}: "))
                fields["device"] = fields.get("device") or _device(manifest)
                if build:  # the arm's own IREE, as its image ran it
                    fields.update(_iree(_obj(manifest.get("iree"))))
        if not build:  # stage latencies are this host's IREE's (bench's host_only)
            metrics += [m for s in bench.get("stages") or [] for m in _stage_metrics(_obj(s))]
            fields["details"] = _stage_noise(bench.get("stages") or [])
        results.append(base.result(metrics, build, modules, verdict="ok" if bench.get(
            "exit_code") == 0 else "error", **fields))
    return results


def _golden_metric(name: str, check: dict[str, Any] | None, value: Any, subject: str
                   ) -> Metric | None:
    check = _obj(check)
    measured = _num(check.get("measured"))
    measured = measured if measured is not None else _num(value)
    if measured is None:
        return None
    ok = check.get("ok")
    return Metric(name, subject, measured, _num(check.get("golden")), None,
                  _num(check.get("limit")), None if ok is None else ("pass" if ok else "fail"))


def _bench_goldens(out: Path, base: _Base) -> list[Result]:
    bench = _obj(_json(out / "bench.json"))
    versions = _obj(bench.get("versions"))
    metrics: list[Metric] = []
    files, skus, modules = {}, set(), {}
    spreads, conditions = {}, {}
    for g in bench.get("goldens") or []:
        g = _obj(g)
        name = str(g.get("name"))
        files[name] = str(g.get("file") or "")
        if g.get("vmfb_sha256"):
            modules[name] = str(g["vmfb_sha256"])
        skus.add(str(g.get("sku") or ""))
        checks = {str(_obj(c).get("name")): _obj(c) for c in g.get("checks") or []}
        latency = _obj(g.get("latency_ms"))
        if Spread.from_dict(latency.get("spread")) is not None:
            spreads[name] = latency["spread"]
        if isinstance(g.get("conditions"), dict):
            conditions[name] = g["conditions"]
        for metric, key, value in (("time_ms", "time_ms", latency.get("mean_ms")),
                                   ("dispatch_count", "dispatch_count", g.get("dispatch_count")),
                                   ("size_bytes", "size_bytes", g.get("size_bytes"))):
            m = _golden_metric(metric, checks.get(key), value, name)
            if m is not None:
                metrics.append(m)
    runner = _obj(bench.get("runner"))
    return [base.result(metrics, verdict="pass" if bench.get("exit_code") == 0 else "fail",
                        sku=",".join(sorted(skus)), profile=str(bench.get("profile") or ""),
                        runner_version=str(runner.get("version") or ""),
                        runner_commit=str(runner.get("commit") or ""),
                        details={"files": files, "spread": spreads, "conditions": conditions},
                        modules=modules,
                        machine=str(_obj(versions.get("host")).get("hostname") or base.machine),
                        **_iree(versions))]


# --- mlperf, validate, goldens check -------------------------------------------------------


def _mlperf(out: Path, base: _Base) -> list[Result]:
    record = _obj(_json(out / "mlperf.json"))
    metrics: list[Metric] = []
    for test in record.get("tests") or []:
        test = _obj(test)
        summary = _obj(test.get("summary"))
        rate = _num(summary.get("samples_per_second"))
        key = str(test.get("key") or test.get("name"))
        if rate is not None:
            metrics.append(Metric("samples_per_s", key, rate,
                                  verdict={"VALID": "pass", "INVALID": "fail"}.get(
                                      str(summary.get("result")))))
        p99 = _num(_obj(summary.get("latency_ms")).get("p99"))
        if p99 is not None:
            metrics.append(Metric("latency_ms", f"{key} p99", p99))
    for scenario, acc in _obj(record.get("accuracy")).items():
        for name in ("fid", "clip"):
            value = _num(_obj(acc).get(name))
            if value is not None:
                metrics.append(Metric(name, str(scenario), value))
    work = Path(str(record.get("work_dir") or out / "work"))
    fields: dict[str, Any] = {"profile": str(record.get("profile") or "")}
    if (work / "run.json").is_file():
        manifest = _manifest(work)
        fields["modules"] = module_hashes(manifest)
        fields.update(layout=_layout_text(_obj(manifest.get("layout"))),
                      device=_device(manifest),
                      model=str(_obj(manifest.get("model")).get("name") or ""),
                      machine=str(_obj(manifest.get("host")).get("hostname") or base.machine),
                      **_iree(_obj(manifest.get("iree"))))
    runner = _obj(record.get("runner"))
    return [base.result(metrics, verdict=str(record.get("status") or ""),
                        runner_version=str(runner.get("version") or ""),
                        runner_commit=str(runner.get("commit") or ""), **fields)]


def _validate(out: Path, base: _Base) -> list[Result]:
    state = _obj(_json(out / "validate.json"))
    run_dir = out / "run"
    metrics: list[Metric] = []
    fields: dict[str, Any] = {"profile": str(state.get("profile") or ""),
                              "build": str(state.get("iree") or "")}
    if (run_dir / "run.json").is_file():
        report = _run_report(run_dir)
        metrics = run_metrics(report, str(run_dir / "results.json"))
        fields.update(_run_fields(run_dir, report), modules=module_hashes(_manifest(run_dir)))
        fields["profile"] = str(state.get("profile") or fields["profile"])
    outcome = state.get("outcome") or ("PASS" if state.get("passed") else "FAIL")
    return [base.result(metrics, verdict=str(outcome), **fields)]


def _goldens_check(out: Path, base: _Base) -> list[Result]:
    record = _obj(_json(out / "results.json"))
    compiler = _obj(record.get("compiler"))
    metrics: list[Metric] = []
    for test in record.get("results") or []:
        test = _obj(test)
        name, status = str(test.get("name")), str(test.get("status"))
        if status in ("passed", "failed", "error", "xfailed"):
            metrics.append(Metric("passed", name, 1.0 if status in ("passed", "xfailed")
                                  else 0.0, verdict=status))
        for stat in test.get("compile_stats") or []:
            stat = _obj(stat)
            value = _num(stat.get("measured"))
            if value is None:
                continue
            ok = stat.get("ok")
            name_ = {"binary_size": "size_bytes"}.get(str(stat.get("name")),
                                                      str(stat.get("name")))
            metrics.append(Metric(name_, name, value, _num(stat.get("golden")), None,
                                  _num(stat.get("golden")),
                                  None if ok is None else ("pass" if ok else "fail")))
    return [base.result(metrics, verdict="pass" if record.get("exit_code") == 0 else "fail",
                        compiler_version=str(compiler.get("version") or ""),
                        compiler_commit=str(compiler.get("commit") or ""))]


READERS: dict[str, Callable[[Path, _Base], list[Result]]] = {
    RUN_CMD: _run, BENCH_CMD: _bench, BENCH_GOLDENS_CMD: _bench_goldens, MLPERF_CMD: _mlperf,
    VALIDATE_CMD: _validate, GOLDENS_CHECK_CMD: _goldens_check}
