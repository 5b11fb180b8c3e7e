"""Finding IREE's tools without an activated venv: --iree-tools / $IREE_TOOL_PATH, then PATH,
then the installed iree-base-compiler / iree-base-runtime packages, each resolved tool and
the reason shown by `runner --version`. Runs `python -m runner` with a PATH that holds no
IREE tool, as `/path/to/venv/bin/runner` does when the venv is not activated."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest
from cli_support import Ran, cli
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.base.iree_tools import REPORTED, find_tool, json_lines

BARE_PATH = "/usr/bin:/bin"  # system dirs: no IREE tool, no venv bin dir


def package_paths() -> dict[str, str]:
    """Where IREE's own Python packages say their tools are (what the console scripts
    `iree-compile` / `iree-run-module` exec)."""
    from iree._runtime import libs
    from iree.compiler.tools.binaries import find_tool as compiler_tool

    out = {name: os.path.normpath(compiler_tool(name)) for name in ("iree-compile", "iree-opt")}
    for name in ("iree-run-module", "iree-benchmark-module"):
        out[name] = os.path.join(libs.library_path, name)
    return out


def runner(*args: str, path: str = BARE_PATH, tool_path: str | None = None,
           cache: Path | None = None) -> Ran:
    env = {k: v for k, v in os.environ.items() if k != "IREE_TOOL_PATH"}
    env.update(PATH=path, PYTHONPATH=str(REPO))
    if tool_path is not None:
        env["IREE_TOOL_PATH"] = tool_path
    if cache is not None:
        env["RUNNER_CACHE_DIR"] = str(cache)
    return cli(*args, env=env, cwd=REPO)


def tool_lines(out: str) -> dict[str, str]:
    return {line.split(":")[0].split()[0]: line for line in out.splitlines()
            if line.startswith(REPORTED)}


def wrapper_dir(directory: Path, name: str, real: str) -> Path:
    """A tools dir holding `name`: a script that notes each call, then execs the real tool."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / name
    script.write_text(f'#!/bin/sh\necho "$@" >> "{directory}/calls.log"\nexec "{real}" "$@"\n')
    script.chmod(0o755)
    return directory


def test_without_the_venv_on_path_the_installed_packages_tools_are_used(tmp_path):
    assert all(shutil.which(t, path=BARE_PATH) is None for t in REPORTED)
    expected = package_paths()
    proc = runner("--version")
    assert proc.returncode == 0, proc.stderr
    lines = tool_lines(proc.stdout)
    assert set(lines) == set(REPORTED)
    for name, path in expected.items():
        package = "iree.compiler" if name in ("iree-compile", "iree-opt") else "iree.runtime"
        assert f": {path} (from {package}: " in lines[name], lines[name]
        assert "not on PATH" in lines[name] and "$IREE_TOOL_PATH not set" in lines[name]
    # The exact compile commands name the package's compiler.
    proc = runner("compile", "--profile", "tiny", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(expected["iree-compile"] + " ")


def test_a_real_compile_without_the_venv_on_path(tmp_path):
    """The case the venv-less `runner run` stopped at: iree-compile runs, found through the
    installed package (a 3-op module: seconds, not the tiny model's minute)."""
    mlir = tmp_path / "add.mlir"
    mlir.write_text("func.func @add(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {\n"
                    "  %0 = arith.addf %a, %b : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")
    code = ("import sys; from pathlib import Path; from runner.model.compile import compile_mlir; "
            "r = compile_mlir(Path(sys.argv[1]), ('--iree-hal-target-device=local', "
            "'--iree-hal-local-target-device-backends=llvm-cpu')); print(r.command[0]); "
            "print(r.vmfb)")
    env = {k: v for k, v in os.environ.items() if k != "IREE_TOOL_PATH"}
    env.update(PATH=BARE_PATH, PYTHONPATH=str(REPO), RUNNER_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code, str(mlir)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    compiler, vmfb = proc.stdout.split()
    assert compiler == package_paths()["iree-compile"]
    assert Path(vmfb).stat().st_size > 0


def test_override_dir_comes_first_and_is_used(tmp_path):
    real = package_paths()["iree-compile"]
    tools = wrapper_dir(tmp_path / "tools dir", "iree-compile", real)
    proc = runner("--iree-tools", str(tools), "--version")
    assert proc.returncode == 0, proc.stderr
    lines = tool_lines(proc.stdout)
    assert f": {tools / 'iree-compile'} (from --iree-tools: iree-compile is in {tools})" \
        in lines["iree-compile"]
    # A tool the directory lacks falls through (IREE's own lookup does the same), and says so.
    assert "not in --iree-tools, not on PATH" in lines["iree-run-module"]
    assert (tools / "calls.log").read_text().splitlines() == ["--version"]  # it really ran
    # $IREE_TOOL_PATH (IREE's variable) does the same, named as such, and beats PATH.
    on_path = wrapper_dir(tmp_path / "on-path", "iree-compile", real)
    proc = runner("compile", "--profile", "tiny", "--dry-run", tool_path=str(tools),
                  path=f"{on_path}:{BARE_PATH}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"'{tools / 'iree-compile'}' ")
    proc = runner("--version", tool_path=str(tools))
    assert "(from $IREE_TOOL_PATH: iree-compile is in" in tool_lines(proc.stdout)["iree-compile"]


def test_path_wins_over_the_packages(tmp_path):
    """A build's tools first on PATH (the harness images, build-dir:/source: builds) are
    used, not the wheel installed beside them."""
    tools = wrapper_dir(tmp_path / "build" / "tools", "iree-compile",
                        package_paths()["iree-compile"])
    proc = runner("--version", path=f"{tools}:{BARE_PATH}")
    assert proc.returncode == 0, proc.stderr
    line = tool_lines(proc.stdout)["iree-compile"]
    assert f": {tools / 'iree-compile'} (from PATH: " in line


def test_the_packages_own_console_scripts_on_path_start_their_binaries(tmp_path):
    """An activated venv puts the IREE packages' console scripts first on PATH; each is a
    Python program that starts its package's binary. The runner starts that binary itself
    (and says why); a script of the same name that the packages did not install still wins
    (test_path_wins_over_the_packages)."""
    scripts = Path(sysconfig.get_path("scripts"))
    assert (scripts / "iree-compile").read_bytes()[:2] == b"#!"  # a Python console script
    expected = package_paths()
    proc = runner("--version", path=f"{scripts}:{BARE_PATH}")
    assert proc.returncode == 0, proc.stderr
    lines = tool_lines(proc.stdout)
    for name, path in expected.items():
        package = "iree.compiler" if name in ("iree-compile", "iree-opt") else "iree.runtime"
        assert f": {path} (from {package}: " in lines[name], lines[name]
        assert (f"first {name} on PATH, {scripts / name}, is the installed {package} "
                "package's console script, which runs this)") in lines[name]
    proc = runner("compile", "--profile", "tiny", "--dry-run", path=f"{scripts}:{BARE_PATH}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(expected["iree-compile"] + " ")


def test_a_process_that_has_not_imported_the_runtime_finds_its_binaries():
    """A fresh process that has not imported iree.runtime (each `runner bench` the GPU check
    starts) finds the runtime package's binaries too, from its console scripts on PATH or
    from the package alone: not the scripts, a Python process around each of the hundreds
    of iree-benchmark-executable calls one dispatch replay makes."""
    scripts = Path(sysconfig.get_path("scripts"))
    names = ("iree-benchmark-executable", "iree-dump-replay", "iree-benchmark-module",
             "iree-profile")
    code = ("import sys; from runner.base.iree_tools import find_tool; "
            "print(*(find_tool(n).path for n in sys.argv[1:]), 'iree.runtime' in sys.modules, "
            "sep='\\n')")
    from iree._runtime import libs
    for path in (f"{scripts}:{BARE_PATH}", BARE_PATH):
        env = {k: v for k, v in os.environ.items() if k != "IREE_TOOL_PATH"}
        env.update(PATH=path, PYTHONPATH=str(REPO))
        proc = subprocess.run([sys.executable, "-c", code, *names], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        *found, imported = proc.stdout.splitlines()
        assert imported == "False"
        assert found == [os.path.join(libs.library_path, n) for n in names], path


def test_missing_override_dir_is_a_clear_error(tmp_path):
    missing = tmp_path / "no such dir"
    proc = runner("--iree-tools", str(missing), "compile", "--profile", "tiny", "--dry-run")
    assert proc.returncode == 2
    assert f"--iree-tools: {missing} is not a directory" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = runner("compile", "--profile", "tiny", "--dry-run", tool_path=str(missing))
    assert proc.returncode == 2 and f"$IREE_TOOL_PATH: {missing} is not a directory" \
        in proc.stderr
    # --version reports it per tool instead of stopping
    proc = runner("--version", tool_path=str(missing))
    assert proc.returncode == 0 and "iree-compile: $IREE_TOOL_PATH:" in proc.stdout


def test_a_tool_nowhere_names_every_place_searched(monkeypatch):
    monkeypatch.delenv("IREE_TOOL_PATH", raising=False)
    monkeypatch.setenv("PATH", BARE_PATH)
    with pytest.raises(RunnerError, match="not set, not on PATH, and no installed IREE "
                                          "package ships it") as e:
        find_tool("iree-no-such-tool")
    assert "--iree-tools DIR" in str(e.value) and "IREE_TOOL_PATH" in str(e.value)


def test_json_lines_reads_a_tools_stream_and_names_how_to_reproduce_its_failures(tmp_path):
    """The one reader of IREE tools' JSON-lines output (iree-profile export, iree-dump-replay):
    a line that is not JSON and a failing tool are errors giving the command to rerun."""
    with pytest.raises(RunnerError) as not_json:
        list(json_lines(["iree-compile", "--version"], "the compiler"))
    assert "iree-compile wrote a line that is not JSON" in str(not_json.value)
    assert "run `iree-compile --version` by hand" in not_json.value.fix
    damaged = tmp_path / "it's damaged.ireeprof"
    damaged.write_bytes(b"\x00not a profile\n" * 8)
    argv = ["iree-profile", "export", "--format=ireeperf-jsonl", "--output=-", str(damaged)]
    with pytest.raises(RunnerError) as failed:
        list(json_lines(argv, str(damaged)))
    assert "iree-profile failed (exit " in str(failed.value)
    assert failed.value.fix == "reproduce with: " + shlex.join(argv)  # the name quoted


LOUD_TOOL = """#!/bin/sh
head -c 300000 /dev/zero | tr '\\0' w >&2
echo '{"row": 1}'
echo 'the last words' >&2
exit 3
"""


def test_json_lines_reads_a_tool_that_writes_more_to_stderr_than_a_pipe_holds(tmp_path,
                                                                             monkeypatch):
    """300 KB of warnings before its first row: read through a second pipe after stdout, the
    tool would block on the full stderr pipe and the reader on stdout, for ever."""
    tool = tmp_path / "iree-profile"
    tool.write_text(LOUD_TOOL)
    tool.chmod(0o755)
    monkeypatch.setenv("IREE_TOOL_PATH", str(tmp_path))
    got: list[object] = []

    def read() -> None:
        with pytest.raises(RunnerError) as failed:
            for row in json_lines(["iree-profile", "export"], "a profile"):
                got.append(row)
        got.append(failed.value)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "json_lines waits on the tool, and the tool on it"
    row, error = got
    assert row == {"row": 1}
    assert "iree-profile failed (exit 3)" in str(error) and "the last words" in str(error)


def test_a_venvs_bin_as_the_override_dir_runs_its_binaries_not_its_scripts():
    """A venv's `bin/` named by --iree-tools (or $IREE_TOOL_PATH) holds IREE's console
    scripts, which look their binary up on $IREE_TOOL_PATH first: exported as it was, each
    found itself there and started itself again, without end (1,150 processes and 22 GB in 15
    minutes). The runner runs, and exports, the directories of the binaries the scripts
    start. (Its own process group, killed whole on a time-out: a regression must not leave a
    fork bomb behind.)"""
    scripts = Path(sysconfig.get_path("scripts"))
    assert (scripts / "iree-compile").read_bytes()[:2] == b"#!"
    expected = package_paths()
    code = ("import os, runner.base.iree_tools as t; import sys; t.use_tool_dirs(sys.argv[1]); "
            "print(os.environ['IREE_TOOL_PATH']); print(t.compiler_info().version)")
    for how in ("flag", "env"):
        env = {**os.environ, "PATH": BARE_PATH, "PYTHONPATH": str(REPO)}
        if how == "env":
            env["IREE_TOOL_PATH"] = str(scripts)
            argv = [sys.executable, "-m", "runner", "--version"]
        else:
            env.pop("IREE_TOOL_PATH", None)
            argv = [sys.executable, "-c", code, str(scripts)]
        proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 0, err
        if how == "flag":
            exported = out.splitlines()[0].split(os.pathsep)
            assert os.path.dirname(expected["iree-compile"]) in exported
            assert all((Path(d) / "iree-compile").is_file() or (Path(d) / "iree-run-module")
                       .is_file() for d in exported)
            assert not any((Path(d) / n).read_bytes()[:2] == b"#!" for d in exported
                           for n in os.listdir(d) if n.startswith("iree-compile"))
        else:
            lines = tool_lines(out)
            assert f": {expected['iree-compile']} (from $IREE_TOOL_PATH: " in \
                lines["iree-compile"], lines["iree-compile"]


def test_a_console_script_whose_binary_is_nowhere_is_refused(tmp_path):
    """An IREE console script copied out of its venv: the binary it starts is not beside
    its interpreter, so the directory is refused with the fix, before any tool runs."""
    bin_dir = tmp_path / "venv $(x)" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "iree-compile"
    script.write_text("#!/nowhere/bin/python\nimport sys\n"
                      "from iree.compiler.tools.scripts.iree_compile.__main__ import main\n")
    script.chmod(0o755)
    proc = runner("--iree-tools", str(bin_dir), "compile", "--profile", "tiny", "--dry-run")
    assert proc.returncode == 2, proc.stderr
    assert f"--iree-tools: {bin_dir} holds IREE's Python console scripts (iree-compile)" \
        in proc.stderr and "_mlir_libs" in proc.stderr and "Traceback" not in proc.stderr
