"""IREE CI's golden tests: read them, check them, regenerate, bump and upload their outputs.

- `testfile`: every layout (older quality/regression schemas, torch_models with `type`,
  `markers` and shared `modules/`) -> one `GoldenTest` model (+ `BenchmarkTest`)
- `fields`: the fields IREE CI's own runners read, per layout (unknown ones are warnings),
  and the iree-test-suites commit the conformance was checked against
- `select`: pytest-style `--marker`/`-k` expressions, BACKEND/ROCM_CHIP/SKU
- `plan`: artifacts resolved, flags completed, modules compiled through the cache (shared
  with `runner bench goldens`)
- `check`: run in-process and compare (or through the real iree-run-module, with the
  arguments IREE CI's runner builds, when the test needs what the in-process run cannot do),
  compile statistics against their goldens
- `random_weights`: `weights` of `type: random`, generated as IREE CI's runner does
- `thresholds`: iree-run-module's `--expected_output` semantics, with worst elements
- `report`: JUnit XML, Markdown summary, results JSON
- `generate`, `versioning`, `upload`: v{n+1} blobs, JSON bumps, Azure uploads
- `steps`: per-stage IREE vs PyTorch error; `tiny_suite`: builds `goldens/tiny{,-torch}/`
- `cli`: `register(subparsers)` adds `runner goldens ...`
"""

__all__ = ["check", "cli", "fields", "generate", "plan", "random_weights", "report",
           "result", "select", "steps", "testfile", "thresholds", "tiny_suite", "upload",
           "versioning"]
