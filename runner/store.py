"""The per-run sample store: one PNG per finished sample, written atomically.

The file is the completion record: it appears whole (temp file + rename) or not at all,
and its tEXt chunks carry qsl_idx, worker, device and the sha256 of the raw uint8 HWC
pixels. So a killed worker or run loses only in-flight samples, and resume is a listing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runner.errors import RunnerError
from runner.fileio import sha256_bytes
from runner.images import decode_png, png_text, write_png

SAMPLES_DIR = "samples"


@dataclass(frozen=True)
class SampleRecord:
    qsl_idx: int
    sha256: str
    worker: str
    device: str

    def to_dict(self) -> dict:
        return {"qsl_idx": self.qsl_idx, "sha256": self.sha256, "worker": self.worker,
                "device": self.device}


class SampleStore:
    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / SAMPLES_DIR

    def path(self, qsl_idx: int) -> Path:
        return self.dir / f"{qsl_idx:05d}.png"

    def put(self, qsl_idx: int, image: np.ndarray, worker: str, device: str) -> SampleRecord:
        record = SampleRecord(qsl_idx, sha256_bytes(np.ascontiguousarray(image).tobytes()),
                              worker, device)
        text = {k: str(v) for k, v in record.to_dict().items()}
        try:
            write_png(self.path(qsl_idx), image, text)
        except OSError as e:
            raise RunnerError(f"cannot write sample {qsl_idx}: {e}", where=str(self.dir),
                              fix="free disk space, then `runner run --resume` this run dir; "
                              "finished samples are kept") from e
        return record

    def done_ids(self) -> set[int]:
        if not self.dir.is_dir():
            return set()
        return {int(p.stem) for p in self.dir.glob("[0-9]*.png") if p.stem.isdigit()}

    def record(self, qsl_idx: int) -> SampleRecord:
        text = png_text(self.path(qsl_idx).read_bytes())
        return SampleRecord(int(text["qsl_idx"]), text["sha256"], text["worker"], text["device"])

    def load(self, qsl_idx: int, verify: bool = True) -> np.ndarray:
        path = self.path(qsl_idx)
        try:
            data = path.read_bytes()
            image = decode_png(data)
        except (OSError, ValueError) as e:
            raise RunnerError(f"unreadable sample: {e}", where=str(path),
                              fix="delete the file and `runner run --resume` to regenerate") from e
        if verify and png_text(data).get("sha256") != sha256_bytes(image.tobytes()):
            raise RunnerError("sample pixels do not match their recorded sha256", where=str(path),
                              fix="delete the file and `runner run --resume` to regenerate")
        return image

    def iter_samples(self, ids: Iterable[int] | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(qsl_idx, uint8 HWC) in ascending qsl_idx order, one image in memory at a time."""
        for qsl_idx in sorted(self.done_ids() if ids is None else ids):
            yield qsl_idx, self.load(qsl_idx)
