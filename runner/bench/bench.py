"""`runner bench`: layouts' throughput, stage latencies and a tuning-spec A/B, into one
`bench.json` + `bench.md` (benchmark goldens are `runner bench goldens`: runner/bench/goldens.py).

Everything measured is real: each layout is a run (runner/lifecycle.py) into
`<out>/runs/<layout>/` (its own run.json and reproduce.sh), stage latencies come from
`iree-benchmark-module` on inputs one pipeline pass recorded (`<out>/stages/bs<k>/`), the
A/B arms are compiled through the same cache (`<out>/ab/bs<k>/{without,with}/`). A dry run
prints every command instead.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_json, atomic_write_text, sha256_file
from runner.base.steps import StepStatus
from runner.bench import dispatch_profile as dp
from runner.bench import dispatch_replay, sweep, tuning
from runner.bench import stages as st
from runner.bench import throughput as tp
from runner.bench.report import markdown
from runner.bench.result import ABResult, BenchOptions, BenchReport
from runner.config.layout import Plan
from runner.config.profile import Profile
from runner.model.compiled_model import CompiledModel, compile_model

BENCH_JSON = "bench.json"
BENCH_MD = "bench.md"


def versions() -> dict[str, Any]:
    from runner.base.iree_tools import compiler_here, found_path
    from runner.base.provenance import host_info, iree_provenance
    from runner.model.compile import cached_compilers

    c = compiler_here()
    carried = cached_compilers() if c is None else []
    compiler = ({"version": c.version, "commit": c.commit} if c is not None
                else {"version": carried[0][0], "commit": carried[0][1], "elsewhere": True}
                if len(carried) == 1 else {"version": None, "commit": None, "elsewhere": True})
    return {**iree_provenance(), "compiler": compiler,
            "iree-benchmark-module": found_path("iree-benchmark-module"),
            "host": host_info()}


def _say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


class _Stages:
    """Compiled models and recorded inputs per batch size, made once and shared by the
    stage benchmarks and the A/B arms; `attempt` (the out dir's record) keeps what an
    interrupted bench recorded and measured."""

    def __init__(self, out: Path, dry_run: bool, attempt: Any = None):
        self.out, self.dry_run, self.attempt = out, dry_run, attempt
        self._inputs: dict[int, dict[str, tuple[Path, ...]]] = {}

    def inputs(self, compiled: CompiledModel) -> dict[str, tuple[Path, ...]] | None:
        if self.dry_run:
            return None
        bs = compiled.batch_size
        if bs not in self._inputs:
            self._inputs[bs] = self._kept_inputs(bs) or self._capture(compiled)
        return self._inputs[bs]

    def _capture(self, compiled: CompiledModel) -> dict[str, tuple[Path, ...]]:
        bs = compiled.batch_size
        _say(f"recording stage inputs from one pipeline pass at batch {bs}")
        start = time.perf_counter()
        inputs = st.capture_inputs(compiled, self.input_dir(bs))
        if self.attempt is not None:
            self.attempt.record_part(f"inputs:bs{bs}", StepStatus.FINISHED,
                                     time.perf_counter() - start,
                                     {role: {str(p): sha256_file(p) for p in paths}
                                      for role, paths in inputs.items()})
        return inputs

    def _kept_inputs(self, bs: int) -> dict[str, tuple[Path, ...]] | None:
        """The inputs an interrupted attempt recorded, while every file is as written."""
        if not self.attempt or not self.attempt.resumed:
            return None
        recorded = self.attempt.kept(f"inputs:bs{bs}", lambda detail: all(
            Path(p).is_file() and sha256_file(Path(p)) == digest
            for files in detail.values() for p, digest in files.items()))
        if recorded is None:
            return None
        return {role: tuple(Path(p) for p in files) for role, files in recorded.items()}

    def input_dir(self, bs: int) -> Path:
        return self.out / "stages" / f"bs{bs}"


@dataclass(frozen=True)
class _StageCase:
    """A runnable layout whose first worker's device view a batch size's stage benchmarks
    (and A/B arms) run in: a layout case with its profile and plan known to be there."""

    label: str
    profile: Profile
    plan: Plan

    @property
    def batch_size(self) -> int:
        return self.profile.layout.batch_size

    @property
    def vae_batch_size(self) -> int:
        return self.profile.layout.vae_batch_size


@dataclass(frozen=True)
class BenchPlan:
    """What a bench will do, settled from its options and profile before anything runs, so
    that every refusal comes before any work and each phase reads only its part."""

    out: Path  # "<out>" in a dry run without --out
    cases: list[tp.LayoutCase]  # every layout asked for, skipped ones included
    sample_ids: list[int]  # the throughput runs' samples (none without throughput)
    # Stages, A/B and spec dumps measure this host's IREE: only host-only benches have any.
    stage_cases: dict[int, _StageCase]  # by batch size, the first runnable layout using it


def plan_bench(profile: Profile, out: Path | None, opts: BenchOptions, attempt: Any = None
               ) -> BenchPlan:
    """The bench's plan; refuses options that cannot go together, an out dir already
    holding a bench, a bad tuning spec and a sweep with nothing runnable."""
    if out is None:
        if not opts.dry_run:
            raise BadInput("--out DIR is required (runs, inputs and reports go there)",
                           where="runner bench",
                           fix="add --out runs/NAME, or --dry-run to see the plan")
        out = Path("<out>")
    if not opts.dry_run and attempt is None and (out / BENCH_JSON).exists():
        raise BadInput("this directory already holds a bench", where=str(out),
                       fix="pass another --out")
    _refuse_conflicts(opts)
    if opts.ab_tuning_spec is not None:  # a bad spec fails now, not after the layout runs
        tuning.ab_profiles(profile, opts.ab_tuning_spec, dry_run=opts.dry_run)
    cases = tp.layout_cases(profile, list(opts.devices), list(opts.cpds),
                            list(opts.batch_sizes), list(opts.vae_batch_sizes))
    _refuse_all_skipped(profile, cases)
    stage_cases: dict[int, _StageCase] = {}
    for c in cases if opts.host_only else []:
        if c.profile is not None and c.plan is not None:
            stage_cases.setdefault(c.profile.layout.batch_size,
                                   _StageCase(c.label, c.profile, c.plan))
    return BenchPlan(out, cases, list(opts.sample_ids) if opts.throughput else [],
                     stage_cases)


def _refuse_conflicts(opts: BenchOptions) -> None:
    """Options that contradict each other, refused before any work."""
    if not opts.host_only and (opts.ab_tuning_spec or opts.dump_tuning_specs):
        raise BadInput("--ab-tuning-spec and --dump-tuning-specs use this host's IREE and "
                       "devices", where="--iree/--image/--executor",
                       fix="run them in their own `runner bench` on the machine to measure "
                       "(on a Slurm node: srun runner bench --no-throughput ...)")
    if opts.settings.dispatch_calls and not opts.stages:
        raise BadInput("--dispatches profiles the stage benchmarks", where="--dispatches",
                       fix="drop --no-stages")
    if opts.executor == "slurm" and opts.slurm is None:
        raise BadInput("--executor slurm needs Slurm options", where="runner bench",
                       fix="pass --nodes and --slurm-partition with --executor slurm")


def run_bench(profile: Profile, out: Path | None, opts: BenchOptions,
              echo: Callable[[str], None] = print, attempt: Any = None) -> BenchReport:
    """Benchmarks a profile, as `runner bench` does; writes bench.json and bench.md to out.

    Args:
        profile: the `Profile` (`runner.config.profile.load_profile`).
        out: the bench's directory (None only with `opts.dry_run`).
        opts: samples, layout sweep, throughput and/or stage latencies, `dry_run` (print
            the commands, run nothing), executor or IREE builds.
        echo: called with each command line the bench runs.
        attempt: the out dir's record (runner/base/outdir.py): an interrupted bench's
            finished layouts and stage latencies are kept, not measured again.

    Returns:
        The `BenchReport` (`exit_code`: 1 when a layout run, stage benchmark or A/B
            arm failed or stopped short, else 0).

    Raises:
        BadInput: options that do not go together, an out dir holding a bench, a bad
            tuning spec, or a sweep with nothing runnable.
    """
    start = time.perf_counter()
    plan = plan_bench(profile, out, opts, attempt)
    report = BenchReport(profile.name, profile.model.name, opts, plan.out, versions(),
                         precision={"dtype": profile.model.dtype,
                                    "vae_dtype": profile.model.vae_dtype})

    def emit(line: str) -> None:
        report.commands.append(line)
        echo(line)

    _throughput(plan, opts, report, emit, attempt)
    _stage_latencies(plan, profile, opts, report, _Stages(plan.out, opts.dry_run, attempt),
                     emit)
    _beside_in_run(report, plan.stage_cases)
    if opts.dump_tuning_specs:  # the final tuning specs, dumped into the out dir
        report.tuning_specs = _dump(profile, plan.stage_cases, plan.out, opts, emit)
    report.seconds = time.perf_counter() - start
    if not opts.dry_run:
        atomic_write_json(plan.out / BENCH_JSON, report.to_dict())
        atomic_write_text(plan.out / BENCH_MD, markdown(report))
        _say(f"reports: {plan.out / BENCH_JSON}, {plan.out / BENCH_MD}")
    return report


def _throughput(plan: BenchPlan, opts: BenchOptions, report: BenchReport,
                emit: Callable[[str], None], attempt: Any) -> None:
    """Phase 1: every (IREE build, layout) combination run (or printed) into the report's
    layouts; a bench without it still names its skipped layouts in a dry run."""
    out, ids = plan.out, plan.sample_ids
    if opts.throughput:
        report.arms = sweep.make_arms(opts.iree, opts.image, opts.executor, out, opts.dry_run,
                                      emit)
        combos = sweep.combinations(report.arms, plan.cases, out, list(opts.run_argv),
                                    opts.executor, opts.slurm)
        if opts.dry_run:
            for combo in combos:
                for line in sweep.sweep_dry_run_lines(combo, ids, opts.slurm):
                    emit(line)
                report.layouts.append(tp.layout_result(
                    combo.case, combo.run_dir, combo.argv(ids), combo.arm.spec,
                    combo.arm.image or ""))
                if combo.case.plan is not None:
                    report.layouts[-1].status = "planned"
        else:
            report.layouts = sweep.run_combinations(combos, ids, opts.slurm, out, attempt)
        tp.mark_best(report.layouts)
    elif opts.dry_run:
        for case in plan.cases:
            if case.plan is None:
                emit(f"# layout {case.label}: skipped: {case.skip_reason}")
    if not opts.host_only and opts.stages:
        what = ("stage latencies and dispatch profiles" if opts.settings.dispatch_calls
                else "stage latencies")
        report.notes.append(f"{what} not measured: they run this host's IREE on "
                            "this host's devices, which is not what --iree/--image/"
                            "--executor slurm compare (measure them on a node with "
                            "`runner bench --no-throughput`)")


def _stage_latencies(plan: BenchPlan, profile: Profile, opts: BenchOptions,
                     report: BenchReport, shared: _Stages, emit: Callable[[str], None]
                     ) -> None:
    """Phase 2: stage latencies, and the A/B arms, at each batch size the runnable layouts
    use; the A/B's arm without the spec stands for the stages when it is the profile."""
    if opts.ab_tuning_spec is not None:
        report.ab = ABResult(str(opts.ab_tuning_spec))
    for bs, case in plan.stage_cases.items():
        if report.ab is None:
            if opts.stages:
                report.stages += _run(_plans(case, case.profile, shared, shared.input_dir(bs),
                                             opts, emit, ""), opts, "", shared)
            continue
        without, with_spec, same = _ab(profile, case, shared, opts, emit)
        report.ab.without += without
        report.ab.with_spec += with_spec
        if opts.stages:
            report.stages += without if same else _run(_plans(
                case, profile, shared, shared.input_dir(bs), opts, emit, ""), opts, "", shared)


def _refuse_all_skipped(profile: Profile, cases: list[tp.LayoutCase]) -> None:
    """A bench whose every layout is skipped would measure nothing: refused before any
    work (dry run included), each layout's reason named, rather than a report of skips."""
    if any(c.plan is not None for c in cases):
        return
    reasons = "; ".join(f"{c.label}: {c.skip_reason}" for c in cases)
    raise BadInput(f"every layout is skipped, so nothing would be measured ({reasons})",
                   where="--devices/--cpd/--batch-size/--vae-batch-size",
                   fix="choose layouts that the model and this machine can run (each "
                   f"reason says what is wrong; `runner plan --profile {profile.name}` "
                   "shows the profile's own layout)")


def _plans(case: _StageCase, profile: Profile, shared: _Stages, out_dir: Path,
           opts: BenchOptions, emit: Callable[[str], None], label: str,
           inputs_from: CompiledModel | None = None) -> list[st.StagePlan]:
    """The stage benchmarks of `profile` at the case's batch sizes, as the case's first
    worker sees the device; a dry run prints them (and the compiles they need)."""
    worker = case.plan.workers[0]
    compiled = compile_model(profile, case.batch_size, case.vae_batch_size,
                             dry_run=opts.dry_run, say=emit)
    # A dry run of a model not exported yet printed the export above; the config that
    # export writes is the profile's model, as compile's dry run plans from it.
    unexported = opts.dry_run and not Path(compiled.model_config).is_file()
    plans = st.plan_stages(compiled, out_dir, opts.settings, worker=worker,
                           inputs=shared.inputs(inputs_from or compiled),
                           only=opts.stage_filter, config=profile.model if unexported else None)
    if opts.dry_run:
        emit(f"# stages{label} at batch {case.batch_size} (inputs recorded from one pipeline "
             f"pass into {shared.input_dir(case.batch_size)})")
        for c in compiled.compiled:
            emit(shlex.join(c.command))
        missing = dp.unavailable() if opts.settings.dispatch_calls else None
        for p in plans:
            emit(p.command.text())
            if p.profile is not None:
                for line in ([f"# no dispatch profile: {missing}"] if missing
                             else p.profile.lines()):
                    emit(line)
                emit(dispatch_replay.record_command(
                    p.command, p.profile.directory / st.REPLAY_DIR).text())
                emit(f"# then {dispatch_replay.DUMP_TOOL} --format=jsonl on it, and "
                     f"{dispatch_replay.EXECUTABLE_TOOL} on each dispatch it recorded")
    return plans


def _beside_in_run(report: BenchReport, per_batch: dict[int, _StageCase]) -> None:
    """Each stage's in-run ms/call: the mean per call of the worker whose device view the
    stage ran in, inside its layout's run (none without a throughput run)."""
    def in_run(result: st.StageResult) -> st.StageResult:
        case = per_batch.get(result.batch_size)
        run = next((r for r in report.layouts if case is not None and r.label == case.label
                    and r.iree == tp.HOST_IREE and r.status == "ok"), None)
        if case is None or run is None:
            return result
        first = case.plan.workers[0].name
        worker = next((w for w in run.per_worker if w.worker == first), None)
        ms = worker.stage_ms.get(result.stage) if worker else None
        return dataclasses.replace(result, in_run_ms=ms)

    report.stages = [in_run(r) for r in report.stages]


def _run(plans: list[st.StagePlan], opts: BenchOptions, label: str, shared: _Stages
         ) -> list[st.StageResult]:
    if opts.dry_run:
        return [st.StageResult(p.stage, p.function, p.batch_size, None, p.command.text(),
                               view=p.view) for p in plans]
    return st.run_stages(plans, opts.settings, label, shared.attempt)


def _stage_submodels(profile: Profile, stage_filter: tuple[str, ...]) -> list[str]:
    """The submodels the selected stages run (all of them without a filter)."""
    functions = profile.model.functions
    return list(dict.fromkeys(functions[role][0] for stage, role in st.stage_roles(functions)
                              if not stage_filter or stage in stage_filter))


def _only_needed(profile: Profile, stage_filter: tuple[str, ...]) -> Profile:
    """The profile with only the submodels the selected stages run, so the tuned arm (a
    cache miss: the spec is new) compiles nothing that is not benchmarked."""
    keep = _stage_submodels(profile, stage_filter)
    model = dataclasses.replace(profile.model, submodels={
        k: v for k, v in profile.model.submodels.items() if k in keep})
    return dataclasses.replace(profile, model=model)


def _ab(profile: Profile, case: _StageCase, shared: _Stages, opts: BenchOptions,
        emit: Callable[[str], None]
        ) -> tuple[list[st.StageResult], list[st.StageResult], bool]:
    """Both arms at the case's batch size, stage by stage A then B, so drift in the
    machine's load hits both alike. Returns (without, with, whether arm A is the profile
    itself, whose stage numbers it then stands for)."""
    spec = opts.ab_tuning_spec
    assert spec is not None
    without, with_spec = tuning.ab_profiles(profile, spec, dry_run=opts.dry_run)
    with_spec = _only_needed(with_spec, opts.stage_filter)
    base = compile_model(without, case.batch_size, case.vae_batch_size, dry_run=opts.dry_run)
    own = compile_model(profile, case.batch_size, case.vae_batch_size, dry_run=True)
    same = [c.key for c in base.compiled] == [c.key for c in own.compiled]
    ab_dir = shared.out / "ab" / f"bs{case.batch_size}"
    a = _plans(case, without, shared, ab_dir / "without", opts, emit, " (A/B: without spec)",
               inputs_from=base)
    b = _plans(case, with_spec, shared, ab_dir / "with", opts, emit,
               f" (A/B: with {spec.name})", inputs_from=base)
    a_res: list[st.StageResult] = []
    b_res: list[st.StageResult] = []
    for pa, pb in zip(a, b, strict=True):
        a_res += _run([pa], opts, " (A/B: without spec)", shared)
        b_res += _run([pb], opts, f" (A/B: with {spec.name})", shared)
    return a_res, b_res, same
def _dump(profile: Profile, per_batch: dict[int, _StageCase], out: Path,
          opts: BenchOptions, emit: Callable[[str], None]) -> list[str]:
    arms = []
    if opts.ab_tuning_spec is not None:
        arms.append(("with", tuning.ab_profiles(profile, opts.ab_tuning_spec,
                                                dry_run=opts.dry_run)[1]))
    if tuning.has_specs(profile):
        arms.append(("profile", profile))
    if not arms:
        _say("no tuning spec in play (no --ab-tuning-spec, profile has none): nothing to dump")
        return []
    submodels = _stage_submodels(profile, opts.stage_filter)
    written: list[str] = []
    for bs in per_batch or (profile.layout.batch_size,):
        for arm, arm_profile in arms:
            cmds = tuning.dump_commands(arm_profile, bs, out / "tuning-specs" / f"bs{bs}" / arm,
                                        dry_run=opts.dry_run, submodels=submodels)
            if opts.dry_run:
                emit(f"# tuning specs ({arm}, batch {bs})")
                for c in cmds:
                    emit(shlex.join(c))
                continue
            written += [str(p) for p in tuning.dump_specs(cmds)]
    return written
