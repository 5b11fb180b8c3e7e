"""The first store: results and their metrics (values only).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "results",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(64), nullable=False, unique=True),
        sa.Column("command", sa.String(40), nullable=False),
        sa.Column("out_dir", sa.Text, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=False),
        sa.Column("recorded_at", sa.DateTime, nullable=False),
        *[sa.Column(name, sa.String(length), nullable=False, server_default="")
          for name, length in (("profile", 200), ("model", 200), ("layout", 200),
                               ("machine", 200), ("device", 200), ("sku", 100),
                               ("compiler_version", 100), ("compiler_commit", 64),
                               ("runtime_version", 100), ("runtime_commit", 64),
                               ("build", 300), ("runner_version", 50), ("runner_commit", 64),
                               ("verdict", 40))],
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("details", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("result_id", sa.Integer, sa.ForeignKey("results.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.String(60), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False, server_default=""),
        sa.Column("value", sa.Float, nullable=False),
    )
    op.create_index("ix_metrics_result", "metrics", ["result_id"])


def downgrade() -> None:
    op.drop_table("metrics")
    op.drop_table("results")
