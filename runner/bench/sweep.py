"""The throughput sweep: every (IREE build, layout) combination, as real runs.

An *arm* is one IREE build under comparison: this host's own (`host`), or a harness image
built from `--iree wheels:<v>|source:<sha>|build-dir:<path>` (a bare SHA means
`source:<sha>`) or given as `--image`. An image arm's modules come from the image's own
iree-compile and its workers run in its containers, so each arm is that build end to end.

Where the runs go:
- `local`/`docker`: one after another on this machine (the same cores for every one, so
  their numbers compare);
- `slurm`: one Slurm job per combination, all submitted before any is waited for, so the
  cluster runs them side by side; each is a full `runner run --executor slurm` (array tasks
  over one shared queue, failed tasks re-run), and the table is collected once every job
  has ended. Throughput is measured from the run's first node task starting to its last
  ending, so time spent waiting in the Slurm queue (reported apart) does not count.
  Combinations that share a node (a `--cpus-per-node` cluster) slow each other down;
  on lab nodes (`--exclusive`, the default) each job has its nodes to itself.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from runner.base import shellscript
from runner.base.errors import BadInput, RunnerError
from runner.base.steps import StepStatus
from runner.batch.cluster import SlurmOptions, slurm_flags
from runner.batch.executor_for import EXECUTORS
from runner.batch.executors import Execution, Executor, LocalExecutor, watch
from runner.batch.worker import task_path
from runner.bench import throughput as tp
from runner.docker.in_image import ImageCompiler
from runner.lifecycle import Lifecycle, executor_for
from runner.model.compiled_model import compile_model
from runner.preflight.gpus import SHARE_GPUS
from runner.preflight.run import PreflightRequest, run_preflight
from runner.rundir.directory import MANIFEST as RUN_MANIFEST
from runner.rundir.manifest import RunManifest


@dataclass
class IreeArm:
    """One IREE build: its spec as given, and its harness image (None: this host)."""

    spec: str
    image: str | None = None
    image_id: str | None = None
    build_command: str = ""
    compile_fn: Callable | None = None  # shared by the arm's runs: each module once

    @property
    def slug(self) -> str:
        """Its runs' directory under runs/ ("" for the host: runs/<layout> as before)."""
        return "" if self.image is None else self.image.split(":", 1)[-1].replace("/", "_")

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "image": self.image, "image_id": self.image_id,
                "build_command": self.build_command}


def make_arms(iree: tuple[str, ...], image: str | None, executor: str, out: Path,
              dry_run: bool, echo: Callable[[str], None] = print,
              base_image: str | None = None) -> list[IreeArm]:
    """The arms, images built (cache hits when unchanged) or, in a dry run, planned."""
    if executor not in EXECUTORS:
        raise BadInput(f"unknown executor {executor!r}", where="--executor",
                       fix=f"use one of {', '.join(EXECUTORS)}")
    if iree and image:
        raise BadInput("--iree builds the images; --image names one: pass one of them",
                       where="--image", fix="drop --image, or drop --iree")
    if executor == "local" and (iree or image):
        raise BadInput("--iree/--image run workers in harness images",
                       where="--executor local",
                       fix="add --executor docker (this machine) or --executor slurm")
    if executor == "docker" and not (iree or image):
        raise BadInput("--executor docker needs an IREE build to run",
                       where="--executor docker",
                       fix="pass --iree wheels:3.13.0 (builds the image) or --image TAG")
    if not iree and not image:
        return [IreeArm(tp.HOST_IREE)]
    from runner.docker.image import DEFAULT_BASE_IMAGE, build_image, parse_source

    arms = []
    if image:
        arms.append(IreeArm(f"image:{image}", image))
    sources = [parse_source(s, where="--iree") for s in iree]  # every build checked first
    for source in {s.spec: s for s in sources}.values():
        spec = source.spec
        built = build_image(source, dry_run=dry_run,
                            base_image=base_image or DEFAULT_BASE_IMAGE)
        command = shellscript.join(built.plan.command())
        state = "dry run" if dry_run else "cached" if built.cached else "built"
        print(f"bench: IREE {spec}: image {built.tag} ({state})", file=sys.stderr, flush=True)
        if dry_run:
            echo(f"# IREE {spec}: harness image")
            echo(command)
        arms.append(IreeArm(spec, built.tag, built.image_id, command))
    for arm in arms:
        arm.compile_fn = ImageCompiler(str(arm.image), out / "compile" / arm.slug, dry_run)
    return arms


@dataclass(frozen=True)
class Combination:
    arm: IreeArm
    case: tp.LayoutCase
    run_dir: Path
    base: list[str]  # `runner run` flags before the layout's own (executor included)

    def argv(self, sample_ids: list[int]) -> list[str]:
        """The `runner run` line that makes this very run (its reproduce.sh re-runs it)."""
        return self.case.run_argv(self.base, sample_ids, self.run_dir)

    @property
    def share_gpus(self) -> bool:
        """Whether its run starts beside other GPU processes: as its `runner run` line says,
        so the run and its reproduce.sh agree."""
        return SHARE_GPUS in self.base


def combinations(arms: list[IreeArm], cases: list[tp.LayoutCase], out: Path,
                 run_argv: list[str], executor: str, slurm: SlurmOptions | None
                 ) -> list[Combination]:
    """Arm-major: one arm's layouts, then the next arm's."""
    combos = []
    for arm in arms:
        base = list(run_argv)
        if executor == "slurm":
            assert slurm is not None
            base += slurm_flags(node_options(slurm, arm))
        elif arm.image is not None:
            base += ["--executor", "docker", "--image", arm.image]
        for case in cases:
            run_dir = out / "runs" / arm.slug / case.dirname if arm.slug else \
                out / "runs" / case.dirname
            combos.append(Combination(arm, case, run_dir, base))
    return combos


def node_options(options: SlurmOptions, arm: IreeArm) -> SlurmOptions:
    """An image arm's node tasks start its containers; the host arm's, as asked."""
    if arm.image is None:
        return options
    return replace(options, node_executor="docker", image=arm.image)


def _executor(combo: Combination, slurm: SlurmOptions | None, label: str) -> Executor:
    """The arm's containers or host processes, here or (with Slurm options) on the nodes."""
    profile = combo.case.profile
    assert profile is not None
    if slurm is not None:
        from runner.batch.slurm import SlurmExecutor

        options = node_options(slurm, combo.arm).validated()
        node = executor_for(options.node_executor, profile, image=options.image)
        return SlurmExecutor(options, node, label)
    if combo.arm.image is None:
        return LocalExecutor()
    return executor_for("docker", profile, image=combo.arm.image)


@dataclass
class _Started:
    result: tp.LayoutResult
    lc: Lifecycle
    executor: Executor
    execution: Execution | None


def _start(c: Combination, ids: list[int], slurm: SlurmOptions | None
           ) -> tuple[tp.LayoutResult, _Started | None]:
    """Creates the combination's run and starts its work; a combination that cannot run
    (a layout too big for a node task, sbatch refusing it) is an error row."""
    argv = c.argv(ids)
    result = tp.layout_result(c.case, c.run_dir, argv, c.arm.spec, c.arm.image or "")
    if c.case.profile is None or c.case.plan is None:
        return result, None
    label = f"{c.case.label} ({c.arm.spec})"
    print(f"bench: layout {label}: {result.workers} worker(s), {len(ids)} samples -> "
          f"{c.run_dir}", file=sys.stderr, flush=True)
    executor = _executor(c, slurm, label)
    try:
        lc = Lifecycle.create(c.run_dir, c.case.profile, ids, argv, executor,
                              compile_fn=c.arm.compile_fn, score=False, plan=c.case.plan,
                              share_gpus=c.share_gpus)
    except RunnerError as e:
        result.reason = str(e)
        return result, None
    try:
        return result, _Started(result, lc, executor, lc.start())
    except RunnerError as e:
        result.reason = str(e)
        lc.close()
        return result, None


def _finish(started: _Started) -> None:
    """Records the attempt; throughput from the workers' (or node tasks') wall time."""
    with started.lc as lc:
        executed = started.execution.result() if started.execution else None
        try:
            outcome = lc.finish_attempt(executed)
        except RunnerError as e:
            started.result.reason = str(e)
            return
        if executed is not None:
            tp.record_outcome(started.result, outcome, executed.workers, executed.started)
        if lc.manifest.slurm is not None:
            slurm_info(started.result, lc.manifest)


def _kept(c: Combination, out: Path, attempt: Any) -> tp.LayoutResult | None:
    """An interrupted bench's finished layout (recorded with its run dir there), or None;
    the run dir of a layout it did not finish is removed, to be measured again from its
    start (a throughput is one attempt's: finished samples of a cut-short run would make
    the rest look faster)."""
    if attempt is None or not attempt.resumed:
        return None
    recorded = attempt.kept(_layout_key(c, out), lambda _: (c.run_dir / RUN_MANIFEST).is_file())
    if recorded is not None:
        print(f"bench: layout {c.case.label} ({c.arm.spec}): kept from the interrupted "
              "attempt", file=sys.stderr, flush=True)
        return tp.LayoutResult.from_dict(recorded)
    if c.run_dir.exists():
        print(f"bench: layout {c.case.label} ({c.arm.spec}): the interrupted attempt's run "
              f"is measured again from its start ({c.run_dir} removed)", file=sys.stderr,
              flush=True)
        shutil.rmtree(c.run_dir)
    return None


def _layout_key(c: Combination, out: Path) -> str:
    return f"layout:{c.run_dir.relative_to(out)}"


def run_combinations(combos: list[Combination], ids: list[int],
                     slurm: SlurmOptions | None = None, out: Path | None = None,
                     attempt: Any = None) -> list[tp.LayoutResult]:
    """Runs on this machine take turns (the same cores for each, so their numbers
    compare); runs elsewhere (one Slurm job per combination) are all started, then waited
    for together. `attempt` (the bench's out dir record, runner/base/outdir.py) keeps the
    layouts an interrupted bench finished, and records each one as it finishes."""
    results: list[tp.LayoutResult] = []
    elsewhere: list[tuple[_Started, Combination]] = []

    def finish(started: _Started, c: Combination) -> None:
        _finish(started)
        if attempt is not None and out is not None:
            status = {"ok": StepStatus.FINISHED, "incomplete": StepStatus.INCOMPLETE}.get(
                started.result.status, StepStatus.FAILED)
            attempt.record_part(_layout_key(c, out), status, started.result.wall_s,
                                started.result.to_dict())

    try:
        for c in combos:
            if out is not None and (kept := _kept(c, out, attempt)) is not None:
                results.append(kept)
                continue
            result, started = _start(c, ids, slurm)
            results.append(result)
            if started is None:
                continue
            if not started.executor.on_this_host:
                elsewhere.append((started, c))
                continue
            if started.execution is not None:
                watch([started.execution])
            finish(started, c)
        watch([s.execution for s, _ in elsewhere if s.execution is not None])
    except BaseException:
        for s, _ in elsewhere:
            s.lc.close()
        raise
    for s, c in elsewhere:
        finish(s, c)
    return results


def sweep_dry_run_lines(combo: Combination, sample_ids: list[int], slurm: SlurmOptions | None
                        ) -> list[str]:
    """What running the combination would do, exactly: its compiles (in the arm's image
    when it has one), the `runner run` line, and the sbatch command or worker commands."""
    case = combo.case
    lines = [f"# layout {case.label} ({combo.arm.spec})"]
    if case.plan is None or case.profile is None:
        return [*lines, f"#   skipped: {case.skip_reason}"]
    lay = case.profile.layout
    if isinstance(combo.arm.compile_fn, ImageCompiler):  # its own iree-compile, in there
        command = combo.arm.compile_fn.command(case.profile, lay.batch_size, lay.vae_batch_size)
        lines.append(f"#   compile in {combo.arm.image}: {shellscript.join(command)}")
    else:  # a missing batch size of an exported model: its export command first
        compiled = compile_model(case.profile, lay.batch_size, lay.vae_batch_size,
                                 dry_run=True, say=lines.append)
        lines += [shellscript.join(c.command) for c in compiled.compiled]
    # The preflight each layout's run passes when it is made (a failure there is that
    # layout's reason, not the bench's end): its lines, judged by the run.
    checked = run_preflight(PreflightRequest(combo.run_dir, case.profile, case.plan,
                                             len(sample_ids), False,
                                             share_gpus=combo.share_gpus),
                            _executor(combo, slurm, case.label))
    lines += checked.comments("  ")
    lines.append(shellscript.join(["runner", *combo.argv(sample_ids)]))
    if slurm is not None:
        from runner.batch.slurm import SLURM_DIR, sbatch_argv

        options = node_options(slurm, combo.arm)
        script = combo.run_dir / SLURM_DIR / "j0.sbatch"
        sbatch = sbatch_argv(combo.run_dir, options, 0, options.nodes, script)
        lines.append(f"#   {shellscript.join(sbatch)}")
        return lines
    # A container's mounts must exist and a dry run makes no dirs: the worker command
    # itself, and the image it would run in.
    where = f"in {combo.arm.image}: " if combo.arm.image else ""
    lines += [f"#   {w.name}: {where}"
              f"{LocalExecutor().describe(combo.run_dir, w, task_path(combo.run_dir, w.name))}"
              for w in case.plan.workers]
    return lines


def slurm_info(result: tp.LayoutResult, manifest: RunManifest) -> None:
    """Where a Slurm run went: its jobs, hosts, node tasks, and how long it waited in the
    Slurm queue (reported apart: throughput counts from the first node task starting)."""
    slurm = manifest.slurm or {}
    nodes = [n for n in slurm.get("nodes", {}).values() if n.get("started")]
    jobs = slurm.get("jobs", [])
    result.slurm = {"jobs": [j["job_id"] for j in jobs],
                    "hosts": sorted({n.get("hostname", "?") for n in nodes}),
                    "node_tasks": len(nodes), "queue_wait_s": None}
    if not nodes:
        result.reason = result.reason or "no node task started"
        return
    start = min(n["started"] for n in nodes)
    result.slurm["queue_wait_s"] = round(start - min(j["submitted"] for j in jobs), 3)
