"""`runner export tiny`: writes the assets the package ships (MLIR, irpa, tokenizer, config).

The MLIR is a golden of its own (the structural tier): exporting twice with the pinned
`[export]` versions gives the same bytes, so a test can re-export and diff.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from runner.errors import RunnerError
from runner.fileio import atomic_write_text
from runner.mlperf_data import NEGATIVE_PROMPT, load_captions
from runner.model_config import ModelConfig
from runner.paths import ASSETS_DIR

TINY_DIR = ASSETS_DIR / "tiny"
MAX_LENGTH = 64
BATCH_SIZES = (1, 2)
PAD_TOKENS = ("<|endoftext|>", "!")  # SDXL: ViT-L pads with EOS, bigG with "!"


@contextlib.contextmanager
def _concat_as_cat() -> Iterator[None]:
    """torch 2.14 + diffusers 0.42 export `aten.concat`, which IREE cannot lower; alias to cat."""
    import torch

    saved = torch.concat
    torch.concat = torch.cat
    try:
        yield
    finally:
        torch.concat = saved


def tiny_model_config() -> dict:
    """The model config the embedded default ships (`model.json`)."""
    from runner.export import tiny_model as tm

    return {
        "name": "tiny-sdxl",
        "dtype": "float32",
        "batch_sizes": list(BATCH_SIZES),
        "image_size": tm.IMAGE_SIZE,
        "latent_size": tm.LATENT_SIZE,
        "steps": tm.STEPS,
        "guidance_scale": 8.0,
        "negative_prompt": NEGATIVE_PROMPT,
        "max_length": MAX_LENGTH,
        "tokenizer": {"dir": "tokenizer", "pad_tokens": list(PAD_TOKENS)},
        "denoise": "produce_image_latents",
        "submodels": {
            "clip": {"mlir": "clip_bs{batch}.mlir", "weights": "clip.irpa"},
            "unet": {"mlir": "unet_bs{batch}.mlir", "weights": "unet.irpa",
                     "extra_mlir": ["unet_pipeline_bs{batch}.mlir"]},
            "vae": {"mlir": "vae_bs{batch}.mlir", "weights": "vae.irpa"},
        },
        "functions": {
            "encode_prompts": "clip.encode_prompts",
            "run_initialize": "unet.run_initialize",
            "run_forward": "unet.run_forward",
            "produce_image_latents": "unet.produce_image_latents",
            "decode": "vae.decode",
        },
    }


def unet_pipeline_mlir(batch: int, latent: int, length: int, dim: int, pooled: int,
                       steps: int) -> str:
    """The scheduled-unet pipeline module, as IREE CI's `add_pipeline_module` for SDXL:
    `produce_image_latents` runs the denoising loop on the device, calling into the unet
    module's `run_initialize`/`run_forward` (linked by name in the same context)."""
    lat = f"tensor<{batch}x4x{latent}x{latent}xf32>"
    emb, pool = f"tensor<{2 * batch}x{length}x{dim}xf32>", f"tensor<{2 * batch}x{pooled}xf32>"
    ids, one, idx = f"tensor<{2 * batch}x6xf32>", "tensor<1xf32>", "tensor<1xi64>"
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


def build_tiny(out_dir: Path):
    """Tokenizer files first (the text encoders' vocabulary size and BOS/EOS come from them)."""
    from runner.export import tiny_model as tm
    from runner.export.bpe import learn_merges, write_tokenizer

    captions = load_captions()
    vocab = write_tokenizer(out_dir / "tokenizer", learn_merges(list(captions.texts),
                                                                 tm.VOCAB_MERGES))
    return tm.build(vocab["<|startoftext|>"], vocab["<|endoftext|>"], len(vocab), MAX_LENGTH)


def _export_programs(module, module_name: str, programs: dict[str, tuple]) -> str:
    """One MLIR module holding each named function of `module`, parameters external."""
    from iree.turbine import aot

    fxb = aot.FxProgramsBuilder(module)
    with _concat_as_cat():  # torch.export traces here, at decoration time
        for name, args in programs.items():
            # One tensor passed as two arguments would be traced as one input (aliased),
            # silently wiring both parameters to the same value: give each its own.
            args = tuple(a.clone() for a in args)
            fxb.export_program(name=name, args=args, strict=False)(
                lambda m, *a, _name=name: getattr(m, _name)(*a)
            )
        exported = aot.export(fxb, module_name=module_name)
    return str(exported.mlir_module)


def export_tiny(out_dir: Path = TINY_DIR) -> list[Path]:
    """Exports every submodel at every batch size; returns the files written."""
    try:
        import torch
        from iree.turbine import aot
    except ImportError as e:
        raise RunnerError(f"export needs the [export] extra: {e}",
                          fix="pip install -e '.[export]'") from e
    from runner.export import tiny_model as tm

    out_dir.mkdir(parents=True, exist_ok=True)
    model = build_tiny(out_dir)
    config = tiny_model_config()
    written = [out_dir / "tokenizer" / "vocab.json", out_dir / "tokenizer" / "merges.txt"]
    modules = {"clip": model.clip, "unet": model.unet, "vae": model.vae}
    for name, module in modules.items():
        aot.externalize_module_parameters(module)
        weights = out_dir / config["submodels"][name]["weights"]
        aot.save_module_parameters(weights, module)
        written.append(weights)
    c, s = tm.LATENT_SIZE, MAX_LENGTH
    d, p = tm.HIDDEN_1 + tm.HIDDEN_2, tm.POOLED
    for b in BATCH_SIZES:
        ids = torch.zeros(b, s, dtype=torch.int64)
        latents = torch.zeros(b, 4, c, c)
        programs = {
            "clip": {"encode_prompts": (ids, ids, ids, ids)},
            "unet": {
                "run_initialize": (latents,),
                "run_forward": (latents, torch.zeros(2 * b, s, d), torch.zeros(2 * b, p),
                                torch.zeros(2 * b, 6), torch.zeros(1),
                                torch.zeros(1, dtype=torch.int64)),
            },
            "vae": {"decode": (latents,)},
        }
        for name, module in modules.items():
            mlir = _export_programs(module, f"compiled_{name}", programs[name])
            path = out_dir / config["submodels"][name]["mlir"].format(batch=b)
            atomic_write_text(path, mlir)
            written.append(path)
        path = out_dir / config["submodels"]["unet"]["extra_mlir"][0].format(batch=b)
        atomic_write_text(path, unet_pipeline_mlir(b, c, s, d, p, tm.STEPS))
        written.append(path)
    config_path = out_dir / "model.json"
    atomic_write_text(config_path, json.dumps(config, indent=2) + "\n")
    ModelConfig.load(config_path)  # what we ship must load
    written.append(config_path)
    return written


def first_difference(golden: bytes, fresh: bytes) -> str | None:
    """None when equal; else the first differing line of both, for a readable failure."""
    if golden == fresh:
        return None
    old, new = golden.decode(errors="replace").splitlines(), fresh.decode(errors="replace")
    for number, (a, b) in enumerate(zip(old, new.splitlines(), strict=False), start=1):
        if a != b:
            return f"line {number}:\n  shipped:  {a[:200]}\n  exported: {b[:200]}"
    return f"same first lines, lengths differ ({len(golden)} vs {len(fresh)} bytes)"


def diff_exports(fresh_dir: Path, golden_dir: Path = TINY_DIR) -> dict[str, str]:
    """File name -> first difference, over every file a fresh export wrote."""
    diffs = {}
    for fresh in sorted(p for p in fresh_dir.rglob("*") if p.is_file()):
        rel = fresh.relative_to(fresh_dir)
        golden = golden_dir / rel
        if not golden.is_file():
            diffs[str(rel)] = "not shipped"
            continue
        diff = first_difference(golden.read_bytes(), fresh.read_bytes())
        if diff:
            diffs[str(rel)] = diff
    return diffs
