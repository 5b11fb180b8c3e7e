"""`runner nightly`: the build it picks, the night it skips, the machine's lock, and the
summary posted to a real local HTTP server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli_support import Ran, cli
from repo_support import REPO

from runner.nightly.notify import post, shown_url

SLACK = "https://hooks.slack.com/services/T0SECRET/B0SECRET/tokentokentoken"


class Hook:
    """A real HTTP server on localhost taking webhook posts: the bodies it got, the status
    it answers with."""

    def __init__(self, status: int = 200):
        self.bodies: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", 0))
                hook.bodies.append(json.loads(self.rfile.read(size)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T0/B0/sekrit-token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.close()


def nightly(*args: str, cache: Path) -> Ran:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RUNNER_PROGRESS": "plain",
           "RUNNER_CACHE_DIR": str(cache)}
    env.pop("RUNNER_RESULTS_URL", None)
    return cli("nightly", *args, env=env)


def test_the_summary_reaches_a_real_webhook_and_its_token_is_never_shown(hook):
    summary = {"headline": "nightly 3.13.0: measured, no regression", "status": "passed"}
    assert post(hook.url, summary) is None
    assert hook.bodies == [{"text": summary["headline"], "nightly": summary}]
    assert shown_url(hook.url) == f"http://127.0.0.1:{hook.server.server_port}/REDACTED"
    assert shown_url(SLACK) == "https://hooks.slack.com/REDACTED"


def test_a_failed_post_is_said_not_raised(tmp_path):
    refusing = Hook(status=500)
    try:
        assert post(refusing.url, {"headline": "x"}) == (
            f"http://127.0.0.1:{refusing.server.server_port}/REDACTED answered HTTP 500")
    finally:
        refusing.close()
    dead = post("http://127.0.0.1:9/hooks/sekrit", {"headline": "x"}, timeout=5)
    assert dead is not None and "could not be reached" in dead and "sekrit" not in dead


@pytest.mark.parametrize("url", ["file:///etc/passwd", "hooks.slack.com/x", "http://",
                                 "https://h/$(touch pwned)\n"])
def test_a_notify_url_that_is_no_http_url_is_refused(url, tmp_path):
    ran = nightly("--iree", "wheels:3.13.0", "--notify", url, "--out", str(tmp_path / "n"),
                  "--dry-run", cache=tmp_path / "cache")
    assert ran.returncode == 2 and "--notify" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr
    assert not (REPO / "pwned").exists() and not (tmp_path / "n").exists()


@pytest.mark.parametrize("build", ["commit:abc1234", "build-dir:/tmp", "source:abc1234",
                                   "wheels:$(touch pwned)", "3.13.0"])
def test_a_night_measures_wheels_only(build, tmp_path):
    ran = nightly("--iree", build, "--out", str(tmp_path / "n"), "--dry-run",
                  cache=tmp_path / "cache")
    assert ran.returncode == 2 and "--iree" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr and not (REPO / "pwned").exists()


def test_the_dry_run_picks_the_newest_nightly_and_writes_nothing(tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    for date in ("20250620", "20250601", "20250610"):
        for package in ("compiler", "runtime"):
            (links / f"iree_base_{package}-3.14.0rc{date}-cp311-cp311-"
                     "manylinux_2_28_x86_64.whl").write_bytes(b"")
    out = tmp_path / "nights"
    ran = nightly("--pre", "--find-links", str(links), "--profile", "tiny", "--out", str(out),
                  "--dry-run", cache=tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    assert "build: wheels:3.14.0rc20250620" in ran.stdout
    steps = [line.split(":")[0].strip() for line in ran.stdout.splitlines()
             if "-m runner " in line]
    assert steps == ["goldens check", "bench goldens", "run", "score", "bench"]
    assert "-m runner run --profile tiny --count 32 --no-score --out" in ran.stdout  # its count
    assert not out.exists()
    assert not list((tmp_path / "cache").rglob("*"))  # nothing fetched, cached or locked
    counted = nightly("--pre", "--find-links", str(links), "--profile", "tiny", "--count",
                      "2", "--out", str(out), "--dry-run", cache=tmp_path / "cache")
    assert counted.returncode == 0, counted.stderr
    with_count = {line.split(":")[0].strip() for line in counted.stdout.splitlines()
                  if "-m runner " in line and " --count 2 " in line}
    assert with_count == {"run", "bench"}  # the samples of the run (and its score), the bench
    one = nightly("--iree", "wheels:3.13.0", "--count", "1", "--out", str(out), "--dry-run",
                  cache=tmp_path / "cache")
    assert one.returncode == 2 and "--count" in one.stderr and "FID" in one.stderr


def _stored_night(store: Path, version: str, out_dir: str) -> None:
    """The results store holding a bench result of `version` from this machine."""
    import socket
    from datetime import datetime

    from runner.history.model import Metric, Result
    from runner.history.store import open_store
    from runner.history.url import resolve

    result = Result(key=f"bench {out_dir}", command="bench", out_dir=out_dir,
                    finished_at=datetime(2026, 12, 1, 3, 0), profile="tiny",
                    machine=socket.gethostname(), compiler_version=version,
                    build=f"wheels:{version}", metrics=(Metric("samples_per_s", "", 2.0),))
    with open_store(resolve(str(store))) as opened:
        assert opened.add(result)


def test_a_build_this_machine_measured_is_skipped_and_said(tmp_path, hook):
    store = tmp_path / "store.sqlite"
    _stored_night(store, "3.11.0", "/data/nightly/2026-12-01-3.11.0/bench")
    root = tmp_path / "nights"
    ran = nightly("--iree", "wheels:3.11.0", "--profile", "tiny", "--results", str(store),
                  "--notify", hook.url, "--out", str(root), cache=tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    assert "already measured on this machine" in ran.stdout
    assert [b["nightly"]["status"] for b in hook.bodies] == ["skipped"]
    assert hook.bodies[0]["nightly"]["measured_in"] == "/data/nightly/2026-12-01-3.11.0/bench"
    assert not list(root.glob("2*"))  # no night dir
    assert "sekrit-token" not in ran.stderr + ran.stdout
    other = nightly("--iree", "wheels:3.12.0", "--profile", "tiny", "--results", str(store),
                    "--out", str(tmp_path / "n2"), "--dry-run", cache=tmp_path / "cache")
    assert other.returncode == 0 and "build: wheels:3.12.0" in other.stdout, other.stderr


def test_a_second_nightly_on_one_machine_is_refused_and_said(tmp_path, hook):
    from runner.base.dirlock import DirLock

    lock = DirLock(tmp_path / "cache" / "nightly" / "nightly.lock", "machine's nightly")
    lock.lock("runner nightly --out elsewhere")
    try:
        ran = nightly("--iree", "wheels:3.11.0", "--notify", hook.url, "--out",
                      str(tmp_path / "nights"), cache=tmp_path / "cache")
    finally:
        lock.unlock()
    assert ran.returncode == 2, ran.stderr
    assert "another driver holds this machine's nightly" in ran.stderr
    assert "runner nightly --out elsewhere" in ran.stderr
    assert [b["nightly"]["status"] for b in hook.bodies] == ["error"]
    assert not list((tmp_path / "nights").glob("2*"))


# --- the scheduler lines of docs/nightly.md, each run as a dry run --------------------------
PAGE = REPO / "docs" / "nightly.md"
NIGHTLIES_PAGE = "https://iree.dev/pip-release-links.html"


def fenced(language: str) -> str:
    (block,) = re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    return block


def schedule_and_command(crontab_line: str) -> tuple[str, str]:
    """A crontab line's five time fields and its command, without its redirection."""
    fields = crontab_line.split(maxsplit=5)
    return " ".join(fields[:5]), fields[5].split(" >>")[0]


def as_dry_run(command: str, tmp_path: Path, hook: Hook) -> Ran:
    """The page's command, its nightly page and --out swapped for a local find-links dir of
    nightly wheels and a temporary dir, as a dry run through bash, `runner` on PATH."""
    links = tmp_path / "links"
    links.mkdir(exist_ok=True)
    for package in ("compiler", "runtime"):
        (links / f"iree_base_{package}-3.14.0rc20261207-cp311-cp311-"
                 "manylinux_2_28_x86_64.whl").write_bytes(b"")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "runner").write_text(f"#!/bin/sh\nexec {sys.executable} -m runner \"$@\"\n")
    (bin_dir / "runner").chmod(0o755)
    assert NIGHTLIES_PAGE in command and "/data/nightly" in command
    local = command.replace(NIGHTLIES_PAGE, str(links)).replace(
        "/data/nightly", str(tmp_path / "nights"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "NIGHTLY_WEBHOOK": hook.url, "RUNNER_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(["bash", "-c", f"{local} --dry-run"], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "build: wheels:3.14.0rc20261207" in proc.stdout
    assert not (tmp_path / "nights").exists() and hook.bodies == []  # nothing written or sent
    return Ran(proc.args, proc.returncode, proc.stdout, proc.stderr)


def test_the_cron_line_runs_as_a_dry_run(tmp_path, hook):
    (line,) = [x for x in fenced("crontab").splitlines() if x and not x.startswith("#")]
    schedule, command = schedule_and_command(line)
    assert schedule == "30 2 * * *"
    as_dry_run(command, tmp_path, hook)


def test_the_scrontab_line_runs_as_a_dry_run(tmp_path, hook):
    lines = fenced("scrontab").splitlines()
    options = [x for x in lines if x.startswith("#SCRON")]
    assert options and all(w.startswith("--") for x in options for w in x.split()[1:])
    (line,) = [x for x in lines if x and not x.startswith("#")]
    _, command = schedule_and_command(line)
    as_dry_run(command, tmp_path, hook)


def test_the_github_actions_schedule_parses_and_its_step_runs_as_a_dry_run(tmp_path, hook):
    import yaml

    workflow = yaml.safe_load(fenced("yaml"))
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true, as PyYAML does
    crontab = [x for x in fenced("crontab").splitlines() if x and not x.startswith("#")]
    assert triggers["schedule"] == [{"cron": schedule_and_command(crontab[0])[0]}]
    (step,) = workflow["jobs"]["nightly"]["steps"]
    assert set(step["env"]) == {"RUNNER_RESULTS_URL", "NIGHTLY_WEBHOOK"}
    as_dry_run(step["run"], tmp_path, hook)


# --- the history's judgement, and the bisect it leads to --------------------------------------
def _nights(tmp_path: Path, rates: dict[str, list[float]], metric: str = "samples_per_s",
            subject: str = "", dirs: bool = True, command: str = "bench", named: bool = False,
            **fields: object) -> tuple[Path, Path]:
    """Night dirs under a root, each with its nightly.json, and a store holding each
    night's `command` result (bench: samples/s) from this machine, in the order given
    (`named`: under the build's spec, as a night records it; `fields`: the result's)."""
    import socket
    from datetime import datetime, timedelta

    from runner.history.model import Metric, Result
    from runner.history.store import open_store
    from runner.history.url import resolve

    root, store = tmp_path / "nights", tmp_path / "store.sqlite"
    results, day = [], datetime(2026, 11, 1, 3, 0)
    for version, values in rates.items():
        for value in values:
            night = root / f"{day:%Y-%m-%d}-{version}"
            if dirs:
                _night_dir(night, f"wheels:{version}")
            results.append(Result(
                key=f"{command} {night}", command=command, out_dir=str(night / "bench"),
                finished_at=day, profile="tiny", machine=socket.gethostname(),
                compiler_version=f"{version}rc20260316",
                build=f"wheels:{version}" if named else "",
                metrics=(Metric(metric, subject, value),), **fields))
            day += timedelta(days=1)
    with open_store(resolve(str(store))) as opened:
        assert opened.add_all(results) == len(results)
    return root, store


def _night_dir(night: Path, spec: str) -> None:
    night.mkdir(parents=True)
    (night / "nightly.json").write_text(json.dumps({"build": {"spec": spec}, "measured": True,
                                                    "steps": {}}))


SLOWER = {"3.11.0": [2.0 + 0.01 * (i % 5) for i in range(10)],
          "3.12.0": [1.5, 1.52, 1.51, 1.53]}


def test_a_regression_between_two_nights_builds_is_bisected_once(tmp_path):
    from runner.bisect.builds import Build, Sources
    from runner.nightly.night import NightRequest, bisect_argv, new_regressions

    root, store = _nights(tmp_path, SLOWER)
    req = NightRequest(root, Build("wheels", "wheels:3.12.0", "3.12.0", version="3.12.0"),
                       Sources(), "tiny", "2026-11-15", str(store))
    (change,) = new_regressions(req)
    assert change.series.metric == "samples_per_s" and change.confidence > 0.99
    argv = bisect_argv(req, change, tmp_path / "b")
    assert argv is not None
    assert argv[3:9] == ["bisect", "--good", "wheels:3.11.0", "--bad", "wheels:3.12.0",
                         "--test"] and argv[9].startswith("throughput:")
    # a night that bisected it keeps its ends: the nights after do not bisect it again
    last = sorted(root.iterdir())[-1] / "nightly.json"
    state = json.loads(last.read_text())
    state["summary"] = {"regressions": [{"ends": ["wheels:3.11.0", "wheels:3.12.0"]}]}
    last.write_text(json.dumps(state))
    assert len(new_regressions(req)) == 1  # named (--no-bisect), not bisected: still new
    state["summary"]["regressions"][0]["bisected"] = True
    last.write_text(json.dumps(state))
    assert new_regressions(req) == []


def test_the_first_night_of_a_build_that_grew_a_module_bisects_it(tmp_path):
    """The tiny UNet's module grew from 3.11.0 to 3.12.0 (bench goldens size_bytes, 306872
    -> 322634 B, the releases' real sizes): a size has no noise, so the first night of
    3.12.0, with one night of 3.11.0 before it, already has the step to bisect (compstat)."""
    from runner.bisect.builds import Build, Sources
    from runner.nightly.night import NightRequest, bisect_argv, new_regressions

    root, store = _nights(tmp_path, {"3.11.0": [306872.0], "3.12.0": [322634.0]},
                          metric="size_bytes", subject="tiny-bench/unet_cpu",
                          command="bench goldens")
    req = NightRequest(root, Build("wheels", "wheels:3.12.0", "3.12.0", version="3.12.0"),
                       Sources(), "tiny", "2026-11-02", str(store))
    (change,) = new_regressions(req)
    assert change.kind == "unconfirmed" and change.confirm is None  # confirm times sizes not
    argv = bisect_argv(req, change, tmp_path / "b")
    assert argv is not None and argv[3:10] == ["bisect", "--good", "wheels:3.11.0", "--bad",
                                               "wheels:3.12.0", "--test", "compstat"]


def test_a_grown_dispatch_count_is_bisected_with_compile_statistics(tmp_path):
    """The history says the dispatch count grew from 3.11.0 to 3.12.0: the night bisects
    it between the two nights' builds with compstat (compile statistics, deterministic per
    build), which measures both ends again; the real bisect of the two releases with
    compstat, naming 3.12.0, runs in the end-to-end test below."""
    from runner.bisect.builds import Build, Sources
    from runner.nightly.night import NightRequest, bisect_argv, ends, new_regressions

    grew = {"3.11.0": [100.0] * 10, "3.12.0": [120.0] * 4}
    root, store = _nights(tmp_path, grew, metric="dispatch_count", subject="unet")
    req = NightRequest(root, Build("wheels", "wheels:3.12.0", "3.12.0", version="3.12.0"),
                       Sources(), "tiny", "2026-11-15", str(store))
    (change,) = new_regressions(req)
    assert ends(change) == ["wheels:3.11.0", "wheels:3.12.0"] and change.confidence > 0.99
    argv = bisect_argv(req, change, tmp_path / "b")
    assert argv is not None and argv[3:10] == ["bisect", "--good", "wheels:3.11.0", "--bad",
                                               "wheels:3.12.0", "--test", "compstat"]


def test_a_slower_bench_golden_is_confirmed_first_and_not_bisected_where_it_did_not_hold(
        tmp_path):
    """A bench goldens time is a series `runner history confirm` measures: the night runs
    the command the history prints for it, with the night's builds and package sources,
    its store passed in the environment (never in nightly.json); what the confirmation
    finds decides: held, a regression to bisect; not held, the machine's, left alone."""
    from runner.base.steps import Steps
    from runner.bisect.builds import Build, Sources
    from runner.history.model import Confirmation
    from runner.history.store import open_store
    from runner.history.url import ENV, resolve
    from runner.nightly.night import (
        NightRequest,
        confirm_argv,
        confirm_env,
        confirmed,
        new_regressions,
    )

    subject = "tiny-bench/unet_cpu"
    times = {v: [1 / r for r in rates] for v, rates in SLOWER.items()}  # 2 -> 1.5/s: slower
    root, store = _nights(tmp_path, times, metric="time_ms", subject=subject,
                          command="bench goldens")
    links = tmp_path / "links $(x)"
    req = NightRequest(root, Build("wheels", "wheels:3.12.0", "3.12.0", version="3.12.0"),
                       Sources(str(links)), "tiny", "2026-11-15", str(store))
    (change,) = new_regressions(req)
    assert change.kind == "unconfirmed" and change.confirm
    out = tmp_path / "night" / "confirm-0"
    argv = confirm_argv(req, change, out)
    assert argv is not None and argv[1:2] == ["-m"]
    words = argv[3:]
    assert words[:6] == ["history", "confirm", "--good", "wheels:3.11.0rc20260316", "--bad",
                         "wheels:3.12.0rc20260316"]
    assert words[words.index("--stage") + 1] == subject
    assert words[words.index("--out") + 1] == str(out)
    assert words[words.index("--find-links") + 1] == str(links)  # the night's own index
    assert str(store) not in argv and confirm_env(req)[ENV] == str(store)
    series = change.series.key()
    for holds, kinds in ((False, []), (True, ["regression"])):
        with open_store(resolve(str(store))) as opened:
            opened.add_confirmation(Confirmation(
                series, "wheels:3.11.0rc20260316", "wheels:3.12.0rc20260316", (0.5,) * 3,
                (0.66,) * 3, holds, datetime(2026, 11, 15, 4, holds), "here"))
        found = new_regressions(req)
        assert [c.kind for c in found] == kinds  # not held: the machine's, no bisect
    assert confirm_argv(req, found[0], out) is None  # confirmed already: not measured again
    assert confirmed(req, found[0], tmp_path / "night", 0, Steps({}, lambda: None)) is True


@pytest.mark.slow
def test_a_night_confirms_a_slower_bench_golden_with_the_real_releases(tmp_path):
    """The tiny UNet's bench goldens time stepped from 3.11.0 to 3.12.0 in the history (ten
    nights at ~10 ms, four at ~15 ms: seeded). The night measures both real releases again,
    interleaved (`runner history confirm` with the night's --rounds 1 --max-rounds 1, their
    tools from their cached venvs: the releases, and the tiny-bench modules each compiles,
    the end-to-end test's below), stores the finding and follows it: one round cannot hold
    at 99% (a difference needs 8), so it is not bisected; the history keeps it unconfirmed
    where the estimate was past --min-change (undecided: the next night measures it again),
    else the machine's."""
    from runner.base.steps import Steps
    from runner.bisect.builds import Build, Sources
    from runner.nightly.night import NightRequest, investigate, new_regressions

    subject = "tiny-bench/unet_cpu"
    times = {"3.11.0": [10.0 + 0.1 * (i % 3) for i in range(10)],
             "3.12.0": [15.0, 15.1, 15.2, 15.0]}
    root, store = _nights(tmp_path, times, metric="time_ms", subject=subject,
                          command="bench goldens", named=True, sku="cpu",
                          details={"files": {subject: "goldens/tiny-bench/unet_cpu.json"}})
    req = NightRequest(root, Build("wheels", "wheels:3.12.0", "3.12.0", version="3.12.0"),
                       Sources(), "tiny", "2026-11-15", str(store), bisect=False, rounds=1,
                       max_rounds=1)
    night = sorted(root.iterdir())[-1]
    table: dict = {}
    (found,) = investigate(req, night, Steps(table, lambda: None))
    stored = json.loads((night / "confirm-0" / "confirm.json").read_text())
    assert (stored["good"], stored["bad"]) == ("wheels:3.11.0", "wheels:3.12.0")
    assert len(stored["good_values"]) == len(stored["bad_values"]) == 1  # the night's --rounds
    assert found["confirmed"] is stored["holds"]
    assert table["confirm 0"]["status"] == "finished" and "bisect 0" not in table
    assert ("no_bisect" in found) is (not stored["holds"])
    after = new_regressions(req)  # the finding is the history's now
    undecided = stored["details"]["verdict"]["undecided"]  # 1 round cannot reach 99%
    assert not stored["holds"] and [c.kind for c in after] == (
        ["unconfirmed"] if undecided else [])


UNET = "tiny-bench/unet_cpu"
FIRST_NIGHT = {"3.11.0": [4.0, 4.1, 3.9], "3.12.0": [4.4]}  # one night of the new build


def _first_night(tmp_path: Path, build: str = "3.12.0", **request: object):
    """This machine's bench goldens nights, 3.11.0's and tonight's first of 3.12.0, and the
    night's request for `build`."""
    from runner.bisect.builds import Build, Sources
    from runner.nightly.night import NightRequest

    root, store = _nights(tmp_path, FIRST_NIGHT, metric="time_ms", subject=UNET,
                          command="bench goldens", named=True, sku="cpu",
                          details={"files": {UNET: "goldens/tiny-bench/unet_cpu.json"}})
    req = NightRequest(root, Build("wheels", f"wheels:{build}", build, version=build),
                       Sources(), "tiny", "2026-11-04", str(store), **request)
    return req, sorted(root.iterdir())[-1], store


def test_a_new_builds_first_night_is_measured_against_the_build_before_it(tmp_path):
    """The night whose build changed plans the A/B against the last build this machine
    measured in the series; the dry run of the next build's night prints its rounds, in
    alternating order with each build's tools, and writes nothing."""
    from runner.base.steps import Steps
    from runner.nightly.ab import ab_plan, request
    from runner.nightly.night import first_night_ab

    req, night, store = _first_night(tmp_path)
    ab = ab_plan(req, night)
    assert ab is not None and ab.good == "wheels:3.11.0"
    assert [s.subject for s in ab.series] == [UNET]
    confirming = request(req, ab, night / "ab")
    assert (confirming.good.spec, confirming.bad.spec) == ("wheels:3.11.0", "wheels:3.12.0")
    assert (confirming.rounds, confirming.max_rounds) == (10, 30)
    assert ab_plan(req, None) is None  # before tonight: the newest build stored is tonight's
    assert first_night_ab(replace(req, ab=False), night, Steps({}, lambda: None)) is None
    before = store.read_bytes()
    ran = nightly("--iree", "wheels:3.13.0", "--profile", "tiny", "--results", str(store),
                  "--rounds", "3", "--max-rounds", "7", "--out", str(tmp_path / "n $(x)"),
                  "--dry-run", cache=tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    rounds = [line.split() for line in ran.stdout.splitlines() if " bench goldens " in line
              and "--iree-tools" in line]
    tools = [words[words.index("--iree-tools") + 1] for words in rounds]
    assert ["3.12.0" in t for t in tools] == [True, False, False, True, True, False]
    assert "judged after 7 rounds" in ran.stdout
    assert store.read_bytes() == before and not (tmp_path / "n $(x)").exists()
    off = nightly("--iree", "wheels:3.13.0", "--results", str(store), "--no-ab", "--out",
                  str(tmp_path / "n"), "--dry-run", cache=tmp_path / "cache")
    assert "(not: --no-ab)" in off.stdout and "--iree-tools" not in off.stdout
    bad = nightly("--iree", "wheels:3.13.0", "--rounds", "9", "--max-rounds", "8", "--out",
                  str(tmp_path / "n"), "--dry-run", cache=tmp_path / "cache")
    assert bad.returncode == 2 and "--max-rounds: " in bad.stderr


def test_an_ab_that_held_is_the_nights_regression_and_listed_once(tmp_path):
    """A first-night A/B that held is a regression that night, bisected between its builds
    (with --no-bisect: its confirmation stands); the history's own step of the same two
    builds is not investigated a second time; the headline says what the A/B found."""
    from runner.base.steps import Steps
    from runner.nightly.night import bisect_between, investigate, night_status, summary_of

    times = {v: [1 / r for r in rates] for v, rates in SLOWER.items()}
    root, store = _nights(tmp_path, times, metric="time_ms", subject=UNET,
                          command="bench goldens")
    req, night = _first_night(tmp_path / "x")[0], sorted(root.iterdir())[-1]
    req = replace(req, root=root, results=str(store), bisect=False)
    held = {"good": "wheels:3.11.0", "bad": "wheels:3.12.0", "out": str(night / "ab"),
            "series": [{"label": f"bench goldens time_ms {UNET}", "subject": UNET,
                        "holds": True, "line": "slower", "ratio": 1.1, "low": 1.05,
                        "high": 1.16, "confidence": 0.998, "rounds": 14, "repetitions": 140,
                        "undecided": False}]}
    (found,) = investigate(req, night, Steps({}, lambda: None), held)
    assert found["first_night_ab"] and found["confirmed"] is True
    assert found["ends"] == ["wheels:3.11.0", "wheels:3.12.0"]
    assert night_status([found], []) == "regression"
    summary = summary_of(req, "regression", night, new_build=held)
    assert summary["headline"].endswith("slower in 1 of 1 series, tiny-bench/unet_cpu +10.0%")
    argv = bisect_between(req, "wheels:3.11.0", "wheels:3.12.0", "throughput:5", night / "b")
    assert argv is not None and argv[argv.index("--test") + 1] == "throughput:5"


def test_a_step_on_one_build_is_not_bisected_and_other_roots_are_not_judged(tmp_path):
    from runner.bisect.builds import Build, Sources
    from runner.nightly.night import NightRequest, new_regressions

    build = Build("wheels", "wheels:3.11.0", "3.11.0", version="3.11.0")
    # the machine slowed down, the build did not: the step is not IREE's
    root2, store2 = _nights(tmp_path / "same-build", {"3.11.0": [*SLOWER["3.11.0"],
                                                                 *SLOWER["3.12.0"]]})
    same = NightRequest(root2, build, Sources(), "tiny", "2026-11-15", str(store2))
    # judged the machine's by the history (runner.history.judge): not a night's to bisect
    assert new_regressions(same) == []
    elsewhere = NightRequest(tmp_path / "other-root", build, Sources(), "tiny",
                             "2026-11-15", str(store2))
    assert new_regressions(elsewhere) == []


@pytest.mark.slow
def test_the_nightly_end_to_end_over_real_releases_bisects_a_regression_and_posts_it(
        tmp_path, hook):
    """Two real nights through the command, each with the real steps on the tiny profile
    (--count 2): IREE 3.11.0, then 3.12.0. Between the two releases the tiny UNet's module
    grew (bench goldens size_bytes, 306872 -> 322634 B: deterministic, a real regression of
    the releases), so the history lists the step on the first night of 3.12.0, with one
    night of 3.11.0 before it. That night finds that `runner history confirm` does not
    measure sizes (the bisect measures both ends again instead), bisects the two real
    releases (compstat), exits 1 naming 3.12.0, and the test's webhook server receives
    every night's summary. The build changed, so that night first measures 3.12.0 against
    3.11.0 on every bench goldens time series, interleaved with each release's own tools
    (one round a side here, the test's cost: too few to hold at 99%, so it names no
    regression of its own; tests/test_history_paired.py judges many rounds)."""
    root, store = tmp_path / "nights", tmp_path / "store.sqlite"
    args = ["--profile", "tiny", "--count", "2", "--results", str(store), "--notify", hook.url,
            "--out", str(root), "--json", "--rounds", "1", "--max-rounds", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "RUNNER_PROGRESS": "plain"}
    ran = cli("nightly", "--iree", "wheels:3.11.0", *args, env=env)
    summary = json.loads(ran.stdout)
    # a golden over its band (3.11.0's UNet makes 258 dispatches, the golden 214) is a
    # failed check, exit 1; the history has no build boundary yet
    failed = summary["checks_failed"]
    assert ran.returncode == (1 if failed else 0), ran.stderr
    assert summary["status"] == ("failed" if failed else "passed")
    assert summary["regressions"] == [] and summary["new_build"] is None  # nothing before it
    first, status = Path(summary["night_dir"]), summary["status"]
    ran = cli("nightly", "--iree", "wheels:3.12.0", *args, env=env)
    assert ran.returncode == 1, ran.stderr
    summary = json.loads(ran.stdout)
    night = Path(summary["night_dir"])
    assert summary["status"] == "regression"
    (found,) = summary["regressions"]
    assert found["ends"] == ["wheels:3.11.0", "wheels:3.12.0"] and found["bisected"]
    assert found["confirmed"] is None  # sizes: the bisect's own measurement of both ends
    culprit = summary["culprit"]
    assert (culprit["first_bad"], culprit["last_good"]) == ("wheels:3.12.0", "wheels:3.11.0")
    assert culprit["exact"] and culprit["confidence"] == 1.0
    assert "size_bytes" in culprit["metric"] and "tiny-bench/unet_cpu" in culprit["metric"]
    ab = summary["new_build"]
    assert (ab["good"], ab["bad"]) == ("wheels:3.11.0", "wheels:3.12.0")
    assert sorted(x["subject"] for x in ab["series"]) == [
        "tiny-bench/clip_cpu", "tiny-bench/unet_cpu", "tiny-bench/vae_cpu"]
    assert all(x["rounds"] == 1 and not x["holds"] and x["confidence"] < 0.99
               and x["repetitions"] >= 2 for x in ab["series"])
    assert "interleaved: slower in 0 of 3 series" in summary["headline"]
    for side, version in (("good", "3.11.0"), ("bad", "3.12.0")):  # each with its own tools
        ran_with = json.loads((night / "ab" / "rounds" / f"01-{side}" / "bench.json")
                              .read_text())["versions"]["compiler"]["version"]
        assert ran_with.startswith(version)
    assert len(json.loads((night / "ab" / "confirm.json").read_text())) == 3
    bisect = json.loads((night / "bisect-0" / "bisect.json").read_text())
    assert bisect["inputs"]["test"] == "compstat"
    measured = {s["build"] for s in bisect["steps"]}
    assert measured == {"wheels:3.11.0", "wheels:3.12.0"}  # both ends measured again
    assert bisect["answer"]["first_bad"] == "wheels:3.12.0"  # its compile statistics moved
    steps = json.loads((night / "nightly.json").read_text())["steps"]
    assert steps["bisect 0"]["status"] == "finished"
    assert [b["nightly"]["status"] for b in hook.bodies] == [status, "regression"]
    assert hook.bodies[-1]["text"].endswith("first bad build wheels:3.12.0")
    for each in (first, night):  # the steps in the build's venv record nothing themselves
        logs = "".join(p.read_text() for p in (each / "logs").glob("*.log"))
        assert "history:" not in logs and "--count 2" in (each / "nightly.json").read_text()
    # a night killed before its summary goes on: every step kept, the bisect's too
    state = json.loads((night / "nightly.json").read_text())
    del state["measured"], state["summary"]
    (night / "nightly.json").write_text(json.dumps(state))
    resumed = cli("nightly", "--iree", "wheels:3.12.0", *args, env=env)
    assert resumed.returncode == 1, resumed.stderr
    assert resumed.stderr.count("up to date, skipped") == 7  # five steps, the A/B, the bisect
    again = cli("nightly", "--iree", "wheels:3.12.0", *args, env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "skipped"


def test_a_store_that_cannot_be_reached_fails_nothing(tmp_path, capsys):
    """The night runs (nothing says it was measured) and judges nothing, saying so, with
    the store's password never shown."""
    from runner.bisect.builds import Build, Sources
    from runner.nightly.night import NightRequest, new_regressions, skip_reason

    req = NightRequest(tmp_path / "nights", Build("wheels", "wheels:3.12.0", "3.12.0",
                                                  version="3.12.0"),
                       Sources(), "tiny", "2026-11-15",
                       "postgresql://lab:s3cret@127.0.0.1:1/results")
    assert skip_reason(req) is None
    assert new_regressions(req) == []
    err = capsys.readouterr().err
    assert "the history could not be judged" in err and "s3cret" not in err


def test_a_confirmed_regression_the_night_does_not_bisect_still_exits_1():
    """With --no-bisect (or builds a bisect cannot install) a confirmation that held is the
    night's regression, exit 1 as its help says; one that did not hold, or a bisect that
    measured both ends alike again, is not."""
    from runner.nightly.night import night_status as verdict

    held = {"change": "x", "confirmed": True, "no_bisect": "--no-bisect"}
    assert verdict([held], []) == "regression"
    assert verdict([{**held, "confirmed": False}], []) == "passed"
    assert verdict([{**held, "confirmed": None}], ["bench"]) == "failed"
    bisected = {"change": "x", "confirmed": True, "bisected": True, "culprit": None}
    assert verdict([bisected], []) == "passed"  # both ends alike when measured again
    assert verdict([{**bisected, "culprit": {"first_bad": "wheels:3.12.0"}}], []) == "regression"
