"""Where an artifact reference (local path, `file://` or https URL) lives on this disk.

URLs are looked up in the download cache under `$RUNNER_CACHE_DIR/downloads`, keyed by the
URL; nothing is fetched implicitly at run time, so an offline lab machine fails clearly.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import unquote, urlparse

from runner.errors import RunnerError
from runner.paths import cache_dir


def download_path(url: str) -> Path:
    """The cache location of a URL: a hash directory keeps same-named blobs apart."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    name = Path(urlparse(url).path).name or "blob"
    return cache_dir() / "downloads" / digest / name


def local_source(ref: str, where: str, must_exist: bool = True) -> Path:
    """`must_exist=False` is for dry runs, which print where a file would be read from."""
    if ref.startswith("file://"):
        path = Path(unquote(urlparse(ref).path))
    elif "://" in ref:
        path = download_path(ref)
        if must_exist and not path.is_file():
            raise RunnerError(f"{ref} is not in the download cache", where=where,
                              fix=f"download it to {path}, or point the field at a local file")
        return path
    else:
        path = Path(ref).expanduser()
    if must_exist and not path.is_file():
        raise RunnerError(f"file not found: {path}", where=where,
                          fix="fix the path, or run `runner export tiny` for the tiny model")
    return path
