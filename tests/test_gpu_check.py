"""`runner gpu-check prepare|run`: the GPU check, shipped in the package.

The slow test prepares a carry and runs the check for real on this CPU (`--profile cpu`: the
same plan as on a GPU, on llvm-cpu and the real runtime; the tiny model's images against
themselves), in directories with hostile names. The fast ones check the dry runs, the plan's
order, the refusals, the budget on a real `sleep`, a SIGTERM in the middle of a step, the GPU
descriptions in the vendors' own formats, the H200 on the h100 profile and what a missing
profiler, a batch too large and a short MLPerf test make of a step."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import cli, start_runner
from repo_support import REPO
from shared_work import copy_of, shared_dir

from runner.base import gpu_info
from runner.base.errors import ToolFailed
from runner.gpucheck import plan, steps, summary
from runner.gpucheck.device import runs_profile

FIXTURES = REPO / "tests" / "fixtures" / "gpu_info"
HOSTILE = 'a b$(touch x)"\'q\nz'


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), RUNNER_PROGRESS="off")


def words(line: str) -> list[str]:
    """One printed command line's words, as bash reads them (a newline in a path is `$'\\n'`
    there: each command is one line)."""
    proc = subprocess.run(["bash", "-c", 'printf "%s\\0" ' + line], capture_output=True,
                          check=True)
    return proc.stdout.decode().split("\0")[:-1]


def commands(stdout: str) -> list[list[str]]:
    """The commands a dry run printed (its `#` lines name them), less the variables before
    them, with the launcher's Python as `python`."""
    out = []
    for line in stdout.splitlines():
        if line and line[0] != "#":
            argv = words(line)
            while "=" in argv[0]:
                argv.pop(0)
            out.append(["python", *argv[1:]] if argv[1:2] == ["-m"] else argv)
    return out


def fake_carry(carry: Path, sizes: tuple[int, ...] = (1,), profile: str = "cpu") -> None:
    """A carry's manifest alone, as `prepare --profile cpu` writes it: enough for `run` to
    plan (its steps compile what is missing, on this machine with a compiler)."""
    carry.mkdir(parents=True)
    (carry / "gpu_check.json").write_text(json.dumps({
        "kind": "gpu_check_carry", "profile": profile, "model": "tiny-sdxl", "backend": "cpu",
        "chip": "host", "batch_sizes": list(sizes), "vae_dtypes": ["fp32", "fp16"],
        "stages": ["clip", "unet_step", "vae"], "tiny_sets": [], "tiny_count": 32,
        "seeded_exports": [], "mlperf": {"min_query_count": 4, "min_duration_s": 1,
                                         "user_conf": "mlperf-short.conf"},
        "steps": plan.plan_steps(list(sizes), ["fp32", "fp16"], "fp32")}))
    # What the steps read from the carry (its preflight checks they are there).
    (carry / "mlperf-short.conf").write_text("*.Offline.min_query_count = 4\n")
    (carry / "tiny-cpu").mkdir()
    (carry / "tiny-cpu" / "run.json").write_text(json.dumps({"sample_ids": list(range(32))}))


def test_prepare_dry_run_prints_every_command_and_writes_nothing(tmp_path):
    carry = tmp_path / HOSTILE
    proc = cli("gpu-check", "prepare", "--profile", "h100-seeded", "--out", carry, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    argvs = commands(proc.stdout)
    compiles = [a for a in argvs if a[1:4] == ["-m", "runner", "compile"]]
    for v in ("fp32", "fp16"):
        for b in (1, 8):
            assert ["python", "-m", "runner", "compile", "--profile", "h100-seeded",
                    "--set", f"model.vae_dtype={v}", "--set", f"layout.batch_size={b}",
                    "--set", "layout.vae_batch_size=1", "--out", str(carry / "cache")] in compiles
    assert ["python", "-m", "runner", "compile", "--profile", "tiny", "--set",
            "target.backend=cuda", "--set", "target.chip=sm_80", "--out",
            str(carry / "cache")] in compiles
    assert ["python", "-m", "runner", "run", "--profile", "tiny", "--count", "32",
            "--no-score", "--out", str(carry / "tiny-cpu")] in argvs
    pip = next(a for a in argvs if a[1:4] == ["-m", "pip", "download"])
    assert f"iree-base-runtime=={plan.runtime_version()}" in pip and "--only-binary=:all:" in pip
    assert any(p.startswith("mlcommons-loadgen==") for p in pip)  # the MLPerf step's
    # what `pip install --no-index iree-sdxl-runner[mlperf]` needs besides, and the runner's
    # own wheel (the GPU machine installs from the carry alone)
    assert {p.split("==")[0] for p in pip[pip.index(str(carry / "wheels")) + 1:]} == set(
        plan.CARRIED_DISTS)
    assert ["python", "-m", "runner.gpucheck.wheel", "--out", str(carry / "wheels")] in argvs
    assert pip[pip.index("--python-version") + 1] == "3.12"
    assert pip[pip.index("-d") + 1] == str(carry / "wheels")
    assert not carry.exists() and not (tmp_path / "x").exists() and not (REPO / "x").exists()


def test_prepare_of_tiny_takes_the_models_batch_sizes(tmp_path):
    proc = cli("gpu-check", "prepare", "--profile", "tiny", "--out", tmp_path / "c",
               "--dry-run", "--no-wheels")
    assert proc.returncode == 0, proc.stderr
    sizes = [a[a.index("--set") + 3] for a in commands(proc.stdout) if "model.vae_dtype=fp32" in a]
    assert sizes == ["layout.batch_size=1", "layout.batch_size=2"]
    assert "pip" not in proc.stdout
    bad = cli("gpu-check", "prepare", "--profile", "tiny", "--out", tmp_path / "c",
              "--dry-run", "--batch-sizes", "8")
    assert bad.returncode == 2 and "--batch-sizes" in bad.stderr and "fix:" in bad.stderr


def test_tiny_count_is_the_samples_the_check_compares(tmp_path):
    """`--tiny-count N`: the reference run on this CPU renders samples 0..N-1 and the
    manifest tells `run` to render the same; a count the captions lack is refused, and so is
    one that differs from the reference run of a carry being prepared again."""
    carry = tmp_path / "c"
    proc = cli("gpu-check", "prepare", "--profile", "cpu", "--out", carry, "--dry-run",
               "--no-wheels", "--tiny-count", "4")
    assert proc.returncode == 0, proc.stderr
    assert ["python", "-m", "runner", "run", "--profile", "tiny", "--count", "4",
            "--no-score", "--out", str(carry / "tiny-cpu")] in commands(proc.stdout)
    for bad in ("0", "5001", "four"):
        refused = cli("gpu-check", "prepare", "--profile", "cpu", "--out", carry,
                      "--dry-run", "--tiny-count", bad)
        assert refused.returncode == 2, (bad, refused.stderr)
        assert "--tiny-count" in refused.stderr.splitlines()[0] and "fix:" in refused.stderr
    fake_carry(carry)  # prepared before, with the default count (tiny-cpu/'s 32 samples)
    again = cli("gpu-check", "prepare", "--profile", "cpu", "--out", carry, "--dry-run",
                "--no-wheels", "--tiny-count", "4")
    assert again.returncode == 2 and again.stderr.startswith("error: --tiny-count: ")
    assert "fix: give --tiny-count 32, or prepare into a new --out" in again.stderr
    same = cli("gpu-check", "prepare", "--profile", "cpu", "--out", carry, "--dry-run",
               "--no-wheels")
    assert same.returncode == 0, same.stderr
    assert ["python", "-m", "runner", "run", "--resume", str(carry / "tiny-cpu")] in commands(
        same.stdout)


def test_the_plan_puts_the_most_valuable_numbers_first():
    """bs1 throughput per VAE precision, then the largest batch first, the MLPerf number,
    the tiny comparison, the dispatch profile last."""
    names = [s["name"] for s in plan.plan_steps([1, 4, 8], ["fp32", "fp16"], "fp16")]
    assert names == ["device", "bench fp32 bs1", "bench fp16 bs1", "bench fp16 bs8",
                     "bench fp16 bs4", "mlperf offline", "tiny on the device", "tiny compare",
                     "dispatches"]


def test_run_dry_run_prints_every_command_and_writes_nothing(tmp_path):
    carry, results = tmp_path / f"c {HOSTILE}", tmp_path / f"r {HOSTILE}"
    fake_carry(carry, (1, 2))
    proc = cli("gpu-check", "run", "--carry", carry, "--out", results, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line and line[0] != "#"]
    runner_lines = [line for line in lines if " -m runner " in line]
    assert runner_lines and all(words(line)[0] == f"RUNNER_CACHE_DIR={carry / 'cache'}"
                                for line in runner_lines)
    assert lines[0].startswith("nvidia-smi --query-gpu=index,name,driver_version,memory.total")
    argvs = commands(proc.stdout)
    benches = [a for a in argvs if a[3:4] == ["bench"]]
    for v in ("fp32", "fp16"):
        assert ["python", "-m", "runner", "bench", "--profile", "cpu", "--set",
                f"model.vae_dtype={v}", "--devices", "0", "--cpd", "1", "--batch-size", "1",
                "--vae-batch-size", "1", "--count", "2", "--stage", "clip", "--stage",
                "unet_step", "--stage", "vae", "--repetitions", "2",
                "--out", str(results / f"bench-{v}-bs1")] in benches
    # Only the dispatch step profiles; the throughput steps do not depend on a profiler.
    (dispatches,) = [a for a in benches if "--dispatches" in a]
    assert dispatches[-1] == str(results / "dispatches")
    # and it runs no layout: the bench step of its precision and batch measured throughput
    assert "--no-throughput" in dispatches and "--count" not in dispatches
    mlperf = next(a for a in argvs if a[3:4] == ["mlperf"])
    assert mlperf[mlperf.index("--scenario") + 1] == "offline"
    assert mlperf[mlperf.index("--mode") + 1] == "performance"
    assert mlperf[mlperf.index("--user-conf") + 1] == str(carry / "mlperf-short.conf")
    assert ["python", "-m", "runner", "compare", str(carry / "tiny-cpu"),
            str(results / "tiny-device"), "--out", str(results / "tiny-compare")] in argvs
    assert not results.exists() and not (carry / "cache").exists()


def test_run_dry_run_prints_the_preflight_first(tmp_path):
    carry = tmp_path / f"c {HOSTILE}"
    fake_carry(carry)
    proc = cli("gpu-check", "run", "--carry", carry, "--out", tmp_path / "r", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:4] == [
        "# preflight ok     carry: 2 file(s) the steps read: mlperf-short.conf, tiny-cpu",
        "# preflight ok     worker environment: imports ok; IREE driver local-task registered",
        "# preflight absent GPUs: a cpu layout uses none", lines[3]]
    assert lines[3].startswith("# preflight ok     disk: ") and "40 sample(s)" in lines[3]


def test_a_carry_copied_without_a_file_its_steps_read_stops_before_any_step(tmp_path):
    carry, results = tmp_path / "carry", tmp_path / "r"
    fake_carry(carry)
    (carry / "mlperf-short.conf").unlink()
    for dry in ([], ["--dry-run"]):
        proc = cli("gpu-check", "run", "--carry", carry, "--out", results, *dry)
        assert proc.returncode == 2, proc.stderr
        assert ("preflight failed carry: 1 of the 2 file(s) the steps read are missing "
                "(first: mlperf-short.conf)") in proc.stdout + proc.stderr
        assert f"error: --carry {carry}: preflight: carry: 1 of the 2" in proc.stderr
        assert "Traceback" not in proc.stderr and not results.exists()


def stand_in_nvidia_smi(bin_dir: Path, apps: str, uuids: Path) -> None:
    """`nvidia-smi` on PATH printing 8 GPUs without MIG, `apps` as its compute processes
    and `uuids` as the GPUs' UUIDs: the tool's output at the boundary a CPU machine lacks;
    the command runs for real."""
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    fixtures = REPO / "tests" / "fixtures"
    by_query = {"pid,gpu_uuid": fixtures / "gpu_holders" / "nvidia-smi-compute-apps-gpus.csv",
                "index,uuid": uuids,
                "pid,used_memory": fixtures / "gpu_holders" / apps,
                "mig.mode": fixtures / "gpu_partition" / "nvidia-smi-mig-na.csv"}
    tool.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"by_query = {({k: str(v) for k, v in by_query.items()})!r}\n"
        "path = next(p for k, p in by_query.items() if any(k in a for a in sys.argv))\n"
        "sys.stdout.write(open(path).read())\n")
    tool.chmod(0o755)


def test_busy_gpus_stop_the_check_unless_shared_and_then_every_gpu_step_shares(tmp_path):
    """The steps use device 0: a process on GPU 2 and two on GPU 7 leave it free; with the
    UUIDs of GPUs 0 and 2 swapped, the first holds it, and the check stops unless shared."""
    carry = tmp_path / "carry"
    fake_carry(carry, profile="h100")
    uuids = (REPO / "tests" / "fixtures" / "gpu_holders" / "nvidia-smi-gpu-uuids.csv"
             ).read_text().splitlines()
    swapped = tmp_path / "uuids.csv"
    swapped.write_text("\n".join([f"0, {uuids[2].split(', ')[1]}", uuids[1],
                                  f"2, {uuids[0].split(', ')[1]}", *uuids[3:]]) + "\n")
    stand_in_nvidia_smi(tmp_path / "bin", "nvidia-smi-compute-apps.csv", swapped)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    args = ("gpu-check", "run", "--carry", carry, "--out", tmp_path / "r", "--dry-run")
    refused = cli(*args, env=env)
    assert refused.returncode == 2, refused.stderr
    assert "preflight ok     GPUs: 1 of 8 GPU(s), MIG off" in refused.stdout
    assert ("preflight failed GPU processes: 1 other process(es) hold GPU memory: pid "
            "1523411: 40962 MiB on device(s) 0; on other devices than the layout's: pid "
            "1523417: 512 MiB on device(s) 7") in refused.stdout
    shared = cli(*args, "--share-gpus", env=env)
    assert shared.returncode == 0, shared.stderr
    assert "# preflight shared GPU processes: shared as asked (--share-gpus)" in shared.stdout
    argvs = commands(shared.stdout)
    on_gpu = [a for a in argvs if a[3:4] in (["bench"], ["mlperf"], ["run"])]
    assert on_gpu and all(a[-1] == "--share-gpus" for a in on_gpu)
    assert all("--share-gpus" not in a for a in argvs if a[3:4] == ["compare"])
    assert not (tmp_path / "r").exists()
    shutil.rmtree(tmp_path / "bin")
    stand_in_nvidia_smi(tmp_path / "bin", "nvidia-smi-compute-apps.csv",
                        REPO / "tests" / "fixtures" / "gpu_holders" / "nvidia-smi-gpu-uuids.csv")
    free = cli(*args, env=env)
    assert free.returncode == 0, free.stderr
    assert ("# preflight ok     GPU processes: none hold the layout's devices' memory; on other "
            "devices than the layout's: pid 1523411: 40962 MiB on device(s) 2") in free.stdout


@pytest.mark.parametrize("case", ["missing", "no manifest", "foreign", "the script's"])
def test_run_refuses_what_is_not_a_carry(tmp_path, case):
    carry = tmp_path / "carry"
    if case != "missing":
        carry.mkdir()
    if case == "foreign":
        (carry / "gpu_check.json").write_text('{"kind": "bench"}')
    if case == "the script's":  # scripts/gpu_check.sh's carry held no plan
        (carry / "gpu_check.json").write_text('{"kind": "gpu_check_carry", "batch_sizes": [1]}')
    proc = cli("gpu-check", "run", "--carry", carry, "--out", tmp_path / "r")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --carry ") and "fix: " in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


@pytest.mark.parametrize("budget", ["0", "-5", "nan", "ten"])
def test_a_bad_budget_names_the_flag(tmp_path, budget):
    fake_carry(tmp_path / "carry")
    proc = cli("gpu-check", "run", "--carry", tmp_path / "carry", "--out", tmp_path / "r",
               f"--budget={budget}")
    assert proc.returncode == 2 and "--budget" in proc.stderr.splitlines()[0]
    assert "fix: " in proc.stderr and not (tmp_path / "r").exists()


def test_the_budget_stops_a_running_step_and_skips_the_rest(tmp_path):
    """A real `sleep` past the budget is stopped (SIGTERM) and waited for; the next step is
    not started."""
    runner = steps.StepRunner(budget=1.5, logs=tmp_path / "logs", env={}, say=print,
                              min_start=0.5, grace=2)
    t0 = time.monotonic()
    first = runner.run(plan.Step("sleep", "bench", ["sleep", "30"]))
    assert first.status == "failed" and "budget" in first.note
    assert first.exit_code == -signal.SIGTERM and time.monotonic() - t0 < 10
    from runner.base.procs import descendants
    assert not [p for p in descendants() if p.alive()]
    second = runner.run(plan.Step("after", "bench", ["true"]))
    assert second.status == "skipped: budget" and second.exit_code is None
    assert first.gpu_holders["tool"] is None and "skipped" in first.gpu_holders["note"]


def _running(pattern: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if pattern in cmdline:
                out.append(int(entry.name))
    return out


def test_sigterm_stops_the_step_and_writes_the_summary(tmp_path):
    carry, results = tmp_path / "carry", tmp_path / f"r {HOSTILE}"
    fake_carry(carry)
    proc = start_runner("gpu-check", "run", "--carry", carry, "--out", results, env=env())
    summary_file = results / "gpu_check.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if summary_file.is_file():
            done = json.loads(summary_file.read_text())["steps"]
            if any(s["name"] == "bench fp32 bs1" and s["status"] == "running" for s in done):
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the first bench did not start")
    time.sleep(1.5)  # the child runner is importing or compiling
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "stopped by SIGTERM" in err
    done = json.loads(summary_file.read_text())
    assert done["status"] == "interrupted: SIGTERM" and done["exit_code"] == 143
    by_name = {s["name"]: s for s in done["steps"]}
    assert by_name["device"]["status"] == "passed"
    assert by_name["bench fp32 bs1"]["status"] == "interrupted"
    assert "bench fp16 bs1" not in by_name
    assert (results / "gpu_check.md").is_file()
    assert not _running(str(results)), "a child of the check outlived it"


# ------------------------------------------------------------------- the GPU's description


def test_nvidia_smi_of_an_h200_node_is_read_field_by_field():
    gpus = gpu_info.parse_nvidia_smi((FIXTURES / "nvidia-smi-h200.csv").read_text())
    assert len(gpus) == 8 and [g.index for g in gpus] == list(range(8))
    g = gpus[0]
    assert (g.name, g.driver, g.memory_mib, g.arch, g.bus_id) == (
        "NVIDIA H200", "550.127.05", 143771, "9.0", "00000000:19:00.0")
    assert g.clocks_mhz == {"sm_max": 1980, "memory_max": 3201, "sm": 345, "memory": 3201}


def test_an_old_driver_without_compute_cap_is_asked_again_without_it():
    """A driver before R510 refuses the whole query naming compute_cap (exit 2, its real
    message); the check asks again without the field and reads `[N/A]` as unknown."""
    asked: list[list[str]] = []

    def run(argv, **_):
        asked.append(argv)
        if "compute_cap" in argv[1]:
            return subprocess.CompletedProcess(argv, 2, (FIXTURES / "nvidia-smi-no-compute-cap"
                                                         ".txt").read_text(), "")
        return subprocess.CompletedProcess(argv, 0, (FIXTURES / "nvidia-smi-a100-na.csv")
                                           .read_text(), "")

    info = gpu_info.query(which=lambda t: "/usr/bin/nvidia-smi" if t == "nvidia-smi" else None,
                          run=run)
    assert len(asked) == 2 and "compute_cap" not in asked[1][1]
    (g,) = info.gpus
    assert g.name == "NVIDIA A100-SXM4-80GB" and g.arch is None and g.memory_mib == 81251
    assert g.clocks_mhz["sm"] is None and g.clocks_mhz["sm_max"] == 1410
    assert info.to_dict()["command"] == asked[1]


@pytest.mark.parametrize("fixture, name, arch, memory, driver, sclk", [
    ("rocm-smi-mi325x.json", "AMD Instinct MI325X", "gfx942", 262144, "6.8.5", 132),
    ("rocm-smi-mi250-older.json", "AMD INSTINCT MI250 (MCM) OAM AC MBA", None, 65520,
     "5.16.9.22.20", 800),
])
def test_rocm_smi_json_is_read_across_releases(fixture, name, arch, memory, driver, sclk):
    gpus = gpu_info.parse_rocm_smi((FIXTURES / fixture).read_text())
    g = gpus[0]
    assert (g.name, g.arch, g.memory_mib, g.driver, g.clocks_mhz["sclk"]) == (
        name, arch, memory, driver, sclk)


def test_no_tool_is_recorded_not_an_error_and_garbage_is_named():
    info = gpu_info.query(which=lambda _: None)
    assert info.tool is None and info.gpus == () and "PATH" in info.note
    with pytest.raises(ToolFailed, match="fields where 10 were asked"):
        gpu_info.parse_nvidia_smi("NVIDIA H200, 550\n")
    with pytest.raises(ToolFailed, match="no card"):
        gpu_info.parse_rocm_smi('{"system": {"Driver version": "6.8.5"}}')


def test_an_h200_runs_the_h100_profile_and_an_older_gpu_does_not():
    h200 = gpu_info.GpuInfo("nvidia-smi", tuple(gpu_info.parse_nvidia_smi(
        (FIXTURES / "nvidia-smi-h200.csv").read_text())))
    verdict = runs_profile("cuda", "sm_80", h200)
    assert verdict.ok is True and "NVIDIA H200 (compute capability 9.0) runs sm_80" in \
        verdict.note and "PTX" in verdict.note
    # No compute_cap (an old driver): the name tells (h200 -> 9.0).
    by_name = gpu_info.GpuInfo("nvidia-smi", (gpu_info.Gpu(0, "NVIDIA H200 NVL"),))
    assert runs_profile("cuda", "sm_80", by_name).ok is True
    v100 = gpu_info.GpuInfo("nvidia-smi", (gpu_info.Gpu(0, "Tesla V100-SXM2-32GB", arch="7.0"),))
    assert runs_profile("cuda", "sm_80", v100).ok is False
    amd = gpu_info.GpuInfo("rocm-smi", tuple(gpu_info.parse_rocm_smi(
        (FIXTURES / "rocm-smi-mi325x.json").read_text())))
    assert runs_profile("cuda", "sm_80", amd).ok is False
    assert runs_profile("hip", "gfx942", amd).ok is True
    assert runs_profile("hip", "gfx950", amd).ok is False
    assert runs_profile("cpu", "host", gpu_info.query(which=lambda _: None)).ok is None


# ---------------------------------------------------------------- what a step's outcome is


def _bench_json(path: Path, profiles: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    stages = zip(("clip", "unet_step", "vae"), profiles, strict=True)
    path.write_text(json.dumps({"stages": [{"stage": s, "dispatch_profile": p}
                                           for s, p in stages]}))
    return path


def test_a_missing_profiler_makes_the_dispatch_step_unavailable_with_the_tools_reason(tmp_path):
    """IREE 3.13's CUDA driver: every stage's profile an error with the tool's own words
    (bench exits 1); the step is unavailable, naming it, and the check accepts it. A
    profile that failed for any other reason stays a failure."""
    reason = "CUDA HAL-native profiling is not implemented"
    out = _bench_json(tmp_path / "d" / "bench.json", [{"status": "error", "note": reason}] * 3)
    step = plan.Step("dispatches", plan.DISPATCHES, status="failed", exit_code=1,
                     outputs=[str(out)])
    steps.judge_step(step)
    assert step.status == "unavailable" and step.note == f"unavailable: {reason}"
    assert step.status in steps.ACCEPTED
    _bench_json(out, [{"status": "unavailable", "note": "no HAL profiler on hip"}] * 3)
    step = plan.Step("dispatches", plan.DISPATCHES, status="passed", outputs=[str(out)])
    steps.judge_step(step)
    assert step.status == "unavailable" and "no HAL profiler on hip" in step.note
    crashed = {"status": "error", "note": "iree-benchmark-module crashed"}
    _bench_json(out, [{"status": "error", "note": reason}, crashed, {"status": "ok"}])
    step = plan.Step("dispatches", plan.DISPATCHES, status="failed", outputs=[str(out)])
    steps.judge_step(step)
    assert step.status == "failed"


def test_a_batch_out_of_gpu_memory_did_not_fit_and_others_fail(tmp_path):
    log = tmp_path / "bench fp32 bs8.log"
    log.write_text("iree/runtime/src/iree/hal/drivers/cuda/cuda_allocator.c:512: "
                   "RESOURCE_EXHAUSTED; CUDA driver error 'CUDA_ERROR_OUT_OF_MEMORY' (2): "
                   "out of memory; while invoking native function hal.allocator.allocate\n")
    step = plan.Step("bench fp32 bs8", plan.LADDER, status="failed", exit_code=1, log=str(log))
    steps.judge_step(step)
    assert step.status == "did not fit" and "RESOURCE_EXHAUSTED" in step.note
    log.write_text("error: the worker died: SIGSEGV\n")
    step = plan.Step("bench fp32 bs8", plan.LADDER, status="failed", exit_code=1, log=str(log))
    steps.judge_step(step)
    assert step.status == "failed"


def test_the_published_anchors_are_the_docs_ones():
    """The report's MLPerf anchors (package data) are docs/measurements.json's record."""
    record = json.loads((REPO / "docs" / "measurements.json").read_text())["records"]
    assert record["published"]["result"] == summary.PUBLISHED["values"]
    assert summary.PUBLISHED["values"]["h200_offline_samples_per_s_per_gpu"] == 2.40
    assert summary.PUBLISHED["values"]["h200_qct_8gpu_offline_samples_per_s"] == 19.19


def _finished(tmp_path: Path, manifest: dict, rate: float = 2.16) -> tuple[str, str]:
    """gpu_check.md and gpu_check.json of a check whose steps wrote what `runner mlperf` and
    `runner run` write (the MLPerf test's rate; the tiny runs' timings, 0.9 samples/s on the
    device and 0.6 on the carry's CPU), with the device step's exit code unset as `run`
    leaves it: it runs no command."""
    results, carry = tmp_path / "results", tmp_path / "carry"
    for run_dir, tiny_rate in ((results / "tiny-device", 0.9), (carry / "tiny-cpu", 0.6)):
        run_dir.mkdir(parents=True)
        (run_dir / "results.json").write_text(json.dumps(
            {"timings": {"samples_per_s": tiny_rate}}))
    lg = results / "mlperf-offline" / "results.json"
    lg.parent.mkdir(parents=True)
    lg.write_text(json.dumps({"tests": [{"mode": "performance", "scenario": "Offline", "summary": {
        "samples_per_second": rate, "valid": False, "reasons": ["min_duration"]}}]}))
    done = [plan.Step("device", plan.DEVICE, status="passed"),
            plan.Step("mlperf offline", plan.MLPERF, outputs=[str(lg)], status="passed",
                      exit_code=0, seconds=31.5, params={"batch_size": 1}),
            plan.Step("tiny on the device", plan.TINY, status="failed", exit_code=None)]
    summary.write(results, {"manifest": manifest, "carry": str(carry), "steps": done,
                            "status": "failed", "budget_s": 480.0, "device": None},
                  final=True)
    return ((results / "gpu_check.md").read_text(), (results / "gpu_check.json").read_text())


SDXL_H200 = {"profile": "h100-seeded", "model": "sdxl-seeded-sdxl", "image_size": 1024,
             "backend": "cuda", "chip": "sm_90", "tiny_count": 32}


def test_published_rates_stand_only_beside_sdxl_at_full_size_on_a_gpu(tmp_path):
    """MLPerf's published SDXL rates (per GPU) divide a check's rate only where it ran SDXL
    at 1024x1024 on a GPU; a CPU check, a smaller model or a carry that does not say its
    model's size gets a line saying why they are left out. Every check sets the tiny model's
    rate on the device beside the same run on the carry's CPU."""
    md, _ = _finished(tmp_path / "sdxl", SDXL_H200)
    assert "| h200_offline_samples_per_s_per_gpu | 2.4 | 0.90 |" in md  # 2.16 / 2.40
    assert "| mi325x_iree_offline_images_per_s_per_gpu | 2.32 | 0.93 |" in md
    assert "0.900 samples/s on the device, 0.600 on the CPU" in md and "CPU 1.50" in md
    cases = {"ran on a CPU": dict(SDXL_H200, backend="cpu", chip="host"),
             "makes 128x128 images": dict(SDXL_H200, model="tiny-sdxl", image_size=128),
             "does not record its model's image size": {
                 k: v for k, v in SDXL_H200.items() if k != "image_size"}}
    for i, (why, manifest) in enumerate(cases.items()):
        md, record = _finished(tmp_path / str(i), manifest)
        assert "measured / published" not in md and "| 2.4 |" not in md, why
        assert "- left out: MLPerf's published rates are SDXL's at 1024x1024 on GPUs, and " \
            in md and why in md
        assert why in json.loads(record)["published_left_out"]
        assert "device / CPU 1.50" in md
        assert json.loads(record)["tiny_samples_per_s"] == {
            "device": 0.9, "cpu": 0.6, "device_over_cpu": 1.5}


def test_no_summary_says_none(tmp_path):
    """Nothing the check writes reads Python's None: the device step runs no command, so its
    exit code is "-"; a step with no rate, a missing tiny run and an unknown device alike."""
    md, record = _finished(tmp_path / "a", SDXL_H200)
    assert "None" not in md and "None" not in record
    assert "| device | passed | - |" in md and "| tiny on the device | failed | - |" in md
    shutil.rmtree(tmp_path / "a" / "carry" / "tiny-cpu")
    results = tmp_path / "a" / "results"
    again = json.loads((results / "gpu_check.json").read_text())
    summary.write(results, again, final=True)
    md = (results / "gpu_check.md").read_text()
    assert "None" not in md and "None" not in (results / "gpu_check.json").read_text()
    assert "not measured: the carry's CPU run wrote no rate" in md


THIS_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
TINY_COUNT = 4  # the carry's tiny comparison: samples 0-3 (the check's default is 32)


@pytest.fixture(scope="module")
def cpu_carry(tmp_path_factory) -> Path:
    """One real `gpu-check prepare --profile cpu` with its wheels (for this Python), once per
    session, in a directory with a hostile name; the tests run copies of it. Its tiny
    comparison is of TINY_COUNT samples: the check's steps are the same for any count."""
    def build(carry: Path) -> None:
        prep = cli("gpu-check", "prepare", "--profile", "cpu", "--batch-sizes", "1,2",
                   "--tiny-count", str(TINY_COUNT), "--python", THIS_PYTHON, "--out", carry,
                   env=env())
        assert prep.returncode == 0, prep.stderr[-3000:]

    return shared_dir(tmp_path_factory, f"carry {HOSTILE}", build)


def test_a_carry_without_wheels_says_what_the_gpu_machine_needs():
    notes = plan.notes_text({"profile": "cpu", "backend": "cpu", "chip": "host",
                             "batch_sizes": [1], "iree_runtime": "3.13.0"})
    assert "No wheels" in notes and "pip install iree-sdxl-runner" in notes
    assert "--no-index" not in notes


@pytest.mark.slow
def test_prepare_then_run_on_this_cpu(cpu_carry, tmp_path):
    carry, results = tmp_path / f"carry {HOSTILE}", tmp_path / f"results {HOSTILE}"
    copy_of(cpu_carry, carry)
    manifest = json.loads((carry / "gpu_check.json").read_text())
    assert manifest["batch_sizes"] == [1, 2] and manifest["vae_dtypes"] == ["fp32", "fp16"]
    assert manifest["tiny_count"] == TINY_COUNT and manifest["image_size"] == 128
    assert (carry / "cache" / "vmfb").is_dir() and (carry / "tiny-cpu" / "run.json").is_file()
    assert "min_query_count = 4" in (carry / "mlperf-short.conf").read_text()
    notes = (carry / "README.txt").read_text()
    assert "runner gpu-check run --carry THIS_DIRECTORY --out results" in notes
    assert "profile cpu (cpu host)" in notes
    run = cli("gpu-check", "run", "--carry", carry, "--out", results, "--budget", "1200",
              env=env())
    assert run.returncode == 0, run.stderr[-3000:]
    done = json.loads((results / "gpu_check.json").read_text())
    assert done["status"] == "passed"
    by_name = {s["name"]: s for s in done["steps"]}
    assert [s["name"] for s in done["steps"]] == [s["name"] for s in manifest["steps"]]
    assert all(s["status"] == "passed" for s in done["steps"]), by_name
    assert done["gpu"]["tool"] is None and "PATH" in done["gpu"]["note"]
    assert done["tiny"]["verdict"] == "within 1 LSB" and done["tiny"]["common"] == TINY_COUNT
    benches = {}
    for v in ("fp32", "fp16"):
        bench = json.loads((results / f"bench-{v}-bs1" / "bench.json").read_text())
        assert bench["model_precision"]["vae_dtype"] == {"fp32": "float32", "fp16": "float16"}[v]
        benches[v] = {s["stage"]: s["latency_ms"]["median_ms"] for s in bench["stages"]}
        row = next(r for r in done["bench"] if r["vae_dtype"] == v and r["batch_size"] == 1)
        assert row["images_per_s"] == bench["best"]["samples_per_s"] > 0
        assert row["stage_ms"] == benches[v]
    assert done["largest_batch"] == 2
    ratio = done["vae_fp16_over_fp32"]["bs1"]
    assert ratio > 0 and ratio == round(benches["fp16"]["vae"] / benches["fp32"]["vae"], 4)
    lg = json.loads((results / "mlperf-offline" / "results.json").read_text())
    rate = next(t["summary"]["samples_per_second"] for t in lg["tests"])
    assert done["mlperf"]["samples_per_s"] == rate > 0
    assert done["dispatches"]["status"] == "passed"
    assert 0 < done["dispatches"]["row"]["dispatch_share"]["vae"] <= 1
    md = (results / "gpu_check.md").read_text()
    assert "within 1 LSB" in md and f"bs1: {ratio:.3f}" in md and f"{rate:.3f} samples/s" in md
    assert "published, not measured" in md and "measured / published" not in md
    assert "left out: MLPerf's published rates are SDXL's" in md and "ran on a CPU" in md
    tiny = done["tiny_samples_per_s"]
    assert tiny["device"] > 0 and tiny["cpu"] > 0 and "None" not in md
    assert f"device / CPU {tiny['device'] / tiny['cpu']:.2f}" in md
    # the same --out again is refused, naming --resume; --resume of a finished check has
    # nothing left to do
    refused = cli("gpu-check", "run", "--carry", carry, "--out", results, env=env())
    assert refused.returncode == 2 and "--resume" in refused.stderr
    again = cli("gpu-check", "run", "--resume", results, env=env())
    assert again.returncode == 0 and "nothing to resume" in again.stderr


@pytest.mark.slow
def test_the_carry_alone_installs_the_runner_in_a_bare_venv_that_runs_it(cpu_carry, tmp_path):
    """The README's install command, run as written in a fresh venv with no index: the
    runner's own wheel (pure Python, from this checkout) and its dependencies come from the
    carry; that venv, with no compiler, no torch and no checkout on its path, plans the
    check and renders the tiny model on llvm-cpu from the carry's modules, the same images
    as the CPU's reference run in the carry, and compares them as the check does."""
    carry = copy_of(cpu_carry, tmp_path / f"carry {HOSTILE}")
    manifest = json.loads((carry / "gpu_check.json").read_text())
    wheels = manifest["wheels"]
    assert [w for w in wheels if w.startswith("iree_sdxl_runner-")] == [
        "iree_sdxl_runner-0.1.0-py3-none-any.whl"]
    assert {w.split("-")[0].lower() for w in wheels} == {
        "iree_sdxl_runner", *(d.replace("-", "_").lower() for d in plan.CARRIED_DISTS)}
    assert manifest["bytes"] < 100e6  # the wheels are most of it (48 MB on 2026-11-28)
    (line,) = [ln for ln in (carry / "README.txt").read_text().splitlines()
               if "pip install --no-index" in ln]
    install = [str(carry) + a.removeprefix("THIS_DIRECTORY") if a.startswith("THIS_DIRECTORY")
               else a for a in words(line.split(") ", 1)[1])]
    assert install[:3] == ["python3", "-m", "pip"] and "--no-index" in install
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", python, "--quiet",
                          *install[3:]], capture_output=True, text=True, check=False,
                         cwd=tmp_path, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert pip.returncode == 0, pip.stderr[-3000:]
    bare = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
            "RUNNER_PROGRESS": "off", "RUNNER_CACHE_DIR": str(carry / "cache")}
    assert shutil.which("iree-compile", path=bare["PATH"]) is None

    def there(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, check=False, env=bare,
                              cwd=tmp_path, timeout=600)

    found = there(python, "-c", "import importlib.util as u, runner; print(runner.__file__, "
                  "[u.find_spec(m) is None for m in ('iree.compiler', 'torch')])")
    assert found.stdout.split() == [
        str(venv / "lib" / f"python{THIS_PYTHON}" / "site-packages" / "runner" /
            "__init__.py"), "[True,", "True]"], found.stderr
    results = tmp_path / "results"
    planned = there(str(venv / "bin" / "runner"), "gpu-check", "run", "--carry", str(carry),
                    "--out", str(results), "--dry-run")
    assert planned.returncode == 0, planned.stderr[-3000:]
    benches = [a for a in commands(planned.stdout) if a[3:4] == ["bench"]]
    assert len(benches) == len([s for s in manifest["steps"] if "batch_size" in s
                                and s["kind"] != plan.MLPERF])
    assert not results.exists()
    rendered = there(str(venv / "bin" / "runner"), "run", "--profile", "tiny", "--count", "2",
                     "--no-score", "--out", str(tmp_path / "there"))
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    assert "compiled elsewhere" in rendered.stderr

    def images(run: Path) -> dict[int, str]:
        data = json.loads((run / "dataset.json").read_text())
        return {s["qsl_idx"]: s["sha256"] for s in data["samples"]}

    reference = images(carry / "tiny-cpu")
    assert images(tmp_path / "there") == {i: reference[i] for i in (0, 1)}
    # The check's image comparison, as its "tiny compare" step runs it (PSNR and SSIM
    # without torch).
    compared = there(str(venv / "bin" / "runner"), "compare", str(carry / "tiny-cpu"),
                     str(tmp_path / "there"), "--out", str(tmp_path / "compared"))
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert "2 common samples, 2 identical" in compared.stdout


@pytest.mark.slow
def test_compiles_into_one_carry_add_their_batch_sizes(tmp_path):
    """`prepare` compiles each batch size into the same carry: the carried model.json of a
    seeded export lists every one (and the VAE's own size), not the last alone."""
    pytest.importorskip("torch")
    carry = tmp_path / "carry"
    for batch in ("2", "1"):
        proc = cli("compile", "--profile", "tiny", "--set", "model=seeded:tiny", "--set",
                   "model.dtype=fp32", "--set", f"layout.batch_size={batch}",
                   "--set", "layout.vae_batch_size=1", "--out", carry, env=env())
        assert proc.returncode == 0, proc.stderr[-3000:]
    (model,) = (carry / "exports").glob("*/model.json")
    raw = json.loads(model.read_text())
    assert raw["batch_sizes"] == [1, 2] and raw["submodels"]["vae"]["batch_sizes"] == [1]
    for name in ("clip_bs1.mlir", "clip_bs2.mlir", "unet_bs2.mlir", "vae_bs1.mlir"):
        assert name in raw["files"] and (model.parent / name).is_file()
    assert "vae_bs2.mlir" not in raw["files"]


def test_the_ladder_stops_at_the_first_batch_that_runs_and_a_resume_keeps_what_passed(tmp_path):
    """Real commands as steps: the largest batch runs out of memory (IREE's message), the
    next runs, the smallest is not needed; a step that passed in the check being resumed
    (its files there) is kept, not run again."""
    from runner.gpucheck import check

    kept_file = tmp_path / "bench-fp16-bs1" / "bench.json"
    kept_file.parent.mkdir()
    kept_file.write_text("{}")
    previous = {"bench fp16 bs1": {"name": "bench fp16 bs1", "kind": plan.BENCH,
                                   "status": "passed", "outputs": [str(kept_file)]}}
    oom = "echo 'RESOURCE_EXHAUSTED; CUDA_ERROR_OUT_OF_MEMORY' >&2; exit 1"
    todo = [plan.Step("device", plan.DEVICE),
            plan.Step("bench fp16 bs1", plan.BENCH, ["false"], [str(kept_file)]),
            *(plan.Step(f"bench fp32 bs{b}", plan.LADDER, argv,
                        params={"vae_dtype": "fp32", "batch_size": b})
              for b, argv in ((8, ["sh", "-c", oom]), (4, ["true"]), (2, ["false"])))]
    record = {"manifest": {"backend": "cpu", "chip": "host"}, "steps": [], "budget_s": 60}
    runner = steps.StepRunner(60, tmp_path / "logs", {}, say=print, min_start=1)
    check._steps(todo, previous, runner, record, tmp_path)
    assert [s.status for s in todo] == ["passed", "passed", "did not fit", "passed",
                                        "not needed"]
    assert todo[1].note == "kept from the run resumed" and todo[1].exit_code is None
    assert "RESOURCE_EXHAUSTED" in todo[2].note and todo[4].note == "a larger batch ran"
    assert record["device"].startswith("cpu: ") and record["gpu"]["tool"] is None
    done = json.loads((tmp_path / "gpu_check.json").read_text())
    assert done["largest_batch"] == 4
