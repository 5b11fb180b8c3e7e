"""Where a run's images come from, which sample ids it asked for, and id-set spelling.

Three layouts hold images: a run dir (`run.json` + `samples/` PNG store), a generate dir
(`manifest.json` + `images/`) and an MLPerf accuracy log (`mlperf_log_accuracy.json`, inside
the run dir or passed with `--log`, e.g. from AMD's harness). Each yields (qsl_idx, uint8 HWC)
one image at a time, so scoring 5000 1024x1024 images never holds them all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runner.base.errors import BadInput
from runner.base.fileio import sha256_bytes
from runner.inputs.jsonfile import read_json
from runner.model.images import decode_png
from runner.rundir.mlperf_log import LOG_NAME, iter_log_samples
from runner.rundir.store import SampleStore

RUN_META = "run.json"
GENERATE_META = "manifest.json"
_TOKEN = re.compile(r"([0-9]+)(?:-([0-9]+))?")
MAX_IDS = 1_000_000


def parse_ids(spec: str | int | Iterable[int], where: str = "samples") -> tuple[int, ...]:
    """`0-31`, `0,5,9-12`, an int, or a list of ints -> sorted unique ids."""
    if isinstance(spec, int):
        return (spec,)
    if not isinstance(spec, str):
        try:
            return tuple(sorted({int(i) for i in spec}))
        except (TypeError, ValueError) as e:
            raise BadInput(f"not a list of sample ids: {spec!r}", where=where,
                           fix="give whole numbers, e.g. [0, 1, 2] or 0-2") from e
    out: set[int] = set()
    for token in spec.replace(" ", "").split(","):
        m = _TOKEN.fullmatch(token)
        if not m:
            raise BadInput(f"{token!r} in {spec!r} is not a sample id or range",
                           where=where, fix="write ids like 0-31 or 0,5,9-12")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo or hi - lo >= MAX_IDS:
            raise BadInput(f"bad range {token!r}", where=where, fix="write it low-high")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def chosen_ids(count: int | None, spec: str | None, ids_file: str | None,
               captions: Path | None, default_count: int) -> list[int]:
    """The samples of `--count N`, `--samples SPEC` or `--ids FILE` (one of them; none:
    0..default_count-1), each checked against the captions file."""
    from runner.batch.run import read_ids_file, validate_ids

    if ids_file:
        return validate_ids(read_ids_file(Path(ids_file)), ids_file, captions)
    if spec:
        return validate_ids(list(parse_ids(spec, where="--samples")), "--samples", captions)
    return validate_ids(list(range(default_count if count is None else count)), "--count",
                        captions)


def format_ids(ids: Iterable[int]) -> str:
    """The compact spelling parse_ids reads back (`0-31`, `0,2,4-9`)."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(set(ids)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


@dataclass(frozen=True)
class SampleSource:
    """A run's images. `requested` is what the run was asked for (None when nothing says);
    `available` is what is on disk (None for a log, known only by reading it)."""

    run_dir: Path
    kind: str  # "store" | "generate" | "log"
    profile: str | None
    requested: tuple[int, ...] | None
    available: tuple[int, ...] | None
    log: Path | None = None
    sha256: dict[int, str] | None = None  # generate dirs record each image's hash
    captions: Path | None = None  # the captions file the run recorded, if any
    # The profile as the run recorded it, its `--set` overrides applied (run.json's or
    # manifest.json's `profile_config`): what scoring reads unless told another profile.
    profile_config: dict[str, Any] | None = None

    @property
    def location(self) -> str:
        return str(self.log if self.kind == "log" else self.run_dir)

    def iter_samples(self, image_shape: tuple[int, int, int] | None = None,
                     keep_duplicates: bool = False, jobs: int | None = None
                     ) -> Iterator[tuple[int, np.ndarray]]:
        """One image at a time; a log's repeated qsl_idx are passed on with
        `keep_duplicates` (for a consumer that counts what it skips); `jobs` threads read a
        store (default: every core)."""
        if self.kind == "store":
            wanted = self.available if self.requested is None else sorted(
                set(self.requested) & set(self.available or ()))
            yield from SampleStore(self.run_dir).iter_samples(wanted, jobs)
        elif self.kind == "generate":
            for qsl_idx in self.available or ():
                yield qsl_idx, self._load_png(qsl_idx)
        else:
            if image_shape is None:
                raise BadInput("reading an accuracy log needs the image size",
                               where=str(self.log), fix="pass --profile")
            assert self.log is not None  # a "log" source always names its log
            yield from iter_log_samples(self.log, image_shape, keep_duplicates)

    def _load_png(self, qsl_idx: int) -> np.ndarray:
        path = self.run_dir / "images" / f"{qsl_idx:05d}.png"
        try:
            image = decode_png(path.read_bytes())
        except (OSError, ValueError) as e:
            raise BadInput(f"unreadable image: {e}", where=str(path),
                           fix="regenerate this run") from e
        expected = (self.sha256 or {}).get(qsl_idx)
        if expected and sha256_bytes(image.tobytes()) != expected:
            raise BadInput("image pixels do not match the sha256 in manifest.json",
                           where=str(path), fix="regenerate this run")
        return image


_QSL = re.compile(rb'"qsl_idx"\s*:\s*([0-9]+)')


def scan_log_ids(path: Path, chunk: int = 1 << 24) -> tuple[int, ...]:
    """The distinct qsl_idx of an accuracy log, without decoding its images: a byte scan
    (the hex `data` strings cannot contain the key), so an incomplete log is refused before
    an hour of scoring rather than after."""
    ids: set[int] = set()
    tail = b""
    with open(path, "rb") as f:
        while block := f.read(chunk):
            buf = tail + block
            # A match starting in the last 64 bytes may be cut off: leave it for the next round.
            cut = max(0, len(buf) - 64)
            ids.update(int(m.group(1)) for m in _QSL.finditer(buf) if m.start() < cut)
            tail = buf[cut:]
    ids.update(int(m.group(1)) for m in _QSL.finditer(tail))
    return tuple(sorted(ids))


def _read_json(path: Path) -> dict:
    return read_json(path, what="run record")


def _recorded_profile(meta: dict) -> str | None:
    """The profile file the run used when it still exists (a run may use a YAML outside
    configs/), else its name."""
    path = meta.get("profile_path")
    if path and Path(path).is_file():
        return str(path)
    return meta.get("profile")


def _recorded_config(meta: dict) -> dict[str, Any] | None:
    """The profile mapping the run recorded (None in a record older than it)."""
    config = meta.get("profile_config")
    return config if isinstance(config, dict) else None


def _generated_hashes(run_dir: Path, meta: dict) -> dict[int, str]:
    """The sha256 `runner generate` recorded of each sample's PNG, by qsl_idx (empty when
    it recorded none): every sample it was asked for, written or not."""
    entries = meta.get("samples")
    if not isinstance(entries, list):
        raise BadInput("no `samples` list", where=f"{run_dir / GENERATE_META}: samples",
                       fix="point at a directory `runner generate` wrote, or make it "
                       "again")
    try:
        return {int(e["qsl_idx"]): str(e.get("sha256", "")) for e in entries}
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"bad sample entry: {e}",
                       where=f"{run_dir / GENERATE_META}: samples",
                       fix="make the directory again with `runner generate`") from e


def open_source(run_dir: Path, log: Path | None = None, verify: bool = True) -> SampleSource:
    """The images of `run_dir` (or of `log`). A run dir's samples are verified up front
    (a corrupt one is moved aside, and then counts as missing); `verify=False` (a dry run)
    takes the ones there as they are and moves nothing."""
    run_dir = Path(run_dir)
    expected = (f"a run dir ({RUN_META} + samples/), a generate dir ({GENERATE_META} + "
                f"images/) or a dir holding {LOG_NAME}")
    if run_dir.is_file():
        raise BadInput(f"a file, where {expected} is expected", where=str(run_dir),
                       fix=f"pass the directory that holds the run ({run_dir.parent}, if "
                       "it is that one)")
    if not run_dir.is_dir():
        raise BadInput(f"run dir not found: {run_dir}", where=str(run_dir),
                       fix=f"pass {expected}")
    profile, requested, captions, config = None, None, None, None
    if (run_dir / RUN_META).is_file():
        meta = _read_json(run_dir / RUN_META)
        profile, config = _recorded_profile(meta), _recorded_config(meta)
        captions = Path(meta["captions"]) if meta.get("captions") else None
        if "sample_ids" in meta:
            requested = parse_ids(meta["sample_ids"], where=f"{run_dir / RUN_META}: sample_ids")
        if log is None:
            # Verified up front: a corrupt file is moved aside, named on stderr, and then
            # counts as missing, before any scoring time is spent.
            store = SampleStore(run_dir)
            available = tuple(sorted(store.verified_ids() if verify else store.done_ids()))
            if available or not (run_dir / LOG_NAME).is_file():
                return SampleSource(run_dir, "store", profile, requested, available,
                                    captions=captions, profile_config=config)
    elif (run_dir / GENERATE_META).is_file():
        meta = _read_json(run_dir / GENERATE_META)
        profile, config = _recorded_profile(meta), _recorded_config(meta)
        hashes = _generated_hashes(run_dir, meta)
        requested = tuple(sorted(hashes))
        if log is None:
            present = tuple(i for i in requested
                            if (run_dir / "images" / f"{i:05d}.png").is_file())
            return SampleSource(run_dir, "generate", profile, requested, present, None, hashes,
                                profile_config=config)
    log = Path(log) if log is not None else run_dir / LOG_NAME
    if not log.is_file():
        raise BadInput(f"no images found in {run_dir}", where=str(run_dir),
                       fix=f"expected {RUN_META} + samples/, {GENERATE_META} + images/, "
                           f"or {LOG_NAME} (or pass --log PATH)")
    return SampleSource(run_dir, "log", profile, requested, None, log, captions=captions,
                        profile_config=config)
