"""Where things live: the cache, the shipped assets, the repo's configs and MLPerf data."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
ASSETS_DIR = PACKAGE_DIR / "assets"
REPO_DIR = PACKAGE_DIR.parent
CONFIGS_DIR = REPO_DIR / "configs"
MLPERF_DATA_DIR = ASSETS_DIR / "mlperf"


def cache_dir() -> Path:
    """`$RUNNER_CACHE_DIR`, default `~/.cache/iree-sdxl-runner`, created on first use."""
    root = os.environ.get("RUNNER_CACHE_DIR") or str(Path.home() / ".cache" / "iree-sdxl-runner")
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path
