"""An SDXL-shaped architecture: the diffusers/transformers configs of its submodels.

Read without torch (profiles load it to name an export before anything is built), and
checked against what the exported pipeline relies on, so an SD 1.x/2.x checkpoint or a
config from another pipeline is a clear error naming the file, not a failed trace.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.paths import ASSETS_DIR
from runner.inputs.jsonfile import read_json as read_checked_json
from runner.inputs.limits import MiB

SDXL_DIR = ASSETS_DIR / "sdxl"
PIPELINE_CLASS = "StableDiffusionXLPipeline"
# (subfolder, config file) of every part the export reads.
CONFIG_FILES = {
    "text_encoder": "config.json",
    "text_encoder_2": "config.json",
    "unet": "config.json",
    "vae": "config.json",
    "scheduler": "scheduler_config.json",
}


@dataclass(frozen=True)
class Architecture:
    text_encoder: dict
    text_encoder_2: dict
    unet: dict
    vae: dict
    scheduler: dict

    @property
    def latent_size(self) -> int:
        return int(self.unet["sample_size"])

    @property
    def image_size(self) -> int:
        """The VAE upsamples once per block but the last: 128 latents -> 1024 pixels."""
        return self.latent_size * 2 ** (len(self.vae["block_out_channels"]) - 1)

    @property
    def embed_dim(self) -> int:
        return int(self.text_encoder["hidden_size"]) + int(self.text_encoder_2["hidden_size"])

    @property
    def pooled_dim(self) -> int:
        return int(self.text_encoder_2["projection_dim"])

    @property
    def prompt_positions(self) -> int:
        """The longest prompt, in tokens, both text encoders have positions for."""
        return min(int(self.text_encoder.get("max_position_embeddings", 77)),
                   int(self.text_encoder_2.get("max_position_embeddings", 77)))


def read_checkpoint_json(path: Path) -> dict:
    """A checkpoint's JSON (configs, model_index.json, tokenizer files) through the bounded
    reader: a JSON object, not too deep, finite numbers."""
    if not path.exists():
        raise BadInput("file missing", where=str(path),
                       fix="a diffusers-format SDXL checkpoint has model_index.json, "
                       "text_encoder/, text_encoder_2/, tokenizer/, tokenizer_2/, unet/, "
                       "vae/ and scheduler/ (save_pretrained writes them)")
    return read_checked_json(path, max_bytes=64 * MiB, what="checkpoint file")


# The config fields the export computes with, each a positive integer (a list of them for
# `block_out_channels`): checked up front so a wrong type is named, not a traceback.
INT_FIELDS = {"text_encoder": ("hidden_size",), "text_encoder_2": ("hidden_size",
                                                                   "projection_dim"),
              "unet": ("sample_size",)}
OPTIONAL_INT_FIELDS = {"text_encoder": ("max_position_embeddings",),
                       "text_encoder_2": ("max_position_embeddings",),
                       "unet": ("addition_time_embed_dim",)}


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_fields(configs: dict[str, dict], root: Path) -> None:
    for name, file in CONFIG_FILES.items():
        where = str(root / name / file)
        config = configs[name]
        for key in INT_FIELDS.get(name, ()):
            if not _positive(config.get(key)):
                raise BadInput(f"`{key}` must be a positive integer", where=f"{where}: {key}",
                               fix="use the checkpoint's own config.json, unedited")
        for key in OPTIONAL_INT_FIELDS.get(name, ()):
            if config.get(key) is not None and not _positive(config[key]):
                raise BadInput(f"`{key}` must be a positive integer", where=f"{where}: {key}",
                               fix="use the checkpoint's own config.json, unedited")
    blocks = configs["vae"].get("block_out_channels")
    if not (isinstance(blocks, list) and 0 < len(blocks) <= 16 and all(map(_positive, blocks))):
        raise BadInput("`block_out_channels` must list positive integers",
                       where=f"{root / 'vae' / 'config.json'}: block_out_channels",
                       fix="use the checkpoint's own config.json, unedited")


def load_architecture(root: Path) -> Architecture:
    """The configs under a diffusers-format directory, checked to be SDXL-shaped."""
    index_path = root / "model_index.json"
    index = read_checkpoint_json(index_path)
    if index.get("_class_name") != PIPELINE_CLASS:
        raise BadInput(f"a {index.get('_class_name')!r} checkpoint, not SDXL "
                       f"({PIPELINE_CLASS})", where=str(index_path),
                       fix="point --from at an SDXL base 1.0 checkpoint; SD 1.x/2.x "
                       "(one text encoder, 768/1024-d cross attention) cannot run this "
                       "pipeline")
    configs = {name: read_checkpoint_json(root / name / file)
               for name, file in CONFIG_FILES.items()}
    _check_fields(configs, root)
    arch = Architecture(**configs)
    check_architecture(arch, root)
    return arch


def check_architecture(arch: Architecture, root: Path) -> None:
    """What the exported pipeline relies on: text_time conditioning whose inputs are the two
    encoders' hidden states and the pooled projection, and 4-channel latents."""
    unet = arch.unet
    where = str(root / "unet" / "config.json")
    if unet.get("cross_attention_dim") != arch.embed_dim:
        raise BadInput(f"cross_attention_dim {unet.get('cross_attention_dim')} is not the "
                       f"two text encoders' hidden sizes summed ({arch.embed_dim})",
                       where=where, fix="this is not an SDXL UNet (SD 1.x has 768, "
                       "SD 2.x 1024; SDXL 2048)")
    if unet.get("addition_embed_type") != "text_time":
        raise BadInput(f"addition_embed_type is {unet.get('addition_embed_type')!r}, SDXL "
                       "has 'text_time'", where=where, fix="use an SDXL base checkpoint")
    expected = arch.pooled_dim + 6 * int(unet.get("addition_time_embed_dim") or 0)
    if unet.get("projection_class_embeddings_input_dim") != expected:
        raise BadInput("projection_class_embeddings_input_dim "
                       f"{unet.get('projection_class_embeddings_input_dim')} != pooled "
                       f"{arch.pooled_dim} + 6 x addition_time_embed_dim ({expected})",
                       where=where, fix="use an SDXL base checkpoint (the refiner differs)")
    if unet.get("in_channels") != 4 or arch.vae.get("latent_channels") != 4:
        raise BadInput("expected 4 latent channels (unet in_channels, vae latent_channels)",
                       where=where, fix="use an SDXL base 1.0 checkpoint")
    sched = arch.scheduler
    if sched.get("prediction_type", "epsilon") != "epsilon":
        raise BadInput(f"prediction_type {sched.get('prediction_type')!r}: the baked Euler "
                       "step assumes epsilon prediction",
                       where=str(root / "scheduler" / "scheduler_config.json"),
                       fix="use an SDXL base 1.0 checkpoint (epsilon prediction)")


def with_vae(arch: Architecture, vae: dict, where: str) -> Architecture:
    """`arch` decoding with another VAE (`--vae-from`): an AutoencoderKL taking the same
    4-channel latents to the same image size (one upsampling per block but the last)."""
    blocks = vae.get("block_out_channels")
    if not (isinstance(blocks, list) and 0 < len(blocks) <= 16 and all(map(_positive, blocks))):
        raise BadInput("`block_out_channels` must list positive integers",
                       where=f"{where}: block_out_channels",
                       fix="use the VAE's own config.json, unedited")
    if vae.get("_class_name", "AutoencoderKL") != "AutoencoderKL":
        raise BadInput(f"a {vae.get('_class_name')!r}, not an AutoencoderKL", where=where,
                       fix="name the vae/ folder of an SDXL-compatible diffusers VAE")
    if vae.get("latent_channels") != 4 or len(blocks) != len(arch.vae["block_out_channels"]):
        raise BadInput(f"this VAE takes {vae.get('latent_channels')}-channel latents "
                       f"through {len(blocks)} blocks; the model's take 4 channels through "
                       f"{len(arch.vae['block_out_channels'])}", where=where,
                       fix="use a VAE made for SDXL (e.g. madebyollin/sdxl-vae-fp16-fix)")
    return replace(arch, vae=vae)


def check_prompt_length(length: int, arch: Architecture, where: str) -> int:
    """A prompt length both text encoders have positions for."""
    positions = arch.prompt_positions
    if not 2 <= length <= positions:
        raise BadInput(f"prompts of {length} tokens, but the text encoders have "
                       f"{positions} positions", where=where,
                       fix=f"use 2 to {positions} tokens (SDXL base pads to 77; IREE CI's "
                       "and AMD's artifacts take 64)")
    return length


def sdxl_architecture() -> Architecture:
    """SDXL base 1.0, from the configs shipped in `runner/assets/sdxl`."""
    return load_architecture(SDXL_DIR)


# The embedded tiny SDXL's sizes (runner.model.export.tiny_model builds it): 16x16 latents
# -> 128x128 images. Here, torch-free, so a profile naming `seeded:tiny` loads without torch.
TINY_LATENT_SIZE = 16
TINY_IMAGE_SIZE = 128
TINY_HIDDEN_1, TINY_HIDDEN_2, TINY_POOLED = 32, 64, 64
TINY_TIME_EMBED = 8
SCALING_FACTOR = 0.13025  # SDXL's VAE scaling factor


def tiny_architecture(bos: int, eos: int, vocab_size: int, max_length: int) -> Architecture:
    """SDXL's structure (two CLIP encoders, text_time UNet, 4-block VAE) scaled down; the
    scheduler is SDXL base 1.0's own config, as MLPerf uses it."""
    common = dict(vocab_size=vocab_size, max_position_embeddings=max_length,
                  bos_token_id=bos, eos_token_id=eos, pad_token_id=eos,
                  num_hidden_layers=2, hidden_act="gelu")
    blocks = [8, 16, 32, 32]
    return Architecture(
        text_encoder=dict(hidden_size=TINY_HIDDEN_1, intermediate_size=2 * TINY_HIDDEN_1,
                          num_attention_heads=4, **common),
        text_encoder_2=dict(hidden_size=TINY_HIDDEN_2, intermediate_size=2 * TINY_HIDDEN_2,
                            num_attention_heads=4, projection_dim=TINY_POOLED, **common),
        unet=dict(
            sample_size=TINY_LATENT_SIZE, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=[32, 64], norm_num_groups=8,
            down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"],
            up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"],
            attention_head_dim=[2, 4], transformer_layers_per_block=[1, 1],
            cross_attention_dim=TINY_HIDDEN_1 + TINY_HIDDEN_2, use_linear_projection=True,
            addition_embed_type="text_time", addition_time_embed_dim=TINY_TIME_EMBED,
            projection_class_embeddings_input_dim=TINY_POOLED + 6 * TINY_TIME_EMBED),
        vae=dict(
            in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=8,
            block_out_channels=blocks, layers_per_block=1, sample_size=TINY_IMAGE_SIZE,
            down_block_types=["DownEncoderBlock2D"] * len(blocks),
            up_block_types=["UpDecoderBlock2D"] * len(blocks),
            scaling_factor=SCALING_FACTOR),
        scheduler=sdxl_architecture().scheduler,
    )
