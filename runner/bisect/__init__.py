"""`runner bisect` and `runner trend`: which IREE build changed SDXL, and how it moves.

An IREE developer whose goldens or SDXL accuracy broke first asks which build did it.
IREE's own package bisect (build_tools/scripts/bisect/) answers with git bisect over
per-commit PkgCI packages judged by a script's exit code; this package answers with the
runner's own steps (compile, generate, score, compare) judged on what SDXL users care
about: image bytes, pixels, FID/CLIP, throughput, compile statistics, golden suites, or a
script's exit code as IREE's script does.

- builds.py: what a build is (`wheels:`, `commit:`, ...) and the candidates in a range;
- envs.py: one isolated, cached environment per build (a venv, or the harness image);
- probe.py: what runs inside a build's environment (compile, generate, statistics);
- judge.py: the test kinds and the verdict of one build against the good one;
- request.py: what bisect and trend are asked, from plain arguments, and `bisect(...)`;
- search.py: the bisection itself, resumable from its out dir; trend.py: every build;
- report.py: bisect.json/.md, trend.json/.md, report.html and reproduce.sh.
"""

from runner.base.lazy import lazy_exports

# The entry points, each imported from its module when first used.
_ENTRIES = {
    "bisect": "request",
    "run_bisection": "search",
    "BisectRequest": "search",
}
__getattr__ = lazy_exports(__name__, _ENTRIES)

__all__ = ["BisectRequest", "bisect", "builds", "cli", "envs", "judge", "ledger", "measure",
           "probe", "report", "request", "run_bisection", "search", "trend"]
