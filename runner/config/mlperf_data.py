"""The MLPerf SDXL inputs: 5000 COCO captions (sample i = row i), the fixed latent, review ids."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runner.base.errors import BadInput
from runner.base.paths import MLPERF_DATA_DIR
from runner.inputs.captions import read_captions

CAPTIONS_FILE = MLPERF_DATA_DIR / "captions_source.tsv"
LATENT_FILE = MLPERF_DATA_DIR / "latents.npy"
REVIEW_IDS_FILE = MLPERF_DATA_DIR / "sample_ids.txt"
NEGATIVE_PROMPT = "normal quality, low quality, worst quality, low res, blurry, nsfw, nude"


@dataclass(frozen=True)
class Captions:
    path: Path
    texts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, qsl_idx: int) -> str:
        if not 0 <= qsl_idx < len(self.texts):
            raise BadInput(
                f"sample {qsl_idx} is out of range: the file has {len(self.texts)} captions",
                where=str(self.path),
                fix="use sample ids below the number of caption rows",
            )
        return self.texts[qsl_idx]


def load_captions(path: Path = CAPTIONS_FILE) -> Captions:
    """The captions file through its bounded reader (runner.inputs.captions)."""
    return Captions(path, read_captions(path))


def load_latent(path: Path = LATENT_FILE) -> np.ndarray:
    """The one initial latent MLPerf uses for every prompt, 1x4x128x128 float32."""
    try:
        latent = np.load(path)
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read the latent: {e}", where=str(path),
                       fix="pass MLPerf's latents.npy (1x4x128x128 float32)") from e
    if latent.ndim != 4 or latent.shape[:2] != (1, 4):
        raise BadInput(f"latent has shape {latent.shape}, expected 1x4xHxW", where=str(path),
                       fix="use MLPerf's latents.pt (or the shipped one)")
    return latent.astype(np.float32)


def fixed_latent(size: int, path: Path = LATENT_FILE) -> np.ndarray:
    """The MLPerf latent at `size` x `size`: the top-left crop for models smaller than SDXL."""
    latent = load_latent(path)
    if size > latent.shape[2] or size > latent.shape[3]:
        raise BadInput(f"latent is {latent.shape[2]}x{latent.shape[3]}, model needs {size}",
                       where=str(path),
                       fix="use the latent of the model's image size (the model config's)")
    return np.ascontiguousarray(latent[:, :, :size, :size])


def load_review_ids(path: Path = REVIEW_IDS_FILE) -> list[int]:
    return [int(line) for line in path.read_text().split()]
