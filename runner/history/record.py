"""Recording a finished command's results: called once, by the CLI, after any command that
records (runner.history.extract.RECORDED) has finished with a verdict (exit 0 or 1).

Best effort by design: a store that cannot be reached, a missing SQLAlchemy, an out dir the
extraction cannot read never fail the command whose results these are. They stay in its out
dir, and the note printed says how `runner history import DIR` adds them later.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from runner.base.errors import RunnerError
from runner.history.extract import RECORDED, extract

RECORD_ENV, RECORD_OFF = "RUNNER_RECORD", "off"  # a caller that records the results itself


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def later(out: Path, given: str | None) -> str:
    """The command that records `out` afterwards."""
    from runner.base import shellscript

    argv: list[shellscript.Word] = ["runner", "history", "import", str(out)]
    if given:
        path = given if "://" not in given or given.startswith("sqlite:") else None
        # a server's URL may hold a password: named, not printed
        argv += ["--results", path or shellscript.Var("RUNNER_RESULTS_URL")]
    return shellscript.join(argv)


def record(command: str, out: Path | None, given: str | None,
           say: Callable[[str], None] = _say, build: str = "") -> bool:
    """Adds what `command` wrote to `out` to the store `given` (--results; None: the
    environment's or the default). True when it is in the store afterwards. `build`: the
    IREE build the command ran with, as asked for (`wheels:3.13.0`), for results whose files
    name none: the history then names that build, and installs it again to confirm or
    bisect a change, rather than the version its wheels report. With
    $RUNNER_RECORD=off it records nothing and says nothing: its caller records the results
    itself (`runner nightly` runs its steps in a build's venv, which has no store client)."""
    switch = os.environ.get(RECORD_ENV, "")
    if command not in RECORDED or switch == RECORD_OFF:
        return False
    if switch:
        say(f"history: ${RECORD_ENV}={switch!r} is not {RECORD_OFF!r} (the one value it "
            "takes): recorded as without it")
    if out is None:
        say(f"history: `runner {command}` without --out keeps no results to record "
            "(pass --out DIR to keep them)")
        return False
    try:
        from runner.history.store import open_store
        from runner.history.url import resolve
    except ImportError as e:
        say(f"history: not recorded ({e.name or e} is not installed: pip install "
            f"'iree-sdxl-runner[history]'); the results stay in {out}: "
            f"`{later(out, given)}` adds them later")
        return False
    try:
        url = resolve(given)
        results = [r if r.build or not build else replace(r, build=build)
                   for r in extract(out, command)]
        with open_store(url) as store:
            added = store.add_all(results)
    except RunnerError as e:
        from runner.config.sources import redact_secrets

        first = redact_secrets(str(e)).splitlines()[0]
        say(f"history: not recorded ({first}); the results stay in {out}: "
            f"`{later(out, given)}` adds them later")
        return False
    except KeyboardInterrupt as e:  # a store that makes its user wait can be left
        from runner.base.signals import signal_name

        say(f"history: not recorded (stopped by {signal_name(e)}); the results stay in {out}: "
            f"`{later(out, given)}` adds them later")
        return False
    say(f"history: {added} result(s) recorded in {url.shown()}"
        + ("" if added == len(results) else f" ({len(results) - added} already there)"))
    return True
