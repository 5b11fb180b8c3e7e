"""The per-run sample store: one PNG per finished sample, written atomically.

The file is the completion record: it appears whole (temp file + rename) or not at all,
and its tEXt chunks carry qsl_idx, worker, device and the sha256 of the raw uint8 HWC
pixels. So a killed worker or run loses only in-flight samples, and resume is a listing
plus a check of every listed file against its recorded sha256 (`verified_ids`).

A file that fails the check (truncated, bit-flipped, another sample's) is never deleted:
it moves to `samples/corrupt/<name>.<timestamp>`, so the evidence stays and the listing
no longer counts it; resume regenerates it.

A sample the pipeline could not make (its decoder's output was not finite) has no image:
its worker records why in `samples/failed/<qsl_idx>.json` and goes on with the next batch,
so one failed sample never sinks the workers. Aggregation and scoring refuse a run with
such records, naming the fix; a resume computes the sample again, and a sample written
later clears its record.

Reading is parallel (`runner.rundir.parallel`): a thread pool decodes and verifies on every core
while the caller consumes images in order, a bounded window ahead.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import queue
import stat
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runner.base.closing import Closes
from runner.base.errors import BadInput, RunnerError, StepFailed
from runner.base.fileio import atomic_write_bytes, atomic_write_json
from runner.inputs.paths import is_inside
from runner.model.images import decode_png, encode_png, png_text
from runner.rundir.parallel import default_jobs, ordered_map

SAMPLES_DIR = "samples"
CORRUPT_DIR = "corrupt"
FAILED_DIR = "failed"
# Stored (uncompressed) deflate blocks. A 1024x1024 SDXL image costs ~1 ms to encode and
# ~1 ms to decode this way, against 55 ms and 12 ms at level 1, for ~15% more disk
# (measured by scripts/bench_scale.py); every sample is read at least twice (aggregate,
# score) and the hex log beside it is twice the raw size anyway. Still a valid PNG any
# viewer opens, carrying its metadata.
PNG_LEVEL = 0
# What decoding a truncated, bit-flipped or foreign file raises: all mean "corrupt".
MALFORMED = (zlib.error, struct.error, ValueError, KeyError, IndexError)


def pixel_sha256(image: np.ndarray) -> str:
    """sha256 of the raw uint8 HWC bytes, hashed in place (no copy of a 3 MB image)."""
    contiguous = np.ascontiguousarray(image, dtype=np.uint8)
    return hashlib.sha256(contiguous).hexdigest()  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only


def _fields_dict(record: Any) -> dict:
    """A sample's record (SampleRecord, SampleFailure) as its JSON: every field, in the order
    declared, which is the key order of the files written."""
    return asdict(record)


@dataclass(frozen=True)
class SampleRecord:
    qsl_idx: int
    sha256: str
    worker: str
    device: str

    to_dict = _fields_dict


@dataclass(frozen=True)
class SampleFailure:
    """Why a sample has no image: what the pipeline said (`error`) and what to do (`fix`)."""

    qsl_idx: int
    worker: str
    device: str
    error: str
    fix: str

    to_dict = _fields_dict

    @classmethod
    def from_dict(cls, raw: dict) -> SampleFailure:
        return cls(int(raw["qsl_idx"]), str(raw["worker"]), str(raw["device"]),
                   str(raw["error"]), str(raw.get("fix", "")))


def failures_error(failures: dict[int, SampleFailure], total: int, where: str,
                   refused: str) -> RunnerError:
    """The error for a run with failed samples: how many, the first one's reason and fix.
    `refused`: what is refused because of them (aggregation, scoring)."""
    first = failures[min(failures)]
    ids = sorted(failures)
    return RunnerError(f"{len(ids)} of {total} samples failed (qsl_idx {ids[:20]}"
                       f"{', ...' if len(ids) > 20 else ''}); {refused}. Sample {first.qsl_idx}: "
                       f"{first.error}", where=where, fix=first.fix or "see the failure "
                       f"records in samples/{FAILED_DIR}/")


class CorruptSample(RunnerError):
    """A sample file that does not hold the pixels it records; `moved_to` is where it went."""

    def __init__(self, qsl_idx: int, reason: str, path: Path, moved_to: Path | None,
                 run_dir: Path):
        self.qsl_idx, self.reason, self.moved_to = qsl_idx, reason, moved_to
        kept = f"; moved aside to {moved_to}" if moved_to else ""
        super().__init__(f"sample {qsl_idx} is corrupt ({reason}){kept}", where=str(path),
                         fix=f"`runner run --resume {run_dir}` regenerates it")


@dataclass(frozen=True)
class Loaded:
    record: SampleRecord
    image: np.ndarray


class NotRegularSample(Exception):
    """A sample path that is not a regular file of the run (quarantined like a corrupt one)."""


class SampleStore:
    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / SAMPLES_DIR
        self._dir_checked = False

    def path(self, qsl_idx: int) -> Path:
        return self.dir / f"{qsl_idx:05d}.png"

    def put(self, qsl_idx: int, image: np.ndarray, worker: str, device: str) -> SampleRecord:
        """Encode, hash and write one sample durably (fsync + rename); seconds per 1024x1024
        image are in scripts/bench_scale.py. Workers call it through `SampleWriter`."""
        image = np.ascontiguousarray(image)
        record = SampleRecord(qsl_idx, pixel_sha256(image), worker, device)
        text = {k: str(v) for k, v in record.to_dict().items()}
        try:
            atomic_write_bytes(self.path(qsl_idx), encode_png(image, text, PNG_LEVEL))
        except OSError as e:
            raise StepFailed(f"cannot write sample {qsl_idx}: {e}", where=str(self.dir),
                             fix="free disk space, then `runner run --resume` this run dir; "
                             "finished samples are kept") from e
        self.failed_path(qsl_idx).unlink(missing_ok=True)  # an earlier attempt's failure
        return record

    def failed_path(self, qsl_idx: int) -> Path:
        return self.dir / FAILED_DIR / f"{qsl_idx:05d}.json"

    def fail(self, failure: SampleFailure) -> None:
        """Records a sample the pipeline could not make (no image is written for it)."""
        try:
            atomic_write_json(self.failed_path(failure.qsl_idx), failure.to_dict())
        except OSError as e:
            raise StepFailed(f"cannot record failed sample {failure.qsl_idx}: {e}",
                             where=str(self.dir), fix="free disk space, then `runner run "
                             "--resume` this run dir; finished samples are kept") from e

    def failures(self, ids: Iterable[int] | None = None) -> dict[int, SampleFailure]:
        """The failed samples' records (of `ids` when given), by qsl_idx."""
        wanted = None if ids is None else set(ids)
        out = {}
        for path in sorted((self.dir / FAILED_DIR).glob("[0-9]*.json")):
            if not path.stem.isdigit() or (wanted is not None and int(path.stem) not in wanted):
                continue
            try:
                out[int(path.stem)] = SampleFailure.from_dict(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                # Unreadable (cut short, edited): still a failure, the reason unknown.
                out[int(path.stem)] = SampleFailure(int(path.stem), "?", "?",
                                                    f"unreadable failure record {path}", "")
        return out

    def done_ids(self) -> set[int]:
        """Ids with a sample file, unchecked: cheap enough for progress polling. What is
        trusted as finished (resume, aggregate, score) goes through `verified_ids`/`load`."""
        if not self.dir.is_dir():
            return set()
        return {int(p.stem) for p in self.dir.glob("[0-9]*.png") if p.stem.isdigit()}

    def record(self, qsl_idx: int) -> SampleRecord:
        try:
            return _record(png_text(self._bytes(self.path(qsl_idx))))
        except (OSError, ValueError, KeyError, NotRegularSample) as e:
            raise BadInput(f"unreadable sample metadata: {e}", where=str(self.path(qsl_idx)),
                           fix=f"`runner run --resume {self.run_dir}` regenerates it") from e

    def read(self, qsl_idx: int) -> Loaded:
        """Decodes and verifies one sample; a corrupt one, or one that is not a regular file
        inside the run dir (a symlink, a fifo), is moved aside and raised as
        `CorruptSample`."""
        path = self.path(qsl_idx)
        try:
            data = self._bytes(path)
        except NotRegularSample as e:
            raise CorruptSample(qsl_idx, str(e), path, self.quarantine(qsl_idx),
                                self.run_dir) from None
        except OSError as e:
            raise BadInput(f"cannot read sample: {e}", where=str(path),
                           fix=f"`runner run --resume {self.run_dir}` regenerates it") from e
        try:
            image = decode_png(data, checksum=False)  # the sha256 below is the check
            record = _record(png_text(data))
            problem = None
            if record.qsl_idx != qsl_idx:
                problem = f"the file says it is sample {record.qsl_idx}"
            elif record.sha256 != pixel_sha256(image):
                problem = "its pixels do not match their recorded sha256"
        except MALFORMED as e:
            problem = f"unreadable PNG: {_error_name(e)}: {e}"
        if problem is not None:
            raise CorruptSample(qsl_idx, problem, path, self.quarantine(qsl_idx), self.run_dir)
        return Loaded(record, image)

    def _bytes(self, path: Path) -> bytes:
        """A sample file's bytes, read only if it is a regular file in this run's own
        samples/ directory: never through a symlink (O_NOFOLLOW), never a fifo or device."""
        if not self._dir_checked:
            if self.dir.is_symlink() or not is_inside(self.dir, self.run_dir):
                raise BadInput("samples/ is a symlink or leads out of the run dir",
                               where=str(self.dir),
                               fix="samples are files inside the run dir; move the real "
                               "directory there")
            self._dir_checked = True
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotRegularSample("a symlink, not a sample file of this run") from None
            raise
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotRegularSample("not a regular file")
            return f.read()

    def load(self, qsl_idx: int, verify: bool = True) -> np.ndarray:
        if not verify:
            try:
                return decode_png(self._bytes(self.path(qsl_idx)))
            except (OSError, NotRegularSample, *MALFORMED) as e:
                raise BadInput(f"unreadable sample: {type(e).__name__}: {e}",
                               where=str(self.path(qsl_idx)),
                               fix=f"`runner run --resume {self.run_dir}` regenerates it"
                               ) from e
        return self.read(qsl_idx).image

    def quarantine(self, qsl_idx: int) -> Path | None:
        """Moves a bad sample file to samples/corrupt/ (never deletes it); None if it is
        already gone (another reader moved it first)."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        base = self.dir / CORRUPT_DIR / f"{self.path(qsl_idx).name}.{stamp}"
        base.parent.mkdir(parents=True, exist_ok=True)
        target, n = base, 0
        while target.exists():  # the same sample corrupted twice within a second
            n += 1
            target = base.with_name(f"{base.name}.{n}")
        try:
            os.rename(self.path(qsl_idx), target)
        except FileNotFoundError:
            return None
        return target

    def verified_ids(self, ids: Iterable[int] | None = None, jobs: int | None = None,
                     report: Callable[[str], None] | None = None) -> set[int]:
        """The ids whose file holds exactly its recorded pixels, checked on every core.
        Corrupt files are moved aside and reported (stderr by default), so the caller
        sees them as missing and regenerates them."""
        present = self.done_ids()
        wanted = sorted(present if ids is None else present & set(ids))
        say = report or (lambda line: print(line, file=sys.stderr, flush=True))
        ok: set[int] = set()
        for qsl_idx, outcome in self._map(wanted, jobs):
            if isinstance(outcome, CorruptSample):
                say(f"warning: {outcome}")
            elif isinstance(outcome, BaseException):
                if self.path(qsl_idx).exists():
                    raise outcome  # unreadable for another reason (permissions, I/O error)
            else:
                ok.add(qsl_idx)
        return ok

    def iter_samples(self, ids: Iterable[int] | None = None, jobs: int | None = None
                     ) -> Iterator[tuple[int, np.ndarray]]:
        """(qsl_idx, uint8 HWC) in ascending qsl_idx order, verified, decoded ahead in
        parallel with a bounded window (memory does not grow with N)."""
        for qsl_idx, loaded in self.iter_loaded(ids, jobs):
            yield qsl_idx, loaded.image

    def iter_loaded(self, ids: Iterable[int] | None = None, jobs: int | None = None
                    ) -> Iterator[tuple[int, Loaded]]:
        """As `iter_samples`, with each file's record; the first corrupt sample raises."""
        return self.iter_mapped(sorted(self.done_ids() if ids is None else ids), None, jobs)

    def iter_mapped(self, ids: Iterable[int], fn: Callable[[Loaded], Any] | None,
                    jobs: int | None = None) -> Iterator[tuple[int, Any]]:
        """(qsl_idx, fn(verified sample)) in the order of `ids`, `fn` running on the
        reading threads too (aggregation hex-encodes there); the first corrupt sample
        raises `CorruptSample`."""
        for qsl_idx, outcome in self._map(list(ids), jobs, fn):
            if isinstance(outcome, BaseException):
                raise outcome
            yield qsl_idx, outcome

    def _map(self, ids: list[int], jobs: int | None,
             fn: Callable[[Loaded], Any] | None = None) -> Iterator[tuple[int, Any]]:
        def one(qsl_idx: int) -> Any:
            try:
                loaded = self.read(qsl_idx)
            except RunnerError as e:
                return e
            return loaded if fn is None else fn(loaded)

        yield from ordered_map(one, ids, jobs or default_jobs())


def _error_name(e: BaseException) -> str:
    """`zlib.error`, `struct.error`, `ValueError`: which layer of the file is broken."""
    module = type(e).__module__
    return type(e).__name__ if module == "builtins" else f"{module}.{type(e).__name__}"


def _record(text: dict[str, str]) -> SampleRecord:
    return SampleRecord(int(text["qsl_idx"]), text["sha256"], text["worker"], text["device"])


class SampleWriter(Closes):
    """Encodes, hashes and writes samples on a background thread, so a worker's generation
    thread never waits on disk (only when `max_pending` writes are already queued, i.e. the
    disk is slower than generation).

    `after(fn)` queues a callback that runs once every sample submitted before it is
    durably written: the worker marks a batch done in the queue that way, so a crash can
    never leave a batch recorded as done with samples missing. `close()` waits for all of
    it and re-raises the first error; after an error nothing more is written or marked.
    """

    def __init__(self, store: SampleStore, max_pending: int = 64):
        self.store = store
        self._queue: queue.Queue[Callable[[], object] | None] = queue.Queue(max_pending)
        self._error: BaseException | None = None
        self.busy_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="sample-writer", daemon=True)
        self._thread.start()

    def put(self, qsl_idx: int, image: np.ndarray, worker: str, device: str) -> None:
        self._submit(lambda: self.store.put(qsl_idx, image, worker, device))

    def fail(self, failure: SampleFailure) -> None:
        """A failed sample's record, written in order with the images around it."""
        self._submit(lambda: self.store.fail(failure))

    def after(self, fn: Callable[[], object]) -> None:
        self._submit(fn)

    def _submit(self, job: Callable[[], object]) -> None:
        self._raise()
        self._queue.put(job)

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            if self._error is None:
                start = time.perf_counter()
                try:
                    job()
                except BaseException as e:  # handed to the generation thread
                    self._error = e
                self.busy_seconds += time.perf_counter() - start

    def close(self) -> None:
        """Waits for every pending write and callback; raises the first error."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()
