"""Exit 0 means what was asked was measured and judged: a command that would measure or judge
nothing (every layout skipped, no benchmark golden for the SKU, every golden skipped) exits
2 saying why and the fix, and a subset or an unscored run is "not judged", never PASS (nor a
FAIL on one of its scores)."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from cli_support import cli

from runner.accuracy.verdict import judge
from runner.base.errors import (
    ERROR_KINDS,
    EXIT_BAD_INPUT,
    BadInput,
    IncompleteRun,
    RunnerError,
    StepFailed,
    ToolFailed,
    recorded_name,
)
from runner.base.paths import GOLDENS_DIR
from runner.config.profile import load_profile
from runner.loadgen.command import NOT_JUDGED, _status
from runner.loadgen.report import html, markdown


def test_a_bench_of_skipped_layouts_is_refused_before_any_work(tmp_path):
    """The builtin tiny model has no batch 3: once every layout was skipped, exit 0."""
    for dry in ([], ["--dry-run"]):
        ran = cli("bench", "--profile", "cpu", "--batch-size", "3", "--count", "2",
                  "--out", tmp_path / "bench", *dry)
        assert ran.returncode == 2, ran.stdout
        assert "--devices/--cpd/--batch-size/--vae-batch-size: every layout is skipped, so " \
               "nothing would be measured (devices=0,1 cpd=1 bs=3: model tiny-sdxl: no clip " \
               "artifact for batch size 3 (the model has [1, 2]))" in ran.stderr
        assert "fix: choose layouts that the model and this machine can run" in ran.stderr
        assert not (tmp_path / "bench").exists()


def test_bench_exports_a_missing_batch_size_as_compile_and_run_do(capsys):
    """sdxl-seeded has no export yet: each layout's section starts with the export command
    `runner compile` runs, then the compiles; none is skipped (once every one was)."""
    ran = cli("bench", "--profile", "sdxl-seeded", "--batch-size", "1,2", "--no-stages",
              "--count", "2", "--dry-run")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert "skipped" not in ran.stdout
    for bs in (1, 2):
        head = lines.index(f"# layout devices=0 cpd=1 bs={bs} (host)")
        assert lines[head + 1].startswith(f"runner export sdxl --seeded --batch-sizes {bs} "
                                          f"--vae-batch-sizes {bs} --dtype fp16")
        assert f"unet_bs{bs}.mlir" in lines[head + 3]


def test_bench_goldens_judge_the_profiles_sku(tmp_path):
    """The SKU is the profile's: the default profile's cpu target judges the shipped CPU
    goldens (once: IREE CI's mi300, every test UNCHECKED, exit 0); a lab profile's SKU
    with no goldens here is refused before any compile, naming --sku."""
    planned = cli("bench", "goldens", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert "PLANNED   tiny-bench/clip_cpu [cpu] encode_prompts" in planned.stdout
    assert load_profile("mi325x").target.golden_sku == "mi325"
    lab = cli("bench", "goldens", "--profile", "mi325x", "--out", tmp_path / "g")
    assert lab.returncode == 2
    assert ("--sku: none of the 3 benchmark file(s) has goldens for sku mi325 (profile "
            "mi325x's target), so nothing would be judged; they have goldens for cpu"
            in lab.stderr)
    assert "fix: on a machine of one of those SKUs pass --sku cpu" in lab.stderr
    assert not (tmp_path / "g").exists()
    env = cli("bench", "goldens", "--dry-run", env={**os.environ, "SKU": "mi300"})
    assert env.returncode == 2 and "goldens for sku mi300 ($SKU)" in env.stderr


def test_bench_goldens_every_test_skipped_is_not_a_pass(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("clip_cpu.json", "vae_cpu.json"):
        raw = json.loads((GOLDENS_DIR / "tiny-bench" / name).read_text())
        raw["specific_chip_to_ignore"] = ["gfx942"]  # the cpu profile's chip default
        (suite / name).write_text(json.dumps(raw))
    ran = cli("bench", "goldens", suite, "--out", tmp_path / "out")
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "no benchmark golden was judged (sku cpu): suite/clip_cpu: skipped the file " \
        "ignores chip gfx942" in ran.stderr
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["goldens"][0][
        "status"] == "skipped"


def test_a_subsets_scores_say_not_judged_never_pass_or_fail():
    accuracy = load_profile("tiny").accuracy
    low, high = accuracy.fid or (0.0, 0.0)
    verdict = judge(high + 1.0, sum(accuracy.clip or (0.0, 0.0)) / 2, accuracy, subset_of=2)
    lines = verdict.lines()
    assert lines[0].startswith("FID ") and "not judged" in lines[0]
    assert lines[1].startswith("CLIP") and "not judged" in lines[1]
    assert not any(word in line for line in lines[:2] for word in ("PASS", "FAIL"))
    assert lines[2] == "verdict: SUBSET (not judged; --require-full makes this a failure)"
    full = judge(high + 1.0, low, accuracy)  # the same score on the full set: judged
    assert "FAIL" in full.lines()[0] and full.lines()[-1] == "verdict: FAIL"
    required = judge(high + 1.0, low, accuracy, subset_of=2, require_full=True)
    assert "not judged" in required.lines()[0] and "verdict: FAIL" in required.lines()


def _record(accuracy: dict | None, mode: str = "accuracy") -> dict:
    test = {"name": mode, "key": f"Offline/{mode}", "mode": mode, "sut": {},
            "summary": {"valid": True, "result": "VALID"}}
    record = {"failure": None, "tests": [test], "scenarios": ["Offline"], "mode": mode,
              "profile": "cpu", "system": "cpu-2dev", "total": 2, "performance_count": 2,
              "settings": {}}
    if accuracy is not None:
        record["accuracy"] = accuracy
    return record


def test_a_loadgen_accuracy_test_not_judged_is_never_pass():
    """`--no-score`, a subset and a profile without ranges ran as asked: exit 0, but the
    status (summary.md's headline, report.html's badge) is NOT JUDGED; once it was PASS."""
    for accuracy in (None, {"Offline": {"verdict": "subset", "exit_code": 0}},
                     {"Offline": {"verdict": "not scored: the profile has no accuracy "
                                  "ranges"}}):
        record = _record(accuracy)
        record["status"] = _status(record)
        assert record["status"] == NOT_JUDGED
        assert "accuracy: **NOT JUDGED**" in markdown(record)
        assert "**PASS**" not in markdown(record)
        assert 'class="verdict none"' in html(record)
    judged = _record({"Offline": {"verdict": "pass", "exit_code": 0}})
    assert _status(judged) == "PASS"
    assert _status(_record({"Offline": {"verdict": "fail", "exit_code": 1}})) == "FAIL"
    assert _status(_record(None, mode="performance")) == "PASS"  # nothing there to score


def test_the_exit_code_table_says_which_outcome_gets_which_code():
    table = Path(__file__).resolve().parent.parent / "docs" / "failure-modes.md"
    text = table.read_text()
    assert "| 0 | passed: what was asked was measured and judged" in text
    assert "every layout of a `bench` skipped, no benchmark golden for the SKU" in text


def test_every_kind_of_error_exits_2_and_is_recorded_as_before():
    """The kinds tell a caller what went wrong; the exit code and the records stay one."""
    for kind in ERROR_KINDS:
        error = kind("what", where="file: field", fix="do this")
        assert isinstance(error, RunnerError) and error.exit_code == EXIT_BAD_INPUT
        assert str(error) == "file: field: what\n  fix: do this"
        assert recorded_name(error) == "RunnerError"
    assert recorded_name(IncompleteRun("samples missing")) == "IncompleteRun"
    assert recorded_name(ValueError()) == "ValueError"
    failed = ToolFailed("iree-compile failed", returncode=1, output="error: ...", fix="rerun")
    assert (failed.returncode, failed.output) == (1, "error: ...")
    text = (Path(__file__).resolve().parent.parent / "docs" / "failure-modes.md").read_text()
    assert all(f"`{kind.__name__}`" in text for kind in ERROR_KINDS)


PACKAGE = Path(__file__).resolve().parent.parent / "runner"


def bare_raises(source: str, name: str = "<source>") -> list[str]:
    """Each `raise RunnerError(...)` in `source` (as `RunnerError` or `errors.RunnerError`):
    an error that says no kind, so a caller cannot tell a typo from a tool that failed."""
    out = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            func = node.exc.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == "RunnerError":
                out.append(f"{name}:{node.lineno}")
    return out


def test_every_error_the_runner_raises_is_one_of_the_kinds():
    assert bare_raises("raise RunnerError('x')\nraise errors.RunnerError('y')\n"
                       "raise BadInput('z')\nraise RunnerError\n") == [
        "<source>:1", "<source>:2"]
    found = [hit for path in sorted(PACKAGE.rglob("*.py"))
             if path != PACKAGE / "base" / "errors.py"
             for hit in bare_raises(path.read_text(encoding="utf-8"),
                                    str(path.relative_to(PACKAGE.parent)))]
    assert found == [], "raise BadInput, StepFailed, ToolFailed or ServiceUnreachable:\n" + \
        "\n".join(found)


def test_errors_say_their_kind_as_they_are_raised(tmp_path):
    """One real site per kind: a flag given wrong, the tools the user installed, a
    benchmark's unreadable result, a program that failed, an out dir another driver holds."""
    from runner.base.dirlock import DirLock
    from runner.base.iree_flags import known_flags
    from runner.base.iree_tools import find_tool, json_lines
    from runner.bench.benchmark_module import parse_benchmark_json
    from runner.config.overrides import profile_overrides

    with pytest.raises(BadInput, match="is not KEY=VALUE"):
        profile_overrides(["target.chip"])
    with pytest.raises(BadInput, match="not found"):
        find_tool("iree-no-such-tool")
    with pytest.raises(StepFailed, match="not Google Benchmark JSON output"):
        parse_benchmark_json("{}", "bench.json")
    with pytest.raises(StepFailed, match=r"failed \(exit 1\)"):
        list(json_lines(["false"], "false"))
    with pytest.raises(ToolFailed, match="--help-list-hidden` failed"):
        known_flags("false")
    held = DirLock(tmp_path / "attempt.lock", "out dir")
    held.lock()
    try:
        with pytest.raises(BadInput, match="another driver holds this out dir"):
            DirLock(tmp_path / "attempt.lock", "out dir").lock()
    finally:
        held.unlock()


def test_a_lab_profile_picks_its_sku_and_chip_for_iree_cis_goldens():
    """IREE CI's SDXL benchmark files, as a lab host reads them: the mi300x profile's SKU
    (mi300) and chip (gfx942) with no flag; mi355x's SKU has no goldens there (exit 2)."""
    suite = (Path(__file__).resolve().parent / "fixtures" / "iree-test-suites" /
             "sharktank_models" / "benchmarks" / "sdxl")
    ran = cli("bench", "goldens", suite, "--profile", "mi300x", "--dry-run")
    assert ran.returncode == 0, ran.stderr
    assert "PLANNED   sdxl/clip_rocm [mi300]" in ran.stdout
    assert "--iree-rocm-target=gfx942" in ran.stdout
    gfx950 = cli("bench", "goldens", suite, "--profile", "mi355x", "--sku", "mi300",
                 "--dry-run")
    assert gfx950.returncode == 0 and "--iree-rocm-target=gfx950" in gfx950.stdout
    lab = cli("bench", "goldens", suite, "--profile", "mi355x", "--dry-run")
    assert lab.returncode == 2
    assert "goldens for sku mi355 (profile mi355x's target)" in lab.stderr
    assert "they have goldens for cpu, mi250, mi300, mi308" in lab.stderr
