"""Alembic's scripts for the results store's schema (runner/history/schema.py)."""

# env.py runs inside Alembic only; the revisions are loaded by path.
__all__ = ["versions"]
