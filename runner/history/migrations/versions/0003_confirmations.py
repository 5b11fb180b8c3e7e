"""Confirmations: a change point's last good and first bad builds measured again,
interleaved on one machine (`runner history confirm`), so `runner history` tells a
confirmed regression from one the history alone suggests. Frozen here as it was made, not
imported from schema.py, which moves on.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "confirmations",
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
    )
    op.create_index("ix_confirmations_series", "confirmations", ["series_key", "good", "bad"])


def downgrade() -> None:
    op.drop_index("ix_confirmations_series", "confirmations")
    op.drop_table("confirmations")
