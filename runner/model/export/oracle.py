"""The PyTorch eager oracle of the tiny pipeline (the execution tier's reference).

It loads the *shipped* weights from the `.irpa` archives into freshly built modules and
denoises with diffusers' own EulerDiscreteScheduler, not the schedule baked into the
exported UNet, so an error in the export wrapper shows up as a difference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from runner.base.signals import import_held
from runner.config.mlperf_data import fixed_latent
from runner.config.model_config import ModelConfig
from runner.model.images import to_uint8_hwc
from runner.model.tokenizer import ClipTokenizer, TokenizerFiles


def load_irpa(path: Path) -> dict[str, np.ndarray]:
    rt = import_held("iree.runtime")

    index = rt.ParameterIndex()
    index.load(str(path))
    return {key: rt.parameter_index_entry_as_numpy_ndarray(entry).copy()
            for key, entry in index.items()}


class TorchOracle:
    def __init__(self, config: ModelConfig):
        import torch

        from runner.model.export import tiny_model as tm

        self.torch = torch
        self.config = config
        files = TokenizerFiles.in_dir(Path(config.resolve(config.tokenizer_dir)))
        self.tokenizers = [ClipTokenizer(files, config.max_length, p) for p in config.pad_tokens]
        vocab = self.tokenizers[0].vocab
        self.model = tm.build(vocab["<|startoftext|>"], vocab["<|endoftext|>"], len(vocab),
                              config.max_length)
        for name, module in (("clip", self.model.clip), ("unet", self.model.unet),
                             ("vae", self.model.vae)):
            ref = config.submodels[name].weights
            assert ref is not None, f"the tiny model's {name} has weights"
            weights = load_irpa(Path(config.resolve(ref)))
            state = {k: torch.from_numpy(v) for k, v in weights.items()}
            module.load_state_dict(state, strict=True)
        self.latent = torch.from_numpy(fixed_latent(config.latent_size))

    def encode(self, prompts: list[str]):
        t = self.torch
        ids = [t.from_numpy(tok.encode(prompts)) for tok in self.tokenizers]
        neg = [t.from_numpy(tok.encode([self.config.negative_prompt] * len(prompts)))
               for tok in self.tokenizers]
        with t.no_grad():
            return self.model.clip(*ids, *neg)

    def unet_step(self, latents, embeds, pooled, timestep, sched):
        """One guided noise prediction, with diffusers' scheduler `sched` scaling the input
        (its state says which step it is at, so callers own it)."""
        t = self.torch
        size = float(self.config.image_size)
        time_ids = t.tensor([[size, size, 0.0, 0.0, size, size]]).repeat(embeds.shape[0], 1)
        model_in = sched.scale_model_input(t.cat([latents, latents]), timestep)
        with t.no_grad():
            noise = self.model.unet.unet(
                model_in, timestep, encoder_hidden_states=embeds,
                added_cond_kwargs={"text_embeds": pooled, "time_ids": time_ids},
                return_dict=False)[0]
        uncond, cond = noise.chunk(2)
        return uncond + self.config.guidance_scale * (cond - uncond)

    def denoise(self, embeds, pooled):
        from runner.model.export import tiny_model as tm

        sched = tm.scheduler(self.config.steps)
        latents = self.latent.repeat(embeds.shape[0] // 2, 1, 1, 1) * sched.init_noise_sigma
        for timestep in sched.timesteps:
            noise = self.unet_step(latents, embeds, pooled, timestep, sched)
            latents = sched.step(noise, timestep, latents, return_dict=False)[0]
        return latents

    def decode(self, latents):
        with self.torch.no_grad():
            return self.model.vae(latents)

    def generate(self, prompts: list[str]) -> np.ndarray:
        embeds, pooled = self.encode(prompts)
        return to_uint8_hwc(self.decode(self.denoise(embeds, pooled)).numpy())
