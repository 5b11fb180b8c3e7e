"""Which store a command records into, and how its URL may be shown.

`--results URL`, else `$RUNNER_RESULTS_URL`, else an SQLite file under `$RUNNER_CACHE_DIR`.
A URL is SQLAlchemy's (`sqlite:////abs/path.sqlite`, `postgresql://user:pw@host:5432/db`);
a plain path means an SQLite file there. PostgreSQL goes through psycopg 3 whatever the URL
names. The password a lab's URL carries never reaches a message, a file or a report:
everything outside this module sees `shown()`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.paths import cache_dir
from runner.config.sources import redact_url

ENV = "RUNNER_RESULTS_URL"
DEFAULT_FILE = ("history", "results.sqlite")
SQLITE, POSTGRES = "sqlite", "postgresql"
_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2")
STORE_URL_FIX = ("pass --results sqlite:////abs/path.sqlite, a file path, or "
                 "postgresql://USER:PASSWORD@HOST:PORT/DB (or set $RUNNER_RESULTS_URL)")


@dataclass(frozen=True)
class StoreURL:
    """A store's address: `url` to connect with (secrets included), `kind` sqlite or
    postgresql, `path` the SQLite file."""

    url: str
    kind: str
    path: Path | None = None

    def shown(self) -> str:
        """The URL fit for a message or a file: user and password replaced by REDACTED."""
        return str(self.path) if self.path is not None else redact_url(self.url)


def default_url() -> str:
    return str(cache_dir().joinpath(*DEFAULT_FILE))


def resolve(given: str | None = None) -> StoreURL:
    """The store `--results` (or the environment, or the default) names."""
    text = (given or os.environ.get(ENV) or "").strip() or default_url()
    where = "--results" if given else (f"${ENV}" if os.environ.get(ENV) else "the default")
    scheme, sep, rest = text.partition("://")
    if not sep:  # a path
        if "\n" in text or "\0" in text:
            raise BadInput("not a results store path or URL", where=where, fix=STORE_URL_FIX)
        path = Path(os.path.abspath(Path(text).expanduser()))
        return StoreURL(f"sqlite:///{path}", SQLITE, path)
    scheme = scheme.lower()
    if scheme == "sqlite":
        path_text = rest[1:] if rest.startswith("/") else rest
        if not path_text or path_text.startswith(":memory:"):
            raise BadInput("an SQLite store must be a file (an in-memory one is gone when "
                           "the command ends)", where=where, fix=STORE_URL_FIX)
        path = Path(os.path.abspath(Path(path_text.split("?", 1)[0]).expanduser()))
        return StoreURL(f"sqlite:///{path}", SQLITE, path)
    if scheme in _POSTGRES_SCHEMES:
        return StoreURL(f"postgresql+psycopg://{rest}", POSTGRES)
    raise BadInput(f"the results store `{redact_url(text)}` is neither SQLite nor "
                   "PostgreSQL", where=where, fix=STORE_URL_FIX)
