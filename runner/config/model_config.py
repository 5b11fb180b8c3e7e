"""The model config: which artifacts make the pipeline and how to drive them.

In the spirit of the SDXL config JSON AMD's harness reads. The tiny model ships one
(`assets/tiny/model.json`); the real SDXL one lives in `configs/models/`. Paths inside are
relative to the config file, or URLs that the artifact cache fetches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.config.schema import check_keys, dataclass_keys
from runner.inputs.jsonfile import read_json
from runner.inputs.paths import inside
from runner.inputs.yamlfile import read_yaml

DENOISE_MODES = ("host_loop", "produce_image_latents")
# The pipeline's steps and the functions each denoise mode needs.
REQUIRED_FUNCTIONS = {
    "host_loop": ("encode_prompts", "run_initialize", "run_forward", "decode"),
    "produce_image_latents": ("encode_prompts", "produce_image_latents", "decode"),
}
DTYPES = ("float32", "float16")
SHORT_DTYPES = {"float32": "fp32", "float16": "fp16"}


def precision_text(dtype: str, vae_dtype: str) -> str:
    """`fp16, VAE fp32`: a model's precisions as reports show them."""
    return (f"{SHORT_DTYPES.get(dtype, dtype)}, VAE "
            f"{SHORT_DTYPES.get(vae_dtype, vae_dtype)}")
# ModelConfig fields not read from a top-level key of their own name: the file's location,
# and the two read from the `tokenizer:` mapping (TOKENIZER_KEYS).
_NOT_TOP_LEVEL = ("path", "tokenizer_dir", "pad_tokens")
TOKENIZER_KEYS = ("dir", "pad_tokens")


REF = "(see runner/assets/tiny/model.json)"  # a model config as it should be


@dataclass(frozen=True)
class Submodel:
    """One compiled unit: an MLIR (per batch size), its weights, optional extra modules.

    `extra_mlir` are modules loaded into the same context after the main one (IREE CI's
    `add_pipeline_module`: the scheduled-unet pipeline that calls into the unet module).
    """

    name: str
    mlir: str
    weights: str | None = None
    extra_mlir: tuple[str, ...] = ()
    vmfb: str | None = None
    batch_sizes: tuple[int, ...] = ()  # when not the model's (a VAE exported at its own)


@dataclass(frozen=True)
class ModelConfig:
    path: Path
    name: str
    dtype: str
    batch_sizes: tuple[int, ...]
    image_size: int
    latent_size: int
    steps: int
    guidance_scale: float
    negative_prompt: str
    max_length: int
    tokenizer_dir: str
    pad_tokens: tuple[str, str]
    denoise: str
    submodels: dict[str, Submodel]
    functions: dict[str, tuple[str, str]] = field(default_factory=dict)
    # `checkpoint:DIR` / `seeded:NAME` when the artifacts come from the export cache: a
    # missing batch size is then exported on demand rather than an error.
    source: str | None = None
    # Why FID/CLIP must not judge this model's images (seeded random weights), if so.
    no_scoring: str | None = None
    # The export cache key of the inputs an exported model came from.
    export_key: str | None = None
    # An export's files (path relative to the config -> sha256): what model.json describes,
    # verified before an export reuses any of them (runner.model.export.store).
    files: dict[str, str] = field(default_factory=dict)
    # The precision the VAE decodes in, whatever `dtype` the rest has: float32 is MLPerf's
    # reference (diffusers upcasts SDXL's VAE, `force_upcast`); float16 is IREE CI's and
    # AMD's. A config without the key decodes in float32, as every export before it did.
    vae_dtype: str = "float32"
    # An export whose VAE came from a diffusers VAE directory of its own (`--vae-from`),
    # not the checkpoint's (an fp16-safe VAE): its path, for the export's cache key.
    vae_from: str | None = None
    # A seeded export's weights spec (relative to the config): every `.irpa` it names is
    # written from it where it is missing (runner.model.seeded_weights), so the weights of
    # a seeded model need not travel.
    weights_spec: str | None = None

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, ref: str) -> str:
        """A path relative to the config, made absolute, refused if it leads out of the
        config's directory (runner.inputs.paths); URLs pass through."""
        if "://" in ref:
            return ref
        return str(inside(ref, self.base_dir, str(self.path), absolute_ok=True))

    def record(self) -> dict[str, Any]:
        """What a run's manifest records of its model: reports and MLPerf's system
        description read the precisions from here."""
        return {"name": self.name, "config": str(self.path), "source": self.source,
                "dtype": self.dtype, "vae_dtype": self.vae_dtype, "vae_from": self.vae_from,
                "export_key": self.export_key}

    def sizes_for(self, submodel: str) -> tuple[int, ...]:
        """The batch sizes `submodel` was exported at."""
        return self.submodels[submodel].batch_sizes or self.batch_sizes

    def check_scorable(self) -> None:
        if self.no_scoring:
            raise RunnerError(f"scoring refused for model {self.name}: {self.no_scoring}",
                              where=f"{self.path}: no_scoring",
                              fix="score a profile with real weights (e.g. mi325x with a "
                              "local SDXL checkpoint); use this one for throughput and compiles")

    def mlir_sources(self, submodel: str, batch: int) -> list[str]:
        sub = self.submodels[submodel]
        return [self.resolve(m.format(batch=batch)) for m in (sub.mlir, *sub.extra_mlir)]

    @classmethod
    def load(cls, path: Path) -> ModelConfig:
        what = "model config"
        raw = (read_json(path, kind=None, what=what) if path.suffix == ".json"
               else read_yaml(path, what=what))
        return cls.from_dict(raw, path)

    @classmethod
    def from_dict(cls, raw: Any, path: Path) -> ModelConfig:
        where = str(path)
        if not isinstance(raw, dict):
            raise RunnerError("model config must be a mapping", where=where,
                              fix=f"write `key: value` fields {REF}")
        check_keys(raw, (*dataclass_keys(cls, skip=_NOT_TOP_LEVEL), "tokenizer"), where)
        need = partial(_need, raw, where)
        dtype = need("dtype", str)
        if dtype not in DTYPES:
            raise RunnerError(f"`dtype` {dtype!r} is not one of {DTYPES}", where=where,
                              fix=f"use one of {', '.join(DTYPES)}")
        denoise = raw.get("denoise", "host_loop")
        if denoise not in DENOISE_MODES:
            raise RunnerError(f"`denoise` {denoise!r} is not one of {DENOISE_MODES}", where=where,
                              fix=f"use one of {', '.join(DENOISE_MODES)}")
        batch_sizes = need("batch_sizes", list)
        source = raw.get("source")
        # An export-backed config may have no batch size yet: `runner compile` adds them.
        if (not batch_sizes and not source) or not all(isinstance(b, int) and b > 0
                                                        for b in batch_sizes):
            raise RunnerError("`batch_sizes` must list positive integers", where=where,
                              fix="e.g. batch_sizes: [1, 2]")
        submodels = _submodels(need("submodels", dict), where)
        functions = _functions(need("functions", dict), submodels, where)
        missing = [r for r in REQUIRED_FUNCTIONS[denoise] if r not in functions]
        if missing:
            raise RunnerError(f"denoise mode {denoise!r} needs functions {missing}",
                              where=f"{where}: functions", fix=f"add {', '.join(missing)} {REF}")
        tok = need("tokenizer", dict)
        pads = _pad_tokens(tok, where)
        vae_dtype, files = _optional_fields(raw, where)
        return cls(
            path=path, name=need("name", str), dtype=dtype,
            batch_sizes=tuple(batch_sizes), image_size=need("image_size", int),
            latent_size=need("latent_size", int), steps=need("steps", int),
            guidance_scale=float(need("guidance_scale", (int, float))),
            negative_prompt=need("negative_prompt", str), max_length=need("max_length", int),
            tokenizer_dir=str(tok.get("dir", "tokenizer")), pad_tokens=pads,  # type: ignore[arg-type]
            denoise=denoise, submodels=submodels, functions=functions,
            source=source, no_scoring=raw.get("no_scoring"), export_key=raw.get("export_key"),
            files=files, vae_dtype=vae_dtype, vae_from=raw.get("vae_from"),
            weights_spec=raw.get("weights_spec"),
        )


def _need(raw: dict, where: str, key: str, kind: type | tuple[type, ...]) -> Any:
    """A field every model config has, of its type."""
    if key not in raw:
        raise RunnerError(f"missing field `{key}`", where=where,
                          fix=f"add `{key}` (see runner/assets/tiny/model.json)")
    if not isinstance(raw[key], kind):
        raise RunnerError(f"field `{key}` has the wrong type ({type(raw[key]).__name__})",
                          where=where, fix=f"give `{key}` as {REF} does")
    return raw[key]


def _pad_tokens(tok: dict, where: str) -> tuple[str, ...]:
    """The `tokenizer` section checked; the two encoders' pad tokens (CLIP's by default)."""
    check_keys(tok, TOKENIZER_KEYS, where, "tokenizer")
    pads = tuple(_typed(tok, "pad_tokens", list[str], f"{where}: tokenizer")
                 or ("<|endoftext|>", "!"))
    if len(pads) != 2:
        raise RunnerError("`tokenizer.pad_tokens` must name two tokens (one per encoder)",
                          where=f"{where}: tokenizer.pad_tokens",
                          fix='e.g. pad_tokens: ["<|endoftext|>", "!"]')
    _typed(tok, "dir", str | None, f"{where}: tokenizer")
    return pads


def _optional_fields(raw: dict, where: str) -> tuple[str, dict[str, str]]:
    """The optional top-level fields checked (each a string when given); the VAE's dtype
    (float32 when not given) and the files' sha256 digests by name."""
    for key in ("source", "no_scoring", "export_key", "vae_dtype", "vae_from",
                "weights_spec"):
        _typed(raw, key, str | None, where)
    vae_dtype = raw.get("vae_dtype") or "float32"
    if vae_dtype not in DTYPES:
        raise RunnerError(f"`vae_dtype` {vae_dtype!r} is not one of {DTYPES}",
                          where=f"{where}: vae_dtype", fix="use float32 or float16")
    files = raw.get("files") or {}
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise RunnerError("`files` must map file names to sha256 digests",
                          where=f"{where}.files", fix="e.g. files: {clip.irpa: <sha256>}")
    return vae_dtype, files


def _submodels(raw: dict, where: str) -> dict[str, Submodel]:
    """The `submodels` section: each compiled module's MLIR (or prebuilt vmfb) and weights."""
    submodels = {}
    for name, sub in raw.items():
        if not isinstance(sub, dict) or "mlir" not in sub:
            raise RunnerError(f"submodel `{name}` needs an `mlir` field",
                              where=f"{where}: submodels.{name}",
                              fix=f"add the submodel's MLIR path {REF}")
        check_keys(sub, dataclass_keys(Submodel, skip=("name",)), where, f"submodels.{name}")
        at = f"{where}: submodels.{name}"
        submodels[name] = Submodel(
            name, _typed(sub, "mlir", str, at), _typed(sub, "weights", str | None, at),
            tuple(_typed(sub, "extra_mlir", list[str], at) or ()),
            _typed(sub, "vmfb", str | None, at),
            tuple(_typed(sub, "batch_sizes", list[int], at) or ()))
    return submodels


def _functions(raw: dict, submodels: dict[str, Submodel], where: str
               ) -> dict[str, tuple[str, str]]:
    """The `functions` section: each pipeline role's (submodel, function), the submodel
    one of `submodels`."""
    functions = {}
    for role, ref in raw.items():
        sub, _, fn = str(ref).partition(".")
        if not isinstance(ref, str) or sub not in submodels or not fn:
            raise RunnerError(f"function `{role}` = {ref!r} does not name `<submodel>.<fn>` "
                              f"of a known submodel ({', '.join(submodels)})",
                              where=f"{where}: functions.{role}",
                              fix=f"write it as <submodel>.<function>, e.g. "
                              f"{next(iter(submodels), 'clip')}.main")
        functions[role] = (sub, fn)
    return functions


def _typed(raw: dict, key: str, kind: Any, where: str) -> Any:
    """raw[key] (None when absent), refused unless it is `kind`: str, `str | None`, or a
    list of str / positive ints."""
    value = raw.get(key)
    if kind == list[str] or kind == list[int]:
        item = kind.__args__[0]
        ok = value is None or (isinstance(value, list) and all(
            isinstance(v, item) and not isinstance(v, bool) and (item is str or v > 0)
            for v in value))
        want = "a list of strings" if item is str else "a list of positive integers"
    else:
        ok = isinstance(value, kind)
        want = "a string"
    if not ok:
        raise RunnerError(f"`{key}` must be {want}, not {type(value).__name__}",
                          where=f"{where}.{key}", fix=f"give `{key}` as {want}")
    return value
