"""IREE CI's golden-test JSON files, both schemas, read into one `GoldenTest` per backend.

Quality tests (`sharktank_models/quality_tests/<model>/<submodel>_<backend>.json`) hold one
backend each; the older regression tests (`regression_tests/<model>/<submodel>.json`)
prefix fields per backend (`cpu_compiler_flags`, `run_rocm_function`, ...) and give one
test per backend. IREE CI's runners add target flags the files leave out; this module adds
the same ones so a `GoldenTest` holds the flags CI compiles with, except the ROCm chip
flag, whose spelling depends on the compiler (added at check time). References (`mlir`,
`source`, `real_weights`, tuner files) stay as written; relative paths are relative to the
JSON file's directory (how the tiny suite in `goldens/tiny/` refers to its blobs).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import RunnerError
from runner.tensors import TensorSpec

BACKENDS = ("cpu", "rocm")
DEFAULT_DEVICES = {"cpu": "local-task", "rocm": "hip"}
QUALITY_FIELDS = {
    "mlir", "inputs", "outputs", "real_weights", "pipeline_mlir", "pipeline_compiler_flags",
    "add_pipeline_module", "device", "compiler_flags", "threshold_args", "run_function",
    "compile_only", "run_test_expecting_to_fail", "compile_chip_expecting_to_fail",
    "tuner_file",
}
REGRESSION_FIELDS = {
    "mlir", "inputs", "outputs", "real_weights", "pipeline_mlir", "add_pipeline_module",
    "cpu_compiler_flags", "rocm_compiler_flags", "rocm_pipeline_compiler_flags",
    "cpu_threshold_args", "rocm_threshold_args", "run_cpu_function", "run_rocm_function",
    "cpu_run_test_expecting_to_fail", "rocm_run_test_expecting_to_fail", "rocm_tests_only",
    "rocm_compile_chip_expecting_to_fail", "compile_only", "tuner_file",
}
# Fields only the regression schema has: any of them marks a file as that schema.
_REGRESSION_MARKERS = REGRESSION_FIELDS - QUALITY_FIELDS
# What IREE CI's regression runner appends to the per-backend flags.
REGRESSION_TARGET_FLAGS = {"cpu": ("--iree-hal-target-backends=llvm-cpu",),
                           "rocm": ("--iree-hal-target-backends=rocm",)}


@dataclass(frozen=True)
class TensorRef:
    """One `{"source": ..., "value": ...}` entry; `value` is optional for `.npy` blobs."""

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
class GoldenTest:
    path: Path
    schema: str  # "quality" | "regression"
    model: str  # the directory the file sits in (sdxl, tiny)
    submodel: str
    backend: str  # cpu | rocm
    mlir: str
    inputs: tuple[TensorRef, ...] = ()
    outputs: tuple[TensorRef, ...] = ()
    real_weights: str | None = None
    pipeline_mlir: str | None = None
    pipeline_compiler_flags: tuple[str, ...] = ()
    add_pipeline_module: bool = False
    device: str = "local-task"
    compiler_flags: tuple[str, ...] = ()
    threshold_args: tuple[str, ...] = ()
    run_function: str = "main"
    compile_only: bool = False
    run_test_expecting_to_fail: bool = False
    compile_chip_expecting_to_fail: tuple[str, ...] = ()
    tuner_file: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # fields this runner does not use

    @property
    def name(self) -> str:
        """`<model>/<submodel>_<backend>`, unique across a suite."""
        return f"{self.model}/{self.submodel}_{self.backend}"

    @property
    def base_dir(self) -> Path:
        return self.path.parent


@dataclass(frozen=True)
class BenchmarkTest:
    """A `benchmarks/<model>/*.json` file: inputs by type only, golden times and sizes."""

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


class _Fields:
    """Typed reads of one JSON object, every error naming the file and field."""

    def __init__(self, raw: dict, where: str):
        self.raw, self.where = raw, where

    def _bad(self, key: str, want: str) -> RunnerError:
        got = type(self.raw[key]).__name__
        return RunnerError(f"`{key}` must be {want}, not {got}", where=f"{self.where}: {key}")

    def str(self, key: str, default: str | None = None, required: bool = False) -> str | None:
        if key not in self.raw or self.raw[key] is None:
            if required:
                raise RunnerError(f"missing required field `{key}`",
                                  where=f"{self.where}: {key}",
                                  fix=f'add "{key}": "<URL or path>"')
            return default
        if not isinstance(self.raw[key], str) or not self.raw[key]:
            raise self._bad(key, "a non-empty string")
        return self.raw[key]

    def bool(self, key: str) -> bool:
        value = self.raw.get(key, False)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def strs(self, key: str) -> tuple[str, ...]:
        value = self.raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(key, "a list of strings")
        return tuple(value)

    def mapping(self, key: str, kind: type | tuple[type, ...]) -> dict:
        value = self.raw.get(key) or {}
        if not isinstance(value, dict) or not all(
                isinstance(v, kind) and not isinstance(v, bool) for v in value.values()):
            raise self._bad(key, "a mapping of SKU to value")
        return dict(value)

    def tensors(self, key: str) -> tuple[TensorRef, ...]:
        value = self.raw.get(key) or []
        if not isinstance(value, list):
            raise self._bad(key, 'a list of {"source": ..., "value": ...}')
        refs = []
        for i, entry in enumerate(value):
            where = f"{self.where}: {key}[{i}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("source"), str) \
                    or not entry["source"]:
                raise RunnerError("each entry needs a `source` string", where=where,
                                  fix='write {"source": "<URL or path>", "value": '
                                  '"<shape>x<type>"}')
            val = entry.get("value")
            if val is not None and not isinstance(val, str):
                raise RunnerError("`value` must be a string like 1x64xi64",
                                  where=f"{where}.value")
            ref = TensorRef(entry["source"], val or None, f"{self.where}: {key}[{i}]")
            _ = ref.spec  # validates the spelling now, naming the field
            if val is None and not ref.name.lower().endswith((".npy", ".irpa")):
                raise RunnerError("a raw blob needs a `value` (shape and type)",
                                  where=f"{where}.value", fix='add "value": "<shape>x<type>"')
            refs.append(ref)
        return tuple(refs)


def _read_json(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RunnerError(f"cannot read test file: {e}", where=str(path)) from e
    except ValueError as e:
        raise RunnerError(f"not valid JSON: {e}", where=str(path)) from e
    if not isinstance(raw, dict):
        raise RunnerError("a test file must hold a JSON object", where=str(path))
    return raw


def _split_name(stem: str) -> tuple[str, str | None]:
    """`punet_int8_fp16_rocm` -> (`punet_int8_fp16`, `rocm`), as IREE CI splits it."""
    head, _, tail = stem.rpartition("_")
    return (head, tail) if head and tail in BACKENDS else (stem, None)


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
    raise RunnerError("cannot tell the backend", where=where,
                      fix="name the file <submodel>_cpu.json or <submodel>_rocm.json, or set "
                      '"device" ("local-task" or "hip")')


def is_benchmark(raw: dict) -> bool:
    return "mlir" not in raw and ("golden_time_ms" in raw or "benchmark_flags" in raw)


def load_test_file(path: Path) -> list[GoldenTest]:
    """One test (quality schema) or one per backend (regression schema)."""
    raw = _read_json(path)
    where = str(path)
    if is_benchmark(raw):
        raise RunnerError("this is a benchmark file, not a quality test", where=where,
                          fix="point `goldens check` at quality_tests/ (or regression_tests/)")
    if _REGRESSION_MARKERS & raw.keys():
        return _regression_tests(path, raw)
    return [_quality_test(path, raw)]


def _common(path: Path, f: _Fields) -> dict[str, Any]:
    return dict(
        path=path, model=path.resolve().parent.name, mlir=f.str("mlir", required=True),
        inputs=f.tensors("inputs"), outputs=f.tensors("outputs"),
        real_weights=f.str("real_weights"), pipeline_mlir=f.str("pipeline_mlir"),
        add_pipeline_module=f.bool("add_pipeline_module"), compile_only=f.bool("compile_only"),
        tuner_file=f.mapping("tuner_file", str),
    )


def _check_pipeline(test: GoldenTest) -> GoldenTest:
    if test.add_pipeline_module and not test.pipeline_mlir:
        raise RunnerError("`add_pipeline_module` is true but there is no `pipeline_mlir`",
                          where=f"{test.path}: add_pipeline_module",
                          fix='add "pipeline_mlir": "<URL>" or drop add_pipeline_module')
    return test


def _quality_test(path: Path, raw: dict) -> GoldenTest:
    f = _Fields(raw, str(path))
    submodel, suffix = _split_name(path.stem)
    flags = f.strs("compiler_flags")
    backend = _backend(raw, suffix, flags, str(path))
    return _check_pipeline(GoldenTest(
        **_common(path, f), schema="quality", submodel=submodel, backend=backend,
        pipeline_compiler_flags=f.strs("pipeline_compiler_flags"),
        device=f.str("device", DEFAULT_DEVICES[backend]), compiler_flags=flags,
        threshold_args=f.strs("threshold_args"), run_function=f.str("run_function", "main"),
        run_test_expecting_to_fail=f.bool("run_test_expecting_to_fail"),
        compile_chip_expecting_to_fail=f.strs("compile_chip_expecting_to_fail"),
        extra={k: v for k, v in raw.items() if k not in QUALITY_FIELDS},
    ))


def _regression_tests(path: Path, raw: dict) -> list[GoldenTest]:
    f = _Fields(raw, str(path))
    common = _common(path, f)
    extra = {k: v for k, v in raw.items() if k not in REGRESSION_FIELDS}
    tests = []
    for backend in BACKENDS:
        if backend == "cpu" and f.bool("rocm_tests_only"):
            continue
        flags = (*f.strs(f"{backend}_compiler_flags"), *REGRESSION_TARGET_FLAGS[backend])
        pipeline_flags = flags if backend == "cpu" else (
            *f.strs("rocm_pipeline_compiler_flags"), *REGRESSION_TARGET_FLAGS["rocm"])
        tests.append(_check_pipeline(GoldenTest(
            **{**common, "tuner_file": common["tuner_file"] if backend == "rocm" else {}},
            schema="regression", submodel=path.stem, backend=backend,
            pipeline_compiler_flags=pipeline_flags, device=DEFAULT_DEVICES[backend],
            compiler_flags=flags, threshold_args=f.strs(f"{backend}_threshold_args"),
            run_function=f.str(f"run_{backend}_function", "main"),
            run_test_expecting_to_fail=f.bool(f"{backend}_run_test_expecting_to_fail"),
            compile_chip_expecting_to_fail=(f.strs("rocm_compile_chip_expecting_to_fail")
                                            if backend == "rocm" else ()),
            extra=extra,
        )))
    return tests


def load_benchmark_file(path: Path) -> BenchmarkTest:
    raw = _read_json(path)
    f = _Fields(raw, str(path))
    submodel, suffix = _split_name(path.stem)
    inputs = raw.get("inputs") or []
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        raise RunnerError("`inputs` must list tensor types like 1x64xi64",
                          where=f"{path}: inputs")
    backend = _backend(raw, suffix, f.strs("compile_flags"), str(path))
    known = {"inputs", "function_run", "benchmark_flags", "device", "golden_time_ms",
             "golden_time_tolerance_multiplier", "golden_dispatch", "golden_size"}
    return BenchmarkTest(
        path=path, model=path.resolve().parent.name, submodel=submodel, backend=backend,
        inputs=tuple(TensorSpec.parse(v, f"{path}: inputs[{i}]") for i, v in enumerate(inputs)),
        function=f.str("function_run", "main"), benchmark_flags=f.strs("benchmark_flags"),
        device=f.str("device", DEFAULT_DEVICES[backend]),
        golden_time_ms=f.mapping("golden_time_ms", (int, float)),
        golden_time_tolerance_multiplier=f.mapping("golden_time_tolerance_multiplier",
                                                   (int, float)),
        golden_dispatch=f.mapping("golden_dispatch", int),
        golden_size=f.mapping("golden_size", int),
        extra={k: v for k, v in raw.items() if k not in known},
    )


def find_test_files(paths: list[Path], model: str | None = None) -> list[Path]:
    """Files as given; a directory's `*.json`, or its `<model>/` subdirectory's with
    `--model` (so `quality_tests/` + `--model sdxl` works like `run_thresholds.py`)."""
    files: list[Path] = []
    for path in paths:
        if path.is_file():
            files.append(path)
            continue
        if not path.is_dir():
            raise RunnerError("no such file or directory", where=str(path))
        folder = path / model if model and (path / model).is_dir() else path
        found = sorted(folder.glob("*.json")) or sorted(folder.glob("*/*.json"))
        if not found:
            raise RunnerError("no test files (*.json) here", where=str(folder))
        files.extend(found)
    return files


def load_tests(paths: list[Path], *, model: str | None = None, submodel: str = "*",
               backend: str | None = None) -> list[GoldenTest]:
    """Every test in `paths`, filtered like `run_thresholds.py --model --submodel`."""
    if backend is not None and backend not in BACKENDS:
        raise RunnerError(f"unknown backend {backend!r}", where="--backend",
                          fix=f"use one of {', '.join(BACKENDS)}")
    tests = []
    for path in find_test_files(paths, model):
        for test in load_test_file(path):
            if model and test.model != model and not path.is_file():
                continue
            if not (fnmatch.fnmatchcase(test.submodel, submodel)
                    or fnmatch.fnmatchcase(f"{test.submodel}_{test.backend}", submodel)):
                continue
            if backend and test.backend != backend:
                continue
            tests.append(test)
    if not tests:
        raise RunnerError("no test matches the selection",
                          where=", ".join(str(p) for p in paths),
                          fix="check --model, --submodel and --backend")
    return tests
