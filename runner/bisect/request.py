"""What `runner bisect` and `runner trend` are asked, made from plain arguments, and
`bisect(...)`, the bisection as one call: the CLI and a Python caller give the same
arguments to the same code, so a build, a sample set or a test is checked in one place."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.base.errors import BadInput
from runner.config.profile import Profile, load_profile
from runner.docker.image import DEFAULT_BASE_IMAGE

if TYPE_CHECKING:
    from runner.bisect.builds import Build, Sources
    from runner.bisect.measure import MeasurePlan
    from runner.bisect.search import BisectRequest

# The steps' modules (and what they import) are imported when first used, as the CLI's
# were: `runner --help` imports this module to register `runner bisect`.


def sample_spec(test: str, profile: Profile, count: int | None, samples: str | None,
                ids: str | None) -> str:
    """The samples as one id spec; `accuracy` defaults to (and needs) the profile's set."""
    from runner.accuracy.samples import chosen_ids, format_ids
    from runner.accuracy.settings import accuracy_settings

    ranges = accuracy_settings(profile).samples if profile.accuracy else None
    if not ids and not samples and count is None and test.startswith("accuracy") and ranges:
        chosen = list(ranges)
    else:
        chosen = chosen_ids(count, samples, ids, None, profile.count)
    if test.startswith("accuracy") and ranges and set(chosen) != set(ranges):
        raise BadInput(f"accuracy is judged on the {len(ranges)} samples the profile's "
                       f"ranges were set for, not {len(chosen)}", where="--count",
                       fix=f"drop --count/--samples (or use --samples {format_ids(ranges)})")
    return format_ids(chosen)


def measure_plan(test_text: str, profile: Profile, out: Path | str, *, trend: bool,
                 count: int | None = None, samples: str | None = None,
                 ids: str | None = None, find_links: str | None = None,
                 pre: bool = False, repo: Path | str | None = None,
                 build_from_source: bool = False, install: str = "venv",
                 base_image: str = DEFAULT_BASE_IMAGE, dry_run: bool = False,
                 share_gpus: bool = False) -> tuple[MeasurePlan, Sources, dict[str, Any]]:
    """The MeasurePlan every step shares, the build sources, and the inputs that key the
    out dir's state; writes the standalone profile every build loads (not on a dry run)."""
    import yaml

    from runner.base.fileio import atomic_write_text
    from runner.bench.dispatch_profile import DEFAULT_CALLS
    from runner.bisect.builds import Sources, check_find_links
    from runner.bisect.judge import parse_test
    from runner.bisect.ledger import inputs_key
    from runner.bisect.measure import MeasurePlan
    from runner.docker.in_image import standalone_profile

    test = parse_test(test_text)
    checkout = Path(repo).resolve() if repo else None
    if checkout is not None and not (checkout / ".git").exists():
        raise BadInput(f"{repo} is not a git checkout", where="--repo",
                       fix="pass a clone of iree-org/iree")
    sources = Sources(check_find_links(find_links), pre, checkout)
    chosen = sample_spec(test_text, profile, count, samples, ids)
    out = Path(os.path.abspath(out))
    standalone = standalone_profile(profile)
    profile_file = out / "profile.yaml"
    if not dry_run:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(profile_file, yaml.safe_dump(standalone, sort_keys=True))
    executor = "docker" if build_from_source else install
    plan = MeasurePlan(out, profile, profile_file, chosen, test, sources, executor,
                       build_from_source, base_image, passes=2 if trend else test.passes,
                       compstat=trend or test.kind == "compstat",
                       score=trend and profile.accuracy is not None, cwd=os.getcwd(),
                       dispatch_calls=DEFAULT_CALLS if trend or test.kind == "throughput"
                       else 0, share_gpus=share_gpus)
    inputs: dict[str, Any] = {
        "test": test.text, "profile": profile.name, "profile_key": inputs_key(standalone),
        "samples": chosen, "executor": executor, "build_from_source": build_from_source,
        "find_links": sources.find_links, "pre": sources.pre,
        "repo": str(checkout) if checkout else None}
    if test.kind == "script":
        inputs["cwd"] = os.getcwd()
    return plan, sources, inputs


def bisect(good: str, bad: str, *, profile: Profile | str, out: Path | str,
           test: str = "images", count: int | None = None, samples: str | None = None,
           ids: str | None = None, find_links: str | None = None, pre: bool = False,
           repo: Path | str | None = None, build_from_source: bool = False,
           install: str = "venv", base_image: str = DEFAULT_BASE_IMAGE, dry_run: bool = False,
           argv: Sequence[str] = (), share_gpus: bool = False) -> dict[str, Any]:
    """Finds the first IREE build from `good` to `bad` that changed what `test` judges, as
    `runner bisect` does (same files written), resuming from what `out` holds.

    Args:
        good: the last build known good: `wheels:VERSION`, `commit:SHA`, `source:SHA` or
            `build-dir:DIR`.
        bad: a build known bad, as `good`.
        profile: a `Profile` or a profile's name or path, e.g. `"cpu"`.
        out: the bisect dir; one holding a bisect of the same inputs is resumed.
        test: `images`, `pixels:TOL`, `accuracy`, `throughput:PCT`, `compile`,
            `compstat`, `goldens:SUITE` or `script:CMD` (its exit code judges).
        count: the first N samples (default: the profile's count; `accuracy`: its set).
        samples: sample ids instead, e.g. `"0-3,7"`.
        ids: a file of sample ids instead.
        find_links: a find-links page or a directory of wheels for `wheels:` builds.
        pre: list IREE's nightlies (X.Y.ZrcYYYYMMDD) too.
        repo: the IREE checkout whose commits `commit:` builds name.
        build_from_source: build each commit in the harness image.
        install: `venv` (a venv per build) or `docker` (a harness image per build).
        base_image: the harness image's base.
        dry_run: list the candidate builds and the first step's commands; write nothing.
        argv: the command line recorded (default: the `runner bisect` these arguments are).
        share_gpus: measure beside processes that hold the GPUs (the preflight refuses).

    Returns:
        What bisect.json holds: `candidates`, the measured `steps` and the `answer`
        (`first_bad` and `last_good`, or `no_change`); a dry run's has no answer.

    Raises:
        BadInput: a build, test or sample set that is wrong; a good end that fails the
            test or an end that cannot be measured (logs under `out`/builds/).
    """
    from runner.bisect.search import run_bisection

    profile = load_profile(profile) if isinstance(profile, str) else profile
    plan, sources, inputs = measure_plan(
        test, profile, out, trend=False, count=count, samples=samples, ids=ids,
        find_links=find_links, pre=pre, repo=repo, build_from_source=build_from_source,
        install=install, base_image=base_image, dry_run=dry_run, share_gpus=share_gpus)
    state = run_bisection(request := _request(good, bad, plan, sources, inputs, argv, dry_run))
    if not dry_run:
        builds = request.candidates or []
        reports(plan, state, builds, _culprit(state, builds))
    return state


def _culprit(state: dict[str, Any], builds: list[Build]) -> int | None:
    """Where the first bad build of a finished bisect is among `builds` (None: none)."""
    first_bad = state["answer"].get("first_bad")
    return next((i for i, b in enumerate(builds) if b.spec == first_bad), None)


def _request(good: str, bad: str, plan: MeasurePlan, sources: Sources,
             inputs: dict[str, Any], argv: Sequence[str], dry_run: bool) -> BisectRequest:
    """The ends checked (a bad pairing refused before any work), the candidates listed
    (or, resuming, as bisect.json lists them) and the command line recorded."""
    from runner.bisect.builds import backwards_note, candidates, parse_build
    from runner.bisect.envs import plan_setup
    from runner.bisect.ledger import Ledger
    from runner.bisect.search import STATE, BisectRequest

    good_build = parse_build(good, sources, "--good")
    bad_build = parse_build(bad, sources, "--bad")
    note = backwards_note(good_build, bad_build)
    if note:
        print(f"warning: {note}", file=sys.stderr, flush=True)
    plan_setup(good_build, sources, plan.executor, plan.from_source)
    inputs.update(good=good_build.spec, bad=bad_build.spec)
    recorded = list(argv) or _command(good, bad, plan)
    state_file = plan.out / STATE
    resumed = Ledger(state_file, "bisect", inputs, recorded).candidates \
        if state_file.is_file() else None
    builds = resumed or candidates(good_build, bad_build, sources)
    return BisectRequest(good_build, bad_build, plan, recorded, inputs, builds, dry_run)


def reports(plan: MeasurePlan, state: dict[str, Any], builds: list[Build],
            index: int | None) -> list[Path]:
    """Writes the reports of a finished bisect or trend (runner/bisect/report.py); the
    reproduce script lists the setup of the build at `index` (the culprit, the first)."""
    from runner.bisect.measure import build_dry_run_lines
    from runner.bisect.report import write_reports

    lines = build_dry_run_lines(plan, index, builds[index]) if index is not None else []
    return write_reports(plan.out, state, lines)


def _command(good: str, bad: str, plan: MeasurePlan) -> list[str]:
    """The `runner bisect` arguments a Python call is recorded as (its reproduce.sh runs
    them): the profile as the standalone file every build loads, the samples by id."""
    argv = ["bisect", "--good", good, "--bad", bad, "--test", plan.test.text, "--profile",
            str(plan.profile_file), "--samples", plan.samples, "--install", plan.executor]
    if plan.from_source:
        argv[-2:] = ["--build"]
    if plan.sources.find_links:
        argv += ["--find-links", plan.sources.find_links]
    argv += ["--pre"] * plan.sources.pre
    if plan.sources.repo is not None:
        argv += ["--repo", str(plan.sources.repo)]
    if plan.base_image != DEFAULT_BASE_IMAGE:
        argv += ["--base-image", str(plan.base_image)]
    return argv
