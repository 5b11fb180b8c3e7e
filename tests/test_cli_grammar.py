"""One grammar across the CLI, walked on the real parser: an option two commands take is one
definition (runner.cli.grammar.GRAMMAR); every command that acts has a `--dry-run` that checks
its inputs, prints the exact commands and writes nothing; errors name the place at fault
(the flag, the `--set`, the file) and say how to fix it."""

from __future__ import annotations

import argparse
import ast
import os
from pathlib import Path

import pytest
from cli_support import cli
from docker_support import docker_client  # noqa: F401  (the fixture docker dry runs ask for)
from history_support import two_builds_store
from repo_support import REPO
from test_dry_runs import snapshot, warm
from test_goldens_upload import BASE, generated

from runner.base.outdir import REFUSES, Rerun
from runner.cli.grammar import (
    EXITS,
    GRAMMAR,
    PROFILE_COUNT,
    Exits,
    add_layout,
    add_out,
    add_samples,
    document,
    documented,
    grammar_problems,
    help_problems,
    listed_exits,
    options_of,
    shared,
    walk,
)
from runner.cli.main import build_parser, main
from runner.inputs.cliargs import COUNT

GOLDENS = REPO / "goldens"


# --- one spelling, one meaning ---------------------------------------------------------------
def test_every_option_two_commands_take_is_one_definition():
    assert grammar_problems(build_parser()) == []


def declarations(path: Path) -> list[tuple[str, int]]:
    """Each option or positional the module declares (`shared(x, ...)`,
    `x.add_argument(...)`) as its source without the parser it goes to, and its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "shared" and node.args:
            args = node.args[1:]
        elif isinstance(func, ast.Attribute) and func.attr == "add_argument":
            args = node.args
        else:
            continue
        found.append((ast.unparse(ast.Call(ast.Name("declare"), args, node.keywords)),
                      node.lineno))
    return found


def test_an_option_declared_alike_in_two_places_is_declared_once():
    """Two commands that take one option with one help are one declaration (an `add_*` of
    runner.cli.grammar, or its package's helper), so a change to it reaches both."""
    sites: dict[str, list[str]] = {}
    for path in sorted((REPO / "runner").rglob("*.py")):
        for source, line in declarations(path):
            sites.setdefault(source, []).append(f"{path.relative_to(REPO)}:{line}")
    twice = {source: where for source, where in sites.items() if len(where) > 1}
    assert twice == {}


def _toy(*commands):
    """A `runner`-like parser whose subcommands `commands` (name, fn(parser)) fill."""
    parser = argparse.ArgumentParser(prog="runner")
    sub = parser.add_subparsers(dest="command")
    for name, fill in commands:
        fill(sub.add_parser(name))
    return parser


def test_the_grammar_rule_fails_on_each_kind_of_drift():
    """What issue 34 found, rebuilt in miniature: `--time` meaning two things (defined
    twice), a shared option re-declared by hand, one definition in two types, two flags
    for one dest. Each is named."""
    problems = grammar_problems(_toy(
        ("run", lambda p: p.add_argument("--time", help="sbatch --time")),
        ("mlperf", lambda p: p.add_argument("--time", type=float, help="LoadGen's duration"))))
    assert any(p.startswith("--time is taken by runner mlperf, runner run but not defined "
                            "once") for p in problems)
    assert any(p.startswith("--time has 2 shapes") for p in problems)

    problems = grammar_problems(_toy(
        ("run", lambda p: add_out(p, "the run", Rerun(REFUSES, "every finished sample"))),
        ("bench", lambda p: p.add_argument("--out"))))
    assert any("--out is taken by runner bench, runner run but not defined once (not "
               "through runner.cli.grammar.shared) in runner bench" in p for p in problems)

    problems = grammar_problems(_toy(
        ("plan", lambda p: shared(p, "--cpd", type=int)),
        ("run", lambda p: shared(p, "--cpd"))))
    assert any(p.startswith("--cpd has 2 shapes") for p in problems)

    problems = grammar_problems(_toy(
        ("bisect", lambda p: p.add_argument("--install", dest="executor")),
        ("run", lambda p: p.add_argument("--executor"))))
    assert "--executor and --install both set `executor`: one meaning, one flag" in problems

    # A declared variant is one definition in another shape: bench's sweep lists.
    assert not [p for p in grammar_problems(_toy(("plan", add_layout),
                                                 ("bench", lambda p: add_layout(p, True))))
                if "shapes" in p or "not defined once" in p]


def test_the_grammar_rule_holds_one_default_per_option():
    """Issue 48's drift in miniature: --count defaulting to the profile's count in one
    command and to 4 in another (by its help, or by a value parsed in its place) is named;
    the same default everywhere is not."""
    def own_count(p):
        shared(p, "--count", type=COUNT, default=4, help="samples 0..N-1 (default: 4)")

    def count_of_4(p):
        shared(p, "--count", type=COUNT, default=4, help=f"samples (default: {PROFILE_COUNT})")

    problems = grammar_problems(_toy(("run", add_samples), ("bisect", own_count)))
    assert [p for p in problems if p.startswith("--count")] == [
        f"--count in runner bisect says its default is '4'; everywhere it is {PROFILE_COUNT} "
        "(runner.cli.grammar.ONE_DEFAULT)"]
    problems = grammar_problems(_toy(("run", add_samples), ("bisect", count_of_4)))
    assert f"--count in runner bisect defaults to 4, not None: {PROFILE_COUNT} is filled in " \
        "by the command" in problems
    assert not [p for p in grammar_problems(_toy(("run", add_samples), ("bench", add_samples)))
                if p.startswith("--count")]


# Each command that takes --count, its dry run's arguments and the line that shows how many
# samples it would make: with a profile whose `count` is 3, every one makes 3.
COUNT_DRY_RUNS = {
    "run": ([], "# runner run: 3 samples of profile three"),
    "bench": ([], "--count 3 --out"),
    "mlperf": (["--scenario", "offline", "--mode", "performance"],
               "QSL 3 samples, performance set 3"),
    "generate": ([], "# then 3 prompts"),
    "oracle": ([], "# oracle: 3 images (0-2)"),
    "validate": (["--iree", "wheels:3.13.0", "--goldens", "GOLDENS", "--to", "v2.0"],
                 "- profile: `three`, 3 samples"),
    "bisect": (["--good", "wheels:3.12.0", "--bad", "wheels:3.13.0", "--test", "images"],
               "--samples 0-2 --out"),
    "trend": (["wheels:3.12.0", "wheels:3.13.0"], "--samples 0-2 --out"),
    "nightly": (["--iree", "wheels:3.13.0"], "--count 3 --no-score --out"),
}


def test_every_command_that_takes_count_has_a_default_case():
    taking = {c.removeprefix("runner ") for c, a in options_of(build_parser())
              if "--count" in a.option_strings}
    assert taking == set(COUNT_DRY_RUNS)


@pytest.mark.parametrize("command", sorted(COUNT_DRY_RUNS))
def test_count_defaults_to_the_profiles_count_in_every_command(command, tmp_path, request):
    """--count left out makes the profile's `count` samples, in each command that takes it
    (`bench` made 32, `bisect` and `trend` 4, `generate` 4, `mlperf` MLPerf's 5000 on any
    profile): a dry run with a profile of count 3 shows 3, and writes nothing."""
    if command == "validate":
        request.getfixturevalue("docker_client")
    profile = tmp_path / "three.yaml"
    profile.write_text("name: three\nextends: cpu\ncount: 3\n")
    args, expected = COUNT_DRY_RUNS[command]
    out = tmp_path / "out"
    argv = [command, *[str(GOLDENS / "tiny") if a == "GOLDENS" else a for a in args],
            "--profile", str(profile), "--out", str(out), "--dry-run"]
    proc = cli(*argv, env=dict(os.environ, RUNNER_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout, proc.stdout
    assert not out.exists()


def test_the_help_rule_wants_every_default_and_cpd_spelled_out():
    parser = _toy(("bench", lambda p: (p.add_argument("--min-time", help="per repetition"),
                                       p.add_argument("--cpd", help="CPD, e.g. 1,2"))))
    problems = help_problems(parser)
    assert "runner bench: --min-time does not say its default" in problems
    assert ("runner bench: --cpd says CPD without 'pipeline processes per device ID'"
            in problems)


def _help(command: str, flag: str) -> str:
    return next(" ".join(a.help.split()) for c, a in options_of(build_parser())
                if c == f"runner {command}" and flag in a.option_strings)


def test_defaults_the_issue_found_missing_are_shown():
    assert "default: iree-benchmark-module's own" in _help("bench", "--min-time")
    assert "default: none" in _help("bench", "--warmup")
    assert "default: the user.conf's, else MLPerf's 600" in _help("mlperf", "--min-duration")
    assert "(default: 0)" in _help("goldens compare-steps", "--samples")
    assert "default: none: the console" in _help("goldens check", "--out")
    assert "pipeline processes per device ID (AMD's CPD)" in _help("mlperf", "--cpd")


@pytest.mark.parametrize("command", ["run", "bench", "mlperf"])
def test_slurm_options_are_one_group_and_time_is_gone(command):
    taken = {f for c, a in options_of(build_parser()) if c == f"runner {command}"
             for f in a.option_strings}
    assert {"--executor", "--nodes", "--slurm-partition", "--slurm-time", "--account",
            "--node-executor", "--cpus-per-node", "--sbatch-arg", "--max-resubmits",
            "--devices", "--cpd", "--batch-size", "--vae-batch-size", "--count"} <= taken
    assert "--time" not in taken


def test_layout_and_sample_groups_reach_mlperf_and_bench():
    taken = {c: {f for c2, a in options_of(build_parser()) if c2 == c for f in a.option_strings}
             for c in ("runner bench", "runner mlperf")}
    assert {"--vae-batch-size", "--samples", "--ids", "--partition"} <= taken["runner bench"]
    assert {"--devices", "--cpd", "--batch-size", "--partition"} <= taken["runner mlperf"]
    executors = {tuple(a.choices) for _, a in options_of(build_parser())
                 if "--executor" in a.option_strings}
    assert executors == {("local", "docker", "slurm")}


def test_resume_is_one_meaning():
    """`--resume DIR` (issue 35 adds it to every --out command): one definition."""
    assert GRAMMAR["--resume"] == "DIR holds an interrupted attempt of this command: finish it"
    resumes = [(c, a) for c, a in options_of(build_parser()) if "--resume" in a.option_strings]
    assert resumes and all(getattr(a, "grammar", None) == "--resume" for _, a in resumes)


@pytest.mark.parametrize("argv, says", [
    (["run", "--profile", "cpu", "--time", "2:00:00"], "use --slurm-time T"),
    (["mlperf", "--time", "60"], "mlperf's minimum test duration is --min-duration"),
    (["bisect", "--executor", "docker"], "use --install venv|docker"),
    (["trend", "--executor", "venv"], "use --install venv|docker"),
    (["image", "build", "--from", "wheels:3.13.0"], "use --iree BUILD"),
    (["bench", "--goldens"], "use runner bench goldens FILES|DIR"),
    (["score", "RUN", "--device", "cuda"], "use --torch-device cpu|cuda"),
    (["goldens", "upload", "D", "--container-url", BASE, "--execute"],
     "upload uploads; --dry-run prints the plan"),
    (["goldens", "compare-steps", "--prompt-id", "0"], "use --samples ID"),
    (["generate", "--prompts", "4", "--out", "x"], "use --count N"),
    (["run", "--allow-subset"], "use no flag"),
    (["bench", "--golden-repetitions", "3"], "use --repetitions"),
    (["bench", "goldens", "--golden-warmup", "0"], "use --warmup"),
    (["score", "RUN", "--batch-size", "16"], "use --images-per-pass N"),
])
def test_old_spellings_are_refused_in_one_line_naming_the_new(argv, says, capsys):
    """An old flag spelling (registered with `renamed`) is refused in one line naming what to
    use instead; the cases of every command stand in this one table."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "is no longer accepted" in err and says in err
    assert "usage:" not in err and len(err.splitlines()) == 2


def test_a_usage_error_is_the_one_line_and_where_to_look(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--profile", "cpu", "--bogus"])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("error: runner run: unrecognized arguments: --bogus\n"
                                       "  fix: see `runner run --help`\n")
    with pytest.raises(SystemExit):
        main(["bench", "goldens", "--sku"])
    assert capsys.readouterr().err == ("error: runner bench goldens: argument --sku: expected "
                                       "one argument\n  fix: see `runner bench goldens "
                                       "--help`\n")


def test_rocm_and_hip_are_one_backend(capsys):
    """`--backend hip` selects what `--backend rocm` does (IREE CI's BACKEND names the one
    backend both ways), and the output names it once, `rocm`."""
    suite = str(REPO / "tests/fixtures/iree-test-suites/sharktank_models/quality_tests/sdxl")
    printed = []
    for backend in ("rocm", "hip", "HIP"):
        assert main(["goldens", "check", suite, "--sku", "mi300", "--backend", backend,
                     "--dry-run"]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] == printed[2] and "--device=hip" in printed[0]
    assert main(["goldens", "check", suite, "--backend", "HIP", "--submodel", "nope",
                 "--dry-run"]) == 2
    assert "no test matches the selection (backend rocm, --submodel nope)" in \
        capsys.readouterr().err
    assert main(["goldens", "check", suite, "--backend", "cuda", "--dry-run"]) == 2
    assert "fix: use cpu or rocm (hip)" in capsys.readouterr().err


# --- one build grammar ------------------------------------------------------------------------
@pytest.mark.parametrize("argv, where, fix", [
    (["image", "build", "--iree", "commit:1a2b3c4d", "--dry-run"], "--iree",
     "build it from source: --iree source:1a2b3c4d"),
    (["validate", "--iree", "1a2b3c4d", "--out", "x", "--dry-run"], "--iree",
     "write source:1a2b3c4d (built from source)"),
    (["bench", "--iree", "wheels:latest", "--executor", "docker", "--dry-run"], "--iree",
     "use a PEP 440 release such as 3.13.0"),
    (["bisect", "--good", "nightly:3.1", "--bad", "wheels:3.13.0", "--test", "images", "--out",
      "x", "--dry-run"], "--good", "use wheels:VERSION | commit:SHA | source:SHA | "
                                   "build-dir:DIR"),
    (["trend", "wheels:3.12.0", "source:$(id)", "--out", "x", "--dry-run"], "BUILD",
     "give 7-40 hex digits, or a tag/branch"),
])
def test_every_command_that_names_a_build_reads_one_grammar(argv, where, fix, capsys,
                                                            tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {where}: ") and f"fix: {fix}" in err
    assert list(tmp_path.iterdir()) == []


# --- errors name the right place and a fix ------------------------------------------------------
def test_a_value_from_the_command_line_is_blamed_on_its_flag(capsys):
    assert main(["plan", "--profile", "cpu", "--devices", "0-4000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: command line: --devices: 4001 cpu device(s) x 1 core(s)")
    assert "fix: use at most" in err and "(e.g. --devices 0-" in err and "cpu.yaml" not in err
    assert main(["plan", "--profile", "cpu", "--set", "layout.batch_size=-4"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: --set layout.batch_size: `batch_size` must be a whole number at least "
                   "1, not -4\n"
                   "  fix: use e.g. --set layout.batch_size=32\n")
    assert main(["plan", "--profile", "mi325x", "--devices", "0-99"]) == 2
    assert capsys.readouterr().err.startswith("error: command line: --devices: device 64 ")


def _error_classes() -> dict[str, ast.ClassDef]:
    """RunnerError's subclasses in the runner, by name."""
    classes: dict[str, ast.ClassDef] = {}
    trees = [ast.parse(p.read_text()) for p in (REPO / "runner").rglob("*.py")]
    while True:
        more = {n.name: n for t in trees for n in ast.walk(t) if isinstance(n, ast.ClassDef)
                and n.name not in classes and any(getattr(b, "id", None) in {"RunnerError",
                                                                            *classes}
                                                  for b in n.bases)}
        if not more:
            return classes
        classes.update(more)


def _passes_fix(call: ast.Call) -> bool:
    return any(k.arg in ("fix", None) for k in call.keywords)


def test_every_error_says_how_to_fix_it():
    """Each RunnerError the runner raises carries `fix=`, so every message ends in a fix
    line: at the raise, or inside the subclass that words its own message."""
    classes = _error_classes()
    assert {"IncompleteRun", "DiskFull", "CorruptSample", "BuildUnavailable"} <= set(classes)
    own = {name for name, c in classes.items()
           if any(isinstance(f, ast.FunctionDef) and f.name == "__init__" for f in c.body)}
    for name in own:  # its __init__ hands RunnerError the fix
        supers = [n for n in ast.walk(classes[name]) if isinstance(n, ast.Call)
                  and getattr(n.func, "attr", None) == "__init__"]
        assert supers and all(_passes_fix(n) for n in supers), name
    raised = {"RunnerError", *classes} - own
    missing = [f"{path.relative_to(REPO)}:{node.lineno}"
               for path in sorted((REPO / "runner").rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Call) and getattr(node.func, "id", None) in raised
               and not _passes_fix(node)]
    assert missing == []


def test_a_missing_suite_says_what_was_meant(capsys, tmp_path, monkeypatch):
    assert main(["goldens", "check", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent: no such test file or suite directory" in err and "  fix: " in err
    monkeypatch.chdir(REPO)
    out = tmp_path / "v"
    assert main(["validate", "--iree", "wheels:3.13.0", "--profile", "cpu", "--goldens",
                 "goldens/tinyy", "--out", str(out), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before any plan is printed
    assert captured.err.startswith("error: --goldens: goldens/tinyy: no such test file or "
                                   "suite directory")
    assert "fix: did you mean goldens/tiny?" in captured.err and "create it" not in captured.err
    assert not out.exists()


def test_a_shipped_suite_is_named_by_name_from_any_directory(tmp_path):
    """From a directory outside the checkout (as after a pip install) `tiny-bench` and a
    file in it are the package's own suite; a path that is there wins over a name; a name
    that is neither is refused naming it, hostile or not, and nothing is written."""
    work = tmp_path / "work"
    work.mkdir()
    ran = cli("bench", "goldens", "tiny-bench", "--sku", "cpu", "--dry-run", cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert "PLANNED   tiny-bench/clip_cpu [cpu]" in ran.stdout
    ran = cli("goldens", "bump", "tiny-torch", "--to", "next", "--dry-run", cwd=work)
    assert ran.returncode == 0 and "_v2.0.bin" in ran.stdout, ran.stderr
    ran = cli("bench", "--profile", "tiny", "--ab-tuning-spec",
              "tiny-bench/tiny_bmm_spec_cpu.mlir", "--no-throughput", "--out", work / "ab",
              "--dry-run", cwd=work)
    assert ran.returncode == 0, ran.stderr
    spec = (GOLDENS / "tiny-bench" / "tiny_bmm_spec_cpu.mlir").resolve()
    assert f"--iree-codegen-tuning-spec-path={spec}" in ran.stdout
    store = tmp_path / "store" / "results.sqlite"  # an empty history: the suite's 3 named
    ran = cli("goldens", "propose", "tiny-bench", "--sku", "cpu", cwd=work,
              env={**os.environ, "RUNNER_RESULTS_URL": str(store)})
    assert ran.returncode == 2 and "result of these 3 benchmark test(s)" in ran.stderr
    for name in ("tiny-bnech", "$(touch pwned)", "tiny\nbench", "../goldens/tiny"):
        ran = cli("goldens", "check", name, "--dry-run", cwd=work)
        assert ran.returncode == 2 and "no such test file or suite directory" in ran.stderr
        assert "Traceback" not in ran.stderr
        assert ("fix: did you mean the shipped suite tiny-bench?" if name.startswith("tiny")
                else "or name a shipped suite: tiny, tiny-bench, tiny-torch") in ran.stderr, name
    (work / "tiny-bench").mkdir()  # a suite of the user's own by that name: it is the one read
    ran = cli("bench", "goldens", "tiny-bench", "--sku", "cpu", "--dry-run", cwd=work)
    assert ran.returncode == 2 and "tiny-bench: no test files (*.json) here" in ran.stderr
    assert sorted(p.name for p in work.iterdir()) == ["tiny-bench"]


def test_a_reversed_bisect_is_warned_before_any_work(tmp_path):
    proc = cli("bisect", "--good", "wheels:3.13.0", "--bad", "wheels:3.12.0", "--test",
               "images", "--profile", "tiny", "--count", "1", "--out", str(tmp_path / "b"),
               "--dry-run")
    first = proc.stderr.splitlines()[0]
    assert first.startswith("warning: --good wheels:3.13.0 is newer than --bad wheels:3.12.0: "
                            "bisecting backwards")
    assert first.endswith("swap them: --good wheels:3.12.0 --bad wheels:3.13.0")
    assert not (tmp_path / "b").exists()


def test_scenarios_take_mlperfs_names_in_any_case(capsys, tmp_path):
    out = tmp_path / "lg"
    assert main(["mlperf", "--profile", "cpu", "--scenario", "Offline,SERVER", "--mode",
                 "performance", "--count", "4", "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "# runner mlperf Offline,Server performance" in text and not out.exists()
    assert main(["mlperf", "--profile", "cpu", "--scenario", "offlin", "--mode", "accuracy",
                 "--out", str(out), "--dry-run"]) == 2
    assert "fix: use one of SingleStream, Offline, Server (any case)" in capsys.readouterr().err


# --- every command that acts has a dry run --------------------------------------------------------
TINY = str(GOLDENS / "tiny")
COMPILE = "iree-compile "
# command -> (its arguments, a line of what it would run). SUITE is the shipped tiny suite
# (a bump would rewrite it in place: the test holds it byte for byte).
DRY_RUNS: dict[str, tuple[list[str], str]] = {
    "export": (["tiny", "--out", "OUT"], "runner export tiny --out OUT"),
    "compile": (["--profile", "tiny"], COMPILE),
    "fetch": (["--profile", "cpu"], "clip_bs1.mlir -> "),
    "run": (["--profile", "cpu", "--count", "4", "--out", "OUT"],
            "python3 -m runner.batch.worker --task "),
    "generate": (["--profile", "tiny", "--count", "2", "--out", "OUT"], COMPILE),
    "validate": (["--iree", "wheels:3.13.0", "--profile", "cpu", "--count", "2", "--goldens",
                  "SUITE", "--out", "OUT"], "docker build "),
    "goldens check": (["SUITE"], "iree-run-module --device=local-task"),
    "goldens generate": (["SUITE", "--to", "next", "--out", "OUT"], "# writes OUT/"),
    "goldens bump": (["SUITE", "--to", "next"], "clip_out0_v1.0.bin -> clip_out0_v2.0.bin"),
    "goldens upload": (["UPLOAD", "--container-url", BASE], "az storage blob upload "),
    "goldens compare-steps": (["--profile", "tiny"], COMPILE),
    "bench": (["--profile", "cpu", "--count", "2", "--batch-size", "1,2", "--no-stages"],
              "runner run --profile cpu --devices 0,1 --cpd 1 --batch-size 2"),
    "bench goldens": ([str(GOLDENS / "tiny-bench"), "--sku", "cpu"], "iree-benchmark-module "),
    "bisect": (["--good", "wheels:3.12.0", "--bad", "wheels:3.13.0", "--test", "images",
                "--profile", "tiny", "--count", "1", "--out", "OUT"], " -m venv "),
    "trend": (["wheels:3.12.0", "wheels:3.13.0", "--profile", "tiny", "--count", "1", "--out",
               "OUT"], "runner.bisect.probe --profile "),
    "image build": (["--iree", "wheels:3.13.0"], "docker build "),
    "nightly": (["--iree", "wheels:3.13.0", "--profile", "tiny", "--out", "OUT"],
                "bench: BUILD_PYTHON -m runner bench --profile tiny --count 32 --out OUT/"),
    "mlperf": (["--profile", "cpu", "--scenario", "offline", "--mode", "performance",
                "--count", "4", "--out", "OUT"], "#   min_duration_ms = 600000"),
    "history import": (["RESULT", "--results", "STORE"],
                       "would record: bench goldens "),
    # HISTORY: a store holding a step of the tiny UNet across two builds, on this machine
    "history confirm": (["--good", "wheels:3.12.0", "--bad", "wheels:3.13.0", "--command",
                         "bench goldens", "--metric", "time_ms", "--stage",
                         "tiny-bench/unet_cpu", "--out", "OUT", "--results", "HISTORY"],
                        "# would store the confirmation in "),
    "oracle": (["--count", "2", "--out", "OUT"], "# would write OUT/images/NNNNN.png and "),
    # Those that read a run: RUN is a finished two-sample run (the small_run fixture).
    "score": (["RUN"], "# would write RUN/accuracy.json and RUN/accuracy.txt"),
    "aggregate": (["RUN"], "# would write RUN/mlperf_log_accuracy.json, RUN/dataset.json"),
    "report": (["RUN", "--out", "OUT"], "# would write OUT/summary.md, OUT/results.json"),
    "calibrate": (["RUN", "--out", "OUT"], "# would write OUT/accuracy.yaml, "),
    "compare": (["RUN", "RUN", "--out", "OUT"], "# would write OUT/compare.json"),
    "gpu-check prepare": (["--profile", "cpu", "--batch-sizes", "1", "--no-wheels", "--out",
                           "OUT"], "-m runner compile --profile cpu --set model.vae_dtype=fp32"),
    "gpu-check run": (["--carry", "CARRY", "--out", "OUT"], "-m runner bench --profile cpu "),
}
NEEDS_DOCKER = {"validate", "image build"}
READS_A_RUN = {"score", "aggregate", "report", "calibrate", "compare"}



def test_every_command_that_acts_has_a_dry_run_case():
    with_dry_run = {c.removeprefix("runner ") for c, a in options_of(build_parser())
                    if "--dry-run" in a.option_strings}
    assert with_dry_run == set(DRY_RUNS)


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("command", [
    pytest.param(c, marks=pytest.mark.slow) if c in READS_A_RUN else c for c in sorted(DRY_RUNS)])
def test_dry_run_prints_the_exact_commands_and_writes_nothing(command, tmp_path, request):
    if command in NEEDS_DOCKER:
        request.getfixturevalue("docker_client")

    upload = generated(tmp_path / "gen")
    work = tmp_path / "work"
    work.mkdir()
    args, expected = DRY_RUNS[command]
    run = request.getfixturevalue("small_run") if command in READS_A_RUN else None
    names = {"OUT": str(work / "out"), "SUITE": TINY, "UPLOAD": str(upload),
             "RESULT": str(REPO / "tests" / "fixtures" / "history" / "bench-goldens"),
             "STORE": str(work / "store" / "results.sqlite"), "RUN": str(run),
             "CARRY": str(REPO / "tests" / "fixtures" / "gpu_check" / "carry"),
             "HISTORY": two_builds_store(tmp_path / "history.sqlite")
             if "HISTORY" in args else ""}
    argv = [*command.split(), *[names.get(a, a) for a in args], "--dry-run"]
    before = {p: _tree(p) for p in (Path(TINY), upload, *([run] if run else []))}
    cache = warm(tmp_path / "cache")
    cached = snapshot(cache)
    proc = cli(*argv, cwd=work, env={**os.environ, "RUNNER_CACHE_DIR": str(cache)})
    assert snapshot(cache) == cached  # the cache as it was (a warm one: nothing cleared)
    assert proc.returncode == 0, proc.stderr
    expected = expected.replace("OUT", str(work / "out")).replace("RUN", str(run))
    assert any(line.lstrip().startswith(expected) or expected in line
               for line in proc.stdout.splitlines()), proc.stdout
    assert list(work.iterdir()) == []  # no --out, no run dir, nothing in the cwd
    assert {p: _tree(p) for p in before} == before  # the suite and the upload dir as they were


# --- no abbreviations, no empty values ----------------------------------------------------------
def test_no_parser_takes_an_abbreviation():
    """argparse's default lets `--dev 0` mean `--devices 0` (and `run --device 1` silently
    mean `--devices 1`); every parser, the subcommands' included, refuses that."""
    parser = build_parser()
    assert [" ".join(path) or "runner" for path, p in [((), parser), *walk(parser)]
            if p.allow_abbrev] == []


def test_the_runners_other_parsers_take_no_abbreviation_either():
    """The module entry points (`python3 -m runner.base.gpu_holders`, the worker, the node
    task, the probe) build plain argparse parsers: each says allow_abbrev=False."""
    loose = [f"{path.relative_to(REPO)}:{node.lineno}"
             for path in sorted((REPO / "runner").rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "ArgumentParser"
             and not any(k.arg == "allow_abbrev" and getattr(k.value, "value", None) is False
                         for k in node.keywords)]
    assert loose == []


@pytest.mark.parametrize("argv, meant", [
    (["run", "--device", "1", "--out", "OUT", "--dry-run"], "--devices"),
    (["run", "--dev", "0", "--out", "OUT", "--dry-run"], "--devices"),
    (["run", "--profile", "cpu", "--dry", "--out", "OUT"], "--dry-run"),
    (["compile", "--batch-size", "2", "--dry-run"], "--batch-sizes"),
    (["plan", "--profile", "mi325x", "--part", "spx"], "--partition"),
])
def test_an_abbreviated_or_misspelled_flag_is_refused_naming_the_one_meant(argv, meant,
                                                                         tmp_path):
    proc = cli(*[str(tmp_path / "o") if a == "OUT" else a for a in argv], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "unrecognized arguments: " in proc.stderr
    assert f"fix: did you mean {meant}? (see `runner {argv[0]} --help`)" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_misspelled_required_flag_is_named_with_the_one_meant(tmp_path):
    proc = cli("mlperf", "--scen", "offline", "--mode", "performance", "--out",
               tmp_path / "lg", "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr == ("error: runner mlperf: the following arguments are required: "
                           "--scenario\n  fix: did you mean --scenario for --scen? see "
                           "`runner mlperf --help`\n")
    assert list(tmp_path.iterdir()) == []


def _usage_error(parser: argparse.ArgumentParser, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        parser.parse_known_args(argv)
    assert e.value.code == 2, argv
    return capsys.readouterr().err


def test_every_option_of_every_command_refuses_an_empty_value(capsys):
    """`--out ''` wrote into the current directory, `--samples ''` chose nothing: an empty
    value is refused, naming the flag and what it takes, whatever the option's type."""
    parser = build_parser()
    checked = 0
    for path, sub in [((), parser), *walk(parser)]:
        for action in sub._actions:
            if not action.option_strings or action.nargs == 0 or action.help == \
                    argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            flag = max(action.option_strings, key=len)
            err = _usage_error(parser, [*path, flag, ""], capsys)
            assert "an empty value\n  fix: give a value: " in err and flag in err, (path, err)
            checked += 1
    assert checked > 150


@pytest.mark.parametrize("argv, says", [
    (["run", "--out", ""], "argument --out: an empty value\n  fix: give a value: --out DIR"),
    (["run", "--samples", "", "--out", "OUT"], "argument --samples: an empty value"),
    (["--iree-tools", "", "plan"], "argument --iree-tools: an empty value"),
    (["score", ""], "argument RUN_DIR: an empty value\n  fix: give a value: RUN_DIR"),
    (["plan", "--set", "model.vae_dtype="], "error: --set model.vae_dtype: an empty value\n"
     "  fix: give one after the `=`: --set model.vae_dtype=VALUE"),
    (["plan", "--set", "=fp16"], "`--set =fp16` is not KEY=VALUE"),
])
def test_empty_strings_are_refused_before_any_work(argv, says, tmp_path):
    proc = cli(*[str(tmp_path / "o") if a == "OUT" else a for a in argv], cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_ids_file_is_read_as_sample_ids_and_a_bad_one_is_named(tmp_path):
    """`--ids x` printed Python's `invalid literal for int()` or `[Errno 2]`."""
    (tmp_path / "ids.txt").write_text("0 1\n2 x7\n")
    out = str(tmp_path / "o")
    cases = [("ids.txt", "error: --ids ids.txt: line 2: 'x7' is not a sample id"),
             ("ids.tx", "error: --ids: ids.tx: no such ids file\n  fix: did you mean "
                        "ids.txt?"),
             (".", "error: --ids: . is a directory, not an ids file")]
    for ids, says in cases:
        proc = cli("run", "--profile", "cpu", "--ids", ids, "--out", out, "--dry-run",
                   cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith(says), proc.stderr
        assert "int()" not in proc.stderr and "Errno" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.txt"]


# --- what was meant, and what a thing is ---------------------------------------------------------
def test_runner_alone_and_a_command_group_alone_show_their_help():
    for argv, shows in ((), "workflows:"), (("goldens",), "IREE CI golden tests"), \
            (("image",), "docker images"):
        proc = cli(*argv)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        assert proc.stdout.startswith(f"usage: runner {' '.join(argv)}".rstrip()) \
            and shows in proc.stdout
        assert "_command" not in proc.stdout


def test_a_misspelled_command_or_choice_says_what_was_meant():
    proc = cli("rnu")
    assert proc.returncode == 2
    assert proc.stderr == ("error: runner: unknown command 'rnu'\n  fix: did you mean "
                           "`runner run`? `runner --help` lists the commands\n")
    proc = cli("goldens", "chek")
    assert "unknown command 'chek'\n  fix: did you mean `runner goldens check`?" in proc.stderr
    assert "goldens_command" not in proc.stderr
    proc = cli("run", "--executor", "dokcer", "--out", "x")
    assert "invalid choice: 'dokcer'\n  fix: did you mean docker? (one of local, docker, " \
        "slurm)" in proc.stderr


def test_every_command_says_what_it_does_in_its_help():
    assert "Download a profile's model artifacts into the cache." in cli("fetch",
                                                                         "--help").stdout
    problems = help_problems(_toy(("bare", lambda p: document(p, "runner bare",
                                                              exits=Exits()))))
    assert "runner bare: no description: its help does not say what it does" in problems


def test_each_commands_help_lists_the_exit_codes_it_declares_and_no_other():
    """A command's exit-code block is its own: `history` judges change points and never
    runs samples, so its help says what its 1 means and nothing of --require-full or
    missing samples; `plan` judges nothing and writes nothing (0, 2, 130 alone)."""
    parser = build_parser()
    helps = {" ".join(path): sub for path, sub in walk(parser)}
    for name, sub in helps.items():
        assert listed_exits(sub.epilog or "") == documented(sub).exits.codes(), name
    history = cli("history", "--help").stdout.partition(EXITS)[2]
    assert "--require-full" not in history and "samples are missing" not in history
    assert "  1  a change point is a confirmed regression" in history
    assert listed_exits(cli("plan", "--help").stdout) == (0, 2, 130)
    assert listed_exits(cli("run", "--help").stdout) == (0, 1, 2, 3, 130)
    assert "samples are missing" in cli("run", "--help").stdout
    assert listed_exits(cli("goldens", "bump", "--help").stdout) == (0, 2, 3, 130)
    # The rule names a help whose block was edited away from what the command declares.
    toy = _toy(("bare", lambda p: document(p, "runner bare", exits=Exits(verdict="x"))))
    bare = next(sub for _, sub in walk(toy))
    bare.description, bare.epilog = "does it", bare.epilog.replace("  1  x\n", "")
    assert help_problems(toy) == ["runner bare: its help lists exit codes (0, 2, 130), it "
                                  "declares (0, 1, 2, 130) (document's exits=)"]


def test_a_profile_that_is_not_one_says_what_it_is_and_what_is_expected(tmp_path):
    (tmp_path / "notes.txt").write_text("layout: {}\n")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "lab.yaml").write_text("extends: cpu\n")
    cases = [("mi325", "unknown profile 'mi325'\n  fix: did you mean mi325x? use one of "),
             ("profiles", "--profile: 'profiles' is a directory, not a profile\n  fix: give a "
                          "profile name or a profile's .yaml/.yml file, e.g. profiles/lab.yaml"),
             ("notes.txt", "--profile: 'notes.txt' is a file, but not a profile YAML"),
             ("$(id)\nx", "unknown profile '$(id)\\nx'"),
             ("profiles/lab.yml", "unknown profile 'profiles/lab.yml': no such file\n  fix: "
                                  "did you mean profiles/lab.yaml?")]
    for value, says in cases:
        proc = cli("plan", "--profile", value, cwd=tmp_path)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_a_file_where_a_run_dir_is_expected_is_called_a_file(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    for command in ("score", "report", "aggregate"):
        proc = cli(command, str(tmp_path / "run.json"), "--dry-run")
        assert proc.returncode == 2
        assert f"{tmp_path / 'run.json'}: a file, where a run dir" in proc.stderr
        assert "fix: pass the " in proc.stderr and f"({tmp_path}, if it is that one)" \
            in proc.stderr and "not found" not in proc.stderr


# --- a fix in the syntax the user typed ---------------------------------------------------------
@pytest.mark.parametrize("argv, fix", [
    (["--set", "layout.devices=0-4000"], "fix: use at most 2 device(s) (e.g. --set "
     "layout.devices=0-1), or let devices share cores (--set layout.allow_oversubscribe=true)"),
    (["--devices", "0-4000"], "(e.g. --devices 0-1), or let devices share cores (--set "
     "layout.allow_oversubscribe=true)"),
    (["--set", "layout.numa=true"], "fix: drop --set layout.numa"),
    (["--partition", "cpx"], "fix: drop --partition"),
])
def test_a_fix_is_written_as_the_user_typed_the_value(argv, fix, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    proc = cli("plan", "--profile", "cpu", *argv)
    assert proc.returncode == 2 and fix in proc.stderr, proc.stderr
    assert ": true" not in proc.stderr and "remove layout." not in proc.stderr


@pytest.mark.parametrize("command", ["validate", "bench", "image build"])
def test_an_iree_flag_offers_only_the_builds_its_command_takes(command):
    """validate's help offered `commit:SHA`, which it refuses: each --iree lists the kinds
    its command builds (a harness image: wheels, source, build-dir)."""
    text = _help(command, "--iree")
    assert "an IREE build: wheels:VERSION | source:SHA | build-dir:DIR" in text
    assert "commit:SHA" not in text


def test_validate_refuses_a_commit_build_naming_source(tmp_path):
    proc = cli("validate", "--iree", "commit:1a2b3c4d", "--out", str(tmp_path / "v"),
               "--dry-run")
    assert proc.returncode == 2
    assert "fix: build it from source: --iree source:1a2b3c4d" in proc.stderr
    assert not (tmp_path / "v").exists()


# --- LoadGen's flags: units and scenarios said ------------------------------------------------
def test_min_duration_says_seconds_and_the_user_confs_milliseconds():
    text = _help("mlperf", "--min-duration")
    assert "in seconds" in text and "min_duration in milliseconds" in text
    assert "(user.conf min_duration;" not in text


def test_each_qps_flag_sets_its_own_scenario(capsys, tmp_path):
    """`--qps` set Offline's expected QPS and Server's target QPS at once; each scenario
    now has its own flag, named as the profile's key, and `--qps` names them."""
    out = str(tmp_path / "lg")
    assert main(["mlperf", "--profile", "cpu", "--scenario", "offline,server", "--mode",
                 "performance", "--count", "4", "--offline-expected-qps", "2",
                 "--server-target-qps", "0.5", "--out", out, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "stable-diffusion-xl.Offline.target_qps = 2\n" in text
    assert "stable-diffusion-xl.Server.target_qps = 0.5\n" in text
    assert main(["mlperf", "--profile", "cpu", "--scenario", "offline", "--mode",
                 "performance", "--server-target-qps", "3", "--out", out, "--dry-run"]) == 2
    assert ("error: --server-target-qps: --server-target-qps is the Server scenario's, which "
            "--scenario does not run (Offline)\n  fix: drop --server-target-qps, or add "
            "server to --scenario") in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["mlperf", "--qps", "3"])
    assert "use --offline-expected-qps QPS or --server-target-qps QPS" in \
        capsys.readouterr().err
    assert not (tmp_path / "lg").exists()
