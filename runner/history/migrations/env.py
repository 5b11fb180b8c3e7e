"""Alembic's environment: migrations run on the connection the store hands over
(`config.attributes["connection"]`), inside the transaction the store holds (with its lock),
so two runners opening one new store never both create it."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True,
                  transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()
