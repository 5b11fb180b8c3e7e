"""Hostile and careless input at every boundary of the CLI, end to end: each case ends with
a message naming file, field and fix and exit 2 (or a refusal), never a traceback, a hang,
another file's contents echoed, or a secret printed. The security cases each failed on the
code before runner/inputs/: a `../` module name compiled a file outside the suite and
iree-compile printed it; a sample symlinked out of the run dir was aggregated as the run's
own; a SAS signature in a refused URL was printed."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from cli_support import cli, runner_process

from runner.base.errors import EXIT_BAD_INPUT
from runner.base.paths import ASSETS_DIR, REPO_DIR
from runner.cli.main import main
from runner.rundir.store import CORRUPT_DIR, SampleStore

SECRET = "SECRET-KEY-MATERIAL-4f1c"
ENV = {**os.environ, "RUNNER_PROGRESS": "plain", "PYTHONPATH": str(REPO_DIR)}


def _exit_2(capsys, *argv: str) -> str:
    """main(argv) must exit 2 with a message; returns stdout + stderr."""
    assert main(list(argv)) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert "Traceback" not in err and err.startswith("error: ")
    return out + err


def _refused(capsys, *argv: str) -> str:
    """`runner goldens check` reports a test it cannot run as that test's error (exit 1)."""
    assert main(list(argv)) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return out + err


# --- security: paths read from files stay inside their directory -------------------------
@pytest.fixture
def outside(tmp_path) -> Path:
    """A private file outside any suite, and a module definition beside it naming it."""
    home = tmp_path / "home"
    (home / "modules").mkdir(parents=True)
    (home / "id_rsa").write_text(f"-----BEGIN KEY-----\n{SECRET}\n")
    (home / "modules" / "evil.json").write_text(json.dumps(
        {"mlir": "../id_rsa", "compiler_flags": ["--iree-hal-target-device=local"]}))
    return home


def test_a_module_name_of_dotdot_segments_is_not_followed_out_of_the_suite(tmp_path, outside,
                                                                            capsys):
    test = tmp_path / "suite" / "torch_models" / "m" / "evil_quality_cpu.json"
    test.parent.mkdir(parents=True)
    test.write_text(json.dumps({"type": "quality", "markers": ["cpu"],
                                "modules": ["../../../home/modules/evil"]}))
    text = _exit_2(capsys, "goldens", "check", str(test))
    assert SECRET not in text
    assert f"{test}: modules[0]" in text and "leads outside" in text


@pytest.mark.parametrize("ref", ["../../home/id_rsa", "{home}/id_rsa", "file://{home}/id_rsa"])
def test_a_test_files_mlir_outside_its_directory_is_refused_unread(tmp_path, outside, capsys,
                                                                    ref):
    test = tmp_path / "suite" / "m" / "clip_cpu.json"
    test.parent.mkdir(parents=True)
    test.write_text(json.dumps({"mlir": ref.format(home=outside), "device": "local-task",
                                "compiler_flags": [], "inputs": [], "outputs": []}))
    text = _refused(capsys, "goldens", "check", str(test))
    assert SECRET not in text
    assert f"{test}: mlir" in text and "leads outside" in text


def test_the_shipped_suites_still_reach_the_runners_own_assets():
    """The exception: `runner/assets/` (public files the runner ships) is reachable from the
    shipped tiny suites' `../../runner/assets/tiny/*.mlir`."""
    from runner.goldens.testfile import load_tests
    from runner.inputs.paths import suite_ref

    for test in load_tests([REPO_DIR / "goldens" / "tiny", REPO_DIR / "goldens" / "tiny-torch"]):
        for module in test.modules:
            suite_ref(module.mlir, module.base_dir, module.where)  # no error
    assert ASSETS_DIR.is_dir()


def test_a_profiles_relative_model_path_outside_its_directory_is_refused(tmp_path, outside,
                                                                         capsys):
    profile = tmp_path / "profiles" / "p.yaml"
    profile.parent.mkdir()
    profile.write_text("extends: cpu\nmodel: ../home/id_rsa\n")
    text = _exit_2(capsys, "plan", "--profile", str(profile))
    assert SECRET not in text and f"{profile}: model" in text and "leads outside" in text


@pytest.fixture
def small_run(tmp_path, tiny_compiled) -> Path:
    out = tmp_path / "run"
    done = cli("run", "--profile", "tiny", "--count", "2", "--no-score", "--out", str(out),
               cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr
    return out


def test_a_sample_symlinked_out_of_the_run_dir_is_quarantined_not_aggregated(small_run,
                                                                             tmp_path):
    sample = SampleStore(small_run).path(1)
    elsewhere = tmp_path / "elsewhere.png"
    shutil.move(sample, elsewhere)  # a valid sample PNG, outside the run dir
    sample.symlink_to(elsewhere)
    done = cli("aggregate", str(small_run), cwd=tmp_path, env=ENV)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "sample 1 is corrupt (a symlink, not a sample file of this run)" in done.stderr
    (moved,) = (small_run / "samples" / CORRUPT_DIR).iterdir()
    assert moved.is_symlink() and elsewhere.is_file()  # the link moved aside, its target kept
    resumed = cli("run", "--resume", str(small_run), cwd=tmp_path, env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert not SampleStore(small_run).path(1).is_symlink()


# --- security: secrets are redacted in every message ---------------------------------------
def test_a_sas_signature_in_a_refused_find_links_url_is_redacted(capsys):
    url = f"ftp://acct.blob.core.windows.net/wheels/?sv=2024&sig={SECRET}"
    text = _exit_2(capsys, "image", "build", "--iree", "wheels:3.13.0", "--find-links", url,
                   "--dry-run")
    assert SECRET not in text and "sig=REDACTED" in text and "--find-links" in text


def test_a_token_in_an_argparse_usage_error_is_redacted(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--executor", f"https://user:{SECRET}@host/x?token={SECRET}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert SECRET not in err and "REDACTED" in err


# --- tracebacks that bad input used to reach -----------------------------------------------
@pytest.mark.parametrize(("data", "message"), [
    (b"id\tcaption\n0\t" + b"x" * 200_000 + b"\n", "a field longer than 16384 characters"),
    (b"id\tcaption\n0\t" + b"x" * 5000 + b"\n", "a caption of 5000 characters"),
    (b"id\tcaption\n0\tok\n1\tbad \xff byte\n", "not UTF-8 text (byte 0xff at line 3"),
    (b"id\tcaption\n0\tnul \x00 here\n", "holds a NUL character"),
])
def test_a_bad_captions_file_is_named(tmp_path, capsys, data, message):
    captions = tmp_path / "captions.tsv"
    captions.write_bytes(data)
    text = _exit_2(capsys, "run", "--profile", "cpu", "--count", "1", "--captions",
                   str(captions), "--no-score", "--out", str(tmp_path / "run"))
    assert message in text and str(captions) in text
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("line", "message"), [
    ("*.*.min_query_count = -5", "value '-5' of min_query_count is not a number in plain"),
    ("*.*.min_duration = 1e3", "value '1e3' of min_duration is not a number in plain"),
    ("*.*.min_duration = 0x100", "value '0x100' of min_duration"),
    ("*.*.min_duration = 999999999999", "min_duration = 999999999999 ms is out of range"),
    ("*.Server.target_qps = 0.0000001", "target_qps = 0.0000001 is out of range"),
])
def test_a_user_conf_value_loadgen_would_misread_is_refused(tmp_path, capsys, line, message):
    conf = tmp_path / "user.conf"
    conf.write_text(line + "\n")
    text = _exit_2(capsys, "mlperf", "--profile", "tiny", "--scenario", "server", "--mode",
                   "performance", "--user-conf", str(conf), "--out", str(tmp_path / "o"),
                   "--dry-run")
    assert message in text and f"{conf}:1" in text


def _checkpoint(root: Path) -> Path:
    """SDXL's configs (the seeded architecture's) as a checkpoint directory."""
    shutil.copytree(ASSETS_DIR / "sdxl", root, ignore=shutil.ignore_patterns("README.md"))
    return root


def _safetensors(header: object, length: int | None = None) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw


@pytest.mark.parametrize(("file", "data", "message"), [
    ("model_index.json", b"[" * 100_000, "is nested too deeply"),
    ("model_index.json", b'["StableDiffusionXLPipeline"]', "must hold a JSON object, not a list"),
    ("unet/config.json", b'{"sample_size": "128"}', "sample_size` must be a positive integer"),
    ("text_encoder/model.safetensors", _safetensors([1, 2]), "header is not a JSON object"),
    ("text_encoder/model.safetensors", _safetensors({"w": {"dtype": "F32", "shape": [2**40] * 2,
                                                           "data_offsets": [0, 4]}}),
     "larger than any file can hold"),
    ("text_encoder/model.safetensors", _safetensors({}, length=2**63), "header length says"),
])
def test_a_hostile_checkpoint_file_is_named(tmp_path, capsys, file, data, message):
    pytest.importorskip("iree.turbine")
    ckpt = _checkpoint(tmp_path / "ckpt")
    (ckpt / file).parent.mkdir(parents=True, exist_ok=True)
    (ckpt / file).write_bytes(data)
    text = _exit_2(capsys, "export", "sdxl", "--from", str(ckpt), "--out", str(tmp_path / "o"))
    assert message in text and str(ckpt / file) in text


def test_a_from_symlink_loop_is_named(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    text = _exit_2(capsys, "export", "sdxl", "--from", str(tmp_path / "a"), "--dry-run")
    assert "--from: cannot resolve the path" in text and "loop" in text


@pytest.mark.parametrize(("field", "where", "message"), [
    ('"golden_time_ms": NaN', "golden_time_ms",
     "NaN, which is not a finite number; allowed: a finite number, from -1.8e+308 to 1.8e+308"),
    ('"golden_time_ms": 1e400', "golden_time_ms", "1e400, which is not a finite number"),
    ('"x": {"y z": [0, -Infinity]}', 'x["y z"][1]', "-Infinity, which is not a finite number"),
    ('"seed": 12345678901234567890', "seed",
     "an integer of 20 digits; allowed: an integer from -9223372036854775808 to "
     "9223372036854775807"),
    ('"inputs": [{"source": "a.bin", "value": "9999999999x9999999999xf32"}]', "inputs[0]",
     "byte count overflows 64 bits"),
])
def test_test_suite_numbers_out_of_range_are_named(tmp_path, capsys, field, where, message):
    """Each such number with its file, its field and the range a number may have."""
    test = tmp_path / "clip_cpu.json"
    test.write_text('{"mlir": "clip.mlir", "device": "local-task", ' + field + "}")
    text = _exit_2(capsys, "goldens", "check", str(test))
    assert message in text and f"{test}: {where}" in text, text


@pytest.mark.parametrize("option", ["-m", "-k"])
def test_a_deeply_nested_selection_expression_is_refused(capsys, option):
    text = _exit_2(capsys, "goldens", "check", str(REPO_DIR / "goldens" / "tiny"), option,
                   "(" * 3000 + "cpu" + ")" * 3000)
    assert "the expression is 6003 characters, 6001 tokens" in text


@pytest.mark.parametrize(("value", "message"), [
    ("layout.devices=[0, 1", "cannot read the value"),
    ("name=!!python/object/apply:os.system [echo pwned]", "a tag (tag:yaml.org,2002:python"),
    ("layout.devices=&a 0", "an anchor (`&name`) is not allowed"),
    ("layout.batch_size=.inf", ".inf, which is not a finite number; allowed: a finite number"),
])
def test_a_set_value_that_is_not_plain_yaml_is_refused(capsys, value, message):
    text = _exit_2(capsys, "plan", "--profile", "cpu", "--set", value)
    assert message in text and "--set " in text


def test_a_yaml_alias_bomb_in_a_profile_is_refused_at_once(tmp_path):
    """Nine levels of aliases: before, loading, merging and recording it ran for ever."""
    levels = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("extends: cpu\naccuracy:\n  samples:\n    " + "\n    ".join(levels) + "\n")
    # (a process of its own: a profile that loads for ever is ended by the timeout)
    done = runner_process("plan", "--profile", str(bomb), cwd=tmp_path, env=ENV, timeout=60)
    assert done.returncode == EXIT_BAD_INPUT and "Traceback" not in done.stderr
    assert f"{bomb}: cannot read the profile: an anchor (`&name`) is not allowed" in done.stderr


def test_a_truncated_bare_accuracy_log_is_said_to_be_truncated(tmp_path, capsys):
    """Not a run dir: no advice to resume a run that does not exist."""
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text('[{"seq_id": 0, "qsl_idx": 0, "data": "00', encoding="ascii")
    text = _exit_2(capsys, "score", str(tmp_path), "--profile", "tiny")
    assert "truncated accuracy log" in text and str(log) in text and "--resume" not in text
