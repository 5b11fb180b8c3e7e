"""`runner mlperf`: real LoadGen tests over real tiny-model workers on CPU.

Short tests: a user.conf with a 1 s minimum duration and a handful of queries. The one slow
test is the submission run that is scored (FID/CLIP networks load for tens of seconds).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from runner.cli import main
from runner.errors import RunnerError
from runner.loadgen.batcher import Batcher
from runner.loadgen.conf import Flags, merged_user_conf, parse_conf_text
from runner.loadgen.logs import DETAIL, SUMMARY, detail_facts, parse_summary
from runner.loadgen.run import MlperfRequest, prepare
from runner.loadgen.submission import check_tree, expected_files
from runner.profile import load_profile

SHORT = ("stable-diffusion-xl.*.min_duration = 1000\n"
         "stable-diffusion-xl.*.min_query_count = {n}\n")


def user_conf(tmp: Path, n: int, extra: str = "") -> Path:
    path = tmp / "user.conf"
    path.write_text(SHORT.format(n=n) + extra)
    return path


def mlperf(*args: str) -> int:
    return main(["mlperf", *args])


def record(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def worker_samples(out: Path) -> int:
    return sum(json.loads(p.read_text())["samples"]
               for p in (out / "work" / "workers").glob("*.stats.json"))


# --- settings and bad input, before anything runs -----------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    ("stable-diffusion-xl.Offline.min_duraton = 10\n", "no setting 'min_duraton'"),
    ("stable-diffusion-xl.Offline.target_qps = fast\n", "is not a number"),
    ("stable-diffusion-xl.Offline.target_qps 4\n", "model.scenario.key = value"),
    ("stable-diffusion-xl.Offlne.target_qps = 4\n", "unknown scenario 'Offlne'"),
    ("*.Offline.target_qps = 4\n*.Offline.target_qps = 5\n", "set twice"),
])
def test_bad_conf_lines_are_named(text, message):
    with pytest.raises(RunnerError, match=message) as e:
        parse_conf_text(text, "user.conf")
    assert "user.conf:" in str(e.value)


def test_user_conf_cannot_switch_mode_and_flags_cannot_contradict_it():
    profile = load_profile("tiny")
    mode = parse_conf_text("*.*.mode = 1\n", "u.conf")
    with pytest.raises(RunnerError, match=r"audit\.config"):
        merged_user_conf("Offline", profile.mlperf, mode, Flags(), "u.conf")
    qps = parse_conf_text("*.Offline.target_qps = 3\n", "u.conf")
    with pytest.raises(RunnerError, match="--qps sets target_qps = 5"):
        merged_user_conf("Offline", profile.mlperf, qps, Flags(qps=5), "u.conf")


def test_merged_user_conf_keeps_precedence_over_loadgen_wildcards():
    """LoadGen prefers an exact key over a wildcard whatever the order, so the merged file
    spells every key exactly: the user's wildcard beats the profile, a flag beats both."""
    profile = load_profile("tiny")  # offline_expected_qps 2
    user = parse_conf_text("*.Offline.target_qps = 3\n*.*.min_duration = 1500\n", "u.conf")
    text = merged_user_conf("Offline", profile.mlperf, user, Flags(count=8), "u.conf")
    lines = {line.key: line.value for line in parse_conf_text(text, "merged")}
    assert lines == {"target_qps": "3", "min_duration": "1500",
                     "performance_sample_count_override": "8"}


def test_bad_requests_fail_before_anything_is_created(tmp_path, capsys):
    out = tmp_path / "out"
    bad = tmp_path / "bad.conf"
    bad.write_text("stable-diffusion-xl.Server.taget_qps = 2\n")
    assert mlperf("--profile", "tiny", "--scenario", "server", "--mode", "performance",
                  "--user-conf", str(bad), "--out", str(out)) == 2
    assert f"{bad}:1" in capsys.readouterr().err
    assert mlperf("--profile", "tiny", "--scenario", "offline", "--mode", "performance",
                  "--compliance", "TEST01", "--out", str(out)) == 2
    assert "--mode submission" in capsys.readouterr().err
    assert mlperf("--profile", "tiny", "--scenario", "offline", "--mode", "submission",
                  "--compliance", "TEST05", "--out", str(out)) == 2
    assert mlperf("--profile", "tiny", "--scenario", "offline", "--mode", "submission",
                  "--compliance", "TEST04", "--count", "3", "--out", str(out)) == 2
    assert "issues sample 3 only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mlperf("--profile", "tiny", "--scenario", "multistream", "--mode", "performance",
               "--out", str(out))
    with pytest.raises(RunnerError, match="unknown mode"):
        prepare(MlperfRequest(load_profile("tiny"), "offline", "findpeak", out))
    assert not out.exists()


def test_dry_run_prints_commands_and_loadgen_settings(tmp_path, capsys):
    out = tmp_path / "dry"
    assert mlperf("--profile", "tiny", "--scenario", "server", "--mode", "submission",
                  "--compliance", "TEST01,TEST04", "--count", "8", "--qps", "3",
                  "--out", str(out), "--dry-run") == 0
    text = capsys.readouterr().out
    assert "iree-compile" in text and "runner.batch.worker --task" in text
    assert "stable-diffusion-xl.Server.target_qps = 3" in text
    # MLPerf's rules come from LoadGen itself: SDXL Server's 20 s target latency.
    assert "server_target_latency_ns = 20000000000" in text
    assert "# LoadGen test TEST04" in text and "performance_issue_same_index = 3" in text
    assert not out.exists()


# --- the batcher ----------------------------------------------------------------------------
def test_offline_batcher_cuts_everything_at_once():
    batches: list[list] = []
    b = Batcher(2, batches.append, None)
    b.add([(k, k) for k in range(5)])
    assert [len(x) for x in batches] == [2, 2, 1]


def test_server_batcher_waits_at_most_its_limit():
    batches: list[tuple[float, list]] = []
    b = Batcher(3, lambda items: batches.append((time.monotonic(), items)), 0.2)
    t0 = time.monotonic()
    b.add([(0, 7)])
    b.add([(1, 8)])
    assert batches == []  # not full, limit not reached
    deadline = time.monotonic() + 5
    while not batches and time.monotonic() < deadline:
        time.sleep(0.01)
    assert batches[0][1] == [(0, 7), (1, 8)] and batches[0][0] - t0 >= 0.2
    b.add([(2, 1), (3, 2), (4, 3)])  # a full batch leaves at once
    assert batches[1][1] == [(2, 1), (3, 2), (4, 3)]
    b.close()


# --- performance runs -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def offline_perf(tmp_path_factory) -> Path:
    """4 samples, 12 queries: LoadGen issues each qsl_idx about 3 times."""
    tmp = tmp_path_factory.mktemp("lg-offline")
    out = tmp / "out"
    rc = mlperf("--profile", "tiny", "--scenario", "offline", "--mode", "performance",
                "--count", "4", "--user-conf", str(user_conf(tmp, 12)), "--out", str(out))
    assert rc in (0, 1), rc
    return out


def test_offline_performance_summary_and_reports(offline_perf):
    r = record(offline_perf)
    (test,) = r["tests"]
    summary = parse_summary(offline_perf / "performance" / SUMMARY)
    assert summary.scenario == "Offline" and summary.mode == "PerformanceOnly"
    assert summary.result in ("VALID", "INVALID") and summary.samples_per_second > 0
    assert set(summary.latency_ns) >= {"min", "max", "mean", "p50", "p90", "p99"}
    assert test["summary"]["result"] == summary.result
    assert test["summary"]["samples_per_second"] == summary.samples_per_second
    assert r["status"] == ("PASS" if summary.valid else "FAIL")
    md = (offline_perf / "summary.md").read_text()
    assert summary.result in md and f"{summary.samples_per_second:.3f}" in md
    html = (offline_perf / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and summary.result in html
    assert not detail_facts(offline_perf / "performance" / DETAIL)["errors"]


def test_repeated_samples_are_each_computed_and_completed_once(offline_perf):
    """LoadGen issued 12 samples over 4 qsl_idx: MLPerf forbids reusing a result across
    queries, so the workers computed 12 images and LoadGen got 12 completions."""
    sut = record(offline_perf)["tests"][0]["sut"]
    assert sut["issued"] >= 12 and sut["completed"] == sut["issued"]
    assert sut["completed_empty"] == 0 and sut["recomputed"] == 0
    assert worker_samples(offline_perf) == sut["issued"]
    # every answered image was released: nothing left in the store
    assert not list((offline_perf / "work" / "samples").glob("*.png"))


def test_server_batches_fill_up_to_the_batch_size(tmp_path):
    out = tmp_path / "out"
    rc = mlperf("--profile", "tiny", "--set", "layout.batch_size=2", "--scenario", "server",
                "--mode", "performance", "--count", "8", "--qps", "8",
                "--user-conf", str(user_conf(tmp_path, 10)), "--out", str(out))
    assert rc in (0, 1)
    sut = record(out)["tests"][0]["sut"]
    summary = parse_summary(out / "performance" / SUMMARY)
    assert summary.scenario == "Server" and "Completed samples per second" in summary.fields
    if not summary.valid:  # a 1 s Server test usually fails early stopping: LoadGen says why
        assert summary.reasons and all(not r.endswith(",") for r in summary.reasons)
        assert record(out)["tests"][0]["summary"]["reasons"] == summary.reasons
    assert sut["completed"] == sut["issued"] >= 10
    assert sut["batches"] < sut["issued"]  # some batches held two samples
    assert sut["store_to_complete_ms"]["p99"] is not None


def test_accuracy_mode_answers_every_sample_once_in_qsl_order(tmp_path):
    """Server accuracy: LoadGen issues the 8 samples in its own random order; its log holds
    each once, in ascending qsl_idx (the order the runner's aggregation scores)."""
    out = tmp_path / "out"
    assert mlperf("--profile", "cpu", "--scenario", "server", "--mode", "accuracy",
                  "--count", "8", "--qps", "4", "--no-score",
                  "--user-conf", str(user_conf(tmp_path, 8)), "--out", str(out)) == 0
    log = json.loads((out / "accuracy" / "mlperf_log_accuracy.json").read_text())
    assert [rec["qsl_idx"] for rec in log] == list(range(8))
    assert {len(bytes.fromhex(rec["data"])) for rec in log} == {128 * 128 * 3}
    assert parse_summary(out / "accuracy" / SUMMARY).mode == "AccuracyOnly"


# --- faults -----------------------------------------------------------------------------------
def _kill_when_busy(out: Path, names: list[str]) -> threading.Thread:
    """SIGKILLs the named workers once each holds a claimed batch of a LoadGen test."""
    def go() -> None:
        deadline = time.monotonic() + 120
        claimed = out / "work" / "queue" / "claimed"
        todo = list(names)
        while todo and time.monotonic() < deadline:
            for name in list(todo):
                pid = out / "work" / "workers" / f"{name}.pid"
                if pid.is_file() and list((claimed / name).glob("q*.json")):
                    os.kill(int(pid.read_text()), signal.SIGKILL)
                    todo.remove(name)
            time.sleep(0.01)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_killed_worker_batch_is_requeued_and_completed_once(tmp_path):
    out = tmp_path / "out"
    killer = _kill_when_busy(out, ["w000"])
    rc = mlperf("--profile", "cpu", "--scenario", "offline", "--mode", "performance",
                "--count", "12", "--user-conf", str(user_conf(tmp_path, 12)),
                "--out", str(out))
    killer.join()
    assert rc in (0, 1)
    sut = record(out)["tests"][0]["sut"]
    (death,) = sut["deaths"]
    assert death["worker"] == "w000" and death["requeued"]
    assert sut["completed"] == sut["issued"] and sut["completed_empty"] == 0
    assert not detail_facts(out / "performance" / DETAIL)["errors"]


def test_all_workers_dead_fails_clearly_and_keeps_loadgen_logs(tmp_path, capsys):
    out = tmp_path / "out"
    killer = _kill_when_busy(out, ["w000", "w001"])
    start = time.monotonic()
    rc = mlperf("--profile", "cpu", "--scenario", "offline", "--mode", "performance",
                "--count", "40", "--user-conf", str(user_conf(tmp_path, 40)),
                "--out", str(out))
    killer.join()
    assert rc == 2 and time.monotonic() - start < 120
    assert "every worker is dead" in capsys.readouterr().err
    r = record(out)
    assert r["status"] == "FAILED" and "every worker is dead" in r["failure"]
    sut = r["tests"][0]["sut"]
    assert sut["completed_empty"] > 0
    assert sut["completed"] + sut["completed_empty"] == sut["issued"]
    assert (out / "performance" / SUMMARY).is_file()  # LoadGen's logs are kept
    assert json.loads((out / "work" / "run.json").read_text())["status"] == "failed"


# --- compliance ---------------------------------------------------------------------------------
def test_test04_issues_one_sample_and_every_issue_is_computed(tmp_path):
    """TEST04 (no caching) issues qsl_idx 3 over and over; each is computed and verified
    against the performance run. Unscored, so the submission tree names accuracy.txt missing."""
    out = tmp_path / "out"
    audit = tmp_path / "audit.config"
    audit.write_text("*.*.mode = 2\n*.*.performance_issue_unique = 0\n"
                     "*.*.performance_issue_same = 1\n*.*.performance_issue_same_index = 3\n")
    rc = mlperf("--profile", "tiny", "--scenario", "offline", "--mode", "submission",
                "--compliance", "TEST04", "--audit-conf", str(audit), "--count", "4",
                "--user-conf", str(user_conf(tmp_path, 6)), "--no-score", "--out", str(out))
    assert rc == 1
    r = record(out)
    names = [t["name"] for t in r["tests"]]
    assert names == ["accuracy", "performance", "TEST04"]
    test04 = r["tests"][2]["sut"]
    assert test04["completed"] == test04["issued"] >= 6
    assert worker_samples(out) == sum(t["sut"]["issued"] for t in r["tests"])
    accuracy = json.loads((out / "accuracy" / "mlperf_log_accuracy.json").read_text())
    assert sorted(rec["qsl_idx"] for rec in accuracy) == [0, 1, 2, 3]
    (v,) = r["compliance"]
    assert v["test"] == "TEST04" and set(v["checks"]) == {"performance"}
    verdict = (out / "TEST04" / "verify_performance.txt").read_text()
    assert ("TEST PASS" in verdict) == v["passed"]
    assert f"reference score = {r['tests'][1]['summary']['samples_per_second']}" in verdict
    problems = r["submission"]["problems"]
    assert any("accuracy/accuracy.txt" in p for p in problems), problems


def test_tree_check_names_missing_and_misplaced_files(tmp_path):
    rel = expected_files("sys", "Offline", ("TEST01",))
    assert "results/sys/stable-diffusion-xl/Offline/performance/run_1/mlperf_log_summary.txt" \
        in rel
    assert "compliance/sys/stable-diffusion-xl/Offline/TEST01/accuracy/mlperf_log_accuracy.json" \
        in rel
    problems = check_tree(tmp_path, "sys", "Offline", ("TEST01",))
    assert len(problems) == len(rel)


# --- a scored submission (slow: the FID/CLIP networks load for tens of seconds) -------------
@pytest.mark.slow
def test_submission_scores_like_the_runner_and_its_tree_conforms(tmp_path):
    out = tmp_path / "sub"
    rc = mlperf("--profile", "tiny", "--scenario", "offline", "--mode", "submission",
                "--compliance", "TEST01", "--count", "8",
                "--user-conf", str(user_conf(tmp_path, 8)), "--out", str(out))
    r = record(out)
    assert rc in (0, 1) and r["failure"] is None
    # The same 8 samples through the runner's own queue run and aggregation.
    own_dir = tmp_path / "own"
    assert main(["run", "--profile", "tiny", "--count", "8", "--no-score",
                 "--out", str(own_dir)]) == 0
    from runner.accuracy.evaluate import evaluate_run

    own = evaluate_run(own_dir, allow_subset=True, progress=False)
    assert (r["accuracy"]["fid"], r["accuracy"]["clip"]) == (own.result.fid, own.result.clip)
    assert r["accuracy"]["n"] == own.result.n == 8
    # TEST01: the images sampled in performance mode are the accuracy run's.
    (v,) = r["compliance"]
    assert v["checks"]["accuracy"]["passed"]
    assert "num_perf_log_data_mismatch = 0" in (out / "TEST01" / "verify_accuracy.txt").read_text()
    # MLPerf's submission layout.
    root, system = out / "submission", "tiny-cpu"
    assert r["submission"]["problems"] == [] == check_tree(root, system, "Offline", ("TEST01",))
    assert set(r["submission"]["files"]) == set(expected_files(system, "Offline", ("TEST01",)))
    summary = root / "results" / system / "stable-diffusion-xl" / "Offline" / "performance" \
        / "run_1" / SUMMARY
    summary.rename(summary.with_name("summary.txt"))
    assert check_tree(root, system, "Offline", ("TEST01",)) == [
        f"missing {summary.relative_to(root)} (PerformanceOnly)"]
