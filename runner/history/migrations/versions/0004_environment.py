"""Each result's environment (runner.history.environment): GPU driver, ROCm and CUDA
releases, VBIOS, partition modes, kernel, runner, the compiled modules' hashes, as one JSON
object; NULL for a result recorded before it was kept.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("environment", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("environment")
