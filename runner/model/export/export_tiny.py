"""`runner export tiny`: writes the assets the package ships (MLIR, irpa, tokenizer, config).

The MLIR is a golden of its own (the structural tier): exporting twice with the pinned
`[export]` versions gives the same bytes, so a test can re-export and diff.

Two decoders ship: fp32 (`model.json`, MLPerf's reference precision) and fp16
(`model_vae_fp16.json`, IREE CI's and AMD's: `--set model.vae_dtype=fp16` on a tiny profile),
the same seeded weights rounded to half; the text encoders and UNet are shared.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np

from runner.base.errors import ToolFailed
from runner.base.fileio import atomic_write_text
from runner.base.paths import ASSETS_DIR, refuse_package_write
from runner.base.signals import import_held
from runner.config.exports import file_names, model_config
from runner.config.mlperf_data import load_captions
from runner.config.model_config import ModelConfig
from runner.model.export.exporter import (
    export_mlir,
    externalize,
    save_weights,
    unet_pipeline_mlir,
)

TINY_DIR = ASSETS_DIR / "tiny"
MAX_LENGTH = 64
BATCH_SIZES = (1, 2)
# Per VAE precision: the config file and the VAE's files (the other submodels are shared).
VARIANTS = {
    "float32": ("model.json", {"mlir": "vae_bs{batch}.mlir", "weights": "vae.irpa"}),
    "float16": ("model_vae_fp16.json", {"mlir": "vae_fp16_bs{batch}.mlir",
                                        "weights": "vae_fp16.irpa"}),
}


def tiny_model_config(vae_dtype: str = "float32") -> dict:
    """A model config the embedded default ships (`model.json`, or the fp16 decoder's)."""
    from runner.model.export import tiny_model as tm

    names = {**file_names(), "vae": VARIANTS[vae_dtype][1]}
    return model_config("tiny-sdxl", "float32", list(BATCH_SIZES), list(BATCH_SIZES),
                        tm.IMAGE_SIZE, tm.LATENT_SIZE, tm.STEPS, MAX_LENGTH,
                        vae_dtype=vae_dtype, names=names)


def build_tiny(out_dir: Path):
    """Tokenizer files first (the text encoders' vocabulary size and BOS/EOS come from them)."""
    from runner.model.export import tiny_model as tm
    from runner.model.export.bpe import learn_merges, write_tokenizer

    captions = load_captions()
    vocab = write_tokenizer(out_dir / "tokenizer", learn_merges(list(captions.texts),
                                                                 tm.VOCAB_MERGES))
    return tm.build(vocab["<|startoftext|>"], vocab["<|endoftext|>"], len(vocab), MAX_LENGTH)


def export_tiny(out_dir: Path = TINY_DIR) -> list[Path]:
    """Exports every submodel at every batch size, and the fp16 decoder beside the fp32
    one; returns the files written. The default, the shipped assets, is a checkout's to
    regenerate: an installed package is refused."""
    refuse_package_write(out_dir, "--out")
    try:
        import_held("iree.turbine")
    except ImportError as e:
        raise ToolFailed(f"export needs the [export] extra: {e}",
                         fix="pip install -e '.[export]'") from e
    from runner.model.export import tiny_model as tm
    from runner.model.export.sdxl_model import vae_decoder

    out_dir.mkdir(parents=True, exist_ok=True)
    model = build_tiny(out_dir)
    config = tiny_model_config()
    written = [out_dir / "tokenizer" / "vocab.json", out_dir / "tokenizer" / "merges.txt"]
    modules = model.named()
    # The fp16 decoder: the same seeded VAE, rounded (before parameters go external).
    vae_fp16 = vae_decoder(copy.deepcopy(model.vae.vae), "float32", "float16")
    externalize({**modules, "vae_fp16": vae_fp16})
    c, s = tm.LATENT_SIZE, MAX_LENGTH
    d, p = tm.HIDDEN_1 + tm.HIDDEN_2, tm.POOLED
    parts = [(name, module, config["submodels"][name]) for name, module in modules.items()]
    parts.append(("vae", vae_fp16, VARIANTS["float16"][1]))
    for _, module, files in parts:
        weights = out_dir / files["weights"]
        save_weights(module, weights)
        written.append(weights)
    for b in BATCH_SIZES:
        for name, module, files in parts:
            mlir = export_mlir(module, name, b, c, s, d, p, "float32")
            path = out_dir / files["mlir"].format(batch=b)
            atomic_write_text(path, mlir)
            written.append(path)
        path = out_dir / config["submodels"]["unet"]["extra_mlir"][0].format(batch=b)
        atomic_write_text(path, unet_pipeline_mlir(b, c, s, d, p, tm.STEPS))
        written.append(path)
    for vae_dtype, (file, _) in VARIANTS.items():
        config_path = out_dir / file
        atomic_write_text(config_path, json.dumps(tiny_model_config(vae_dtype), indent=2)
                          + "\n")
        ModelConfig.load(config_path)  # what we ship must load
        written.append(config_path)
    return written


# The MLIR's float32 literals torch computes (the scheduler's sigmas: `**0.5` on a float32
# tensor) come from torch's vectorised kernels, which differ in the last bit between CPUs:
# 1 ULP between this export's host and the one that shipped the assets (3 of 21 sigmas). A
# float32 resource may differ by this many ULP per element; every other byte is exact.
LITERAL_ULP = 2
_F32_RESOURCE = re.compile(rb'(_torch\.float32: "0x)([0-9A-F]+)(")')


def _ulp_apart(a: str, b: str) -> int | None:
    """Largest per-element distance in ULP between two same-length float32 hex blobs (IREE's
    4-byte alignment header first), or None when they differ in length or header."""
    raw_a, raw_b = bytes.fromhex(a), bytes.fromhex(b)
    if len(raw_a) != len(raw_b) or raw_a[:4] != raw_b[:4] or (len(raw_a) - 4) % 4:
        return None
    x = np.frombuffer(raw_a[4:], "<i4").astype(np.int64)
    y = np.frombuffer(raw_b[4:], "<i4").astype(np.int64)
    # Sign-magnitude to a monotonic integer line, so ULP distance is a subtraction.
    x = np.where(x < 0, -(x & 0x7FFFFFFF), x)
    y = np.where(y < 0, -(y & 0x7FFFFFFF), y)
    return int(np.abs(x - y).max(initial=0))


def first_difference(golden: bytes, fresh: bytes) -> str | None:
    """None when equal (float32 literals within LITERAL_ULP); else the first differing line of
    both, for a readable failure."""
    if golden == fresh:
        return None
    old, new = golden.decode(errors="replace").splitlines(), fresh.decode(errors="replace")
    for number, (a, b) in enumerate(zip(old, new.splitlines(), strict=False), start=1):
        if a != b and not _literals_close(a, b):
            return f"line {number}:\n  shipped:  {a[:200]}\n  exported: {b[:200]}"
    if len(golden) == len(fresh) and len(old) == len(new.splitlines()):
        return None
    return f"same first lines, lengths differ ({len(golden)} vs {len(fresh)} bytes)"


def _literals_close(a: str, b: str) -> bool:
    """Lines equal but for float32 resource blobs within LITERAL_ULP of each other."""
    ma, mb = _F32_RESOURCE.search(a.encode()), _F32_RESOURCE.search(b.encode())
    if not ma or not mb or (a.encode()[:ma.start(2)], a.encode()[ma.end(2):]) != (
            b.encode()[:mb.start(2)], b.encode()[mb.end(2):]):
        return False
    ulp = _ulp_apart(ma.group(2).decode(), mb.group(2).decode())
    return ulp is not None and ulp <= LITERAL_ULP


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
