"""The export cache's names: which export a profile's `model: checkpoint:DIR | seeded:sdxl`
means, its content key, where it lives and the model config it has (or will have).

SDXL is exported once per (checkpoint bytes, export code, dtype, VAE dtype and the bytes of
a `--vae-from` VAE), batch sizes added as they are asked for; `runner.model.export.store`
writes exports, this module only names and finds them, so a profile loads without the
exporter.

An export lives in `$RUNNER_CACHE_DIR/exports/<name>-<dtype>-vae-<vae dtype>-<key>/`:
weights (`*.irpa`, shared by all batch sizes), the tokenizer, one MLIR set per batch size
and `model.json`, which lists only batch sizes whose files are all there, with the sha256 of
every file it names. New files are written into a staging directory and moved in complete,
`model.json` last. An export reuses only the files of a verified one (its model.json, same
inputs, every file matching its hash): a killed export's leftovers (files, no model.json) or
a file changed since are written again, so model.json always describes the bytes beside it.
Profiles name an export by its source (`model: checkpoint:DIR` or `model: seeded:sdxl`);
this module is torch-free so loading such a profile stays cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
from dataclasses import dataclass, replace
from pathlib import Path

from runner.base.errors import BadInput, RunnerError
from runner.base.fileio import atomic_write_json, sha256_file
from runner.base.paths import ASSETS_DIR, PACKAGE_DIR, cache_dir, caches_writable
from runner.config.mlperf_data import NEGATIVE_PROMPT
from runner.config.model_config import SHORT_DTYPES, ModelConfig
from runner.inputs.jsonfile import read_json

SOURCE_PREFIXES = ("checkpoint:", "seeded:")
# `seeded:sdxl`: SDXL base 1.0's architecture; `seeded:tiny`: the embedded model's (minutes
# less to export and run: the seeded path, spec-written weights included, on a laptop).
SEEDED_MODELS = ("sdxl", "tiny")
SEEDED_SEED = 20251123
# A seeded export's weights, as a spec (names, shapes, dtypes, init rules, the seed) the
# `.irpa` files are written from (runner.model.seeded_weights): beside model.json.
WEIGHTS_SPEC = "weights.spec.json"
# The seeded models' tokenizer: the embedded model's learned vocabulary.
SEEDED_TOKENIZER = ASSETS_DIR / "tiny" / "tokenizer"
# What the exporter imports: where one is missing this machine cannot export, and cannot
# compute the key an export was made with (it hashes their versions).
EXPORTER_MODULES = ("torch", "diffusers", "transformers", "iree.turbine")
DTYPES = {"fp16": "float16", "fp32": "float32", "float16": "float16", "float32": "float32"}
SEEDED_MAX_LENGTH = 64  # the seeded model stands in for IREE CI's and AMD's artifacts
STEPS = 20  # MLPerf
SEEDED_REFUSAL = ("seeded random weights: its images mean nothing, so FID/CLIP cannot judge "
                  "them (this model is for throughput and compile checks)")
_PACKAGES = ("torch", "diffusers", "transformers", "iree-turbine")
PAD_TOKENS = ("<|endoftext|>", "!")  # SDXL: ViT-L pads with EOS, bigG with "!"
# The code whose change re-exports: the exporter (runner/model/export/) and what names and
# describes an export here.
EXPORT_CODE = (*(PACKAGE_DIR / "model" / "export").glob("*.py"),
               *(Path(__file__).with_name(n) for n in ("exports.py", "architecture.py",
                                                         "checkpoint.py")))


@dataclass(frozen=True)
class ExportSource:
    """What to export: a local checkpoint directory, or a seeded model by name; the VAE
    decoding in `vae_dtype`, from `vae_from` (a diffusers-format VAE directory, e.g. one
    adapted for fp16) instead of the model's own when given."""

    checkpoint: Path | None
    seeded: str | None
    dtype: str
    # Prompt tokens; None: the checkpoint's own (`checkpoint.prompt_length`, what diffusers
    # pads to), 64 for the seeded model.
    max_length: int | None = None
    vae_dtype: str = "float32"
    vae_from: Path | None = None

    @classmethod
    def parse(cls, ref: str, dtype: str = "float16", base: Path | None = None,
              where: str = "model", vae_dtype: str = "float32",
              vae_from: str | None = None) -> ExportSource:
        vae = _path(vae_from, base) if vae_from else None
        kind, _, value = ref.partition(":")
        if kind == "seeded":
            if value not in SEEDED_MODELS:
                known = ", ".join("seeded:" + m for m in SEEDED_MODELS)
                raise BadInput(f"unknown seeded model {value!r}", where=where,
                               fix=f"use one of {known}")
            return cls(None, value, dtype, vae_dtype=vae_dtype, vae_from=vae)
        if kind != "checkpoint" or not value:
            raise BadInput(f"{ref!r} names no export source", where=where,
                           fix="use checkpoint:<diffusers dir> or seeded:sdxl")
        return cls(_path(value, base), None, dtype, vae_dtype=vae_dtype, vae_from=vae)

    @property
    def ref(self) -> str:
        return f"seeded:{self.seeded}" if self.seeded else f"checkpoint:{self.checkpoint}"

    @property
    def name(self) -> str:
        return f"sdxl-seeded-{self.seeded}" if self.seeded else "sdxl"


def _path(value: str, base: Path | None) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() or base is None else base / path


def short_dtype(dtype: str) -> str:
    """`float16` -> `fp16`: how flags and profiles spell a precision."""
    return SHORT_DTYPES[dtype]


def code_version() -> str:
    """The exporter's source and the versions of what traces: a change re-exports."""
    h = hashlib.sha256()
    for path in sorted(EXPORT_CODE, key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    for package in _PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            h.update(f"{package}={importlib.metadata.version(package)}".encode())
    return h.hexdigest()


def hash_files(files: list[Path], root: Path, known: dict[str, str] | None = None
               ) -> dict[str, str]:
    """sha256 per file, remembered by (path, size, mtime) so a 7 GB checkpoint is read once.
    `known`: the sha256 of files (by name relative to `root`) their writer computed as it
    wrote them (a seeded export's 7 GB of weights), taken instead of reading them again."""
    memo_path = cache_dir() / "exports" / "file-hashes.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):  # a damaged memo is only a cache: start it again
        memo = {}
    out, changed = {}, False
    for path in files:
        st = path.stat()
        stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        name = str(path.relative_to(root))
        if stamp not in memo:
            memo[stamp] = (known or {}).get(name) or sha256_file(path)
            changed = True
        out[name] = memo[stamp]
    if changed and caches_writable():  # (a dry run hashes again rather than write)
        atomic_write_json(memo_path, memo)
    return out


def checkpoint_sha256(checkpoint: Path, dtype: str, vae_dtype: str = "float32") -> str | None:
    """One name for a checkpoint's weights: sha256 of its files' sha256s (by relative path,
    as `export_key` hashes them); None when the checkpoint is not on this machine."""
    from runner.config.checkpoint import open_checkpoint

    if not checkpoint.is_dir():
        return None
    ckpt = open_checkpoint(checkpoint, dtype, vae_dtype=vae_dtype)
    return _files_sha256(ckpt.files(), ckpt.root)


def vae_sha256(vae_from: Path, dtype: str, vae_dtype: str) -> str | None:
    """As `checkpoint_sha256`, for a `--vae-from` VAE directory."""
    from runner.config.checkpoint import open_vae

    if not vae_from.is_dir():
        return None
    vae = open_vae(vae_from, dtype, vae_dtype)
    return _files_sha256(vae.files(), vae.root)


def _files_sha256(files: list[Path], root: Path) -> str:
    return hashlib.sha256(json.dumps(hash_files(files, root), sort_keys=True).encode()
                          ).hexdigest()


def _seeded_files(name: str) -> list[Path]:
    """What a seeded model is made from besides the code: SDXL's configs, the tokenizer."""
    configs = sorted((ASSETS_DIR / "sdxl").rglob("*.json")) if name == "sdxl" else []
    return [*configs, SEEDED_TOKENIZER / "vocab.json", SEEDED_TOKENIZER / "merges.txt"]


def seeded_architecture(name: str):
    """SDXL base 1.0's architecture, or the embedded tiny model's (its token ids from the
    seeded models' tokenizer)."""
    from runner.config.architecture import sdxl_architecture, tiny_architecture

    if name == "sdxl":
        return sdxl_architecture()
    vocab = read_json(SEEDED_TOKENIZER / "vocab.json", what="tokenizer vocabulary")
    return tiny_architecture(vocab["<|startoftext|>"], vocab["<|endoftext|>"], len(vocab),
                             SEEDED_MAX_LENGTH)


def export_key(source: ExportSource) -> str | None:
    """The content key, or None when the checkpoint (or the `vae_from` directory) is not on
    this machine (a dry run can still print what it would do)."""
    if source.seeded:
        inputs = {"seeded": source.seeded, "seed": SEEDED_SEED,
                  "files": hash_files(_seeded_files(source.seeded), ASSETS_DIR),
                  "max_length": prompt_length(source)}
    else:
        from runner.config.checkpoint import open_checkpoint

        assert source.checkpoint is not None
        if not source.checkpoint.is_dir():
            return None
        ckpt = open_checkpoint(source.checkpoint, source.dtype, source.max_length,
                               source.vae_dtype)
        inputs = {"files": hash_files(ckpt.files(), ckpt.root), "max_length": ckpt.max_length}
    if source.vae_from is not None:
        from runner.config.checkpoint import open_vae

        if not source.vae_from.is_dir():
            return None
        vae = open_vae(source.vae_from, source.dtype, source.vae_dtype)
        inputs["vae_files"] = hash_files(vae.files(), vae.root)
    inputs.update(code=code_version(), dtype=source.dtype, steps=STEPS,
                  vae_dtype=source.vae_dtype)
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def prompt_length(source: ExportSource) -> int:
    """The export's prompt tokens: `max_length` if given, else the checkpoint's own, else
    64 for the seeded model (IREE CI's artifacts' length), and for a checkpoint not on this
    machine (a dry run) SDXL base's 77."""
    from runner.config.architecture import check_prompt_length, sdxl_architecture

    if source.checkpoint is not None and source.checkpoint.is_dir():
        from runner.config.checkpoint import open_checkpoint

        return open_checkpoint(source.checkpoint, source.dtype, source.max_length).max_length
    arch = seeded_architecture(source.seeded) if source.seeded else sdxl_architecture()
    default = SEEDED_MAX_LENGTH if source.seeded else arch.prompt_positions
    return check_prompt_length(source.max_length or default, arch, "--max-length")


def export_dir(source: ExportSource, key: str | None) -> Path:
    tag = key[:16] if key else "<key: sha256 of the checkpoint files and the exporter>"
    vae = f"vae-{short_dtype(source.vae_dtype)}"
    return cache_dir() / "exports" / f"{source.name}-{source.dtype}-{vae}-{tag}"


def export_command(source: ExportSource, batch_sizes: list[int], vae_batch_sizes: list[int],
                   out: Path | None = None) -> list[str]:
    """The exact `runner export sdxl` command for these batch sizes."""
    what = ["--seeded"] if source.seeded else ["--from", str(source.checkpoint)]
    argv = ["runner", "export", "sdxl", *what,
            "--batch-sizes", ",".join(map(str, sorted(batch_sizes))),
            "--vae-batch-sizes", ",".join(map(str, sorted(vae_batch_sizes))),
            "--dtype", short_dtype(source.dtype), "--vae-dtype", short_dtype(source.vae_dtype)]
    if source.vae_from is not None:
        argv += ["--vae-from", str(source.vae_from)]
    if source.max_length:
        argv += ["--max-length", str(source.max_length)]
    return argv + (["--out", str(out)] if out else [])


def config_dict(source: ExportSource, arch, batch_sizes: list[int],
                 vae_batch_sizes: list[int], key: str | None, max_length: int) -> dict:
    extra: dict = {"source": source.ref, "export_key": key}
    if source.vae_from is not None:
        extra["vae_from"] = str(source.vae_from)
    if source.seeded:
        extra.update(no_scoring=SEEDED_REFUSAL, weights_spec=WEIGHTS_SPEC)
    return model_config(source.name, source.dtype, batch_sizes, vae_batch_sizes,
                        arch.image_size, arch.latent_size, STEPS, max_length, extra,
                        source.vae_dtype)


def architecture_of(source: ExportSource):
    """The architecture the export builds: the checkpoint's (or SDXL's for the seeded
    model), with the `vae_from` directory's VAE config when one is given."""
    from runner.config.architecture import load_architecture

    if source.seeded:
        arch = seeded_architecture(source.seeded)
    else:
        assert source.checkpoint is not None
        arch = load_architecture(source.checkpoint)
    if source.vae_from is not None and source.vae_from.is_dir():
        from runner.config.checkpoint import open_vae

        arch = open_vae(source.vae_from, source.dtype, source.vae_dtype).with_arch(arch)
    return arch


def exported_model(ref: str, base: Path, where: str, dtype: str = "float16",
                   vae_dtype: str = "float32", vae_from: str | None = None) -> ModelConfig:
    """A profile's `model: checkpoint:DIR | seeded:sdxl` (with its `dtype`, `vae_dtype` and
    `vae_from`): the cached export's config, or, before any export, the config it will have
    (no batch sizes yet, so `runner compile` exports them on demand or prints the
    command)."""
    source = ExportSource.parse(ref, dtype, base=base, where=where, vae_dtype=vae_dtype,
                                vae_from=vae_from)
    key = export_key(source)
    path = export_dir(source, key) / "model.json"
    if path.is_file():  # found by content: its files now are the ones named here, not where
        # they were when it was exported (a later batch size is exported from these)
        return replace(ModelConfig.load(path), source=source.ref,
                       vae_from=None if source.vae_from is None else str(source.vae_from))
    made_elsewhere = exports_made_elsewhere(source) if exporter_missing() else []
    if len(made_elsewhere) == 1:
        return ModelConfig.load(made_elsewhere[0])
    if made_elsewhere:
        raise BadInput(
            f"{len(made_elsewhere)} exports of {source.ref} ({source.dtype}) are in the "
            f"export cache and this machine cannot tell which one is current (no "
            f"{exporter_missing()} here to compute the export key): "
            + ", ".join(str(p.parent) for p in made_elsewhere), where=where,
            fix="keep one of them in $RUNNER_CACHE_DIR/exports (carry one `runner compile "
            "--out DIR`), or install the [export] extra here")
    arch = architecture_of(source) if key else None
    if arch is None:  # the checkpoint is elsewhere: SDXL's own shapes, for dry runs
        from runner.config.architecture import sdxl_architecture

        arch = sdxl_architecture()
    return ModelConfig.from_dict(config_dict(source, arch, [], [], key,
                                               prompt_length(source)), path)


def exporter_missing() -> str | None:
    """The first module the exporter needs that this machine lacks (None: it can export)."""
    import importlib.util

    for name in EXPORTER_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):  # a parent package missing or half-installed
            return name
    return None


def exports_made_elsewhere(source: ExportSource) -> list[Path]:
    """The model.json of every complete export of `source` (same dtype and prompt length)
    in the export cache, whatever its key: on a machine that cannot export, the export key
    (which hashes the exporter's package versions) is not the one the exporting machine
    computed, but an export carried here is still the one to use."""
    length = prompt_length(source)
    found = []
    for path in sorted((cache_dir() / "exports").glob(f"{source.name}-{source.dtype}-*/"
                                                      "model.json")):
        try:
            raw = read_json(path, what="export's model.json")
        except RunnerError:  # a damaged export is not one to use
            continue
        if raw.get("source") == source.ref and raw.get("max_length") == length:
            found.append(path)
    return found


def file_names() -> dict[str, dict]:
    """Per submodel: `mlir` (with `{batch}`), `weights`, and the unet's pipeline module."""
    return {
        "clip": {"mlir": "clip_bs{batch}.mlir", "weights": "clip.irpa"},
        "unet": {"mlir": "unet_bs{batch}.mlir", "weights": "unet.irpa",
                 "extra_mlir": ["unet_pipeline_bs{batch}.mlir"]},
        "vae": {"mlir": "vae_bs{batch}.mlir", "weights": "vae.irpa"},
    }


def model_config(name: str, dtype: str, batch_sizes: list[int], vae_batch_sizes: list[int],
                 image_size: int, latent_size: int, steps: int, max_length: int,
                 extra: dict | None = None, vae_dtype: str = "float32",
                 names: dict[str, dict] | None = None) -> dict:
    """The model config of an export. MLPerf's settings: guidance 8.0, its negative prompt.
    The VAE lists its own batch sizes only when they differ (AMD's `--vae_batch_size`).
    `names`: the submodels' files, when not `file_names()` (the tiny model's fp16 VAE)."""
    submodels = names or file_names()
    if sorted(vae_batch_sizes) != sorted(batch_sizes):
        submodels["vae"]["batch_sizes"] = sorted(vae_batch_sizes)
    return {
        "name": name,
        "dtype": dtype,
        "vae_dtype": vae_dtype,
        "batch_sizes": sorted(batch_sizes),
        "image_size": image_size,
        "latent_size": latent_size,
        "steps": steps,
        "guidance_scale": 8.0,
        "negative_prompt": NEGATIVE_PROMPT,
        "max_length": max_length,
        "tokenizer": {"dir": "tokenizer", "pad_tokens": list(PAD_TOKENS)},
        "denoise": "produce_image_latents",
        "submodels": submodels,
        "functions": {
            "encode_prompts": "clip.encode_prompts",
            "run_initialize": "unet.run_initialize",
            "run_forward": "unet.run_forward",
            "produce_image_latents": "unet.produce_image_latents",
            "decode": "vae.decode",
        },
        **(extra or {}),
    }
