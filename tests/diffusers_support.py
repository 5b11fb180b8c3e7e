"""Diffusers' side of the tests that compare the runner with diffusers' own pipeline
(runner/accuracy/diffusers_reference.py), in the shape the tests use it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from runner.accuracy.diffusers_reference import reference_images, write_tiny_checkpoint

write_checkpoint = write_tiny_checkpoint


def diffusers_images(checkpoint: Path, model_json: Path, count: int = 2,
                     vae_dtype: str = "float32") -> np.ndarray:
    """MLPerf's reference itself: diffusers' StableDiffusionXLPipeline on the checkpoint,
    with the settings the export recorded, for samples 0..count-1, decoding in
    `vae_dtype`."""
    config = json.loads(model_json.read_text())
    return reference_images(checkpoint, config, range(count), (vae_dtype,))[vae_dtype]


def assert_within_one_lsb(mine: np.ndarray, reference: np.ndarray) -> None:
    diff = np.abs(mine.astype(np.int16) - reference.astype(np.int16))
    assert mine.shape == reference.shape and diff.max() <= 1, (diff.max(), (diff > 1).sum())
