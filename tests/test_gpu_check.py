"""scripts/gpu_check.sh: the GPU check's two commands, run as the lab engineer runs them.

The slow test prepares a carry and runs the check for real on this CPU (`--profile cpu`: the
same steps as on a GPU, the tiny model's images against themselves), in directories with
hostile names. The fast ones check the dry runs, the refusals, the budget on a real `sleep`
and a SIGTERM in the middle of a step."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.base import shellscript

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_check.sh"
HOSTILE = 'a b$(touch x)"\'q\nz'


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gpu_check = load_script()


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), RUNNER_PROGRESS="off")


def check(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env(),
                          timeout=timeout, cwd=REPO)


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
            out.append(["python", *argv[1:]] if argv[1] == "-m" else argv)
    return out


def fake_carry(carry: Path, profile: str = "cpu") -> None:
    """A carry's manifest alone: enough for `run` to plan (its steps compile what is missing,
    on this machine with a compiler)."""
    carry.mkdir(parents=True)
    (carry / "gpu_check.json").write_text(json.dumps({
        "kind": "gpu_check_carry", "profile": profile, "model": "tiny-sdxl", "backend": "cpu",
        "chip": "host", "batch_sizes": [1], "vae_dtypes": ["fp32", "fp16"],
        "stages": ["clip", "unet_step", "vae"], "tiny_sets": [], "tiny_count": 32,
        "seeded_exports": []}))


def test_prepare_dry_run_prints_every_command_and_writes_nothing(tmp_path):
    carry = tmp_path / HOSTILE
    proc = check("prepare", "--profile", "h100-seeded", "--out", str(carry), "--dry-run")
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
    version = gpu_check.runtime_version()
    assert f"iree-base-runtime=={version}" in pip and "--only-binary=:all:" in pip
    assert pip[pip.index("--python-version") + 1] == "3.12"
    assert pip[pip.index("-d") + 1] == str(carry / "wheels")
    assert not carry.exists() and not (tmp_path / "x").exists() and not (REPO / "x").exists()


def test_prepare_of_tiny_takes_the_models_batch_sizes(tmp_path):
    proc = check("prepare", "--profile", "tiny", "--out", str(tmp_path / "c"), "--dry-run",
                 "--no-wheels")
    assert proc.returncode == 0, proc.stderr
    sizes = [a[a.index("--set") + 3] for a in commands(proc.stdout) if "model.vae_dtype=fp32" in a]
    assert sizes == ["layout.batch_size=1", "layout.batch_size=2"]
    assert "pip" not in proc.stdout
    bad = check("prepare", "--profile", "tiny", "--out", str(tmp_path / "c"), "--dry-run",
                "--batch-sizes", "8")
    assert bad.returncode == 2 and "--batch-sizes" in bad.stderr and "fix:" in bad.stderr


def test_run_dry_run_prints_every_command_and_writes_nothing(tmp_path):
    carry, results = tmp_path / f"c {HOSTILE}", tmp_path / f"r {HOSTILE}"
    fake_carry(carry)
    proc = check("run", "--carry", str(carry), "--out", str(results), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line and line[0] != "#"]
    cache = f"RUNNER_CACHE_DIR={shellscript.quote(str(carry / 'cache'))} "
    runner_lines = [line for line in lines if " -m runner " in line]
    assert runner_lines and all(line.startswith(cache) for line in runner_lines)
    argvs = commands(proc.stdout)
    for v in ("fp32", "fp16"):
        assert ["python", "-m", "runner", "bench", "--profile", "cpu", "--set",
                f"model.vae_dtype={v}", "--devices", "0", "--cpd", "1", "--batch-size", "1",
                "--vae-batch-size", "1", "--count", "2", "--stage", "clip", "--stage",
                "unet_step", "--stage", "vae", "--repetitions", "2", "--dispatches", "1",
                "--out", str(results / f"bench-{v}-bs1")] in argvs
    assert ["python", "-m", "runner", "compare", str(carry / "tiny-cpu"),
            str(results / "tiny-device"), "--out", str(results / "tiny-compare")] in argvs
    assert not results.exists() and not (carry / "cache").exists()


@pytest.mark.parametrize("case", ["missing", "no manifest", "foreign"])
def test_run_refuses_what_is_not_a_carry(tmp_path, case):
    carry = tmp_path / "carry"
    if case != "missing":
        carry.mkdir()
    if case == "foreign":
        (carry / "gpu_check.json").write_text('{"kind": "bench"}')
    proc = check("run", "--carry", str(carry), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --carry ") and "fix: " in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


@pytest.mark.parametrize("budget", ["0", "-5", "nan", "ten"])
def test_a_bad_budget_names_the_flag(tmp_path, budget):
    fake_carry(tmp_path / "carry")
    proc = check("run", "--carry", str(tmp_path / "carry"), "--out", str(tmp_path / "r"),
                 f"--budget={budget}")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --budget: ")
    assert "fix: " in proc.stderr and not (tmp_path / "r").exists()


def test_the_budget_stops_a_running_step_and_skips_the_rest(tmp_path):
    """A real `sleep` past the budget is stopped (SIGTERM) and waited for; the next step is
    not started."""
    runner = gpu_check.StepRunner(budget=1.5, logs=tmp_path / "logs", env={}, min_start=0.5,
                                  grace=2)
    t0 = time.monotonic()
    first = runner.run(gpu_check.Step("sleep", ["sleep", "30"]))
    assert first.status == "failed" and "budget" in first.note
    assert first.exit_code == -signal.SIGTERM and time.monotonic() - t0 < 10
    from runner.base.procs import descendants
    assert not [p for p in descendants() if p.alive()]
    second = runner.run(gpu_check.Step("after", ["true"]))
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
    proc = subprocess.Popen([str(SCRIPT), "run", "--carry", str(carry), "--out", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    summary = results / "gpu_check.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if summary.is_file():
            steps = json.loads(summary.read_text())["steps"]
            if any(s["name"] == "tiny on the device" and s["status"] == "running"
                   for s in steps):
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the tiny step did not start")
    time.sleep(1.5)  # the child runner is importing or compiling
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "stopped by SIGTERM" in err
    done = json.loads(summary.read_text())
    assert done["status"] == "interrupted: SIGTERM" and done["exit_code"] == 143
    by_name = {s["name"]: s for s in done["steps"]}
    assert by_name["device"]["status"] == "passed"
    assert by_name["tiny on the device"]["status"] == "interrupted"
    assert "bench fp32 bs1" not in by_name
    assert (results / "gpu_check.md").is_file()
    assert not _running(str(results)), "a child of the check outlived it"


@pytest.mark.slow
def test_prepare_then_run_on_this_cpu(tmp_path):
    carry, results = tmp_path / f"carry {HOSTILE}", tmp_path / f"results {HOSTILE}"
    prep = check("prepare", "--profile", "cpu", "--batch-sizes", "1", "--no-wheels",
                 "--out", str(carry))
    assert prep.returncode == 0, prep.stderr[-3000:]
    manifest = json.loads((carry / "gpu_check.json").read_text())
    assert manifest["batch_sizes"] == [1] and manifest["vae_dtypes"] == ["fp32", "fp16"]
    assert (carry / "cache" / "vmfb").is_dir() and (carry / "tiny-cpu" / "run.json").is_file()
    run = check("run", "--carry", str(carry), "--out", str(results), "--budget", "900")
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((results / "gpu_check.json").read_text())
    assert summary["status"] == "passed"
    assert all(s["status"] == "passed" for s in summary["steps"])
    assert summary["tiny"]["verdict"] == "within 1 LSB" and summary["tiny"]["common"] == 32
    benches = {}
    for v in ("fp32", "fp16"):
        bench = json.loads((results / f"bench-{v}-bs1" / "bench.json").read_text())
        assert bench["model_precision"]["vae_dtype"] == {"fp32": "float32", "fp16": "float16"}[v]
        benches[v] = {s["stage"]: s["latency_ms"]["median_ms"] for s in bench["stages"]}
        row = next(r for r in summary["bench"] if r["vae_dtype"] == v)
        assert row["images_per_s"] == bench["best"]["samples_per_s"] > 0
        assert row["stage_ms"] == benches[v]
        assert 0 < row["dispatch_share"]["vae"] <= 1
    ratio = summary["vae_fp16_over_fp32"]["bs1"]
    assert ratio > 0 and ratio == round(benches["fp16"]["vae"] / benches["fp32"]["vae"], 4)
    md = (results / "gpu_check.md").read_text()
    assert "within 1 LSB" in md and f"bs1: {ratio:.3f}" in md
    assert "published, not measured" in md and "2.26" in md
    # the same --out again is refused, naming --resume; --resume keeps what passed (its
    # carry as recorded) and runs nothing again
    refused = check("run", "--carry", str(carry), "--out", str(results))
    assert refused.returncode == 2 and "--resume" in refused.stderr
    again = check("run", "--resume", str(results))
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("kept (passed before)") == len(summary["steps"])


@pytest.mark.slow
def test_compiles_into_one_carry_add_their_batch_sizes(tmp_path):
    """`prepare` compiles each batch size into the same carry: the carried model.json of a
    seeded export lists every one (and the VAE's own size), not the last alone."""
    pytest.importorskip("torch")
    carry = tmp_path / "carry"
    for batch in ("2", "1"):
        proc = subprocess.run([sys.executable, "-m", "runner", "compile", "--profile", "tiny",
                               "--set", "model=seeded:tiny", "--set", "model.dtype=fp32",
                               "--set", f"layout.batch_size={batch}",
                               "--set", "layout.vae_batch_size=1", "--out", str(carry)],
                              capture_output=True, text=True, env=env(), timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
    (model,) = (carry / "exports").glob("*/model.json")
    raw = json.loads(model.read_text())
    assert raw["batch_sizes"] == [1, 2] and raw["submodels"]["vae"]["batch_sizes"] == [1]
    for name in ("clip_bs1.mlir", "clip_bs2.mlir", "unet_bs2.mlir", "vae_bs1.mlir"):
        assert name in raw["files"] and (model.parent / name).is_file()
    assert "vae_bs2.mlir" not in raw["files"]
