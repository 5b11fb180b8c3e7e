"""The embedded tiny SDXL: diffusers/transformers classes with tiny configs and seeded weights.

Same submodels, function names and data flow as the SDXL artifacts IREE CI tests, scaled
down: two CLIP text encoders (penultimate hidden states concatenated, pooled projection
from the second), an SDXL UNet with text_time conditioning driven by a baked
EulerDiscrete schedule, and an AutoencoderKL decoder. 16x16 latents -> 128x128 images.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

SEED = 20251122
LATENT_SIZE = 16
IMAGE_SIZE = 128
VOCAB_MERGES = 510  # 512 byte symbols + 510 merges + BOS + EOS = 1024 ids
HIDDEN_1, HIDDEN_2, POOLED = 32, 64, 64
TIME_EMBED = 8
SCALING_FACTOR = 0.13025  # SDXL's VAE scaling factor
STEPS = 20


def _sdxl_scheduler():
    """EulerDiscrete with SDXL base 1.0's scheduler config (as MLPerf uses it)."""
    from diffusers import EulerDiscreteScheduler

    return EulerDiscreteScheduler(
        num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
        beta_schedule="scaled_linear", timestep_spacing="leading", steps_offset=1,
        prediction_type="epsilon", interpolation_type="linear", use_karras_sigmas=False,
    )


def scheduler(steps: int = STEPS):
    sched = _sdxl_scheduler()
    sched.set_timesteps(steps)
    return sched


class PromptEncoder(nn.Module):
    """`encode_prompts(ids_1, ids_2, uncond_ids_1, uncond_ids_2) -> (embeds, pooled)`.

    Outputs stack [uncond; cond] on the batch axis, as SDXL's classifier-free guidance does.
    """

    def __init__(self, bos: int, eos: int, vocab_size: int, max_length: int):
        super().__init__()
        from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

        common = dict(vocab_size=vocab_size, max_position_embeddings=max_length,
                      bos_token_id=bos, eos_token_id=eos, pad_token_id=eos,
                      num_hidden_layers=2, hidden_act="gelu", attn_implementation="eager")
        self.text_encoder_1 = CLIPTextModel(CLIPTextConfig(
            hidden_size=HIDDEN_1, intermediate_size=2 * HIDDEN_1, num_attention_heads=4,
            **common))
        self.text_encoder_2 = CLIPTextModelWithProjection(CLIPTextConfig(
            hidden_size=HIDDEN_2, intermediate_size=2 * HIDDEN_2, num_attention_heads=4,
            projection_dim=POOLED, **common))

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


def build_unet():
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=LATENT_SIZE, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), norm_num_groups=8,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4), transformer_layers_per_block=(1, 1),
        cross_attention_dim=HIDDEN_1 + HIDDEN_2, use_linear_projection=True,
        addition_embed_type="text_time", addition_time_embed_dim=TIME_EMBED,
        projection_class_embeddings_input_dim=POOLED + 6 * TIME_EMBED,
    )


class ScheduledUnet(nn.Module):
    """The UNet with the Euler schedule baked in, driven one step per call from the host.

    `run_initialize(sample) -> (sample x init_sigma, time_ids)`;
    `run_forward(sample, embeds, pooled, time_ids, guidance, step) -> next sample`.
    """

    def __init__(self, unet: nn.Module, steps: int = STEPS):
        super().__init__()
        self.unet = unet
        sched = scheduler(steps)
        self.register_buffer("timesteps", sched.timesteps.to(torch.float32), persistent=False)
        self.register_buffer("sigmas", sched.sigmas.to(torch.float32), persistent=False)
        self.init_sigma = float(sched.init_noise_sigma)
        size = float(IMAGE_SIZE)
        self.register_buffer("time_id_row", torch.tensor([[size, size, 0.0, 0.0, size, size]]),
                             persistent=False)

    def run_initialize(self, sample: torch.Tensor):
        batch = sample.shape[0]
        return sample * self.init_sigma, self.time_id_row.repeat(2 * batch, 1)

    def run_forward(self, sample, prompt_embeds, text_embeds, time_ids, guidance_scale, step):
        sigma = self.sigmas[step]
        sigma_next = self.sigmas[step + 1]
        timestep = self.timesteps[step]
        model_in = torch.cat([sample, sample]) / torch.sqrt(sigma * sigma + 1.0)
        noise = self.unet(
            model_in, timestep.expand(model_in.shape[0]), encoder_hidden_states=prompt_embeds,
            added_cond_kwargs={"text_embeds": text_embeds, "time_ids": time_ids},
            return_dict=False,
        )[0]
        uncond, cond = noise.chunk(2)
        guided = uncond + guidance_scale * (cond - uncond)
        return sample + guided * (sigma_next - sigma)


class VaeDecoder(nn.Module):
    """`decode(latents) -> images` in [0,1], as SDXL's VAE artifact returns them."""

    def __init__(self):
        super().__init__()
        from diffusers import AutoencoderKL

        blocks = (8, 16, 32, 32)
        self.vae = AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=8,
            block_out_channels=blocks, layers_per_block=1, sample_size=IMAGE_SIZE,
            down_block_types=("DownEncoderBlock2D",) * len(blocks),
            up_block_types=("UpDecoderBlock2D",) * len(blocks),
            scaling_factor=SCALING_FACTOR,
        )
        self.vae.encoder = None  # only the decoder ships; an encoder would be dead weight

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        image = self.vae.decode(latents / SCALING_FACTOR, return_dict=False)[0]
        return (image / 2 + 0.5).clamp(0, 1)

    decode = forward


@dataclass
class TinySdxl:
    clip: PromptEncoder
    unet: ScheduledUnet
    vae: VaeDecoder


def build(bos: int, eos: int, vocab_size: int, max_length: int) -> TinySdxl:
    """Seeded construction: the same call always gives the same weights."""
    torch.manual_seed(SEED)
    model = TinySdxl(PromptEncoder(bos, eos, vocab_size, max_length),
                     ScheduledUnet(build_unet()), VaeDecoder())
    for module in (model.clip, model.unet, model.vae):
        module.eval().requires_grad_(False)
    return model
