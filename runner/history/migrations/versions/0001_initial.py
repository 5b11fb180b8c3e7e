"""The first store: results and their metrics (values only).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

from runner.history import revisions

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table("results", *revisions.results_0001())
    op.create_table("metrics", *revisions.metrics_0001())
    revisions.create_indexes(op, revisions.INDEXES_0001)


def downgrade() -> None:
    op.drop_table("metrics")
    op.drop_table("results")
