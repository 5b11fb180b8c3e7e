"""Diffusers' own StableDiffusionXLPipeline as the reference the runner's images are measured
against (MLPerf's reference is that pipeline), and the embedded tiny model written as a
diffusers-format checkpoint to run it on.

The reference decodes in either precision from one denoising run: float32 is the pipeline
as MLPerf runs it (SDXL's VAE upcast); float16 decodes the same latents as the pipeline's
own decode step does with its VAE in float16 (an fp16 pipeline whose VAE needs no upcast),
so only the decoder's precision differs between the two.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from runner.model.export.export_tiny import TINY_DIR

TINY_MAX_LENGTH = 64


def write_tiny_checkpoint(root: Path) -> Path:
    """The embedded tiny model as a diffusers-format SDXL directory, as a user would have it:
    text_encoder_2's tokenizer saved by transformers (tokenizer.json), the other as CLIP's
    vocab.json + merges.txt, the VAE with its encoder. `runner export sdxl --from` it gives
    the shipped tiny assets, file for file."""
    from diffusers import AutoencoderKL, EulerDiscreteScheduler
    from transformers import CLIPTokenizer

    from runner.config.architecture import SDXL_DIR
    from runner.model.export import tiny_model as tm

    vocab = json.loads((TINY_DIR / "tokenizer" / "vocab.json").read_text())
    model = tm.build(vocab["<|startoftext|>"], vocab["<|endoftext|>"], len(vocab),
                     TINY_MAX_LENGTH)
    # transformers/diffusers modules, typed as plain nn.Modules on the wrappers
    parts: dict[str, Any] = {"text_encoder": model.clip.text_encoder_1,
                             "text_encoder_2": model.clip.text_encoder_2,
                             "unet": model.unet.unet}
    for name, module in parts.items():
        module.save_pretrained(root / name)
    vae = AutoencoderKL.from_config(model.vae.vae.config)
    vae.load_state_dict(model.vae.vae.state_dict(), strict=False)
    vae.save_pretrained(root / "vae")
    EulerDiscreteScheduler.from_config(
        json.loads((SDXL_DIR / "scheduler" / "scheduler_config.json").read_text())
    ).save_pretrained(root / "scheduler")
    shutil.copytree(TINY_DIR / "tokenizer", root / "tokenizer")
    # Each tokenizer says how long prompts are, as SDXL base's say 77: diffusers pads to it.
    (root / "tokenizer" / "tokenizer_config.json").write_text(
        json.dumps({"model_max_length": TINY_MAX_LENGTH}))
    CLIPTokenizer(str(TINY_DIR / "tokenizer" / "vocab.json"),
                  str(TINY_DIR / "tokenizer" / "merges.txt"), pad_token="!",
                  model_max_length=TINY_MAX_LENGTH).save_pretrained(root / "tokenizer_2")
    shutil.copy(SDXL_DIR / "model_index.json", root / "model_index.json")
    return root


def reference_images(checkpoint: Path, config: dict[str, Any], ids: Iterable[int],
                     vae_dtypes: Iterable[str] = ("float32",)) -> dict[str, np.ndarray]:
    """vae_dtype -> uint8 N x H x W x 3 images of diffusers' pipeline loaded from
    `checkpoint`, run with a model config's settings (steps, guidance, MLPerf's negative
    prompt, image size) on the fixed latent and the captions of `ids`, converted to uint8
    as MLPerf converts images."""
    import torch
    from diffusers import StableDiffusionXLPipeline

    from runner.config.mlperf_data import fixed_latent, load_captions
    from runner.model.images import to_uint8_hwc

    ids = list(ids)
    pipe = StableDiffusionXLPipeline.from_pretrained(str(checkpoint), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    captions = load_captions()
    latent = torch.from_numpy(fixed_latent(config["latent_size"]))
    latents = pipe(prompt=[captions[i] for i in ids],
                   negative_prompt=[config["negative_prompt"]] * len(ids),
                   num_inference_steps=config["steps"], guidance_scale=config["guidance_scale"],
                   latents=latent.repeat(len(ids), 1, 1, 1), height=config["image_size"],
                   width=config["image_size"], output_type="latent").images
    out = {}
    for vae_dtype in vae_dtypes:
        # The pipeline's own decode step (its `force_upcast` path for float32).
        vae = pipe.vae.to(getattr(torch, vae_dtype))
        with torch.no_grad():
            decoded = vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor,
                                 return_dict=False)[0]
        images = pipe.image_processor.postprocess(decoded, output_type="np")
        out[vae_dtype] = to_uint8_hwc(images.transpose(0, 3, 1, 2))
    return out
