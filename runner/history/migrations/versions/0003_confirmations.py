"""Confirmations: a change point's last good and first bad builds measured again,
interleaved on one machine (`runner history confirm`), so `runner history` tells a
confirmed regression from one the history alone suggests. Its columns are
runner.history.revisions' `confirmations_0003`, frozen as this revision made them: schema.py
composes the current table from them and what later revisions add.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

from runner.history import revisions

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table("confirmations", *revisions.confirmations_0003())
    revisions.create_indexes(op, revisions.INDEXES_0003)


def downgrade() -> None:
    revisions.drop_indexes(op, revisions.INDEXES_0003)
    op.drop_table("confirmations")
