"""Progress of long driver steps (compile, run, scoring, Fréchet), one look for all of them.

On a terminal it is one live line rewritten in place (n/N, the item in progress, elapsed,
ETA); anywhere else (CI logs, files, pipes) it is whole lines: when an item starts, at each
10% step, at most every `interval` s while things change and every `heartbeat` s while they
do not, so a log stays readable and still shows a sign of life during an hour-long compile.
Hand-written rather than tqdm/rich: it is ~150 lines, the worker never imports it, and the
plain-line mode is the one that matters in CI, which those libraries treat as an
afterthought.

`RUNNER_PROGRESS=live|plain|off` overrides the terminal detection.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

# The one live line on screen, so `echo` can lift it out of the way of a permanent line.
_ACTIVE: list[Progress] = []
_LOCK = threading.RLock()


def mode(stream: TextIO) -> str:
    """'live', 'plain' or 'off' for this stream: $RUNNER_PROGRESS, else whether it is a TTY."""
    forced = os.environ.get("RUNNER_PROGRESS", "").strip().lower()
    if forced in ("live", "plain", "off"):
        return forced
    try:
        return "live" if stream.isatty() else "plain"
    except (AttributeError, ValueError):  # a closed or odd stream
        return "plain"


def duration(seconds: float) -> str:
    """12s, 3m05s, 1h02m: short enough for one status line."""
    s = round(max(seconds, 0.0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def echo(line: str, stream: TextIO | None = None) -> None:
    """Prints a permanent line on stderr without tearing the live progress line."""
    stream = stream or sys.stderr
    with _LOCK:
        live = [p for p in _ACTIVE if p.mode == "live" and p.stream is stream]
        if live:
            stream.write("\r\x1b[K")
        stream.write(line + "\n")
        for p in live:
            p._draw()
        stream.flush()


class Progress:
    """n of N items (or unknown N), the one in progress, elapsed and ETA.

    Use as a context manager for steps whose items can each take minutes (compile): a
    background ticker then keeps elapsed time moving on a terminal and prints a heartbeat
    line in logs. Without `with`, only `update`/`advance` calls print.
    """

    def __init__(self, label: str, total: int | None = None, *, unit: str = "",
                 already: int = 0, stream: TextIO | None = None, interval: float = 10.0,
                 heartbeat: float = 60.0, eta: bool = True, rate: bool = True, steps: bool = True,
                 live: bool = True, enabled: bool = True):
        self.label, self.total, self.unit = label, total, unit
        self.done = self.already = already
        self.stream = stream or sys.stderr
        self.mode = mode(self.stream) if enabled else "off"
        if self.mode == "live" and not live:  # several at once on one stream: whole lines
            self.mode = "plain"
        self.interval, self.heartbeat, self.show_eta = interval, heartbeat, eta
        self.show_rate = rate  # off where items differ wildly in cost (compile)
        self.steps = steps  # a line at each 10% in logs; off where every item has a start line
        self.item: str | None = None
        self.item_start = 0.0
        self.extra = ""
        self.start = self.last_print = time.monotonic()
        self.last_decile = self._decile(already)
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._printed: tuple[int, str | None, str] | None = None  # (done, item, extra) shown

    # -- what is shown ------------------------------------------------------------------
    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = now - self.start
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        parts = [f"{self.label} {count}{' ' + self.unit if self.unit else ''}"]
        if self.item:
            parts.append(f"{self.item} running {duration(now - self.item_start)}")
        parts.append(f"elapsed {duration(elapsed)}")
        rate = (self.done - self.already) / elapsed if elapsed > 0 else 0.0
        if self.show_rate and self.unit and rate > 0:
            parts.append(f"{rate:.2f} {self.unit}/s")
        if self.show_eta and self.total is not None and self.done < self.total:
            parts.append(f"ETA {duration((self.total - self.done) / rate)}" if rate > 0
                         else "ETA ?")
        if self.extra:
            parts.append(self.extra)
        return "  ".join(parts)

    def _decile(self, done: int) -> int:
        return done * 10 // self.total if self.total and self.steps else 0

    def _draw(self) -> None:
        self.stream.write("\r\x1b[K" + self.line())

    def _emit(self, now: float, final: bool = False) -> None:
        with _LOCK:
            state = (self.done, self.item, self.extra)
            if self.mode != "live" and final and state == self._printed:
                return  # the last whole line already says it: no twin line in the log
            self.last_print, self._printed = now, state
            if self.mode == "live":
                self._draw()
                if final:
                    self.stream.write("\n")
            else:
                self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def _maybe_emit(self, changed: bool, force: bool = False) -> None:
        if self.mode == "off":
            return
        now = time.monotonic()
        since = now - self.last_print
        if self.mode == "live":
            due = force or since >= 0.2
        else:
            decile = self._decile(self.done)
            due = (force or (changed and (since >= self.interval or decile > self.last_decile))
                   or since >= self.heartbeat)
            self.last_decile = max(self.last_decile, decile)
        if due:
            self._emit(now)

    # -- what callers report ------------------------------------------------------------
    def start_item(self, name: str) -> None:
        """Names the item now in progress; in logs this prints its start line at once."""
        self.item, self.item_start = name, time.monotonic()
        self._maybe_emit(changed=True, force=True)

    def update(self, done: int, *, extra: str | None = None) -> None:
        changed = done != self.done or (extra is not None and extra != self.extra)
        self.done = done
        if extra is not None:
            self.extra = extra
        self._maybe_emit(changed)

    def advance(self, n: int = 1, *, extra: str | None = None) -> None:
        self.item = None
        self.update(self.done + n, extra=extra)

    def finish(self, extra: str | None = None, done: int | None = None) -> None:
        """The last line, printed once (a newline ends the live line): not again by a
        `with` block's exit after an explicit finish, nor in logs when the last whole line
        already showed the same count."""
        if self._stop.is_set():
            return
        if done is not None:
            self.done = done
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with _LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
            self.item = None
            if extra is not None:
                self.extra = extra
            if self.mode != "off":
                self._emit(time.monotonic(), final=True)

    # -- the ticker ---------------------------------------------------------------------
    def __enter__(self) -> Progress:
        if self.mode == "off":
            return self
        with _LOCK:
            _ACTIVE.append(self)
        self._ticker = threading.Thread(target=self._tick, name=f"progress-{self.label}",
                                        daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def _tick(self) -> None:
        period = 1.0 if self.mode == "live" else min(self.interval, self.heartbeat)
        while not self._stop.wait(period):
            self._maybe_emit(changed=False, force=self.mode == "live")
