"""The one resumable-step record (runner/base/steps.py): its words as the JSON files hold
them, older runners' words read as their own, what an attempt's end is, and the table of
finished steps a rerun skips."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_support import cli
from repo_support import REPO

from runner.base.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INCOMPLETE, EXIT_OK, RunnerError
from runner.base.iree_tools import compiler_info
from runner.base.outdir import RECORD, RESUMES, Rerun, claim
from runner.base.signals import Interrupted
from runner.base.steps import Steps, StepStatus


def test_the_words_are_the_files_strings():
    assert json.dumps({"s": StepStatus.INTERRUPTED}) == '{"s": "interrupted"}'
    assert f"{StepStatus.DRY_RUN}" == str(StepStatus.DRY_RUN) == "dry run"
    assert StepStatus.FINISHED == "finished"


def test_older_words_read_as_their_own():
    assert StepStatus("killed") is StepStatus.INTERRUPTED  # run.json before one vocabulary
    assert StepStatus("done") is StepStatus.FINISHED  # validate.json's
    assert StepStatus.read("a newer runner's word") is StepStatus.RUNNING
    assert StepStatus.read(None) is StepStatus.RUNNING


def test_how_an_attempt_ended():
    assert StepStatus.of_exit(EXIT_OK) is StepStatus.of_exit(EXIT_FAILED) is StepStatus.FINISHED
    assert StepStatus.of_exit(EXIT_INCOMPLETE) is StepStatus.INCOMPLETE
    assert StepStatus.of_exit(EXIT_BAD_INPUT) is StepStatus.FAILED
    assert StepStatus.of_error(Interrupted(15)) is StepStatus.INTERRUPTED
    assert StepStatus.of_error(OSError("disk full")) is StepStatus.FAILED
    assert StepStatus.RUNNING.settled() is StepStatus.INTERRUPTED
    assert StepStatus.FAILED.settled() is StepStatus.FAILED


def test_a_driver_that_died_running_is_resumed_as_interrupted(tmp_path):
    rule = Rerun(RESUMES, "each finished test")
    first = claim(tmp_path / "out", "generate", {}, [], rule)
    first.record_part("test:a", StepStatus.FINISHED, 1.0, {"files": {}})
    first.release()  # SIGKILL: the record still says running
    second = claim(tmp_path / "out", "generate", {}, [], rule)
    assert second.previous_status is StepStatus.INTERRUPTED
    assert second.kept("test:a") == {"files": {}}
    second.end(StepStatus.FINISHED)


def test_a_finished_step_with_the_same_key_is_skipped():
    saved: list[dict] = []
    table: dict[str, dict] = {}
    steps = Steps(table, lambda: saved.append(json.loads(json.dumps(table))))
    ran: list[str] = []

    def fn() -> dict:
        ran.append("x")
        return {"out": 1}

    assert steps.run("compile", "k1", fn) == ({"out": 1}, False)
    assert saved[-1] == {"compile": {"key": "k1", "status": "finished", "seconds": 0.0,
                                     "detail": {"out": 1}}}
    assert steps.run("compile", "k1", fn) == ({"out": 1}, True) and ran == ["x"]
    assert steps.run("compile", "k1", fn, done=lambda step: False)[1] is False  # outputs gone
    assert steps.run("compile", "k2", fn)[1] is False and len(ran) == 3  # other inputs
    table["compile"]["status"] = "done"  # as validate.json held it before
    assert steps.finished("compile", "k2") is not None


def test_a_step_that_raises_is_recorded_and_run_again():
    table: dict[str, dict] = {}
    steps = Steps(table, lambda: None)

    def boom() -> dict:
        raise RunnerError("no image", where="here", fix="build it")

    with pytest.raises(RunnerError):
        steps.run("image", "k", boom)
    assert table["image"]["status"] == StepStatus.FAILED
    assert "no image" in table["image"]["detail"]["error"]
    assert steps.finished("image", "k") is None
    steps.run("plan", "k", lambda: {}, dry_run=True)
    assert table["plan"]["status"] == "dry run" and steps.finished("plan", "k") is None


def test_validate_keeps_a_step_an_older_validate_json_holds_done(tmp_path):
    """validate.json as runners before one vocabulary wrote it (`done`): its steps are kept
    on a rerun, and a step recorded now says `finished`."""
    from runner.validate import VALIDATE_STATE, Validation

    made = tmp_path / "compiled.json"
    made.write_text("{}")
    old = {"steps": {"compile": {"key": "k", "status": "done", "seconds": 1.0,
                                 "detail": {"vmfbs": ["a.vmfb"]}}}}
    (tmp_path / VALIDATE_STATE).write_text(json.dumps(old))
    ledger = Validation(tmp_path, dry_run=False)
    kept = ledger.step("compile", "k", [made], lambda: pytest.fail("run again"))
    assert kept == {"vmfbs": ["a.vmfb"], "skipped": True}
    made.unlink()  # its output gone: run again
    assert ledger.step("compile", "k", [made], lambda: {"vmfbs": []}) == {"vmfbs": []}
    step = json.loads((tmp_path / VALIDATE_STATE).read_text())["steps"]["compile"]
    assert step["status"] == "finished" and step["detail"] == {"vmfbs": []}


def test_bisect_steps_of_an_older_file_are_kept_and_the_list_stays(tmp_path):
    """bisect.json's steps as runners before step keys wrote them (no key, no status): each
    is finished for its own build, measured again for another; the file keeps a list."""
    from runner.bisect.builds import Build
    from runner.bisect.ledger import Ledger, inputs_key

    good, bad, other = (Build("wheels", f"wheels:{v}", v) for v in ("3.11.0", "3.12.0", "x"))
    inputs = {"--test": "images"}
    path = tmp_path / "bisect.json"
    path.write_text(json.dumps({"command": "bisect", "key": inputs_key(inputs), "steps": [
        {"index": 0, "build": good.spec, "order": 1, "seconds": 2.0, "verdict": {}}]}))
    ledger = Ledger(path, "bisect", inputs, ["bisect"])
    assert ledger.resumed and ledger.finished(0, good) is not None
    assert ledger.finished(0, other) is None and ledger.finished(1, bad) is None
    ledger.record(1, bad, 3.0, order=2, verdict={"state": "bad"})
    steps = json.loads(path.read_text())["steps"]
    assert [(s["index"], s["build"], s["status"]) for s in steps] == [
        (0, good.spec, "finished"), (1, bad.spec, "finished")]
    assert steps[1]["key"] == bad.spec and steps[1]["seconds"] == 3.0


RELEASE_GOLDENS = Path(__file__).parent / "fixtures" / "release_goldens_generate"
RELEASE_CHECKOUT = "/tmp/base-2215d2b"  # where the release ran the command (its cwd)
RELEASE_COMPILER = "3.13.0rc20261016@89ece87b89852100c0a4ac3d515e14842d090967"


def test_an_attempt_of_the_release_resumes_from_its_done_parts(tmp_path):
    """The out dir a `runner goldens generate goldens/tiny --to next -k "not vae"` of the
    release before parts were steps (2215d2b) left, its attempt.json holding `done`: a rerun
    into it keeps the test whose outputs are still as recorded, generates again the one
    whose output is gone, and records both as steps."""
    out = tmp_path / "gen"
    shutil.copytree(RELEASE_GOLDENS, out)
    compiler = compiler_info()
    # Moved here: this checkout's goldens/tiny and this machine's compiler, as the release
    # ran with them (the inputs and test keys otherwise differ, which is refused or re-run).
    record = (out / RECORD).read_text().replace(RELEASE_CHECKOUT, str(REPO))
    (out / RECORD).write_text(record.replace(RELEASE_COMPILER,
                                             f"{compiler.version}@{compiler.commit}"))
    assert "done" in json.loads((out / RECORD).read_text())
    kept_bytes = (out / "clip_out0_v2.0.bin").read_bytes()
    (out / "unet_out0_v2.0.bin").unlink()
    ran = cli("goldens", "generate", "goldens/tiny", "--to", "next", "-k", "not vae",
              "--out", out, cwd=REPO)
    assert ran.returncode == 0, ran.stderr
    assert "kept  tiny/clip_cpu" in ran.stderr and "kept  tiny/unet_cpu" not in ran.stderr
    assert "unet_out0_v2.0.bin" in ran.stdout and "clip_out0_v2.0.bin" not in ran.stdout
    assert (out / "clip_out0_v2.0.bin").read_bytes() == kept_bytes
    record = json.loads((out / RECORD).read_text())
    assert "done" not in record and len(record["attempts"]) == 2
    steps = {name.split(":")[1]: step for name, step in record["steps"].items()}
    assert set(steps) == {"tiny/clip_cpu", "tiny/unet_cpu"}
    assert {step["status"] for step in steps.values()} == {"finished"}
    assert steps["tiny/clip_cpu"]["seconds"] is None  # as the release recorded it: no time
    assert steps["tiny/unet_cpu"]["seconds"] >= 0
    assert [g["file"] for g in steps["tiny/clip_cpu"]["detail"]] == [
        "clip_out0_v2.0.bin", "clip_out1_v2.0.bin"]
