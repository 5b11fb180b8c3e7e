"""The lab profiles' checkpoint where they look for it, for tests that preview them."""

from __future__ import annotations

from pathlib import Path

# Where the lab profiles (mi300x, mi325x, mi355x, h100, sdxl-checkpoint) look for SDXL base.
LAB_CHECKPOINT = Path("models") / "stable-diffusion-xl-base-1.0"


def lab_home(root: Path, checkpoint: Path) -> Path:
    """A HOME under `root` where the lab profiles' checkpoint path (`~/models/...`) is
    `checkpoint`: their dry runs open it, as their runs would."""
    home = root / "home"
    (home / LAB_CHECKPOINT).parent.mkdir(parents=True, exist_ok=True)
    (home / LAB_CHECKPOINT).symlink_to(checkpoint)
    return home
