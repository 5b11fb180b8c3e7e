"""One file per schema revision, oldest first; each says what it adds and why."""

# Alembic loads each revision by its path (runner/history/store.py); none is
# imported by name, and their names are no identifiers.
__all__: list[str] = []
