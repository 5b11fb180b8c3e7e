"""`runner validate`: prove an IREE build keeps SDXL accurate, then regenerate the goldens.

The IREE developer's whole workflow as one resumable command over the other modules:
image -> compile inside it -> accuracy run in its containers -> aggregate -> score ->
(only on PASS, and given a suite) golden check + generate v{n+1} + bump -> one report.
Each step records a key of its inputs in `validate.json` (runner/base/steps.py); a step
that finished with that key and whose outputs are still there is skipped, so an interrupted
validate resumes and a repeated one takes seconds. Upload stays a separate, explicit
`runner goldens upload`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runner.base import shellscript
from runner.base.errors import EXIT_FAILED, EXIT_OK, BadInput, StepFailed
from runner.base.fileio import atomic_write_json, atomic_write_text, sha256_file
from runner.base.paths import cache_dir
from runner.base.steps import Steps
from runner.config.profile import Profile
from runner.docker.in_image import ImageCompiler, run_in_image, standalone_profile
from runner.model.compiled_model import CompiledModel

VALIDATE_STATE = "validate.json"
RUN = "run"


@dataclass(frozen=True)
class ValidateRequest:
    iree: str  # wheels:<ver> | source:<sha> | build-dir:<path>
    profile: Profile
    sample_ids: list[int]
    out: Path
    argv: list[str]
    goldens: Path | None = None
    to: str | None = None
    baseline: Path | None = None
    base_image: str | None = None
    dry_run: bool = False
    require_full: bool = False  # a subset fails instead of being "not judged"
    share_gpus: bool = False  # its run starts beside other GPU processes (the preflight's)


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + sha256_file(path).encode())
    return h.hexdigest()


class Validation:
    """validate.json: the build, the report's fields, and its steps (runner/base/steps.py:
    what ran, with which input key, how long, and what it produced)."""

    def __init__(self, out: Path, dry_run: bool):
        self.out, self.dry_run = out, dry_run
        path = out / VALIDATE_STATE
        self.state: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
        self.steps = Steps(self.state.setdefault("steps", {}), self.save)

    def step(self, name: str, key: str, outputs: list[Path], fn: Callable[[], dict]) -> dict:
        """The step's detail: run, or kept from an earlier validate with the same key whose
        outputs are all still there (then marked `skipped`)."""
        detail, skipped = self.steps.run(name, key, fn, dry_run=self.dry_run, say="validate",
                                         done=lambda _: all(p.exists() for p in outputs))
        return {**detail, "skipped": True} if skipped else detail

    def save(self) -> None:
        if not self.dry_run:
            atomic_write_json(self.out / VALIDATE_STATE, self.state)


def validate(req: ValidateRequest) -> int:
    """Validates an IREE build end to end, as `runner validate` does, resuming in `req.out`.

    Builds (or reuses) the harness image with `req.iree`, compiles the profile inside it,
    runs the samples in its containers and scores them; on PASS, with `req.goldens`, checks
    the suite and generates its next version. Writes validate.json, validate.md and the
    run dir `run/`; a step whose inputs are unchanged and outputs kept is skipped.

    Args:
        req: the build (`wheels:<ver>`, `source:<sha>`, `build-dir:<path>`), the `Profile`,
            the sample ids, the out dir, the recorded argv, and optionally the goldens
            suite and version, a baseline validate dir, the base image, `dry_run` (print
            every command, run nothing) and `require_full`.

    Returns:
        0 when every step passed, for a dry run and for a subset (not judged); 1 when
        accuracy or goldens fail (saying which), or a subset with `require_full`.

    Raises:
        BadInput: an IREE build, goldens suite, version or baseline that is wrong.
        StepFailed: the image build, compile, run or score could not finish.
        ToolFailed: a tool it ran (docker, iree-compile) failed.
    """
    from runner.docker.image import DEFAULT_BASE_IMAGE, build_image

    # Absolute: paths under it go into containers, which do not share our cwd.
    req = dataclasses.replace(req, out=Path(os.path.abspath(req.out)))
    out = req.out
    source = check_inputs(req)
    if not req.dry_run:
        out.mkdir(parents=True, exist_ok=True)
    ledger = Validation(out, req.dry_run)
    ledger.state.update({"iree": req.iree, "profile": req.profile.name, "argv": req.argv,
                         "samples": len(req.sample_ids)})

    built = build_image(source, dry_run=req.dry_run,
                        base_image=req.base_image or DEFAULT_BASE_IMAGE)
    image = {"tag": built.tag, "id": built.image_id, "cached": built.cached,
             "build_command": shellscript.join(built.plan.command())}
    ledger.state["image"] = image
    state = "dry run" if req.dry_run else "cached" if built.cached else "built"
    print(f"validate: image {built.tag} ({state})", file=sys.stderr)
    if req.dry_run:
        print(image["build_command"])

    profile_file = out / "profile.yaml"
    standalone = standalone_profile(req.profile)
    if not req.dry_run:
        atomic_write_text(profile_file, yaml.safe_dump(standalone, sort_keys=True))
    compiled_file = out / "compiled.json"

    def compile_step() -> dict:
        lay = req.profile.layout
        compiled = ImageCompiler(built.tag, out, req.dry_run)(req.profile, lay.batch_size,
                                                               lay.vae_batch_size)
        if not req.dry_run:
            atomic_write_json(compiled_file, compiled.to_dict())
            return {"vmfbs": [str(v) for m in compiled.modules for v in m.vmfbs]}
        return {}

    ledger.step("compile", _key(built.image_id, standalone), [compiled_file], compile_step)

    def compile_fn(_profile, _batch, _vae) -> CompiledModel:
        return CompiledModel.from_dict(json.loads(compiled_file.read_text()))

    run_dir = out / RUN
    verdict = _run_and_score(req, ledger, built.tag, run_dir, compile_fn)
    passed = verdict.get("passed", False)
    subset = verdict.get("state") == "subset"  # fewer samples than the ranges: not judged
    if req.goldens and not req.dry_run and not passed:
        ledger.state["goldens"] = ("not run: " + ("a subset is not judged" if subset else
                                                  "accuracy failed")
                                   + ", so these outputs must not become goldens")
        print(f"validate: accuracy {'not judged (subset)' if subset else 'FAILED'} "
              f"({verdict.get('summary')}); stopping before the goldens step", file=sys.stderr)
    elif req.goldens:
        passed = _goldens(req, ledger, built.tag, built.image_id) and passed
    if req.baseline and not req.dry_run:
        ledger.state["baseline"] = _against_baseline(req.baseline, ledger.state, run_dir)
    if not req.dry_run:
        from runner.lifecycle import Lifecycle

        with Lifecycle.open(run_dir) as lc:
            lc.report(against=req.baseline / RUN if req.baseline else None)
    outcome = ("DRY RUN (nothing was run or judged)" if req.dry_run else
               "SUBSET (not judged against the full-set ranges)" if subset else
               "PASS" if passed else "FAIL")
    _write_report(out, ledger, passed, outcome)
    return EXIT_OK if passed or subset or req.dry_run else EXIT_FAILED


def check_inputs(req: ValidateRequest):
    """Every input checked before anything is built, run or printed (a dry run too): the
    IREE build, the goldens suite and version, the baseline. The image source to build."""
    from runner.docker.image import parse_source
    from runner.goldens.testfile import find_test_files
    from runner.goldens.versioning import parse_target
    from runner.inputs.paths import no_such_path

    source = parse_source(req.iree, where="--iree")
    if req.goldens is not None:
        find_test_files([req.goldens], where="--goldens")
        parse_target(req.to or "next")
    if req.baseline is not None and not (req.baseline / VALIDATE_STATE).is_file():
        if not req.baseline.exists():
            raise no_such_path(req.baseline, "--baseline", "validate directory")
        raise BadInput(f"{req.baseline} holds no {VALIDATE_STATE}", where="--baseline",
                       fix="pass the --out of an earlier `runner validate`")
    return source


def _against_baseline(baseline: Path, state: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Score and throughput deltas against an earlier validate, and the images that moved
    most (per-image PSNR/SSIM) between the two IREE builds."""
    from runner.accuracy.compare import compare_runs, write_comparison

    before = json.loads((baseline / VALIDATE_STATE).read_text())
    now, then = state["steps"]["score"]["detail"], before["steps"]["score"]["detail"]
    comparison = compare_runs(baseline / RUN, run_dir)
    write_comparison(run_dir / "compare.json", comparison)
    return {"baseline": str(baseline), "iree": before.get("iree"),
            "fid_delta": _delta(now.get("fid"), then.get("fid")),
            "clip_delta": _delta(now.get("clip"), then.get("clip")),
            "throughput_delta": state["throughput"] - before.get("throughput", 0.0),
            "compare": str(run_dir / "compare.json")}


def _delta(now: float | None, then: float | None) -> float | None:
    """A score's change against the baseline; None when either run did not score it."""
    return None if now is None or then is None else now - then


def _signed(delta: float | None) -> str:
    return "not scored in both" if delta is None else f"{delta:+.6f}"


def _run_and_score(req: ValidateRequest, ledger: Validation, tag: str, run_dir: Path,
                   compile_fn) -> dict:
    from runner.batch.run import plan_for
    from runner.lifecycle import Lifecycle, executor_for, preflight
    from runner.preflight.run import PreflightRequest
    from runner.rundir.directory import RunDir

    run_dir = RunDir(run_dir).path  # absolute: mounted into every worker container
    executor = executor_for("docker", req.profile, image=tag)
    if req.dry_run:
        plan = plan_for(req.profile)
        for worker in plan.workers:
            print(executor.describe(run_dir, worker,  # type: ignore[attr-defined]
                                    run_dir / "workers" / f"{worker.name}.json"))
        print(f"runner aggregate {run_dir}")
        print(f"runner score {run_dir}")
        return {}
    compiled = json.loads((req.out / "compiled.json").read_text())

    def run_step() -> dict:
        if RunDir(run_dir).exists():
            lc = Lifecycle.open(run_dir)
            with lc:
                if lc.manifest.compiled_keys != [c["key"] for c in compiled["compiled"]]:
                    raise BadInput("this run was made by another IREE build or profile",
                                   where=str(run_dir), fix="use a new --out for this build")
                return _execute(lc, lambda: lc.resume(executor, compile_fn,
                                                      share_gpus=req.share_gpus))
        ids_file = req.out / "sample_ids.txt"
        atomic_write_text(ids_file, "\n".join(map(str, req.sample_ids)) + "\n")
        argv = ["run", "--profile", str((req.out / "profile.yaml").resolve()), "--ids",
                str(ids_file.resolve()), "--executor", "docker", "--image", tag,
                *(["--share-gpus"] if req.share_gpus else [])]
        # Scored in its own step below: the preflight checks scoring's files now.
        checked = preflight(PreflightRequest(run_dir, req.profile, plan_for(req.profile),
                                             len(req.sample_ids), True,
                                             share_gpus=req.share_gpus), executor, False)
        with Lifecycle.create(run_dir, req.profile, req.sample_ids, argv, executor,
                              compile_fn=compile_fn, score=False, checked=checked) as lc:
            return _execute(lc, lambda: None)

    run = ledger.step("run", _key(compiled, req.sample_ids, req.profile.layout.to_dict()),
                      [run_dir / "dataset.json"], run_step)

    def score_step() -> dict:
        # A validate of fewer samples than the ranges were set for is still judged, and
        # labelled as a subset (not comparable with the full-set ranges) in every report.
        with Lifecycle.open(run_dir) as lc:
            score = lc.score(profile=str((req.out / "profile.yaml").resolve()),
                             allow_subset=True, require_full=req.require_full)
        lines = score.verdict.lines()
        return {"passed": score.verdict.passed, "state": score.verdict.state,
                "fid": score.result.fid, "clip": score.result.clip, "summary": "; ".join(lines),
                "accuracy_json": str(score.json_path)}

    verdict = ledger.step("score", _key(sha256_file(run_dir / "dataset.json"),
                                        req.profile.accuracy), [run_dir / "accuracy.json"],
                          score_step)
    ledger.state["throughput"] = run.get("samples", 0) / max(run.get("seconds", 0) or 1e-9,
                                                                1e-9)
    return verdict


def _execute(lc, prepare: Callable[[], None]) -> dict:
    """The run step: the lifecycle's execute and aggregate (scoring is its own step, with
    the standalone profile); a run already complete is only re-aggregated."""
    if lc.manifest.complete:
        result = lc.aggregate()
    else:
        prepare()
        outcome = lc.execute()
        if not outcome.complete:
            raise StepFailed(f"{len(lc.manifest.missing)} samples missing after the run",
                             where=str(lc.run.path), fix="re-run the same validate to resume")
        result = lc.complete(score=False, reports=False).aggregate
    return {"samples": result.samples, "seconds": lc.manifest.last_attempt_seconds()}


def _goldens(req: ValidateRequest, ledger: Validation, tag: str, image_id: str | None) -> bool:
    assert req.goldens is not None
    suite = req.goldens.resolve()
    target = req.out / "goldens"
    mounts = [(str(suite), True), (str(req.out.resolve()), False), (str(cache_dir()), False)]
    model_dir = req.profile.model.base_dir
    if not model_dir.resolve().is_relative_to(cache_dir().resolve()):  # exports: mounted
        mounts.append((str(model_dir), True))
    to = req.to or "next"

    def goldens_step() -> dict:
        for argv in (["python3", "-m", "runner", "goldens", "generate", str(suite), "--to", to,
                      "--out", str(target.resolve())],
                     ["python3", "-m", "runner", "goldens", "bump", str(suite), "--to", to,
                      "--out", str((target / "json").resolve())]):
            run_in_image(tag, argv, mounts, req.dry_run)
        return {"out": str(target)}

    ledger.step("goldens", _key(image_id, _tree_hash(suite) if suite.is_dir() else str(suite),
                                to), [target], goldens_step)
    return True


def _write_report(out: Path, ledger: Validation, passed: bool, outcome: str) -> None:
    state = ledger.state
    state["passed"], state["outcome"] = passed, outcome
    lines = [f"# validate: {outcome}", "",
             f"- IREE: `{state['iree']}` in image `{state['image']['tag']}` "
             + (f"(`{state['image']['id']}`)" if state['image']['id'] else "(not built)"),
             f"- profile: `{state['profile']}`, {state['samples']} samples", "",
             "| step | status | seconds | detail |", "| --- | --- | --- | --- |"]
    for name, step in state["steps"].items():
        detail = step["detail"].get("summary") or step["detail"].get("error") or ""
        lines.append(f"| {name} | {step['status']} | {step['seconds']} | "
                     f"{str(detail)[:200]} |")
    if "goldens" in state and isinstance(state["goldens"], str):
        lines.append(f"\ngoldens: {state['goldens']}")
    if "baseline" in state:
        b = state["baseline"]
        lines.append(f"\nagainst `{b['iree']}` ({b['baseline']}): FID {_signed(b['fid_delta'])}, "
                     f"CLIP {_signed(b['clip_delta'])}, throughput {b['throughput_delta']:+.3f} "
                     f"samples/s; per-image PSNR/SSIM in {b['compare']}")
    lines += ["", "Reproduce:", "", "```bash", f"runner {shellscript.join(state['argv'])}", "```"]
    if not ledger.dry_run:
        ledger.save()
        atomic_write_text(out / "validate.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
