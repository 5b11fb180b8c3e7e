"""The largest |activation| of each stage of seeded SDXL with its spec's weights: whether an
fp16 run stays finite (fp16 holds +-65504), and the VAE decoded in fp16 against fp32.

Reads a seeded SDXL export's `.irpa` files (`runner export sdxl --seeded`, or written from
its spec by `runner export weights`), encodes one prompt pair in fp16, runs the 20 Euler
steps of the UNet in bfloat16 (fp32's exponent range at half the memory; the magnitudes are
what matter here) at a small latent size, then decodes the final latents with the VAE in
fp32 and in fp16. Prints one JSON line.

    python3 scripts/measure_seeded_ranges.py \
        --export ~/.cache/iree-sdxl-runner/exports/sdxl-seeded-sdxl-float16-<key>
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from runner.config.exports import STEPS, seeded_architecture
from runner.model.export import sdxl_model


def load(module: torch.nn.Module, irpa: Path, dtype: torch.dtype, strip: str = "") -> None:
    import iree.runtime as rt

    index = rt.ParameterIndex()
    index.load(str(irpa))
    state = {key.removeprefix(strip): torch.from_numpy(
        np.array(rt.parameter_index_entry_as_numpy_ndarray(entry))).to(dtype)
        for key, entry in index.items()}
    module.load_state_dict(state, strict=True, assign=True)


def track(module: torch.nn.Module, peaks: dict[str, float], stage: str) -> None:
    def hook(_mod, _inputs, out) -> None:
        out = out[0] if isinstance(out, tuple) else out
        if torch.is_tensor(out) and out.is_floating_point():
            value = float(out.float().abs().max())
            peaks[stage] = max(peaks.get(stage, 0.0), value if math.isfinite(value) else math.inf)

    for sub in module.modules():
        sub.register_forward_hook(hook)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, required=True, help="seeded SDXL export dir")
    parser.add_argument("--latent", type=int, default=16, help="latent size (SDXL: 128)")
    args = parser.parse_args()
    from diffusers import AutoencoderKL, UNet2DConditionModel

    start = time.perf_counter()
    arch = seeded_architecture("sdxl")
    peaks: dict[str, float] = {}
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:
        clip = sdxl_model.PromptEncoder(*sdxl_model._text_encoders(arch))
    finally:
        torch.set_default_dtype(saved)
    load(clip, args.export / "clip.irpa", torch.float16)
    track(clip.eval(), peaks, "clip")
    rng = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, 1000, (1, 64), generator=rng) for _ in range(4)]
    with torch.no_grad():
        embeds, pooled = (t.to(torch.bfloat16) for t in clip(*ids))
    del clip
    with torch.device("meta"):
        unet = UNet2DConditionModel.from_config(arch.unet)
    holder = torch.nn.Module()
    holder.unet = unet
    load(holder, args.export / "unet.irpa", torch.bfloat16)
    track(unet.eval(), peaks, "unet")
    scheduled = sdxl_model.ScheduledUnet(unet, sdxl_model.scheduler(arch.scheduler, STEPS),
                                         arch.image_size, torch.bfloat16)
    latents = torch.randn(1, 4, args.latent, args.latent, generator=rng).to(torch.bfloat16)
    with torch.no_grad():
        latents, time_ids = scheduled.run_initialize(latents)
        guidance = torch.tensor([8.0], dtype=torch.bfloat16)
        for step in range(STEPS):
            latents = scheduled.run_forward(latents, embeds, pooled, time_ids, guidance,
                                            torch.tensor([step]))
    del unet, holder, scheduled
    vae = AutoencoderKL.from_config(arch.vae)
    vae.encoder = None
    load(vae, args.export / "vae.irpa", torch.float32, strip="vae.")
    track(vae.eval(), peaks, "vae")
    x = latents.float() / float(arch.vae["scaling_factor"])
    with torch.no_grad():
        fp32 = vae.decode(x, return_dict=False)[0]
        fp16 = vae.half().decode(x.half(), return_dict=False)[0].float()
    print(json.dumps({
        "latent": args.latent, "steps": STEPS, "max_abs_activation": peaks,
        "final_latents_max_abs": float(latents.float().abs().max()),
        "vae_fp32_finite": bool(torch.isfinite(fp32).all()),
        "vae_fp16_finite": bool(torch.isfinite(fp16).all()),
        "vae_fp16_vs_fp32_max_abs": float((fp16 - fp32).abs().max()),
        "seconds": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
