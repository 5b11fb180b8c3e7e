"""Tuning-spec A/B: the same stages compiled without and with a spec, both measured for
real; the final specs dumped into the out dir; a spec that does not parse refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_support import REPO

from runner.cli.main import main

SPEC = REPO / "goldens" / "tiny-bench" / "tiny_bmm_spec_cpu.mlir"
COMMON = ["--profile", "tiny", "--no-throughput", "--stage", "clip", "--repetitions", "2",
          "--min-time", "0.02s"]


@pytest.mark.slow
def test_ab_measures_both_arms_and_dumps_the_final_specs(tmp_path, capsys):
    out = tmp_path / "ab"
    assert main(["bench", *COMMON, "--ab-tuning-spec", str(SPEC), "--dump-tuning-specs",
                 "--out", str(out)]) == 0
    report = json.loads((out / "bench.json").read_text())
    ab = report["ab_tuning_spec"]
    assert ab["spec"] == str(SPEC)
    (row,) = ab["comparison"]
    assert row["stage"] == "clip" and row["batch_size"] == 1
    assert row["without_ms"] > 0 and row["with_ms"] > 0
    assert row["change"] == row["with_ms"] / row["without_ms"] - 1
    (without,), (with_spec,) = ab["without"], ab["with"]
    module = [a for a in without["command"].split() if a.startswith("--module=")]
    tuned = [a for a in with_spec["command"].split() if a.startswith("--module=")]
    assert module != tuned  # another compile, same inputs
    assert [a for a in without["command"].split() if a.startswith("--input=")] == \
        [a for a in with_spec["command"].split() if a.startswith("--input=")]
    # The tuned module was compiled with the spec: its cache record says so.
    record = json.loads(Path(tuned[0].split("=", 1)[1]).with_suffix(".json").read_text())
    assert f"--iree-codegen-tuning-spec-path={SPEC}" in record["command"]
    plain = json.loads(Path(module[0].split("=", 1)[1]).with_suffix(".json").read_text())
    assert not any("tuning-spec" in a for a in plain["command"])
    # Arm A is the profile itself here, so it also stands as the stage latency.
    assert report["stages"] == ab["without"]
    dumped = [Path(p) for p in report["tuning_specs_dumped"]]
    assert dumped and all(p.is_relative_to(out / "tuning-specs") for p in dumped)
    assert all("@match_bmm" in p.read_text() for p in dumped)
    md = (out / "bench.md").read_text()
    assert "## Tuning spec A/B" in md and "| 1 | clip | `clip.encode_prompts` |" in md


def test_unparsable_spec_is_refused_before_compiling(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_text("module { this is not a spec\n")
    assert main(["bench", *COMMON, "--ab-tuning-spec", str(bad), "--out",
                 str(tmp_path / "out")]) == 2
    assert "tuning spec does not parse" in capsys.readouterr().err
    assert not (tmp_path / "out" / "bench.json").exists()


def test_ab_dry_run_prints_both_arms(tmp_path, capsys):
    assert main(["bench", *COMMON, "--ab-tuning-spec", str(SPEC), "--dump-tuning-specs",
                 "--out", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    # Each run is printed with the worker's view in front (taskset/numactl, runner.config.layout).
    runs = [x for x in out.splitlines() if "iree-benchmark-module" in x.split()]
    assert len(runs) == 2 and runs[0] != runs[1]
    assert "--iree-codegen-dump-tuning-specs-to=" in out
    assert "--compile-to=executable-configurations" in out
    assert not (tmp_path / "bench.json").exists()
