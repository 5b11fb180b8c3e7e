"""Writes an SDXL-shaped model's artifacts: external weights, MLIR per batch size, config.

One exporter for the embedded tiny model and real SDXL; the model config it writes is the
one the runner loads (`runner/assets/tiny/model.json` is such a file).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from runner.base.signals import import_held

SUBMODELS = ("clip", "unet", "vae")
MLIR_TYPES = {"float32": "f32", "float16": "f16"}


@contextlib.contextmanager
def _set_while_tracing(owner: object, name: str, value: object) -> Iterator[None]:
    """`owner.name` is `value` while torch.export traces, and what it was again after,
    an error included."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


@contextlib.contextmanager
def _tracing_settings() -> Iterator[None]:
    """What the trace runs under:
    - `torch.concat` is `torch.cat`: torch 2.14 + diffusers 0.42 export `aten.concat`,
      which IREE cannot lower;
    - `torch.fx.config.do_not_emit_stack_traces`: torch.export records the Python stack of
      every traced op (`node.meta["stack_trace"]`) for locations the MLIR text never
      prints; skipping it is the same MLIR, byte for byte, with less of the tracing's CPU."""
    import torch
    import torch.fx.config

    with _set_while_tracing(torch, "concat", torch.cat), \
            _set_while_tracing(torch.fx.config, "do_not_emit_stack_traces", True):
        yield


def unet_pipeline_mlir(batch: int, latent: int, length: int, dim: int, pooled: int,
                       steps: int, dtype: str = "float32") -> str:
    """The scheduled-unet pipeline module, as IREE CI's `add_pipeline_module` for SDXL:
    `produce_image_latents` runs the denoising loop on the device, calling into the unet
    module's `run_initialize`/`run_forward` (linked by name in the same context)."""
    t = MLIR_TYPES[dtype]
    lat = f"tensor<{batch}x4x{latent}x{latent}x{t}>"
    emb, pool = f"tensor<{2 * batch}x{length}x{dim}x{t}>", f"tensor<{2 * batch}x{pooled}x{t}>"
    ids, one, idx = f"tensor<{2 * batch}x6x{t}>", f"tensor<1x{t}>", "tensor<1xi64>"
    fwd = f"({lat}, {emb}, {pool}, {ids}, {one}, {idx}) -> {lat}"
    return f"""module @compiled_unet_pipeline {{
  func.func private @compiled_unet.run_initialize({lat}) -> ({lat}, {ids})
  func.func private @compiled_unet.run_forward{fwd}
  func.func @produce_image_latents(%sample: {lat}, %embeds: {emb}, %pooled: {pool},
                                   %guidance: {one}) -> {lat} {{
    %init, %time_ids = func.call @compiled_unet.run_initialize(%sample) : ({lat}) -> ({lat}, {ids})
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %steps = arith.constant {steps} : index
    %out = scf.for %i = %c0 to %steps step %c1 iter_args(%latents = %init) -> ({lat}) {{
      %i64 = arith.index_cast %i : index to i64
      %step = tensor.from_elements %i64 : {idx}
      %next = func.call @compiled_unet.run_forward(%latents, %embeds, %pooled, %time_ids,
                                                   %guidance, %step) : {fwd}
      scf.yield %next : {lat}
    }}
    return %out : {lat}
  }}
}}
"""


def _export_programs(module, module_name: str, programs: dict[str, tuple]) -> str:
    """One MLIR module holding each named function of `module`, parameters external."""
    aot = import_held("iree.turbine.aot")

    fxb = aot.FxProgramsBuilder(module)
    with _tracing_settings():  # torch.export traces here, at decoration time
        for name, args in programs.items():
            # One tensor passed as two arguments would be traced as one input (aliased),
            # silently wiring both parameters to the same value: give each its own.
            args = tuple(a.clone() for a in args)
            fxb.export_program(name=name, args=args, strict=False)(
                lambda m, *a, _name=name: getattr(m, _name)(*a)
            )
        exported = aot.export(fxb, module_name=module_name)
    return str(exported.mlir_module)


def externalize(modules: dict) -> None:
    """Marks every parameter external (must precede both weight saving and tracing)."""
    aot = import_held("iree.turbine.aot")

    for module in modules.values():
        aot.externalize_module_parameters(module)


def save_weights(module, path: Path) -> None:
    """Atomically, as every other file: a killed export leaves no half-written archive
    under the real name (an interrupted export keeps the files it finished)."""
    aot = import_held("iree.turbine.aot")

    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")  # the suffix names the format
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        aot.save_module_parameters(tmp, module)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def export_mlir(module, name: str, batch: int, latent: int, length: int, dim: int,
                pooled: int, dtype: str) -> str:
    """The MLIR of one submodel at one batch size (clip, unet or vae)."""
    import torch

    from runner.model.export.sdxl_model import TORCH_DTYPES

    t = TORCH_DTYPES[dtype]
    ids = torch.zeros(batch, length, dtype=torch.int64)
    latents = torch.zeros(batch, 4, latent, latent, dtype=t)
    programs: dict[str, dict[str, tuple]] = {
        "clip": {"encode_prompts": (ids, ids, ids, ids)},
        "unet": {
            "run_initialize": (latents,),
            "run_forward": (latents, torch.zeros(2 * batch, length, dim, dtype=t),
                            torch.zeros(2 * batch, pooled, dtype=t),
                            torch.zeros(2 * batch, 6, dtype=t), torch.zeros(1, dtype=t),
                            torch.zeros(1, dtype=torch.int64)),
        },
        "vae": {"decode": (latents,)},
    }
    return _export_programs(module, f"compiled_{name}", programs[name])
