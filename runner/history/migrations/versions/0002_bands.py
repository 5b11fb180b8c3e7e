"""Each metric's band and verdict (what it was judged against: a golden x its tolerance,
MLPerf's range), drawn on the history's charts and read by `goldens propose`; and the
indexes that keep a history query over many thousand results under a second.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.add_column(sa.Column("golden", sa.Float, nullable=True))
        batch.add_column(sa.Column("low", sa.Float, nullable=True))
        batch.add_column(sa.Column("high", sa.Float, nullable=True))
        batch.add_column(sa.Column("verdict", sa.String(20), nullable=True))
    op.create_index("ix_metrics_name", "metrics", ["name", "subject"])
    op.create_index("ix_results_finished_at", "results", ["finished_at"])
    op.create_index("ix_results_profile", "results", ["profile", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_results_profile", "results")
    op.drop_index("ix_results_finished_at", "results")
    op.drop_index("ix_metrics_name", "metrics")
    with op.batch_alter_table("metrics") as batch:
        for name in ("verdict", "high", "low", "golden"):
            batch.drop_column(name)
