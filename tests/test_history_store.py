"""The results store on both backends: the same tests against an SQLite file and a real
PostgreSQL server (tests/history_support.py): round trips and filters, two writers at once,
a writer killed inside its transaction, a store an older runner wrote, one a newer runner
wrote, and a server that cannot be reached (its password never shown)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from history_support import PASSWORD, postgres, store_url  # noqa: F401
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.history import schema
from runner.history.environment import Environment
from runner.history.model import Confirmation, Metric, Result
from runner.history.store import MIGRATIONS, Query, StoreUnavailable, open_store
from runner.history.url import resolve

T0 = datetime(2026, 11, 1, 8, 0)


def result(i: int, **fields) -> Result:
    """A result as the extraction makes them: a run's numbers, with bands and verdicts."""
    metrics = (Metric("fid", "", 23.5 + i / 100, None, 23.0, 23.9, "pass"),
               Metric("samples_per_s", "", 2.0 + i / 10),
               Metric("stage_ms", "unet", 900.0 + i), Metric("stage_ms", "vae", 55.0 + i),
               Metric("time_ms", "sdxl/punet_rocm", 80.0 + i, 80.0, None, 88.0, "pass"))
    base = dict(key=f"r{i}", command="run", out_dir=f"/runs/{i}",
                finished_at=T0 + timedelta(days=i), profile="mi325x", machine="lab-1",
                device="rocm:gfx942", compiler_version=f"3.{10 + i % 3}.0",
                compiler_commit=f"{i:07x}" + "a" * 33, verdict="PASS", exit_code=0,
                metrics=metrics, details={"argv": ["run", "--out", f"/runs/{i}"]})
    return Result(**{**base, **fields})


def test_results_round_trip_with_their_metrics_and_are_kept_once(store_url):  # noqa: F811
    with open_store(resolve(store_url)) as store:
        assert store.revision() == schema.HEAD
        assert [store.add(result(i)) for i in range(3)] == [True] * 3
        assert store.add(result(1)) is False  # the same key: already there
        got = store.query(Query())
    assert [r.key for r in got] == ["r0", "r1", "r2"]
    assert got[1] == result(1)  # every field, every metric with its band and verdict


def test_each_filter_narrows(store_url):  # noqa: F811
    with open_store(resolve(store_url)) as store:
        store.add_all([result(i) for i in range(6)])
        store.add(result(9, key="other", profile="cpu", machine="ci-2", command="bench"))

        def keys(**q) -> list[str]:
            return [r.key for r in store.query(Query(**q))]

        assert keys(profile="cpu") == ["other"]
        assert keys(profile="mi*", command="run") == [f"r{i}" for i in range(6)]
        assert keys(machine="ci-*") == ["other"]
        assert keys(since=T0 + timedelta(days=4), until=T0 + timedelta(days=5)) == ["r4", "r5"]
        assert keys(versions=("3.11.0",)) == ["r1", "r4"]
        assert keys(versions=("0000003",)) == ["r3"]  # a commit prefix
        assert keys(limit=2) == ["r5", "other"]  # the newest two, oldest first
        unet = store.query(Query(metrics=("stage_ms",), subject="un*"))
        assert {(m.name, m.subject) for r in unet for m in r.metrics} == {("stage_ms", "unet")}
        assert len(unet) == 7
        assert keys(subject="100%_literal") == []  # % and _ are not wildcards


WRITER = """
import sys
sys.path.insert(0, sys.argv[3])
from test_history_store import result
from runner.history.store import open_store
from runner.history.url import resolve
with open_store(resolve(sys.argv[1])) as store:
    for i in range(40):
        assert store.add(result(i, key=f"{sys.argv[2]}-{i}"))
"""


def _python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def test_two_writers_at_once_both_land_whole(store_url):  # noqa: F811
    """Two processes open a store nobody created yet and each writes 40 results at once:
    the store is created once, and all 80 results are there with all their metrics."""
    writers = [_python(WRITER, store_url, name, str(REPO / "tests")) for name in ("a", "b")]
    for w in writers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    with open_store(resolve(store_url)) as store:
        got = store.query(Query(limit=None))
    assert sorted(r.key for r in got) == sorted(f"{n}-{i}" for n in "ab" for i in range(40))
    assert all(len(r.metrics) == len(result(0).metrics) for r in got)


KILLED = """
import sys, time
sys.path.insert(0, sys.argv[2])
from sqlalchemy import event
from test_history_store import result
from runner.history.model import Metric
from runner.history.store import open_store
from runner.history.url import resolve
store = open_store(resolve(sys.argv[1]))
big = result(0, key="half", metrics=tuple(Metric("dispatch_ms", f"d{i}", float(i))
                                         for i in range(2000)))
@event.listens_for(store.engine, "after_cursor_execute")
def pause(conn, cursor, statement, *args):
    if statement.lstrip().upper().startswith("INSERT INTO METRICS"):
        print("inside", flush=True)
        time.sleep(300)
store.add(big)
"""


def test_a_writer_killed_inside_its_transaction_leaves_nothing_half_written(store_url):  # noqa: F811
    with open_store(resolve(store_url)) as store:
        store.add(result(1))
    child = _python(KILLED, store_url, str(REPO / "tests"), start_new_session=True)
    assert child.stdout is not None
    line = child.stdout.readline()  # its result row and a first chunk of metrics are in
    assert line.strip() == "inside", child.stderr.read() if child.stderr else ""
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=60)
    with open_store(resolve(store_url)) as store:
        assert [r.key for r in store.query(Query())] == ["r1"]
        with store.engine.connect() as conn:
            orphans = conn.execute(sa.select(sa.func.count()).select_from(
                schema.metrics).where(schema.metrics.c.name == "dispatch_ms")).scalar()
        assert orphans == 0
        assert store.add(result(2))  # the dead writer's lock is gone with it


def _old_store(url: str, revision: str = "0001") -> None:
    """A store as the first runner with a history wrote it (schema revision 0001), or a
    later `revision`, holding one result."""
    from alembic import command
    from alembic.config import Config

    store = open_store(resolve(url), upgrade=False)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        conn.execute(sa.text(
            "INSERT INTO results (key, command, out_dir, finished_at, recorded_at, profile) "
            "VALUES ('old', 'run', '/runs/old', :t, :t, 'cpu')"), {"t": T0})
        rid = conn.execute(sa.text("SELECT id FROM results WHERE key = 'old'")).scalar()
        conn.execute(sa.text("INSERT INTO metrics (result_id, name, subject, value) VALUES "
                             "(:r, 'stage_ms', 'unet', 912.5)"), {"r": rid})
    store.close()


def test_a_store_an_older_runner_wrote_opens_migrated_with_its_results(store_url):  # noqa: F811
    _old_store(store_url)
    with open_store(resolve(store_url)) as store:
        assert store.revision() == schema.HEAD
        (old,) = store.query(Query())
        assert (old.key, old.out_dir, old.metrics) == (
            "old", "/runs/old", (Metric("stage_ms", "unet", 912.5),))
        assert store.add(result(1))  # and takes new results with their bands
        assert store.query(Query(profile="mi325x"))[0].metrics[0].low == 23.0
        assert store.confirmations() == []  # and confirmations (revision 0003)
        store.add_confirmation(confirmation())
        assert store.confirmations() == [confirmation()]


ENVIRONMENT = Environment(gpu_driver="6.10.5", rocm_version="6.3.1-48", vbios="113-M3250101-100",
                          compute_partition="CPX", memory_partition="NPS4", kernel="6.8.0-49",
                          runner_version="0.9.0", runner_commit="c" * 40,
                          modules={"unet": "a" * 64, "vae $(x)\n'\"": "b" * 64})


def test_a_store_before_environments_migrates_and_keeps_each_results_environment(
        store_url):  # noqa: F811
    _old_store(store_url, "0003")
    with open_store(resolve(store_url)) as store:
        assert store.revision() == schema.HEAD == "0004"
        (old,) = store.query(Query())
        assert old.key == "old" and old.environment is None  # recorded before: unknown
        assert store.add(result(1, environment=ENVIRONMENT))
        assert store.add(result(2))
        kept = {r.key: r.environment for r in store.query(Query(profile="mi325x"))}
    assert kept == {"r1": ENVIRONMENT, "r2": None}
    assert ENVIRONMENT.cuda_version is None  # absent stays absent, not ""


def confirmation(**fields) -> Confirmation:
    base = dict(series={"command": "bench goldens", "metric": "time_ms", "subject": "t"},
                good="wheels:3.12.0", bad="wheels:3.13.0", good_values=(8.5, 8.4, 8.6),
                bad_values=(16.9, 17.0, 16.8), holds=True, confirmed_at=T0, machine="vm",
                out_dir="/runs/confirm", details={"rounds": 3})
    return Confirmation(**{**base, **fields})


def test_confirmations_round_trip_oldest_first(store_url):  # noqa: F811
    with open_store(resolve(store_url)) as store:
        later = confirmation(holds=False, confirmed_at=T0 + timedelta(hours=1),
                             bad="wheels:3.13.0 $(x)\n'\"")
        store.add_confirmation(later)
        store.add_confirmation(confirmation())
        assert store.confirmations() == [confirmation(), later]


def test_a_store_a_newer_runner_wrote_is_refused_naming_the_fix(store_url):  # noqa: F811
    with open_store(resolve(store_url)) as store, store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(StoreUnavailable) as e:
        open_store(resolve(store_url))
    assert "revision 0099, which a newer runner wrote" in str(e.value)
    assert "upgrade the runner" in str(e.value)


def test_head_is_the_newest_migration():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_current_head() == schema.HEAD


RELEASED = REPO / "tests" / "fixtures" / "history" / "revisions.json"


def made_by(revision: str, path: Path) -> dict:
    """The tables a new SQLite store migrated to `revision` holds, as SQLAlchemy reflects
    them: columns (name, type, nullable, default), indexes, foreign keys."""
    from alembic import command
    from alembic.config import Config

    engine = sa.create_engine(f"sqlite:///{path}")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        seen = sa.inspect(conn)
        tables = {table: {
            "columns": [[c["name"], str(c["type"]), c["nullable"], c["default"]]
                        for c in seen.get_columns(table)],
            "indexes": sorted([i["name"], i["column_names"], bool(i["unique"])]
                              for i in seen.get_indexes(table)),
            "foreign_keys": [[f["constrained_columns"], f["referred_table"],
                              f["referred_columns"]] for f in seen.get_foreign_keys(table)]}
            for table in sorted(seen.get_table_names()) if table != schema.VERSION_TABLE}
    engine.dispose()
    return tables


def test_each_released_revision_makes_what_it_made_when_released(tmp_path):
    """A released migration has run on stores out there, so what it makes never changes:
    runner.history.revisions' entries of a released revision stay as they are, and a change
    to a table is a new revision, which adds its tables to the fixture."""
    released = json.loads(RELEASED.read_text())
    assert list(released)[-1] == schema.HEAD
    for revision, tables in released.items():
        assert made_by(revision, tmp_path / f"{revision}.sqlite") == tables, revision


def _differences(engine: sa.Engine, metadata: sa.MetaData) -> list:
    """What Alembic's autogenerate finds between the store's tables and `metadata`: tables,
    columns, types, nullability, server defaults, indexes, unique and foreign keys."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True,
                                                         "compare_server_default": _unlike})
        return compare_metadata(context, metadata)


def _unlike(context, inspected_column, metadata_column, inspected: str | None,
            metadata_default, rendered: str | None) -> bool:
    """Whether a column's server default in the store differs from the schema's (`rendered`:
    its text unquoted). The store gives it back as SQL: quoted, `('')` on SQLite after a
    batch migration copied the table, `''::character varying` on PostgreSQL."""
    if inspected is None or rendered is None:
        return inspected != rendered
    text = inspected.split("::")[0]
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return text != "'" + rendered.replace("'", "''") + "'"


def test_the_migrations_make_the_schema_the_store_queries(store_url):  # noqa: F811
    """schema.py composes the tables from runner.history.revisions, which the migrations
    apply: a store the migrations made is those tables to the column, and a column or a
    default the schema declared that no migration makes is found."""
    with open_store(resolve(store_url)) as store:
        assert _differences(store.engine, schema.metadata) == []
        extra = sa.MetaData()
        for table in schema.metadata.tables.values():
            table.to_metadata(extra)
        extra.tables["metrics"].append_column(sa.Column("unit", sa.String(20), nullable=True))
        extra.tables["results"].c.verdict.server_default = sa.DefaultClause("none")
        found = _differences(store.engine, extra)
    assert [(d[0], d[2], d[3].name) for d in found if isinstance(d, tuple)] == [
        ("add_column", "metrics", "unit")]
    assert [(d[0][0], d[0][2], d[0][3]) for d in found if isinstance(d, list)] == [
        ("modify_default", "results", "verdict")]


def test_a_server_that_cannot_be_reached_is_named_without_its_password(postgres):  # noqa: F811
    closed = postgres.url().replace(f":{postgres.port}/", ":1/")
    with pytest.raises(StoreUnavailable) as e:
        open_store(resolve(closed))
    assert "cannot open the results store" in str(e.value)
    assert "REDACTED@127.0.0.1:1" in str(e.value) and PASSWORD not in str(e.value)
    wrong = postgres.url().replace("pg%20s3cr", "not-it")
    with pytest.raises(StoreUnavailable) as e:
        open_store(resolve(wrong))
    assert "password authentication failed" in str(e.value)
    assert "not-it" not in str(e.value) and PASSWORD not in str(e.value)


@pytest.mark.parametrize("text, fix", [
    ("mysql://u:pw@h/db", "neither SQLite nor PostgreSQL"),
    ("sqlite://", "must be a file"),
    ("sqlite:///:memory:", "must be a file"),
])
def test_a_store_url_of_another_kind_is_refused(text, fix):
    with pytest.raises(RunnerError) as e:
        resolve(text)
    assert fix in str(e.value) and "pw" not in str(e.value)
