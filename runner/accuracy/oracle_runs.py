"""Known-good (and deliberately broken) runs of the tiny model from its PyTorch oracle.

The tiny model's accuracy ranges are calibrated on oracle images, and a gate is only worth
something if it fails a broken pipeline, so the same writer can perturb the oracle: another
guidance scale, or noise added to the fixed initial latent. Output is a generate dir
(`manifest.json` + `images/`), which `runner score`, `compare` and `calibrate` all read.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from runner.accuracy.samples import format_ids
from runner.base.errors import BadInput, ToolFailed
from runner.base.fileio import atomic_write_json, sha256_bytes
from runner.config.mlperf_data import load_captions
from runner.config.profile import Profile
from runner.model.images import write_png


@dataclass(frozen=True)
class Perturbation:
    guidance_scale: float | None = None  # None: the model's own (8.0)
    latent_noise: float = 0.0  # std of Gaussian noise added to the fixed latent
    noise_seed: int = 0

    @property
    def is_none(self) -> bool:
        return self.guidance_scale is None and self.latent_noise == 0.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check_oracle(profile: Profile) -> None:
    """The oracle runs the tiny model, in PyTorch: both checked before any work."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise ToolFailed("the PyTorch oracle needs the [export] extra: no torch",
                         fix="pip install -e '.[export]'")
    if profile.model.name != "tiny-sdxl":
        raise BadInput(f"the oracle runs the tiny model only, not {profile.model.name}",
                       where="--profile", fix="use the tiny or cpu profile")


def oracle_plan(out: Path, profile: Profile, sample_ids: list[int],
                perturbation: Perturbation = Perturbation()) -> list[str]:
    """What `runner oracle --dry-run` prints: its inputs checked as `oracle_run` checks
    them, then what it would generate and write."""
    _check_oracle(profile)
    how = []
    if perturbation.guidance_scale is not None:
        how.append(f"guidance {perturbation.guidance_scale:g}")
    if perturbation.latent_noise:
        how.append(f"latent noise {perturbation.latent_noise:g}, seed {perturbation.noise_seed}")
    return [f"# oracle: {len(sample_ids)} images ({format_ids(sample_ids)}) of "
            f"{profile.model.name} from its PyTorch pipeline, one prompt at a time"
            + (f", perturbed: {'; '.join(how)}" if how else ""),
            f"# would write {Path(out) / 'images'}/NNNNN.png and {Path(out) / 'manifest.json'}"]


def make_oracle(profile: Profile, perturbation: Perturbation = Perturbation()):
    _check_oracle(profile)
    try:
        import torch

        from runner.model.export.oracle import TorchOracle
    except ImportError as e:
        raise ToolFailed(f"the PyTorch oracle needs the [export] extra: {e}",
                         fix="pip install -e '.[export]'") from e
    oracle = TorchOracle(profile.model)
    if perturbation.guidance_scale is not None:
        oracle.config = dataclasses.replace(oracle.config,
                                            guidance_scale=perturbation.guidance_scale)
    if perturbation.latent_noise:
        gen = torch.Generator().manual_seed(perturbation.noise_seed)
        oracle.latent = oracle.latent + perturbation.latent_noise * torch.randn(
            oracle.latent.shape, generator=gen)
    return oracle


def oracle_run(out: Path, profile: Profile, sample_ids: list[int],
               perturbation: Perturbation = Perturbation(), progress: bool = True) -> Path:
    """One prompt at a time (batch 1, as the README's IREE run), one PNG per sample."""
    captions = load_captions()
    prompts = [captions[i] for i in sample_ids]
    oracle = make_oracle(profile, perturbation)
    out = Path(out)
    start = time.perf_counter()
    samples = []
    for n, (qsl_idx, prompt) in enumerate(zip(sample_ids, prompts, strict=True), 1):
        image = oracle.generate([prompt])[0]
        write_png(out / "images" / f"{qsl_idx:05d}.png", image)
        samples.append({"qsl_idx": qsl_idx, "png": f"{qsl_idx:05d}.png",
                        "sha256": sha256_bytes(image.tobytes())})
        if progress and (n % 16 == 0 or n == len(sample_ids)):
            print(f"oracle: {n}/{len(sample_ids)} images", file=sys.stderr, flush=True)
    atomic_write_json(out / "manifest.json", {
        "command": "oracle", "profile": profile.name, "samples": samples,
        "sample_ids": format_ids(sample_ids), "perturbation": perturbation.to_dict(),
        "seconds": time.perf_counter() - start,
    })
    return out
