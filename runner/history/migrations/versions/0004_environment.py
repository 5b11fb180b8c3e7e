"""Each result's environment (runner.history.environment): GPU driver, ROCm and CUDA
releases, VBIOS, partition modes, kernel, runner, the compiled modules' hashes, as one JSON
object; NULL for a result recorded before it was kept.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

from runner.history import revisions

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    revisions.add_columns(op, "results", revisions.results_0004())


def downgrade() -> None:
    revisions.drop_columns(op, "results", revisions.results_0004())
