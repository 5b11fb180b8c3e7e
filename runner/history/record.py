"""Recording a finished command's results: called once, by the CLI, after any command that
records (runner.history.extract.RECORDED) has finished with a verdict (exit 0 or 1).

Best effort by design: a store that cannot be reached, a missing SQLAlchemy, an out dir the
extraction cannot read never fail the command whose results these are. They stay in its out
dir, and the note printed says how `runner history import DIR` adds them later.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from runner.base.errors import RunnerError
from runner.history.extract import RECORDED, extract


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
           say: Callable[[str], None] = _say) -> bool:
    """Adds what `command` wrote to `out` to the store `given` (--results; None: the
    environment's or the default). True when it is in the store afterwards."""
    if command not in RECORDED:
        return False
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
        results = extract(out, command)
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
