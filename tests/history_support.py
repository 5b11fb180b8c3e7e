"""Fixtures for the results store's tests: a real PostgreSQL server (Debian's package) for
the session, and `store_url`, which runs a test against SQLite and against PostgreSQL.

The server runs on loopback on a free port with password authentication, its data directory
in a fresh temporary directory, and is stopped at the session's end. initdb refuses root, so
as root the server runs as the `postgres` user Debian's package creates (runuser). Where no
server can be started the PostgreSQL cases skip, except under CI (`CI` set), where that is a
failure: scripts/test.sh installs the package.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

USER = "runner"
# A password URL quoting must carry (`@`, a space, `/`), and that the tests look for in
# every file and message to prove it is redacted.
PASSWORD = "pg s3cr@t/pw"
_databases = itertools.count()


@dataclass(frozen=True)
class Postgres:
    port: int
    data: Path

    def url(self, database: str = "postgres") -> str:
        return (f"postgresql://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{self.port}/"
                f"{database}")

    def new_database(self) -> str:
        """A fresh, empty database's URL (one per test keeps tests apart)."""
        import psycopg

        name = f"results_{os.getpid()}_{next(_databases)}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must start PostgreSQL (scripts/test.sh installs it): {why}")
    pytest.skip(f"no PostgreSQL server can be started here: {why}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    bindir = _bindir()
    if bindir is None:
        _unavailable("initdb not found (apt-get install postgresql)")
    assert bindir is not None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    root = Path(tempfile.mkdtemp(prefix="runner-pg-"))
    data, pwfile = root / "data", root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(pwfile, "postgres")
    port = _free_port()
    log = root / "server.log"
    steps = [
        [str(bindir / "initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256",
         f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"],
        [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
         f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off", "start"],
    ]
    try:
        for argv in steps:
            proc = subprocess.run(_as_server_user(argv), capture_output=True, text=True,
                                  check=False, timeout=120)
            if proc.returncode != 0:
                tail = log.read_text()[-1500:] if log.is_file() else ""
                _unavailable(f"{argv[0]} failed: {proc.stderr[-1500:]}{tail}")
        yield Postgres(port, data)
    finally:
        subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast",
                                        "-w", "stop"]), capture_output=True, check=False,
                       timeout=120)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store's URL: an SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.sqlite'}"
    server: Postgres = request.getfixturevalue("postgres")
    return server.new_database()


CONFIRM_SUBJECT = "tiny-bench/unet_cpu"


def two_builds_store(path: Path, machine: str | None = None) -> str:
    """A store of sixteen `bench goldens` of the tiny UNet on this machine (or `machine`):
    eight under IREE 3.12.0 at ~10 ms, then eight under 3.13.0 at ~15 ms, a step across
    builds that `runner history` lists as unconfirmed. Returns its path."""
    from datetime import datetime, timedelta

    from runner.history.model import Metric, Result
    from runner.history.store import open_store
    from runner.history.url import resolve

    t0 = datetime(2026, 11, 28, 14, 0)
    with open_store(resolve(str(path))) as store:
        for i in range(16):
            version = "3.12.0" if i < 8 else "3.13.0"
            ms = (10.0 if i < 8 else 15.0) + (i % 3) * 0.1
            store.add(Result(
                key=f"bg-{i}", command="bench goldens", out_dir=f"/gone/bg{i}",
                finished_at=t0 + timedelta(hours=i), profile="cpu",
                machine=machine or socket.gethostname(), sku="cpu",
                compiler_version=version, runtime_version=version, verdict="pass",
                exit_code=0, metrics=(Metric("time_ms", CONFIRM_SUBJECT, ms, 97.0, None, 106.7,
                                             "pass"),),
                details={"files": {CONFIRM_SUBJECT: "goldens/tiny-bench/unet_cpu.json"}}))
    return str(path)
