"""`runner calibrate`: reference statistics and accuracy ranges from a known-good run.

MLPerf's ranges are its fp32 reference score -2%/+2% (FID) and -0.2%/+0.2% (CLIP):
23.48046692 x [0.98, 1.02] = [23.01085758, 23.95007626], 31.74981837 x [0.998, 1.002] =
[31.68631873, 31.81331801]. Calibration does the same for any sample set and backbone:
- FID statistics: `--reference-run` images' mu/sigma (the stand-in for COCO's val2014 when
  there are no real images, as for the tiny model), else the profile's existing statistics
  (e.g. val2014.npz, for a cheap SDXL subset such as 500 prompts);
- ranges: the known-good run's own scores against those statistics, +/- the percentages.
Writes `fid_statistics.npz` (with a reference run), `accuracy.yaml` (the profile snippet) and
`calibration.json` (everything it was computed from) into `--out`.

The tiny model's shipped files come from `reproduce_tiny_assets()` (`tiny_recipe()` lists the
equivalent commands).
"""

from __future__ import annotations

import contextlib
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runner.accuracy.backbones import Backbones
from runner.accuracy.evaluate import (
    ScorePlan,
    open_backbones,
    plan_scoring,
    reference_statistics,
    resolve_profile,
    run_scores,
    scoring_lines,
)
from runner.accuracy.frechet import FidStatistics, load_statistics, save_statistics
from runner.accuracy.samples import format_ids, open_source, parse_ids
from runner.accuracy.score import AccuracyResult
from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.base.paths import (
    ASSETS_DIR,
    CONFIGS_DIR,
    builtin_ref,
    checkout_dir,
    refuse_package_write,
)
from runner.config.mlperf_data import Captions, load_captions
from runner.config.profile import METRICS

STATS_NAME = "fid_statistics.npz"
SNIPPET_NAME = "accuracy.yaml"
RECORD_NAME = "calibration.json"
MLPERF_FID_PERCENT = 2.0
MLPERF_CLIP_PERCENT = 0.2

# The shipped tiny calibration (runner/assets/tiny/accuracy): the README's 32 prompts are the
# calibrated set; 256 other prompts' oracle images stand in for COCO's real images. The
# percentages come from measurements (that dir's README.md): the IREE run of qsl 0-31 sits
# far inside; guidance 7.9 instead of 8.0, or latent noise of std 0.001, already fall outside.
TINY_ACCURACY_DIR = ASSETS_DIR / "tiny" / "accuracy"
TINY_SAMPLES = "0-31"
TINY_REFERENCE_SAMPLES = "32-287"
TINY_FID_PERCENT = 2.0
TINY_CLIP_PERCENT = 0.05
TINY_BATCH = 1


@dataclass(frozen=True)
class Calibration:
    fid: float
    clip: float
    fid_range: tuple[float, float]
    clip_range: tuple[float, float]
    fid_percent: float
    clip_percent: float
    samples: str
    statistics: str  # path or builtin: reference as written into the snippet
    out: Path


def percent_range(value: float, percent: float) -> tuple[float, float]:
    """value -/+ percent of |value| (MLPerf's rule; |value| so a negative score from seeded
    backbones still gets low < high)."""
    if percent < 0:
        raise BadInput(f"percent {percent} is negative", fix="use a percentage >= 0")
    delta = abs(value) * percent / 100.0
    return (value - delta, value + delta)


def _plan(run_dir: Path, profile, captions, verify: bool = True):
    # The calibrated set is whatever the run holds; only completeness is checked.
    return plan_scoring(open_source(Path(run_dir), verify=verify), profile, captions,
                        allow_subset=False, check_ranges_set=False)


def _prepare(run_dir: Path, profile: str | None, reference_run: Path | None,
             verify: bool = True):
    """The profile, captions and the plans of the calibrated run and the reference run,
    checked before anything is scored."""
    source = open_source(Path(run_dir), verify=verify)
    prof = resolve_profile(source, profile)
    captions = load_captions(*([source.captions] if source.captions else []))
    probe = _plan(run_dir, prof, captions, verify)
    ref_plan = None if reference_run is None else _plan(reference_run, prof, captions, verify)
    if ref_plan is not None and set(ref_plan.ids) & set(probe.ids):
        raise BadInput(f"the reference run shares {len(set(ref_plan.ids) & set(probe.ids))} "
                       "samples with the calibrated run", where=str(reference_run),
                       fix="use disjoint prompts: identical images make FID ~0")
    return prof, captions, probe, ref_plan


def calibrate_plan(run_dir: Path, out: Path, *, profile: str | None = None,
                   reference_run: Path | None = None, fid_percent: float = MLPERF_FID_PERCENT,
                   clip_percent: float = MLPERF_CLIP_PERCENT, fid_weights=None,
                   clip_weights=None) -> list[str]:
    """What `runner calibrate --dry-run` prints: its inputs checked as `calibrate` checks
    them, then what it would score and write."""
    _, _, probe, ref_plan = _prepare(run_dir, profile, reference_run, verify=False)
    lines = scoring_lines(probe, METRICS, fid_weights, clip_weights)
    written = [out / SNIPPET_NAME, out / RECORD_NAME]
    if ref_plan is not None:
        lines.append(f"# FID reference statistics from {len(ref_plan.ids)} samples of "
                     f"{ref_plan.source.location}")
        written.insert(0, out / STATS_NAME)
    else:
        lines.append(f"# FID reference statistics: {reference_statistics(probe).path}")
    lines.append(f"# ranges: FID +/- {fid_percent:g}%, CLIP +/- {clip_percent:g}% of its scores")
    return [*lines, f"# would write {', '.join(map(str, written))}"]


def _new_statistics(ref_plan: ScorePlan, backbones: Backbones, captions: Captions, path: Path,
                    source: str,
                    batch_size: int, progress: bool) -> tuple[FidStatistics, dict[str, Any]]:
    """FID reference statistics of the reference run's images, written to `path` with what
    they came from (the Inception's fingerprint among it, which scoring checks), and read
    back as any statistics file is."""
    ref_result = run_scores(ref_plan, backbones, captions, None, batch_size, progress)
    stats_meta = {
        "written_by": "runner calibrate", "source": source,
        "samples": format_ids(ref_result.sample_ids), "n": ref_result.n,
        "fid_weights": backbones.info.fid_weights,
        "fid_fingerprint": backbones.info.fid_fingerprint,
        "backbones": backbones.info.label,
    }
    assert ref_result.mu is not None and ref_result.sigma is not None  # FID was scored
    save_statistics(path, ref_result.mu, ref_result.sigma, stats_meta)
    return load_statistics(path), stats_meta


def _accuracy_section(backbones: Backbones, stats_ref: str, samples: str,
                      fid_range: tuple[float, float], clip_range: tuple[float, float]
                      ) -> dict[str, Any]:
    """The profile's `accuracy:` section: the ranges, and everything they hold only with
    (the backbones, the reference statistics, the samples scored)."""
    return {
        "backbones": backbones.info.mode,
        **({"seed": backbones.info.seed} if backbones.info.mode == "seeded" else {}),
        "fid_statistics": stats_ref,
        "samples": samples,
        "fid": list(fid_range),
        "clip": list(clip_range),
    }


def _snippet(section: dict[str, Any], run_label: str, result: AccuracyResult,
             fid_percent: float, clip_percent: float, backbones: Backbones,
             notes: tuple[str, ...]) -> str:
    """The profile's `accuracy:` section as YAML, under comment lines that say what its
    ranges were calibrated on and how wide they are, so a reader of the profile can tell
    where its numbers came from."""
    header = (f"# Calibrated by `runner calibrate` on {run_label} ({result.n} samples):\n"
              f"# FID {result.fid!r} +/- {fid_percent}%, CLIP {result.clip!r} +/- "
              f"{clip_percent}%.\n")
    if backbones.info.mode == "seeded":
        header += f"# {backbones.info.label}.\n"
    header += "".join(f"# {line}\n" for line in notes)
    return header + yaml.safe_dump({"accuracy": section}, sort_keys=False,
                                   default_flow_style=None, width=100)


def calibrate(run_dir: Path, out: Path, *, profile: str | None = None,
              reference_run: Path | None = None, fid_percent: float = MLPERF_FID_PERCENT,
              clip_percent: float = MLPERF_CLIP_PERCENT, fid_weights=None, clip_weights=None,
              batch_size: int = 1, device: str = "cpu", progress: bool = True,
              command: list[str] | None = None, backbones: Backbones | None = None,
              source_label: str | None = None, reference_label: str | None = None,
              notes: tuple[str, ...] = ()) -> Calibration:
    """`source_label` / `reference_label` name the runs in the written files instead of their
    (temporary) paths; `notes` become extra comment lines of the snippet."""
    out = Path(out)
    prof, captions, probe, ref_plan = _prepare(run_dir, profile, reference_run)
    backbones = backbones or open_backbones(probe, fid_weights, clip_weights, device)
    if ref_plan is not None:
        stats_path = out / STATS_NAME
        reference, stats_meta = _new_statistics(ref_plan, backbones, captions, stats_path,
                                                reference_label or str(reference_run),
                                                batch_size, progress)
    else:
        reference, stats_meta = reference_statistics(probe), {}
        assert reference.path is not None  # statistics read from a file record it
        stats_path = Path(reference.path)
    result = run_scores(probe, backbones, captions, reference, batch_size, progress)
    # A calibration scores both metrics: it writes both ranges and the FID statistics.
    assert result.fid is not None and result.clip is not None
    fid_range = percent_range(result.fid, fid_percent)
    clip_range = percent_range(result.clip, clip_percent)
    samples = format_ids(result.sample_ids)
    stats_ref = builtin_ref(stats_path)
    section = _accuracy_section(backbones, stats_ref, samples, fid_range, clip_range)
    run_label = source_label or str(run_dir)
    atomic_write_text(out / SNIPPET_NAME, _snippet(section, run_label, result, fid_percent,
                                                   clip_percent, backbones, notes))
    atomic_write_json(out / RECORD_NAME, {
        "command": command, "run": run_label,
        "reference_run": reference_label or (reference_run and str(reference_run)),
        "profile": prof.name, "samples": samples, "n": result.n,
        "fid": result.fid, "clip": result.clip,
        "fid_frechet": result.frechet and result.frechet.method,
        "fid_cross_check": result.frechet_check and result.frechet_check.value,
        "fid_percent": fid_percent, "clip_percent": clip_percent,
        "fid_range": list(fid_range), "clip_range": list(clip_range),
        "statistics": {"path": stats_ref, "sha256": reference.sha256, "meta": stats_meta},
        "backbones": backbones.info.to_dict(),
        "clip_per_sample": dict(zip(map(str, result.sample_ids), result.clip_per_sample,
                                    strict=True)),
    })
    return Calibration(result.fid, result.clip, fid_range, clip_range, fid_percent,
                       clip_percent, samples, stats_ref, out)


def write_profile_section(profile_yaml: Path, snippet: str) -> None:
    """Replaces the top-level `accuracy:` block of a profile YAML, and the comment lines right
    above it (its documentation), with `snippet`; every other line stays as it was."""
    lines = Path(profile_yaml).read_text(encoding="utf-8").splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("accuracy:")), None)
    if start is None:
        kept, tail = lines, []
    else:
        end = start + 1
        while end < len(lines) and (lines[end].startswith((" ", "\t", "#")) or
                                    not lines[end].strip()):
            end += 1
        while start > 0 and lines[start - 1].startswith("#"):
            start -= 1
        kept, tail = lines[:start], lines[end:]
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    atomic_write_text(Path(profile_yaml), "".join(kept) + snippet + "".join(tail))


def tiny_recipe(work: Path, out: Path = TINY_ACCURACY_DIR) -> list[list[str]]:
    """The commands that regenerate the shipped tiny calibration, in order."""
    cal, ref = str(work / "oracle-calibration"), str(work / "oracle-reference")
    checkout = checkout_dir()
    if checkout is not None:
        with contextlib.suppress(ValueError):
            out = Path(out).resolve().relative_to(checkout)
    return [
        ["runner", "oracle", cal, "--samples", TINY_SAMPLES],
        ["runner", "oracle", ref, "--samples", TINY_REFERENCE_SAMPLES],
        ["runner", "calibrate", cal, "--reference-run", ref, "--out", str(out),
         "--fid-percent", str(TINY_FID_PERCENT), "--clip-percent", str(TINY_CLIP_PERCENT),
         "--batch-size", str(TINY_BATCH)],
    ]


def reproduce_tiny_assets(out: Path = TINY_ACCURACY_DIR, work: Path | None = None,
                          progress: bool = True, update_profile: bool = True) -> Calibration:
    """Runs `tiny_recipe` in-process (oracle images, then calibrate), then rewrites the
    `accuracy:` section of configs/tiny.yaml from the result. `work` keeps the oracle runs
    (and reuses them when present). The shipped files are a checkout's: an installed
    package is never written to (refused before anything runs)."""
    from runner.accuracy.oracle_runs import oracle_run
    from runner.config.profile import load_profile

    refuse_package_write(out, "reproduce_tiny_assets: out")
    if update_profile:
        refuse_package_write(CONFIGS_DIR / "tiny.yaml", "reproduce_tiny_assets: update_profile")

    profile = load_profile("tiny")
    with tempfile.TemporaryDirectory(prefix="tiny-calibration-") as tmp:
        work = Path(work) if work else Path(tmp)
        recipe = tiny_recipe(Path("<work>"), out)
        cal, ref = work / "oracle-calibration", work / "oracle-reference"
        if not (cal / "manifest.json").is_file():
            oracle_run(cal, profile, list(parse_ids(TINY_SAMPLES)), progress=progress)
        if not (ref / "manifest.json").is_file():
            oracle_run(ref, profile, list(parse_ids(TINY_REFERENCE_SAMPLES)), progress=progress)
        result = calibrate(
            cal, out, profile="tiny", reference_run=ref, fid_percent=TINY_FID_PERCENT,
            clip_percent=TINY_CLIP_PERCENT, batch_size=TINY_BATCH, progress=progress,
            command=[shlex.join(c) for c in recipe],
            source_label=f"the tiny oracle's images of qsl {TINY_SAMPLES}",
            reference_label=f"the tiny oracle's images of qsl {TINY_REFERENCE_SAMPLES}",
            notes=("Reproduce: python -c 'from runner.accuracy.calibrate import "
                   "reproduce_tiny_assets as r; r()'",
                   "(oracle images, then calibrate; rewrites this section of configs/tiny.yaml)"))
    if update_profile:
        write_profile_section(CONFIGS_DIR / "tiny.yaml",
                              (out / SNIPPET_NAME).read_text(encoding="utf-8"))
    return result
