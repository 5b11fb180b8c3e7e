"""LoadGen's system under test over the runner's file queue, sample store and workers.

Every issued sample is its own work item, keyed by a fresh id, never by qsl_idx: LoadGen
issues a qsl_idx many times in performance mode (and TEST04 issues one index only), and
MLPerf forbids caching results across queries (TEST04 exists to catch it), so each issue
is computed. A batch file carries the keys and their caption rows; the worker writes each
image under its key, and the completer here answers LoadGen for keys it still owes:

- exactly one QuerySamplesComplete per issued sample: a key is owed until answered, and a
  key that lands again (a dead worker's batch recomputed by another) is dropped;
- the response carries the uint8 HWC pixels (what MLPerf's accuracy script reads), and the
  image is released and its file deleted once LoadGen has copied it, so memory and disk
  stay flat however many samples a test issues;
- when every worker is dead, the samples still owed are answered empty so LoadGen can end
  and write its logs, and the failure is recorded: a clear error, never a hang. The same
  when a worker records a sample it could not make (its decoder's output was not finite,
  `samples/failed/`): no image exists to answer it with, and no later one will.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runner.base.errors import RunnerError
from runner.base.progress import Progress
from runner.batch.queue import WorkQueue
from runner.loadgen.batcher import Batcher, Item
from runner.rundir.store import SampleStore

WORKERS_DEAD = "workers-dead"  # in the queue dir: written by the process owning the workers
DEAD_POLL_S = 0.1


@dataclass
class Owed:
    response_id: int
    qsl_idx: int


@dataclass
class SutStats:
    issued: int = 0
    completed: int = 0
    completed_empty: int = 0  # answered without an image (every worker dead)
    recomputed: int = 0  # images that landed for keys already answered
    batches: int = 0
    land_to_complete_ns: list[int] = field(default_factory=list)

    def percentile_ms(self, q: float) -> float | None:
        if not self.land_to_complete_ns:
            return None
        return float(np.percentile(self.land_to_complete_ns, q)) / 1e6

    def to_dict(self) -> dict[str, Any]:
        return {"issued": self.issued, "completed": self.completed,
                "completed_empty": self.completed_empty, "recomputed": self.recomputed,
                "batches": self.batches,
                "store_to_complete_ms": {"p50": self.percentile_ms(50),
                                         "p99": self.percentile_ms(99),
                                         "max": self.percentile_ms(100)}}


class QueueSUT:
    """Issue -> queue batches; store -> QuerySamplesComplete; every worker dead -> empty
    answers, so the test ends."""

    def __init__(self, work_dir: Path, batch_size: int, ordered: bool = False,
                 poll_s: float = 0.002):
        """`ordered` (accuracy mode, where LoadGen issues each qsl_idx once): batches and
        answers go in ascending qsl_idx, as the runner's own queue and aggregation do, so
        LoadGen's accuracy log lists the same images in the same order and scores to the
        same float bits (FID's sums depend on the order); an image that lands early waits
        on disk for its turn, not in memory.

        The workers are watched by the process that owns them (the lifecycle's
        execution hands a dead worker's batches back to the queue); it says "every worker
        is dead" with the queue's marker file, which this SUT checks."""
        self.queue, self.store = WorkQueue(work_dir), SampleStore(work_dir)
        self.batch_size, self.poll_s = batch_size, poll_s
        self.ordered = ordered
        self.key_of_qsl: dict[int, int] = {}
        self.next_qsl = 0
        self.lock = threading.Lock()
        self.owed: dict[int, Owed] = {}
        self.next_key = 0
        self.failure: str | None = None
        self.stats = SutStats()
        self.batcher: Batcher | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_handle_poll = 0.0
        # The test's progress line (samples completed of those LoadGen will issue, the
        # queries issued, rate, ETA); `one_query`: Offline, whose one query says the total.
        self.progress: Progress | None = None
        self.one_query = False
        self.queries = 0

    # LoadGen callbacks (LoadGen's threads) -------------------------------------------
    def begin_test(self, limit_s: float | None) -> None:
        """A fresh batcher and completer per LoadGen test; keys keep counting up."""
        self.stats = SutStats()
        self.batcher = Batcher(self.batch_size, self._put_batch, limit_s)
        self._stop.clear()
        self._thread = threading.Thread(target=self._complete_loop, name="completer",
                                        daemon=True)
        self._thread.start()

    def end_test(self) -> None:
        assert self.batcher is not None and self._thread is not None
        self.batcher.close()
        self._stop.set()
        self._thread.join()

    def issue_query(self, samples) -> None:
        items: list[Item] = []
        if self.ordered:
            samples = sorted(samples, key=lambda s: s.index)
        with self.lock:
            for s in samples:
                key = self.next_key
                self.next_key += 1
                self.owed[key] = Owed(s.id, s.index)
                self.key_of_qsl[s.index] = key
                items.append((key, s.index))
            self.stats.issued += len(items)
            self.queries += 1
            if self.progress is not None and self.one_query and self.progress.total is None:
                self.progress.total = len(items)
            failed = self.failure is not None
        if failed:
            self._answer_empty()
            return
        assert self.batcher is not None
        self.batcher.add(items)

    def flush_queries(self) -> None:
        if self.batcher is not None:
            self.batcher.flush()

    # internals ------------------------------------------------------------------------
    def _put_batch(self, items: list[Item]) -> None:
        keys = [k for k, _ in items]
        self.queue.put(f"q{keys[0]:012d}", keys, [q for _, q in items])
        self.stats.batches += 1

    def _complete_loop(self) -> None:
        while True:
            stopping = self._stop.is_set()
            self._complete_landed()
            self._watch_workers()
            if self.progress is not None:
                self.progress.update(self.stats.completed, extra=f"{self.stats.issued} issued "
                                     f"in {self.queries} quer{'y' if self.queries == 1 else 'ies'}")
            if stopping:
                return
            time.sleep(self.poll_s)

    def _landed(self) -> list[tuple[int, int]]:
        """(key, landed_ns) of the finished sample files (temp files start with a dot); the
        ctime is the rename that made the file whole, after the worker's fsync."""
        try:
            entries = list(os.scandir(self.store.dir))
        except FileNotFoundError:
            return []
        out = []
        for entry in entries:
            stem, dot, ext = entry.name.partition(".")
            if ext == "png" and dot and stem.isdigit():
                try:
                    out.append((int(stem), entry.stat().st_ctime_ns))
                except FileNotFoundError:
                    continue
        return sorted(out)

    def _complete_landed(self) -> None:
        import mlperf_loadgen as lg

        landed = self._landed()
        for key, landed_ns in self._in_order(landed) if self.ordered else landed:
            path = self.store.path(key)
            with self.lock:
                owed = self.owed.pop(key, None)
            if owed is None:
                path.unlink(missing_ok=True)
                self.stats.recomputed += 1
                continue
            try:
                image = np.ascontiguousarray(self.store.load(key), dtype=np.uint8)
            except RunnerError as e:  # corrupt: moved aside by the store; compute it again
                print(f"warning: {e}; recomputing", file=sys.stderr, flush=True)
                with self.lock:
                    self.owed[key] = owed
                    self.next_qsl = min(self.next_qsl, owed.qsl_idx)
                self.queue.put(f"r{key:012d}", [key], [owed.qsl_idx])
                continue
            lg.QuerySamplesComplete([lg.QuerySampleResponse(owed.response_id, image.ctypes.data,
                                                            image.nbytes)])
            done_ns = time.time_ns()
            del image  # LoadGen copied what it logs
            path.unlink(missing_ok=True)
            self.stats.completed += 1
            self.stats.land_to_complete_ns.append(done_ns - landed_ns)

    def _in_order(self, landed: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The landed samples whose turn it is, plus the ones nobody waits for any more
        (recomputed duplicates, to be dropped)."""
        at = dict(landed)
        out = []
        with self.lock:
            while (key := self.key_of_qsl.get(self.next_qsl)) is not None:
                if key in self.owed:
                    if key not in at:
                        break
                    out.append((key, at[key]))
                self.next_qsl += 1
            out += [(k, t) for k, t in landed if k not in self.owed]
        return out

    def _watch_workers(self) -> None:
        now = time.monotonic()
        if now < self._next_handle_poll:
            return
        self._next_handle_poll = now + DEAD_POLL_S
        if self.failure is None and (failed := self.store.failures()):
            first = failed[min(failed)]
            self.failure = (f"{len(failed)} sample(s) could not be made (sample key "
                            f"{first.qsl_idx}: {first.error}; fix: {first.fix}); the samples "
                            "still owed were answered empty so LoadGen could end its test")
            print(f"error: {self.failure}", file=sys.stderr, flush=True)
        if self.failure is None and self.queue.root.joinpath(WORKERS_DEAD).exists():
            with self.lock:
                owed = len(self.owed)
            self.failure = (f"every worker is dead; {owed} issued sample(s) could not be "
                            "computed and were answered empty so LoadGen could end its test")
            print(f"error: {self.failure}", file=sys.stderr, flush=True)
        if self.failure is not None:
            self._answer_empty()

    def _answer_empty(self) -> None:
        import mlperf_loadgen as lg

        with self.lock:
            owed, self.owed = list(self.owed.values()), {}
        if owed:
            lg.QuerySamplesComplete([lg.QuerySampleResponse(o.response_id, 0, 0)
                                     for o in owed])
        self.stats.completed_empty += len(owed)

