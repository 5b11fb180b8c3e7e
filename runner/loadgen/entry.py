"""`runner mlperf` for a Python caller: `mlperf(...)` takes the command's main flags as
arguments and runs the same request through the same code (runner/loadgen/command.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runner.batch.executor_for import executor_for
from runner.batch.executors import Executor
from runner.config.profile import Profile, load_profile
from runner.loadgen.command import run_mlperf
from runner.loadgen.conf import Flags
from runner.loadgen.run import MlperfRequest


def mlperf(profile: Profile | str, out: Path | str, scenarios: Sequence[str], mode: str, *,
           count: int | None = None, compliance: Sequence[str] | None = None,
           score: bool = True, captions: Path | str | None = None,
           executor: Executor | None = None, dry_run: bool = False,
           argv: Sequence[str] = ()) -> int:
    """Runs MLPerf LoadGen tests on a profile, as `runner mlperf` does.

    LoadGen issues the samples; the profile's workers compute them through the run
    lifecycle. Writes the LoadGen logs, mlperf.json, summary.md and report.html into `out`
    (with a submission, MLPerf's submission tree and its check). Each scenario's accuracy
    log is scored (FID/CLIP) unless `score` is False.

    Args:
        profile: a `Profile` or a profile's name or path, e.g. `"cpu"`.
        out: the output directory.
        scenarios: LoadGen scenarios, run in this order: `singlestream`, `offline`,
            `server` (any case).
        mode: `accuracy`, `performance` or `submission`.
        count: the QSL size and performance sample count (default: the profile's `count`,
            as `runner run`: MLPerf's 5000 in the SDXL lab profiles, 32 in the tiny ones).
        compliance: TEST01/TEST04 tests to run (default: the round's for a submission,
            none otherwise).
        score: score the accuracy logs' images (False is `--no-score`).
        captions: MLPerf's captions TSV (default: the copy shipped with the runner).
        executor: where the workers run (default: local processes).
        dry_run: print the settings, compile commands and worker plan; run nothing.
        argv: the command line recorded for reproduction.

    Returns:
        0 when every test is VALID, accuracy passes (or is not judged), compliance verifies
        and a submission's tree conforms; 1 otherwise. A dry run returns 0.

    Raises:
        BadInput: an unknown scenario or mode, a count or compliance test that does not
            fit, or a profile that is wrong.
        RunnerError: a worker or LoadGen failed (the logs so far are kept in `out`).
    """
    profile = load_profile(profile) if isinstance(profile, str) else profile
    captions = Path(captions) if captions is not None else None
    request = MlperfRequest(profile=profile, scenarios=tuple(scenarios), mode=mode,
                            out=Path(out), flags=Flags(count=count), argv=list(argv),
                            compliance=None if compliance is None else tuple(compliance),
                            captions=captions, score=score)
    executor = executor or executor_for("local", profile, captions=captions)
    return run_mlperf(request, executor, dry_run=dry_run)
