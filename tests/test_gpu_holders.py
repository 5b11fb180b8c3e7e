"""Which processes hold GPU memory (runner/base/gpu_holders.py): each vendor tool's output
parsed, a leak named by the check, and the check skipped, saying so, where neither tool is
on PATH. The command path runs for real against a stand-in tool printing the fixtures (a
GPU cannot be had here); on a GPU machine it reads nvidia-smi or rocm-smi itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.base.errors import ToolFailed
from runner.base.gpu_holders import (
    MIB,
    GpuProcess,
    Snapshot,
    check_leaks,
    nvidia_processes,
    rocm_processes,
    snapshot,
)

FIXTURES = Path(__file__).parent / "fixtures" / "gpu_holders"


def test_nvidia_smi_csv_is_read_pid_by_pid():
    found = nvidia_processes((FIXTURES / "nvidia-smi-compute-apps.csv").read_text())
    assert found == [GpuProcess(1523411, 40962 * MIB), GpuProcess(1523417, 512 * MIB),
                     GpuProcess(1523420, None)]
    assert nvidia_processes((FIXTURES / "nvidia-smi-compute-apps-none.csv").read_text()) == []
    with pytest.raises(ToolFailed, match="no CSV header"):
        nvidia_processes("No devices were found\n")


def test_rocm_smi_showpids_is_read_pid_by_pid():
    found = rocm_processes((FIXTURES / "rocm-smi-showpids.txt").read_text())
    assert [(p.pid, p.used_bytes, p.name) for p in found] == [
        (2345617, 42949672960, "python3"), (2345622, 1073741824, "iree-benchmark-module"),
        (2345630, None, "pt_main_thread")]
    assert rocm_processes((FIXTURES / "rocm-smi-showpids-none.txt").read_text()) == []
    with pytest.raises(ToolFailed, match="no KFD process table"):
        rocm_processes("ERROR: GPU[0]\t: Unable to read\n")


def test_a_process_added_since_the_snapshot_is_a_leak():
    before = Snapshot("nvidia-smi", (GpuProcess(7, MIB),))
    after = Snapshot("nvidia-smi", (GpuProcess(7, MIB), GpuProcess(9, 40 * 1024 * MIB)))
    result = check_leaks(before, after)
    assert not result.ok and result.leaks == [GpuProcess(9, 40 * 1024 * MIB)]
    assert "pid 9: 40960 MiB" in "\n".join(result.lines())
    assert check_leaks(before, before).ok


def test_no_tool_means_skipped_with_a_note_not_passed_silently():
    none = snapshot(which=lambda name: None)
    assert none.tool is None and "no nvidia-smi, rocm-smi or amd-smi" in none.note
    result = check_leaks(Snapshot(None), none)
    assert result.ok and result.lines() == [none.note]


def _stand_in(tmp_path: Path, tool: str, fixture: str) -> dict[str, str]:
    """A `tool` on PATH that prints `fixture` (only PATH's directory: neither real tool)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / tool
    script.write_text(f"#!/bin/sh\ncat {FIXTURES / fixture}\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}


@pytest.mark.parametrize("tool, fixture, leaked", [
    ("nvidia-smi", "nvidia-smi-compute-apps.csv", "pid 1523417: 512 MiB"),
    ("rocm-smi", "rocm-smi-showpids.txt", "pid 2345622 (iree-benchmark-module): 1024 MiB"),
])
def test_the_command_runs_the_tool_and_names_each_leak(tmp_path, tool, fixture, leaked):
    env = _stand_in(tmp_path, tool, fixture)
    run = [sys.executable, "-m", "runner.base.gpu_holders"]
    shot = subprocess.run([*run, "snapshot"], env=env, capture_output=True, text=True,
                          check=True)
    taken = json.loads(shot.stdout)
    assert taken["tool"] == tool and len(taken["processes"]) == 3
    before = tmp_path / "before.json"
    taken["processes"] = [p for p in taken["processes"] if p["pid"] not in (1523417, 2345622)]
    before.write_text(json.dumps(taken))
    done = subprocess.run([*run, "check", str(before)], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 1 and leaked in done.stdout, done.stdout + done.stderr


def test_the_command_skips_with_a_note_where_no_tool_exists(tmp_path):
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    assert not any(Path(d, t).exists() for d in ("/usr/bin", "/bin")
                   for t in ("nvidia-smi", "rocm-smi", "amd-smi"))
    before = tmp_path / "before.json"
    before.write_text(json.dumps(Snapshot(None).to_dict()))
    done = subprocess.run([sys.executable, "-m", "runner.base.gpu_holders", "check",
                           str(before)], env=env, capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.startswith("skipped: no nvidia-smi, rocm-smi or amd-smi")
