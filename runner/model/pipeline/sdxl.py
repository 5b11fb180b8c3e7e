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

from runner.base.errors import RunnerError
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


class SampleFailures(RunnerError):
    """Images of a batch that could not be made: their decoder output (or the latents it
    decoded) is not finite, so they never become images. `failed`: index in the batch ->
    why; `images`: the whole batch, each failed one's slot zeros (never to be stored)."""

    def __init__(self, failed: dict[int, str], images: np.ndarray, fix: str, where: str):
        self.failed, self.images = failed, images
        first = min(failed)
        super().__init__(f"{len(failed)} of {len(images)} images failed: image {first}: "
                         f"{failed[first]}", where=where, fix=fix)


def decode_fix(vae_dtype: str) -> str:
    """What to do about a decoder output that is not finite, decoding in `vae_dtype`."""
    if vae_dtype == "float16":
        return ("decode in fp32 (`--set model.vae_dtype=fp32`: MLPerf's reference does, "
                "since SDXL's own VAE overflows in fp16), or decode with an fp16-safe VAE: "
                "`runner export sdxl ... --vae-dtype fp16 --vae-from DIR` with a "
                "diffusers-format VAE directory adapted for fp16 (e.g. a copy of "
                "madebyollin/sdxl-vae-fp16-fix), `model.vae_from: DIR` in the profile")
    return ("the VAE gives no finite image even in fp32: check its weights (the "
            "checkpoint's vae/, or the --vae-from directory)")


LATENTS_FIX = ("the UNet's latents are not finite, so no decoder can make an image of them: "
               "check the UNet's weights and precision (`model.dtype`)")


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
        """uint8 N x H x W x 3 images for up to `batch_size` prompts. An image whose decoder
        output is not finite never becomes one: `SampleFailures` names it (and carries the
        batch's other images)."""
        if not 0 < len(prompts) <= self.batch_size:
            raise ValueError(f"got {len(prompts)} prompts for batch size {self.batch_size}")
        padded = prompts + [prompts[-1]] * (self.batch_size - len(prompts))
        embeds, pooled = self.encode(padded)
        latents = self.denoise(embeds, pooled)
        images = self.decode(latents)[: len(prompts)].astype(np.float32)
        failed = self._not_finite(latents[: len(prompts)], images)
        if failed:
            images[sorted(failed)] = 0.0
        out = to_uint8_hwc(images)
        if failed:
            vae_dtype = self.config.vae_dtype
            latents_bad = any(not np.isfinite(latents[i]).all() for i in failed)
            raise SampleFailures(failed, out, LATENTS_FIX if latents_bad
                                 else decode_fix(vae_dtype),
                                 f"{self.config.path}: functions.decode")
        return out

    def _not_finite(self, latents: np.ndarray, images: np.ndarray) -> dict[int, str]:
        """Index -> why, for each image of the batch that is not finite."""
        out = {}
        for i, image in enumerate(images):
            if np.isfinite(image).all():
                continue
            if not np.isfinite(latents[i]).all():
                out[i] = "the UNet's latents hold NaN or Inf values"
            else:
                bad = int(np.size(image) - np.isfinite(image).sum())
                out[i] = (f"the VAE's output is not finite ({bad} NaN/Inf values) decoding in "
                          f"{self.config.vae_dtype}")
        return out
