"""Benchmark mode: what a layout delivers, what each stage costs, whether goldens still hold.

- `throughput`: layout sweeps, each a real run (runner/lifecycle.py); samples/s, per
  worker, overhead
- `stages`: per-stage latency by `iree-benchmark-module` on inputs from one pipeline pass
- `benchmark_module`: the tool's command lines and JSON output
- `dispatch_profile` (`--dispatches`): each stage's dispatches under IREE's HAL profiler;
  `ireeperf` decodes the profile, `dispatch_names` gives kinds and cross-build keys,
  `dispatch_trace` the Perfetto trace, `dispatch_diff` what moved between two profiles,
  `dispatch_report` their tables (bench.md, trend and bisect reports)
- `dispatch_replay` (`--dispatches` too): each stage's dispatches timed alone from a HAL
  replay of one call (`iree-benchmark-executable`), on drivers without the profiler as well
- `capability`: whether a mechanism works on a driver, learnt from what the tool does
- `goldens`: IREE CI's benchmark JSON schema (time, dispatch count, size) checked here
- `tuning`: tuning-spec A/B arms and dumps of the final specs
- `bench`: runs all of it into `bench.json`; `report`: `bench.md`
- `cli`: `register(subparsers)` adds `runner bench ...`
"""

from runner.base.lazy import lazy_exports

# The entry points, each imported from its module when first used.
_ENTRIES = {"run_bench": "bench", "plan_bench": "bench", "BenchOptions": "result",
            "BenchSettings": "stages"}
__getattr__ = lazy_exports(__name__, _ENTRIES)

__all__ = ["BenchOptions", "BenchSettings", "bench", "benchmark_module", "capability", "cli",
           "dispatch_diff", "dispatch_names", "dispatch_profile", "dispatch_replay",
           "dispatch_report", "dispatch_trace", "goldens", "ireeperf", "plan_bench",
           "report", "result", "run_bench", "stages", "sweep", "throughput", "tuning"]
