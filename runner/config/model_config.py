"""The model config: which artifacts make the pipeline and how to drive them.

In the spirit of the SDXL config JSON AMD's harness reads. The tiny model ships one
(`assets/tiny/model.json`); the real SDXL one lives in `configs/models/`. Paths inside are
relative to the config file, or URLs that the artifact cache fetches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.inputs.fields import Fields, read, rules, values
from runner.inputs.jsonfile import read_json
from runner.inputs.paths import inside
from runner.inputs.yamlfile import read_yaml

DENOISE_MODES = ("host_loop", "produce_image_latents")
# The pipeline's steps and the functions each denoise mode needs.
REQUIRED_FUNCTIONS = {
    "host_loop": ("encode_prompts", "run_initialize", "run_forward", "decode"),
    "produce_image_latents": ("encode_prompts", "produce_image_latents", "decode"),
}
DTYPE_NAMES = ("float32", "float16")
SHORT_DTYPES = {"float32": "fp32", "float16": "fp16"}


def precision_text(dtype: str, vae_dtype: str) -> str:
    """`fp16, VAE fp32`: a model's precisions as reports show them."""
    return (f"{SHORT_DTYPES.get(dtype, dtype)}, VAE "
            f"{SHORT_DTYPES.get(vae_dtype, vae_dtype)}")
# ModelConfig fields the file does not hold under their own name: the file's location, and
# the `tokenizer:` mapping's (a `_Tokenizer`); `functions` is read here, against the submodels.
_NOT_READ = ("path", "tokenizer_dir", "pad_tokens", "functions")
REF = "(see runner/assets/tiny/model.json)"  # a model config as it should be


@dataclass(frozen=True)
class _Tokenizer:
    """A model config's `tokenizer:` mapping: the tokenizer directory (relative to the
    config) and the pad token of each of the two text encoders."""

    dir: str = "tokenizer"
    pad_tokens: tuple[str, ...] = ("<|endoftext|>", "!")


@dataclass(frozen=True)
class Submodel:
    """One compiled unit: an MLIR (per batch size), its weights, optional extra modules.

    `extra_mlir` are modules loaded into the same context after the main one (IREE CI's
    `add_pipeline_module`: the scheduled-unet pipeline that calls into the unet module).
    """

    name: str
    mlir: str = field(metadata=rules(nonempty=True, example="<name>_bs{batch}.mlir"))
    weights: str | None = None
    extra_mlir: tuple[str, ...] = ()
    vmfb: str | None = None
    # when not the model's (a VAE exported at its own)
    batch_sizes: tuple[int, ...] = field(default=(), metadata=rules(minimum=1))


@dataclass(frozen=True)
class ModelConfig:
    path: Path
    name: str
    dtype: str = field(metadata=rules(choices=DTYPE_NAMES))
    # An export-backed config may have no batch size yet: `runner compile` adds them.
    batch_sizes: tuple[int, ...] = field(metadata=rules(minimum=1, example="[1, 2]"))
    image_size: int = field(metadata=rules(minimum=1))
    latent_size: int = field(metadata=rules(minimum=1))
    steps: int = field(metadata=rules(minimum=1))
    guidance_scale: float
    negative_prompt: str
    max_length: int = field(metadata=rules(minimum=1))
    tokenizer_dir: str
    pad_tokens: tuple[str, str]
    submodels: dict[str, Submodel]
    denoise: str = field(default="host_loop", metadata=rules(choices=DENOISE_MODES))
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
    vae_dtype: str = field(default="float32", metadata=rules(choices=DTYPE_NAMES))
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
            raise BadInput(f"scoring refused for model {self.name}: {self.no_scoring}",
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
        """Read through runner.inputs.fields, then the checks that relate fields: the batch
        sizes an export-backed config may still lack, the functions the denoise mode needs
        and the submodels they name, the two pad tokens."""
        where = str(path)
        given = values(cls, raw, where, skip=_NOT_READ, also=("functions", "tokenizer"))
        f = Fields(raw, where)
        if not given["batch_sizes"] and not given.get("source"):
            raise f.error("batch_sizes", "`batch_sizes` must list positive integers",
                          fix="e.g. batch_sizes: [1, 2]")
        submodels, denoise = given["submodels"], given.get("denoise", "host_loop")
        roles = f.section_of("functions")
        functions = {}
        for role, ref in roles.raw.items():
            sub, _, fn = str(ref).partition(".")
            if not isinstance(ref, str) or sub not in submodels or not fn:
                raise roles.error(role, f"function `{role}` = {ref!r} does not name "
                                  f"`<submodel>.<fn>` of a known submodel ({', '.join(submodels)})",
                                  fix=f"write it as <submodel>.<function>, e.g. "
                                  f"{next(iter(submodels), 'clip')}.main")
            functions[role] = (sub, fn)
        missing = [r for r in REQUIRED_FUNCTIONS[denoise] if r not in functions]
        if missing:
            raise f.error("functions", f"denoise mode {denoise!r} needs functions {missing}",
                          fix=f"add {', '.join(missing)} {REF}")
        tok = read(_Tokenizer, raw.get("tokenizer"), where, "tokenizer")
        if len(tok.pad_tokens) != 2:
            raise f.within("tokenizer", {}).error(
                "pad_tokens", "`tokenizer.pad_tokens` must name two tokens (one per encoder)",
                fix='e.g. pad_tokens: ["<|endoftext|>", "!"]')
        return cls(path=path, tokenizer_dir=tok.dir, pad_tokens=tok.pad_tokens,  # type: ignore[arg-type]
                   functions=functions, **given)
