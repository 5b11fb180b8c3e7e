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
    assert "-m runner run --profile tiny --no-score --out" in ran.stdout
    assert not out.exists()
    assert not list((tmp_path / "cache").rglob("*"))  # nothing fetched, cached or locked


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
