"""The `runner` command as a user meets it: help with examples and the exit-code table on
every subcommand, one spelling per option (old ones named), --version, shell completion, a
closed pipe, and a short run that reports as a labelled subset."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import xml.etree.ElementTree as ET

import pytest
from cli_support import as_from_a_terminal, cli, start_runner
from host_support import wait_for

from runner.base.errors import EXIT_INTERRUPTED
from runner.base.paths import ASSETS_DIR
from runner.base.steps import StepStatus
from runner.cli.context import PARSER_DEFAULTS, CommandContext
from runner.cli.grammar import (
    COMMAND_GROUPS,
    WORKFLOWS,
    documented,
    help_problems,
    subparsers_of,
    walk,
)
from runner.cli.main import build_parser, main
from runner.cli.output import lenient_if_resuming
from runner.rundir.directory import RunDir
from runner.rundir.store import SampleStore


def test_every_subcommand_follows_the_help_rule():
    """Examples, exit codes, help on every option: for every subcommand registered now,
    including those other modules add through their register()."""
    assert help_problems(build_parser()) == []


def test_every_command_is_handed_a_context_and_its_namespace_holds_its_flags_alone():
    """Every command's handler takes a CommandContext: what the CLI knows beside the flags
    (the handler, the command's name, its --out rule) is taken off argparse's Namespace
    into it, typed, for every command registered now."""
    parser = build_parser()
    commands = dict(walk(parser))
    for path, sub in commands.items():
        if sub.get_default("func") is None:
            continue
        chain = [parser, *(commands[path[:i]] for i in range(1, len(path) + 1))]
        own = {name for p in chain for name in [*(a.dest for a in p._actions), *p._defaults]}
        argv = [*path, "--resume", "somewhere"]  # (a command with an --out takes this alone)
        lenient_if_resuming(parser, argv)
        args, _ = parser.parse_known_args(argv if sub.get_default("out_spec") else [*path])
        ctx = CommandContext.parsed(args, list(path))
        assert ctx.prog == sub.prog and ctx.handler is sub.get_default("func"), path
        # (argparse: a command of commands' defaults reach its subcommands)
        spec = next((s for p in reversed(chain) if (s := p.get_default("out_spec"))), None)
        assert ctx.out_spec is spec and ctx.attempt is None, path
        assert ctx.argv == list(path) and ctx.command == " ".join(path), path
        assert not set(PARSER_DEFAULTS) & vars(ctx.args).keys(), path
        assert set(vars(ctx.args)) <= own, path  # flags and a command's own defaults


def test_every_subcommand_help_shows_examples_and_the_exit_codes(capsys):
    commands = dict(walk(build_parser()))
    assert len(commands) > 20 and ("bench", "goldens") in commands and ("completion",) in commands
    for path, parser in commands.items():
        with pytest.raises(SystemExit) as e:
            main([*path, "--help"])
        assert e.value.code == 0
        text = capsys.readouterr().out
        examples = text.split("examples:\n", 1)[1].split("\n\n", 1)[0]
        assert re.search(rf"^  (\w+=\S+ )?runner {path[0]}\b", examples, re.M), path
        for code, meaning in documented(parser).exits.rows():  # (the codes it declares)
            assert f"  {code}  {meaning}" in text, path
        assert "default: None" not in text, path


def test_every_command_is_in_exactly_one_workflow_group():
    """COMMAND_GROUPS names each registered subcommand, and nothing else: a new subcommand
    is one line there."""
    registered = list(next(subparsers_of(build_parser())).choices)
    assert len(registered) >= 19 and sorted(COMMAND_GROUPS) == sorted(registered)


def test_root_help_says_what_it_does_then_workflows_then_grouped_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: runner [-h] [--version] [--iree-tools DIR[:DIR...]] COMMAND "
                           "...\n\nrunner compiles "
                           "Stable Diffusion XL with IREE")
    assert "thin argparse layer" not in text and "runner.cli" not in text  # no maintainer talk
    workflows = text.split("\nworkflows:\n", 1)[1].split("\n\n", 1)[0]
    for title, commands in WORKFLOWS:
        assert f"  {title}:" in workflows and 2 <= len(commands) <= 4
        for command in commands:
            assert f"\n    {command}" in workflows
    assert [t for t, _ in WORKFLOWS] == [
        "validate an IREE build before a golden update", "a lab accuracy or benchmark run",
        "an MLPerf submission"]
    listing = text.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    headings = [line.strip() for line in listing if not line.startswith("    ")]
    assert headings == list(dict.fromkeys(COMMAND_GROUPS.values()))
    # Every command once, under its own heading, with its one-line help.
    listed = {}
    heading = ""
    for line in listing:
        if not line.startswith("    "):
            heading = line.strip()
        elif not line.startswith("     "):
            name = line.split()[0]
            assert name not in listed, name
            listed[name] = heading
    assert listed == COMMAND_GROUPS
    assert re.search(r"^    plan +print the worker table", "\n".join(listing), re.M)
    assert "exit codes:\n  0  passed" in text


def test_a_command_missing_from_the_groups_still_shows(capsys):
    parser = build_parser()
    sub = next(subparsers_of(parser))
    sub.add_parser("later", help="a command added without its COMMAND_GROUPS line")
    text = parser.format_help()
    assert "  other commands\n    later" in text


def test_one_default_profile_and_resume_only_where_there_is_an_out(capsys):
    for path in (["compile"], ["fetch"], ["plan"], ["generate"], ["bench"], ["validate"]):
        with pytest.raises(SystemExit):
            main([*path, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "YAML path (default: cpu)" in text, path
        assert ("--resume DIR" in text) == (path[0] in ("compile", "generate", "bench",
                                                        "validate")), path


def test_version_names_every_iree_and_where_it_comes_from():
    proc = cli("--version")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("runner 0.1.0 (") and lines[0].endswith("/runner)")
    import iree.compiler
    import iree.runtime

    from runner.base.iree_tools import compiler_info

    assert lines[1].startswith("iree.compiler 3.13") and iree.compiler.__file__ in lines[1]
    assert lines[2].startswith("iree.runtime 3.13") and iree.runtime.__file__ in lines[2]
    assert lines[3].startswith("iree-compile 3.13") and compiler_info().path in lines[3]


def test_completion_scripts_know_the_subcommands(tmp_path):
    proc = cli("completion", "bash")
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "runner.bash"
    script.write_text(proc.stdout)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # valid bash
    # Source it and ask for completions the way bash does after `runner be<TAB>`.
    ask = (f"source {script}; COMP_WORDS=(runner be); COMP_CWORD=1; COMP_LINE='runner be'; "
           "COMP_POINT=9; _shtab_runner; printf '%s\\n' \"${COMPREPLY[@]}\"")
    words = subprocess.run(["bash", "-c", ask], capture_output=True, text=True).stdout.split()
    assert words == ["bench"]
    zsh = cli("completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef runner")
    assert '"--require-full[fail (exit 1)' in zsh.stdout


def test_a_closed_pipe_ends_quietly():
    # `runner plan --profile mi325x | head -1`, piped as a shell would.
    plan = start_runner("plan", "--profile", "mi325x", text=False)
    head = subprocess.Popen(["head", "-1"], stdin=plan.stdout, stdout=subprocess.PIPE)
    plan.stdout.close()  # head alone holds the read end now
    first = head.communicate(timeout=120)[0].decode()
    assert plan.wait(timeout=120) == 0 and plan.stderr.read() == b""
    assert len(first.splitlines()) == 1 and "worker" in first
    # The reader gone before the first write: the write itself fails with EPIPE.
    child = start_runner("plan", "--profile", "mi325x", text=False)
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 0
    assert err == ""  # no BrokenPipeError traceback, no "Exception ignored"


def test_ctrl_c_after_its_reader_is_gone_still_ends_as_interrupted(tmp_path, tiny_compiled):
    """`runner run ... 2>&1 | tee log`, then Ctrl-C: it ends tee too, so the command's last
    message meets a closed pipe. The command exits 130 all the same, with its attempt
    recorded as interrupted (not 1, from a traceback nobody could read)."""
    out = tmp_path / "run"
    # Started as a shell at a terminal starts it: under `nohup ... &` SIGINT is ignored, and
    # the runner keeps an ignored signal ignored (the run then rightly finishes, exit 0).
    proc = start_runner("run", "--profile", "cpu", "--count", "256", "--no-score", "--out",
                        out, stderr=subprocess.STDOUT, preexec_fn=as_from_a_terminal)
    wait_for(lambda: (out / "samples").is_dir() and SampleStore(out).done_ids())
    proc.stdout.close()
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == EXIT_INTERRUPTED
    assert RunDir(out).load().attempts[-1].status is StepStatus.INTERRUPTED


def test_bad_input_exits_2_with_a_github_annotation(monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert main(["plan", "--profile", "cpu", "--set", "layout.cpd"]) == 2
    captured = capsys.readouterr()
    assert "error: --set: `--set layout.cpd` is not KEY=VALUE" in captured.err
    assert captured.out == ("::error title=runner plan::--set: `--set layout.cpd` is not "
                            "KEY=VALUE%0A  fix: e.g. --set target.chip=gfx950\n")
    monkeypatch.delenv("GITHUB_ACTIONS")
    assert main(["plan", "--profile", "cpu", "--set", "layout.cpd"]) == 2
    assert "::error" not in capsys.readouterr().out


@pytest.mark.slow
def test_a_short_run_completes_as_a_labelled_subset(tmp_path):
    """4 samples where the cpu profile's ranges were set for 32: scored, every report says
    so, exit 0; --require-full makes the same run a failure."""
    if shutil.which("iree-compile") is None:
        pytest.skip("needs the [compile] extra")
    pytest.importorskip("torch")
    run_dir = tmp_path / "smoke"
    proc = cli("run", "--profile", "cpu", "--count", "4", "--out", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    label = "subset of 4: not judged against the full-set ranges"
    assert "verdict: SUBSET (not judged" in proc.stdout and f"note: {label}" in proc.stdout
    scores = [x for x in proc.stdout.splitlines() if x.startswith(("FID ", "CLIP"))]
    # the statistics scoring read, where the profile says (seeded backbones: no weights)
    stats = ASSETS_DIR / "tiny" / "accuracy" / "fid_statistics.npz"
    assert f"read FID reference statistics: {stats}" in proc.stdout
    assert len(scores) == 2 and all("  not judged  (above low by" in x for x in scores), scores
    accuracy = json.loads((run_dir / "accuracy.json").read_text())
    assert accuracy["verdict"] == "subset" and label in accuracy["labels"]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "SUBSET" and not results["failures"]
    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("## 🔹 SUBSET") and "**Subset of 4:** not judged" in summary
    assert "NOT JUDGED (subset)" in (run_dir / "report.html").read_text()
    cases = {c.get("name"): c for c in ET.parse(run_dir / "junit.xml").getroot()
             .iter("testcase")}
    assert cases["fid_range"].find("skipped") is not None
    assert all(c.get("time") is not None for c in cases.values())

    proc = cli("run", "--resume", str(run_dir), "--rescore", "--require-full")
    assert proc.returncode == 1, proc.stderr
    assert "verdict: FAIL" in proc.stdout and "--require-full" in proc.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "FAIL" and "only 4 samples" in results["failures"][0]


@pytest.mark.slow
def test_a_run_scoring_one_metric_records_it_and_rescores_the_same(tmp_path):
    """`runner run --metrics clip` is `--set accuracy.metrics=[clip]`: recorded with the run,
    CLIP alone scored (only the seeded CLIP built, no FID statistics read, no 2048-d square
    root), FID named as not scored in the console and the reports; `--rescore` scores the
    recorded metric again."""
    if shutil.which("iree-compile") is None:
        pytest.skip("needs the [compile] extra")
    pytest.importorskip("torch")
    run_dir = tmp_path / "clip-only"
    proc = cli("run", "--profile", "cpu", "--count", "4", "--metrics", "clip", "--out",
               str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert "note: FID not scored (--metrics clip)" in proc.stdout
    recorded = json.loads((run_dir / "run.json").read_text())["profile_config"]
    assert recorded["accuracy"]["metrics"] == ["clip"]
    for _ in range(2):  # the run's own scoring, then --rescore
        accuracy = json.loads((run_dir / "accuracy.json").read_text())
        assert (accuracy["metrics"], accuracy["fid"]) == (["clip"], None)
        assert len(accuracy["clip_per_sample"]) == 4 and accuracy["statistics"]["path"] is None
        results = json.loads((run_dir / "results.json").read_text())
        assert results["scores"]["not_scored"] == ["fid"]
        assert junit_skip(run_dir, "fid_range").startswith("FID not scored")
        proc = cli("run", "--resume", str(run_dir), "--rescore")
        assert proc.returncode == 0, proc.stderr


def junit_skip(run_dir, name: str) -> str:
    case = next(c for c in ET.parse(run_dir / "junit.xml").getroot().iter("testcase")
                if c.get("name") == name)
    return case.find("skipped").get("message")
