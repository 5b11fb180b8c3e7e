"""What each revision of the store's schema added, declared once: the migrations
(migrations/versions/) apply these, and the current tables (runner/history/schema.py) are
composed from them, so a column is written down in one place, the revision that made it.

An applied migration is frozen history: revision 0003 must make the table it made when it
was released, whatever the current schema has become since. So an entry here, once
released, is never edited: a later change to a table is a new revision's entry (a column
added, an index made), which its migration applies and schema.py adds to the table it
composes. Each function returns new `Column`s, since a column belongs to one table: the
migration's or the schema's. tests/test_history_store.py compares a store the migrations
made with schema.py, on SQLite and PostgreSQL, and what each released revision makes with
what it made when released (tests/fixtures/history/revisions.json).

Nothing here imports Alembic: schema.py imports this module, and a store already at the
newest revision opens without Alembic (runner/history/store.py). A migration hands its
`alembic.op` to the helpers at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

# The results' text columns an empty string stands for "not known" in, and their lengths.
_RESULT_TEXTS_0001 = (("profile", 200), ("model", 200), ("layout", 200), ("machine", 200),
                      ("device", 200), ("sku", 100), ("compiler_version", 100),
                      ("compiler_commit", 64), ("runtime_version", 100),
                      ("runtime_commit", 64), ("build", 300), ("runner_version", 50),
                      ("runner_commit", 64), ("verdict", 40))


@dataclass(frozen=True)
class IndexSpec:
    """An index as a revision made it: its name, its table and the columns it orders by."""

    name: str
    table: str
    columns: tuple[str, ...]


def results_0001() -> list[sa.Column]:
    """0001: one row per finished command."""
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(64), nullable=False, unique=True),
        sa.Column("command", sa.String(40), nullable=False),
        sa.Column("out_dir", sa.Text, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=False),
        sa.Column("recorded_at", sa.DateTime, nullable=False),
        *[sa.Column(name, sa.String(length), nullable=False, server_default="")
          for name, length in _RESULT_TEXTS_0001],
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("details", sa.Text, nullable=False, server_default="{}"),
    ]


def metrics_0001() -> list[sa.Column]:
    """0001: a result's numbers in long format (a new kind of number is a new `name`)."""
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("result_id", sa.Integer, sa.ForeignKey("results.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.String(60), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False, server_default=""),
        sa.Column("value", sa.Float, nullable=False),
    ]


INDEXES_0001 = (IndexSpec("ix_metrics_result", "metrics", ("result_id",)),)


def metrics_0002() -> list[sa.Column]:
    """0002: each metric's band and verdict."""
    return [sa.Column("golden", sa.Float, nullable=True),
            sa.Column("low", sa.Float, nullable=True),
            sa.Column("high", sa.Float, nullable=True),
            sa.Column("verdict", sa.String(20), nullable=True)]


INDEXES_0002 = (IndexSpec("ix_metrics_name", "metrics", ("name", "subject")),
                IndexSpec("ix_results_finished_at", "results", ("finished_at",)),
                IndexSpec("ix_results_profile", "results", ("profile", "finished_at")))


def confirmations_0003() -> list[sa.Column]:
    """0003: a change point's two builds measured again, interleaved."""
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("series_key", sa.String(64), nullable=False),
        sa.Column("series", sa.Text, nullable=False),
        sa.Column("good", sa.String(300), nullable=False),
        sa.Column("bad", sa.String(300), nullable=False),
        sa.Column("good_values", sa.Text, nullable=False),
        sa.Column("bad_values", sa.Text, nullable=False),
        sa.Column("holds", sa.Boolean, nullable=False),
        sa.Column("confirmed_at", sa.DateTime, nullable=False),
        sa.Column("machine", sa.String(200), nullable=False, server_default=""),
        sa.Column("out_dir", sa.Text, nullable=False, server_default=""),
        sa.Column("details", sa.Text, nullable=False, server_default="{}"),
    ]


INDEXES_0003 = (IndexSpec("ix_confirmations_series", "confirmations",
                          ("series_key", "good", "bad")),)


def results_0004() -> list[sa.Column]:
    """0004: each result's environment, one JSON object; NULL where none was recorded."""
    return [sa.Column("environment", sa.Text, nullable=True)]


def indexes_of(table: str, *revisions: tuple[IndexSpec, ...]) -> list[sa.Index]:
    """The `revisions`' indexes on `table`, as schema.py declares them in its table."""
    return [sa.Index(spec.name, *spec.columns)
            for specs in revisions for spec in specs if spec.table == table]


def create_indexes(op: Any, specs: tuple[IndexSpec, ...]) -> None:
    for spec in specs:
        op.create_index(spec.name, spec.table, list(spec.columns))


def drop_indexes(op: Any, specs: tuple[IndexSpec, ...]) -> None:
    for spec in reversed(specs):
        op.drop_index(spec.name, spec.table)


def add_columns(op: Any, table: str, columns: list[sa.Column]) -> None:
    """Columns added to an existing table: in a batch, which SQLite needs (it copies the
    table) and PostgreSQL runs as plain ALTERs."""
    with op.batch_alter_table(table) as batch:
        for column in columns:
            batch.add_column(column)


def drop_columns(op: Any, table: str, columns: list[sa.Column]) -> None:
    with op.batch_alter_table(table) as batch:
        for column in reversed(columns):
            batch.drop_column(column.name)
