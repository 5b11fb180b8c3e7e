"""Every shipped profile does the work it names, end to end: each one, retargeted to llvm-cpu
with `--set` and pointed at a small diffusers-format checkpoint written here (the tiny model
saved as diffusers saves SDXL, so the same exporter and code path as real SDXL), goes through
plan, compile, run, bench, a short LoadGen test and bench goldens, and each step must have
measured something: samples, images per second, stage milliseconds, a verdict. A lab path
that measures nothing (a bench of skipped layouts, a run of 32 of 5000 samples ending SUBSET,
goldens all UNCHECKED) fails here.

Cost: the profiles resolve to two exports (a VAE decoding in fp32, and the lab SKUs' fp16
one) and five modules, exported and compiled on demand by the first profile that needs them
and shared through the runner's caches by the rest (and by later sessions); each profile then
runs one worker, two samples per command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_support import cli
from shared_work import once

pytest.importorskip("iree.turbine")

from runner.base.paths import CONFIGS_DIR
from runner.batch.cli import PLAN_READS, RUN_READS
from runner.bench.cli import GOLDENS_READS
from runner.config.overrides import profile_overrides
from runner.config.profile import load_profile
from runner.config.reads import ProfileReads, fields_set

pytestmark = pytest.mark.slow

SHIPPED = ("cpu", "h100", "h100-seeded", "mi300x", "mi325x", "mi355x", "sdxl",
           "sdxl-checkpoint", "sdxl-seeded", "tiny")
# Retargeted to llvm-cpu on one device at batch 1: the GPU codegen flags (submodel_flags)
# mean nothing to llvm-cpu and are left out, and the text encoders and UNet export in fp32
# (llvm-cpu emulates fp16 arithmetic: the fp16 UNet takes 5 s a step here, ten times fp32's),
# while each profile's VAE precision stays its own. Profiles of one model then share modules.
RETARGET = ("target.backend=cpu", "target.chip=host", "target.submodel_flags={}",
            "layout.gpus=null", "layout.partition=null", "layout.devices=0", "layout.cpd=1",
            "layout.batch_size=1")


@pytest.fixture(scope="session")
def checkpoint(small_checkpoint) -> Path:
    return small_checkpoint


def _sets(checkpoint: Path, reads: ProfileReads = RUN_READS) -> list[str]:
    """The retargeting `--set`s, those of fields `reads` names (a command refuses others)."""
    out = []
    for item in (f"model=checkpoint:{checkpoint}", "model.dtype=fp32", *RETARGET):
        if set(fields_set(profile_overrides([item]))) <= set(reads.read()):
            out += ["--set", item]
    return out


def test_the_matrix_covers_every_shipped_profile():
    assert tuple(sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))) == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_profile_measures_what_it_names(name, checkpoint, tmp_path, tmp_path_factory):
    sets = ["--profile", name, *_sets(checkpoint)]
    profile = load_profile(name, profile_overrides(sets[3::2]))
    # an export is found by its content: an earlier session's copy of the checkpoint is its
    assert profile.target.backend == "cpu" and profile.model.source.startswith("checkpoint:")

    plan = cli("plan", "--profile", name, *_sets(checkpoint, PLAN_READS), "--json")
    assert plan.returncode == 0, plan.stderr
    assert len(json.loads(plan.stdout)["workers"]) == 1

    # compile exports the checkpoint on demand (once per model shape, shared by the session)
    with once(tmp_path_factory, f"matrix-export-{profile.model.vae_dtype}"):
        compiled = cli("compile", *sets, "--out", tmp_path / "compile")
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    assert len(re.findall(r"_bs1\.mlir \[bs1\]", compiled.stdout)) == 4, compiled.stdout

    run = cli("run", *sets, "--count", "2", "--no-score", "--out", tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    rate = re.search(r"^2 samples in [\d.]+s \(([\d.]+) samples/s\)", run.stdout, re.M)
    assert rate and float(rate.group(1)) > 0, run.stdout
    assert "PASS" not in run.stdout
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["sample_ids"] == [0, 1]
    [stats_file] = (tmp_path / "run" / "workers").glob("*.stats.json")
    stats = json.loads(stats_file.read_text())
    assert stats["samples"] == 2
    assert all(v["seconds"] > 0 and v["calls"] > 0 for v in stats["stage_times"].values())

    bench = cli("bench", *sets, "--count", "2", "--stage", "vae", "--repetitions", "2",
                "--min-time", "0.02s", "--out", tmp_path / "bench")
    assert bench.returncode == 0, bench.stderr[-3000:]
    report = json.loads((tmp_path / "bench" / "bench.json").read_text())
    [layout] = report["layouts"]
    assert layout["status"] == "ok" and layout["samples"] == 2
    assert layout["samples_per_s"] > 0
    assert all(ms > 0 for w in layout["per_worker"] for ms in w["stage_ms"].values())
    [stage] = report["stages"]
    assert stage["stage"] == "vae" and stage["latency_ms"]["mean_ms"] > 0

    lg = cli("mlperf", *sets, "--scenario", "offline", "--mode", "accuracy", "--count", "2",
             "--no-score", "--out", tmp_path / "mlperf")
    assert lg.returncode == 0, lg.stderr[-3000:]
    record = json.loads((tmp_path / "mlperf" / "results.json").read_text())
    assert record["status"] == "NOT JUDGED"  # ran, unscored: never PASS
    assert "**PASS**" not in (tmp_path / "mlperf" / "summary.md").read_text()
    [test] = record["tests"]
    assert test["sut"]["completed"] == 2

    sku = profile.target.golden_sku
    goldens = cli("bench", "goldens", "--profile", name, *_sets(checkpoint, GOLDENS_READS),
                  "--repetitions", "2", "--min-time", "0.02s")
    if sku == "cpu":  # this host's goldens: measured and judged
        assert goldens.returncode in (0, 1), goldens.stderr[-3000:]
        assert re.findall(r"^(PASSED|FAILED) ", goldens.stdout, re.M), goldens.stdout
        assert "UNCHECKED" not in goldens.stdout
    else:  # a lab SKU: no goldens here for it, which is an error naming --sku
        assert goldens.returncode == 2
        assert f"--sku: none of the 3 benchmark file(s) has goldens for sku {sku}" in \
            goldens.stderr, goldens.stderr
