"""IREE CI's golden tests: read them, check them, regenerate, bump and upload their outputs.

- `testfile`: the quality- and regression-test JSON schemas -> `GoldenTest` (+ `BenchmarkTest`)
- `check`: compile through the cache, run in-process, compare (`check`, `run_test`, `plan`)
- `thresholds`: iree-run-module's `--expected_output` semantics, with worst elements
- `report`: JUnit XML, Markdown summary, results JSON
- `generate`, `versioning`, `upload`: v{n+1} blobs, JSON bumps, Azure uploads
- `steps`: per-stage IREE vs PyTorch error; `tiny_suite`: builds `goldens/tiny/`
- `cli`: `register(subparsers)` adds `runner goldens ...`
"""
