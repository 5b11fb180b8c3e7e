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


# Alike in shape to 0002_bands.py, which also adds columns: each migration is Alembic's
# layout (its ids, upgrade, downgrade) around this revision's own entries in
# runner.history.revisions, where every column is declared once. A released migration is
# frozen history and is not merged with another.
def upgrade() -> None:
    revisions.add_columns(op, "results", revisions.results_0004())


def downgrade() -> None:
    revisions.drop_columns(op, "results", revisions.results_0004())
