"""The results store: open (creating or migrating it), add a result, query results.

SQLite (the default, one file under `$RUNNER_CACHE_DIR`) and PostgreSQL (a lab's shared
database) through SQLAlchemy Core, one code path for both. A result is written in one
transaction, its row and all its metrics, so a writer killed midway leaves nothing of it; two
writers at once both land (SQLite: WAL and a write lock taken at BEGIN, with a wait;
PostgreSQL: row-level, and an advisory lock around a migration).

Opening a store checks its schema revision: at schema.HEAD nothing more happens; older (or
new) it is migrated by Alembic under the write lock; newer than this runner knows, it is
refused, naming the fix.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from runner.base.closing import Closes
from runner.base.errors import RunnerError, ServiceUnreachable
from runner.history import schema
from runner.history.environment import Environment
from runner.history.model import Confirmation, Metric, Result
from runner.history.series import series_key
from runner.history.url import POSTGRES, SQLITE, StoreURL

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SQLITE_WAIT_S = 60  # a writer waits this long for another's transaction (a big import)
# ... asking for the lock again this often: SQLite's own wait is in C, where a signal
# (Ctrl-C) would not be seen until it ends; between two asks it is.
SQLITE_ASK_S = 0.2
CONNECT_TIMEOUT_S = 10  # PostgreSQL: an unreachable server fails the recording this fast
LOCK_KEY = 0x5D1C_4E57  # pg_advisory_xact_lock key of this runner's migrations
INSERT_CHUNK = 500  # metrics per executemany


class StoreUnavailable(ServiceUnreachable):
    """The store could not be opened or written: a command's results then stay in its out
    dir (`runner history import DIR` adds them later)."""


@dataclass(frozen=True)
class Query:
    """Which results to read; every field narrows (None / empty: no narrowing)."""

    profile: str | None = None
    command: str | None = None
    machine: str | None = None
    device: str | None = None
    sku: str | None = None
    metrics: tuple[str, ...] = ()  # metric names
    subject: str | None = None  # a stage, test or layout: SQL LIKE with * as wildcard
    since: datetime | None = None
    until: datetime | None = None
    versions: tuple[str, ...] = ()  # a compiler version or commit prefix each
    limit: int | None = None  # the newest N results


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _sqlite_engine(url: StoreURL) -> sa.Engine:
    assert url.path is not None
    try:
        url.path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreUnavailable(f"cannot create the store's directory: {e.strerror}",
                               where=str(url.path.parent),
                               fix="pass --results with a writable place") from None
    engine = sa.create_engine(url.url, connect_args={"timeout": SQLITE_ASK_S},
                              poolclass=sa.pool.NullPool)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        # SQLAlchemy then issues BEGIN itself (below): sqlite3's own implicit
        # transactions would run DDL and the first SELECT outside of one.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {round(SQLITE_ASK_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        with contextlib.suppress(Exception):  # a read-only directory keeps its journal
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        # A writer takes the write lock at BEGIN: two writers then queue instead of one
        # failing with "database is locked" when it upgrades a read lock.
        write = conn.get_execution_options().get("history_write")
        deadline = time.monotonic() + SQLITE_WAIT_S
        while True:
            try:
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
                return
            except sa.exc.OperationalError as e:  # another writer's: ask again, for a while
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise

    return engine


def _postgres_engine(url: StoreURL) -> sa.Engine:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise StoreUnavailable("a PostgreSQL store needs psycopg, which is not installed",
                               where="--results",
                               fix="pip install 'iree-sdxl-runner[postgres]'") from None
    return sa.create_engine(url.url, poolclass=sa.pool.NullPool,
                            connect_args={"connect_timeout": CONNECT_TIMEOUT_S,
                                          "application_name": "iree-sdxl-runner"})


def _revision(conn: sa.Connection) -> str | None:
    if not sa.inspect(conn).has_table(schema.VERSION_TABLE):
        return None
    return conn.execute(sa.text(f"SELECT version_num FROM {schema.VERSION_TABLE}")).scalar()


def _migrate(conn: sa.Connection) -> None:
    """Brings the store to HEAD with Alembic, on this connection, in its transaction."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    command.upgrade(config, schema.HEAD)


def known_revisions() -> list[str]:
    """Every revision this runner's migrations know, oldest first."""
    return sorted(p.name.split("_", 1)[0] for p in (MIGRATIONS / "versions").glob("0*.py"))


class Store(Closes):
    """An open results store (`open_store`); `close()` or `with` releases it."""

    def __init__(self, url: StoreURL, engine: sa.Engine):
        self.url, self.engine = url, engine
        self._writer = engine.execution_options(history_write=True)

    def close(self) -> None:
        self.engine.dispose()

    def _fail(self, e: Exception, doing: str) -> StoreUnavailable:
        from runner.config.sources import redact_secrets

        text = redact_secrets(str(getattr(e, "orig", None) or e).strip().splitlines()[0]
                              if str(e).strip() else type(e).__name__)
        return StoreUnavailable(f"cannot {doing} the results store: {text}",
                                where=self.url.shown(),
                                fix="check that it is reachable and writable (--results, "
                                "$RUNNER_RESULTS_URL)")

    # --- schema -------------------------------------------------------------------------
    def prepare(self, upgrade: bool = True) -> None:
        """Creates or migrates the store to HEAD (see the module docstring)."""
        try:
            with self.engine.connect() as conn:
                current = _revision(conn)
            if current == schema.HEAD:
                return
            self._check_known(current)
            if not upgrade:
                return
            with self._writer.begin() as conn:
                if self.url.kind == POSTGRES:
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
                current = _revision(conn)  # another runner may have done it meanwhile
                if current != schema.HEAD:
                    self._check_known(current)
                    _migrate(conn)
        except RunnerError:
            raise
        except (sa.exc.SQLAlchemyError, OSError) as e:
            raise self._fail(e, "open") from None

    def _check_known(self, current: str | None) -> None:
        if current is not None and current not in known_revisions():
            raise StoreUnavailable(
                f"the results store is at schema revision {current}, which a newer runner "
                f"wrote (this one knows up to {schema.HEAD})", where=self.url.shown(),
                fix="upgrade the runner (pip install -U iree-sdxl-runner) to read it")

    def revision(self) -> str | None:
        with self.engine.connect() as conn:
            return _revision(conn)

    # --- writing ------------------------------------------------------------------------
    def add(self, result: Result) -> bool:
        """Writes `result` and its metrics in one transaction. False: a result with its
        key is already there (nothing written)."""
        try:
            with self._writer.begin() as conn:
                return self._add(conn, result)
        except sa.exc.IntegrityError:
            return False  # another writer added the same result meanwhile
        except sa.exc.SQLAlchemyError as e:
            raise self._fail(e, "write to") from None

    def add_all(self, results: list[Result]) -> int:
        """Writes each result in its own transaction; returns how many were new."""
        return sum(self.add(r) for r in results)

    def _add(self, conn: sa.Connection, result: Result) -> bool:
        r = schema.results
        if conn.execute(sa.select(r.c.id).where(r.c.key == result.key)).first():
            return False
        row = {c: getattr(result, c) for c in (
            "key", "command", "out_dir", "finished_at", "profile", "model", "layout",
            "machine", "device", "sku", "compiler_version", "compiler_commit",
            "runtime_version", "runtime_commit", "build", "runner_version", "runner_commit",
            "verdict", "exit_code")}
        row["recorded_at"] = _utcnow()
        row["details"] = json.dumps(result.details, sort_keys=True, default=str)
        row["environment"] = (json.dumps(result.environment.to_dict(), sort_keys=True)
                              if result.environment else None)
        inserted = conn.execute(r.insert().values(**row)).inserted_primary_key
        assert inserted is not None
        result_id = inserted[0]
        rows = [{"result_id": result_id, "name": m.name, "subject": m.subject,
                 "value": m.value, "golden": m.golden, "low": m.low, "high": m.high,
                 "verdict": m.verdict} for m in result.metrics]
        for i in range(0, len(rows), INSERT_CHUNK):
            conn.execute(schema.metrics.insert(), rows[i:i + INSERT_CHUNK])
        return True

    # --- reading ------------------------------------------------------------------------
    def query(self, q: Query) -> list[Result]:
        """The results `q` selects, oldest first, each with the metrics `q` names (all
        when it names none)."""
        r, m = schema.results, schema.metrics
        where = _conditions(q)
        try:
            with self.engine.connect() as conn:
                ids = sa.select(r.c.id).where(*where)
                if q.metrics or q.subject:
                    ids = ids.where(r.c.id.in_(sa.select(m.c.result_id).where(
                        *_metric_conditions(q))))
                if q.limit:
                    ids = ids.order_by(r.c.finished_at.desc(), r.c.id.desc()).limit(q.limit)
                rows = conn.execute(sa.select(r).where(r.c.id.in_(ids))
                                    .order_by(r.c.finished_at, r.c.id)).all()
                chosen = sa.select(m.c.result_id, m.c.name, m.c.subject, m.c.value,
                                   m.c.golden, m.c.low, m.c.high, m.c.verdict).where(
                    m.c.result_id.in_(ids), *_metric_conditions(q))
                by_result: dict[int, list[Metric]] = {}
                for row in conn.execute(chosen.order_by(m.c.id)):
                    by_result.setdefault(row[0], []).append(Metric(*row[1:]))
        except sa.exc.SQLAlchemyError as e:
            raise self._fail(e, "read") from None
        return [_result(row, by_result.get(row.id, [])) for row in rows]

    def add_confirmation(self, c: Confirmation) -> None:
        """Keeps a confirmation; a later one of the same series and builds supersedes it
        when read (`confirmations`), and both stay."""
        row = {"series_key": series_key(c.series), "series": json.dumps(c.series,
                                                                         sort_keys=True),
               "good": c.good, "bad": c.bad, "good_values": json.dumps(list(c.good_values)),
               "bad_values": json.dumps(list(c.bad_values)), "holds": c.holds,
               "confirmed_at": c.confirmed_at, "machine": c.machine, "out_dir": c.out_dir,
               "details": json.dumps(c.details, sort_keys=True, default=str)}
        try:
            with self._writer.begin() as conn:
                conn.execute(schema.confirmations.insert().values(**row))
        except sa.exc.SQLAlchemyError as e:
            raise self._fail(e, "write to") from None

    def confirmations(self) -> list[Confirmation]:
        """Every confirmation, oldest first."""
        t = schema.confirmations
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(sa.select(t).order_by(t.c.confirmed_at, t.c.id)).all()
        except sa.exc.SQLAlchemyError as e:
            raise self._fail(e, "read") from None
        return [Confirmation(json.loads(r.series), r.good, r.bad,
                             tuple(json.loads(r.good_values)), tuple(json.loads(r.bad_values)),
                             bool(r.holds), r.confirmed_at, r.machine, r.out_dir,
                             json.loads(r.details or "{}")) for r in rows]

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(
                schema.results)).scalar() or 0)


def _like(pattern: str) -> str:
    return pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") \
        .replace("*", "%")


def _conditions(q: Query) -> list[Any]:
    r = schema.results
    out: list[Any] = []
    for column, value in (("profile", q.profile), ("command", q.command),
                          ("machine", q.machine), ("device", q.device), ("sku", q.sku)):
        if value:
            out.append(r.c[column].like(_like(value), escape="\\"))
    if q.since:
        out.append(r.c.finished_at >= q.since)
    if q.until:
        out.append(r.c.finished_at <= q.until)
    if q.versions:
        out.append(sa.or_(*[sa.or_(*_version_conditions(v)) for v in q.versions]))
    return out


def release_candidates(version: str) -> str | None:
    """The versions a release's own wheels report, as a LIKE pattern: pip installs IREE
    3.13.0 as `3.13.0`, and its wheels say `3.13.0rc20261016`. None for anything else."""
    return f"{_like(version)}rc%" if re.fullmatch(r"\d+\.\d+\.\d+", version) else None


def _version_conditions(v: str) -> list[Any]:
    """A build as named: its version as the wheel reports it or as pip names it (a
    release), a commit prefix, or the build spec as asked for."""
    r = schema.results
    out = [r.c.compiler_version == v, r.c.runtime_version == v, r.c.build == v,
           r.c.compiler_commit.like(_like(v) + "%", escape="\\")]
    pattern = release_candidates(v)
    if pattern is not None:
        out += [r.c.compiler_version.like(pattern, escape="\\"),
                r.c.runtime_version.like(pattern, escape="\\")]
    return out


def _metric_conditions(q: Query) -> list[Any]:
    m = schema.metrics
    out: list[Any] = []
    if q.metrics:
        out.append(m.c.name.in_(q.metrics))
    if q.subject:
        out.append(m.c.subject.like(_like(q.subject), escape="\\"))
    return out


def _result(row: Any, metrics: list[Metric]) -> Result:
    try:
        details = json.loads(row.details or "{}")
    except ValueError:
        details = {}
    return Result(
        key=row.key, command=row.command, out_dir=row.out_dir, finished_at=row.finished_at,
        profile=row.profile, model=row.model, layout=row.layout, machine=row.machine,
        device=row.device, sku=row.sku, compiler_version=row.compiler_version,
        compiler_commit=row.compiler_commit, runtime_version=row.runtime_version,
        runtime_commit=row.runtime_commit, build=row.build, runner_version=row.runner_version,
        runner_commit=row.runner_commit, verdict=row.verdict, exit_code=row.exit_code,
        metrics=tuple(metrics), details=details if isinstance(details, dict) else {},
        environment=_environment(row.environment))


def _environment(text: str | None) -> Environment | None:
    try:
        return Environment.from_dict(json.loads(text)) if text else None
    except ValueError:
        return None


def open_store(url: StoreURL, upgrade: bool = True) -> Store:
    """Opens the results store that `runner history` reads and every command writes.

    Args:
        url: the store (`runner.history.url.resolve`: a SQLite path, `sqlite:///...` or
            `postgresql://...`; None is $RUNNER_RESULTS or the default).
        upgrade: create the schema or migrate it to HEAD when it is older.

    Returns:
        The open `Store` (`add(result)`, `query(Query(...))`); close it, or use `with`.

    Raises:
        StoreUnavailable: the store cannot be reached, read or migrated.
    """
    try:
        engine = _sqlite_engine(url) if url.kind == SQLITE else _postgres_engine(url)
    except sa.exc.ArgumentError as e:
        raise StoreUnavailable(f"not a usable store URL: {e}", where=url.shown(),
                               fix="see `runner history --help`") from None
    store = Store(url, engine)
    try:
        store.prepare(upgrade)
    except BaseException:
        store.close()
        raise
    return store


@contextlib.contextmanager
def opened(url: StoreURL) -> Iterator[Store]:
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()
