"""The store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

Three tables: `results`, one row per finished command (its `environment`, the driver,
firmware and modules it measured with, is one JSON column: runner/history/environment.py);
`metrics`, its numbers in long format (a new kind of number is a new `name`, not a new
column); and `confirmations`, a change point's two builds measured again interleaved
(`runner history confirm`). Each table is composed from what each revision added to it
(runner/history/revisions.py), in order: the same declarations the migrations in
`migrations/versions/` apply, by Alembic, when a store is opened (runner/history/store.py),
so a column is declared once. HEAD names the newest revision, so opening a store already
at HEAD costs one SELECT and no Alembic import (tests/test_history_store.py checks HEAD
against Alembic's own head, and the tables the migrations make against these).
"""

from __future__ import annotations

import sqlalchemy as sa

from runner.history import revisions

HEAD = "0004"
VERSION_TABLE = "alembic_version"

metadata = sa.MetaData()

results = sa.Table(
    "results", metadata,
    *revisions.results_0001(), *revisions.results_0004(),
    *revisions.indexes_of("results", revisions.INDEXES_0002),
)

metrics = sa.Table(
    "metrics", metadata,
    *revisions.metrics_0001(), *revisions.metrics_0002(),
    *revisions.indexes_of("metrics", revisions.INDEXES_0001, revisions.INDEXES_0002),
)

confirmations = sa.Table(
    "confirmations", metadata,
    *revisions.confirmations_0003(),
    *revisions.indexes_of("confirmations", revisions.INDEXES_0003),
)
