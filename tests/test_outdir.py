"""What a command's --out may hold and what running into it again does (runner/base/outdir.py,
runner/cli/output.py): the attempt record written first, a user's files refused before any work
(dry runs too), another command's or other inputs' attempt refused naming what differs,
each rule (resumes / refuses) with its two ways out, one driver at a time, and an attempt
that wrote nothing leaving nothing behind."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from runner.base.errors import RunnerError
from runner.base.outdir import (
    LOCK,
    RECORD,
    REFUSES,
    RESUMES,
    Rerun,
    claim,
    differences,
    inputs_record,
)
from runner.base.steps import StepStatus
from runner.cli.grammar import GRAMMAR, NOT_INPUTS, subparsers_of, walk
from runner.cli.main import build_parser, main
from runner.cli.output import inputs_of

FAILED, FINISHED, INTERRUPTED = StepStatus.FAILED, StepStatus.FINISHED, StepStatus.INTERRUPTED

MEASURES = Rerun(REFUSES, "finished layouts")
GOES_ON = Rerun(RESUMES, "each finished test")


def test_a_new_attempt_is_recorded_before_anything_else(tmp_path):
    out = tmp_path / "new"
    attempt = claim(out, "bench", {"--count": 4}, ["bench", "--count", "4"], MEASURES)
    record = json.loads((out / RECORD).read_text())
    assert record["command"] == "bench" and record["argv"] == ["bench", "--count", "4"]
    assert record["inputs"] == {"--count": 4} and record["status"] == "running"
    assert record["cwd"] == os.getcwd() and (out / LOCK).is_file()
    attempt.record_part("layout:a", FINISHED, 2.0, {"samples_per_s": 1.5})
    (out / "bench.json").write_text("{}")
    attempt.end_with(0)
    record = json.loads((out / RECORD).read_text())
    assert record["status"] == FINISHED and record["attempts"][-1]["exit_code"] == 0
    assert record["steps"] == {"layout:a": {"key": "layout:a", "status": "finished",
                                            "seconds": 2.0, "detail": {"samples_per_s": 1.5}}}
    assert not (out / LOCK).exists()


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_users_files_are_refused_before_any_work(tmp_path, dry_run):
    out = tmp_path / "mine"
    (out / "empty" / "dirs").mkdir(parents=True)
    claim(out, "run", {}, [], MEASURES, dry_run=True)  # empty directories count as empty
    (out / "empty" / "notes.txt").write_text("mine")
    with pytest.raises(RunnerError, match=r"not `runner run`'s own \(empty/notes.txt\)"):
        claim(out, "run", {}, [], MEASURES, dry_run=dry_run)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "empty", "empty/dirs", "empty/notes.txt"]


def test_another_commands_out_dir_is_refused(tmp_path):
    claim(tmp_path / "o", "mlperf", {}, [], MEASURES).end_with(0)
    with pytest.raises(RunnerError, match="holds the output of `runner mlperf`, not of "
                                          "`runner bench`"):
        claim(tmp_path / "o", "bench", {}, [], MEASURES)


def test_other_inputs_are_named_and_paths_compare_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "user.conf"
    conf.write_text("a = 1\n")
    before = inputs_record({"--user-conf": "user.conf", "--count": 4}, str(tmp_path))
    same = inputs_record({"--user-conf": str(conf), "--count": 4}, "/")
    assert differences(before, same) == []  # a relative and an absolute spelling
    conf.write_text("a = 2\n")
    edited = inputs_record({"--user-conf": str(conf), "--count": 8}, "/")
    assert differences(before, edited) == [
        "--count: 4 in the attempt, 8 now", f"{conf}: changed since the attempt started"]
    out = tmp_path / "o"
    stopped = claim(out, "mlperf", {"--count": 4}, ["mlperf"], MEASURES)
    (out / "user.conf").write_text("")
    stopped.end(INTERRUPTED)
    with pytest.raises(RunnerError) as e:
        claim(out, "mlperf", {"--count": 8}, ["mlperf"], MEASURES)
    assert "--count: 4 in the attempt, 8 now" in str(e.value)
    assert f"`runner mlperf --resume {out}`, which runs `runner mlperf` again" in str(e.value)


def test_a_refusing_command_names_both_ways_out(tmp_path):
    out = tmp_path / "o"
    (out / "runs").mkdir(parents=True)
    first = claim(out, "bench", {}, ["bench"], MEASURES)
    (out / "runs" / "x.json").write_text("{}")
    first.end(INTERRUPTED, signal="SIGTERM")
    with pytest.raises(RunnerError) as e:
        claim(out, "bench", {}, ["bench"], MEASURES)
    assert "holds an interrupted `runner bench`" in str(e.value) and "stopped by SIGTERM" \
        in str(e.value)
    assert f"finish it with `runner bench --resume {out}`, or pass another --out" in str(e.value)
    resumed = claim(out, "bench", {}, ["bench"], MEASURES, resume=True)
    assert resumed.resumed and resumed.previous_status == INTERRUPTED
    resumed.end_with(0)
    with pytest.raises(RunnerError, match="holds a finished `runner bench`"):
        claim(out, "bench", {}, ["bench"], MEASURES)
    again = claim(out, "bench", {}, ["bench"], MEASURES, resume=True)
    assert again.nothing_to_do
    again.release()


def test_a_resuming_command_keeps_what_it_marked(tmp_path):
    out = tmp_path / "o"
    first = claim(out, "goldens generate", {}, [], GOES_ON)
    (out / "x.bin").write_bytes(b"x")
    first.record_part("test:a", FINISHED, 1.0, ["x.bin"])
    first.record_part("test:b", FAILED, 1.0, ["y.bin"])
    first.end(FAILED, error="boom")
    second = claim(out, "goldens generate", {}, [], GOES_ON)
    assert second.resumed and second.kept("test:a") == ["x.bin"]
    assert second.kept("test:b") is None and second.kept("test:c") is None
    assert second.kept("test:a", lambda files: (out / files[0]).is_file()) == ["x.bin"]
    (out / "x.bin").unlink()  # its output gone: done again, and no longer recorded finished
    assert second.kept("test:a", lambda files: (out / files[0]).is_file()) is None
    assert second.kept("test:a") is None
    second.end_with(0)
    record = json.loads((out / RECORD).read_text())
    assert [a["status"] for a in record["attempts"]] == [FAILED, FINISHED]


def test_one_driver_at_a_time(tmp_path):
    out = tmp_path / "o"
    claim(out, "run", {}, [], GOES_ON).end(INTERRUPTED)
    holder = claim(out, "run", {}, [], GOES_ON)  # this process, alive
    with pytest.raises(RunnerError, match="another driver holds this out dir: pid "
                                          f"{os.getpid()}"):
        claim(out, "run", {}, [], GOES_ON)
    holder.release()


def test_an_attempt_that_wrote_nothing_leaves_nothing(tmp_path):
    out = tmp_path / "a" / "b"
    claim(out, "generate", {"--count": 1}, [], GOES_ON).end_with(2, "bad --set")
    assert not (tmp_path / "a").exists() or not out.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    claim(kept, "generate", {}, [], GOES_ON).end(INTERRUPTED)
    assert kept.is_dir() and not list(kept.iterdir())  # made by the user: stays, empty


def test_a_refused_resume_leaves_the_directory_as_it_was(tmp_path):
    out = tmp_path / "o"
    first = claim(out, "goldens generate", {}, [], GOES_ON)
    (out / "x.bin").write_bytes(b"x")
    first.end_with(0)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    claim(out, "goldens generate", {}, [], GOES_ON).end_with(2, "bad --set")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    worked = claim(out, "goldens generate", {}, [], GOES_ON)
    (out / "y.bin").write_bytes(b"y")  # work was done: the failed attempt is recorded
    worked.end_with(2, "boom")
    record = json.loads((out / RECORD).read_text())
    assert [a["status"] for a in record["attempts"]] == [FINISHED, FAILED]


def test_the_cli_refuses_before_any_work(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    for argv in (["generate", "--profile", "tiny", "--count", "1", "--out", str(mine)],
                 ["calibrate", str(tmp_path / "no-run"), "--out", str(mine)],
                 ["report", str(tmp_path / "no-run"), "--out", str(mine)],
                 ["oracle", "--out", str(mine), "--samples", "0"]):
        assert main(argv) == 2, argv
        assert "keep.txt" in capsys.readouterr().err, argv
        assert [p.name for p in mine.iterdir()] == ["keep.txt"], argv


def test_resume_takes_the_recorded_command_line_and_refuses_other_flags(tmp_path, capsys):
    out = tmp_path / "new"
    argv = ["goldens", "check", str(Path(__file__).parent.parent / "goldens" / "tiny"),
            "-k", "clip", "--compile-only", "--out", str(out)]
    assert main(argv) == 0
    assert main(["goldens", "check", "--resume", str(out), "-k", "vae"]) == 2
    err = capsys.readouterr().err
    assert "-k: 'clip' in the attempt, 'vae' now" in err
    (out / "results.json").unlink()
    assert main(["goldens", "check", "--resume", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())["results"]
    assert results and all("clip" in r["name"] for r in results)  # the recorded -k
    assert main(["goldens", "check", "--resume", str(tmp_path / "other"), "--out", str(out)]) == 2
    assert "--out and --resume name two directories" in capsys.readouterr().err
    assert main(["goldens", "generate", "--resume", str(out)]) == 2
    assert "holds an attempt of `runner goldens check`" in capsys.readouterr().err


def test_a_gone_containers_locks_are_dropped_and_no_other(tmp_path):
    """A container killed while a `runner` in it held an out dir's lock: the lock names the
    container's host name, which no later process can check, so it is dropped by name."""
    from runner.base.dirlock import LockHolder, drop_locks_of

    for host, where in (("c0ffee123456", tmp_path / "a"), ("labnode7", tmp_path / "b" / "c")):
        where.mkdir(parents=True)
        (where / LOCK).write_text(json.dumps(LockHolder(host, 7, "then", "runner x").__dict__))
    assert drop_locks_of("c0ffee123456", [tmp_path], (LOCK,)) == [tmp_path / "a" / LOCK]
    assert (tmp_path / "b" / "c" / LOCK).is_file()


def test_an_attempts_inputs_are_read_off_its_commands_parser():
    """The inputs an attempt records (and a --resume compares) are the command's own options
    and positionals, from its parser: not what a parse adds besides them (`func`, `prog`,
    `out_spec`, the dest of every command of commands, `image_command` as much as
    `goldens_command`), and not the options that say where the work goes or how it is
    shown."""
    root = build_parser()
    choosers = {a.dest for p in [root, *(sub for _, sub in walk(root))]
                for a in subparsers_of(p)}
    assert {"command", "image_command", "goldens_command", "bench_command"} <= choosers
    assert GRAMMAR.keys() >= NOT_INPUTS
    added = argparse.Namespace(**dict.fromkeys(choosers, "x"), func=print, prog="runner x",
                               out_spec=object())
    commands = [(path, sub) for path, sub in walk(root) if sub.get_default("out_spec")]
    assert ("bench",) in [path for path, _ in commands]  # a command of commands itself
    for path, sub in commands:
        assert inputs_of(root, sub, added, only_given=True) == {}, path
        flags = set(inputs_of(root, sub, added))
        assert "--iree-tools" in flags and not flags & NOT_INPUTS, path
        assert not {f.lower() for f in flags} & choosers, path
    given = inputs_of(root, dict(commands)[("bench",)], root.parse_args(
        ["bench", "--profile", "tiny", "--out", "o", "--dry-run"]), only_given=True)
    assert given == {"--profile": "tiny"}
