"""Every result kept: one store of what `run`, `bench`, `mlperf`, `validate`, `goldens check`
and `bench goldens` measured, and what can be read from it (a history, its regressions,
goldens proposed from evidence).

The data flow: a finished command's out dir -> `extract` (one reading of what the command
wrote, used at the end of a command and by `runner history import`) -> `store` (SQLite by
default, PostgreSQL for a lab; schema migrations in `migrations/`) -> `query` -> `changes`
(change points per series) and `propose` (goldens) -> `render` (JSON, Markdown, HTML).
"""
