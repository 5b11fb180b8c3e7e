"""One build measured, on the host side: its environment, then the probe, the score, the
golden suite or the user's script in it, each step's files under `builds/NNN-<label>/`.

What is measured depends on the test (and, for `runner trend`, on everything a trend
draws). The result is a plain dict, kept in bisect.json/trend.json, so a resumed bisect
judges a finished step again from it without running the build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base import shellscript
from runner.base.errors import RunnerError
from runner.base.progress import echo
from runner.base.signals import Interrupted
from runner.batch.run import plan_for
from runner.bisect.builds import Build, Sources
from runner.bisect.envs import (
    BuildEnv,
    BuildUnavailable,
    build_tree_paths,
    ensure_env,
    env_prefix,
    plan_setup,
    runner_source_dir,
    setup_lines,
)
from runner.bisect.judge import TestSpec, sample_digests
from runner.bisect.probe import PROBE_FILE
from runner.config.profile import Profile
from runner.preflight.check import CheckState, PreflightCheck
from runner.preflight.worker_env import WHAT

EXIT_MARK = "runner-bisect-exit-code="


@dataclass(frozen=True)
class MeasurePlan:
    """Everything the steps of one bisect or trend share."""

    out: Path
    profile: Profile
    profile_file: Path  # the standalone profile every build loads
    samples: str  # sample ids, as `runner.accuracy.samples.parse_ids` reads them
    test: TestSpec
    sources: Sources
    executor: str = "venv"
    from_source: bool = False
    base_image: str | None = None
    passes: int = 1
    compstat: bool = False
    dispatch_calls: int = 0  # > 0: each stage's dispatch profile over this many calls
    score: bool = False
    cwd: str = ""  # where a script test runs: where the user started the command
    share_gpus: bool = False  # GPUs other processes hold are used anyway (the preflight's)

    def step_dir(self, index: int, build: Build) -> Path:
        label = re.sub(r"[^A-Za-z0-9._-]", "_", build.label)[:60]
        return self.out / "builds" / f"{index:03d}-{label}"

    def probe_argv(self, python: str, out: Path) -> list[str]:
        argv = [python, "-m", "runner.bisect.probe", "--profile", str(self.profile_file),
                "--samples", self.samples, "--out", str(out), "--passes", str(self.passes)]
        if self.compstat:
            argv.append("--compstat")
        return [*argv, "--dispatches", str(self.dispatch_calls)] if self.dispatch_calls else argv

    def goldens_argv(self, python: str, out: Path) -> list[str]:
        return [python, "-m", "runner", "goldens", "check", self.test.arg, "--out",
                str(out / "goldens")]


def dispatch_profiles(measurement: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Stage -> dispatch profile of a measured build (None: it has none, see its note)."""
    found = (measurement.get("probe") or {}).get("dispatches") or {}
    path = Path(measurement.get("dir", "")) / str(found.get("file", ""))
    if found.get("status") != "ok" or not path.is_file():
        return None
    return json.loads(path.read_text())


def dispatch_note(measurement: dict[str, Any]) -> str:
    """Why a measured build has no dispatch profile."""
    found = (measurement.get("probe") or {}).get("dispatches")
    if found is None:
        return "the build was not measured" if measurement.get("unavailable") else \
            "not profiled"
    return found.get("note") or found.get("status", "?")


def _env_for(plan: MeasurePlan, build: Build) -> BuildEnv:
    return ensure_env(build, plan.sources, plan.executor, plan.from_source, plan.base_image)


def _run_logged(plan: MeasurePlan, argv: list[str], env: BuildEnv, log: Path,
                cwd: str | None = None, extra_env: dict[str, str] | None = None) -> int:
    """A command in the build's environment, its output into `log`; its exit code. In the
    harness image, the exit code comes back on the last line, so a test's own code
    (125: skip) survives `docker run`."""
    if env.executor == "docker":
        from runner.docker.in_image import compile_mounts, run_in_image

        assert env.image is not None
        wrapped = ["bash", "-c", f'cd "$1" && shift; "$@"; echo "{EXIT_MARK}$?"', "_",
                   cwd or "/", *argv]
        lay = plan.profile.layout
        mounts = compile_mounts(plan.profile, {lay.batch_size, lay.vae_batch_size},
                                [(plan.out, False), *([(Path(cwd), False)] if cwd else [])])
        try:
            stdout = run_in_image(env.image, wrapped, mounts, dry_run=False)
        except RunnerError as e:
            log.write_text(str(e))
            return 2
        log.write_text(stdout)
        found = re.findall(rf"^{EXIT_MARK}(\d+)$", stdout, re.MULTILINE)
        return int(found[-1]) if found else 2
    with open(log, "w") as out:
        try:
            return subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False,
                                  stdin=subprocess.DEVNULL, cwd=cwd or None,
                                  env={**env.environ(), **(extra_env or {})}).returncode
        except OSError as e:
            out.write(f"cannot run {argv[0]}: {e}\n")
            return 127


def _probe(plan: MeasurePlan, env: BuildEnv, out: Path) -> dict[str, Any]:
    python = env.python
    rc = _run_logged(plan, plan.probe_argv(python, out), env, out / "probe.log")
    path = out / PROBE_FILE
    state = json.loads(path.read_text()) if path.is_file() else {
        "ok": False, "stage": "import", "error": f"the probe did not start (exit {rc}): "
        + (out / "probe.log").read_text(errors="replace")[-500:]}
    state["exit_code"] = rc
    if state.get("interrupted"):  # stopped by a signal: no measurement; a rerun measures it
        raise Interrupted(signal.Signals[str(state["interrupted"])])
    return state


class ScoredImages:
    """The FID/CLIP scores an out dir already holds, by the images scored. A score is a
    function of the images (and of the profile, one for every step of a bisect or trend),
    so a build whose images are byte-identical to a scored build's gets that score, named
    as such (`same_images_as`), instead of scoring the same pixels again."""

    def __init__(self) -> None:
        self._by_images: dict[str, dict[str, Any]] = {}

    @staticmethod
    def _key(run_dir: Path) -> str | None:
        try:
            return json.dumps(sorted(sample_digests(run_dir).items()))
        except (OSError, ValueError, KeyError):
            return None

    def add(self, measurement: dict[str, Any]) -> None:
        """Remembers a measured build's score (one that scored its images)."""
        score = measurement.get("score")
        if not score or "error" in score:
            return
        key = self._key(Path(measurement["dir"]))
        if key is not None:
            self._by_images.setdefault(key, {
                **score, "same_images_as": score.get("same_images_as")
                or measurement["build"]["spec"]})

    def find(self, run_dir: Path) -> dict[str, Any] | None:
        key = self._key(run_dir)
        return None if key is None else self._by_images.get(key)


def _score(plan: MeasurePlan, out: Path, backbones: dict[str, Any]) -> dict[str, Any]:
    """FID/CLIP of the build's samples on this host (scores depend on the images, not on
    the IREE build); a subset of the ranges' samples is scored and labelled, not judged."""
    from runner.accuracy.backbones import load_backbones
    from runner.accuracy.evaluate import evaluate_run
    from runner.accuracy.settings import accuracy_settings

    def model() -> Any:
        """The networks, loaded by the first step whose images pass every check (too few
        for FID...), then kept for the others."""
        if "model" not in backbones:
            settings = accuracy_settings(plan.profile)
            backbones["model"] = load_backbones(settings.backbones, settings.seed)
        return backbones["model"]

    try:
        score = evaluate_run(out, profile=str(plan.profile_file), allow_subset=True,
                             progress=False, backbones=model)
    except RunnerError as e:
        return {"error": str(e), "passed": False, "state": "error"}
    return {"fid": score.result.fid, "clip": score.result.clip,
            "passed": score.verdict.passed, "state": score.verdict.state,
            "summary": "; ".join(score.verdict.lines())}


def _goldens(plan: MeasurePlan, env: BuildEnv, out: Path) -> dict[str, Any]:
    rc = _run_logged(plan, plan.goldens_argv(env.python, out), env, out / "goldens.log")
    first = None
    results = out / "goldens" / "results.json"
    if results.is_file():
        failed = [r for r in json.loads(results.read_text()).get("results", [])
                  if r.get("status") in ("failed", "error", "xpassed")]
        if failed:
            first = f"{failed[0]['name']} ({failed[0]['status']}: {failed[0]['message'][:200]})"
    return {"exit_code": rc, "first_failure": first, "log": str(out / "goldens.log")}


def script_environ(build: Build) -> dict[str, str]:
    """What a script learns about the build besides its tools on PATH."""
    return {"RUNNER_BUILD": build.spec, "IREE_COMMIT": build.commit or "",
            "IREE_VERSION": build.version or ""}


def _script(plan: MeasurePlan, env: BuildEnv, build: Build, out: Path) -> dict[str, Any]:
    log = out / "script.log"
    rc = _run_logged(plan, plan.test.script_argv, env, log, cwd=plan.cwd or os.getcwd(),
                     extra_env=script_environ(build))
    return {"exit_code": rc, "log": str(log),
            "tail": log.read_text(errors="replace")[-1000:] if log.is_file() else ""}


def measure(plan: MeasurePlan, index: int, build: Build, backbones: dict[str, Any],
            scored: ScoredImages) -> dict[str, Any]:
    """The build's measurement; `unavailable` set when it cannot be had (skipped). Images
    byte-identical to a build's in `scored` take its score."""
    start = time.perf_counter()
    out = plan.step_dir(index, build)
    shutil.rmtree(out, ignore_errors=True)  # an interrupted attempt starts over
    out.mkdir(parents=True)
    result: dict[str, Any] = {"build": build.to_dict(), "dir": str(out)}
    try:
        env = _env_for(plan, build)
    except BuildUnavailable as e:
        result.update(unavailable=str(e), seconds=round(time.perf_counter() - start, 3))
        return result
    result["env"] = env.to_dict()
    if plan.test.probes or plan.passes or plan.compstat:
        result["probe"] = _probe(plan, env, out)
        ran = result["probe"].get("ok") and result["probe"].get("run")
        if ran and (plan.score or plan.test.kind == "accuracy"):
            same = scored.find(out)
            if same is not None:
                echo(f"score: {build.label} made the images of {same['same_images_as']} "
                     "byte for byte: its FID/CLIP, not scored again")
                result["score"] = same
            else:
                result["score"] = _score(plan, out, backbones)
                scored.add(result)
    if plan.test.kind == "goldens":
        result["goldens"] = _goldens(plan, env, out)
    if plan.test.kind == "script":
        result["script"] = _script(plan, env, build, out)
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def build_dry_run_lines(plan: MeasurePlan, index: int, build: Build) -> list[str]:
    """The exact commands measuring `build` would run (its setup when not cached yet)."""
    setup = plan_setup(build, plan.sources, plan.executor, plan.from_source)
    lines = [f"# {build.spec}: environment ({setup.executor})"]
    if setup.root is not None and (setup.root / "build.json").is_file():
        lines.append(f"# cached: {setup.root}, made by:")
        lines += [f"#   {line}" for line in setup_lines(setup)]
    else:
        lines += setup_lines(setup)
    out = plan.step_dir(index, build)
    src = str(runner_source_dir(create=False))
    if setup.executor == "docker":
        python, where = "python3", "# in the harness image: "
    elif build.kind == "build-dir":
        assert build.path is not None
        bin_dir, paths = build_tree_paths(Path(build.path))
        python, where = sys.executable, env_prefix(bin_dir, [*paths, src])
    else:
        assert setup.root is not None
        python = str(setup.root / "venv" / "bin" / "python")
        where = env_prefix(str(setup.root / "venv" / "bin"), [src])
    if plan.passes:
        driver = plan_for(plan.profile).workers[0].driver
        lines.append("# " + PreflightCheck(
            WHAT, CheckState.ABSENT, "checked by the probe below before it compiles, in the "
            f"build's environment: a worker's `--check {driver}` (a failure skips the "
            "build)").line())
    if plan.test.probes or plan.passes or plan.compstat:
        lines.append(where + shellscript.join(plan.probe_argv(python, out)))
    if plan.score or plan.test.kind == "accuracy":
        lines.append(shellscript.join(["runner", "score", str(out), "--profile",
                                       str(plan.profile_file)]))
    if plan.test.kind == "goldens":
        lines.append(where + shellscript.join(plan.goldens_argv(python, out)))
    if plan.test.kind == "script":
        lines.append(f"{where}(cd {shellscript.quote(plan.cwd or os.getcwd())} && "
                     f"{shellscript.join(plan.test.script_argv)})")
    return lines
