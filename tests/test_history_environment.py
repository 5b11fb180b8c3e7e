"""The environment each result keeps (runner.history.environment): read from the vendors'
tools (stand-ins on PATH printing their captured formats, tests/fixtures/gpu_info/ and
gpu_partition/), absent on a CPU machine, named in a change's explanation and marked on
the history's chart."""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from repo_support import REPO

from runner.history.changes import Change, detect
from runner.history.environment import Environment, capture_environment, module_hashes
from runner.history.judge import judge_changes
from runner.history.model import Metric, Result
from runner.history.render import chart
from runner.history.series import series_of

INFO = REPO / "tests" / "fixtures" / "gpu_info"
PARTITION = REPO / "tests" / "fixtures" / "gpu_partition"
NVIDIA = {"--query-gpu=driver_version,vbios_version --format=csv,noheader,nounits":
          INFO / "nvidia-smi-versions-h200.csv",
          "-q": INFO / "nvidia-smi-q-h200.txt",
          "--query-gpu=index,mig.mode.current --format=csv,noheader,nounits":
          PARTITION / "nvidia-smi-mig.csv"}
ROCM = {"--showdriverversion --showvbios --json": INFO / "rocm-smi-versions-mi325x.json",
        "--showcomputepartition --showmemorypartition --json":
        PARTITION / "rocm-smi-partition-cpx.json"}


def stand_in(bin_dir: Path, tool: str, answers: dict[str, Path]) -> None:
    """`tool` on PATH printing the captured output its arguments ask for; any other
    question it refuses as the tool does (exit 2), as an older driver refuses a field."""
    bin_dir.mkdir(exist_ok=True)
    table = {k: str(v) for k, v in answers.items()}
    script = bin_dir / tool
    script.write_text(f"#!{sys.executable}\nimport sys\ntable = {table!r}\n"
                      "path = table.get(' '.join(sys.argv[1:]))\n"
                      "if path is None:\n    sys.exit(2)\n"
                      "sys.stdout.write(open(path).read())\n")
    script.chmod(0o755)


def test_a_cpu_machine_records_its_kernel_and_every_gpu_field_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    env = capture_environment({"version": "0.9.0", "commit": None})
    assert env == Environment(kernel=platform.release(), runner_version="0.9.0")


def test_an_nvidia_machine_records_driver_cuda_vbios_and_mig(tmp_path, monkeypatch):
    stand_in(tmp_path / "bin", "nvidia-smi", NVIDIA)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    env = capture_environment()
    assert (env.gpu_driver, env.cuda_version) == ("550.127.05", "12.4")
    assert env.vbios == "96.00.A5.00.01,96.00.A5.00.02"  # one GPU on another revision
    assert env.compute_partition == "MIG disabled,MIG enabled"  # GPU 3 has MIG on
    assert env.rocm_version is None and env.memory_partition is None
    # a driver that refuses a field (exit 2) leaves what it would have said unknown
    stand_in(tmp_path / "bin", "nvidia-smi", {"-q": INFO / "nvidia-smi-q-h200.txt"})
    older = capture_environment()
    assert (older.gpu_driver, older.vbios, older.cuda_version) == (None, None, "12.4")


def test_a_rocm_machine_records_release_driver_vbios_and_partitions(tmp_path, monkeypatch):
    stand_in(tmp_path / "bin", "rocm-smi", ROCM)
    (tmp_path / "rocm" / ".info").mkdir(parents=True)
    (tmp_path / "rocm" / ".info" / "version").write_text("6.3.1-48\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    env = capture_environment()
    assert env == Environment(gpu_driver="6.10.5", rocm_version="6.3.1-48",
                              vbios="113-M3250101-100", compute_partition="CPX",
                              memory_partition="NPS4", kernel=platform.release())
    # a tool printing what cannot be read is no error: its fields stay unknown
    bad = tmp_path / "bad.json"
    bad.write_text("not json\n")
    stand_in(tmp_path / "bin", "rocm-smi", {k: bad for k in ROCM})
    assert capture_environment() == Environment(kernel=platform.release())


def test_module_hashes_are_the_manifests_and_a_hand_edited_record_reads_as_absent():
    manifest = {"compiled": {"compiled": [
        {"mlir": "/cache/mlir/unet.mlir", "vmfb_sha256": "a" * 64},
        {"mlir": "/cache/mlir/vae.mlir", "vmfb_sha256": ""},  # a dry run's: no hash
        {"mlir": "/cache/mlir/clip.mlir", "vmfb_sha256": "c" * 64}]}}
    assert module_hashes(manifest, "bs1: ") == {"bs1: unet": "a" * 64, "bs1: clip": "c" * 64}
    assert module_hashes({"compiled": "?"}) == {}
    assert Environment.from_dict({"gpu_driver": 550, "kernel": "6.8", "modules": [1]}) == (
        Environment(kernel="6.8"))
    assert Environment.from_dict("6.8") is None


# --- judged and drawn ----------------------------------------------------------------------


T0 = datetime(2026, 11, 1, 2, 0)


def night(i: int, value: float, build: str, env: Environment) -> Result:
    return Result(key=f"n{i}", command="bench goldens", out_dir=f"/runs/n{i}",
                  finished_at=T0 + timedelta(days=i), profile="mi325x", machine="lab-1",
                  device="rocm:gfx942", sku="mi325x", compiler_version=build,
                  runner_version="0.9.0", metrics=(Metric("time_ms", "t", value),),
                  environment=env)


BEFORE = Environment(gpu_driver="6.8.5", rocm_version="6.2.4", vbios="113-A", kernel="6.8",
                     modules={"unet": "a" * 64, "vae": "b" * 64})


def judged(after: Environment, build_after: str = "3.12.0", step: float = 0.3
           ) -> tuple[Change, list[Result]]:
    values = 100.0 * np.random.default_rng(5).normal(1.0, 0.01, 30)
    values[15:] *= 1 + step
    results = [night(i, float(v), "3.12.0" if i < 15 else build_after,
                     BEFORE if i < 15 else after) for i, v in enumerate(values)]
    (change,) = judge_changes(detect(series_of(results)[0]), [])
    return change, results


def test_a_driver_change_on_one_build_is_the_machines_and_named():
    change, _ = judged(replace(BEFORE, gpu_driver="6.10.5", rocm_version="6.3.1"))
    assert change.kind == "machine"
    assert change.reasons[1:] == ("the GPU driver changed with it: 6.8.5 -> 6.10.5",
                                  "the ROCm changed with it: 6.2.4 -> 6.3.1")


def test_modules_that_changed_under_the_same_iree_are_named():
    change, _ = judged(replace(BEFORE, modules={"unet": "f" * 64, "vae": "b" * 64}))
    assert change.kind == "machine"
    assert change.reasons[1:] == ("the compiled modules changed with it under the same IREE "
                                  "(3.12.0): unet (other flags or inputs)",)


def test_a_firmware_change_with_the_build_names_both_and_stays_unconfirmed():
    change, _ = judged(replace(BEFORE, vbios="113-B", modules={"unet": "f" * 64}), "3.13.0")
    assert change.kind == "unconfirmed"
    assert change.reasons == (
        "the VBIOS changed with it: 113-A -> 113-B",
        "the build changed as well (3.12.0 -> 3.13.0): a build and its environment changing "
        "together cannot be told apart without measuring both builds again on one machine",
        "not measured again yet: confirm it before it counts")  # new modules: a new IREE's
    faster, _ = judged(replace(BEFORE, kernel="6.11"), "3.13.0", step=-0.3)
    assert faster.kind == "improvement"
    assert faster.reasons[0] == "the kernel changed with it: 6.8 -> 6.11"


def test_the_chart_marks_where_the_environment_changed_and_from_what_to_what():
    change, results = judged(replace(BEFORE, gpu_driver="6.10.5", vbios="113-B",
                                     compute_partition="CPX"))
    drawn = chart(series_of(results)[0], [change])
    assert drawn.count('<g class="environment">') == 1
    assert ">GPU driver, VBIOS</text>" in drawn  # the partition was not known before
    assert ("<title>the GPU driver changed with it: 6.8.5 -&gt; 6.10.5; the VBIOS changed "
            "with it: 113-A -&gt; 113-B</title>") in drawn
    steady, same = judged(BEFORE)
    assert '<g class="environment">' not in chart(series_of(same)[0], [steady])


def test_a_recorded_environment_is_json_and_reads_back_the_same():
    env = replace(BEFORE, cuda_version=None, memory_partition="NPS1")
    assert Environment.from_dict(json.loads(json.dumps(env.to_dict()))) == env


def test_runner_history_names_a_driver_change_and_draws_it(tmp_path, capsys):
    from runner.cli.main import main
    from runner.history.store import open_store
    from runner.history.url import resolve

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    _, results = judged(replace(BEFORE, gpu_driver="6.10.5"))
    with open_store(resolve(url)) as store:
        assert store.add_all(results) == 30
    assert main(["history", "--results", url, "--out", str(tmp_path / "h"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    (change,) = shown["changes"]
    assert change["kind"] == "machine"
    assert "the GPU driver changed with it: 6.8.5 -> 6.10.5" in change["reasons"]
    assert shown["results"][-1]["environment"]["gpu_driver"] == "6.10.5"
    assert shown["results"][0]["environment"]["cuda_version"] is None  # absent, kept so
    md = (tmp_path / "h" / "history.md").read_text()
    assert "  - the GPU driver changed with it: 6.8.5 -&gt; 6.10.5\n" in md
    page = (tmp_path / "h" / "history.html").read_text()
    assert "the environment changed 1 time(s) (dotted)" in page
    assert page.count('<g class="environment">') == 1 and ">GPU driver</text>" in page
