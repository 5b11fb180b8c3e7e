"""The embedded tiny SDXL: SDXL's own modules (`sdxl_model`) with tiny configs and seeded
weights. 16x16 latents -> 128x128 images; the vocabulary is learned from the captions.
"""

from __future__ import annotations

from runner.config.architecture import Architecture, sdxl_architecture
from runner.model.export.sdxl_model import SdxlModules, build_seeded
from runner.model.export.sdxl_model import scheduler as euler_scheduler

SEED = 20251122
LATENT_SIZE = 16
IMAGE_SIZE = 128
VOCAB_MERGES = 510  # 512 byte symbols + 510 merges + BOS + EOS = 1024 ids
HIDDEN_1, HIDDEN_2, POOLED = 32, 64, 64
TIME_EMBED = 8
SCALING_FACTOR = 0.13025  # SDXL's VAE scaling factor
STEPS = 20


def architecture(bos: int, eos: int, vocab_size: int, max_length: int) -> Architecture:
    """SDXL's structure (two CLIP encoders, text_time UNet, 4-block VAE) scaled down; the
    scheduler is SDXL base 1.0's own config, as MLPerf uses it."""
    common = dict(vocab_size=vocab_size, max_position_embeddings=max_length,
                  bos_token_id=bos, eos_token_id=eos, pad_token_id=eos,
                  num_hidden_layers=2, hidden_act="gelu")
    blocks = [8, 16, 32, 32]
    return Architecture(
        text_encoder=dict(hidden_size=HIDDEN_1, intermediate_size=2 * HIDDEN_1,
                          num_attention_heads=4, **common),
        text_encoder_2=dict(hidden_size=HIDDEN_2, intermediate_size=2 * HIDDEN_2,
                            num_attention_heads=4, projection_dim=POOLED, **common),
        unet=dict(
            sample_size=LATENT_SIZE, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=[32, 64], norm_num_groups=8,
            down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"],
            up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"],
            attention_head_dim=[2, 4], transformer_layers_per_block=[1, 1],
            cross_attention_dim=HIDDEN_1 + HIDDEN_2, use_linear_projection=True,
            addition_embed_type="text_time", addition_time_embed_dim=TIME_EMBED,
            projection_class_embeddings_input_dim=POOLED + 6 * TIME_EMBED),
        vae=dict(
            in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=8,
            block_out_channels=blocks, layers_per_block=1, sample_size=IMAGE_SIZE,
            down_block_types=["DownEncoderBlock2D"] * len(blocks),
            up_block_types=["UpDecoderBlock2D"] * len(blocks),
            scaling_factor=SCALING_FACTOR),
        scheduler=sdxl_architecture().scheduler,
    )


def scheduler(steps: int = STEPS):
    """EulerDiscrete with SDXL base 1.0's scheduler config (as MLPerf uses it)."""
    return euler_scheduler(sdxl_architecture().scheduler, steps)


def build(bos: int, eos: int, vocab_size: int, max_length: int) -> SdxlModules:
    """Seeded construction: the same call always gives the same weights."""
    return build_seeded(architecture(bos, eos, vocab_size, max_length), SEED, "float32", STEPS)
