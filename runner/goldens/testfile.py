"""IREE CI's golden-test JSON files, every layout, read into one `GoldenTest` model.

Three layouts, told apart by the file itself:
- `sharktank_models/quality_tests/<model>/<submodel>_<backend>.json`: one quality test with
  its own `mlir` and flags (schema "quality");
- the older `regression_tests/<model>/<submodel>.json`, fields prefixed per backend
  (`cpu_compiler_flags`, `run_rocm_function`, ...): one test per backend ("regression");
- `torch_models/<model>/*.json` with a `type` (`quality`, `compstat`, `benchmark`),
  `markers`, and `modules` (or one `module`) naming shared `modules/<name>.json` files that
  hold the MLIR and its flags ("torch").

Whatever the layout, a test is a list of `ModuleDef`s to compile, weights by scope, inputs
and expected outputs, the function and device to run, thresholds, and the goldens its kind
compares. IREE CI's runners add target flags the older files leave out; this module adds the
same ones, except the ROCm chip flag, whose spelling depends on the compiler (added at check
time, and only to a module that names no chip itself). References (`mlir`, `source`/`url`,
weights, tuner files) stay as written; relative paths are relative to the JSON file that
holds them (how the tiny suites in `goldens/` refer to their blobs).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput, RunnerError
from runner.goldens import fields
from runner.goldens.select import Selection, select
from runner.inputs.fields import Fields
from runner.inputs.jsonfile import read_json
from runner.inputs.paths import is_inside, no_such_suite
from runner.model.tensors import TensorSpec

# The backends IREE CI's test suite names its files and flags by (`*_rocm.json`,
# `rocm_compiler_flags`), which are not the runner's own (config.layout.BACKENDS: hip, ...).
SUITE_BACKENDS = ("cpu", "rocm")
DEFAULT_DEVICES = {"cpu": "local-task", "rocm": "hip"}
GOLDEN_KINDS = ("quality", "compstat", "benchmark")
QUALITY_FIELDS = fields.QUALITY
REGRESSION_FIELDS = fields.REGRESSION
# A `modules/<name>.json` file: what to compile, nothing to run.
MODULE_FIELDS = fields.TORCH_MODULE | fields.RUNNER_MODULE_EXTENSIONS
# Fields only the regression schema has: any of them marks a file as that schema.
_REGRESSION_MARKERS = REGRESSION_FIELDS - QUALITY_FIELDS
# What IREE CI's regression runner appends to the per-backend flags.
REGRESSION_TARGET_FLAGS = {"cpu": ("--iree-hal-target-backends=llvm-cpu",),
                           "rocm": ("--iree-hal-target-backends=rocm",)}
ROCM_CHIP_FLAGS = ("--iree-rocm-target=", "--iree-hip-target=")
# Markers that name the hardware a torch_models test is for.
BACKEND_MARKERS = {"cpu": "cpu", "local-task": "cpu", "local-sync": "cpu", "hip": "rocm",
                   "rocm": "rocm"}
# run_args iree-run-module compares with; the rest go to the tool unchanged.
THRESHOLD_ARG_PREFIXES = ("--expected_", "--equality_mode")
DEFAULT_TOLERANCE_FACTOR = 1.1  # torch_models benchmark_test.py: tolerance_factor's default


@dataclass(frozen=True)
class TensorRef:
    """One input or output: `source` (a URL or path; `url` in the torch layout) and `value`,
    the shape and type (optional for `.npy` blobs)."""

    source: str
    value: str | None
    where: str

    @property
    def spec(self) -> TensorSpec | None:
        return TensorSpec.parse(self.value, f"{self.where}.value") if self.value else None

    @property
    def name(self) -> str:
        return self.source.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]


@dataclass(frozen=True)
class ArgSpec:
    """A torch_models argspec (`inputs`, `outputs`, `expected_outputs`): IREE's runner passes
    `<value>=@<the url's file>`, either part optional, to the tool's flag."""

    value: str | None
    url: str | None
    where: str


@dataclass(frozen=True)
class WeightRef:
    """A parameter archive and the scope the module reads it under (`model`). `kind`
    "random": generated from `module`'s MLIR with `seed`, as IREE's runner does."""

    scope: str
    source: str  # the URL or path; for random weights, the module's name
    where: str
    kind: str = "url"
    seed: int | None = None
    module: ModuleDef | None = None


@dataclass(frozen=True)
class ModuleDef:
    """One MLIR to compile with its flags. `load`: whether the run loads it (the older
    layout compiles `pipeline_mlir` always but loads it only with `add_pipeline_module`);
    `stats`: compile with the scheduling statistics dump, as IREE CI's torch_models runner
    compiles every module, so quality and compstat tests share one compile."""

    name: str  # "model" / "pipeline", or the module reference (`sdxl/modules/clip_cpu`)
    mlir: str
    compiler_flags: tuple[str, ...]
    where: str  # file and field, for errors about the MLIR
    base_dir: Path  # relative `mlir` paths resolve here
    load: bool = True
    stats: bool = False
    unknown: tuple[str, ...] = ()  # fields of its module file IREE's runner does not read

    @property
    def chip(self) -> str | None:
        """The ROCm chip the module's own flags compile for, if any."""
        return next((f.split("=", 1)[1] for f in reversed(self.compiler_flags)
                     if f.startswith(ROCM_CHIP_FLAGS)), None)


@dataclass(frozen=True)
class GoldenTest:
    path: Path
    schema: str  # "quality" | "regression" | "torch"
    model: str  # the directory the file sits in (sdxl, tiny)
    submodel: str  # older layouts: `clip`; torch layout: the file's stem
    backend: str  # cpu | rocm
    modules: tuple[ModuleDef, ...]
    kind: str = "quality"  # quality | compstat | benchmark
    markers: tuple[str, ...] = ()
    inputs: tuple[TensorRef, ...] = ()
    outputs: tuple[TensorRef, ...] = ()
    weights: tuple[WeightRef, ...] = ()
    device: str = "local-task"
    threshold_args: tuple[str, ...] = ()
    run_function: str = "main"
    compile_only: bool = False
    run_test_expecting_to_fail: bool = False
    compile_chip_expecting_to_fail: tuple[str, ...] = ()
    tuner_file: dict[str, str] = field(default_factory=dict)
    golden_dispatch_count: int | None = None
    golden_binary_size: int | None = None
    golden_time_ms: float | None = None
    benchmark_flags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # fields this runner does not use
    # torch_models: run_args and argspecs exactly as written (IREE's runner passes them on).
    run_args: tuple[str, ...] = ()
    input_specs: tuple[ArgSpec, ...] = ()
    output_specs: tuple[ArgSpec, ...] = ()
    expected_specs: tuple[ArgSpec, ...] = ()
    tolerance_factor: float | None = None
    unknown: tuple[str, ...] = ()  # fields IREE's runner does not read: warnings
    # Run fields the file leaves out that IREE's runner would pass as the string "None"
    # (`--function=None`): the run fails there, so it fails here.
    unset: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """Unique across a suite: `<model>/<submodel>_<backend>`, or `<model>/<stem>`."""
        if self.schema == "torch":
            return f"{self.model}/{self.submodel}"
        return f"{self.model}/{self.submodel}_{self.backend}"

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def outputs_field(self) -> str:
        return "expected_outputs" if self.schema == "torch" else "outputs"

    @property
    def runs(self) -> bool:
        return self.kind != "compstat" and not self.compile_only


@dataclass(frozen=True)
class BenchmarkTest:
    """A benchmark golden: inputs by type only, golden times (and, in the older layout,
    dispatch counts and sizes) keyed by SKU. The older layout names no module (it borrows
    its quality test's); a torch-layout file carries its own, as `module_test`, and one
    golden time for the SKU its markers name (key `ANY_SKU`), met by the fastest
    repetition, as IREE CI's torch_models runner judges it."""

    path: Path
    model: str
    submodel: str
    backend: str
    inputs: tuple[TensorSpec, ...]
    function: str
    benchmark_flags: tuple[str, ...]
    device: str
    golden_time_ms: dict[str, float]
    golden_time_tolerance_multiplier: dict[str, float]
    golden_dispatch: dict[str, int]
    golden_size: dict[str, int]
    extra: dict[str, Any] = field(default_factory=dict)
    module_test: GoldenTest | None = None
    time_statistic: str = "mean"  # or "min"
    markers: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()  # fields IREE's runner does not read: warnings
    unset: tuple[str, ...] = ()  # fields IREE's runner would pass as "None" (it then fails)

    @property
    def name(self) -> str:
        if self.module_test is not None:
            return self.module_test.name
        return f"{self.model}/{self.submodel}_{self.backend}"


ANY_SKU = "*"
SKU_MAPPING = "a mapping of SKU to value"  # golden_time_ms, tuner_file, ... by machine


def golden_for(goldens: dict, sku: str):
    """The SKU's golden, or the one a torch-layout file gives for any SKU."""
    return goldens.get(sku, goldens.get(ANY_SKU))


def _tensors(f: Fields, key: str, ref_key: str = "source") -> tuple[TensorRef, ...]:
    """An older layout's `inputs` / `outputs`: `source` and `value` (the shape and type,
    optional for `.npy` and `.irpa` blobs), the spelling of each checked now."""
    refs = []
    for entry, at in f.entries(key, f'a list of {{"{ref_key}": ..., "value": ...}}'):
        if not isinstance(entry, dict) or not isinstance(entry.get(ref_key), str) \
                or not entry[ref_key]:
            raise at.error("", f"each entry needs a `{ref_key}` string",
                           fix=f'write {{"{ref_key}": "<URL or path>", "value": '
                           '"<shape>x<type>"}')
        val = entry.get("value")
        if val is not None and not isinstance(val, str):
            raise at.error("value", "`value` must be a string like 1x64xi64",
                           fix='e.g. "value": "1x64xi64"')
        ref = TensorRef(entry[ref_key], val or None, at.where_of(""))
        _ = ref.spec  # validates the spelling now, naming the field
        if val is None and not ref.name.lower().endswith((".npy", ".irpa")):
            raise at.error("value", "a raw blob needs a `value` (shape and type)",
                           fix='add "value": "<shape>x<type>"')
        refs.append(ref)
    return tuple(refs)


def _read_json(path: Path) -> dict:
    """A test file through the bounded JSON reader (size, depth, finite numbers)."""
    return read_json(path, what="test file")


def _split_name(stem: str) -> tuple[str, str | None]:
    """`punet_int8_fp16_rocm` -> (`punet_int8_fp16`, `rocm`), as IREE CI splits it."""
    head, _, tail = stem.rpartition("_")
    return (head, tail) if head and tail in SUITE_BACKENDS else (stem, None)


def _backend(raw: dict, suffix: str | None, flags: tuple[str, ...], where: str) -> str:
    device = raw.get("device")
    if suffix:
        return suffix
    if isinstance(device, str):
        if device.startswith("local"):
            return "cpu"
        if device in ("hip", "rocm"):
            return "rocm"
    if any(f in ("--iree-hal-target-device=hip", "--iree-hal-target-backends=rocm")
           for f in flags):
        return "rocm"
    if any(f in ("--iree-hal-target-device=local", "--iree-hal-target-backends=llvm-cpu")
           for f in flags):
        return "cpu"
    raise BadInput("cannot tell the backend", where=where,
                   fix="name the file <submodel>_cpu.json or <submodel>_rocm.json, or set "
                   '"device" ("local-task" or "hip")')


def layout(raw: dict) -> str:
    """"torch", "module" (a torch-layout module definition), "benchmark" (the older
    benchmark schema), "regression" or "quality"."""
    if "mlir" in raw and "compiler_flags" in raw and raw.keys() <= MODULE_FIELDS:
        return "module"
    # The older e2e benchmark also has `modules` (submodel names), beside benchmark_flags.
    if {"type", "markers", "module", "run_args", "expected_outputs"} & raw.keys() or (
            "modules" in raw and "benchmark_flags" not in raw):
        return "torch"
    if "mlir" not in raw and ("golden_time_ms" in raw or "benchmark_flags" in raw):
        return "benchmark"
    return "regression" if _REGRESSION_MARKERS & raw.keys() else "quality"


def tensor_fields(raw: dict) -> tuple[tuple[str, str], tuple[str, str]]:
    """((inputs field, reference key), (outputs field, reference key)) of a file's layout:
    what `bump` rewrites."""
    if layout(raw) == "torch":
        return ("inputs", "url"), ("expected_outputs", "url")
    return ("inputs", "source"), ("outputs", "source")


def _module_file_error(path: Path) -> RunnerError:
    name = f"modules/{path.stem}\""
    users = sorted((p.name for p in path.parent.parent.glob("*.json")
                    if name in p.read_text(encoding="utf-8", errors="replace")),
                   key=lambda n: ("quality" not in n, n))
    example = f" (e.g. {path.parent.parent / users[0]})" if users else ""
    return RunnerError("this is a module definition (an MLIR and its compiler flags), not a "
                       "test: it names nothing to run or compare", where=str(path),
                       fix=f"point at the test files that list it under `modules`{example}")


def load_test_file(path: Path, module_dirs: tuple[Path, ...] = ()) -> list[GoldenTest]:
    """One test (quality and torch layouts) or one per backend (regression schema).
    `module_dirs`: where torch-layout module names are looked up first (IREE CI's
    `--module-directory`); then the test file's directory and its parents."""
    raw = _read_json(path)
    where = str(path)
    kind = layout(raw)
    if kind == "benchmark":
        raise BadInput("this is a benchmark file, not a quality test", where=where,
                       fix="check it with `runner bench goldens`")
    if kind == "module":
        raise _module_file_error(path)
    if kind == "torch":
        test = _torch_test(path, raw, module_dirs)
        if test.kind == "benchmark":
            raise BadInput("this is a benchmark test", where=f"{path}: type",
                           fix="check it with `runner bench goldens`")
        return [test]
    if kind == "regression":
        return _regression_tests(path, raw)
    return [_quality_test(path, raw)]


def _old_modules(path: Path, f: Fields, flags: tuple[str, ...],
                 pipeline_flags: tuple[str, ...]) -> tuple[ModuleDef, ...]:
    main = ModuleDef("model", f.required("mlir", '"<URL or path>"'), flags, f"{path}: mlir",
                     path.parent)
    pipeline = f.text("pipeline_mlir")
    add = f.flag("add_pipeline_module")
    if add and not pipeline:
        raise f.error("add_pipeline_module", "`add_pipeline_module` is true but there is no "
                      "`pipeline_mlir`", fix='add "pipeline_mlir": "<URL>" or drop '
                      "add_pipeline_module")
    if not pipeline:
        return (main,)
    return main, ModuleDef("pipeline", pipeline, pipeline_flags, f"{path}: pipeline_mlir",
                           path.parent, load=add)


def _entry_unknown(f: Fields, known: frozenset[str], reader: str) -> tuple[str, ...]:
    """Unknown fields of the file and of its inputs[] / outputs[] entries."""
    found = list(fields.unknown(f.raw, known, f.where_of(""), reader))
    for key in ("inputs", "outputs"):
        entries = f.raw.get(key)
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict):
                found += fields.unknown(entry, fields.TENSOR_ENTRY, f.where_of(f"{key}[{i}]"),
                                        reader)
    return tuple(found)


def _unset(f: Fields, *keys: str) -> tuple[str, ...]:
    return tuple(k for k in keys if f.raw.get(k) is None)


def _old_common(path: Path, f: Fields) -> dict[str, Any]:
    weights = f.text("real_weights")
    return dict(
        path=path, model=path.resolve().parent.name, inputs=_tensors(f, "inputs"),
        outputs=_tensors(f, "outputs"), compile_only=f.flag("compile_only"),
        weights=(WeightRef("model", weights, f"{path}: real_weights"),) if weights else (),
        tuner_file=f.mapping("tuner_file", str, SKU_MAPPING),
    )


def _quality_test(path: Path, raw: dict) -> GoldenTest:
    f = Fields(raw, str(path))
    submodel, suffix = _split_name(path.stem)
    flags = f.texts("compiler_flags")
    backend = _backend(raw, suffix, flags, str(path))
    return GoldenTest(
        **_old_common(path, f), schema="quality", submodel=submodel, backend=backend,
        modules=_old_modules(path, f, flags, f.texts("pipeline_compiler_flags")),
        markers=("quality", backend),
        device=f.text("device", DEFAULT_DEVICES[backend]),
        threshold_args=f.texts("threshold_args"), run_function=f.text("run_function", "main"),
        run_test_expecting_to_fail=f.flag("run_test_expecting_to_fail"),
        compile_chip_expecting_to_fail=f.texts("compile_chip_expecting_to_fail"),
        extra={k: v for k, v in raw.items() if k not in QUALITY_FIELDS},
        unknown=_entry_unknown(f, QUALITY_FIELDS, "IREE CI's model_quality_run.py"),
        unset=_unset(f, "device", "run_function"),
    )


def _regression_tests(path: Path, raw: dict) -> list[GoldenTest]:
    f = Fields(raw, str(path))
    common = _old_common(path, f)
    extra = {k: v for k, v in raw.items() if k not in REGRESSION_FIELDS}
    unknown = _entry_unknown(f, REGRESSION_FIELDS, "IREE CI's test_model_threshold.py")
    tests = []
    for backend in SUITE_BACKENDS:
        if backend == "cpu" and f.flag("rocm_tests_only"):
            continue
        flags = (*f.texts(f"{backend}_compiler_flags"), *REGRESSION_TARGET_FLAGS[backend])
        pipeline_flags = flags if backend == "cpu" else (
            *f.texts("rocm_pipeline_compiler_flags"), *REGRESSION_TARGET_FLAGS["rocm"])
        tests.append(GoldenTest(
            **{**common, "tuner_file": common["tuner_file"] if backend == "rocm" else {}},
            schema="regression", submodel=path.stem, backend=backend,
            modules=_old_modules(path, f, flags, pipeline_flags),
            markers=("quality", backend), device=DEFAULT_DEVICES[backend],
            threshold_args=f.texts(f"{backend}_threshold_args"),
            run_function=f.text(f"run_{backend}_function", "main"),
            run_test_expecting_to_fail=f.flag(f"{backend}_run_test_expecting_to_fail"),
            compile_chip_expecting_to_fail=(f.texts("rocm_compile_chip_expecting_to_fail")
                                            if backend == "rocm" else ()),
            extra=extra, unknown=unknown, unset=_unset(f, f"run_{backend}_function"),
        ))
    return tests


def _module_def(ref: object, where: str, path: Path, module_dirs: tuple[Path, ...]
                ) -> ModuleDef:
    """A `modules/<name>.json` named as IREE CI names it: relative to its module directory
    (`sdxl/modules/clip_cpu` under `torch_models/`)."""
    if not isinstance(ref, str) or not ref.strip():
        raise BadInput("a module is named by a string like sdxl/modules/clip_cpu",
                       where=where, fix='write "modules": ["<model>/modules/<name>"]')
    bases = [*module_dirs, *path.resolve().parents][: len(module_dirs) + 4]
    candidates = [(b / ref).with_suffix(".json") for b in bases]
    # A name that leads out of the directory it is looked up in is never followed.
    found = next((c for c, b in zip(candidates, bases, strict=True)
                  if c.is_file() and is_inside(c, b)), None)
    if found is None and any(c.is_file() for c in candidates):
        raise BadInput(f"module name {ref[:120]!r} leads outside the directories it is "
                       "looked up in", where=where,
                       fix="name the module relative to its module directory, without `..`")
    if found is None:
        raise BadInput(f"module file {ref}.json not found (looked at "
                       f"{', '.join(map(str, candidates))})", where=where,
                       fix="fix the module name, or pass --module-dir DIR (IREE CI's "
                       "--module-directory, where `<model>/modules/` lives)")
    raw = _read_json(found)
    f = Fields(raw, str(found))
    unknown = fields.unknown(raw, MODULE_FIELDS, str(found), "IREE CI's torch_models runner")
    # IREE CI: a `git-lfs` module's MLIR path is relative to the module directory.
    base = found.parent
    if raw.get("type") == "git-lfs":
        base = next(b for b, c in zip(bases, candidates, strict=False) if c == found)
    return ModuleDef(ref, f.required("mlir", '"<URL or path>"'), f.texts("compiler_flags"),
                     f"{found}: mlir", base, stats=True, unknown=unknown)


def _torch_backend(path: Path, markers: tuple[str, ...], device: str | None,
                   modules: tuple[ModuleDef, ...]) -> str:
    found = {BACKEND_MARKERS[m] for m in markers if m in BACKEND_MARKERS}
    if len(found) == 1:
        return found.pop()
    if device:
        return _backend({"device": device}, None, (), f"{path}: markers")
    flags = tuple(f for m in modules for f in m.compiler_flags)
    try:
        return _backend({}, None, flags, f"{path}: markers")
    except RunnerError as e:
        raise BadInput("cannot tell the backend from the markers, run_args or the "
                       "module's flags", where=f"{path}: markers",
                       fix='add a marker "cpu" or "hip"') from e


def _run_args(f: Fields) -> tuple[str | None, str | None, tuple[str, ...], tuple[str, ...]]:
    """`run_args` split into (function, device, threshold args, everything else)."""
    function = device = None
    thresholds, rest = [], []
    for arg in f.texts("run_args"):
        if arg.startswith("--function="):
            function = arg.split("=", 1)[1]
        elif arg.startswith("--device="):
            device = arg.split("=", 1)[1]
        elif arg.startswith(THRESHOLD_ARG_PREFIXES):
            thresholds.append(arg)
        else:
            rest.append(arg)
    return function, device, tuple(thresholds), tuple(rest)


def _torch_weights(f: Fields, path: Path, module_dirs: tuple[Path, ...]
                   ) -> tuple[tuple[WeightRef, ...], tuple[str, ...]]:
    """Every `weights` entry, as IREE's runner reads it (test_base.py `_get_weights`): `type`
    and `scope` required; `url` archives, or `random` ones generated from a module's MLIR
    with a seed. Each is passed as `--parameters=<scope>=<file>`, in order."""
    out: list[WeightRef] = []
    unknown: list[str] = []
    fix = 'write {"type": "url", "url": "<URL>", "scope": "model"}'
    for entry, at in f.entries("weights", 'a list of {"type": "url", "url": ..., '
                               '"scope": "model"}'):
        where = at.where_of("")
        if not isinstance(entry, dict):
            raise at.error("", "each weight is an object", fix=fix)
        kind, scope = entry.get("type"), entry.get("scope")
        if kind not in fields.TORCH_WEIGHT:
            raise at.error("type", f"weights of type {kind!r}: IREE CI's runner knows `url` "
                           "and `random`", fix=fix)
        if not isinstance(scope, str) or not scope:
            raise at.error("scope", "missing `scope` (IREE CI's runner requires it)",
                           fix='add "scope": "model"')
        unknown += fields.unknown(entry, fields.TORCH_WEIGHT[kind], where,
                                  "IREE CI's torch_models runner")
        if kind == "url":
            url = entry.get("url")
            if not isinstance(url, str) or not url:
                raise at.error("url", "missing `url`", fix='add "url": "<URL>"')
            out.append(WeightRef(scope, url, where))
            continue
        if not at.given("seed"):
            raise at.wrong("seed", "a whole number at least 0 (numpy's default_rng seed)", 0)
        seed = at.number("seed", int, minimum=0, example=0)
        module = _module_def(entry.get("module"), at.where_of("module"), path, module_dirs)
        out.append(WeightRef(scope, module.name, where, kind="random", seed=seed,
                             module=module))
    return tuple(out), tuple(unknown)


def _argspecs(f: Fields, key: str) -> tuple[tuple[ArgSpec, ...], tuple[str, ...]]:
    """`inputs` / `outputs` / `expected_outputs` entries: `url` and `value`, either optional
    but not both (test_base.py `_get_arg_strings`)."""
    specs: list[ArgSpec] = []
    unknown: list[str] = []
    for entry, at in f.entries(key, 'a list of {"url": ..., "value": ...}'):
        where = at.where_of("")
        parts = {k: entry.get(k) for k in ("url", "value")} if isinstance(entry, dict) else {}
        if not parts or not all(v is None or (isinstance(v, str) and v)
                                for v in parts.values()) \
                or all(v is None for v in parts.values()):
            raise at.error("", "each entry needs a `url` or a `value` (a non-empty string)",
                           fix='write {"url": "<URL>", "value": "<shape>x<type>"}')
        unknown += fields.unknown(entry, fields.TORCH_ARGSPEC, where,
                                  "IREE CI's torch_models runner")
        specs.append(ArgSpec(parts["value"], parts["url"], where))
    return tuple(specs), tuple(unknown)


def _tensor_refs(specs: tuple[ArgSpec, ...]) -> tuple[TensorRef, ...] | None:
    """The argspecs as tensors this runner reads itself (a file and its type), or None when
    one is something else (a literal value, an output file): then only the tool runs it."""
    refs = []
    for spec in specs:
        if spec.url is None:
            return None
        ref = TensorRef(spec.url, spec.value, spec.where)
        try:
            _ = ref.spec
        except RunnerError:
            return None
        if spec.value is None and not ref.name.lower().endswith(".npy"):
            return None
        refs.append(ref)
    return tuple(refs)


def _torch_test(path: Path, raw: dict, module_dirs: tuple[Path, ...]) -> GoldenTest:
    where = str(path)
    f = Fields(raw, where)
    kind = raw.get("type")
    if kind not in GOLDEN_KINDS:
        raise f.error("type", f"unknown test type {kind!r}" if "type" in raw
                      else "missing required field `type`",
                      fix=f"set \"type\" to one of {', '.join(GOLDEN_KINDS)}")
    markers = f.texts("markers")
    if "markers" not in raw:
        raise f.missing("markers", '["cpu"] (or ["hip", "gfx942"], ...)')
    names_field = "module" if kind == "compstat" else "modules"
    if kind == "compstat":
        names = [raw["module"]] if raw.get("module") is not None else []
    else:
        names = raw.get("modules") or []
        if not isinstance(names, list):
            raise f.wrong("modules", "a list of module names")
    if not names:
        raise f.error(names_field, "the test names no module",
                      fix=f'add "{names_field}": '
                      + ('"<model>/modules/<name>"' if kind == "compstat"
                         else '["<model>/modules/<name>"]'))
    modules = tuple(_module_def(n, f"{where}: {names_field}"
                                + ("" if kind == "compstat" else f"[{i}]"), path, module_dirs)
                    for i, n in enumerate(names))
    reader = "IREE CI's torch_models runner"
    unknown = [*fields.unknown(raw, fields.TORCH_COMMON | fields.TORCH_BY_KIND[kind], where,
                               reader, fields.TORCH_ANY_KIND),
               *(u for m in modules for u in m.unknown)]
    function, device, thresholds, rest = _run_args(f)
    backend = _torch_backend(path, markers, device, modules)
    specs: dict[str, tuple[ArgSpec, ...]] = {}
    weights: tuple[WeightRef, ...] = ()
    if kind != "compstat":  # compstat_test.py reads none of these
        for key in ("inputs", "outputs", "expected_outputs"):
            specs[key], more = _argspecs(f, key)
            unknown += more
        weights, more = _torch_weights(f, path, module_dirs)
        unknown += more
        unknown += (u for w in weights if w.module for u in w.module.unknown)
    inputs = _tensor_refs(specs.get("inputs", ()))
    outputs = _tensor_refs(specs.get("expected_outputs", ()))
    return GoldenTest(
        path=path, schema="torch", kind=kind, model=path.resolve().parent.name,
        submodel=path.stem, backend=backend, modules=modules,
        markers=(kind, *markers), inputs=inputs or (),
        outputs=(outputs or ()) if kind == "quality" else (),
        weights=weights, device=device or DEFAULT_DEVICES[backend],
        threshold_args=thresholds + (rest if kind == "quality" else ()),
        run_function=function or "main",
        golden_dispatch_count=f.number("golden_dispatch_count", int, minimum=0),
        golden_binary_size=f.number("golden_binary_size", int, minimum=0),
        golden_time_ms=f.number("golden_time_ms", minimum=0),
        benchmark_flags=rest if kind == "benchmark" else (),
        run_args=f.texts("run_args"), input_specs=specs.get("inputs", ()),
        output_specs=specs.get("outputs", ()), expected_specs=specs.get("expected_outputs", ()),
        tolerance_factor=f.number("tolerance_factor", minimum=0),
        unknown=tuple(dict.fromkeys(unknown)),
    )


def load_benchmark_file(path: Path, module_dirs: tuple[Path, ...] = ()) -> BenchmarkTest:
    """Either layout's benchmark file as one `BenchmarkTest`."""
    raw = _read_json(path)
    kind = layout(raw)
    if kind == "torch":
        test = _torch_test(path, raw, module_dirs)
        if test.kind != "benchmark":
            raise BadInput(f"this is a {test.kind} test, not a benchmark",
                           where=f"{path}: type",
                           fix="check it with `runner goldens check`")
        golden = {} if test.golden_time_ms is None else {ANY_SKU: test.golden_time_ms}
        factor = DEFAULT_TOLERANCE_FACTOR if test.tolerance_factor is None \
            else test.tolerance_factor
        shapes = []
        for spec in test.input_specs:
            try:
                shapes.append(TensorSpec.parse(spec.value or "", f"{spec.where}.value"))
            except RunnerError:
                break
        return BenchmarkTest(
            path=path, model=test.model, submodel=test.submodel, backend=test.backend,
            inputs=tuple(shapes), function=test.run_function,
            benchmark_flags=test.benchmark_flags, device=test.device, golden_time_ms=golden,
            golden_time_tolerance_multiplier={ANY_SKU: factor} if golden else {},
            golden_dispatch={}, golden_size={}, extra=test.extra, module_test=test,
            time_statistic="min", markers=test.markers, unknown=test.unknown)
    if kind != "benchmark":
        raise BadInput("this is a quality test, not a benchmark file", where=str(path),
                       fix="check it with `runner goldens check`")
    f = Fields(raw, str(path))
    submodel, suffix = _split_name(path.stem)
    inputs = f.texts("inputs")  # tensor types like 1x64xi64
    backend = _backend(raw, suffix, f.texts("compile_flags"), str(path))
    known = {"inputs", "function_run", "benchmark_flags", "device", "golden_time_ms",
             "golden_time_tolerance_multiplier", "golden_dispatch", "golden_size"}
    return BenchmarkTest(
        unknown=fields.unknown(raw, fields.BENCHMARK | fields.RUNNER_BENCHMARK_EXTENSIONS,
                               str(path), "IREE CI's model_benchmark_run.py"),
        unset=_unset(f, "device", "function_run"),
        path=path, model=path.resolve().parent.name, submodel=submodel, backend=backend,
        inputs=tuple(TensorSpec.parse(v, f"{path}: inputs[{i}]") for i, v in enumerate(inputs)),
        function=f.text("function_run", "main"), benchmark_flags=f.texts("benchmark_flags"),
        device=f.text("device", DEFAULT_DEVICES[backend]),
        golden_time_ms=f.mapping("golden_time_ms", (int, float), SKU_MAPPING),
        golden_time_tolerance_multiplier=f.mapping("golden_time_tolerance_multiplier",
                                                   (int, float), SKU_MAPPING),
        golden_dispatch=f.mapping("golden_dispatch", int, SKU_MAPPING),
        golden_size=f.mapping("golden_size", int, SKU_MAPPING),
        extra={k: v for k, v in raw.items() if k not in known},
        markers=("benchmark", backend),
    )


def file_kind(path: Path) -> str:
    """What a file in a test directory is: "benchmark" (either layout), "module" (a
    torch-layout module definition), "untyped" (a torch-layout file without `type`, which
    IREE CI's collector passes over) or "test"."""
    raw = _read_json(path)
    kind = layout(raw)
    if kind == "torch":
        if "type" not in raw:
            return "untyped"
        return "benchmark" if raw.get("type") == "benchmark" else "test"
    if kind in ("benchmark", "module"):
        return kind
    return "test"


def find_test_files(paths: list[Path], model: str | None = None, where: str | None = None
                    ) -> list[Path]:
    """Files as given; a directory's `*.json`, or its `<model>/` subdirectory's with
    `--model` (so `quality_tests/` + `--model sdxl` works like `run_thresholds.py`).
    `where`: the flag that named them (`--goldens`), for a path that is not there."""
    files: list[Path] = []
    for path in paths:
        if path.is_file():
            files.append(path)
            continue
        if not path.is_dir():
            raise no_such_suite(path, where)
        folder = path / model if model and (path / model).is_dir() else path
        found = sorted(folder.glob("*.json")) or sorted(folder.glob("*/*.json"))
        if not found:
            raise BadInput("no test files (*.json) here", where=str(folder),
                           fix="point at IREE CI test JSON files or the directory holding "
                           "them, or a shipped suite by name (e.g. tiny)")
        files.extend(found)
    return files


def load_tests(paths: list[Path], selection: Selection | None = None,
               module_dirs: tuple[Path, ...] = ()) -> list[GoldenTest]:
    """Every quality and compstat test in `paths` that `selection` keeps. A directory's
    benchmark files, module definitions and files without a `type` are left to
    `runner bench goldens` or skipped, as IREE CI's collectors do; a file named on its own
    must be a test."""
    selection = selection or Selection()
    found: list[tuple[GoldenTest, str]] = []
    benchmarks = []
    for path in find_test_files(paths, selection.model):
        explicit = path in paths
        kind = "test" if explicit else file_kind(path)
        if kind == "benchmark":
            benchmarks.append(path)
        if kind == "untyped":
            print(f"warning: {path}: no `type`: not a test (IREE CI's torch_models collector "
                  "skips it too)", file=sys.stderr)
        if kind != "test":
            continue
        for test in load_test_file(path, module_dirs):
            if selection.model and test.model != selection.model and not explicit:
                continue
            found.append((test, test.submodel))
    if not found and benchmarks:
        raise BadInput("only benchmark tests here", where=str(benchmarks[0].parent),
                       fix="check them with `runner bench goldens`")
    return select(found, selection, paths)
