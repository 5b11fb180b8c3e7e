# ruff: noqa: F811  (the loopback Slurm cluster fixture from test_slurm is a parameter here)
"""Scripts the runner writes for a shell, executed with hostile names: they must do exactly
what they should (re-run into the right dir, run the intended argv) and nothing else.

Each payload would create a file named PWNED* if any part of a name became shell syntax;
every script is run from another cwd, and no such file may appear anywhere under tmp_path.
"""

from __future__ import annotations

import csv
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import cli
from test_slurm import slurm_cluster  # noqa: F401

from runner.base.shellscript import Script, quote, sanitize
from runner.batch.reproduce import reproduce_script
from runner.batch.slurm import batch_script_text
from runner.docker.container import make_spec, run_argv, run_command_text

HOSTILE = {
    "dollar": "run$(touch PWNED1)",
    "backticks": "run`touch PWNED2`",
    "newline": "run\ntouch PWNED3\n",
    "quotes": "it's \"$(touch PWNED4)\"",
    "quote-breakout": "'; touch PWNED5; echo '",
    "spaces-non-ascii": "a b  ünï 名前 \u202e",
}
# Real runs are a few seconds each, so each one's name carries several payloads.
RUN_NAMES = {
    "substitutions-spaces": f"{HOSTILE['dollar']} {HOSTILE['backticks']}",
    "newline": HOSTILE["newline"],
    "quotes-non-ascii": HOSTILE["quotes"] + HOSTILE["quote-breakout"]
    + HOSTILE["spaces-non-ascii"],
}


def pwned(root: Path) -> list[Path]:
    """Files a payload would have made (the run dirs only carry payloads in their names)."""
    return [p for p in root.rglob("PWNED*") if re.fullmatch(r"PWNED[0-9]", p.name)]


def recorder(bin_dir: Path, name: str, log: Path) -> Path:
    """A stand-in for a program at the argv boundary: appends its argv (JSON) to `log`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"with open({str(log)!r}, 'a') as f:\n"
                    f"    f.write(json.dumps([{name!r}, *sys.argv[1:]]) + '\\n')\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("word", [*HOSTILE.values(), "", "-", "back\\slash", "\x1b[31m",
                                  "\udcff", "tab\there"])
def test_quote_reads_back_exactly_on_one_line(word, tmp_path):
    quoted = quote(word)
    assert "\n" not in quoted
    out = subprocess.run(["bash", "-c", f"printf '%s' {quoted}"], capture_output=True,
                         cwd=tmp_path, check=True).stdout
    assert out == os.fsencode(word)
    assert not pwned(tmp_path)


def test_comments_cannot_end_their_line(tmp_path):
    script = Script()
    for text in HOSTILE.values():
        script.comment(text)
    script.run(["true"])
    text = script.text()
    assert len(text.splitlines()) == 2 + len(HOSTILE)
    assert all(line.startswith("# ") for line in text.splitlines()[1:-1])
    assert sanitize("a\nb\u2028c") == "a\\nb\\xe2\\x80\\xa8c"
    path = tmp_path / "s.sh"
    path.write_text(text)
    subprocess.run(["bash", str(path)], cwd=tmp_path, check=True)
    assert not pwned(tmp_path)


@pytest.fixture(scope="module")
def real_runner(tmp_path_factory) -> dict[str, str]:
    """PATH with `runner` as this interpreter's real CLI (what reproduce.sh calls)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    runner = bin_dir / "runner"
    runner.write_text(f'#!/bin/sh\nexec {quote(sys.executable)} -m runner "$@"\n')
    runner.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def pixel_hashes(run_dir: Path) -> list[tuple[int, str]]:
    """(qsl_idx, pixel sha256) per sample: the images' bytes, without the PNG's metadata."""
    data = json.loads((run_dir / "dataset.json").read_text())
    return [(s["qsl_idx"], s["sha256"]) for s in data["samples"]]


@pytest.mark.parametrize("case", RUN_NAMES)
def test_reproduce_sh_of_a_hostile_run_dir_reruns_it_and_nothing_else(case, tmp_path,
                                                                      real_runner):
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = runs / RUN_NAMES[case]
    made = cli("run", "--profile", "cpu", "--count", "2", "--no-score", "--out", run_dir,
               cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    script = run_dir / "reproduce.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    rerun = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                           cwd=elsewhere, env=real_runner, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert not pwned(tmp_path)
    again = runs / (RUN_NAMES[case] + "-reproduced")
    assert sorted(p.name for p in runs.iterdir()) == sorted([run_dir.name, again.name])
    assert list(elsewhere.iterdir()) == []
    assert pixel_hashes(again) == pixel_hashes(run_dir) and len(pixel_hashes(run_dir)) == 2
    assert json.loads((again / "run.json").read_text())["argv"][-1] == str(again.resolve())


def test_reproduce_sh_resolves_relative_arguments_where_the_run_was_made(tmp_path,
                                                                         real_runner):
    """A run made with relative `--ids` and `--out` re-runs from any directory: the recorded
    argv runs from the recorded cwd, and a relative OUT_DIR is the caller's."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    (work / "ids.txt").write_text("3 5\n")
    made = cli("run", "--profile", "cpu", "--ids", "ids.txt", "--no-score", "--out", "runs/a",
               cwd=work)
    assert made.returncode == 0, made.stderr
    rerun = subprocess.run(["bash", str(work / "runs" / "a" / "reproduce.sh"), "copy"],
                           capture_output=True, text=True, cwd=elsewhere, env=real_runner,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert [i for i, _ in pixel_hashes(elsewhere / "copy")] == [3, 5]
    assert pixel_hashes(elsewhere / "copy") == pixel_hashes(work / "runs" / "a")


def test_reproduce_sh_takes_a_hostile_out_dir_and_renders_image_and_slurm_safely(tmp_path):
    """The docker-image and Slurm parts, rendered from hostile values and executed with
    `runner` and `docker` recording their argv (a real image build is test_docker_run's)."""
    bad = HOSTILE["newline"] + HOSTILE["quotes"]
    run_dir = tmp_path / "runs" / HOSTILE["dollar"]
    run_dir.mkdir(parents=True)
    image = {"ref": f"img:{bad}", "id": "sha256:abc",
             "labels": {"org.iree-sdxl-runner.source": f"wheels:{bad}",
                        "org.iree-sdxl-runner.base-image": bad}}
    jobs = [{"job_id": bad, "reason": bad, "sbatch": ["sbatch", f"--job-name={bad}"],
             "script_text": f"#!/bin/bash\n# {sanitize(bad)}\nexec x {quote(bad)}"}]
    argv = ["run", "--profile", bad, "--out", "old", "--set", f"name={bad}"]
    text = reproduce_script(bad, argv=argv, profile=bad, samples=2, iree_version=bad,
                            image=image, slurm_jobs=jobs, worker_commands=[quote(bad)])
    script = run_dir / "reproduce.sh"
    script.write_text(text)
    log, bin_dir = tmp_path / "calls.jsonl", tmp_path / "bin"
    recorder(bin_dir, "runner", log)
    docker = recorder(bin_dir, "docker", log)
    # `docker image inspect` must print the recorded ID for the check to pass quietly.
    docker.write_text(docker.read_text() + "print('sha256:abc')\n")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = f"out {bad}"
    proc = subprocess.run(["bash", str(script), out], cwd=elsewhere, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert calls(log) == [
        ["runner", "image", "build", "--iree", f"wheels:{bad}", "--tag", f"img:{bad}",
         "--base-image", bad],
        ["docker", "image", "inspect", "--format", "{{.Id}}", f"img:{bad}"],
        # A relative OUT_DIR is the caller's: made absolute before anything else runs.
        ["runner", "run", "--profile", bad, "--set", f"name={bad}", "--out",
         str(elsewhere / out)],
    ]
    # Without OUT_DIR, the default is found next to the script, whatever the cwd.
    log.unlink()
    subprocess.run(["bash", str(script)], cwd=elsewhere, env=env, check=True)
    assert calls(log)[-1][-1] == f"{run_dir}-reproduced"
    subprocess.run(["bash", "reproduce.sh"], cwd=run_dir, env=env, check=True)
    assert calls(log)[-1][-1] == f"{run_dir}-reproduced"
    assert not pwned(tmp_path)


def test_sbatch_script_of_a_hostile_run_dir_runs_only_the_node_command(tmp_path,
                                                                      monkeypatch):
    """The batch script as Slurm would run it, with the node command's interpreter a
    recorder (the argv is the boundary; the loopback cluster runs it for real in
    test_slurm.py)."""
    log = tmp_path / "calls.jsonl"
    python = recorder(tmp_path / HOSTILE["spaces-non-ascii"], "python", log)
    monkeypatch.setattr(sys, "executable", str(python))
    for case, name in HOSTILE.items():
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        script = run_dir / "j0.sbatch"
        script.write_text(batch_script_text(run_dir, 0, f"reason {name}"))
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, case
        assert all(not line.startswith("#SBATCH") for line in script.read_text().splitlines())
        subprocess.run(["bash", str(script)], cwd=tmp_path / "runs", check=True)
        assert calls(log)[-1] == ["python", "-m", "runner.batch.node", "--run-dir",
                                  str(run_dir.resolve()), "--job", "0"], case
    assert len(calls(log)) == len(HOSTILE)
    assert not pwned(tmp_path)


def test_docker_run_line_of_a_hostile_mount_reads_back_as_its_argv(tmp_path):
    """The `docker run` line reproduce.sh shows for a worker: bash splits it into exactly
    run_argv, and docker's CSV `--mount` value still names the path (quotes and all)."""
    mounted = tmp_path / f"say \"hi\" {HOSTILE['dollar']} {HOSTILE['spaces-non-ascii']}"
    mounted.mkdir()
    spec = make_spec("img:tag", ["python3", "-m", "x", str(mounted)], "cpu",
                     mounts=[(str(mounted), False)], env={"K": HOSTILE["newline"]})
    line = run_command_text(spec, detach=False, remove=True)
    assert "\n" not in line
    out = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True,
                         cwd=tmp_path, check=True).stdout
    argv = run_argv(spec, detach=False, remove=True)
    assert out.split(b"\0")[:-1] == [os.fsencode(a) for a in argv]
    # docker's Go CSV reader rejects a bare `"` ("bare \" in non-quoted-field"): such a
    # field must be quoted whole, its quotes doubled.
    mount = argv[argv.index("--mount") + 1]
    doubled = str(mounted).replace('"', '""')
    assert mount == f'type=bind,"source={doubled}","target={doubled}"'
    assert next(csv.reader([mount])) == ["type=bind", f"source={mounted}", f"target={mounted}"]
    assert not pwned(tmp_path)


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_run_in_a_hostile_dir_keeps_its_node_logs_there(slurm_cluster, tmp_path):
    """sbatch expands %-patterns in --output: a run dir's own `%j`/`%a` stay literal, so the
    node task's log is in the run dir (where the submitter reads its tail)."""
    run_dir = tmp_path / "run %j %a %% $(touch PWNED7)"
    proc = cli("run", "--profile", "cpu", "--devices", "0", "--executor", "slurm", "--nodes",
               "1", "--cpus-per-node", "1", "--no-score", "--count", "2", "--out", run_dir,
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "logs" / "node-j0n0.log").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [run_dir.name]
    assert not pwned(tmp_path)
