"""Diffusers' side of the tests that compare the runner with diffusers' own pipeline: a
diffusers-format SDXL checkpoint of the embedded tiny model, and the images diffusers'
StableDiffusionXLPipeline makes of it (MLPerf's reference), at either VAE precision."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from runner.model.export.export_tiny import MAX_LENGTH, TINY_DIR


def write_checkpoint(root: Path) -> Path:
    """The embedded tiny model as a diffusers-format SDXL directory, as a user would have it:
    text_encoder_2's tokenizer saved by transformers (tokenizer.json), the other as CLIP's
    vocab.json + merges.txt, the VAE with its encoder."""
    from diffusers import AutoencoderKL, EulerDiscreteScheduler
    from transformers import CLIPTokenizer

    from runner.config.architecture import SDXL_DIR
    from runner.model.export import tiny_model as tm

    vocab = json.loads((TINY_DIR / "tokenizer" / "vocab.json").read_text())
    model = tm.build(vocab["<|startoftext|>"], vocab["<|endoftext|>"], len(vocab), MAX_LENGTH)
    model.clip.text_encoder_1.save_pretrained(root / "text_encoder")
    model.clip.text_encoder_2.save_pretrained(root / "text_encoder_2")
    model.unet.unet.save_pretrained(root / "unet")
    vae = AutoencoderKL.from_config(model.vae.vae.config)
    vae.load_state_dict(model.vae.vae.state_dict(), strict=False)
    vae.save_pretrained(root / "vae")
    EulerDiscreteScheduler.from_config(
        json.loads((SDXL_DIR / "scheduler" / "scheduler_config.json").read_text())
    ).save_pretrained(root / "scheduler")
    shutil.copytree(TINY_DIR / "tokenizer", root / "tokenizer")
    # Each tokenizer says how long prompts are, as SDXL base's say 77: diffusers pads to it.
    (root / "tokenizer" / "tokenizer_config.json").write_text(
        json.dumps({"model_max_length": MAX_LENGTH}))
    CLIPTokenizer(str(TINY_DIR / "tokenizer" / "vocab.json"),
                  str(TINY_DIR / "tokenizer" / "merges.txt"), pad_token="!",
                  model_max_length=MAX_LENGTH).save_pretrained(root / "tokenizer_2")
    shutil.copy(SDXL_DIR / "model_index.json", root / "model_index.json")
    return root


def diffusers_images(checkpoint: Path, model_json: Path, count: int = 2,
                     vae_dtype: str = "float32") -> np.ndarray:
    """MLPerf's reference itself: diffusers' StableDiffusionXLPipeline loaded from the
    checkpoint, run with the settings the export recorded (steps, guidance, MLPerf's negative
    prompt, the fixed latent, the captions of samples 0..count-1), converted to uint8 as
    MLPerf converts images. `vae_dtype` float16: the pipeline's latents decoded as its own
    decode step does, with its VAE in float16 (an fp16 pipeline whose VAE needs no upcast;
    the pipeline itself stays float32, so only the decoder's precision differs)."""
    import torch
    from diffusers import StableDiffusionXLPipeline

    from runner.config.mlperf_data import fixed_latent, load_captions
    from runner.model.images import to_uint8_hwc

    config = json.loads(model_json.read_text())
    pipe = StableDiffusionXLPipeline.from_pretrained(str(checkpoint), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    captions = load_captions()
    latent = torch.from_numpy(fixed_latent(config["latent_size"]))
    out = pipe(prompt=[captions[i] for i in range(count)],
               negative_prompt=[config["negative_prompt"]] * count,
               num_inference_steps=config["steps"], guidance_scale=config["guidance_scale"],
               latents=latent.repeat(count, 1, 1, 1), height=config["image_size"],
               width=config["image_size"],
               output_type="np" if vae_dtype == "float32" else "latent").images
    if vae_dtype == "float16":
        vae = pipe.vae.to(torch.float16)
        with torch.no_grad():
            decoded = vae.decode(out.to(torch.float16) / vae.config.scaling_factor,
                                 return_dict=False)[0]
        out = pipe.image_processor.postprocess(decoded, output_type="np")
    return to_uint8_hwc(out.transpose(0, 3, 1, 2))


def assert_within_one_lsb(mine: np.ndarray, reference: np.ndarray) -> None:
    diff = np.abs(mine.astype(np.int16) - reference.astype(np.int16))
    assert mine.shape == reference.shape and diff.max() <= 1, (diff.max(), (diff > 1).sum())


