"""Issued samples -> queue batches of the layout's batch size.

Offline: LoadGen issues everything in one query, so batches are cut at once and the
remainder goes out as a last, smaller batch. Server: samples arrive one by one at the
target QPS; a batch leaves when it is full or when its oldest sample has waited
`limit_s` (AMD's `--enable_batcher --batcher_limit`), so a lightly loaded server never
holds a sample back for long while a loaded one still fills its batches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

Item = tuple[int, int]  # (store key, qsl_idx)


class Batcher:
    def __init__(self, size: int, emit: Callable[[list[Item]], None], limit_s: float | None):
        """`limit_s` None: no waiting (Offline); otherwise the Server wait limit."""
        self.size, self.emit, self.limit_s = size, emit, limit_s
        self.pending: list[Item] = []
        self.oldest = 0.0
        self.cond = threading.Condition()
        self.stopped = False
        self.thread: threading.Thread | None = None
        if limit_s is not None:
            self.thread = threading.Thread(target=self._timer, name="batcher", daemon=True)
            self.thread.start()

    def add(self, items: list[Item]) -> None:
        with self.cond:
            if not self.pending:
                self.oldest = time.monotonic()
            self.pending.extend(items)
            while len(self.pending) >= self.size:
                self._emit(self.size)
            if self.limit_s is None and self.pending:
                self._emit(len(self.pending))
            self.cond.notify()

    def flush(self) -> None:
        with self.cond:
            if self.pending:
                self._emit(len(self.pending))

    def close(self) -> None:
        self.flush()
        with self.cond:
            self.stopped = True
            self.cond.notify()
        if self.thread is not None:
            self.thread.join()

    def _emit(self, n: int) -> None:
        """Called with the lock held, so batches leave in issue order."""
        batch, self.pending = self.pending[:n], self.pending[n:]
        self.oldest = time.monotonic()
        self.emit(batch)

    def _timer(self) -> None:
        assert self.limit_s is not None
        with self.cond:
            while not self.stopped:
                if not self.pending:
                    self.cond.wait()
                    continue
                left = self.oldest + self.limit_s - time.monotonic()
                if left > 0:
                    self.cond.wait(left)
                    continue
                self._emit(len(self.pending))
