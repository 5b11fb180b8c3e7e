"""Where scoring's files are found: MLPerf's FID statistics (`val2014.npz`), the FID
Inception weights and the CLIP weights, and anything else scoring reads from the cache.

One lookup for all of them, so a file is found in the same places whichever it is:
`$RUNNER_CACHE_DIR/<name>` first (where it is set), then the default cache
`~/.cache/iree-sdxl-runner/<name>`. A lab that keeps the files in a shared cache dir and one
that downloaded them into the home directory both work, and the path used is what scoring
prints and records. A profile names a cache file as the default cache's path
(`~/.cache/iree-sdxl-runner/mlperf/val2014.npz`), which is looked up the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.paths import CACHE_ENV, DEFAULT_CACHE

SCORING_SUBDIR = "mlperf"  # where scoring's downloaded files live inside a cache


def cache_roots() -> tuple[Path, ...]:
    """The caches a scoring file is looked up in, in order: `$RUNNER_CACHE_DIR` (when set),
    then `~/.cache/iree-sdxl-runner` (once, where both are the same directory)."""
    home = Path(DEFAULT_CACHE).expanduser()
    env = os.environ.get(CACHE_ENV)
    roots = [Path(env).expanduser(), home] if env else [home]
    unique: list[Path] = []
    for root in roots:
        if not any(os.path.abspath(root) == os.path.abspath(u) for u in unique):
            unique.append(root)
    return tuple(unique)


def scoring_file_places(name: str) -> tuple[Path, ...]:
    """Every path `find_scoring_file(name)` tries, in order (`name` is relative to a cache
    root, e.g. `mlperf/val2014.npz`)."""
    return tuple(root / name for root in cache_roots())


def find_scoring_file(name: str, what: str, where: str, fix: str) -> Path:
    """The first of `scoring_file_places(name)` that is a file: the one scoring uses. None
    there is bad input naming every place tried (`where`: the flag or profile field that
    asked; `fix`: how to get the file)."""
    places = scoring_file_places(name)
    for path in places:
        if path.is_file():
            return path
    tried = " then ".join(str(p) for p in places)
    raise BadInput(f"{what} not found: looked for {tried}", where=where,
                   fix=f"{fix}, or save it as {places[0]}")


def cache_file_name(value: str) -> str | None:
    """The cache-relative name a profile's path means when it is under the default cache
    (`~/.cache/iree-sdxl-runner/mlperf/val2014.npz` -> `mlperf/val2014.npz`); None for any
    other path, which is used as written."""
    prefix = DEFAULT_CACHE + "/"
    if not value.startswith(prefix):
        return None
    rest = value.removeprefix(prefix).strip("/")
    return rest if rest and ".." not in Path(rest).parts else None
