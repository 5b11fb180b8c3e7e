"""The systems JSON (runner/loadgen/system.py): what this machine tells, what the profile
gives, and every field the round requires filled or named before anything runs. The vendor
tools (rocm-smi, nvidia-smi) cannot run here: their parsers get the tools' documented
output formats, and the code path around them runs for real (absent tool: nothing
detected)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from runner.base.errors import RunnerError
from runner.config.profile import load_profile
from runner.loadgen.rules import V6_1
from runner.loadgen.submission import VIEWABLE_CHARS, truncate_accuracy_log
from runner.loadgen.system import (
    accelerator_facts,
    describe_system,
    host_facts,
    measurements,
    nvidia_facts,
    rocm_facts,
)

IREE = {"iree.compiler": {"version": "3.13.0", "commit": "abc"},
        "iree.runtime": {"version": "3.13.0", "commit": "abc"}}
RUNNER = {"version": "0.1.0", "commit": "f" * 40, "dirty": False}


def describe(profile, tmp_path, **kw):
    return describe_system(V6_1, profile, kw.get("division", "closed"),
                           kw.get("submitter", "Demo"), 1, tmp_path, IREE, RUNNER)


def test_host_facts_are_this_machines(tmp_path):
    facts = host_facts(tmp_path)
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    if model:
        assert facts["host_processor_model_name"] == model.group(1).strip()
    mem_kb = int(re.search(r"^MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text(),
                           re.M).group(1))
    value, unit = facts["host_memory_capacity"].split()
    assert abs(float(value) * {"GiB": 2 ** 30, "TiB": 2 ** 40, "MiB": 2 ** 20}[unit]
               - mem_kb * 1024) / (mem_kb * 1024) < 0.05
    assert 1 <= facts["host_processor_core_count"] <= (os.cpu_count() or 1) * 512
    assert facts["operating_system"].endswith(os.uname().release)
    assert facts["host_storage_capacity"].split()[1] in ("MB", "GB", "TB")


def test_cpu_backend_has_no_accelerator_and_a_gpu_profile_counts_its_layout():
    cpu = accelerator_facts(load_profile("tiny"))
    assert cpu["accelerators_per_node"] == "0" and cpu["accelerator_model_name"] == "N/A"
    gpu = accelerator_facts(load_profile("mi325x"))  # no rocm-smi here: the layout's count
    assert gpu == {"accelerators_per_node": 8}


def test_vendor_tool_output_is_read():
    nvidia = nvidia_facts("NVIDIA H100 80GB HBM3, 81559 MiB, 1980 MHz\n"
                              "NVIDIA H100 80GB HBM3, 81559 MiB, 1980 MHz\n")
    assert nvidia == {"accelerator_model_name": "NVIDIA H100 80GB HBM3",
                      "accelerator_memory_capacity": "81559 MiB",
                      "accelerator_frequency": "1980 MHz", "gpus_seen": 2}
    rocm = rocm_facts(json.dumps({
        "card0": {"Card series": "AMD Instinct MI325X", "Card model": "0x74a5",
                  "VRAM Total Memory (B)": str(256 * 2 ** 30)},
        "card1": {"Card series": "AMD Instinct MI325X"}, "system": {"Driver version": "6"}}))
    assert rocm == {"accelerator_model_name": "AMD Instinct MI325X",
                    "accelerator_memory_capacity": "256 GB", "gpus_seen": 2}
    assert rocm_facts("not json") == {} == nvidia_facts("")


def test_every_field_is_filled_and_its_source_recorded(tmp_path):
    system = describe(load_profile("tiny"), tmp_path)
    assert system.id == "tiny-cpu"
    assert list(system.fields) == list(V6_1.system_fields)
    assert all(v not in ("", None) for v in system.fields.values())
    assert system.sources["host_processor_core_count"] == "detected"
    assert system.sources["cooling"] == "profile" and system.sources["framework"] == "runner"
    assert system.fields["framework"].startswith("IREE 3.13.0")
    assert "iree-sdxl-runner 0.1.0 (ffffffffffff)" in system.fields["other_software_stack"]


def test_a_given_value_wins_over_a_detected_one(tmp_path):
    profile = load_profile("tiny", {"mlperf.system.host_processor_model_name": "2x Given CPU"})
    system = describe(profile, tmp_path)
    assert system.fields["host_processor_model_name"] == "2x Given CPU"
    assert system.sources["host_processor_model_name"] == "profile"


def test_missing_fields_are_named_all_at_once(tmp_path):
    profile = load_profile("mi300x", {"mlperf.system": {"id": "lab"}})
    with pytest.raises(RunnerError) as e:
        describe(profile, tmp_path)
    text = str(e.value)
    for field in ("cooling", "system_type", "accelerator_interconnect", "system_name",
                  "host_networking", "accelerator_model_name"):
        assert field in text
    missing = text.split("detects: ")[1].split("\n")[0]
    assert "host_memory_capacity" not in missing  # /proc/meminfo tells it


@pytest.mark.parametrize(("override", "message"), [
    ({"mlperf.system.colling": "air"}, "does not know: colling"),
    ({"mlperf.system.submitter": "X"}, "is set from the command"),
    ({"mlperf.system.system_type": "cloud"}, "system_type 'cloud'"),
    ({"mlperf.system.status": "soon"}, "status 'soon'"),
    ({"mlperf.system.id": "a b"}, "not a plain name"),
])
def test_bad_system_sections_are_named(tmp_path, override, message):
    with pytest.raises(RunnerError, match=message):
        describe(load_profile("tiny", override), tmp_path)


def test_bad_division_and_a_legacy_string_system(tmp_path):
    with pytest.raises(RunnerError, match="unknown division"):
        describe(load_profile("tiny"), tmp_path, division="closd")
    legacy = load_profile("tiny", {"mlperf.system": "lab-1"})
    assert legacy.mlperf.system_id == "lab-1"
    with pytest.raises(RunnerError, match="lacks"):
        describe(legacy, tmp_path)


def test_measurements_are_the_models_precision():
    assert measurements(load_profile("tiny"))["weight_data_types"] == "fp32"
    sdxl = measurements(load_profile("sdxl"))
    assert sdxl["weight_data_types"] == "fp16"
    assert "https://" in sdxl["starting_weights_filename"]  # fetched: named by URL
    ckpt = measurements(load_profile("sdxl-checkpoint", {
        "model": "checkpoint:/nonexistent/stable-diffusion-xl-base-1.0"}))
    assert ckpt["starting_weights_filename"] == (
        "diffusers checkpoint stable-diffusion-xl-base-1.0 (not on this machine)")


def test_truncation_keeps_a_short_log_whole_and_cuts_a_long_one(tmp_path):
    short, long_ = tmp_path / "short.json", tmp_path / "long.json"
    short.write_text("[]")
    long_.write_text("[" + "x" * 3 * VIEWABLE_CHARS + "]")
    for full in (short, long_):
        dst, txt = tmp_path / f"{full.stem}.out", tmp_path / f"{full.stem}.txt"
        digest = truncate_accuracy_log(full, dst, txt)
        assert txt.read_text() == f"\nhash={digest}\n"
        text = full.read_text()
        assert dst.read_text() == (text if len(text) < VIEWABLE_CHARS else
                                   f"{text[:VIEWABLE_CHARS]}\n\n...\n\n{text[-VIEWABLE_CHARS:]}")
