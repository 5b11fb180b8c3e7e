"""Every `--set` is honoured or refused: each settable field of every shipped profile goes
through `runner run --dry-run`, which prints the value the loaded profile holds for each
field set (`# --set FIELD: VALUE`); a field `runner run` does not read is refused, naming the
ones it reads. Other commands refuse the fields they do not read the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli

from runner.base.paths import CONFIGS_DIR
from runner.batch import executors
from runner.batch.cli import PLAN_READS, RUN_READS
from runner.bench.cli import BENCH_READS
from runner.config.profile import load_profile
from runner.config.reads import ProfileReads, fields_set, profile_field_value, settable_fields

SHIPPED = tuple(sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml")))
HOSTILE_STATS = "/labs/$(touch pwned) 'q\" dir/val2014.npz"
CHIPS = {"cpu": "znver4", "hip": "gfx950", "cuda": "sm_86"}
# Each field's values to try, as (--set text, the value expected back): a value unlike the
# profile's own where one is valid for it, then the profile's own value set again.


def _tries(field: str, current: Any, backend: str, spec: Path) -> list[tuple[str, Any]]:
    other = {
        "name": [("walked", "walked")],
        "count": [("3", 3)],
        "model.source": [("seeded:sdxl", "seeded:sdxl")],
        "model.dtype": [("fp32", "float32"), ("fp16", "float16")],
        "model.vae_dtype": [("fp32", "float32"), ("fp16", "float16")],
        "model.vae_from": [("null", None)],
        "target.backend": [("rocm", "hip")],
        "target.driver": [("local-sync", "local-sync")],
        "target.chip": [(CHIPS[backend], CHIPS[backend])],
        "target.compile_flags": [("[--iree-opt-level=O2]", ["--iree-opt-level=O2"])],
        "target.submodel_flags": [("{vae: [--iree-opt-level=O2]}",
                                   {"vae": ["--iree-opt-level=O2"]})],
        "target.tuning_spec": [(str(spec), str(spec))],
        "target.default_tuning_specs": [("true", True), ("false", False)],
        "target.runtime_flags": [("[--task_topology_max_group_count=1]",
                                  ["--task_topology_max_group_count=1"])],
        "layout.gpus": [("4", 4)],
        "layout.partition": [("spx", "spx"), ("cpx", "cpx")],
        "layout.devices": [("[0]", [0])],
        "layout.cpd": [("2", 2)],
        "layout.batch_size": [("2", 2)],
        "layout.vae_batch_size": [("1", 1), ("2", 2)],
        "layout.numa": [("true", True)],
        "layout.cores_per_device": [("1", 1)],
        "layout.allow_oversubscribe": [("true", True)],
        "accuracy.fid": [("[1.5, 2.5]", [1.5, 2.5])],
        "accuracy.clip": [("[3.5, 4.5]", [3.5, 4.5])],
        "accuracy.metrics": [("[clip]", ["clip"])],
        "accuracy.backbones": [("seeded", "seeded"), ("pretrained", "pretrained")],
        "accuracy.seed": [("7", 7)],
        "accuracy.fid_statistics": [(HOSTILE_STATS, HOSTILE_STATS)],
        "accuracy.samples": [("0-9", "0-9")],
    }.get(field)
    if other is None:  # a field `runner run` refuses: no value of it is tried twice
        assert field not in RUN_READS.read(), f"no value to try for {field}"
        other = []
    unlike = [(text, want) for text, want in other if want != current]
    own = json.loads(json.dumps(current, default=str))
    dtype_words = {"float32": "fp32", "float16": "fp16"}
    own_text = (dtype_words[own] if isinstance(own, str) and own in dtype_words
                else json.dumps(own))
    return [*unlike, (own_text, own)]


def _printed(stdout: str, field: str) -> Any:
    lines = [line for line in stdout.splitlines() if line.startswith(f"# --set {field}: ")]
    assert len(lines) == 1, stdout[:2000]
    return json.loads(lines[0].removeprefix(f"# --set {field}: "))


def _refused(proc, field: str, reads: ProfileReads) -> None:
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr[-1000:])
    assert (f"`--set {field}` is not read by `runner {reads.command}`; it reads: "
            f"{reads.text()}") in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def probed_once(monkeypatch) -> dict[tuple, executors.WorkerProbe]:
    """Each distinct worker command and environment started once for the walk (a real
    `python -m runner.batch.worker --check`, 0.7 s of CPU), its answer given to every later
    dry run that would start the very same one: the walk checks what each `--set` makes of
    the profile, not the worker's environment (tests/test_preflight.py starts it afresh
    every time). Returns the probes made, by command and environment."""
    made: dict[tuple, executors.WorkerProbe] = {}
    real = executors.run_probe

    def once(argv: list[str], env: dict[str, str], shown: str) -> executors.WorkerProbe:
        key = (tuple(argv), tuple(sorted(env.items())), shown)
        if key not in made:
            made[key] = real(argv, env, shown)
        return made[key]

    monkeypatch.setattr(executors, "run_probe", once)
    return made


def test_the_walk_covers_every_settable_field():
    assert "accuracy.fid_statistics" in settable_fields() and "count" in settable_fields()
    assert "layout.cpd" in RUN_READS.read() and "mlperf.system" not in RUN_READS.read()


@pytest.mark.slow  # 40 dry runs of each profile: 3 to 10 s apiece on 2 cores
@pytest.mark.parametrize("name", SHIPPED)
def test_every_field_set_on_a_run_is_the_value_it_runs_with_or_refused(
        name, lab_profiles, probed_once, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "spec q.mlir"
    spec.write_text("module {}\n")
    profile = load_profile(name)
    out = tmp_path / "run"
    honoured = 0
    for field in settable_fields():
        current = profile_field_value(profile, field)
        tries = _tries(field, current, profile.target.backend, spec)
        if field not in RUN_READS.read():
            _refused(cli("run", "--profile", name, "--set", f"{field}={tries[0][0]}",
                         "--dry-run", "--out", out), field, RUN_READS)
            continue
        errors = []
        for text, want in tries:
            proc = cli("run", "--profile", name, "--set", f"{field}={text}", "--dry-run",
                       "--out", out)
            # A lab profile's dry run here stops at the preflight (no GPUs, no MLPerf
            # scoring files) after printing what was set: the value taken is still shown.
            stopped_late = proc.returncode == 2 and "preflight: " in proc.stderr
            if proc.returncode == 0 or (stopped_late and f"# --set {field}: " in proc.stdout):
                assert _printed(proc.stdout, field) == want, (field, text)
                honoured += want != current
                break
            assert proc.returncode == 2 and "is not read by" not in proc.stderr, proc.stderr
            errors.append(proc.stderr)
        else:
            pytest.fail(f"{name}: no value of {field} runs: {errors}")
    assert not out.exists() and not (tmp_path / "pwned").exists()
    assert honoured >= 15, honoured  # most fields took a value unlike the profile's own
    # the dry runs' preflights started the worker's python for real, and it started
    assert any(p.returncode == 0 for p in probed_once.values()), probed_once


def test_the_effective_value_is_the_one_the_run_records(tmp_path):
    """Not the text given: the typed value the run is made with (run.json's layout)."""
    proc = cli("run", "--profile", "cpu", "--set", "layout.devices=0-1", "--set",
               "model.vae_dtype=fp16", "--dry-run", "--out", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    assert _printed(proc.stdout, "layout.devices") == [0, 1]
    assert _printed(proc.stdout, "model.vae_dtype") == "float16"


@pytest.mark.parametrize(("argv", "reads", "field"), [
    (["plan", "--profile", "cpu"], PLAN_READS, "accuracy.fid_statistics"),
    (["plan", "--profile", "cpu"], PLAN_READS, "model.dtype"),
    (["bench", "--profile", "cpu", "--dry-run", "--out", "B"], BENCH_READS, "mlperf.division"),
    (["bench", "--profile", "cpu", "--dry-run", "--out", "B"], BENCH_READS, "accuracy.seed"),
    (["run", "--profile", "cpu", "--dry-run", "--out", "R"], RUN_READS, "mlperf.division"),
    (["run", "--profile", "cpu", "--dry-run", "--out", "R"], RUN_READS, "target.sku"),
])
def test_a_command_refuses_a_field_it_does_not_read(argv, reads, field, tmp_path,
                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(cli(*argv, "--set", f"{field}=1"), field, reads)
    assert not any(tmp_path.iterdir())


def _declarations() -> tuple[ProfileReads, ...]:
    from runner.accuracy.cli import ORACLE_READS
    from runner.bench.cli import GOLDENS_READS
    from runner.bisect.cli import BISECT_READS, TREND_READS
    from runner.cli.validate import VALIDATE_READS
    from runner.loadgen.cli import MLPERF_READS
    from runner.model.cli import COMPILE_READS, FETCH_READS, GENERATE_READS

    return (PLAN_READS, RUN_READS, BENCH_READS, ORACLE_READS, GOLDENS_READS, BISECT_READS,
            TREND_READS, VALIDATE_READS, MLPERF_READS, COMPILE_READS, FETCH_READS,
            GENERATE_READS)


def test_every_command_that_takes_set_declares_what_it_reads():
    """One declaration per command that takes `--set`, each naming fields that exist, and
    every field a profile can hold is read by some command."""
    from runner.cli.grammar import options_of
    from runner.cli.main import build_parser

    every = _declarations()
    with_set = {c.removeprefix("runner ") for c, a in options_of(build_parser())
                if "--set" in a.option_strings}
    assert {r.command for r in every} == with_set and len(every) == len(with_set)
    assert {f for r in every for f in r.read()} == set(settable_fields())


def test_the_docs_table_is_what_each_command_reads():
    page = (Path(__file__).parents[1] / "docs" / "layouts.md").read_text()
    table = page.split("<!-- profile-reads -->")[1].split("<!-- /profile-reads -->")[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `runner")]
    assert {cmd.strip("|` ").removeprefix("runner "): fields.strip(" |")
            for cmd, fields in rows} == {r.command: r.text() for r in _declarations()}


def test_a_flag_and_a_set_of_the_same_field_are_refused(tmp_path):
    both = cli("run", "--profile", "cpu", "--set", "count=3", "--count", "2", "--dry-run",
               "--out", tmp_path / "r")
    assert both.returncode == 2 and "`--set count` and --count" in both.stderr
    layout = cli("plan", "--profile", "cpu", "--set", "layout.cpd=2", "--cpd", "1")
    assert layout.returncode == 2 and "`--set layout.cpd` and --cpd" in layout.stderr


def test_a_section_set_whole_sets_each_of_its_fields():
    assert fields_set({"layout": {"cpd": 2, "devices": "0"}}) == {
        "layout.cpd": "layout", "layout.devices": "layout"}
    assert fields_set({"model": "seeded:sdxl", "mlperf.system.id": "x"}) == {
        "model.source": "model", "mlperf.system": "mlperf.system.id"}
