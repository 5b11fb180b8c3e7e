"""Profiles: YAML naming a model, a compile target, a layout and accuracy ranges.

`--profile NAME` looks the name up in the directories of `$RUNNER_PROFILE_PATH` (a lab's own
profiles, colon-separated, in order), then in the shipped profiles (the repository's
`configs/`, package data of the runner); the first `NAME.yaml` found wins, so a lab may
override a shipped profile by name. `--profile PATH.yaml` is that file.

A profile may `extends:` another (mappings merge, lists replace), and command-line flags
override any field the command reads (runner.config.reads), so `mi325x` is `sdxl` plus a lab
layout and `cpu` is `tiny` plus two CPU devices.

Every key of a profile file and of `--set` is checked against `profile_schema()`, which is
derived from the dataclasses below: a section (`target:`, `layout:`...) takes the fields of
the dataclass it is read into. So a new profile setting is a new dataclass field (plus its
reading in `profile_from_raw`), and nothing else; a typo is an error naming the closest key.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from runner.base.errors import BadInput, RunnerError
from runner.base.iree_flags import rocm_chip_flag, spelled_for
from runner.base.iree_tools import CompilerInfo
from runner.base.paths import ASSETS_DIR, CONFIGS_DIR
from runner.config.exports import DTYPES as MODEL_DTYPES  # `--dtype` words, as exports reads them
from runner.config.layout import LayoutSpec
from runner.config.model_config import ModelConfig
from runner.inputs.fields import Fields, check_keys, dataclass_keys, rules, unknown_key, values
from runner.inputs.paths import inside, no_such_path
from runner.inputs.yamlfile import read_yaml

BUILTIN_MODELS = {"tiny": ASSETS_DIR / "tiny" / "model.json"}
# A builtin model's config per VAE precision, where it ships more than one (the tiny model's
# fp16 decoder: runner/model/export/export_tiny.py writes both).
BUILTIN_VAE_VARIANTS = {("tiny", "float16"): ASSETS_DIR / "tiny" / "model_vae_fp16.json"}
DEFAULT_DRIVERS = {"cpu": "local-task", "hip": "hip", "cuda": "cuda"}
BACKEND_ALIASES = {"rocm": "hip"}  # IREE CI's test suites call the HIP target rocm
EXPORT_SOURCES = ("checkpoint:", "seeded:")  # models exported on demand (runner.model.export.store)
# `model:` is a mapping (`{source: checkpoint:DIR, dtype: fp32}`) or just its source: a string
# `model: X` is short for `model: {source: X}` wherever it meets a mapping (extends, --set).
# `vae_dtype`: what the VAE decodes in (default fp32, MLPerf's reference); `vae_from`: a
# diffusers-format VAE directory an export decodes with instead of the model's own.
MODEL_KEYS = ("source", "dtype", "vae_dtype", "vae_from")
_SHORTHANDS = {"model": "source"}  # section -> the key a bare value stands for


def _expanded(key: str, value: Any) -> Any:
    """A shorthand section's bare value as the mapping it stands for; anything else as is."""
    if key in _SHORTHANDS and not isinstance(value, dict):
        return {_SHORTHANDS[key]: value}
    return value


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if key in _SHORTHANDS and (isinstance(value, dict) or isinstance(out.get(key), dict)):
            value, out[key] = _expanded(key, value), _expanded(key, out.get(key, {}))
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


PROFILE_PATH_ENV = "RUNNER_PROFILE_PATH"


def profile_dirs() -> list[Path]:
    """Where profile names are looked up, in order: `$RUNNER_PROFILE_PATH`'s directories,
    then the shipped profiles. A directory named there that does not exist is an error, not
    a silent fall-through to a shipped profile of the same name."""
    dirs = []
    for entry in os.environ.get(PROFILE_PATH_ENV, "").split(os.pathsep):
        if not entry:
            continue
        path = Path(entry).expanduser()
        if not path.is_dir():
            raise BadInput(f"{entry!r} is not a directory", where=f"${PROFILE_PATH_ENV}",
                           fix="list directories of profile YAML files, separated by "
                           f"{os.pathsep!r}, or unset it")
        dirs.append(path)
    return [*dirs, CONFIGS_DIR]


def profile_path(name_or_path: str, extending: Path | None = None, where: str = "--profile"
                 ) -> Path:
    """The profile file a `--profile` value names. `extending` is the file whose `extends:`
    names it: when that file is itself one the search finds, the next one found is meant,
    so a lab's `mi325x.yaml` in `$RUNNER_PROFILE_PATH` may extend the shipped `mi325x`."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path.resolve()
    dirs = profile_dirs()
    plain = bool(name_or_path) and "/" not in name_or_path and not name_or_path.startswith(".")
    found = [d / f"{name_or_path}.yaml" for d in (dirs if plain else ())
             if (d / f"{name_or_path}.yaml").is_file()]
    mine = [i for i, f in enumerate(found) if extending and f.resolve() == extending.resolve()]
    found = found[mine[0] + 1:] if mine else found
    if found:
        return found[0]
    known = sorted({p.stem for d in dirs for p in d.glob("*.yaml")
                    if not p.stem.startswith("_")})
    raise _not_a_profile(name_or_path, path, known, where)


def _not_a_profile(name_or_path: str, path: Path, known: list[str], where: str
                   ) -> BadInput:
    """What a `--profile` value that names no profile is instead (a directory, a file that
    is not YAML, a path that is not there, a misspelled name), and what is expected."""
    expected = "a profile name or a profile's .yaml/.yml file"
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.y*ml"))
        return BadInput(f"{name_or_path!r} is a directory, not a profile", where=where,
                        fix=f"give {expected}"
                        + (f", e.g. {path / inside[0]}" if inside else ""))
    if path.is_file():
        return BadInput(f"{name_or_path!r} is a file, but not a profile YAML (a profile is a "
                        ".yaml or .yml file)", where=where, fix=f"give {expected}")
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        return BadInput(f"unknown profile {name_or_path!r}: no such file", where=where,
                        fix=no_such_path(path).fix)
    names = ", ".join(known) or "(none: the shipped profiles are missing; reinstall the runner)"
    close = difflib.get_close_matches(name_or_path, known, n=1, cutoff=0.6)
    searched = os.environ.get(PROFILE_PATH_ENV) or "not set"
    return BadInput(f"unknown profile {name_or_path!r}", where=where,
                    fix=(f"did you mean {close[0]}? " if close else "")
                    + f"use one of {names}, or a path to a profile YAML; a name is looked "
                    f"up in ${PROFILE_PATH_ENV} ({searched}), then in the shipped profiles "
                    f"({CONFIGS_DIR})")


def _load_raw(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    if path in seen:
        raise BadInput("profile `extends` loops back on itself", where=str(path),
                       fix="make one profile in the chain extend a profile that does not "
                       "extend it back")
    raw = read_yaml(path, what="profile") or {}
    if not isinstance(raw, dict):
        raise BadInput("a profile must be a YAML mapping", where=str(path),
                       fix="write `key: value` lines, e.g. `extends: cpu` (see configs/)")
    check_profile_keys(raw, str(path))
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    return _merge(_load_raw(_parent_path(parent, path), (*seen, path)), raw)


def _parent_path(parent: Any, path: Path) -> Path:
    """`extends:` names a profile (looked up as `--profile` names are, past this file), or
    a YAML file relative to this one."""
    where = f"{path}: extends"
    if not isinstance(parent, str) or not parent:
        raise BadInput("`extends` must name a profile", where=where,
                       fix="e.g. extends: cpu, or extends: other.yaml")
    if Path(parent).suffix in (".yaml", ".yml"):
        found = inside(parent, path.parent, where, absolute_ok=True)
        if found.is_file():
            return found.resolve()
    return profile_path(parent, extending=path, where=where)


def set_field(raw: dict, dotted: str, value: Any) -> None:
    """Applies one `--set a.b.c=value` override (value parsed as YAML). A shorthand section
    (`model: X`) opens into its mapping for `--set model.dtype=...`, and `--set model=...`
    merges into it when either side is a mapping (`--set model=Y` then replaces the source)."""
    node = raw
    *parents, leaf = dotted.split(".")
    for key in parents:
        if key in _SHORTHANDS and node is raw and key in node:
            node[key] = _expanded(key, node[key])
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise BadInput(f"`{dotted}`: `{key}` is not a mapping", where="--set",
                           fix=f"set `{key}` itself: --set {key}=VALUE")
    if leaf in _SHORTHANDS and node is raw and leaf in node \
            and (isinstance(node[leaf], dict) or isinstance(value, dict)):
        node[leaf] = {**_expanded(leaf, node[leaf]), **_expanded(leaf, value)}
    else:
        node[leaf] = value


@dataclass(frozen=True)
class Target:
    """The profile's `target:` section: the machine the modules are compiled for and its
    SKU. Every flag a submodel compiles with comes from here (`flags_for`), spelled for the
    compiler at hand, so a compile's flags are read in one place."""

    backend: str
    driver: str
    chip: str
    compile_flags: tuple[str, ...]
    submodel_flags: dict[str, tuple[str, ...]]
    tuning_spec: str | None
    default_tuning_specs: bool | None
    runtime_flags: tuple[str, ...]
    # IREE CI's name for the machine (`mi300`, `mi325`, `cpu`...): which `golden_*` entry of
    # a benchmark golden `runner bench goldens` judges by. A cpu target is `cpu` unless named.
    sku: str | None = None

    @property
    def golden_sku(self) -> str | None:
        """The SKU whose benchmark goldens apply; None where the profile names none."""
        return self.sku or ("cpu" if self.backend == "cpu" else None)

    def device_flags(self, compiler: CompilerInfo) -> tuple[str, ...]:
        if self.backend == "cpu":
            return ("--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu",
                    f"--iree-llvmcpu-target-cpu={self.chip}")
        if self.backend == "hip":
            return ("--iree-hal-target-device=hip",
                    rocm_chip_flag(self.chip, compiler))
        return ("--iree-hal-target-device=cuda", f"--iree-cuda-target={self.chip}")

    def tuning_flags(self, dump_dir: Path | None = None) -> tuple[str, ...]:
        flags = []
        if self.tuning_spec:
            flags.append(f"--iree-codegen-tuning-spec-path={self.tuning_spec}")
        if self.default_tuning_specs is not None:
            flags.append("--iree-codegen-enable-default-tuning-specs="
                         + str(self.default_tuning_specs).lower())
        if dump_dir is not None:
            flags.append(f"--iree-codegen-dump-tuning-specs-to={dump_dir}")
        return tuple(flags)

    def flags_for(self, submodel: str, compiler: CompilerInfo) -> tuple[str, ...]:
        """Every flag `submodel` compiles with, in the spelling of `compiler`'s build (a flag
        it cannot take is refused: runner.base.iree_flags)."""
        return spelled_for((*self.device_flags(compiler), *self.compile_flags,
                            *self.submodel_flags.get(submodel, ()), *self.tuning_flags()),
                           compiler, where=f"target.compile_flags / submodel_flags.{submodel}")


DEFAULT_COUNT = 32  # samples a run makes where the profile does not say (`count`)
MLPERF_SAMPLES = 5000  # MLPerf's SDXL accuracy set: every caption

METRICS = ("fid", "clip")  # MLPerf's two, scored together unless a run asks for one


def parse_metrics(value: Any, where: str) -> tuple[str, ...]:
    """`fid`, `clip`, `fid,clip` (or a YAML list of them) -> the metrics in MLPerf's order."""
    items = value.split(",") if isinstance(value, str) else value
    names = ([m.strip().lower() for m in items] if isinstance(items, list | tuple)
             and all(isinstance(m, str) for m in items) else [])
    if not names or not set(names) <= set(METRICS):
        raise BadInput(f"metrics {value!r}", where=where,
                       fix="use fid, clip or fid,clip (default: both, as MLPerf scores)")
    return tuple(m for m in METRICS if m in names)


@dataclass(frozen=True)
class Accuracy:
    """Inclusive two-sided ranges and which metrics to score (`metrics`, default both); the
    other keys (`SETTINGS`) are kept raw in `settings` and read by the scoring step
    (runner/accuracy/settings.py), which imports numpy."""

    SETTINGS: ClassVar[tuple[str, ...]] = ("backbones", "seed", "fid_statistics", "samples")

    fid: tuple[float, float] | None
    clip: tuple[float, float] | None
    settings: dict[str, Any]
    metrics: tuple[str, ...] = METRICS

    def range_of(self, metric: str) -> tuple[float, float] | None:
        return self.fid if metric == "fid" else self.clip

    def has_ranges(self, metrics: tuple[str, ...] | None = None) -> bool:
        """Whether any metric to score (default: `metrics`) has a range to judge it by."""
        return any(self.range_of(m) is not None for m in metrics or self.metrics)


@dataclass(frozen=True)
class Mlperf:
    """The system's MLPerf LoadGen values (`runner mlperf`): what its user.conf says, how long
    the Server batcher may hold a sample to fill a batch, and who submits what system.

    `system` is the systems JSON section: `id` (the system description id naming the JSON
    file and the results directory) and the fields the host cannot tell (cooling,
    interconnects, ...); a plain string is the id alone. runner/loadgen/system.py checks its
    keys against the round's field list and detects the rest.
    """

    system: dict[str, Any] | None = None
    # defaults for --division and --submitter
    division: str | None = field(default=None, metadata=rules(nonempty=True))
    submitter: str | None = field(default=None, metadata=rules(nonempty=True))
    offline_expected_qps: float | None = field(default=None, metadata=rules(above=0))
    server_target_qps: float | None = field(default=None, metadata=rules(above=0))
    singlestream_expected_latency_ms: float | None = field(default=None,
                                                           metadata=rules(above=0))
    batcher_limit_ms: float = field(default=100.0, metadata=rules(above=0))

    @property
    def system_id(self) -> str | None:
        return None if self.system is None else self.system.get("id")


@dataclass(frozen=True)
class Profile:
    # Fields that are not keys of the YAML (where it came from, the merged mapping). `model`
    # names the model rather than holding its config: its keys are MODEL_KEYS.
    NOT_YAML: ClassVar[tuple[str, ...]] = ("path", "raw")

    name: str
    path: Path
    raw: dict
    model: ModelConfig
    target: Target
    layout: LayoutSpec
    accuracy: Accuracy
    mlperf: Mlperf = Mlperf()
    # The samples a run makes when no --count/--samples/--ids says (0..count-1): the set
    # the profile's accuracy ranges hold for, so a plain `runner run` is judged.
    count: int = DEFAULT_COUNT

    def to_dict(self) -> dict:
        return copy.deepcopy(self.raw)


def _target(raw: Any, where: str, base: Path) -> Target:
    """`target:`: the backend (IREE CI's `rocm` is `hip`) and what depends on it, the chip
    and the driver; the tuning spec found relative to the profile; the rest as Target
    declares them."""
    if not isinstance(raw, dict):
        raise Fields({}, where).error("target", "missing `target` mapping",
                                      fix="add `target: {backend: cpu|hip|cuda, chip: ...}`")
    f = Fields(raw, where, "target")
    backend = raw.get("backend")
    if isinstance(backend, str):
        backend = BACKEND_ALIASES.get(backend, backend)
    if backend not in DEFAULT_DRIVERS:
        raise f.error("backend", f"`target.backend` is {backend!r}",
                      fix=f"use one of {', '.join([*DEFAULT_DRIVERS, *BACKEND_ALIASES])}")
    chip = f.text("chip", "host" if backend == "cpu" else None)
    if not chip:
        raise f.error("chip", f"backend {backend} needs `target.chip` (e.g. gfx942, sm_90)",
                      fix="add target.chip (or --set target.chip=gfx942)")
    spec = f.text("tuning_spec", nonempty=False)  # "": none, as when absent
    if spec:
        spec_path = inside(spec, base, f.where_of("tuning_spec"), absolute_ok=True)
        if not spec_path.is_file():
            raise f.error("tuning_spec", "tuning spec not found", fix=f"no file at {spec_path}")
        spec = str(spec_path)
    return Target(
        backend=backend, driver=f.text("driver", DEFAULT_DRIVERS[backend]), chip=chip,
        compile_flags=f.value(Target, "compile_flags") or (),
        submodel_flags=f.value(Target, "submodel_flags") or {},
        tuning_spec=spec, default_tuning_specs=f.value(Target, "default_tuning_specs"),
        runtime_flags=f.value(Target, "runtime_flags") or (),
        sku=f.text("sku", example="mi300"),
    )


def _range(accuracy: Fields, key: str) -> tuple[float, float] | None:
    value = accuracy.raw.get(key)
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int | float) for v in value) or value[0] > value[1]):
        raise accuracy.error(key, f"`accuracy.{key}` must be [low, high] with low <= high",
                             fix=f"e.g. accuracy.{key}: [23.0, 23.9] (two numbers, low first)")
    return (float(value[0]), float(value[1]))


def _mlperf(raw: Any, where: str) -> Mlperf:
    """`mlperf:` as Mlperf declares it; `system` is an id or a mapping (_mlperf_system)."""
    if raw is None:
        return Mlperf()
    given = values(Mlperf, raw, where, "mlperf", skip=("system",), also=("system",))
    f = Fields(raw, where, "mlperf")
    if f.given("system"):
        given["system"] = _mlperf_system(f)
    return Mlperf(**given)


def _mlperf_system(mlperf: Fields) -> dict[str, Any]:
    """`system: ID` or a mapping of systems JSON fields with its `id`: plain values only."""
    value = mlperf.raw["system"]
    if isinstance(value, str) and value.strip():
        return {"id": value}
    if not isinstance(value, dict) or not isinstance(value.get("id"), str) \
            or not value["id"].strip():
        raise mlperf.error("system", f"`mlperf.system` is {value!r}",
                           fix="a system id, or a mapping with `id` and systems JSON fields")
    system = mlperf.within("system", value)
    for key, item in value.items():
        if not isinstance(item, str | int | float) or isinstance(item, bool):
            raise system.error(key, f"`mlperf.system.{key}` is {item!r}",
                               fix="a string or a number")
    return dict(value)


def profile_schema() -> dict[str, tuple[str, ...] | None]:
    """Each top-level key -> the keys its section takes, or None where it holds a value."""
    hints = typing.get_type_hints(Profile)
    schema: dict[str, tuple[str, ...] | None] = {"extends": None}
    for name in dataclass_keys(Profile, skip=Profile.NOT_YAML):
        cls = hints[name]
        if name == "model":
            schema[name] = MODEL_KEYS
        elif not dataclasses.is_dataclass(cls):
            schema[name] = None
        elif cls is Accuracy:
            schema[name] = ("fid", "clip", "metrics", *Accuracy.SETTINGS)
        else:
            schema[name] = dataclass_keys(cls, skip=getattr(cls, "NOT_YAML", ()))
    return schema


def check_profile_keys(raw: Mapping[str, Any], where: str) -> None:
    """Every top-level and section key of one profile mapping is known (see module doc).
    Below a section, keys are the user's own (submodel names in `target.submodel_flags`)."""
    schema = profile_schema()
    check_keys(raw, schema, where)
    for name, keys in schema.items():
        section = raw.get(name)
        if keys is not None and isinstance(section, Mapping):
            check_keys(section, keys, where, name)


def check_override(dotted: str, path: Path) -> None:
    """`--set KEY=...`: KEY names a known field (a section key, or a key inside one)."""
    where = f"--set (profile {path})"
    parts = dotted.split(".")
    if not all(p.strip() for p in parts):
        raise BadInput(f"`--set {dotted}=...` has an empty key", where=where,
                       fix="write --set SECTION.KEY=VALUE, e.g. --set target.chip=gfx950")
    schema = profile_schema()
    if parts[0] == "extends":
        raise BadInput("`extends` is resolved before overrides apply", where=where,
                       fix="pass the other profile with --profile")
    if parts[0] not in schema:
        raise unknown_key(parts[0], [k for k in schema if k != "extends"], where)
    keys = schema[parts[0]]
    if keys is None and len(parts) > 1:
        raise BadInput(f"`{parts[0]}` holds a value, not a section with `{parts[1]}`",
                       where=f"{where}: {dotted}", fix=f"use --set {parts[0]}=VALUE")
    if keys is not None and len(parts) > 1 and parts[1] not in keys:
        raise unknown_key(parts[1], keys, where, parts[0])


def load_profile(name_or_path: str, overrides: dict[str, Any] | None = None) -> Profile:
    """The profile with `--set` overrides applied; a value an override gave that is wrong
    is blamed on that `--set`, not on the profile file."""
    path = profile_path(name_or_path)
    raw = _load_raw(path)
    for dotted, value in (overrides or {}).items():
        check_override(dotted, path)
        set_field(raw, dotted, value)
    try:
        return profile_from_raw(raw, path, tuple(overrides or ()))
    except RunnerError as e:
        raise _blame_set(e, path, tuple(overrides or ())) from None


def _blame_set(error: RunnerError, path: Path, overridden: tuple[str, ...]) -> RunnerError:
    """`error` with its `where` moved from `PROFILE: a.b` to `--set a.b` when the field at
    fault (or a section holding it) was given by `--set`; else `error` itself."""
    field = (error.where or "").removeprefix(f"{path}: ")
    if field == error.where:
        return error
    for dotted in overridden:
        if field == dotted or field.startswith(f"{dotted}."):
            return BadInput(error.message, where=f"--set {field}", fix=error.fix)
    return error


def profile_from_raw(raw: dict, path: Path, overridden: tuple[str, ...] = ()) -> Profile:
    """A profile from its merged mapping, e.g. the one a run manifest recorded;
    `overridden`: the dotted keys `--set` gave (their layout errors name the `--set`)."""
    where = str(path)
    check_profile_keys(raw, where)
    model = _model(raw.get("model"), path, where)
    target = _target(raw.get("target"), where, path.parent)
    accuracy_raw = raw.get("accuracy") or {}
    accuracy = Fields(accuracy_raw, where, "accuracy")
    return Profile(
        name=raw.get("name", path.stem), path=path, raw=raw,
        model=model, target=target,
        layout=LayoutSpec.from_dict(raw.get("layout") or {}, target.backend, where,
                                    _layout_fields(raw.get("layout"), overridden)),
        accuracy=Accuracy(
            _range(accuracy, "fid"), _range(accuracy, "clip"),
            {k: v for k, v in accuracy_raw.items() if k not in ("fid", "clip", "metrics")},
            METRICS if accuracy_raw.get("metrics") is None  # null: the default, both
            else parse_metrics(accuracy_raw["metrics"], accuracy.where_of("metrics"))),
        mlperf=_mlperf(raw.get("mlperf"), where),
        count=_count(raw.get("count", DEFAULT_COUNT), where),
    )


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MLPERF_SAMPLES:
        raise Fields({}, where).error("count", f"`count` is {value!r}",
                                      fix=f"a number of samples from 1 to {MLPERF_SAMPLES} "
                                      f"(MLPerf's set), e.g. count: {MLPERF_SAMPLES}")
    return value


def _layout_fields(layout: Any, overridden: tuple[str, ...]) -> set[str]:
    """The layout fields `--set` gave: `layout.cpd`, or every field of `--set layout={..}`."""
    fields = {d.split(".", 1)[1] for d in overridden if d.startswith("layout.")}
    if "layout" in overridden and isinstance(layout, Mapping):
        fields |= set(layout)
    return fields


def _model(value: Any, path: Path, where: str) -> ModelConfig:
    """`model:` as a source string or a mapping of MODEL_KEYS. `dtype` and `vae_dtype` pick
    the precision of an export (`checkpoint:`/`seeded:`, default fp16 and an fp32 decoder)
    and are part of its cache key, as is `vae_from`; a model config (builtin:, a path)
    already has them, and must then match (the builtin tiny model ships both decoders)."""
    spec = _expanded("model", value)
    f = Fields(spec, where, "model")
    ref, dtype, vae_dtype = spec.get("source"), spec.get("dtype"), spec.get("vae_dtype")
    if not isinstance(ref, str) or not ref:
        raise Fields({}, where).error(
            "model", "missing `model` (builtin:tiny, checkpoint:DIR, seeded:sdxl or a model "
            "config path)", fix="e.g. `model: checkpoint:/models/sdxl` or `model: {source: "
            "checkpoint:/models/sdxl, dtype: fp32}`")
    for key, given in (("dtype", dtype), ("vae_dtype", vae_dtype)):
        if given is not None and (not isinstance(given, str) or given not in MODEL_DTYPES):
            raise f.error(key, f"`model.{key}` is {given!r}",
                          fix=f"use fp16 or fp32 (e.g. --set model.{key}=fp32)")
    vae_from = f.text("vae_from", example="/models/sdxl-vae-fp16-fix")
    vae = MODEL_DTYPES[vae_dtype or "fp32"]
    if ref.startswith(EXPORT_SOURCES):
        from runner.config.exports import exported_model

        return exported_model(ref, path.parent, f"{where}: model",
                              MODEL_DTYPES[dtype or "fp16"], vae, vae_from)
    if vae_from is not None:
        raise f.error("vae_from", "`model.vae_from` is for a model the runner exports",
                      fix="name the model as checkpoint:DIR or seeded:sdxl (or leave vae_from "
                      "out for a model config)")
    model = ModelConfig.load(_model_path(ref, path, where, vae if vae_dtype else None))
    for key, given, have, verb in (("dtype", dtype, model.dtype, "was exported in"),
                                   ("vae_dtype", vae_dtype, model.vae_dtype, "decodes in")):
        if given is not None and MODEL_DTYPES[given] != have:
            raise f.error(key, f"`model.{key}` is {given}, but {model.path} {verb} {have}",
                          fix=f"leave model.{key} out for a model config, or name a "
                              "checkpoint:DIR / seeded:sdxl source to export in that "
                              "precision")
    return model


def _model_path(model_ref: str, path: Path, where: str, vae_dtype: str | None = None) -> Path:
    """The model config a `model:` reference names; a builtin's variant decoding in
    `vae_dtype` when it ships one."""
    if model_ref.startswith("builtin:"):
        name = model_ref.removeprefix("builtin:")
        model_path = BUILTIN_VAE_VARIANTS.get((name, vae_dtype or ""), BUILTIN_MODELS.get(name))
        if model_path is None:
            raise BadInput(f"unknown builtin model {model_ref!r}", where=f"{where}: model",
                           fix=f"use one of {', '.join('builtin:' + k for k in BUILTIN_MODELS)}")
    else:
        model_path = inside(model_ref, path.parent, f"{where}: model", absolute_ok=True)
    if not model_path.is_file():
        raise BadInput(f"model config not found at {model_path}", where=f"{where}: model",
                       fix="run `runner export tiny` or fix the path")
    return model_path
