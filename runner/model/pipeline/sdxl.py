"""The SDXL pipeline: tokenize -> encode_prompts -> denoise -> decode -> uint8 HWC images.

One class drives the embedded tiny model and real SDXL artifacts alike; only the model
config (function names, denoise mode, dtype, sizes) and the compiled modules differ.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from runner.config.model_config import ModelConfig
from runner.model.images import to_uint8_hwc
from runner.model.pipeline.iree_session import IreeSession
from runner.model.tokenizer import ClipTokenizer, TokenizerFiles


@dataclass
class StageTimes:
    """Seconds spent per stage, summed over calls; a benchmark reads these."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] += seconds
        self.calls[stage] += 1

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {s: {"seconds": self.seconds[s], "calls": self.calls[s]} for s in self.seconds}


class SdxlPipeline:
    """Generates one batch at a time with modules already loaded into `session`.

    `batch_size` must be a size the modules were compiled for; a short final batch is
    padded with its last prompt and the extra images dropped, as MLPerf harnesses do.
    """

    def __init__(self, config: ModelConfig, session: IreeSession, batch_size: int,
                 vae_batch_size: int | None = None, latent: np.ndarray | None = None):
        self.config = config
        self.batch_size = batch_size
        self.vae_batch_size = vae_batch_size or batch_size
        self.dtype = np.dtype(config.dtype)
        files = TokenizerFiles.in_dir(Path(config.resolve(config.tokenizer_dir)))
        self.tokenizers = [ClipTokenizer(files, config.max_length, pad)
                           for pad in config.pad_tokens]
        if latent is None:
            from runner.config.mlperf_data import fixed_latent

            latent = fixed_latent(config.latent_size)
        self.latents = np.repeat(latent.astype(self.dtype), batch_size, axis=0)
        self.times = StageTimes()
        where = f"{config.path}: functions"
        self.fns = {role: session.function(sub, fn, f"{where}.{role}")
                    for role, (sub, fn) in config.functions.items()}
        self._uncond = [t.encode([config.negative_prompt] * batch_size) for t in self.tokenizers]

    def _timed(self, stage: str, role: str, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        start = time.perf_counter()
        out = self.fns[role](*args)
        self.times.add(stage, time.perf_counter() - start)
        return out

    def encode(self, prompts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = [t.encode(prompts) for t in self.tokenizers]
        embeds, pooled = self._timed("clip", "encode_prompts", *ids, *self._uncond)
        return embeds, pooled

    def initialize(self) -> tuple[np.ndarray, np.ndarray]:
        sample, time_ids = self._timed("unet_init", "run_initialize", self.latents)
        return sample, time_ids

    def step(self, sample: np.ndarray, embeds: np.ndarray, pooled: np.ndarray,
             time_ids: np.ndarray, index: int) -> np.ndarray:
        guidance = np.array([self.config.guidance_scale], self.dtype)
        (sample,) = self._timed("unet_step", "run_forward", sample, embeds, pooled, time_ids,
                                guidance, np.array([index], np.int64))
        return sample

    def denoise(self, embeds: np.ndarray, pooled: np.ndarray) -> np.ndarray:
        if self.config.denoise == "produce_image_latents":
            guidance = np.array([self.config.guidance_scale], self.dtype)
            (sample,) = self._timed("unet", "produce_image_latents", self.latents, embeds,
                                    pooled, guidance)
            return sample
        sample, time_ids = self.initialize()
        for i in range(self.config.steps):
            sample = self.step(sample, embeds, pooled, time_ids, i)
        return sample

    def decode(self, latents: np.ndarray) -> np.ndarray:
        v = self.vae_batch_size
        chunks = [self._timed("vae", "decode", latents[i : i + v])[0]
                  for i in range(0, len(latents), v)]
        return np.concatenate(chunks)

    def generate(self, prompts: list[str]) -> np.ndarray:
        """uint8 N x H x W x 3 images for up to `batch_size` prompts."""
        if not 0 < len(prompts) <= self.batch_size:
            raise ValueError(f"got {len(prompts)} prompts for batch size {self.batch_size}")
        padded = prompts + [prompts[-1]] * (self.batch_size - len(prompts))
        embeds, pooled = self.encode(padded)
        images = self.decode(self.denoise(embeds, pooled))
        if not np.isfinite(images).all():
            raise FloatingPointError("the pipeline produced NaN or Inf pixels")
        return to_uint8_hwc(images.astype(np.float32))[: len(prompts)]
