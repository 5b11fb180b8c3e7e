"""A `runner mlperf --mode submission` out dir in MLPerf's submission layout, and its check.

The layout is the one MLPerf's submission rules document for inference (what goes under
`<division>/<submitter>/`), for one system, SDXL and one scenario:

    systems/<system>.json
    measurements/<system>/stable-diffusion-xl/<Scenario>/{<system>_<impl>_<Scenario>.json,
                                                           README.md, user.conf}
    results/<system>/stable-diffusion-xl/<Scenario>/accuracy/{mlperf_log_summary.txt,
        mlperf_log_detail.txt, mlperf_log_accuracy.json, accuracy.txt}
    results/<system>/stable-diffusion-xl/<Scenario>/performance/run_1/{mlperf_log_summary.txt,
        mlperf_log_detail.txt}
    compliance/<system>/stable-diffusion-xl/<Scenario>/TEST01/{verify_accuracy.txt,
        verify_performance.txt, accuracy/mlperf_log_accuracy.json,
        performance/run_1/{mlperf_log_summary.txt, mlperf_log_detail.txt}}
    compliance/<system>/stable-diffusion-xl/<Scenario>/TEST04/{verify_performance.txt,
        performance/run_1/{mlperf_log_summary.txt, mlperf_log_detail.txt}}

`check_tree` checks a tree against that layout and the files' contents (each summary's
scenario and mode, the system description's fields), so the test of `write_tree` is a real
check: a missing or misplaced file is named.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from runner.fileio import atomic_write_json, atomic_write_text
from runner.loadgen.conf import MODEL
from runner.loadgen.logs import ACCURACY_LOG, DETAIL, SUMMARY, parse_summary

IMPLEMENTATION = "iree"
# The system description fields MLPerf's submission checker requires.
SYSTEM_FIELDS = (
    "division", "submitter", "status", "system_name", "system_type", "number_of_nodes",
    "host_processors_per_node", "host_processor_model_name", "host_processor_core_count",
    "host_memory_capacity", "host_storage_capacity", "accelerators_per_node",
    "accelerator_model_name", "accelerator_memory_capacity", "framework",
    "operating_system", "other_software_stack", "sw_notes")
MEASUREMENT_FIELDS = ("input_data_types", "retraining", "starting_weights_filename",
                      "weight_data_types", "weight_transformations")
LOGS = (SUMMARY, DETAIL)


def expected_files(system: str, scenario: str, compliance: tuple[str, ...]
                   ) -> dict[str, str]:
    """Relative path -> what must be there (LoadGen mode for summaries, else a note)."""
    results = f"results/{system}/{MODEL}/{scenario}"
    comp = f"compliance/{system}/{MODEL}/{scenario}"
    meas = f"measurements/{system}/{MODEL}/{scenario}"
    out = {
        f"systems/{system}.json": "system description",
        f"{meas}/{system}_{IMPLEMENTATION}_{scenario}.json": "measurements",
        f"{meas}/README.md": "how to reproduce",
        f"{meas}/user.conf": "LoadGen user.conf",
        f"{results}/accuracy/{SUMMARY}": "AccuracyOnly",
        f"{results}/accuracy/{DETAIL}": "log",
        f"{results}/accuracy/{ACCURACY_LOG}": "log",
        f"{results}/accuracy/accuracy.txt": "accuracy script output",
        f"{results}/performance/run_1/{SUMMARY}": "PerformanceOnly",
        f"{results}/performance/run_1/{DETAIL}": "log",
    }
    for test in compliance:
        out[f"{comp}/{test}/verify_performance.txt"] = "verification"
        out[f"{comp}/{test}/performance/run_1/{SUMMARY}"] = "PerformanceOnly"
        out[f"{comp}/{test}/performance/run_1/{DETAIL}"] = "log"
        if test == "TEST01":
            out[f"{comp}/{test}/verify_accuracy.txt"] = "verification"
            out[f"{comp}/{test}/accuracy/{ACCURACY_LOG}"] = "log"
    return out


def system_description(system: str, profile, host: dict[str, Any], iree: dict[str, Any]
                       ) -> dict[str, Any]:
    """What the runner knows; the fields only the submitter knows stay empty to fill in."""
    layout = profile.layout
    version = (iree.get("iree.runtime") or {}).get("version", "?")
    return {
        "division": "closed", "submitter": "", "status": "available", "system_name": system,
        "system_type": "datacenter", "number_of_nodes": 1, "host_processors_per_node": 1,
        "host_processor_model_name": "", "host_processor_core_count": 0,
        "host_memory_capacity": "", "host_storage_capacity": "",
        "accelerators_per_node": layout.gpus or len(layout.devices),
        "accelerator_model_name": profile.target.chip, "accelerator_memory_capacity": "",
        "framework": f"IREE {version}", "operating_system": host.get("platform", ""),
        "other_software_stack": f"iree-sdxl-runner, Python {host.get('python', '')}",
        "sw_notes": f"layout {json.dumps(layout.to_dict(), sort_keys=True)}",
    }


def _copy(src: Path, dst: Path) -> None:
    """A file the run did not produce (accuracy.txt of an unscored run) is left out; the
    tree's check then names it."""
    if src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def write_tree(root: Path, system: str, scenario: str, out: Path, compliance: tuple[str, ...],
               system_json: dict[str, Any], readme: str) -> list[str]:
    """Copies a submission out dir's logs into the layout under `root`; returns its files."""
    results = root / "results" / system / MODEL / scenario
    for name in (SUMMARY, DETAIL, ACCURACY_LOG, "accuracy.txt"):
        _copy(out / "accuracy" / name, results / "accuracy" / name)
    for name in LOGS:
        _copy(out / "performance" / name, results / "performance" / "run_1" / name)
    comp = root / "compliance" / system / MODEL / scenario
    for test in compliance:
        for name in LOGS:
            _copy(out / test / name, comp / test / "performance" / "run_1" / name)
        for verify in sorted((out / test).glob("verify_*.txt")):
            _copy(verify, comp / test / verify.name)
        if test == "TEST01":
            _copy(out / test / ACCURACY_LOG, comp / test / "accuracy" / ACCURACY_LOG)
    meas = root / "measurements" / system / MODEL / scenario
    _copy(out / "user.conf", meas / "user.conf")
    atomic_write_text(meas / "README.md", readme)
    atomic_write_json(meas / f"{system}_{IMPLEMENTATION}_{scenario}.json", {
        "input_data_types": "int32", "retraining": "No",
        "starting_weights_filename": "stabilityai/stable-diffusion-xl-base-1.0",
        "weight_data_types": "fp16", "weight_transformations": "IREE compile"})
    atomic_write_json(root / "systems" / f"{system}.json", system_json)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def check_tree(root: Path, system: str, scenario: str, compliance: tuple[str, ...]
               ) -> list[str]:
    """Problems with a tree against the documented layout; empty when it conforms."""
    problems = []
    for rel, what in expected_files(system, scenario, compliance).items():
        path = root / rel
        if not path.is_file():
            problems.append(f"missing {rel} ({what})")
        elif path.name == SUMMARY:
            summary = parse_summary(path)
            if summary.scenario != scenario:
                problems.append(f"{rel}: scenario {summary.scenario}, expected {scenario}")
            if summary.mode != what:
                problems.append(f"{rel}: mode {summary.mode}, expected {what}")
        elif rel.startswith("systems/"):
            absent = [f for f in SYSTEM_FIELDS if f not in json.loads(path.read_text())]
            if absent:
                problems.append(f"{rel}: no field(s) {', '.join(absent)}")
        elif rel.endswith(f"_{IMPLEMENTATION}_{scenario}.json"):
            absent = [f for f in MEASUREMENT_FIELDS if f not in json.loads(path.read_text())]
            if absent:
                problems.append(f"{rel}: no field(s) {', '.join(absent)}")
    return problems
