"""Accuracy commands: calibrate, compare, and the bad inputs that must exit 2 before (or
instead of) an hour of scoring."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("open_clip")

from cli_support import Ran, cli
from shared_work import copy_of

from runner.accuracy.backbones import load_backbones
from runner.accuracy.calibrate import (
    RECORD_NAME,
    SNIPPET_NAME,
    STATS_NAME,
    calibrate,
    write_profile_section,
)
from runner.accuracy.cli import register
from runner.accuracy.evaluate import evaluate_run
from runner.accuracy.frechet import FidStatistics, load_statistics
from runner.accuracy.score import (
    ScoreSettings,
    check_statistics_backbone,
    score_samples,
)
from runner.accuracy.settings import accuracy_settings
from runner.accuracy.verdict import judge, subset_label
from runner.base.errors import IncompleteRun, RunnerError
from runner.base.fileio import sha256_bytes
from runner.base.paths import CONFIGS_DIR
from runner.cli.main import main
from runner.config.mlperf_data import load_captions
from runner.config.profile import load_profile
from runner.model.images import write_png


def synthetic_images(seed: int, n: int, size: int = 128) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1)
    base = np.stack([xx, yy, 1 - xx], -1) * 200
    return np.stack([np.clip(base * rng.uniform(0.5, 1.2) + rng.normal(0, 15, base.shape), 0,
                             255) for _ in range(n)]).round().astype(np.uint8)


def write_generate_dir(path, ids, images, profile="tiny"):
    samples = []
    for i, img in zip(ids, images, strict=True):
        write_png(path / "images" / f"{i:05d}.png", img)
        samples.append({"qsl_idx": i, "png": f"{i:05d}.png",
                        "sha256": sha256_bytes(img.tobytes())})
    (path / "manifest.json").write_text(json.dumps({"profile": profile, "samples": samples}))
    return path


@pytest.fixture(scope="module")
def backbones():
    return load_backbones("seeded", 0)


# The tiny ranges were set for 32 samples: these 3 are a subset, scored and not judged.
SUBSET_IDS = [0, 1, 2]


def subset_images() -> np.ndarray:
    return synthetic_images(3, len(SUBSET_IDS))


@dataclass(frozen=True)
class ScoredSubset:
    run: Path  # a generate dir of subset_images(), scored (read only: tests copy it)
    cache: Path  # the $RUNNER_CACHE_DIR it was scored in: its Frechet distances are there
    ran: Ran  # what `runner score` gave
    record: dict  # its accuracy.json


@pytest.fixture(scope="module")
def scored_subset(tmp_path_factory) -> ScoredSubset:
    """`runner score` of subset_images() (0-2, tiny profile), once per module, in a cache of
    its own, so its Frechet distance to the tiny statistics is computed, not found (MLPerf's
    sqrtm and the eigh cross-check: about 21 s of one core's CPU on the 2-core VM,
    2026-11-29). The tests that score these images again score them in that cache: the same
    images give the same statistics, and the distance is found there."""
    tmp = tmp_path_factory.mktemp("subset")
    run = write_generate_dir(tmp / "few", SUBSET_IDS, subset_images())
    cache = tmp / "cache"
    ran = cli("score", run, "--torch-device", "cpu",
              env={**os.environ, "RUNNER_CACHE_DIR": str(cache)})
    return ScoredSubset(run, cache, ran, json.loads((run / "accuracy.json").read_text()))


def test_register_adds_the_subcommands():
    parser = argparse.ArgumentParser(prog="runner")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["score", "RUN", "--require-full", "--images-per-pass", "4",
                              "--torch-device", "cpu", "--log", "L", "--fid-weights", "F",
                              "--clip-weights", "C", "--profile", "sdxl"])
    assert (args.run_dir, args.require_full, args.images_per_pass, args.log) == (
        "RUN", True, 4, "L")
    args = parser.parse_args(["calibrate", "RUN", "--out", "D"])
    assert (args.fid_percent, args.clip_percent) == (2.0, 0.2)
    args = parser.parse_args(["compare", "A", "B", "--out", "cmp"])
    assert (args.run_a, args.run_b, args.out) == ("A", "B", "cmp")


@pytest.mark.slow
def test_calibrate_then_score_with_the_written_snippet(tmp_path, backbones):
    cal = write_generate_dir(tmp_path / "cal", [0, 1, 2, 3], synthetic_images(0, 4))
    ref = write_generate_dir(tmp_path / "ref", list(range(10, 18)), synthetic_images(1, 8))
    out = tmp_path / "calibration"
    result = calibrate(cal, out, reference_run=ref, fid_percent=5.0, clip_percent=0.5,
                       backbones=backbones, progress=False)
    assert result.fid_range == pytest.approx((result.fid * 0.95, result.fid * 1.05))
    lo, hi = result.clip_range
    assert hi - lo == pytest.approx(abs(result.clip) * 0.01)
    stats = load_statistics(out / STATS_NAME)
    assert stats.meta["samples"] == "10-17" and stats.meta["n"] == 8
    assert stats.meta["fid_fingerprint"] == backbones.info.fid_fingerprint
    snippet = yaml.safe_load((out / SNIPPET_NAME).read_text())["accuracy"]
    assert snippet["samples"] == "0-3" and snippet["backbones"] == "seeded"
    assert snippet["fid"] == list(result.fid_range)
    record = json.loads((out / RECORD_NAME).read_text())
    assert record["fid"] == result.fid and record["n"] == 4

    # A profile made of the snippet: its ranges and statistics are the calibration's, and
    # the known-good run's own scores pass (rescoring is exact: see test_accuracy_tiny).
    profile = tmp_path / "lab.yaml"
    profile.write_text(f"extends: {CONFIGS_DIR / 'tiny.yaml'}\nname: lab\n")
    write_profile_section(profile, (out / SNIPPET_NAME).read_text())
    lab = load_profile(str(profile))
    assert lab.accuracy.fid == result.fid_range and lab.accuracy.clip == result.clip_range
    settings = accuracy_settings(lab)
    assert settings.fid_statistics == out / STATS_NAME and settings.samples == (0, 1, 2, 3)
    assert judge(result.fid, result.clip, lab.accuracy).passed

    # A reference run that shares prompts with the calibrated run is refused (FID ~0).
    with pytest.raises(RunnerError, match="shares 4 samples"):
        calibrate(cal, tmp_path / "bad", reference_run=cal, backbones=backbones,
                  progress=False)


def test_write_profile_section_leaves_the_rest_of_the_file_alone(tmp_path):
    text = ("name: x\nmodel: builtin:tiny\n# Accuracy: old\naccuracy:\n  fid: [1, 2]\n"
            "  # comment\n\nlayout:\n  devices: '0'\n")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    write_profile_section(path, "# Accuracy: new\naccuracy:\n  fid: [3, 4]\n")
    assert path.read_text() == ("name: x\nmodel: builtin:tiny\n# Accuracy: new\naccuracy:\n"
                                "  fid: [3, 4]\nlayout:\n  devices: '0'\n")
    write_profile_section(path, "accuracy:\n  fid: [5, 6]\n")
    assert yaml.safe_load(path.read_text())["accuracy"] == {"fid": [5, 6]}
    assert yaml.safe_load(path.read_text())["layout"] == {"devices": "0"}


def test_compare_psnr_and_ssim_are_torchmetrics_own():
    """The numpy PSNR and SSIM `runner compare` computes (no torch on a GPU check's
    machine) against torchmetrics' functional ones, computed here on the same images:
    identical, one LSB, noise, a region inverted; a non-square size."""
    import torch
    from torchmetrics.functional.image import (
        peak_signal_noise_ratio,
        structural_similarity_index_measure,
    )

    from runner.accuracy.compare import _metrics

    a = synthetic_images(3, 4, 48)[:, :, :40]
    rng = np.random.default_rng(4)
    b = a.copy()
    b[1, 5, 7, 2] ^= 1
    b[2] = np.clip(a[2] + rng.normal(0, 9, a[2].shape), 0, 255).round().astype(np.uint8)
    b[3, :20] = 255 - b[3, :20]
    psnr, ssim = _metrics(a, b)
    ta = torch.from_numpy(a).permute(0, 3, 1, 2).double()
    tb = torch.from_numpy(b).permute(0, 3, 1, 2).double()
    ref_psnr = peak_signal_noise_ratio(tb, ta, data_range=255.0, reduction="none",
                                       dim=(1, 2, 3)).numpy()
    ref_ssim = structural_similarity_index_measure(tb, ta, data_range=255.0,
                                                   reduction="none")
    assert isinstance(ref_ssim, torch.Tensor)
    assert math.isinf(psnr[0]) and math.isinf(ref_psnr[0])
    # torchmetrics turns log base e into base 10 with a float32 constant (10 / log(tensor(10.))):
    # 4e-8 relative from the exact value.
    np.testing.assert_allclose(psnr[1:], ref_psnr[1:], rtol=1e-7)
    np.testing.assert_allclose(ssim, ref_ssim.numpy(), rtol=1e-10)
    assert ssim[0] == pytest.approx(1) and ssim[3] < ssim[2] < ssim[1] < 1


def test_compare_lists_the_images_that_moved(tmp_path, capsys):
    from torchmetrics.functional.image import peak_signal_noise_ratio

    images = synthetic_images(2, 5)
    moved = images.copy()
    moved[3, :10] = 255 - moved[3, :10]
    moved[1, 0, 0, 0] ^= 1
    a = write_generate_dir(tmp_path / "a", [0, 1, 2, 3, 4], images)
    b = write_generate_dir(tmp_path / "b", [1, 2, 3, 4, 5],
                           np.concatenate([moved[1:], images[:1]]))
    out = tmp_path / "cmp" / "compare.json"
    assert main(["compare", str(a), str(b), "--out", str(out.parent), "--worst", "2"]) == 0
    printed = capsys.readouterr().out
    assert "4 common samples, 2 identical" in printed
    record = json.loads(out.read_text())
    assert record["only_a"] == "0" and record["only_b"] == "5"
    assert [w["qsl_idx"] for w in record["worst"]] == [3, 1]
    per = {d["qsl_idx"]: d for d in record["per_image"]}
    assert per[2]["psnr"] is None and per[2]["identical"] and per[2]["ssim"] == pytest.approx(1)
    assert per[1]["max_abs"] == 1 and per[3]["ssim"] < per[1]["ssim"] < 1
    import torch

    expected = peak_signal_noise_ratio(torch.from_numpy(moved[3]).double(),
                                       torch.from_numpy(images[3]).double(), data_range=255.0)
    assert per[3]["psnr"] == pytest.approx(float(expected), rel=1e-7)  # float32 log 10
    assert math.isfinite(per[1]["psnr"]) and per[1]["psnr"] > 80


def test_bad_runs_exit_2_before_scoring(tmp_path, capsys):
    assert main(["score", str(tmp_path / "absent")]) == 2
    assert "run dir not found" in capsys.readouterr().err
    # Too few captions for the ids (MLPerf's file has 5000 rows: 0..4999).
    far = write_generate_dir(tmp_path / "far", [4999, 5000], synthetic_images(3, 2))
    assert main(["score", str(far)]) == 2
    assert "sample 5000 has no caption: the file has 5000 rows" in capsys.readouterr().err
    # SDXL without MLPerf's val2014 statistics.
    sdxl = write_generate_dir(tmp_path / "sdxl", [0, 1], synthetic_images(3, 2), "sdxl")
    assert main(["score", str(sdxl)]) == 2
    err = capsys.readouterr().err
    assert "FID statistics file not found" in err and "val2014.npz" in err


def test_old_spellings_name_the_new_ones(capsys):
    for argv, new in ((["score", "RUN", "--allow-subset"], "use no flag"),
                      (["score", "RUN", "--batch-size", "4"], "use --images-per-pass N")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert new in capsys.readouterr().err


@pytest.mark.slow
def test_a_subset_is_scored_labelled_and_not_judged(scored_subset, tmp_path, capsys,
                                                     monkeypatch):
    """3 samples where the tiny ranges were set for 32: scored, labelled, exit 0; with
    --require-full the same scores fail (exit 1), the same FID answered from the cache."""
    assert scored_subset.ran.returncode == 0, scored_subset.ran.stderr
    out = scored_subset.ran.stdout
    assert "verdict: SUBSET (not judged" in out and "(cached)" not in out
    assert "note: subset of 3: not judged against the full-set ranges" in out
    record = scored_subset.record
    assert record["verdict"] == "subset" and record["subset"] is True and record["n"] == 3
    assert record["frechet_cached"] is False
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(scored_subset.cache))
    few = copy_of(scored_subset.run, tmp_path / "few")
    assert main(["score", str(few), "--torch-device", "cpu", "--require-full"]) == 1
    out = capsys.readouterr().out
    assert "verdict: FAIL" in out and re.search(r"\+ Frechet [\d.]+s \(cached\);", out)
    again = json.loads((few / "accuracy.json").read_text())
    assert again["verdict"] == "fail" and again["frechet_cached"] is True
    for key in ("score", "cross_check"):
        assert again["fid"][key] == record["fid"][key]


@pytest.mark.slow
def test_allow_subset_scores_and_labels_an_incomplete_run_dir(tmp_path, backbones,
                                                             scored_subset, monkeypatch):
    """A `runner run` dir (run.json + PNG store) that asked for 0-3 but holds 0-2: the
    images of the generate dir scored_subset scored, so the same FID, found in its cache."""
    from runner.rundir.store import SampleStore

    monkeypatch.setenv("RUNNER_CACHE_DIR", str(scored_subset.cache))
    run = tmp_path / "run"
    store = SampleStore(run)
    for i, img in zip(SUBSET_IDS, subset_images(), strict=True):
        store.put(i, img, "w0", "cpu:0")
    (run / "run.json").write_text(json.dumps({"profile": "cpu", "sample_ids": [0, 1, 2, 3]}))
    with pytest.raises(IncompleteRun, match="1 of 4 requested samples are missing"):
        evaluate_run(run, backbones=backbones, progress=False)
    score = evaluate_run(run, allow_subset=True, backbones=backbones, progress=False)
    record = json.loads(score.json_path.read_text())
    assert record["profile"] == "cpu" and record["source"]["kind"] == "store"
    assert subset_label(3) in record["labels"] and record["subset"] is True
    assert record["comparable_with_mlperf"] is False and record["n"] == 3
    assert record["sample_ids"] == "0-2" and record["missing"] == "3"
    assert record["ranges_samples"] == "0-31"
    assert record["frechet_cached"] is True
    for key in ("score", "cross_check"):
        assert record["fid"][key] == scored_subset.record["fid"][key]
    # Synthetic images are far from the tiny model's, but a subset is not judged: exit 0.
    assert record["verdict"] == "subset" and score.verdict.exit_code == 0
    assert f"note: {subset_label(3)}" in score.verdict.lines()
    assert (run / "accuracy.txt").read_text().startswith("Accuracy Results: {'FID_SCORE': '")


@pytest.mark.slow
def test_bad_images_and_statistics_stop_scoring(tmp_path, backbones):
    small = write_generate_dir(tmp_path / "small", list(range(32)),
                               synthetic_images(4, 32, size=64))
    with pytest.raises(RunnerError, match="image is 64x64, expected 128x128"):
        evaluate_run(small, backbones=backbones, progress=False)
    captions = load_captions()
    nan = np.full((128, 128, 3), np.nan, np.float32)
    with pytest.raises(RunnerError, match="NaN/Inf"):
        score_samples([(0, nan)], captions, ScoreSettings(progress=False), backbones, None)
    stats = FidStatistics(np.zeros(2048), np.eye(2048), "other.npz", None,
                          {"fid_weights": "seeded:7", "fid_fingerprint": "0" * 64})
    with pytest.raises(RunnerError, match="computed with Inception seeded:7"):
        check_statistics_backbone(stats, backbones.info)
    pair = synthetic_images(6, 3)
    result = score_samples([(0, pair[0]), (1, pair[1]), (0, pair[2])], captions,
                           ScoreSettings(progress=False), backbones, None)
    assert (result.n, result.duplicates, result.sample_ids, result.fid) == (2, 1, (0, 1), None)
    with pytest.raises(RunnerError, match="FID needs at least 2"):
        score_samples([(0, synthetic_images(5, 1)[0])], captions,
                      ScoreSettings(progress=False), backbones, None)


# MLPerf's submission checker reads these from accuracy.txt (tools/submission/
# submission_checker/constants.py, stable-diffusion-xl) and marks a result with either
# missing invalid.
CHECKER_PATTERNS = {"FID": r".*'FID_SCORE':\s+'?([\d.]+).*",
                    "CLIP": r".*'CLIP_SCORE':\s+'?([\d.]+).*"}


@pytest.mark.slow
def test_one_metric_is_scored_and_judged_alone(tmp_path, backbones, capsys, scored_subset,
                                               monkeypatch):
    """`--metrics fid|clip`: that metric alone is scored, judged and reported; the exit code
    follows it only. Here FID's range admits anything and CLIP's nothing (100 x a cosine
    never reaches 1000), so FID alone passes, CLIP alone fails, both fail; and each metric
    scored alone gives the bits it gives scored beside the other, in the same run. The
    images are scored_subset's: FID alone is the FID both metrics gave there (found in its
    cache, as the statistics are the same)."""
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(scored_subset.cache))
    images = subset_images()
    run = write_generate_dir(tmp_path / "run", SUBSET_IDS, images)
    profile = tmp_path / "p.yaml"
    profile.write_text(f"extends: {CONFIGS_DIR / 'tiny.yaml'}\nname: p\naccuracy:\n"
                       "  samples: 0-2\n  fid: [0, 1.0e+12]\n  clip: [1000, 2000]\n")
    both = score_samples(enumerate(images), load_captions(), ScoreSettings(progress=False),
                         backbones, None)  # both metrics, no Frechet step: moments and CLIP

    fid = evaluate_run(run, profile=str(profile), backbones=backbones, progress=False,
                       metrics=("fid",))
    assert fid.verdict.passed and fid.verdict.exit_code == 0
    assert [c.metric for c in fid.verdict.checks] == ["FID"]
    assert np.array_equal(fid.result.mu, both.mu) and np.array_equal(fid.result.sigma,
                                                                      both.sigma)
    assert fid.result.clip is None
    assert fid.result.clip_per_sample == ()
    assert fid.result.frechet_cached and fid.result.fid == scored_subset.record["fid"]["score"]
    record = json.loads(fid.json_path.read_text())
    assert (record["metrics"], record["not_scored"], record["clip"]) == (["fid"], ["clip"], None)
    assert record["verdict"] == "pass" and record["comparable_with_mlperf"] is False
    label = ("CLIP not scored (--metrics fid): the verdict judges FID only; an MLPerf result "
             "needs both")
    assert label in record["labels"] and f"note: {label}" in fid.verdict.lines()
    # accuracy.txt: MLPerf's result dict with the one key computed; the checker finds FID,
    # and not CLIP, so it would reject this as an MLPerf result (it is not one).
    line = fid.txt_path.read_text()
    assert line == f"Accuracy Results: {{'FID_SCORE': '{fid.result.fid!r}'}}\n"
    assert float(re.match(CHECKER_PATTERNS["FID"], line).group(1)) == fid.result.fid
    assert re.match(CHECKER_PATTERNS["CLIP"], line) is None

    clip = evaluate_run(run, profile=str(profile), backbones=backbones, progress=False,
                        metrics=("clip",))
    assert not clip.verdict.passed and clip.verdict.exit_code == 1
    assert clip.result.clip_per_sample == both.clip_per_sample and clip.result.fid is None
    assert clip.result.mu is None and clip.verdict.not_scored == ("FID",)
    record = json.loads(clip.json_path.read_text())
    assert record["fid"] is None and record["not_scored"] == ["fid"]
    assert record["statistics"] == {"path": None, "sha256": None}  # FID's file: not read
    assert clip.txt_path.read_text() == \
        f"Accuracy Results: {{'CLIP_SCORE': '{clip.result.clip!r}'}}\n"
    # Both judged: the failing CLIP fails the verdict.
    verdict = judge(fid.result.fid, clip.result.clip, load_profile(str(profile)).accuracy)
    assert [c.passed for c in verdict.checks] == [True, False] and verdict.exit_code == 1

    # Through the CLI, the profile naming one range only: CLIP alone scores (seeded
    # backbones: only CLIP is built); both stop, naming the way out.
    clip_only = tmp_path / "clip-only.yaml"
    clip_only.write_text(f"extends: {profile}\nname: clip-only\naccuracy:\n  fid: null\n"
                         "  clip: [-1000, 1000]\n")
    assert main(["score", str(run), "--profile", str(clip_only), "--torch-device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "no accuracy range for fid" in err and "--metrics" in err
    assert main(["score", str(run), "--profile", str(clip_only), "--torch-device", "cpu",
                 "--metrics", "clip"]) == 0
    out = capsys.readouterr().out
    assert "verdict: PASS" in out and "note: FID not scored (--metrics clip)" in out
    record = json.loads((run / "accuracy.json").read_text())
    assert record["clip"]["score"] == clip.result.clip
    assert record["backbones"]["fid_weights"] is None  # no Inception was built
    assert main(["score", str(run), "--metrics", "fid,is"]) == 2
    assert "--metrics: metrics 'fid,is'" in capsys.readouterr().err
