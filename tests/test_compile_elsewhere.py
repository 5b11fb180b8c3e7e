"""Running where there is no compiler: `runner compile --out DIR` gathers the modules (and a
seeded export's files, less its weights) compiled here with the real iree-compile; a venv
holding only iree-base-runtime, numpy and the runner's small dependencies (no compiler, no
torch), with no iree-compile on PATH, runs from DIR alone: the vmfbs compiled elsewhere are
found and reported, a seeded model's weights are written from its spec byte-identical to the
exported ones, and the images are the ones the compiler's machine makes. No vmfb for a
module, or vmfbs of two compilers, are errors saying what to do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from cli_support import Ran, cli
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.base.iree_tools import compiler_info
from runner.base.paths import cache_dir

pytestmark = pytest.mark.slow

# What a worker needs (pyproject's `dependencies`), and nothing of the compiler or torch.
RUNTIME_ONLY = (f"iree-base-runtime=={version('iree-base-runtime')}", "numpy>=1.26",
                "pyyaml>=6", "regex>=2023", "shtab>=1.7")
SEEDED_TINY = ("--set", "model=seeded:tiny", "--set", "model.dtype=fp32")


@pytest.fixture(scope="session")
def runtime_venv() -> Path:
    """A venv with the runtime-only packages (pip, once; kept under the runner's cache
    across sessions, as the release wheels are)."""
    venv = cache_dir() / "test-venvs" / f"runtime-only-{version('iree-base-runtime')}"
    done = venv / ".complete"  # made where it lives: console scripts name their python
    if not done.is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install",
                               "--quiet", *RUNTIME_ONLY], capture_output=True, text=True,
                              check=False, timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
        done.touch()
    return venv


def no_compiler(venv: Path, cache: Path, *args: str, timeout: float = 900
                ) -> subprocess.CompletedProcess:
    """`runner ARGS` from the venv: PATH holds no iree-compile, and neither the compiler
    package nor torch can be imported."""
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "PYTHONPATH": str(REPO), "RUNNER_CACHE_DIR": str(cache), "RUNNER_PROGRESS": "plain"}
    assert shutil.which("iree-compile", path=env["PATH"]) is None
    return subprocess.run([str(venv / "bin" / "python"), "-m", "runner", *args], env=env,
                          capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          check=False)


def here(cache: Path, *args: str) -> Ran:
    """`runner ARGS` on this machine, with its compiler."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RUNNER_CACHE_DIR": str(cache),
           "RUNNER_PROGRESS": "plain"}
    return cli(*args, env=env, cwd=REPO)


def images(run: Path) -> dict[int, str]:
    data = json.loads((run / "dataset.json").read_text())
    return {s["qsl_idx"]: s["sha256"] for s in data["samples"]}


@pytest.fixture(scope="module")
def host_cache(tmp_path_factory) -> Path:
    """A cache of its own for exports and carries, sharing the real compile cache's vmfbs
    (compiled once per machine, as the session's tiny model is)."""
    cache = tmp_path_factory.mktemp("host-cache")
    (cache_dir() / "vmfb").mkdir(parents=True, exist_ok=True)
    (cache / "vmfb").symlink_to(cache_dir() / "vmfb")
    return cache


def test_venv_has_no_compiler_and_no_torch(runtime_venv):
    proc = subprocess.run([str(runtime_venv / "bin" / "python"), "-c",
                           "import importlib.util as u; print([u.find_spec(m) is None for m in "
                           "('iree.compiler', 'torch', 'iree.runtime')])"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[True, True, False]"


def test_run_without_a_compiler_uses_the_carried_modules(runtime_venv, host_cache, tmp_path):
    carry = tmp_path / "carry $(touch pwned) 'q'\nx"  # a hostile name, through every step
    made = here(host_cache, "compile", "--profile", "tiny", "--batch-sizes", "1",
                "--out", str(carry))
    assert made.returncode == 0, made.stderr[-3000:]
    assert f"carry: {carry}: 12 files" in made.stdout  # 4 vmfbs, their records, the index
    assert (f"model files not copied: {REPO / 'runner' / 'assets' / 'tiny'} (the runner's own "
            "assets") in made.stdout
    assert sorted(p.suffix for p in (carry / "vmfb").rglob("*") if p.is_file()) == \
        [".json"] * 8 + [".vmfb"] * 4

    mine = here(host_cache, "run", "--profile", "tiny", "--count", "2", "--no-score",
                "--out", str(tmp_path / "here"))
    assert mine.returncode == 0, mine.stderr[-3000:]
    version_text = no_compiler(runtime_venv, carry, "--version").stdout
    assert "iree-compile: `iree-compile` not found" in version_text
    theirs = no_compiler(runtime_venv, carry, "run", "--profile", "tiny", "--count", "2",
                         "--no-score", "--out", str(tmp_path / "there"))
    assert theirs.returncode == 0, theirs.stderr[-3000:]
    c = compiler_info()
    assert (f"no iree-compile on this machine: tiny-sdxl's modules were compiled elsewhere "
            f"by iree-compile {c.version} @ {c.commit}") in theirs.stderr
    assert "compiled for the CPU of the machine that compiled them" in theirs.stderr  # chip: host
    assert images(tmp_path / "there") == images(tmp_path / "here")
    run = json.loads((tmp_path / "there" / "run.json").read_text())
    compiled = run["compiled"]["compiled"]
    assert len(compiled) == 4 and all(r["elsewhere"] and str(carry) in r["vmfb"]
                                      for r in compiled)

    # `runner compile` there says where each module came from; `runner bench` measures the
    # stages with the runtime's own iree-benchmark-module and records the compiler.
    listed = no_compiler(runtime_venv, carry, "compile", "--profile", "tiny", "--batch-sizes",
                         "1")
    assert listed.returncode == 0 and listed.stdout.count(
        f"compiled elsewhere by iree-compile {c.version} @ {c.commit} -> {carry}") == 4
    bench = no_compiler(runtime_venv, carry, "bench", "--profile", "tiny", "--no-throughput",
                        "--stage", "vae", "--repetitions", "1", "--out",
                        str(tmp_path / "bench"))
    assert bench.returncode == 0, bench.stderr[-3000:]
    report = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert report["versions"]["compiler"] == {"version": c.version, "commit": c.commit,
                                              "elsewhere": True}
    assert "(modules compiled elsewhere)" in (tmp_path / "bench" / "bench.md").read_text()
    assert not list(tmp_path.rglob("pwned")) and not (REPO / "pwned").exists()


def test_seeded_model_runs_from_its_spec_without_torch(runtime_venv, host_cache, tmp_path):
    """`model: seeded:tiny`: the export (here) writes the weights from their spec; the carry
    holds the spec, not the weights; the machine without compiler or torch writes them
    byte-identical (model.json's sha256) and renders the same images. A second compile here
    exports nothing again."""
    carry = tmp_path / "carry"
    made = here(host_cache, "compile", *SEEDED_TINY, "--batch-sizes", "1", "--out", str(carry))
    assert made.returncode == 0, made.stderr[-3000:]
    again = here(host_cache, "compile", *SEEDED_TINY, "--batch-sizes", "1")
    assert again.returncode == 0 and "export:" not in again.stderr  # the same export key
    (export,) = (host_cache / "exports").glob("sdxl-seeded-tiny-float32-*/")
    (carried,) = (carry / "exports").iterdir()
    assert carried.name == export.name
    assert sorted(p.name for p in carried.glob("*.irpa")) == []
    assert (carried / "weights.spec.json").read_bytes() == \
        (export / "weights.spec.json").read_bytes()
    config = json.loads((carried / "model.json").read_text())
    assert config["weights_spec"] == "weights.spec.json" and "unet.irpa" in config["files"]

    mine = here(host_cache, "run", *SEEDED_TINY, "--count", "2", "--no-score",
                "--out", str(tmp_path / "here"))
    assert mine.returncode == 0, mine.stderr[-3000:]
    theirs = no_compiler(runtime_venv, carry, "run", *SEEDED_TINY, "--count", "2",
                         "--no-score", "--out", str(tmp_path / "there"))
    assert theirs.returncode == 0, theirs.stderr[-3000:]
    assert "weights: wrote clip.irpa, unet.irpa, vae.irpa" in theirs.stderr
    for name in ("clip.irpa", "unet.irpa", "vae.irpa"):
        assert (carried / name).read_bytes() == (export / name).read_bytes(), name
    assert images(tmp_path / "there") == images(tmp_path / "here")

    # Two exports of the same source there, and no exporter to tell which is current.
    shutil.copytree(carried, carried.with_name(carried.name[:-4] + "beef"))
    both = no_compiler(runtime_venv, carry, "compile", *SEEDED_TINY, "--batch-sizes", "1")
    assert both.returncode == 2
    assert "2 exports of seeded:tiny (float32) are in the export cache" in both.stderr
    assert "no torch here" in both.stderr and carried.name in both.stderr


def test_no_module_for_this_machine_names_the_compile_command(runtime_venv, tmp_path):
    proc = no_compiler(runtime_venv, tmp_path / "empty", "run", "--profile", "tiny",
                       "--count", "1", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2
    err = proc.stderr
    assert "no iree-compile on this machine, and the compile cache" in err
    assert "holds no vmfb of clip_bs1.mlir" in err
    assert "runner compile --profile tiny --batch-sizes 1 --out DIR" in err
    mlir = REPO / "runner" / "assets" / "tiny" / "clip_bs1.mlir"
    assert f"iree-compile {mlir} --iree-hal-target-device=local" in err


def test_modules_of_two_compilers_are_an_error_naming_both(release_wheels, host_cache,
                                                            tmp_path, monkeypatch):
    """The same MLIR and flags compiled by IREE 3.12.0 (a real release's iree-compile) and
    by this machine's: with no compiler to decide, both are named and neither is used."""
    from functools import partial

    from runner.base.iree_tools import _compiler_at
    from runner.config.profile import load_profile
    from runner.model.compile import compile_mlir, compiled_elsewhere

    carry = tmp_path / "carry"
    assert here(host_cache, "compile", "--profile", "tiny", "--batch-sizes", "1",
                "--out", str(carry)).returncode == 0
    wheel = next(w for w in release_wheels["3.12.0"] if "compiler" in w.name)
    tools = tmp_path / "iree-3.12"
    with zipfile.ZipFile(wheel) as z:
        for name in ("iree-compile", "iree-lld", "libIREECompiler.so"):
            (tools / name).parent.mkdir(parents=True, exist_ok=True)
            (tools / name).write_bytes(z.read(f"iree/compiler/_mlir_libs/{name}"))
    for name in ("iree-compile", "iree-lld"):
        (tools / name).chmod(0o755)
    old = _compiler_at(str(tools / "iree-compile"))
    assert old.version.startswith("3.12.0")
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(carry))
    target = load_profile("tiny").target
    mlir = REPO / "runner" / "assets" / "tiny" / "vae_bs1.mlir"
    flags_for = partial(target.flags_for, "vae")
    found = compiled_elsewhere(mlir, flags_for)  # one compiler's: used
    assert found.elsewhere and found.compiled_by == f"iree-compile {compiler_info().version} " \
        f"@ {compiler_info().commit}"
    compile_mlir(mlir, flags_for(old), compiler=old)
    with pytest.raises(RunnerError, match=r"holds 2 vmfbs of vae_bs1\.mlir") as e:
        compiled_elsewhere(mlir, flags_for)
    assert f"iree-compile {old.version} @ {old.commit}" in str(e.value)
    assert f"iree-compile {compiler_info().version}" in str(e.value)
    assert "runner compile --out DIR" in e.value.fix and "--iree-tools" in e.value.fix
