"""The preflight a run passes before its first batch (runner/preflight/): every check on real
files and a real worker environment; the GPU facts from the tools' output formats
(tests/fixtures/gpu_partition/, tests/fixtures/gpu_holders/), the one boundary a CPU machine
cannot have."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_support import cli
from docker_support import docker_client, project_snapshot, wheels_image  # noqa: F401
from repo_support import REPO

from runner.accuracy.backbones import FID_WEIGHTS
from runner.base.errors import RunnerError
from runner.batch.docker_executor import DockerExecutor
from runner.batch.executors import LocalExecutor
from runner.batch.run import plan_for
from runner.config.profile import load_profile
from runner.preflight.check import CheckState, Preflight, PreflightCheck
from runner.preflight.disk import disk_check, image_bytes
from runner.preflight.files import scoring_checks
from runner.preflight.gpus import amd_partitions, gpu_checks, nvidia_mig, rocm_partitions
from runner.preflight.worker_env import worker_env_check

FIXTURES = REPO / "tests" / "fixtures"
PARTITION = FIXTURES / "gpu_partition"
HOLDERS = FIXTURES / "gpu_holders"
SEEDED_SDXL = ("--set", "model=seeded:sdxl")


def tools(outputs: dict[str, Path]):
    """`which` and `run` for the preflight's GPU checks: each tool named in `outputs`
    prints that captured file, as the tool itself would on a GPU node."""
    def which(name: str) -> str | None:
        return f"/usr/bin/{name}" if any(k.split()[0] == name for k in outputs) else None

    def run(argv, **_kw) -> subprocess.CompletedProcess:
        for key, path in outputs.items():
            if all(word in argv for word in key.split()):
                return subprocess.CompletedProcess(argv, 0, path.read_text(), "")
        # as a tool without that option (an older release) answers
        return subprocess.CompletedProcess(argv, 2, "", f"unrecognized arguments: {argv[1:]}")
    return which, run


def mi325x_checks(rocm_smi: str | None = None, amd_smi: str | None = None, busy: bool = False,
                  placed: bool = False, share: bool = False, **layout: str
                  ) -> list[PreflightCheck]:
    """The GPU checks of the mi325x profile's plan (its layout with `layout` overridden) on
    an AMD node whose tools print captured output: rocm-smi's partitions in `rocm_smi` mode
    and amd-smi's in `amd_smi` mode (each tool there only where its mode is named), its
    processes (`busy`: three hold GPU memory, `placed`: rocm-smi also tells their devices)."""
    outputs = {"rocm-smi --showpids": HOLDERS / ("rocm-smi-showpids.txt" if busy else
                                                 "rocm-smi-showpids-none.txt")}
    if rocm_smi:
        outputs["rocm-smi --showcomputepartition"] = (PARTITION /
                                                      f"rocm-smi-partition-{rocm_smi}.json")
    if amd_smi:
        outputs["amd-smi static --partition"] = (PARTITION /
                                                 f"amd-smi-static-partition-{amd_smi}.json")
    if placed:
        outputs["rocm-smi --showpidgpus"] = HOLDERS / "rocm-smi-showpidgpus.txt"
    profile = load_profile("mi325x")
    if layout:
        profile = dataclasses.replace(profile, layout=profile.layout.with_overrides(**layout))
    return gpu_checks(plan_for(profile), share, *tools(outputs))


def states(checks: list[PreflightCheck]) -> dict[str, CheckState]:
    return {c.what: c.state for c in checks}


# --- the GPU facts --------------------------------------------------------------------------
def test_rocm_partitions_read_every_card_and_na_as_unknown():
    cards = rocm_partitions((PARTITION / "rocm-smi-partition-cpx.json").read_text())
    assert len(cards) == 64
    assert [c.compute for c in cards[:9]] == ["CPX", *[None] * 7, "CPX"]
    assert cards[8].memory == "NPS4"


def test_amd_smi_partitions_read_a_bare_list_and_the_gpu_data_envelope():
    cards = amd_partitions((PARTITION / "amd-smi-static-partition-cpx.json").read_text())
    assert len(cards) == 64
    assert [c.compute for c in cards[:9]] == ["CPX", *[None] * 7, "CPX"]
    assert cards[8].memory == "NPS4"
    spx = amd_partitions((PARTITION / "amd-smi-static-partition-spx.json").read_text())
    assert {(c.compute, c.memory) for c in spx} == {("SPX", "NPS1")} and len(spx) == 8
    with pytest.raises(RunnerError, match="amd-smi listed no GPU's partition"):
        amd_partitions('{"gpu_data": []}')


def test_amd_smi_is_preferred_over_rocm_smi_where_both_are_on_path():
    """rocm-smi says SPX, amd-smi CPX: the CPX layout passes, so amd-smi was read."""
    check = mi325x_checks(rocm_smi="spx", amd_smi="cpx")[0]
    assert check.state is CheckState.OK, check
    assert check.where == "amd-smi"
    assert "64 device ID(s) of 64 in CPX compute mode, memory NPS4" in check.detail


def test_an_spx_node_as_amd_smi_lists_it_refuses_a_cpx_layout():
    check = mi325x_checks(amd_smi="spx")[0]
    assert check.state is CheckState.FAILED
    assert "the GPUs are in SPX mode; the layout assumes CPX" in check.detail


def test_nvidia_mig_reads_enabled_and_na():
    assert [c.compute for c in nvidia_mig((PARTITION / "nvidia-smi-mig.csv").read_text())][2:5] \
        == ["DISABLED", "ENABLED", "DISABLED"]
    assert {c.compute for c in nvidia_mig((PARTITION / "nvidia-smi-mig-na.csv").read_text())} \
        == {None}


def test_cpx_node_with_no_gpu_process_passes_the_mi325x_layout():
    checks = mi325x_checks(rocm_smi="cpx")
    assert states(checks) == {"GPUs": CheckState.OK, "GPU processes": CheckState.OK}
    assert "64 device ID(s) of 64 in CPX compute mode, memory NPS4" in checks[0].detail


def test_a_node_in_spx_refuses_a_cpx_layout_with_the_command_that_sets_it():
    check = mi325x_checks(rocm_smi="spx")[0]
    assert check.state is CheckState.FAILED
    assert "the GPUs are in SPX mode; the layout assumes CPX" in check.detail
    assert check.where == "layout.partition"
    assert "rocm-smi --setcomputepartition CPX" in check.fix and "--partition spx" in check.fix


def test_the_same_spx_node_passes_an_spx_layout():
    assert mi325x_checks(rocm_smi="spx", partition="spx")[0].state is CheckState.OK


def test_busy_gpus_refuse_naming_the_processes_unless_shared():
    busy = mi325x_checks(rocm_smi="cpx", busy=True)[1]
    assert busy.state is CheckState.FAILED
    assert "3 other process(es) hold GPU memory: pid 2345617 (python3): 40960 MiB" in busy.detail
    assert "--share-gpus" in busy.fix
    assert mi325x_checks(rocm_smi="cpx", busy=True, share=True)[1].state is CheckState.SHARED


def test_only_processes_on_the_layouts_devices_refuse_it():
    """rocm-smi --showpidgpus puts the three processes on devices 2, 40 and 40-41: a layout
    of devices 0-7 is refused for the first alone, one of 8-15 for none."""
    def on(devices: str) -> PreflightCheck:
        return mi325x_checks(rocm_smi="cpx", busy=True, placed=True, devices=devices)[1]

    refused = on("0-7")
    assert refused.state is CheckState.FAILED
    assert refused.detail.startswith("1 other process(es) hold GPU memory: pid 2345617 "
                                     "(python3): 40960 MiB on device(s) 2; on other devices "
                                     "than the layout's: pid 2345622")
    assert "pid 2345630 (pt_main_thread): ? bytes on device(s) 40, 41" in refused.detail
    free = on("8-15")
    assert free.state is CheckState.OK
    assert free.detail.startswith("none hold the layout's devices' memory; on other devices")


def test_nvidia_processes_are_placed_by_their_gpus_uuid():
    which, run = tools({
        "nvidia-smi --query-gpu=index,mig.mode.current": PARTITION / "nvidia-smi-mig-na.csv",
        "nvidia-smi --query-compute-apps=pid,used_memory": HOLDERS / "nvidia-smi-compute-apps.csv",
        "nvidia-smi --query-compute-apps=pid,gpu_uuid": HOLDERS /
        "nvidia-smi-compute-apps-gpus.csv",
        "nvidia-smi --query-gpu=index,uuid": HOLDERS / "nvidia-smi-gpu-uuids.csv"})
    profile = load_profile("h100")

    def on(devices: str) -> PreflightCheck:
        laid = dataclasses.replace(profile, layout=profile.layout.with_overrides(
            devices=devices))
        return gpu_checks(plan_for(laid), False, which, run)[1]

    assert on("0,1").state is CheckState.OK
    two = on("2")
    assert two.state is CheckState.FAILED
    assert two.detail.startswith("1 other process(es) hold GPU memory: pid 1523411: 40962 MiB "
                                 "on device(s) 2; on other devices than the layout's: pid "
                                 "1523417: 512 MiB on device(s) 7")


def test_mig_on_a_gpu_the_layout_names_refuses_with_the_command_that_turns_it_off():
    which, run = tools({"nvidia-smi --query-gpu=index,mig.mode.current": PARTITION /
                        "nvidia-smi-mig.csv",
                        "nvidia-smi --query-compute-apps=pid,used_memory": HOLDERS /
                        "nvidia-smi-compute-apps-none.csv"})
    check = gpu_checks(plan_for(load_profile("h100")), False, which, run)[0]
    assert check.state is CheckState.FAILED
    assert "MIG is enabled on GPU(s) 3" in check.detail
    assert "nvidia-smi -i 3 -mig 0" in check.fix


def test_gpus_without_mig_pass_and_fewer_gpus_than_named_fail(tmp_path):
    apps = HOLDERS / "nvidia-smi-compute-apps-none.csv"
    which, run = tools({"nvidia-smi --query-gpu=index,mig.mode.current": PARTITION /
                        "nvidia-smi-mig-na.csv",
                        "nvidia-smi --query-compute-apps=pid,used_memory": apps})
    plan = plan_for(load_profile("h100"))
    assert gpu_checks(plan, False, which, run)[0].state is CheckState.OK
    four = tmp_path / "four.csv"  # a node with 4 of the 8 GPUs the layout names
    four.write_text("".join((PARTITION / "nvidia-smi-mig-na.csv").read_text().splitlines(
        keepends=True)[:4]))
    which, run = tools({"nvidia-smi --query-gpu=index,mig.mode.current": four,
                        "nvidia-smi --query-compute-apps=pid,used_memory": apps})
    check = gpu_checks(plan, False, which, run)[0]
    assert check.state is CheckState.FAILED and "(first: 4)" in check.detail


def test_no_gpu_tool_fails_a_gpu_layout_and_is_absent_for_a_cpu_one():
    def which(_name: str) -> None:
        return None

    check = gpu_checks(plan_for(load_profile("mi325x")), False, which)[0]
    assert check.state is CheckState.FAILED and "no amd-smi or rocm-smi on PATH" in check.detail
    assert states(gpu_checks(plan_for(load_profile("cpu")), False, which)) == {
        "GPUs": CheckState.ABSENT}


# --- files, worker, disk --------------------------------------------------------------------
def test_malformed_fid_statistics_fail_naming_the_profile_field(tmp_path):
    bad = tmp_path / "stats.npz"
    np.savez(bad, mu=np.zeros(3), sigma=np.zeros((3, 3)))
    profile = load_profile("cpu", {"accuracy.fid_statistics": str(bad)})
    failed = [c for c in scoring_checks(profile, True) if c.state is CheckState.FAILED]
    assert [c.what for c in failed] == ["FID statistics"]
    assert failed[0].where.endswith(": accuracy.fid_statistics")
    assert "mu must be (2048,)" in failed[0].detail


def test_weights_not_the_published_file_fail_by_their_sha256(tmp_path, monkeypatch):
    fake = tmp_path / FID_WEIGHTS.name
    fake.write_bytes(b"not the weights")
    monkeypatch.setenv("RUNNER_FID_WEIGHTS", str(fake))
    profile = load_profile("cpu", {"accuracy.backbones": "pretrained"})
    checks = {c.what: c for c in scoring_checks(profile, True)}
    assert checks[FID_WEIGHTS.what].state is CheckState.FAILED
    assert "is not the published file's" in checks[FID_WEIGHTS.what].detail
    assert checks["CLIP ViT-B-32 openai weights"].state is CheckState.FAILED  # not found


def test_no_score_checks_no_scoring_file():
    profile = load_profile("mi325x", {"accuracy.fid_statistics": "/nonexistent.npz"})
    assert states(scoring_checks(profile, False)) == {"scoring": CheckState.ABSENT}


def test_the_local_worker_environment_is_started_as_a_worker_is():
    check = worker_env_check(LocalExecutor(), plan_for(load_profile("cpu")))
    assert check.state is CheckState.OK, check
    assert check.detail == "imports ok; IREE driver local-task registered"
    assert check.where.endswith("-m runner.batch.worker --check local-task")


def test_disk_too_small_for_the_samples_fails_naming_the_directory(tmp_path):
    profile = load_profile("mi325x")
    plan = plan_for(profile)
    assert image_bytes(profile) == 1024 * 1024 * 3  # a PNG stored without compression
    free = os.statvfs(tmp_path)
    too_many = free.f_bavail * free.f_frsize // (3 * image_bytes(profile)) + 1
    check = disk_check(tmp_path / "not" / "yet", profile, plan, too_many, too_many)
    assert check.state is CheckState.FAILED and check.where == str(tmp_path)
    assert disk_check(tmp_path / "run", profile, plan, 1, 1).state is CheckState.OK
    # A resume with nothing left to store still writes the whole log.
    logged = free.f_bavail * free.f_frsize // (2 * image_bytes(profile)) + 1
    assert disk_check(tmp_path, profile, plan, 0, logged).state is CheckState.FAILED


def test_every_failure_is_shown_and_the_first_raised():
    lines: list[str] = []
    checked = Preflight.of([PreflightCheck("a", CheckState.OK, "fine"),
                            PreflightCheck("b", CheckState.FAILED, "broken", "f.yaml: b", "do x"),
                            PreflightCheck("c", CheckState.FAILED, "also", "g", "do y")])
    with pytest.raises(Exception) as e:
        checked.raise_if_failed(lines.append)
    assert lines == checked.lines() and len(lines) == 3
    assert str(e.value).startswith("f.yaml: b: preflight: b: broken (and 1 more")
    assert "fix: do x" in str(e.value)


def test_a_dry_run_shows_each_check_as_one_comment_line(capsys):
    """A path holding a newline stays inside its check's comment, as a dry run's
    commands stay runnable around it."""
    checked = Preflight.of([PreflightCheck("disk", CheckState.OK, "room in /runs/a\nb"),
                            PreflightCheck("GPUs", CheckState.ABSENT, "none")])
    assert checked.shown(True, print) is checked
    assert capsys.readouterr().out.splitlines() == [
        "# preflight ok     disk: room in /runs/a\\nb", "# preflight absent GPUs: none"]


# --- through the commands -------------------------------------------------------------------
def test_cpu_dry_run_prints_the_preflight_and_writes_nothing(tmp_path):
    dry = cli("run", "--profile", "cpu", "--count", "2", "--out", tmp_path / "d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "# preflight ok     worker environment: imports ok" in dry.stdout
    assert "# preflight absent GPUs: a cpu layout uses none" in dry.stdout
    assert not (tmp_path / "d").exists()


def test_run_and_mlperf_dry_runs_open_with_the_same_preflight(tmp_path):
    """Every command shows its preflight one way (`Preflight.shown`): its lines first, as
    comments, then what it would run."""
    def opening(*argv: str) -> list[str]:
        ran = cli(*argv, "--profile", "cpu", "--count", "2", "--dry-run")
        assert ran.returncode == 0, ran.stderr
        first = itertools.takewhile(lambda line: line.startswith("# preflight "),
                                    ran.stdout.splitlines())
        return [line.split(":")[0] for line in first]

    run = opening("run", "--out", str(tmp_path / "r"))
    assert run == opening("mlperf", "--scenario", "offline", "--mode", "accuracy", "--out",
                          str(tmp_path / "m"))
    assert len(run) == 7 and run[-1] == "# preflight ok     disk"


def test_seeded_sdxl_dry_run_on_the_lab_path_refuses_every_failure_at_once(tmp_path):
    """What would stop the mi325x run at its end (scoring a seeded model, the missing
    statistics and weights) and at its first batch (no GPUs here) stops its dry run."""
    ran = cli("run", "--profile", "mi325x", *SEEDED_SDXL, "--out", tmp_path / "acc",
              "--dry-run", env={**os.environ, "RUNNER_FID_WEIGHTS": "",
                                "RUNNER_CLIP_WEIGHTS": "", "PATH": "/usr/bin:/bin",
                                "RUNNER_CACHE_DIR": str(tmp_path / "cache")})
    assert ran.returncode == 2, ran.stdout + ran.stderr
    failed = [line for line in ran.stdout.splitlines() if line.startswith("preflight failed")]
    # 5000 samples need ~47 GB: the disk check fails too where this machine has less free
    (disk,) = [line for line in ran.stdout.splitlines() if line.startswith("preflight ")
               and line.split(":")[0].endswith(" disk")]
    need, free = map(float, re.search(r"([\d.]+) GB needed .*; ([\d.]+) GB free", disk).groups())
    short = ["preflight failed disk"] if free < need else []
    assert [line.split(":")[0] for line in failed] == [
        "preflight failed scoring", "preflight failed FID statistics",
        "preflight failed FID InceptionV3 weights",
        "preflight failed CLIP ViT-B-32 openai weights", "preflight failed GPUs", *short]
    assert f"and {4 + len(short)} more failed check(s)" in ran.stderr
    assert not (tmp_path / "acc").exists()


@pytest.mark.parametrize("profile", ["mi300x", "h100"])
def test_other_lab_profiles_dry_runs_refuse_scoring_a_seeded_model(tmp_path, profile):
    ran = cli("run", "--profile", profile, *SEEDED_SDXL, "--count", "8", "--out",
              tmp_path / "r", "--dry-run")
    assert ran.returncode == 2 and "preflight failed scoring: scoring refused" in ran.stdout


def test_mlperf_submission_dry_run_checks_scoring_files(tmp_path):
    ran = cli("mlperf", "--profile", "mi325x", *SEEDED_SDXL, "--scenario",
              "singlestream,offline,server", "--mode", "submission", "--out", tmp_path / "s",
              "--dry-run", env={**os.environ, "RUNNER_CACHE_DIR": str(tmp_path / "cache")})
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "preflight failed scoring: scoring refused" in ran.stdout
    cache = tmp_path / "cache" / "mlperf" / "val2014.npz"
    home = Path.home() / ".cache" / "iree-sdxl-runner" / "mlperf" / "val2014.npz"
    assert f"FID statistics file not found: looked for {cache} then {home}" in ran.stdout


def test_a_venv_without_the_iree_runtime_stops_before_any_work(tmp_path):
    """The runner's own dependencies but no IREE runtime (a `pip install --no-deps`): the
    preflight starts the worker's python as a worker starts, and the run stops, exit 2,
    naming the missing module, instead of every worker's traceback and a run to resume."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(np.__file__).parent.parent
    keep = tmp_path / "keep"
    keep.mkdir()
    for name in ("numpy", "numpy.libs", "yaml", "_yaml", "regex", "shtab"):
        if (site / name).exists():
            (keep / name).symlink_to(site / name)
    (next((venv / "lib").glob("python3*")) / "site-packages" / "keep.pth").write_text(
        f"{keep}\n")
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "runner", "run", "--profile",
                           "cpu", "--count", "2", "--no-score", "--out", str(tmp_path / "run")],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr
    assert ("preflight failed worker environment: a worker cannot start (exit 2): cannot "
            "import iree.runtime: No module named 'iree'") in proc.stderr
    assert "Traceback" not in proc.stderr and "--resume" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_run_json_records_the_preflight_and_a_resume_runs_it_again(tmp_path, tiny_compiled):
    ran = cli("run", "--profile", "cpu", "--count", "2", "--no-score", "--out", tmp_path / "r")
    assert ran.returncode == 0, ran.stderr
    assert "preflight ok     worker environment" in ran.stderr
    record = json.loads((tmp_path / "r" / "run.json").read_text())["preflight"]
    assert {r["what"]: r["state"] for r in record}["worker environment"] == "ok"
    next((tmp_path / "r" / "samples").glob("*.png")).unlink()  # one sample to make again
    resumed = cli("run", "--resume", tmp_path / "r")
    assert resumed.returncode == 0, resumed.stderr
    assert "GB needed for 1 sample(s) of 128x128, an MLPerf log of 2 and" in resumed.stderr


# --- the mi325x page opens with it ----------------------------------------------------------
PAGE = REPO / "docs" / "task-mi325x-accuracy.md"
PATH_WORD = re.compile(r"(?:~|/)[^\s:;,()`]*/[^\s:;,()`]*")
NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def normalized(text: str) -> list[str]:
    """The preflight's lines and the error, modulo paths, and the disk line modulo its
    numbers (the free space is this machine's; the suite's checkpoint is a small one, of
    128x128 images, where the page's is SDXL's 1024x1024)."""
    keep = [PATH_WORD.sub("PATH", line.rstrip()) for line in text.splitlines()
            if line.startswith(("preflight ", "error: ", "  fix: "))]
    return [NUMBER.sub("N", line) if line.split()[2:3] == ["disk:"] else line
            for line in keep]


def test_the_mi325x_page_opens_with_the_preflight_as_it_runs_here(lab_profiles, tmp_path,
                                                                  monkeypatch):
    """The page's first command and the block after it, run as the page says: the lab
    profile's checkpoint in its place (a small one), no MLPerf scoring files and no GPU."""
    blocks = re.findall(r"^```(\w+)\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    (lang, command), (out_lang, shown) = blocks[0], blocks[1]
    assert (lang, out_lang) == ("bash", "text")
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(lab_profiles / ".cache" / "iree-sdxl-runner"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no rocm-smi: a machine without the GPUs
    monkeypatch.delenv("RUNNER_FID_WEIGHTS", raising=False)
    monkeypatch.delenv("RUNNER_CLIP_WEIGHTS", raising=False)
    monkeypatch.chdir(tmp_path)
    ran = cli(*shlex.split(command.strip())[1:])
    assert ran.returncode == 2
    assert normalized(ran.stdout + ran.stderr) == normalized(shown)
    assert len(normalized(shown)) >= 10


def stand_in(bin_dir: Path, tool: str, outputs: dict[str, Path]) -> dict[str, str]:
    """`tool` in `bin_dir` printing captured output: the file of the first option in
    `outputs` its command line holds, else the one under "". The tool's output is the one
    boundary a CPU machine lacks; the command that runs it runs for real, with the
    environment returned, `bin_dir` first on PATH."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / tool
    path.write_text(f"#!{sys.executable}\nimport sys\n"
                    f"outputs = {({option: str(f) for option, f in outputs.items()})!r}\n"
                    "option = next((o for o in outputs if o and o in sys.argv), '')\n"
                    "sys.stdout.write(open(outputs[option]).read())\n")
    path.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def stand_in_rocm_smi(bin_dir: Path, pids: Path) -> dict[str, str]:
    """`rocm-smi` of a CPX node whose process table is `pids` (`stand_in`)."""
    return stand_in(bin_dir, "rocm-smi", {"--showpids": pids,
                                          "--showpidgpus": HOLDERS / "rocm-smi-showpidgpus.txt",
                                          "": PARTITION / "rocm-smi-partition-cpx.json"})


def test_the_run_reads_amd_smi_on_path_before_rocm_smi(tmp_path):
    """A stand-in amd-smi printing an SPX node beside the CPX rocm-smi: the CPX run is
    refused for SPX, so the command read amd-smi."""
    stand_in_rocm_smi(tmp_path / "bin", HOLDERS / "rocm-smi-showpids-none.txt")
    env = stand_in(tmp_path / "bin", "amd-smi",
                   {"": PARTITION / "amd-smi-static-partition-spx.json"})
    ran = cli("run", "--profile", "mi325x", *SEEDED_SDXL, "--no-score", "--count", "64",
              "--out", tmp_path / "r", "--dry-run", env=env)
    assert ran.returncode == 2, ran.stderr
    assert "preflight failed GPUs: the GPUs are in SPX mode; the layout assumes CPX" in \
        ran.stdout


def busy_node_dry_runs(tmp_path: Path, *argv: str) -> tuple:
    """The dry run of `argv` of the mi325x profile on a CPX node where three other processes
    hold GPU memory: as asked, then with --share-gpus."""
    env = stand_in_rocm_smi(tmp_path / "bin", HOLDERS / "rocm-smi-showpids.txt")
    args = (*argv, "--profile", "mi325x", *SEEDED_SDXL, "--count", "64", "--out",
            tmp_path / "out", "--dry-run")
    return cli(*args, env=env), cli(*args, "--share-gpus", env=env)


def test_busy_gpus_stop_the_run_unless_shared(tmp_path):
    refused, shared = busy_node_dry_runs(tmp_path, "run", "--no-score")
    assert refused.returncode == 2, refused.stderr
    assert "preflight ok     GPUs: 64 device ID(s) of 64 in CPX compute mode" in refused.stdout
    assert "preflight failed GPU processes: 3 other process(es) hold GPU memory" in \
        refused.stdout
    assert shared.returncode == 0, shared.stderr
    assert "# preflight shared GPU processes: shared as asked (--share-gpus)" in shared.stdout


def test_a_hostile_out_dir_reaches_the_preflight_as_a_path_only(tmp_path):
    out = tmp_path / "out $(touch pwned) 'q\" dir\nline"
    ran = cli("run", "--profile", "cpu", "--count", "2", "--out", out, "--dry-run",
              cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = [line for line in ran.stdout.splitlines()
             if re.search(r"preflight (ok|failed|absent|shared) ", line)]
    assert len(lines) == 7 and all(line.startswith("# preflight ") for line in lines)
    assert "GB free" in lines[-1] and not (tmp_path / "pwned").exists()
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.docker
def test_the_docker_worker_environment_is_the_images_python(wheels_image):  # noqa: F811
    """The harness image's python, in the first worker's container, imports what a worker
    imports: checked by starting it, as the run starts its workers."""
    check = worker_env_check(DockerExecutor(wheels_image.tag, []),
                             plan_for(load_profile("cpu")))
    assert check.state is CheckState.OK, check
    assert check.detail == "imports ok; IREE driver local-task registered"
    assert check.where.startswith("docker run --rm --name runner-check-")


def test_bench_dry_run_prints_each_layouts_preflight(tmp_path):
    ran = cli("bench", "--profile", "cpu", "--count", "4", "--batch-size", "1,2", "--no-stages",
              "--out", tmp_path / "b", "--dry-run")
    assert ran.returncode == 0, ran.stderr
    worker = [line for line in ran.stdout.splitlines()
              if line.startswith("#   preflight ok     worker environment: imports ok")]
    assert len(worker) == 2  # one per layout
    assert not (tmp_path / "b").exists()


def test_bench_shares_busy_gpus_only_when_asked_and_its_run_lines_say_so(tmp_path):
    """Each layout's run is made with the bench's --share-gpus: its preflight line says
    shared, and the `runner run` line its reproduce.sh re-runs carries the flag."""
    refused, shared = busy_node_dry_runs(tmp_path, "bench", "--no-stages")
    assert refused.returncode == 0, refused.stderr
    assert "#   preflight failed GPU processes: 3 other process(es)" in refused.stdout
    assert shared.returncode == 0, shared.stderr
    assert "#   preflight shared GPU processes: shared as asked (--share-gpus)" in shared.stdout
    run_lines = [line for line in shared.stdout.splitlines() if line.startswith("runner run ")]
    assert run_lines and all("--share-gpus" in line for line in run_lines)
    assert not (tmp_path / "out").exists()
