"""Alembic's scripts for the results store's schema (runner/history/schema.py)."""
