"""`runner goldens compare-steps`: each pipeline stage's own error, IREE against PyTorch.

The tiny pipeline runs stage by stage on IREE (clip, run_initialize, each UNet step, vae).
After each stage the PyTorch oracle runs the same stage on *IREE's inputs to it*, so every
number is that stage's error alone; nothing accumulates from earlier stages. A UNet step's
reference is the oracle's guided noise at that step's timestep followed by diffusers'
EulerDiscreteScheduler `step` (a fresh scheduler positioned at that index), not the
schedule baked into the exported module, so a wrong baked sigma or timestep shows up too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runner.goldens.thresholds import stats

# max_abs per stage (float32 tiny model). Measured on CPU: clip ~1e-6, UNet steps
# 2e-6..5e-5, vae ~1e-6; these leave ~10x headroom and still catch any real bug.
DEFAULT_TOLERANCE = {"clip": 1e-4, "unet_init": 1e-5, "unet_step": 5e-4, "vae": 1e-4}


@dataclass(frozen=True)
class StageError:
    stage: str
    max_abs: float
    mean_abs: float
    max_rel: float
    tolerance: float
    ref_max: float  # max |reference| for scale

    @property
    def over(self) -> bool:
        return not self.max_abs <= self.tolerance  # NaN counts as over

    def to_dict(self) -> dict:
        return {"stage": self.stage, "max_abs": self.max_abs, "mean_abs": self.mean_abs,
                "max_rel": self.max_rel, "tolerance": self.tolerance,
                "ref_max_abs": self.ref_max, "over": self.over}


@dataclass(frozen=True)
class StepsReport:
    """compare-steps' answer for one prompt: each stage's own error in pipeline order, so
    the first stage over its tolerance is where IREE's output first goes wrong."""

    profile: str
    prompt_id: int
    prompt: str
    stages: tuple[StageError, ...]

    @property
    def first_over(self) -> str | None:
        return next((s.stage for s in self.stages if s.over), None)

    def to_dict(self) -> dict:
        return {"profile": self.profile, "prompt_id": self.prompt_id, "prompt": self.prompt,
                "first_over_tolerance": self.first_over,
                "stages": [s.to_dict() for s in self.stages]}

    def table(self) -> str:
        lines = [f"per-stage error, IREE vs PyTorch on IREE's own inputs "
                 f"(profile {self.profile}, prompt {self.prompt_id})",
                 f"{'stage':<14}{'max_abs':>12}{'mean_abs':>12}{'max_rel':>12}"
                 f"{'tolerance':>12}{'|ref| max':>12}"]
        for s in self.stages:
            lines.append(f"{s.stage:<14}{s.max_abs:>12.3e}{s.mean_abs:>12.3e}"
                         f"{s.max_rel:>12.3e}{s.tolerance:>12.1e}{s.ref_max:>12.3g}"
                         + ("  OVER" if s.over else ""))
        first = self.first_over
        lines.append(f"first stage over tolerance: {first}" if first
                     else "every stage within tolerance")
        return "\n".join(lines)


def _stage(name: str, kind: str, pairs: list[tuple[np.ndarray, np.ndarray]],
           tolerance: float | None) -> StageError:
    """One row over all of a stage's outputs (clip has two)."""
    e = np.concatenate([np.asarray(r, np.float64).ravel() for r, _ in pairs])
    a = np.concatenate([np.asarray(x, np.float64).ravel() for _, x in pairs])
    s = stats(e, a)
    tol = DEFAULT_TOLERANCE[kind] if tolerance is None else tolerance
    return StageError(name, s["max_abs"], s["mean_abs"], s["max_rel"], tol,
                      float(np.abs(e).max()))


def compare_steps_commands(profile_name: str = "tiny", prompt_id: int = 0) -> list[str]:
    """What compare_steps would run (a dry run): its compiles, then the stages in-process."""
    from runner.base import shellscript
    from runner.config.profile import load_profile
    from runner.model.compiled_model import compile_model

    profile = load_profile(profile_name)
    compiled = compile_model(profile, 1, dry_run=True)
    return ["# compile (modules already in the cache are reused):",
            *[shellscript.join(c.command) for c in compiled.compiled],
            f"# then sample {prompt_id} through each stage, IREE against the PyTorch oracle, "
            "in this process"]


def compare_steps(profile_name: str = "tiny", prompt_id: int = 0,
                  tolerance: float | None = None) -> StepsReport:
    import torch

    from runner.config.mlperf_data import load_captions
    from runner.config.profile import load_profile
    from runner.model.compiled_model import compile_model
    from runner.model.export import tiny_model as tm
    from runner.model.export.oracle import TorchOracle
    from runner.model.pipeline.loader import open_pipeline

    profile = load_profile(profile_name)
    config = profile.model
    prompt = load_captions()[prompt_id]
    oracle = TorchOracle(config)
    rows = []
    with open_pipeline(compile_model(profile, 1)) as pipe:
        embeds, pooled = pipe.encode([prompt])
        ref_embeds, ref_pooled = oracle.encode([prompt])
        rows.append(_stage("clip", "clip", [(ref_embeds.numpy(), embeds),
                                            (ref_pooled.numpy(), pooled)], tolerance))
        sample, time_ids = pipe.initialize()
        sched = tm.scheduler(config.steps)
        ref_init = (oracle.latent * sched.init_noise_sigma).numpy()
        rows.append(_stage("unet_init", "unet_init", [(ref_init, sample)], tolerance))
        t_embeds, t_pooled = torch.from_numpy(embeds), torch.from_numpy(pooled)
        for i in range(config.steps):
            next_sample = pipe.step(sample, embeds, pooled, time_ids, i)
            # A fresh scheduler finds its step index from the timestep: stage-local.
            step_sched = tm.scheduler(config.steps)
            timestep = step_sched.timesteps[i]
            t_sample = torch.from_numpy(sample)
            noise = oracle.unet_step(t_sample, t_embeds, t_pooled, timestep, step_sched)
            ref = step_sched.step(noise, timestep, t_sample, return_dict=False)[0]
            rows.append(_stage(f"unet_step_{i:02d}", "unet_step",
                               [(ref.numpy(), next_sample)], tolerance))
            sample = next_sample
        image = pipe.decode(sample)
        ref_image = oracle.decode(torch.from_numpy(sample)).numpy()
        rows.append(_stage("vae", "vae", [(ref_image, image)], tolerance))
    return StepsReport(profile_name, prompt_id, prompt, tuple(rows))
