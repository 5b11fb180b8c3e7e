"""Traced MLIR kept by what it is traced from, so an export of an architecture already
traced writes its MLIR without tracing it again.

An exported module's MLIR holds no weight: every parameter and persistent buffer is an
external reference by name (`exporter.externalize`). What it holds is set by the modules'
architecture (the diffusers/transformers configs, non-persistent buffers such as the baked
Euler schedule derived from them), the submodel, batch size, prompt length and dtypes, and
the code that traces (the exporter's source and the torch/diffusers/transformers/iree-turbine
versions: `code_version`). Those are the key, per submodel. A fine-tune of SDXL base (its
configs) exported after the base, the same checkpoint exported into another `--out`, or a
seeded SDXL exported with the other VAE precision (the same CLIP and UNet) then skips
torch.export for what is already traced: for the full-size UNet that is most of a minute of
CPU.

The traces live in `$RUNNER_CACHE_DIR/mlir-traces/<key>.mlir` (1 to 2 MB each for SDXL at batch 1),
written atomically; a dry run never reaches here (it exports nothing).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from runner.base.fileio import atomic_write_text
from runner.base.paths import cache_dir, caches_writable
from runner.config.architecture import Architecture
from runner.config.exports import STEPS, code_version

TRACES = "mlir-traces"


def _built_from(arch: Architecture, name: str) -> dict:
    """The configs a submodel's module is built from (`sdxl_model`): the text encoders', the
    UNet's with the schedule baked into it and the image size in its time ids, the VAE's."""
    if name == "clip":
        return {"text_encoder": arch.text_encoder, "text_encoder_2": arch.text_encoder_2}
    if name == "unet":
        return {"unet": arch.unet, "scheduler": arch.scheduler, "steps": STEPS,
                "image_size": arch.image_size}
    return {"vae": arch.vae}


def trace_key(arch: Architecture, name: str, batch: int, dims: tuple[int, ...], dtype: str,
              vae_dtype: str) -> str:
    """What a submodel's MLIR is a function of, and nothing else: a `--vae-from` VAE or the
    VAE's precision (GroupNorm in float32, the cast of its latents) changes only the VAE's
    key, so exports that differ only there share the CLIP and UNet traces."""
    inputs = {"built_from": _built_from(arch, name), "submodel": name, "batch": batch,
              "dims": list(dims), "dtype": dtype,
              "vae_dtype": vae_dtype if name == "vae" else None, "code": code_version()}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def trace_path(key: str) -> Path:
    return cache_dir() / TRACES / f"{key}.mlir"


def traced(key: str, trace: Callable[[], str]) -> tuple[str, bool]:
    """(the MLIR of `key`, whether it was traced before): read from the cache, or traced by
    `trace` and kept there for the next export."""
    path = trace_path(key)
    try:
        return path.read_text(encoding="utf-8"), True
    except (OSError, UnicodeDecodeError):
        pass
    mlir = trace()
    if caches_writable():
        atomic_write_text(path, mlir)
    return mlir, False
