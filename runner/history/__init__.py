"""Every result kept: one store of what `run`, `bench`, `mlperf`, `validate`, `goldens check`
and `bench goldens` measured, and what can be read from it (a history, its regressions,
goldens proposed from evidence).

The data flow: a finished command's out dir -> `extract` (one reading of what the command
wrote, used at the end of a command and by `runner history import`) -> `store` (SQLite by
default, PostgreSQL for a lab; schema migrations in `migrations/`) -> `query` -> `changes`
(change points per series) and `propose` (goldens) -> `render` (JSON, Markdown, HTML).
"""

from runner.base.lazy import lazy_exports

# The entry points, each imported from its module when first used.
_ENTRIES = {"open_store": "store", "Query": "store", "resolve": "url"}
__getattr__ = lazy_exports(__name__, _ENTRIES)

__all__ = ["Query", "changes", "cli", "extract", "migrations", "model", "open_store", "propose",
           "record", "render", "resolve", "schema", "series", "store", "url"]
