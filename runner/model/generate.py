"""`runner generate`: one process, N prompts, images plus a manifest. The smallest whole run."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from runner.base import shellscript
from runner.base.fileio import atomic_write_json, sha256_bytes
from runner.base.provenance import host_info, iree_provenance
from runner.config.mlperf_data import load_captions
from runner.config.profile import Profile
from runner.model.compiled_model import compile_model
from runner.model.images import write_png
from runner.model.pipeline.loader import open_pipeline


@dataclass(frozen=True)
class GenerateResult:
    out: Path
    images: list[Path]
    seconds: float


def generate_commands(profile: Profile, sample_ids: list[int], out: Path) -> list[str]:
    """What `generate` would do (a dry run): its compiles, then the one in-process pass."""
    layout = profile.layout
    compiled = compile_model(profile, layout.batch_size, layout.vae_batch_size, dry_run=True)
    return ["# compile (modules already in the cache are reused):",
            *[shellscript.join(c.command) for c in compiled.compiled],
            f"# then {len(sample_ids)} prompts in batches of {layout.batch_size}, in this "
            f"process, -> {shellscript.sanitize(str(out))}/images/ and manifest.json"]


def generate(profile: Profile, sample_ids: list[int], out: Path) -> GenerateResult:
    captions = load_captions()
    prompts = [captions[i] for i in sample_ids]
    layout = profile.layout
    compiled = compile_model(profile, layout.batch_size, layout.vae_batch_size)
    written, samples = [], []
    with open_pipeline(compiled) as pipeline:
        start = time.perf_counter()
        for lo in range(0, len(sample_ids), layout.batch_size):
            ids = sample_ids[lo : lo + layout.batch_size]
            images = pipeline.generate(prompts[lo : lo + layout.batch_size])
            for qsl_idx, image in zip(ids, images, strict=True):
                path = out / "images" / f"{qsl_idx:05d}.png"
                write_png(path, image)
                written.append(path)
                samples.append({"qsl_idx": qsl_idx, "png": path.name,
                                "sha256": sha256_bytes(image.tobytes())})
            print(f"generated {len(written)}/{len(sample_ids)}", file=sys.stderr)
    seconds = time.perf_counter() - start
    atomic_write_json(out / "manifest.json", {
        "command": "generate", "profile": profile.name, "profile_config": profile.to_dict(),
        "model": compiled.to_dict(), "iree": iree_provenance(), "host": host_info(),
        "seconds": seconds, "stage_times": pipeline.times.to_dict(), "samples": samples,
    })
    return GenerateResult(out, written, seconds)
