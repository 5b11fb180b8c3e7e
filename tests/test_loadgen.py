"""`runner mlperf`: real LoadGen tests over real tiny-model workers on CPU.

Short tests: a user.conf with a 1 s minimum duration and a handful of queries. The one slow
test is the submission run that is scored (FID/CLIP networks load for tens of seconds).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from test_preflight import HOLDERS, stand_in_rocm_smi

from runner.base.errors import RunnerError
from runner.cli.main import main
from runner.config.profile import load_profile
from runner.loadgen.batcher import Batcher
from runner.loadgen.conf import Flags, merged_user_conf, parse_conf_text
from runner.loadgen.logs import DETAIL, SUMMARY_LOG, detail_facts, parse_summary
from runner.loadgen.run import MlperfRequest, prepare_loadgen

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
    with pytest.raises(RunnerError, match="--offline-expected-qps sets target_qps = 5"):
        merged_user_conf("Offline", profile.mlperf, qps, Flags(offline_qps=5), "u.conf")
    short = parse_conf_text("*.*.min_query_count = 8\n", "u.conf")
    with pytest.raises(RunnerError, match="--min-query-count sets min_query_count = 16"):
        merged_user_conf("Offline", profile.mlperf, short, Flags(min_queries=16), "u.conf")


def test_min_query_count_is_a_flag():
    """A short performance run is one flag: Offline's one query holds min_query_count
    samples (MLPerf's 5000 for SDXL otherwise)."""
    text = merged_user_conf("Offline", load_profile("tiny").mlperf, [], Flags(min_queries=16),
                            None)
    assert "stable-diffusion-xl.Offline.min_query_count = 16" in text.splitlines()


def test_merged_user_conf_keeps_precedence_over_loadgen_wildcards():
    """LoadGen prefers an exact key over a wildcard whatever the order, so the merged file
    spells every key exactly: the user's wildcard beats the profile, a flag beats both."""
    profile = load_profile("tiny")  # offline_expected_qps 2
    user = parse_conf_text("*.Offline.target_qps = 3\n*.*.min_duration = 1500\n", "u.conf")
    text = merged_user_conf("Offline", profile.mlperf, user, Flags(count=8), "u.conf")
    lines = {line.key: line.value for line in parse_conf_text(text, "merged")}
    assert lines == {"target_qps": "3", "min_duration": "1500",
                     "performance_sample_count_override": "8"}


def test_a_user_conf_path_with_a_newline_keeps_the_merged_file_readable():
    """The merged file names the user.conf in a comment: a path holding a newline (or a
    quote) stays on that one line, so the file still parses."""
    profile = load_profile("tiny")
    user = parse_conf_text("*.Offline.target_qps = 3\n", "u.conf")
    where = 'carry a"b\nz/mlperf-short.conf'
    text = merged_user_conf("Offline", profile.mlperf, user, Flags(), where)
    assert text.splitlines()[0].startswith("# Merged by") and "z/mlperf" in text.splitlines()[0]
    assert {line.key for line in parse_conf_text(text, "merged")} == {"target_qps"}


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
    full = ("--scenario", "singlestream,offline,server", "--mode", "submission")
    assert mlperf("--profile", "tiny", *full, "--compliance", "TEST05", "--out", str(out)) == 2
    assert mlperf("--profile", "tiny", *full, "--count", "3", "--out", str(out)) == 2
    assert "issues sample 3 only" in capsys.readouterr().err
    # A submission is the round's whole set: scenarios for the system_type, both tests.
    assert mlperf("--profile", "tiny", "--scenario", "offline", "--mode", "submission",
                  "--out", str(out)) == 2
    assert "missing SingleStream, Server" in capsys.readouterr().err
    assert mlperf("--profile", "tiny", *full, "--compliance", "TEST04", "--out", str(out)) == 2
    assert "missing TEST01" in capsys.readouterr().err
    assert mlperf("--profile", "tiny", "--set", "mlperf.system.system_type=datacenter",
                  "--scenario", "offline,server", "--mode", "submission",
                  "--out", str(out)) == 2
    assert "takes no stable-diffusion-xl result from a 'datacenter'" in capsys.readouterr().err
    assert mlperf("--profile", "tiny", *full, "--audit-conf", "TEST05=x", "--out", str(out)) == 2
    assert "is not TEST=FILE" in capsys.readouterr().err
    no_mode = tmp_path / "audit.config"
    no_mode.write_text("*.*.performance_issue_same = 1\n")
    assert mlperf("--profile", "tiny", *full, "--audit-conf", f"TEST04={no_mode}",
                  "--out", str(out)) == 2
    assert "must set the mode" in capsys.readouterr().err
    assert mlperf("--profile", "tiny", "--scenario", "offline,offline", "--mode", "accuracy",
                  "--out", str(out)) == 2
    assert mlperf("--profile", "tiny", "--scenario", "multistream", "--mode", "performance",
                  "--out", str(out)) == 2
    assert "unknown scenario 'multistream'" in capsys.readouterr().err
    with pytest.raises(RunnerError, match="unknown mode"):
        prepare_loadgen(MlperfRequest(load_profile("tiny"), ("offline",), "findpeak", out))
    assert not out.exists()


def test_the_qsl_is_the_profiles_count_unless_a_flag_or_the_user_conf_says(tmp_path, capsys):
    """Without --count, the QSL and the performance set are the profile's `count` (tiny: 32,
    where it was MLPerf's 5000 on any profile), written into the user.conf as --count would
    write it; a user.conf that sets the performance set keeps it, without a contradiction."""
    out = tmp_path / "dry"
    perf = ("--profile", "tiny", "--scenario", "offline", "--mode", "performance")
    assert mlperf(*perf, "--out", str(out), "--dry-run") == 0
    text = capsys.readouterr().out
    assert "QSL 32 samples, performance set 32" in text
    assert "stable-diffusion-xl.Offline.performance_sample_count_override = 32" in text
    conf = tmp_path / "user.conf"
    conf.write_text("*.*.performance_sample_count_override = 8\n")
    assert mlperf(*perf, "--user-conf", str(conf), "--out", str(out), "--dry-run") == 0
    assert "QSL 32 samples, performance set 8" in capsys.readouterr().out
    assert mlperf(*perf, "--count", "16", "--out", str(out), "--dry-run") == 0
    assert "QSL 16 samples, performance set 16" in capsys.readouterr().out
    assert not out.exists()


def test_dry_run_prints_each_tests_own_loadgen_settings(tmp_path, capsys):
    """Every test of the command, not only the first, gets (and prints) MLPerf's settings:
    the round's seeds, SDXL's 20 s Server target latency, the user.conf's duration and
    count, its audit.config on top, and the batcher's wait limit."""
    out = tmp_path / "dry"
    assert mlperf("--profile", "tiny", "--scenario", "singlestream,offline,server",
                  "--mode", "submission", "--count", "8", "--server-target-qps", "3",
                  "--min-duration", "2",
                  "--out", str(out), "--dry-run") == 0
    text = capsys.readouterr().out
    assert "iree-compile" in text and "runner.batch.worker --task" in text
    assert "stable-diffusion-xl.Server.target_qps = 3" in text
    assert f"submission tree: {out}/submission/closed/Demo/ (MLPerf v6.1" in text
    blocks = {block.split(" ", 1)[0]: block for block in text.split("# LoadGen test ")[1:]}
    assert list(blocks) == [f"{s}/{t}" for s in ("SingleStream", "Offline", "Server")
                            for t in ("accuracy", "performance", "TEST01", "TEST04")]
    for key, block in blocks.items():
        assert "qsl_rng_seed = 2085463073848966840" in block, key
        assert "schedule_rng_seed = 16159082839903944936" in block, key
        assert "min_duration_ms = 2000" in block and \
            "performance_sample_count_override = 8" in block, key
        server = key.startswith("Server/")
        assert ("server_target_latency_ns = 20000000000" in block) == server, key
        assert ("batcher_limit_ms = 100" in block) == server, key
        assert ("batcher_limit_ms = none" in block) == (not server), key
        assert ("accuracy_log_sampling_target = 128" in block) == key.endswith("TEST01"), key
        assert ("performance_issue_same_index = 3" in block) == key.endswith("TEST04"), key
        assert ("mode = AccuracyOnly" in block) == key.endswith("accuracy"), key
    assert not out.exists()


def test_mi325x_dry_run_prints_the_settings_of_every_test(lab_profiles, tmp_path, capsys,
                                                          monkeypatch):
    """The lab profile's submission plan: AMD's recipe (VAE batch 1), MLPerf's settings. On
    a CPX node (its rocm-smi's output), unscored: the preflight passes (tests/test_preflight.py
    has what it refuses)."""
    monkeypatch.setenv("PATH", stand_in_rocm_smi(tmp_path / "bin", HOLDERS /
                                                 "rocm-smi-showpids-none.txt")["PATH"])
    assert mlperf("--profile", "mi325x", "--scenario", "singlestream,offline,server",
                  "--mode", "submission", "--no-score", "--out", str(tmp_path / "lab"),
                  "--dry-run") == 0
    text = capsys.readouterr().out
    assert "# preflight ok     GPUs: 64 device ID(s) of 64 in CPX compute mode" in text
    assert "closed/AMD/ (MLPerf v6.1, system 8xMI325X_iree, datacenter,edge" in text
    assert "batch/vae" in text and "32/1" in text
    for scenario in ("SingleStream", "Offline", "Server"):
        for test in ("accuracy", "performance", "TEST01", "TEST04"):
            block = text.split(f"# LoadGen test {scenario}/{test} ")[1].split("# LoadGen")[0]
            assert "min_duration_ms = 600000" in block
            assert "performance_sample_count_override = 5000" in block
    assert "stable-diffusion-xl.Offline.target_qps = 18.6" in text
    assert "single_stream_expected_latency_ns = 2000000000" in text


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
def planned(text: str, key: str) -> int:
    """A LoadGen setting the dry run prints (`#   key = value`)."""
    values = [line.split("=")[1] for line in text.splitlines()
              if line.strip("# ").startswith(f"{key} =")]
    assert values, text
    return int(values[0])


@pytest.mark.slow
def test_every_help_example_is_short_and_shows_progress(lab_profiles, tmp_path, capfd):
    """Every `runner mlperf --help` example runs here as written: the dry runs print
    settings, and a performance example plans a handful of samples (its dry run says so
    before it runs), then shows LoadGen's progress (samples of the test, queries, rate,
    ETA) while it runs."""
    import shlex

    from cli_support import cli

    from runner.cli.doc import documented
    from runner.cli.grammar import walk
    from runner.cli.main import build_parser

    (parser,) = [sub for path, sub in walk(build_parser()) if path == ("mlperf",)]
    shown = [shlex.split(e)[1:] for e in documented(parser).examples]
    assert len(shown) >= 3 and all(argv[0] == "mlperf" for argv in shown)
    for argv in shown:
        if "--dry-run" in argv:
            ran = cli(*argv, cwd=tmp_path)
            if ran.returncode == 2 and not shutil.which("rocm-smi"):
                # a GPU layout's dry run on a machine without its GPUs stops at the
                # preflight, as its run would (tests/test_preflight.py reads a GPU node's)
                assert "preflight failed GPUs: no amd-smi or rocm-smi on PATH" in ran.stdout
                continue
            assert ran.returncode == 0 and "min_query_count = " in ran.stdout, ran.stderr
            continue
        plan = cli(*argv, "--dry-run", cwd=tmp_path)
        assert plan.returncode == 0, plan.stderr
        assert planned(plan.stdout, "min_query_count") <= 64, plan.stdout  # not MLPerf's 5000
        capfd.readouterr()
        ran = cli(*argv, cwd=tmp_path, env={**os.environ, "RUNNER_PROGRESS": "plain"})
        err = ran.stderr + capfd.readouterr().err  # the LoadGen test is a process of its own
        assert ran.returncode == 0, err
        out = tmp_path / argv[argv.index("--out") + 1]
        (test,) = record(out)["tests"]
        n = planned(plan.stdout, "min_query_count")
        assert test["sut"]["issued"] == test["sut"]["completed"] == n
        assert f"LoadGen Offline/performance {n}/{n} samples" in err, err
        assert "samples/s  ETA " in err and "issued in 1 query" in err

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
    summary = parse_summary(offline_perf / "Offline" / "performance" / SUMMARY_LOG)
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
    assert not detail_facts(offline_perf / "Offline" / "performance" / DETAIL)["errors"]


def test_the_results_store_keeps_each_tests_rate(offline_perf):
    from runner.history.extract import extract

    r = record(offline_perf)
    (kept,) = extract(offline_perf)
    summary = r["tests"][0]["summary"]
    run = json.loads((offline_perf / "work" / "run.json").read_text())
    assert (kept.command, kept.profile, kept.verdict, kept.device) == (
        "mlperf", "tiny", r["status"], "cpu:host")
    assert kept.compiler_version == run["iree"]["iree.compiler"]["version"]
    hashes = {c["vmfb"]: c["vmfb_sha256"] for c in run["compiled"]["compiled"]}
    assert kept.environment is not None and sorted(kept.environment.modules.values()) == (
        sorted(hashes.values())) and len(hashes) > 1  # the modules its work run measured
    numbers = {(m.name, m.subject): m for m in kept.metrics}
    rate = numbers[("samples_per_s", "Offline/performance")]
    assert rate.value == summary["samples_per_second"]
    assert rate.verdict == {"VALID": "pass", "INVALID": "fail"}[summary["result"]]
    assert numbers[("latency_ms", "Offline/performance p99")].value == \
        summary["latency_ms"]["p99"]


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
                "--mode", "performance", "--count", "8", "--server-target-qps", "8",
                "--user-conf", str(user_conf(tmp_path, 10)), "--out", str(out))
    assert rc in (0, 1)
    sut = record(out)["tests"][0]["sut"]
    summary = parse_summary(out / "Server" / "performance" / SUMMARY_LOG)
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
                  "--count", "8", "--server-target-qps", "4", "--no-score",
                  "--user-conf", str(user_conf(tmp_path, 8)), "--out", str(out)) == 0
    log = json.loads((out / "Server" / "accuracy" / "mlperf_log_accuracy.json").read_text())
    assert [rec["qsl_idx"] for rec in log] == list(range(8))
    assert {len(bytes.fromhex(rec["data"])) for rec in log} == {128 * 128 * 3}
    assert parse_summary(out / "Server" / "accuracy" / SUMMARY_LOG).mode == "AccuracyOnly"


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


@pytest.mark.slow
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
    assert not detail_facts(out / "Offline" / "performance" / DETAIL)["errors"]


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
    assert (out / "Offline" / "performance" / SUMMARY_LOG).is_file()  # LoadGen's logs are kept
    assert json.loads((out / "work" / "run.json").read_text())["status"] == "failed"
