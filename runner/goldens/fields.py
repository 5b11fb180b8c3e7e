"""The fields IREE CI's own runners read, layout by layout, so that a field they do not read is
reported (a warning; a failure under `--strict`) instead of being filed away in silence.

Checked against iree-org/iree-test-suites at `IREE_TEST_SUITES_COMMIT`:
- torch_models (`pytest_iree/test_base.py`, `quality_test.py`, `benchmark_test.py`,
  `compstat_test.py`, `module.py`): what each test `type` reads;
- sharktank_models quality tests (`quality_tests/model_quality_run.py`) and benchmarks
  (`benchmarks/model_benchmark_run.py`);
- the older regression schema, read by `test_model_threshold.py` under `run_thresholds.py`
  (removed from iree-test-suites in a8791d2; last present in its parent,
  `REGRESSION_COMMIT`).

`docs/` carries the full table: each field, IREE's semantics with the line it comes from, this
runner's, and the test that proves they match.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

IREE_TEST_SUITES_COMMIT = "612f93663b32ea86ea442e87be549f1056a5de1c"
REGRESSION_COMMIT = "a8791d2622caccdade1d7a37e2c6a96491928020^"

# torch_models: every test reads `type` (conftest.py) and `markers` (test_base.py).
TORCH_COMMON = frozenset({"type", "markers"})
_RUN = frozenset({"modules", "weights", "inputs", "outputs", "expected_outputs", "run_args"})
TORCH_BY_KIND = {
    "quality": _RUN,
    "benchmark": _RUN | {"golden_time_ms", "tolerance_factor"},
    "compstat": frozenset({"module", "golden_dispatch_count", "golden_binary_size"}),
}
TORCH_ANY_KIND = frozenset().union(*TORCH_BY_KIND.values()) | TORCH_COMMON
TORCH_WEIGHT = {"url": frozenset({"type", "scope", "url"}),
                "random": frozenset({"type", "scope", "module", "seed"})}
TORCH_ARGSPEC = frozenset({"url", "value"})
# A `modules/<name>.json`: IREE reads `mlir` and `compiler_flags`; `type` ("git-lfs", MLIR in
# the repository) is an extension this runner reads (iree-test-suites bd4363c, never merged).
TORCH_MODULE = frozenset({"mlir", "compiler_flags"})
RUNNER_MODULE_EXTENSIONS = frozenset({"type"})

QUALITY = frozenset({
    "mlir", "inputs", "outputs", "real_weights", "custom_real_weights_group", "pipeline_mlir",
    "pipeline_compiler_flags", "add_pipeline_module", "device", "compiler_flags",
    "threshold_args", "run_function", "compile_only", "run_test_expecting_to_fail",
    "compile_chip_expecting_to_fail", "tuner_file",
})
REGRESSION = frozenset({
    "mlir", "inputs", "outputs", "real_weights", "pipeline_mlir", "add_pipeline_module",
    "cpu_compiler_flags", "rocm_compiler_flags", "rocm_pipeline_compiler_flags",
    "cpu_threshold_args", "rocm_threshold_args", "run_cpu_function", "run_rocm_function",
    "cpu_run_test_expecting_to_fail", "rocm_run_test_expecting_to_fail", "rocm_tests_only",
    "rocm_compile_chip_expecting_to_fail", "compile_only", "tuner_file",
})
TENSOR_ENTRY = frozenset({"source", "value"})  # an older layout's inputs[] / outputs[]
BENCHMARK = frozenset({
    "inputs", "function_run", "benchmark_repetitions", "benchmark_min_warmup_time",
    "golden_time_tolerance_multiplier", "golden_time_ms", "golden_dispatch", "golden_size",
    "specific_chip_to_ignore", "real_weights_file_name", "compilation_required",
    "compiled_file_name", "mlir_file_name", "modules", "device", "compile_flags",
    "benchmark_flags",
})
# Read by IREE's benchmark runner and never used (model_benchmark_run.py): known, no effect.
BENCHMARK_UNUSED = frozenset({"benchmark_repetitions", "benchmark_min_warmup_time"})
# This runner's own extension: where an older benchmark's quality test lives.
RUNNER_BENCHMARK_EXTENSIONS = frozenset({"quality_test"})


def unknown(raw: Mapping[str, Any], known: frozenset[str], where: str, reader: str,
            other_kinds: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """One message per field of `raw` that `reader` does not read. `other_kinds`: fields
    the reader knows for another test type (so the message says it is ignored here)."""
    out = []
    for key in sorted(k for k in raw if k not in known):
        why = (f"{reader} reads it only for another test type" if key in other_kinds
               else f"not a field {reader} reads")
        out.append(f"{where}: unknown field `{key}` ({why}; it has no effect)")
    return tuple(out)
