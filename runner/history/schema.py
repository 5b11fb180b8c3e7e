"""The store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

Three tables: `results`, one row per finished command (its `environment`, the driver,
firmware and modules it measured with, is one JSON column: runner/history/environment.py);
`metrics`, its numbers in long format (a new kind of number is a new `name`, not a new
column); and `confirmations`, a change point's two builds measured again interleaved
(`runner history confirm`). The schema's history is `migrations/versions/`, applied by
Alembic when a store is opened (runner/history/store.py); HEAD names the newest revision,
so opening a store already at HEAD costs one SELECT and no Alembic import
(tests/test_history_store.py checks HEAD against Alembic's own head).
"""

from __future__ import annotations

import sqlalchemy as sa

HEAD = "0004"
VERSION_TABLE = "alembic_version"

metadata = sa.MetaData()

results = sa.Table(
    "results", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(64), nullable=False, unique=True),
    sa.Column("command", sa.String(40), nullable=False),
    sa.Column("out_dir", sa.Text, nullable=False),
    sa.Column("finished_at", sa.DateTime, nullable=False),
    sa.Column("recorded_at", sa.DateTime, nullable=False),
    sa.Column("profile", sa.String(200), nullable=False, server_default=""),
    sa.Column("model", sa.String(200), nullable=False, server_default=""),
    sa.Column("layout", sa.String(200), nullable=False, server_default=""),
    sa.Column("machine", sa.String(200), nullable=False, server_default=""),
    sa.Column("device", sa.String(200), nullable=False, server_default=""),
    sa.Column("sku", sa.String(100), nullable=False, server_default=""),
    sa.Column("compiler_version", sa.String(100), nullable=False, server_default=""),
    sa.Column("compiler_commit", sa.String(64), nullable=False, server_default=""),
    sa.Column("runtime_version", sa.String(100), nullable=False, server_default=""),
    sa.Column("runtime_commit", sa.String(64), nullable=False, server_default=""),
    sa.Column("build", sa.String(300), nullable=False, server_default=""),
    sa.Column("runner_version", sa.String(50), nullable=False, server_default=""),
    sa.Column("runner_commit", sa.String(64), nullable=False, server_default=""),
    sa.Column("verdict", sa.String(40), nullable=False, server_default=""),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("details", sa.Text, nullable=False, server_default="{}"),
    sa.Column("environment", sa.Text, nullable=True),  # JSON; NULL: none was recorded
    sa.Index("ix_results_finished_at", "finished_at"),
    sa.Index("ix_results_profile", "profile", "finished_at"),
)

metrics = sa.Table(
    "metrics", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("result_id", sa.Integer, sa.ForeignKey("results.id", ondelete="CASCADE"),
              nullable=False),
    sa.Column("name", sa.String(60), nullable=False),
    sa.Column("subject", sa.String(300), nullable=False, server_default=""),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("golden", sa.Float, nullable=True),
    sa.Column("low", sa.Float, nullable=True),
    sa.Column("high", sa.Float, nullable=True),
    sa.Column("verdict", sa.String(20), nullable=True),
    sa.Index("ix_metrics_result", "result_id"),
    sa.Index("ix_metrics_name", "name", "subject"),
)

confirmations = sa.Table(
    "confirmations", metadata,
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
    sa.Index("ix_confirmations_series", "series_key", "good", "bad"),
)
