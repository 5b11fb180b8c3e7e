"""A work queue of sample batches made of files in the run dir, claimed by atomic rename.

Files rather than pipes or a broker because the same run dir is shared by local worker
processes, containers (bind mount) and cluster nodes (shared filesystem): a rename is atomic
on all of them, needs no server, and survives the death of any process, the driver included.
A worker's claimed batches sit in its own directory until done, so a dead worker's work can
be handed back to the queue by whoever notices.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runner.base.fileio import atomic_write_json

QUEUE_DIR = "queue"
# While this file exists, more batches may come (a LoadGen run issues samples over time):
# workers wait for work instead of exiting when the queue is empty.
OPEN_MARKER = "open"


@dataclass(frozen=True)
class Batch:
    """`ids` key the sample store; `prompts` are the caption rows when they differ (a LoadGen
    run keys each issued sample by its own id, since LoadGen may issue a row many times)."""

    name: str
    ids: tuple[int, ...]
    prompts: tuple[int, ...] | None = None

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        return self.ids if self.prompts is None else self.prompts


def _batch_ids(data: list[int] | dict) -> list[int]:
    return data["ids"] if isinstance(data, dict) else data


class WorkQueue:
    def __init__(self, run_dir: Path):
        self.root = Path(run_dir) / QUEUE_DIR
        self.pending = self.root / "pending"
        self.claimed = self.root / "claimed"

    def fill(self, ids: Iterable[int], batch_size: int) -> int:
        """Replaces the queue's contents with `ids` in batches; returns the batch count."""
        self.clear()
        self.pending.mkdir(parents=True, exist_ok=True)
        ordered = sorted(ids)
        starts = range(0, len(ordered), batch_size)
        for lo in starts:
            atomic_write_json(self.pending / f"b{lo:06d}.json", ordered[lo : lo + batch_size])
        return len(starts)

    def clear(self) -> None:
        for d in (self.pending, *self._claim_dirs()):
            for f in d.glob("*.json"):
                f.unlink(missing_ok=True)

    def _claim_dirs(self) -> list[Path]:
        return sorted(p for p in self.claimed.glob("*") if p.is_dir())

    def claim(self, worker: str) -> Batch | None:
        """Moves the first pending batch into the worker's directory; None when empty."""
        mine = self.claimed / worker
        mine.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.pending.glob("*.json")):
            target = mine / path.name
            try:
                os.rename(path, target)
            except FileNotFoundError:
                continue  # another worker won the race for this one
            data = json.loads(target.read_text())
            if isinstance(data, dict):
                return Batch(path.name, tuple(data["ids"]), tuple(data["prompts"]))
            return Batch(path.name, tuple(data))
        return None

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / OPEN_MARKER).touch()

    def close(self) -> None:
        (self.root / OPEN_MARKER).unlink(missing_ok=True)

    def is_open(self) -> bool:
        return (self.root / OPEN_MARKER).exists()

    def next_batch(self, worker: str, poll_s: float = 0.01) -> Batch | None:
        """`claim`, waiting while the queue is open; None once it is closed and empty."""
        while True:
            batch = self.claim(worker)
            if batch is not None:
                return batch
            if not self.is_open():
                return self.claim(worker)  # a batch put just before the close
            time.sleep(poll_s)

    def put(self, name: str, ids: list[int], prompts: list[int]) -> None:
        """One batch whose store keys differ from its caption rows; `name` orders it."""
        self.pending.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.pending / f"{name}.json", {"ids": ids, "prompts": prompts})

    def done(self, worker: str, batch: Batch) -> None:
        (self.claimed / worker / batch.name).unlink(missing_ok=True)

    def add(self, ids: Iterable[int], batch_size: int) -> int:
        """Adds batches for `ids` without touching the rest of the queue (workers on other
        nodes may be pulling from it); returns the batch count. The caller passes ids that
        no batch file holds, so names from the first id cannot collide with existing ones."""
        self.pending.mkdir(parents=True, exist_ok=True)
        ordered = sorted(ids)
        starts = range(0, len(ordered), batch_size)
        for lo in starts:
            atomic_write_json(self.pending / f"a{ordered[lo]:06d}.json",
                              ordered[lo : lo + batch_size])
        return len(starts)

    def release(self, worker: str) -> list[str]:
        """Hands a (dead) worker's claimed batches back to the queue; returns their names.

        Safe to race with another releaser of the same worker (a Slurm node's own SIGTERM
        handler and the submitter both do it): each batch moves once."""
        returned = []
        for path in sorted((self.claimed / worker).glob("*.json")):
            try:
                os.rename(path, self.pending / path.name)
            except FileNotFoundError:
                continue
            returned.append(path.name)
        return returned

    def release_prefix(self, prefix: str) -> dict[str, list[str]]:
        """Releases every worker whose name starts with `prefix` (one node's workers)."""
        out = {}
        for worker in self.claimants():
            if worker.startswith(prefix) and (returned := self.release(worker)):
                out[worker] = returned
        return out

    def claimants(self) -> list[str]:
        """Names of the workers that ever claimed a batch in this queue."""
        return [p.name for p in self._claim_dirs()]

    def covered_ids(self) -> set[int]:
        """Sample ids some batch file holds, pending or claimed.

        Pending is read before the claim dirs are listed, so a batch claimed meanwhile is
        still seen; one released meanwhile can be missed, which at worst makes a caller
        queue it twice: computed twice, stored once (the store is keyed by qsl_idx)."""
        out: set[int] = set()
        for files in (lambda: self.pending.glob("*.json"),
                      lambda: [f for d in self._claim_dirs() for f in d.glob("*.json")]):
            for f in files():  # pending read whole before the claim dirs are listed
                try:
                    out.update(_batch_ids(json.loads(f.read_text())))
                except FileNotFoundError:
                    continue  # claimed, released or finished while we looked
        return out

    def pending_count(self) -> int:
        return sum(1 for _ in self.pending.glob("*.json"))

    def claimed_by(self, worker: str) -> list[str]:
        return sorted(p.name for p in (self.claimed / worker).glob("*.json"))
