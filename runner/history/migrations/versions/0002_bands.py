"""Each metric's band and verdict (what it was judged against: a golden x its tolerance,
MLPerf's range), drawn on the history's charts and read by `goldens propose`; and the
indexes that keep a history query over many thousand results under a second.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

from runner.history import revisions

revision = "0002"
down_revision = "0001"


# Alike in shape to 0004_environment.py, which also adds columns: each migration is Alembic's
# layout (its ids, upgrade, downgrade) around this revision's own entries in
# runner.history.revisions, where every column is declared once. A released migration is
# frozen history and is not merged with another.
def upgrade() -> None:
    revisions.add_columns(op, "metrics", revisions.metrics_0002())
    revisions.create_indexes(op, revisions.INDEXES_0002)


def downgrade() -> None:
    revisions.drop_indexes(op, revisions.INDEXES_0002)
    revisions.drop_columns(op, "metrics", revisions.metrics_0002())
