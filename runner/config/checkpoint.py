"""A local diffusers-format SDXL checkpoint, checked before anything is built or written.

Every problem a user can have with the directory is found here, naming the file: a missing
submodel, another pipeline (SD 1.x/2.x), fp16-only weights asked for in fp32, a truncated
safetensors file, a tokenizer in neither of the two formats transformers writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_text
from runner.config.architecture import (
    Architecture,
    check_prompt_length,
    load_architecture,
    read_checkpoint_json,
    with_vae,
)
from runner.inputs.limits import MiB, read_text
from runner.inputs.paths import resolved
from runner.inputs.safetensors import read_header

# Weight file stem of each submodel (diffusers and transformers name them differently).
WEIGHT_STEMS = {
    "text_encoder": "model",
    "text_encoder_2": "model",
    "unet": "diffusion_pytorch_model",
    "vae": "diffusion_pytorch_model",
}
TOKENIZER_DIRS = ("tokenizer", "tokenizer_2")
TOKENIZER_CONFIG = "tokenizer_config.json"
# What transformers records as `model_max_length` for a tokenizer saved without one.
_NO_LENGTH = 10**12


@dataclass(frozen=True)
class Checkpoint:
    root: Path
    arch: Architecture
    weights: dict[str, Path]  # submodel -> the safetensors file to load
    variants: dict[str, str | None]  # submodel -> "fp16" or None (diffusers' `variant`)
    max_length: int  # tokens a prompt is padded to (see `prompt_length`)

    def files(self) -> list[Path]:
        """Every file the export reads: what its cache key hashes."""
        configs = [self.root / "model_index.json",
                   *(self.root / sub / "config.json" for sub in WEIGHT_STEMS),
                   self.root / "scheduler" / "scheduler_config.json"]
        tokenizers = [p for d in TOKENIZER_DIRS for p in sorted((self.root / d).iterdir())
                      if p.name in ("vocab.json", "merges.txt", "tokenizer.json",
                                    TOKENIZER_CONFIG)]
        return [*configs, *self.weights.values(), *tokenizers]


def check_safetensors(path: Path) -> None:
    """A safetensors file whose header and data are all there (a cut-off download fails
    here, by name): runner.inputs.safetensors checks the header field by field."""
    read_header(path)


def _weights(directory: Path, sub: str, dtype: str) -> tuple[Path, str | None]:
    """The weight file of the submodel in `directory` (`sub`: its kind, naming the file's
    stem) to load for `dtype`, and its diffusers `variant`."""
    stem = WEIGHT_STEMS[sub]
    full = directory / f"{stem}.safetensors"
    half = directory / f"{stem}.fp16.safetensors"
    if dtype == "float16" and half.is_file():
        return half, "fp16"
    if full.is_file():
        return full, None
    if half.is_file():
        raise BadInput("only fp16 weights, and the export was asked for fp32",
                       where=str(half), fix="export with --dtype fp16, or add the "
                       f"full-precision {full.name}")
    raise BadInput(f"the {sub} weights are missing", where=str(full),
                   fix=f"copy the {sub}/ folder completely (safetensors; pickled .bin "
                   "weights are not read)")


def vae_weights_dtype(dtype: str, vae_dtype: str) -> str:
    """Which VAE weights to read: the fp16 files where anything rounds the VAE to half (an
    fp16 decode, or diffusers' fp16 pipeline, which loads the VAE in fp16 before it upcasts
    it), else the full-precision ones."""
    return "float16" if "float16" in (dtype, vae_dtype) else "float32"


@dataclass(frozen=True)
class VaeFiles:
    """A diffusers-format VAE directory (`--vae-from`, e.g. one adapted to decode in fp16):
    AutoencoderKL's config and the weight file to load."""

    root: Path
    config: dict
    weights: Path
    variant: str | None

    def files(self) -> list[Path]:
        """What an export's cache key hashes."""
        return [self.root / "config.json", self.weights]

    def with_arch(self, arch: Architecture) -> Architecture:
        return with_vae(arch, self.config, str(self.root / "config.json"))


def open_vae(root: Path, dtype: str, vae_dtype: str) -> VaeFiles:
    """A `--vae-from` directory, checked whole before anything is built."""
    root = resolved(root, str(root))
    fix = ("name a diffusers-format VAE directory (config.json and "
           "diffusion_pytorch_model[.fp16].safetensors), e.g. a copy of "
           "madebyollin/sdxl-vae-fp16-fix")
    if not root.is_dir():
        raise BadInput("VAE directory not found", where=str(root), fix=fix)
    if not (root / "config.json").is_file():  # (an empty or half-copied directory)
        raise BadInput("file missing", where=str(root / "config.json"), fix=fix)
    config = read_checkpoint_json(root / "config.json")
    weights, variant = _weights(root, "vae", vae_weights_dtype(dtype, vae_dtype))
    check_safetensors(weights)
    return VaeFiles(root, config, weights, variant)


def open_checkpoint(root: Path, dtype: str, max_length: int | None = None,
                    vae_dtype: str = "float32") -> Checkpoint:
    """Checks the whole directory; raises RunnerError naming the first file at fault.
    `max_length` overrides the checkpoint's prompt length (`prompt_length`)."""
    root = resolved(root, str(root))
    if not root.is_dir():
        raise BadInput("checkpoint directory not found", where=str(root),
                       fix="pass --from a local diffusers-format SDXL directory "
                       "(e.g. a copy of stabilityai/stable-diffusion-xl-base-1.0)")
    arch = load_architecture(root)
    weights, variants = {}, {}
    for sub in WEIGHT_STEMS:
        want = vae_weights_dtype(dtype, vae_dtype) if sub == "vae" else dtype
        weights[sub], variants[sub] = _weights(root / sub, sub, want)
        check_safetensors(weights[sub])
    vocabs = [tokenizer_files(root / d) for d in TOKENIZER_DIRS]
    if vocabs[0][0] != vocabs[1][0]:
        raise BadInput("tokenizer and tokenizer_2 have different vocabularies; the runner "
                       "encodes both prompts with one", where=str(root / "tokenizer_2"),
                       fix="SDXL's two CLIP tokenizers share one vocabulary: check the copy")
    length = (check_prompt_length(max_length, arch, "--max-length") if max_length
              else checkpoint_prompt_length(root, arch))
    return Checkpoint(root, arch, weights, variants, length)


def checkpoint_prompt_length(root: Path, arch: Architecture) -> int:
    """The tokens a prompt is padded and truncated to: the tokenizers' `model_max_length`,
    which diffusers' StableDiffusionXLPipeline pads to (77 for SDXL base 1.0), so the
    exported pipeline encodes prompts exactly as the reference does; without one, the text
    encoders' position count."""
    lengths: dict[Path, int] = {}
    for name in TOKENIZER_DIRS:
        path = root / name / TOKENIZER_CONFIG
        if path.is_file():
            value = read_checkpoint_json(path).get("model_max_length")
            if isinstance(value, int | float) and value < _NO_LENGTH:
                lengths[path] = int(value)
    if len(set(lengths.values())) > 1:
        (a, la), (b, lb) = lengths.items()
        raise BadInput(f"the tokenizers pad prompts to different lengths: {la} here, "
                       f"{lb} in {b}", where=f"{a}: model_max_length",
                       fix="SDXL's two tokenizers share one length; check the copy")
    if not lengths:
        return arch.prompt_positions
    path, length = next(iter(lengths.items()))
    return check_prompt_length(length, arch, f"{path}: model_max_length")


def tokenizer_files(directory: Path) -> tuple[dict, list[str]]:
    """(vocab, merges) from `vocab.json` + `merges.txt`, or from a `tokenizer.json` (what
    transformers 5's `save_pretrained` writes)."""
    vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
    if vocab_path.is_file() and merges_path.is_file():
        merges = read_text(merges_path, max_bytes=64 * MiB, what="merges file").splitlines()
        return (_vocab(read_checkpoint_json(vocab_path), vocab_path),
                [m for m in merges if m and not m.startswith("#version")])
    fast = directory / "tokenizer.json"
    if not fast.is_file():
        raise BadInput("no CLIP tokenizer files", where=str(directory),
                       fix="the folder needs vocab.json + merges.txt, or tokenizer.json")
    model = read_checkpoint_json(fast).get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE":
        raise BadInput("tokenizer.json holds no BPE model", where=str(fast),
                       fix="use the CLIP tokenizer SDXL ships")
    raw_merges = model.get("merges", [])
    ok = isinstance(raw_merges, list) and all(
        isinstance(m, str) or (isinstance(m, list) and all(isinstance(p, str) for p in m))
        for m in raw_merges)
    if not ok:
        raise BadInput("`model.merges` must list merges (strings or string pairs)",
                       where=f"{fast}: model.merges", fix="use the CLIP tokenizer SDXL ships")
    merges = [m if isinstance(m, str) else " ".join(m) for m in raw_merges]
    return _vocab(model.get("vocab"), fast), merges


def _vocab(vocab: object, path: Path) -> dict:
    """A BPE vocabulary: token -> non-negative integer id."""
    if not isinstance(vocab, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vocab.values()):
        raise BadInput("the vocabulary must map tokens to integer ids", where=str(path),
                       fix="use the CLIP tokenizer SDXL ships")
    return vocab


def convert_tokenizer(source: Path, out_dir: Path) -> None:
    """The runner's tokenizer reads CLIP's two-file format; write it from either format."""
    vocab, merges = tokenizer_files(source)
    atomic_write_text(out_dir / "vocab.json", json.dumps(vocab, ensure_ascii=False) + "\n")
    atomic_write_text(out_dir / "merges.txt", "\n".join(["#version: 0.2", *merges]) + "\n")
