"""SDXL's submodels wrapped as the three modules the runner exports, for any size.

Same function names and data flow as the SDXL artifacts IREE CI tests: two CLIP text
encoders (penultimate hidden states concatenated, pooled projection from the second), a
UNet with text_time conditioning driven by a baked EulerDiscrete schedule, and an
AutoencoderKL decoder. The embedded tiny model and real SDXL are the same classes: only
the diffusers/transformers configs and the weights differ (seeded, or a checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from runner.config.architecture import Architecture

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16}


def scheduler(config: dict, steps: int):
    """EulerDiscrete with the checkpoint's scheduler config, as MLPerf's reference loads it
    (`EulerDiscreteScheduler.from_pretrained(..., subfolder="scheduler")`)."""
    from diffusers import EulerDiscreteScheduler

    sched = EulerDiscreteScheduler.from_config(config)
    sched.set_timesteps(steps)
    return sched


class PromptEncoder(nn.Module):
    """`encode_prompts(ids_1, ids_2, uncond_ids_1, uncond_ids_2) -> (embeds, pooled)`.

    Outputs stack [uncond; cond] on the batch axis, as SDXL's classifier-free guidance does.
    """

    def __init__(self, text_encoder_1: nn.Module, text_encoder_2: nn.Module):
        super().__init__()
        self.text_encoder_1 = text_encoder_1
        self.text_encoder_2 = text_encoder_2

    def _encode(self, ids_1: torch.Tensor, ids_2: torch.Tensor):
        out_1 = self.text_encoder_1(ids_1, output_hidden_states=True)
        out_2 = self.text_encoder_2(ids_2, output_hidden_states=True)
        embeds = torch.cat([out_1.hidden_states[-2], out_2.hidden_states[-2]], dim=-1)
        return embeds, out_2.text_embeds

    def forward(self, ids_1, ids_2, uncond_ids_1, uncond_ids_2):
        embeds, pooled = self._encode(ids_1, ids_2)
        neg_embeds, neg_pooled = self._encode(uncond_ids_1, uncond_ids_2)
        return torch.cat([neg_embeds, embeds]), torch.cat([neg_pooled, pooled])

    encode_prompts = forward


class ScheduledUnet(nn.Module):
    """The UNet with the Euler schedule baked in, driven one step per call from the host.

    `run_initialize(sample) -> (sample x init_sigma, time_ids)`;
    `run_forward(sample, embeds, pooled, time_ids, guidance, step) -> next sample`.
    """

    timesteps: torch.Tensor
    sigmas: torch.Tensor
    time_id_row: torch.Tensor

    def __init__(self, unet: nn.Module, sched, image_size: int,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.unet = unet
        self.register_buffer("timesteps", sched.timesteps.to(torch.float32), persistent=False)
        self.register_buffer("sigmas", sched.sigmas.to(torch.float32), persistent=False)
        self.init_sigma = float(sched.init_noise_sigma)
        # The schedule stays float32 as diffusers keeps it: a half-precision sample is scaled
        # and stepped in float32 and cast back, as EulerDiscreteScheduler.step does.
        self.cast_back = dtype != torch.float32
        size = float(image_size)
        self.register_buffer("time_id_row",
                             torch.tensor([[size, size, 0.0, 0.0, size, size]], dtype=dtype),
                             persistent=False)

    def run_initialize(self, sample: torch.Tensor):
        batch = sample.shape[0]
        return sample * self.init_sigma, self.time_id_row.repeat(2 * batch, 1)

    def run_forward(self, sample, prompt_embeds, text_embeds, time_ids, guidance_scale, step):
        sigma = self.sigmas[step]
        sigma_next = self.sigmas[step + 1]
        timestep = self.timesteps[step]
        model_in = torch.cat([sample, sample]) / torch.sqrt(sigma * sigma + 1.0)
        if self.cast_back:
            model_in = model_in.to(sample.dtype)
        noise = self.unet(
            model_in, timestep.expand(model_in.shape[0]), encoder_hidden_states=prompt_embeds,
            added_cond_kwargs={"text_embeds": text_embeds, "time_ids": time_ids},
            return_dict=False,
        )[0]
        uncond, cond = noise.chunk(2)
        guided = uncond + guidance_scale * (cond - uncond)
        stepped = sample + guided * (sigma_next - sigma)
        return stepped.to(sample.dtype) if self.cast_back else stepped


class GroupNormInFloat32(nn.GroupNorm):
    """A half-precision VAE's GroupNorm as torch's own kernels compute it (CPU and CUDA
    alike): statistics and normalization in float32, the result rounded to half. Written
    out so the exported graph says so: IREE lowers a half GroupNorm to half reductions,
    which put the tiny VAE's fp16 images 9 LSB away from diffusers' fp16 decode; with this
    they are within 1 LSB (docs/accuracy.md)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = None if self.weight is None else self.weight.float()
        bias = None if self.bias is None else self.bias.float()
        return nn.functional.group_norm(x.float(), self.num_groups, weight, bias,
                                        self.eps).to(x.dtype)


class VaeDecoder(nn.Module):
    """`decode(latents) -> images` in [0,1], as SDXL's VAE artifact returns them, and NaN
    where the decode is not finite (the host refuses those: runner.model.pipeline.sdxl).

    The VAE computes in `vae_dtype`, whatever the latents come in: latents in another
    dtype are cast on the way in, and the images come out in `vae_dtype`. float32 is
    MLPerf's reference: it runs the fp16 pipeline and diffusers upcasts SDXL's VAE (config
    `force_upcast`, its fp16 decode overflows). float16 is what IREE CI's artifacts and
    AMD's harness decode in (with a VAE adapted for it).
    """

    def __init__(self, vae: Any, latent_dtype: torch.dtype = torch.float32,
                 vae_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.vae = vae
        self.vae.encoder = None  # only the decoder ships; an encoder would be dead weight
        self.scaling_factor = float(vae.config.scaling_factor)
        self.vae_dtype = vae_dtype
        self.cast = latent_dtype != vae_dtype

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        if self.cast:
            latents = latents.to(self.vae_dtype)
        image = self.vae.decode(latents / self.scaling_factor, return_dict=False)[0] / 2 + 0.5
        # IREE lowers clamp so that NaN becomes 0 and Inf saturates: an fp16 decode that
        # overflowed came back as black images. `image - image` is 0 for every finite pixel
        # (the clamped value is kept exactly) and NaN for NaN or Inf, which reach the host.
        return image.clamp(0, 1) + (image - image)

    decode = forward


@dataclass
class SdxlModules:
    clip: PromptEncoder
    unet: ScheduledUnet
    vae: VaeDecoder

    def named(self) -> dict[str, nn.Module]:
        return {"clip": self.clip, "unet": self.unet, "vae": self.vae}


def _text_encoders(arch: Architecture):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    def config(raw: dict) -> CLIPTextConfig:
        kwargs: dict[str, Any] = {k: v for k, v in raw.items()
                                  if k not in ("architectures", "torch_dtype", "model_type")}
        kwargs["attn_implementation"] = "eager"
        return CLIPTextConfig(**kwargs)

    return (CLIPTextModel(config(arch.text_encoder)),
            CLIPTextModelWithProjection(config(arch.text_encoder_2)))


def _cast(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """`module.to(dtype)` as torch does it. diffusers' own `.to` adds checks for quantized
    and offloaded models (neither is built here) and, on every cast of a VAE, a warning that
    its modules "should be kept in float32: []", which users of `runner export` read twice
    per export; these casts are deliberate (`vae_decoder`)."""
    return nn.Module.to(module, dtype)


def _as(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """`module` in `dtype`, untouched when it already is."""
    return module if all(p.dtype == dtype for p in module.parameters()) else _cast(module,
                                                                                   dtype)


def fp16_pipeline_vae(vae: nn.Module) -> nn.Module:
    """The VAE an fp16 diffusers pipeline decodes with: loaded in float16 (every weight
    rounded to half precision) and then upcast to float32 for SDXL's `force_upcast`. A
    checkpoint's `*.fp16.safetensors` already hold those values; its full-precision files
    must be rounded here, or the export decodes with weights the reference never had."""
    return _cast(_cast(_as(vae, torch.float32), torch.float16), torch.float32)


def vae_decoder(vae: nn.Module, dtype: str, vae_dtype: str) -> VaeDecoder:
    """The decoder of a model whose latents are `dtype`, decoding in `vae_dtype`: in
    float16, the weights rounded to half and GroupNorm in float32 (`GroupNormInFloat32`);
    in float32 under an fp16 model, diffusers' fp16 pipeline's rounded weights upcast."""
    if vae_dtype == "float16":
        vae = _as(vae, torch.float16)
        for module in vae.modules():
            if type(module) is nn.GroupNorm:
                module.__class__ = GroupNormInFloat32
    elif dtype == "float16":
        vae = fp16_pipeline_vae(vae)
    else:
        vae = _as(vae, torch.float32)
    return VaeDecoder(vae, TORCH_DTYPES[dtype], TORCH_DTYPES[vae_dtype])


def _wrap(arch: Architecture, te_1, te_2, unet, vae, dtype: str, steps: int,
          vae_dtype: str = "float32") -> SdxlModules:
    torch_dtype = TORCH_DTYPES[dtype]
    modules = SdxlModules(
        PromptEncoder(_as(te_1, torch_dtype), _as(te_2, torch_dtype)),
        ScheduledUnet(_as(unet, torch_dtype), scheduler(arch.scheduler, steps), arch.image_size,
                      torch_dtype),
        vae_decoder(vae, dtype, vae_dtype))
    for module in modules.named().values():
        module.eval().requires_grad_(False)
    return modules


def load_vae(root: Path, variant: str | None):
    """A diffusers-format VAE directory's AutoencoderKL, in float32 (`vae_decoder` rounds)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL.from_pretrained(root, torch_dtype=torch.float32, variant=variant,
                                         use_safetensors=True)


def build_seeded(arch: Architecture, seed: int, dtype: str, steps: int,
                 vae_dtype: str = "float32", vae: Any = None) -> SdxlModules:
    """Seeded random weights: the same call always gives the same modules. Built directly in
    `dtype` where possible, so a full-size fp16 UNet never exists in float32 (10 GB). `vae`:
    a VAE of its own (`--vae-from`) instead of a seeded one."""
    from diffusers import AutoencoderKL, UNet2DConditionModel

    torch.manual_seed(seed)
    saved = torch.get_default_dtype()
    torch.set_default_dtype(TORCH_DTYPES[dtype])
    try:
        te_1, te_2 = _text_encoders(arch)
        unet = UNet2DConditionModel.from_config(arch.unet)
    finally:
        torch.set_default_dtype(saved)
    if vae is None:
        vae = AutoencoderKL.from_config(arch.vae)
    return _wrap(arch, te_1, te_2, unet, vae, dtype, steps, vae_dtype)


def load_checkpoint(arch: Architecture, root: Path, variants: dict[str, str | None],
                    dtype: str, steps: int, vae_dtype: str = "float32",
                    vae: Any = None) -> SdxlModules:
    """The submodels of a diffusers-format checkpoint (already checked by `checkpoint`);
    `variants` says per submodel whether its `fp16` weight files are the ones to read.
    `vae`: a VAE of its own (`--vae-from`) instead of the checkpoint's."""
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    torch_dtype = TORCH_DTYPES[dtype]

    def opts(sub: str) -> dict:
        return {"variant": variants[sub], "use_safetensors": True}

    te_1 = CLIPTextModel.from_pretrained(root / "text_encoder", dtype=torch_dtype,
                                         attn_implementation="eager", **opts("text_encoder"))
    te_2 = CLIPTextModelWithProjection.from_pretrained(
        root / "text_encoder_2", dtype=torch_dtype, attn_implementation="eager",
        **opts("text_encoder_2"))
    unet = UNet2DConditionModel.from_pretrained(root / "unet", torch_dtype=torch_dtype,
                                                **opts("unet"))
    if vae is None:
        vae = load_vae(root / "vae", variants["vae"])
    return _wrap(arch, te_1, te_2, unet, vae, dtype, steps, vae_dtype)
