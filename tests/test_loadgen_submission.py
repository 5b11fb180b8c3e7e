"""`runner mlperf --mode submission`: one real tiny submission (the cpu profile's two workers;
SingleStream, Offline and Server; TEST01 and TEST04; scored), then every rule MLPerf's
submission checker enforces, as our own assertions on its tree: the
`<division>/<submitter>/` layout of the round, the systems JSON's fields, the files,
truncation and hash, the settings of every test, TEST01 over all records. When a checkout of
mlcommons/inference is at hand (MLPERF_INFERENCE_DIR), the checker itself and MLPerf's
compliance scripts run on the same outputs too.

The run is short (1 s tests, 8 samples), so the round's rules for a result are not met; the
run lists exactly which (`rules_not_met`), and those are the only errors the checker gives.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlperf_inference import checkout, run_checker, run_script
from test_loadgen import mlperf, record

from runner.base.errors import RunnerError
from runner.config.mlperf_data import load_captions, load_review_ids
from runner.config.profile import load_profile
from runner.loadgen.compliance import check_accuracy
from runner.loadgen.logs import ACCURACY_LOG, DETAIL, detail_values
from runner.loadgen.rules import V6_1
from runner.loadgen.submission import (
    VIEWABLE_CHARS,
    check_tree,
    expected_files,
    truncate_accuracy_log,
    write_images,
)

pytestmark = pytest.mark.slow
SCENARIOS = ("SingleStream", "Offline", "Server")
SHAPE = (128, 128, 3)
# Offline's one query holds 16 samples over the 8-sample set: TEST01's log then repeats
# every qsl_idx, which the compliance checks must compare too.
CONF = ("stable-diffusion-xl.*.min_duration = 1000\n"
        "stable-diffusion-xl.*.min_query_count = 8\n"
        "stable-diffusion-xl.Offline.min_query_count = 16\n")
SYSTEM = "cpu-2dev"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("lg-submission")
    conf = tmp / "user.conf"
    conf.write_text(CONF)
    out = tmp / "out"
    rc = mlperf("--profile", "cpu", "--scenario", "singlestream,offline,server",
                "--mode", "submission", "--count", "8", "--user-conf", str(conf),
                "--out", str(out))
    assert rc in (0, 1), rc
    assert record(out)["failure"] is None
    return out


def base(run: Path) -> Path:
    return run / "submission" / "closed" / "Demo"


def scenario_dir(run: Path, scenario: str) -> Path:
    return base(run) / "results" / SYSTEM / "stable-diffusion-xl" / scenario


def plan(run: Path):
    """The run's SubmissionPlan as results.json records it (for expected_files/check_tree)."""
    from runner.loadgen.run import SubmissionPlan
    from runner.loadgen.system import SystemDescription

    sub = record(run)["submission"]
    fields = json.loads((base(run) / "systems" / f"{SYSTEM}.json").read_text())
    return SubmissionPlan(V6_1, sub["division"], sub["submitter"],
                          SystemDescription(sub["system"], fields, sub["system_sources"]))


# --- layout ----------------------------------------------------------------------------------
def test_tree_is_the_rounds_layout_under_division_and_submitter(run):
    r = record(run)
    sub = r["submission"]
    assert (sub["round"], sub["division"], sub["submitter"]) == ("v6.1", "closed", "Demo")
    assert sub["problems"] == [] == check_tree(run / "submission", plan(run), SCENARIOS,
                                               ("TEST01", "TEST04"), run)
    expected = set(expected_files(plan(run), SCENARIOS, ("TEST01", "TEST04")))
    files = set(sub["files"])
    assert expected <= files
    # The rest is what the checker tolerates: TEST01's accuracy.txt aside, the images.
    assert {Path(f).parent.name for f in files - expected} <= {"images"}
    assert sorted(p.name for p in (run / "submission").iterdir()) == ["closed"]
    assert sorted(p.name for p in base(run).iterdir()) == ["results", "src", "systems"]
    code = (base(run) / "src" / "stable-diffusion-xl" / "README.md").read_text()
    assert "iree-sdxl-runner 0.1.0" in code and r["runner"]["version"] == "0.1.0"
    assert "runner mlperf --profile cpu --scenario singlestream,offline,server" in code
    assert "runner.batch.worker --task" in code
    if r["runner"]["commit"]:
        assert r["runner"]["commit"] in code


def test_a_conforming_tree_broken_is_named(run, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(run / "submission", tree)
    d = tree / scenario_dir(run, "Offline").relative_to(run / "submission")
    (d / "performance" / "run_1" / "mlperf_log_summary.txt").unlink()
    system = tree / "closed" / "Demo" / "systems" / f"{SYSTEM}.json"
    fields = json.loads(system.read_text())
    fields.update(cooling="", submitter="Other")
    del fields["host_storage_type"]
    system.write_text(json.dumps(fields))
    (d / "accuracy" / ACCURACY_LOG).write_text("[" + " " * 20000 + "]")
    txt = d / "TEST01" / "accuracy" / "accuracy.txt"
    txt.write_text("hash=00\n")
    problems = check_tree(tree, plan(run), SCENARIOS, ("TEST01", "TEST04"), run)
    joined = "\n".join(problems)
    assert "missing closed/Demo/results/cpu-2dev/stable-diffusion-xl/Offline/performance/" \
        "run_1/mlperf_log_summary.txt (PerformanceOnly)" in joined
    assert "no field(s) host_storage_type" in joined and "empty field(s) cooling" in joined
    assert "submitter 'Other', its directory says 'Demo'" in joined
    assert "not truncated" in joined
    assert "hash in accuracy.txt is not the full log's" in joined
    assert len(problems) == 6, problems


# --- systems JSON and measurements ----------------------------------------------------------
def test_systems_json_fills_every_field_the_round_requires(run):
    fields = json.loads((base(run) / "systems" / f"{SYSTEM}.json").read_text())
    assert set(fields) == set(V6_1.system_fields)
    assert all(v not in ("", None) for v in fields.values()), fields
    assert fields["submitter"] == "Demo" and fields["division"] == "closed"
    assert fields["system_type"] == "datacenter,edge" and fields["number_of_nodes"] == 1
    sources = record(run)["submission"]["system_sources"]
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M).group(1).strip()
    assert fields["host_processor_model_name"] == model
    assert sources["host_processor_model_name"] == "detected"
    # IREE runs on the CPU here: no accelerator (a string, MLPerf reads a JSON 0 as empty).
    assert fields["accelerators_per_node"] == "0" and fields["accelerator_model_name"] == "N/A"
    import iree.runtime.version as v

    assert fields["framework"].startswith(f"IREE {v.VERSION}")
    assert "mlcommons-loadgen 6." in fields["other_software_stack"]
    assert sources["cooling"] == "profile" and sources["submitter"] == "command"


def test_measurements_record_the_models_real_precision_and_weights(run):
    m = json.loads((scenario_dir(run, "Offline") / "measurements.json").read_text())
    assert set(m) == set(V6_1.measurement_fields) and all(m.values())
    assert m["weight_data_types"] == "fp32"  # the tiny model is fp32, not SDXL's fp16
    profile = load_profile("cpu")
    for name in ("clip", "unet", "vae"):
        path = Path(profile.model.resolve(profile.model.submodels[name].weights))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert f"{name}: {path.name} sha256 {digest}" in m["starting_weights_filename"]
    assert "stabilityai" not in m["starting_weights_filename"]


# --- accuracy files: truncation, hash, images ------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_accuracy_logs_are_truncated_with_the_full_logs_hash(run, scenario):
    d = scenario_dir(run, scenario)
    for tree_log, txt, full in (
            (d / "accuracy" / ACCURACY_LOG, d / "accuracy" / "accuracy.txt",
             run / scenario / "accuracy" / ACCURACY_LOG),
            (d / "TEST01" / "accuracy" / ACCURACY_LOG, d / "TEST01" / "accuracy" / "accuracy.txt",
             run / scenario / "TEST01" / ACCURACY_LOG)):
        text, whole = tree_log.read_text(), full.read_text()
        assert tree_log.stat().st_size <= V6_1.max_accuracy_log_bytes < full.stat().st_size
        assert text == f"{whole[:VIEWABLE_CHARS]}\n\n...\n\n{whole[-VIEWABLE_CHARS:]}"
        digest = hashlib.sha256(full.read_bytes()).hexdigest()
        assert txt.read_text().endswith(f"\nhash={digest}\n")
    scores = (d / "accuracy" / "accuracy.txt").read_text().splitlines()[0]
    assert scores.startswith("Accuracy Results: {'FID_SCORE': '")


def test_truncation_is_mlperfs(tmp_path):
    """Our truncation against MLPerf's truncate_accuracy_log.py on the same tree."""
    root = checkout()
    tree = tmp_path / "in" / "closed" / "Org" / "results" / "s" / "stable-diffusion-xl" / \
        "Offline" / "accuracy"
    tree.mkdir(parents=True)
    log = tree / ACCURACY_LOG
    log.write_text(json.dumps([{"seq_id": i, "qsl_idx": i, "data": "AB" * 3000}
                               for i in range(5)]))
    (tree / "accuracy.txt").write_text("Accuracy Results: {}\n")
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "accuracy.txt").write_text("Accuracy Results: {}\n")
    truncate_accuracy_log(log, ours / ACCURACY_LOG, ours / "accuracy.txt")
    done = run_script(root / "tools" / "submission" / "truncate_accuracy_log.py", "--input",
                      str(tmp_path / "in"), "--submitter", "Org", "--output",
                      str(tmp_path / "theirs"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    theirs = tmp_path / "theirs" / tree.relative_to(tmp_path / "in")
    for name in (ACCURACY_LOG, "accuracy.txt"):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name


def test_accuracy_images_and_captions_as_mlperfs_reference_writes_them(tmp_path):
    """images/<id>.png for each of the round's ids the log holds, captions.txt for all."""
    from runner.model.images import decode_png

    ids = load_review_ids()
    rng = np.random.default_rng(0)
    images = {i: rng.integers(0, 256, SHAPE, dtype=np.uint8) for i in (ids[2], 7, ids[0])}
    log = tmp_path / ACCURACY_LOG
    log.write_text(json.dumps([{"seq_id": n, "qsl_idx": i, "data": a.tobytes().hex().upper()}
                               for n, (i, a) in enumerate(images.items())]))
    captions = load_captions()
    written = write_images(log, tmp_path / "images", ids, captions, SHAPE)
    assert written == sorted([ids[0], ids[2]])
    for i in written:
        assert np.array_equal(decode_png((tmp_path / "images" / f"{i}.png").read_bytes()),
                              images[i])
    assert (tmp_path / "images" / "captions.txt").read_text() == "".join(
        f"{i}  {captions[i]}\n" for i in ids)


def test_tree_images_dir_lists_the_rounds_captions(run):
    images = scenario_dir(run, "Server") / "accuracy" / "images"
    lines = (images / "captions.txt").read_text().splitlines()
    assert [int(line.split("  ")[0]) for line in lines] == load_review_ids()


# --- settings of every test --------------------------------------------------------------------
def test_every_test_ran_and_records_the_rounds_settings(run):
    r = record(run)
    assert [t["key"] for t in r["tests"]] == [f"{s}/{t}" for s in SCENARIOS for t in (
        "accuracy", "performance", "TEST01", "TEST04")]
    for test in r["tests"]:
        planned = r["settings"][test["key"]]
        facts = detail_values(run / test["key"] / DETAIL)
        for key, value in V6_1.seeds.items():
            assert planned[key] == facts[f"effective_{key}"] == value, test["key"]
        assert planned["min_duration_ms"] == facts["effective_min_duration_ms"] == 1000
        assert planned["performance_sample_count_override"] == \
            facts["effective_performance_sample_count"] == 8
        assert planned["accuracy_log_sampling_target"] == \
            facts["effective_accuracy_log_sampling_target"]
        assert planned["performance_issue_same_index"] == \
            facts["effective_performance_issue_same_index"]
        if test["scenario"] == "Server":
            assert planned["server_target_latency_ns"] == \
                facts["effective_target_latency_ns"] == 20000000000
        assert not facts["errors"], (test["key"], facts["errors"])
    assert r["settings"]["Offline/TEST01"]["accuracy_log_sampling_target"] == 128
    assert r["settings"]["Server/TEST04"]["performance_issue_same"] is True
    html = (run / "report.html").read_text()
    assert html.count("20000000000") == 4  # each Server test's record, not only the first


def test_singlestream_issues_one_sample_per_query(run):
    facts = detail_values(run / "SingleStream" / "performance" / DETAIL)
    assert facts["effective_samples_per_query"] == 1
    sut = next(t for t in record(run)["tests"] if t["key"] == "SingleStream/performance")["sut"]
    assert sut["batches"] == sut["issued"] == sut["completed"]


def test_test04_computes_every_issue_of_its_one_sample(run):
    r = record(run)
    for scenario in SCENARIOS:
        t = next(t for t in r["tests"] if t["key"] == f"{scenario}/TEST04")
        assert t["sut"]["completed"] == t["sut"]["issued"] >= 8
        accuracy = json.loads((run / scenario / "TEST04" / ACCURACY_LOG).read_text() or "[]")
        assert {rec["qsl_idx"] for rec in accuracy} <= {3}


def test_rules_not_met_are_exactly_the_short_runs(run):
    """What the 8-sample, 1 s run cannot meet, and nothing else."""
    categories = {
        "sample count": r"performance sample count 8 < 5000",
        "duration": r"min_duration 1000 ms < 600000",
        "offline samples per query": r"Offline/\w+: samples per query 16 < 5000",
        "early stopping": r"(SingleStream|Server)/\w+: early stopping not met",
        "invalid": r"LoadGen result INVALID",
        "dataset": r"/accuracy: 8 samples, the dataset has 5000",
        "accuracy": r"/accuracy: (FID_SCORE [\d.e-]+ outside|no CLIP_SCORE MLPerf can read)",
        "compliance": r"/TEST0[14]: verify_performance.txt says TEST FAIL",
    }
    notes = record(run)["submission"]["rules_not_met"]
    for note in notes:
        assert any(re.search(p, note) for p in categories.values()), note
    for name in ("sample count", "duration", "offline samples per query", "dataset",
                 "accuracy"):
        assert any(re.search(categories[name], n) for n in notes), name


# --- compliance: our verdicts, and MLPerf's on the same outputs --------------------------------
def _log(path: Path, records: list[tuple[int, np.ndarray]]) -> Path:
    path.write_text(json.dumps([{"seq_id": n, "qsl_idx": i, "data": a.tobytes().hex().upper()}
                                for n, (i, a) in enumerate(records)]))
    return path


def test_test01_compares_every_record_repeated_ones_included(tmp_path):
    rng = np.random.default_rng(1)
    images = [rng.integers(1, 255, SHAPE, dtype=np.uint8) for _ in range(3)]
    reference = _log(tmp_path / "acc.json", list(enumerate(images)))
    bad = images[1].copy()
    bad[0, 0, 0] ^= 0xFF  # the first byte: MLPerf's check sees it too
    tampered = _log(tmp_path / "perf.json",
                    [(1, images[1]), (0, images[0]), (1, bad), (2, images[2])])
    check = check_accuracy(reference, tampered, SHAPE)
    assert not check.passed
    assert "num_perf_log_entries = 4" in check.text
    assert "num_perf_log_qsl_idx_match = 4" in check.text
    assert "num_perf_log_data_mismatch = 1" in check.text
    clean = _log(tmp_path / "ok.json", [(1, images[1]), (0, images[0]), (1, images[1])])
    assert check_accuracy(reference, clean, SHAPE).passed


def _verification_inputs(run: Path, scenario: str, tmp: Path) -> Path:
    """A results dir as MLPerf's run_verification.py reads it: the full accuracy log and
    the performance logs."""
    results = tmp / "results"
    (results / "accuracy").mkdir(parents=True)
    shutil.copy(run / scenario / "accuracy" / ACCURACY_LOG, results / "accuracy")
    shutil.copytree(scenario_dir(run, scenario) / "performance", results / "performance")
    return results


def _mlperf_verdicts(test: str, results: Path, compliance: Path, work: Path) -> dict[str, bool]:
    work.mkdir()
    done = run_script(checkout() / "compliance" / test / "run_verification.py", "-r",
                      str(results), "-c", str(compliance), "-o", str(work / "out"), cwd=work)
    assert done.returncode == 0, done.stderr
    return {p.stem.removeprefix("verify_"): "TEST PASS" in p.read_text()
            for p in work.glob("verify_*.txt")}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_mlperfs_run_verification_agrees_with_our_verdicts(run, tmp_path, scenario):
    """MLPerf's TEST01 and TEST04 run_verification.py on the run's logs: our verdicts."""
    results = _verification_inputs(run, scenario, tmp_path)
    ours = {v["test"].split("/")[1]: v for v in record(run)["compliance"]
            if v["test"].startswith(f"{scenario}/")}
    for test in ("TEST01", "TEST04"):
        theirs = _mlperf_verdicts(test, results, run / scenario / test, tmp_path / test)
        assert theirs == {name: c["passed"] for name, c in ours[test]["checks"].items()}, test


def test_a_tampered_repeated_test01_record_fails_mlperfs_check_and_ours(run, tmp_path):
    """Offline's TEST01 log repeats every qsl_idx; its second record of one is corrupted in
    the first byte (what MLPerf's script compares): both verdicts fail it, while the
    untouched log passes both."""
    results = _verification_inputs(run, "Offline", tmp_path)
    records = json.loads((run / "Offline" / "TEST01" / ACCURACY_LOG).read_text())
    seen: set[int] = set()
    for rec in records:
        if rec["qsl_idx"] in seen:
            rec["data"] = ("00" if rec["data"][:2] != "00" else "FF") + rec["data"][2:]
            break
        seen.add(rec["qsl_idx"])
    else:
        pytest.fail("no repeated record in Offline's TEST01 log")
    tampered = tmp_path / "tampered"
    shutil.copytree(run / "Offline" / "TEST01", tampered)
    (tampered / ACCURACY_LOG).write_text(json.dumps(records))
    reference = run / "Offline" / "accuracy" / ACCURACY_LOG
    assert _mlperf_verdicts("TEST01", results, run / "Offline" / "TEST01",
                            tmp_path / "clean")["accuracy"]
    assert check_accuracy(reference, run / "Offline" / "TEST01" / ACCURACY_LOG, SHAPE).passed
    assert not _mlperf_verdicts("TEST01", results, tampered, tmp_path / "bad")["accuracy"]
    assert not check_accuracy(reference, tampered / ACCURACY_LOG, SHAPE).passed


def test_offline_test01_log_repeats_and_every_record_is_compared(run):
    text = (run / "Offline" / "TEST01" / "verify_accuracy.txt").read_text()
    records = json.loads((run / "Offline" / "TEST01" / ACCURACY_LOG).read_text())
    assert len(records) == 16 and len({r["qsl_idx"] for r in records}) == 8
    assert "num_perf_log_entries = 16" in text and "num_perf_log_qsl_idx_match = 16" in text
    assert "num_perf_log_data_mismatch = 0" in text and "TEST PASS" in text


# --- MLPerf's submission checker on the tree ---------------------------------------------------
# The only errors a short tiny run may give, and why (docs/incoming/h24.md lists the same).
EXPECTED_CHECKER_ERRORS = {
    "performance sample count": r"performance_sample_count, found 8, needs to be >= 5000",
    "minimum duration": r"Test duration less than 600s in user config",
    "Offline samples per query": r"Required minimum samples per query not met.*Found=16",
    "early stopping": r"Early stopping condition was not met",
    "dataset size": r"accurcy run does not cover all dataset",
    "compliance verdict (INVALID short runs)": r"Compliance test performance check in .* failed",
    "summary lines": r"(Some .* [Cc]hecks? failed for|NoResults|SUMMARY: submission has errors)",
}


def test_mlperfs_checker_finds_only_the_short_runs_errors(run, tmp_path):
    rc, errors = run_checker(run / "submission", "v6.1", "Demo", tmp_path)
    assert rc == 1  # the short run is no valid result
    unexpected = [e for e in errors
                  if not any(re.search(p, e) for p in EXPECTED_CHECKER_ERRORS.values())]
    assert unexpected == []
    for name in ("performance sample count", "minimum duration", "dataset size"):
        assert any(re.search(EXPECTED_CHECKER_ERRORS[name], e) for e in errors), name


def test_unknown_system_fields_and_hostile_names_fail_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "out"
    full = ("--profile", "tiny", "--scenario", "singlestream,offline,server",
            "--mode", "submission", "--out", str(out))
    assert mlperf(*full, "--set", "mlperf.system.cooling=\"\"") == 2
    assert "lacks 1 field(s) that nothing detects: cooling" in capsys.readouterr().err
    assert mlperf(*full, "--set", "mlperf.system.colling=air") == 2
    assert "does not know: colling" in capsys.readouterr().err
    for name in ("$(touch x)", "a/b", "new\nline", "it's", "two words", ".."):
        assert mlperf(*full, "--submitter", name) == 2
        assert "is not a plain name" in capsys.readouterr().err
    assert mlperf(*full, "--set", "mlperf.system.status=soon") == 2
    assert "status 'soon'" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(RunnerError, match="system id"):
        from runner.loadgen.system import check_name

        check_name(None, "system id (mlperf.system.id)", "here")


def test_loadgen_accuracy_scores_like_the_runners_own_run(run, tmp_path):
    """The same 8 samples through the runner's own queue run and aggregation score to the
    same FID/CLIP bits as LoadGen's Offline and Server accuracy logs (answered in qsl_idx
    order); SingleStream's log, in LoadGen's issue order, holds the same images."""
    from runner.accuracy.evaluate import evaluate_run
    from runner.cli.main import main

    own_dir = tmp_path / "own"
    assert main(["run", "--profile", "cpu", "--count", "8", "--no-score",
                 "--out", str(own_dir)]) == 0
    own = evaluate_run(own_dir, allow_subset=True, progress=False)
    accuracy = record(run)["accuracy"]
    for scenario in ("Offline", "Server"):
        assert (accuracy[scenario]["fid"], accuracy[scenario]["clip"]) == \
            (own.result.fid, own.result.clip)
        assert accuracy[scenario]["n"] == own.result.n == 8
    assert accuracy["Server"]["same_log_as"].endswith("Offline/accuracy/mlperf_log_accuracy.json")
    from runner.rundir.mlperf_log import iter_log_samples

    def images(scenario: str) -> dict[int, bytes]:
        log = run / scenario / "accuracy" / ACCURACY_LOG
        return {i: a.tobytes() for i, a in iter_log_samples(log, SHAPE)}

    assert images("SingleStream") == images("Offline")
