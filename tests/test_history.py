"""`runner history`, `history import`, `goldens propose`, the change points, and recording at
the end of a command: a real run records itself; a store that cannot be reached fails
nothing and shows no password; an old out dir is imported once."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from cli_support import cli
from history_support import PASSWORD, postgres  # noqa: F401
from repo_support import REPO

from runner.cli.main import main
from runner.history.changes import (
    PENALTY,
    Change,
    detect,
    mann_whitney,
    ranks,
    steps,
)
from runner.history.extract import extract
from runner.history.judge import judge_changes
from runner.history.model import Confirmation, Metric, Result
from runner.history.propose import MIN_TOLERANCE, time_golden
from runner.history.series import series_of
from runner.history.store import Query, open_store
from runner.history.url import resolve

FIXTURE = REPO / "tests" / "fixtures" / "history" / "bench-goldens"
TINY_BENCH = REPO / "goldens" / "tiny-bench"
T0 = datetime(2026, 10, 1, 2, 0)


def commit(build: str) -> str:
    return hashlib.sha1(build.encode()).hexdigest()


def nightly(i: int, value: float, build: str, *, name: str = "stage_ms",
            subject: str = "unet", command: str = "run", sku: str = "", **fields) -> Result:
    """Night `i`'s result of `build` (its commit derived from the build's name)."""
    base = dict(key=f"{command}-{subject}-{i}", command=command, out_dir=f"/runs/n{i}",
                finished_at=T0 + timedelta(days=i), profile="cpu", machine="lab-1",
                device="cpu:host", sku=sku, compiler_version=build, runtime_version=build,
                compiler_commit=commit(build), verdict="PASS", exit_code=0,
                metrics=(Metric(name, subject, value),))
    return Result(**{**base, **fields})


def noisy(n: int, seed: int, step_at: int | None = None, step: float = 0.12) -> list[float]:
    """Times of a shared machine: 2% noise and, now and then, a run 30% slow."""
    rng = np.random.default_rng(seed)
    values = 100.0 * rng.normal(1.0, 0.02, n) * np.where(rng.random(n) < 0.06, 1.3, 1.0)
    if step_at is not None:
        values[step_at:] *= 1 + step
    return [float(v) for v in values]


# --- the detector --------------------------------------------------------------------------


def test_the_steps_are_the_ones_ruptures_finds_and_the_test_is_scipys():
    """The detector is PELT's objective on ranks, written in numpy: the same steps as
    ruptures' KernelCPD (linear kernel) with the same penalty, the same p-values as scipy's
    Mann-Whitney (asymptotic), on series with and without steps and outliers."""
    ruptures = pytest.importorskip("ruptures")
    from scipy.stats import mannwhitneyu, rankdata

    rng = np.random.default_rng(7)
    for k in range(120):
        n = int(rng.integers(6, 150))
        x = rng.normal(0, 1, n)
        if k % 2:
            x[int(rng.integers(3, n - 2)):] += rng.uniform(0.5, 3)
        x[rng.integers(0, n, 3)] *= 4
        x = np.round(x, 1)  # ties
        assert np.array_equal(ranks(x), rankdata(x))
        signal = (ranks(x) - 0.5) / n
        pen = PENALTY * math.log(n)
        theirs = ruptures.KernelCPD(kernel="linear", min_size=3, jump=1).fit(
            signal.reshape(-1, 1)).predict(pen=pen)
        assert steps(signal, pen, 3) == [b for b in theirs if b < n]
        m = n // 2
        assert mann_whitney(x[:m], x[m:]) == pytest.approx(
            mannwhitneyu(x[:m], x[m:], method="asymptotic").pvalue, rel=1e-9, abs=1e-12)


def test_a_step_between_two_builds_is_named_sized_and_linked_to_bisect():
    values = noisy(40, seed=3, step_at=25)
    results = [nightly(i, v, "3.12.0" if i < 25 else "3.13.0") for i, v in enumerate(values)]
    (series,) = series_of(results)
    (change,) = detect(series)
    assert change.index == 25 and change.regression is True
    assert change.before == pytest.approx(float(np.median(values[:25])))
    assert change.after == pytest.approx(float(np.median(values[25:])))
    assert change.confidence > 0.999
    assert change.last_before.build == f"3.12.0 @ {commit('3.12.0')[:7]}"
    assert change.first_after.build == f"3.13.0 @ {commit('3.13.0')[:7]}"
    assert change.bisect() == ("runner bisect --good wheels:3.12.0 --bad wheels:3.13.0 "
                               f"--test throughput:{round(abs(change.relative) * 50)} "
                               "--profile cpu --out runs/bisect-stage_ms-unet")
    assert "regression: run cpu on lab-1 (cpu:host): stage_ms unet" in change.line()


def test_shared_machine_noise_is_not_a_change():
    """Outliers (a run 30% slow, now and then) and 2% noise over 60 nightlies, 30 times."""
    for seed in range(30):
        values = noisy(60, seed)
        (series,) = series_of([nightly(i, v, "3.13.0") for i, v in enumerate(values)])
        assert detect(series) == [], seed


def test_a_step_without_a_build_change_names_the_machine_and_no_bisect():
    values = noisy(30, seed=5, step_at=15, step=-0.2)
    results = [nightly(i, v, "3.13.0", name="samples_per_s", subject="") for i, v
               in enumerate(values)]
    (change,) = detect(series_of(results)[0])
    assert change.regression is True  # fewer samples/s
    assert change.bisect() is None and "not IREE" in change.why_no_bisect()


def test_a_step_inside_one_build_is_the_machines_exit_0_and_its_own_kind(tmp_path, capsys):
    """The cron alert that cried wolf: a step with the same build on both sides."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(resolve(url)) as store:
        for i, v in enumerate(noisy(30, seed=5, step_at=15, step=0.9)):
            busy = {"tiny-bench/unet_cpu": {"kernel": "6.1", "beside_foreign_load": i % 5 == 0}}
            store.add(nightly(i, v, "3.13.0", name="time_ms", subject="tiny-bench/unet_cpu",
                              command="bench goldens", sku="cpu",
                              details={"conditions": busy}))
    assert main(["history", "--results", url, "--out", str(tmp_path / "h"), "--json"]) == 0
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["kind"] == "machine" and change["regression"] is True
    assert "the same build on both sides" in change["reasons"][0]
    assert change["confirm"] is None and change["bisect"] is None
    md = (tmp_path / "h" / "history.md").read_text()
    assert "### Changes (1 found: 1 the machine's, not IREE's)" in md
    assert "- machine (regression): bench goldens" in md
    page = (tmp_path / "h" / "history.html").read_text()
    assert "MACHINE CHANGED</div>" in page and 'class="verdict pass"' in page
    assert "no regression: the machine changed, not IREE" in page
    # the results timed beside foreign load are ringed and say so
    assert "30 results; 6 timed beside foreign load (ringed)" in page
    assert page.count('stroke="#bf8700"') == page.count("; timed beside foreign load<") == 6
    with open_store(resolve(url)) as store:
        store.add(nightly(31, 214.0, "3.13.0", name="dispatch_count", command="bench goldens",
                          subject="tiny-bench/unet_cpu", sku="cpu", details={"conditions": {
                              "tiny-bench/unet_cpu": {"beside_foreign_load": True}}}))
        store.add(nightly(32, 214.0, "3.13.0", name="dispatch_count", command="bench goldens",
                          subject="tiny-bench/unet_cpu", sku="cpu", details={"conditions": {
                              "tiny-bench/unet_cpu": {"beside_foreign_load": True}}}))
    assert main(["history", "--results", url, "--metric", "dispatch_count", "--out",
                 str(tmp_path / "counts")]) == 0
    counts = (tmp_path / "counts" / "history.html").read_text()
    assert "<svg" in counts and "beside foreign load" not in counts  # a count is not timed


def _judged(results: list[Result]) -> Change:
    (change,) = judge_changes(detect(series_of(results)[0]), [])
    return change


def test_a_step_across_builds_that_coincides_with_the_machine_changing_is_the_machines():
    values = noisy(30, seed=5, step_at=15, step=0.3)

    def at(i: int, **fields) -> Result:
        return nightly(i, values[i], "3.12.0" if i < 15 else "3.13.0", name="time_ms",
                       subject="t", command="bench goldens", sku="cpu", **fields)

    (found,) = detect(series_of([at(i) for i in range(30)])[0])
    assert found.index == 16  # a noisy point: the step is found one late, inside 3.13.0
    alone = _judged([at(i) for i in range(30)])
    assert alone.index == 15  # moved onto the build boundary beside it
    assert alone.kind == "unconfirmed" and alone.confirm == (
        "runner history confirm --good wheels:3.12.0 --bad wheels:3.13.0 --command "
        "'bench goldens' --metric time_ms --stage t --profile-match cpu --sku cpu "
        "--out runs/confirm-time_ms-t")

    def timed(i: int, busy: bool, kernel: str = "6.1", governor: str = "performance") -> dict:
        return {"conditions": {"t": {"kernel": kernel, "beside_foreign_load": busy,
                                     "governor": governor}}}

    loaded = _judged([at(i, details=timed(i, i >= 15)) for i in range(30)])
    assert loaded.kind == "machine" and loaded.reasons[0].startswith(
        "foreign load changed with it: 0% of the results before were timed beside other "
        "processes' load, 100% after")
    governor = _judged([at(i, details=timed(i, False, governor="performance" if i < 15
                                            else "powersave")) for i in range(30)])
    assert governor.kind == "machine"
    assert governor.reasons == ("the CPU governor changed with it: performance -> powersave",)
    # The runner, kernel or driver changing with the build: both named, the build's to
    # confirm (a result from before environments has its kernel and driver in conditions).
    both = ("the build changed as well (3.12.0 @ {} -> 3.13.0 @ {}): a build and its "
            "environment changing together cannot be told apart without measuring both builds "
            "again on one machine").format(commit("3.12.0")[:7], commit("3.13.0")[:7])
    runner = _judged([at(i, runner_version="0.1.0" if i < 15 else "0.2.0") for i in range(30)])
    kernel = _judged([at(i, details=timed(i, False, "6.1" if i < 15 else "6.8"))
                      for i in range(30)])
    driver = _judged([at(i, details={"conditions": {"t": {"gpu": {"gpus": [
        {"driver": "550.127.05" if i < 15 else "570.86.15"}]}}}}) for i in range(30)])
    for change, named in ((runner, "the runner changed with it: 0.1.0 -> 0.2.0"),
                          (kernel, "the kernel changed with it: 6.1 -> 6.8"),
                          (driver, "the GPU driver changed with it: 550.127.05 -> 570.86.15")):
        assert change.kind == "unconfirmed" and change.confirm == alone.confirm
        assert change.reasons == (named, both, "not measured again yet: confirm it before it "
                                  "counts")
    quiet = _judged([at(i, details=timed(i, i % 7 == 0)) for i in range(30)])
    assert quiet.kind == "unconfirmed"  # the same share of busy neighbours on both sides
    faster = _judged([replace(at(i), metrics=(Metric("time_ms", "t", 200 - values[i]),))
                      for i in range(30)])
    assert faster.kind == "improvement"


def test_a_step_is_looked_for_in_the_quiet_nights_where_busy_ones_are_a_minority():
    """Every third night beside a CPU hog (2-3x slower): the 10% step that comes with a new
    build is found among the quiet nights, at the first quiet night of the new build, and is
    the build's to confirm; the same numbers with no conditions kept (all nights judged)
    show no step at all. Where half the nights or more are busy, all are judged
    (test_a_step_across_builds_that_coincides_with_the_machine_changing_is_the_machines)."""
    rng = np.random.default_rng(3)
    busy = [i % 3 == 0 for i in range(30)]
    values = [v * (rng.uniform(2.0, 3.0) if b else 1.0)
              for v, b in zip(noisy(30, seed=3, step_at=20, step=0.10), busy, strict=True)]

    def at(i: int, kept: bool) -> Result:
        details = {"conditions": {"t": {"kernel": "6.1", "beside_foreign_load": busy[i]}}}
        return nightly(i, values[i], "3.12.0" if i < 20 else "3.13.0", name="time_ms",
                       subject="t", command="bench goldens", sku="cpu",
                       details=details if kept else {})

    found = _judged([at(i, kept=True) for i in range(30)])
    assert found.index == 20 and found.kind == "unconfirmed"
    assert found.last_before.build.startswith("3.12.0 @") and found.first_after.build.startswith(
        "3.13.0 @")
    assert detect(series_of([at(i, kept=False) for i in range(30)])[0]) == []
    # flagged once four quiet nights of the new build are in (20, 22, 23, 25), not before:
    # three against the old build's fourteen do not reach ALPHA
    assert _judged([at(i, kept=True) for i in range(26)]).index == 20
    assert detect(series_of([at(i, kept=True) for i in range(25)])[0]) == []


def test_nightlies_confirm_from_their_index_and_commits_are_pinned_by_bisect():
    values = noisy(20, seed=11, step_at=10, step=0.3)

    def series(version_of) -> Change:
        return _judged([nightly(i, v, version_of(i), name="time_ms", subject="t", sku="cpu",
                                command="bench goldens") for i, v in enumerate(values)])

    nightlies = series(lambda i: "3.5.0rc20250601" if i < 10 else "3.5.0rc20250620")
    assert nightlies.kind == "unconfirmed"
    assert nightlies.confirm.startswith("runner history confirm --good wheels:3.5.0rc20250601 "
                                        "--bad wheels:3.5.0rc20250620 ")
    assert " --pre --find-links https://iree.dev/pip-release-links.html " in nightlies.confirm
    dev = series(lambda i: "3.6.0.dev0+a" if i < 10 else "3.6.0.dev0+b")  # commits alone
    assert dev.kind == "unconfirmed" and dev.confirm is None
    assert "runner bisect" in dev.reasons[0] and dev.bisect().startswith("runner bisect ")


def test_nightlies_and_commits_bisect_as_installable_builds():
    values = noisy(20, seed=11, step_at=10)
    nightlies = [nightly(i, v, "3.5.0rc20250601" if i < 10 else "3.5.0rc20250620")
                 for i, v in enumerate(values)]
    (change,) = detect(series_of(nightlies)[0])
    assert "--good wheels:3.5.0rc20250601 --bad wheels:3.5.0rc20250620" in change.bisect()
    assert "--pre --find-links https://iree.dev/pip-release-links.html" in change.bisect()
    dev = [replace(r, compiler_version="3.6.0.dev0+local", runtime_version="") for r in
           nightlies]
    (change,) = detect(series_of(dev)[0])
    good, bad = commit("3.5.0rc20250601"), commit("3.5.0rc20250620")
    assert f"--good commit:{good} --bad commit:{bad}" in change.bisect()
    assert '--repo "$IREE_CHECKOUT"' in change.bisect()


# --- runner history ------------------------------------------------------------------------


@pytest.fixture
def nightlies_store(tmp_path) -> str:
    """Forty nightlies: the UNet 12% slower from the 26th (3.13.0), VAE steady; FID judged
    against its range; one result of another machine and profile."""
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    unet, vae = noisy(40, seed=3, step_at=25), noisy(40, seed=4)
    with open_store(resolve(url)) as store:
        for i in range(40):
            build = "3.12.0" if i < 25 else "3.13.0"
            store.add(replace(nightly(i, unet[i], build), metrics=(
                Metric("stage_ms", "unet", unet[i]), Metric("stage_ms", "vae", vae[i]),
                Metric("fid", "", 23.4, None, 23.01, 23.95, "pass"))))
        store.add(nightly(99, 5.0, "3.13.0", machine="ci-9", profile="tiny"))
    return url


def test_history_lists_charts_and_alerts_only_on_a_confirmed_regression(nightlies_store,
                                                                        tmp_path, capsys):
    """The UNet 12% slower from 3.13.0 on: worse across two builds, listed as unconfirmed
    (exit 0); once the two builds measured again held the difference, a regression (exit
    1); a newer confirmation where it did not hold makes it the machine's (exit 0)."""
    out = tmp_path / "report"
    argv = ["history", "--results", nightlies_store, "--profile-match", "cpu", "--out",
            str(out), "--json"]
    assert main(argv) == 0  # not measured again yet: no alarm
    record = json.loads(capsys.readouterr().out)
    assert record["count"] == 40
    (change,) = record["changes"]
    assert change["series"]["subject"] == "unet" and change["regression"] is True
    assert change["kind"] == "unconfirmed" and change["confirmation"] is None
    assert change["first_after"]["build"].startswith("3.13.0 @ ")
    assert change["bisect"].startswith("runner bisect --good wheels:3.12.0 --bad wheels:3.13.0")
    assert json.loads((out / "history.json").read_text()) == record
    md = (out / "history.md").read_text()
    assert "### Changes (1 found: 1 unconfirmed regression(s))" in md and change["bisect"] in md
    page = (out / "history.html").read_text()
    ET.fromstring(page.removeprefix("<!DOCTYPE html>"))  # well-formed: nothing broken
    assert "1 TO CONFIRM" in page and "REGRESSION(S)" not in page
    assert page.count("<svg") == 3  # unet, vae, fid
    assert "+1" in page and "stroke-dasharray" in page  # the step is marked
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")  # nothing fetched
    assert page.count('fill="#1a7f3722"') == 40  # FID's band, per result

    held = Confirmation(change["series"], "wheels:3.12.0", "wheels:3.13.0", (100.0, 99.0, 101.0),
                        (112.0, 113.0, 111.0), True, T0 + timedelta(days=50), "lab-1")
    with open_store(resolve(nightlies_store)) as store:
        store.add_confirmation(held)
    assert main(argv) == 1
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["kind"] == "regression" and change["confirmation"]["holds"] is True
    assert change["confirmation"]["bad_values"] == [112.0, 113.0, 111.0]
    assert "the bad/good ratio's interval lay wholly on the worse side" in change["reasons"][0]
    assert "1 REGRESSION(S)</div>" in (out / "history.html").read_text()
    with open_store(resolve(nightlies_store)) as store:
        store.add_confirmation(replace(held, holds=False, confirmed_at=T0 + timedelta(days=51)))
    assert main(argv) == 0
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["kind"] == "machine" and "did not hold" in change["reasons"][0]
    assert "no regression: the machine changed" in (out / "history.html").read_text()
    with open_store(resolve(nightlies_store)) as store:  # past --min-change, not beyond 1 yet
        store.add_confirmation(replace(held, holds=False, confirmed_at=T0 + timedelta(days=52),
                                       details={"verdict": {"undecided": True}}))
    assert main(argv) == 0
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["kind"] == "unconfirmed" and "undecided" in change["reasons"][0]
    assert "more rounds (--max-rounds)" in change["reasons"][0]


def test_history_filters(nightlies_store, capsys):
    def keys(*flags: str) -> list[str]:
        assert main(["history", "--results", nightlies_store, "--json", *flags]) in (0, 1)
        return [r["key"] for r in json.loads(capsys.readouterr().out)["results"]]

    assert keys("--machine", "ci-*") == ["run-unet-99"]
    assert len(keys("--iree-match", "3.12.0")) == 25
    assert len(keys("--iree-match", commit("3.13.0")[:7])) == 16
    assert len(keys("--iree-match", "3.12.0..3.13.0", "--profile-match", "cpu")) == 40
    assert len(keys("--since", "2026-10-31", "--until", "2026-11-05")) == 6
    assert len(keys("--limit", "5")) == 5
    assert main(["history", "--results", nightlies_store, "--json", "--metric", "stage_ms",
                 "--stage", "va*"]) == 0  # VAE alone: no regression
    metrics = {(m["name"], m["subject"]) for r in json.loads(capsys.readouterr().out)["results"]
               for m in r["metrics"]}
    assert metrics == {("stage_ms", "vae")}
    assert main(["history", "--results", nightlies_store, "--since", "yesterday"]) == 2
    assert "`yesterday` is not a date" in capsys.readouterr().err


def test_a_selection_that_matches_nothing_is_bad_input_naming_what_the_store_holds(
        nightlies_store, capsys):
    """A typo in a cron line read "0 result(s)" and exit 0, as "no regression" does. Each
    filter that alone matches nothing is named with what the store holds for it."""
    def refused(*flags: str) -> str:
        assert main(["history", "--results", nightlies_store, *flags]) == 2
        out = capsys.readouterr()
        assert out.out == "" and "Traceback" not in out.err
        return out.err

    err = refused("--metric", "bogus")
    assert "--metric bogus matches no result in the store" in err
    assert "fix: --metric: the store holds fid, stage_ms" in err
    err = refused("--profile-match", "nosuch", "--machine", "lab-1")
    assert "--profile-match nosuch matches no result" in err and "holds cpu, tiny" in err
    assert "--machine" not in err.split("fix:")[0].split("matches")[0]  # lab-1 matches alone
    assert "--since 2026-12-08 00:00 is after --until" in refused(
        "--since", "2026-12-08", "--until", "2026-12-01")
    err = refused("--since", "2028-01-01")  # the newest result: night 99, 2027-01-08
    assert "--since: the store holds 2026-10-01 02:00 to 2027-01-08 02:00" in err
    assert "together none" in refused("--machine", "ci-9", "--iree-match", "3.12.0")


def test_a_release_is_found_by_the_name_pip_gives_it_and_the_one_its_wheel_reports(tmp_path,
                                                                                     capsys):
    """pip installs IREE 3.13.0; its wheels report 3.13.0rc20261016, which the store keeps."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(resolve(url)) as store:
        for i, build in enumerate(["3.12.0rc20260917", "3.13.0rc20261016", "3.13.0rc20261016"]):
            store.add(nightly(i, 10.0 + i, build))

    def count(*flags: str) -> int:
        assert main(["history", "--results", url, "--json", *flags]) in (0, 1)
        return json.loads(capsys.readouterr().out)["count"]

    assert count("--iree-match", "3.13.0") == count("--iree-match", "3.13.0rc20261016") == 2
    assert count("--iree-match", "3.12.0..3.13.0") == 3
    assert main(["history", "--results", url, "--iree-match", "3.13"]) == 2  # not a release: exact


def test_history_filters_are_named_as_filters(nightlies_store, capsys):
    """Elsewhere --profile loads a profile and --iree installs a build; history's filters of
    the same things are --profile-match and --iree-match, and the old spellings are refused
    naming them, before the store is read."""
    for old, new in (("--profile", "--profile-match GLOB"),
                     ("--iree", "--iree-match VERSION|COMMIT|A..B")):
        proc = cli("history", "--results", nightlies_store, old, "cpu")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"{old} is no longer accepted: use {new}" in proc.stderr
    assert main(["history", "--results", nightlies_store, "--json", "--profile-match", "c*",
                 "--iree-match", "3.12.0"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["count"] == 25


# --- history import ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bench goldens", "$(touch pwned)", "new\nline", "it's \"x\""])
def test_import_records_a_real_out_dir_once_whatever_its_name(name, tmp_path, capsys):
    out = tmp_path / name
    shutil.copytree(FIXTURE, out)
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert main(["history", "import", str(out), "--results", url]) == 0
    assert capsys.readouterr().out.startswith("recorded: bench goldens ")
    assert main(["history", "import", str(out), "--results", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["imported"][0]["added"] is False
    with open_store(resolve(url)) as store:
        (r,) = store.query(Query())
    bench = json.loads((FIXTURE / "bench.json").read_text())
    assert r.out_dir == str(out) and r.command == "bench goldens" and r.sku == "cpu"
    assert r.compiler_version == bench["versions"]["compiler"]["version"]
    times = {m.subject: m for m in r.metrics if m.name == "time_ms"}
    for g in bench["goldens"]:
        check = next(c for c in g["checks"] if c["name"] == "time_ms")
        assert (times[g["name"]].value, times[g["name"]].golden, times[g["name"]].high) == (
            check["measured"], check["golden"], check["limit"])
    assert not (tmp_path / "pwned").exists()


def test_import_dry_run_writes_nothing_and_a_foreign_dir_is_named(tmp_path, capsys):
    store = tmp_path / "h.sqlite"
    assert main(["history", "import", str(FIXTURE), "--results", str(store), "--dry-run"]) == 0
    assert "would record: bench goldens" in capsys.readouterr().out
    assert not store.exists()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    assert main(["history", "import", str(FIXTURE), str(tmp_path / "notes"), "--results",
                 str(store)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'notes'}: holds no results of a command the history records" in err
    with open_store(resolve(str(store))) as s:
        assert s.count() == 1  # the readable one is in


# --- goldens propose -----------------------------------------------------------------------


def test_propose_takes_the_runs_since_the_last_change(tmp_path, capsys):
    """A bench goldens history of clip_cpu on sku cpu: 12 runs at ~1.9 ms under an older
    build, then 10 at ~1.0 ms: the proposal is the newer 10's, as the rule computes it."""
    old, new = [1.9 + 0.01 * (i % 3) for i in range(12)], [1.0 + 0.02 * (i % 4) for i in
                                                           range(10)]
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(resolve(url)) as store:
        for i, v in enumerate(old + new):
            store.add(nightly(i, v, "3.12.0" if i < 12 else "3.13.0", name="time_ms",
                              subject="tiny-bench/clip_cpu", command="bench goldens", sku="cpu",
                              metrics=(Metric("time_ms", "tiny-bench/clip_cpu", v, 5.1, None,
                                              5.61, "pass"),
                                       Metric("dispatch_count", "tiny-bench/clip_cpu",
                                              130.0 + i))))
    out = tmp_path / "proposal"
    assert main(["goldens", "propose", str(TINY_BENCH), "--sku", "cpu", "--results", url,
                 "--out", str(out), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    clip = next(p for p in record["proposals"] if p["test"] == "tiny-bench/clip_cpu")
    tg = time_golden(new)
    golden, tolerance = tg.golden, tg.tolerance
    assert golden == float(f"{np.median(new):.3g}") and tolerance >= MIN_TOLERANCE
    assert max(new) <= golden * tolerance
    assert (clip["golden_time_ms"], clip["tolerance"], clip["dispatch_count"]) == (
        golden, tolerance, 151)
    assert [r["value"] for r in clip["runs"]] == new
    proposed = json.loads((out / "json" / "goldens" / "tiny-bench" / "clip_cpu.json").read_text())
    shipped = json.loads((TINY_BENCH / "clip_cpu.json").read_text())
    assert proposed == {**shipped, "golden_time_ms": {"cpu": golden},
                        "golden_time_tolerance_multiplier": {"cpu": tolerance},
                        "golden_dispatch": {"cpu": 151}}
    assert not (out / "json" / "goldens" / "tiny-bench" / "vae_cpu.json").exists()  # no history
    unet = next(p for p in record["proposals"] if p["test"] == "tiny-bench/unet_cpu")
    assert unet["diff"] == "" and "nothing to propose" in unet["notes"][0]


def test_propose_with_no_evidence_proposes_nothing_and_says_which_runs_it_needs(tmp_path,
                                                                               capsys):
    """No `bench goldens` result of the files on that SKU: exit 2 (nothing measured, nothing
    judged), naming the bench command to run, quoted as typed; the report is still written."""
    bench = tmp_path / "b $(touch PWNED) 'q'"
    shutil.copytree(REPO / "tests" / "fixtures" / "iree-test-suites" / "sharktank_models" /
                    "benchmarks" / "sdxl", bench)
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    out = tmp_path / "proposal"
    assert main(["goldens", "propose", str(bench), "--sku", "mi325x", "--since", "30d",
                 "--results", url, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no `runner bench goldens --sku mi325x` result of these" in err
    assert f"run `runner bench goldens {shlex.quote(str(bench))} --sku mi325x --out DIR`" in err
    record = json.loads((out / "proposal.json").read_text())
    assert record["proposals"] and all(not p["runs"] for p in record["proposals"])
    assert not (out / "json").exists() and not list(tmp_path.rglob("PWNED"))


# --- recording at the end of a command -----------------------------------------------------


def test_a_run_records_itself_and_an_unreachable_store_fails_nothing(
        tiny_compiled, postgres, tmp_path, capsys):  # noqa: F811
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    run = tmp_path / "run"
    assert main(["run", "--profile", "cpu", "--count", "1", "--no-score", "--out", str(run),
                 "--results", url]) == 0
    assert "history: 1 result(s) recorded in" in capsys.readouterr().err
    with open_store(resolve(url)) as store:
        (r,) = store.query(Query())
    manifest = json.loads((run / "run.json").read_text())
    assert r.command == "run" and r.out_dir == str(run) and r.device == "cpu:host"
    assert r.compiler_version == manifest["iree"]["iree.compiler"]["version"]
    assert {m.subject for m in r.metrics if m.name == "stage_ms"} == {"clip", "unet", "vae"}
    assert r == extract(run)[0]  # at the end of the command as by an import later
    # the environment it ran in: this CPU machine's kernel, no GPU, the modules it measured
    env = r.environment
    assert env is not None and env.modules == {
        Path(c["mlir"]).stem: c["vmfb_sha256"] for c in manifest["compiled"]["compiled"]}
    assert set(env.modules) == {"clip_bs1", "unet_bs1", "unet_pipeline_bs1", "vae_bs1"}
    assert (env.kernel, env.gpu_driver, env.vbios) == (platform.release(), None, None)
    assert env.runner_version == r.runner_version != ""
    kept = json.loads((run / "attempt.json").read_text())["attempts"][-1]["environment"]
    assert kept["kernel"] == platform.release() and kept["modules"] == {}
    # the conditions its workers ran under: local workers are ours, so the foreign share
    # is others' alone; kept on the attempt and so with every timed number of the run
    (attempt,) = manifest["attempts"]
    assert r.details["conditions"] == attempt["conditions"]
    assert attempt["conditions"]["cores"] == os.cpu_count()
    assert attempt["conditions"]["own_cores"] > 0  # the workers' CPU time counts as ours
    assert main(["run", "--resume", str(run), "--results", url]) == 0  # nothing to do
    assert main(["history", "import", str(run), "--results", url]) == 0
    assert f"already there: run {run}" in capsys.readouterr().out

    closed = postgres.url().replace(f":{postgres.port}/", ":1/")
    lost = tmp_path / "lost"
    assert main(["run", "--profile", "cpu", "--count", "1", "--no-score", "--out", str(lost),
                 "--results", closed]) == 0
    out, err = capsys.readouterr()
    assert "history: not recorded (" in err and "cannot open the results store" in err
    assert f'runner history import {lost} --results "$RUNNER_RESULTS_URL"' in err
    assert PASSWORD not in out + err and "s3cr" not in out + err
    for path in lost.rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert b"s3cr" not in text and b"--results" not in text, path
    assert main(["history", "import", str(lost), "--results", url]) == 0
    with open_store(resolve(url)) as store:
        assert store.count() == 2


def test_every_recording_command_takes_the_one_results_flag():
    from runner.cli.grammar import options_of
    from runner.cli.main import build_parser
    from runner.history.extract import RECORDED

    taken = {c.removeprefix("runner "): a for c, a in options_of(build_parser())
             if "--results" in a.option_strings}
    assert set(RECORDED) <= set(taken)
    assert {getattr(a, "grammar", None) for a in taken.values()} == {"--results"}


def test_without_sqlalchemy_the_results_stay_in_the_run_dir(monkeypatch, tmp_path):
    """A driver without the history's libraries (a GPU node with the runtime alone)."""
    from runner.history.record import record

    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    monkeypatch.delitem(sys.modules, "runner.history.store", raising=False)
    said: list[str] = []
    assert record("bench goldens", FIXTURE, None, said.append) is False
    assert said == [f"history: not recorded (sqlalchemy is not installed: pip install "
                    f"'iree-sdxl-runner[history]'); the results stay in {FIXTURE}: "
                    f"`runner history import {FIXTURE}` adds them later"]


def test_a_caller_that_records_itself_turns_recording_off_and_names_its_build(
        monkeypatch, tmp_path):
    """`runner nightly` runs its steps in a build's venv (no store client there) with
    $RUNNER_RECORD=off and records them itself, naming the build as it asked for it."""
    from runner.history.record import RECORD_ENV, record

    store = str(tmp_path / "store.sqlite")
    said: list[str] = []
    monkeypatch.setenv(RECORD_ENV, "off")
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # as in a build's venv
    monkeypatch.delitem(sys.modules, "runner.history.store", raising=False)
    assert record("bench goldens", FIXTURE, store, said.append) is False
    assert said == [] and not (tmp_path / "store.sqlite").exists()
    monkeypatch.undo()
    monkeypatch.setenv(RECORD_ENV, "no")  # a value it does not take is said, not ignored
    assert record("bench goldens", FIXTURE, store, said.append, build="wheels:3.13.0")
    assert said[0].startswith("history: $RUNNER_RECORD='no' is not 'off'")
    with open_store(resolve(store)) as opened:
        (stored,) = opened.query(Query())
    assert stored.build == "wheels:3.13.0"


def test_a_lab_store_on_postgresql_never_shows_its_password(postgres, tmp_path, capsys):  # noqa: F811
    url = postgres.new_database()
    assert main(["history", "import", str(FIXTURE), "--results", url]) == 0
    out = tmp_path / "report"
    assert main(["history", "--results", url, "--out", str(out), "--json"]) == 0
    said = "".join(capsys.readouterr())
    assert json.loads(said[said.index("{"):said.rindex("}") + 1])["count"] == 1
    assert "REDACTED@127.0.0.1" in said
    for text in [said, *(p.read_text() for p in out.rglob("*") if p.is_file())]:
        assert "s3cr" not in text and "%40t" not in text


def has_open(pid: int, path: Path) -> bool:
    """Whether process `pid` holds `path` open (its /proc fd links)."""
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == str(path):
                    return True
    return False


def test_a_store_that_makes_a_command_wait_can_be_left_with_ctrl_c(tiny_compiled, tmp_path):
    """Another writer holds the SQLite store: the finished run waits to record (up to a
    minute). Ctrl-C there leaves the wait: the run's exit status is its own, its results
    stay in its run dir and the note says how to add them later."""
    import signal
    import sqlite3

    from cli_support import start_runner
    from host_support import wait_for

    store = tmp_path / "h.sqlite"
    assert main(["history", "--results", str(store), "--json"]) == 0  # the store, created
    holder = sqlite3.connect(store)
    holder.execute("BEGIN EXCLUSIVE")
    run = tmp_path / "run"
    proc = start_runner("run", "--profile", "cpu", "--count", "1", "--no-score", "--out", run,
                        "--results", store, stdout=subprocess.DEVNULL,
                        env={**os.environ, "RUNNER_PROGRESS": "plain"})
    # Into the wait on the store's lock: the driver has the store open (its work recorded as
    # finished first). A fixed pause after the record lost the race on a loaded machine: the
    # signal came before the recording, and the run itself was interrupted.
    wait_for(lambda: (run / "attempt.json").is_file() and json.loads(
        (run / "attempt.json").read_text()).get("status") == "finished"
        and has_open(proc.pid, store))
    time.sleep(0.3)  # (past the first ask for the lock)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    holder.rollback()
    assert proc.returncode == 0, err
    assert "history: not recorded (stopped by SIGINT)" in err and "Traceback" not in err
    assert f"runner history import {run} --results {store}" in err
    assert main(["history", "import", str(run), "--results", str(store)]) == 0


# --- what a result records ------------------------------------------------------------------


def _run_dir(path: Path, report: dict) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"profile": "cpu"}))
    (path / "results.json").write_text(json.dumps(report))
    return path


def test_import_refuses_a_string_where_a_number_belongs_naming_file_and_field(tmp_path,
                                                                              capsys):
    """The file is refused with its path and field (no traceback), the rest goes on."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    bad = _run_dir(tmp_path / "bad", {"workers": [{"samples": "12", "stage_ms": {"unet": 9}}]})
    worse = _run_dir(tmp_path / "worse", {"workers": [{"samples": 2,
                                                        "stage_ms": {"unet": "9.5 ms"}}]})
    good = _run_dir(tmp_path / "good", {"workers": [{"samples": 2, "stage_ms": {"unet": 9}}]})
    assert main(["history", "import", str(bad), str(worse), str(good), "--results", url]) == 2
    out, err = capsys.readouterr()
    assert f"{bad / 'results.json'}: workers[0].samples" in err and '"12", not a number' in err
    assert f"{worse / 'results.json'}: workers[0].stage_ms.unet" in err
    assert "Traceback" not in err and "could not convert" not in err
    assert f"recorded: run {good}" in out
    with open_store(resolve(url)) as store:
        (r,) = store.query(Query())
    assert r.out_dir == str(good) and r.metrics == (Metric("stage_ms", "unet", 9.0),)


def test_a_subsets_scores_are_stored_as_not_judged(tmp_path):
    """A 2-sample run the console calls "not judged": its FID is kept, its verdict none."""
    scores = {"verdict": "subset", "subset": True,
              "fid": {"score": 250.0, "range": [23.01, 23.95], "pass": False},
              "clip": {"score": 0.1, "range": [31.69, 31.81], "pass": False}}
    (r,) = extract(_run_dir(tmp_path / "subset", {"scores": scores}))
    assert {m.name: m.verdict for m in r.metrics} == {"fid": None, "clip": None}
    assert {m.name: (m.low, m.high) for m in r.metrics}["fid"] == (23.01, 23.95)
    full = {**scores, "verdict": "fail", "subset": False}
    (r,) = extract(_run_dir(tmp_path / "full", {"scores": full}))
    assert {m.name: m.verdict for m in r.metrics} == {"fid": "fail", "clip": "fail"}


def test_every_recorded_result_names_the_runner_that_measured_it(tmp_path, capsys):
    import runner
    from runner.base.provenance import runner_provenance

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    out = tmp_path / "bench"
    shutil.copytree(FIXTURE, out)
    record = json.loads((out / "attempt.json").read_text())
    assert "runner" not in record["attempts"][-1]  # an out dir of an older runner: unknown
    (old,) = extract(out)
    assert old.runner_version == "" and old.environment is None  # nor its environment
    assert main(["goldens", "check", str(REPO / "goldens" / "tiny"), "-k", "clip_cpu",
                 "--out", str(tmp_path / "check"), "--results", url]) in (0, 1)
    with open_store(resolve(url)) as store:
        (r,) = store.query(Query())
    assert r.runner_version == runner.__version__
    assert r.runner_commit == (runner_provenance()["commit"] or "")
    assert r.environment is not None and r.environment.kernel == platform.release()
    assert r.environment.runner_version == runner.__version__
