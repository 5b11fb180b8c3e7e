"""The profile's `accuracy:` section beyond the two ranges, read and checked in one place.

    accuracy:
      fid: [low, high]              # inclusive; read by runner.config.profile
      clip: [low, high]
      backbones: pretrained         # or `seeded` (random weights of the same architectures)
      seed: 0                       # seeded backbones only
      fid_statistics: ~/.cache/iree-sdxl-runner/mlperf/val2014.npz
      samples: 0-4999               # the ids the ranges hold for (default: every caption)

`fid_statistics` may be `builtin:<path>` (inside the package's assets), `~/...`, absolute, or
relative to the profile file. A path under the default cache (`~/.cache/iree-sdxl-runner/...`,
as the SDXL profiles write MLPerf's `val2014.npz`) names a cache file: it is looked up under
`$RUNNER_CACHE_DIR` first, then there, as every scoring file is (runner.accuracy.files).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.accuracy.backbones import BACKBONE_MODES
from runner.accuracy.files import cache_file_name, find_scoring_file
from runner.accuracy.samples import parse_ids
from runner.base.errors import BadInput
from runner.base.paths import BUILTIN, builtin_path
from runner.config.profile import Profile


@dataclass(frozen=True)
class AccuracySettings:
    backbones: str
    seed: int
    fid_statistics: Path | None
    samples: tuple[int, ...] | None  # None: every caption row
    # The cache-relative name (`mlperf/val2014.npz`) where `fid_statistics` names a cache
    # file: found by `statistics_file`, in the caches' order.
    fid_statistics_cache: str | None = None

    @property
    def samples_text(self) -> str | None:
        from runner.accuracy.samples import format_ids

        return None if self.samples is None else format_ids(self.samples)


def statistics_file(settings: AccuracySettings, where: str) -> Path | None:
    """The FID statistics file scoring reads: the profile's path, or for a cache file the
    first cache holding it (none there is bad input naming each place looked)."""
    if settings.fid_statistics_cache is None:
        return settings.fid_statistics
    return find_scoring_file(settings.fid_statistics_cache, "FID statistics file", where,
                             "for SDXL, fetch MLPerf's val2014.npz (mlcommons/inference "
                             "text_to_image/tools)")


def resolve_asset_path(value: str, base: Path) -> Path:
    if value.startswith(BUILTIN):
        return builtin_path(value)
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def accuracy_settings(profile: Profile) -> AccuracySettings:
    raw = profile.accuracy.settings
    where = f"{profile.path}: accuracy"
    mode = raw.get("backbones", "pretrained")
    if mode not in BACKBONE_MODES:
        raise BadInput(f"`backbones` is {mode!r}", where=f"{where}.backbones",
                       fix=f"use one of {', '.join(BACKBONE_MODES)}")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BadInput(f"`seed` is {seed!r}", where=f"{where}.seed",
                       fix="use a non-negative integer")
    stats = raw.get("fid_statistics")
    if stats is not None and not isinstance(stats, str):
        raise BadInput("`fid_statistics` must be a path", where=f"{where}.fid_statistics",
                       fix="name an .npz of Inception statistics (`runner calibrate "
                       "--reference-run` writes one), or leave it out")
    samples = raw.get("samples")
    cached = None if stats is None else cache_file_name(stats)
    return AccuracySettings(
        backbones=mode, seed=seed,
        fid_statistics=None if stats is None else resolve_asset_path(stats, profile.path.parent),
        samples=None if samples is None else parse_ids(samples, where=f"{where}.samples"),
        fid_statistics_cache=cached)
