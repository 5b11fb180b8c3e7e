"""The artifact cache: where a reference (local path, `file://` or https URL) lives on disk.

URLs are cached under `$RUNNER_CACHE_DIR/downloads/<hash of the URL>/<name>`, next to a
`<name>.meta.json` sidecar holding what the server said about the blob (ETag, Content-MD5,
Last-Modified, size). `fetch` downloads atomically (a `.part` file renamed into place),
resumes a partial download with an HTTP Range request, checks the MD5 the server
advertises (Azure's base64 `Content-MD5`), and, when online, revalidates a cached copy with
one HEAD per URL and process, so a blob replaced on the server is fetched again. Offline
(`RUNNER_OFFLINE=1`), nothing touches the network and a missing blob is a clear error.

`local_source` never downloads: the pipeline's run path must not reach the network behind
the user's back; the goldens commands call `fetch`/`resolve` on purpose.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlparse, urlunparse

from runner.base.errors import BadInput, RunnerError, ServiceUnreachable, StepFailed
from runner.base.fileio import atomic_write_json
from runner.base.paths import BUILTIN, builtin_path, cache_dir

OFFLINE_ENV = "RUNNER_OFFLINE"
# Azure SAS query parameters: secrets (`sig`) and the grant around them. They are dropped
# from cache keys (a new token is the same blob) and redacted from everything printed.
SAS_PARAMS = frozenset({"sig", "se", "st", "sp", "sv", "sr", "spr", "srt", "ss", "si",
                        "skoid", "sktid", "skt", "ske", "sks", "skv", "saoid", "suoid",
                        "scid", "sdd", "ses", "rscc", "rscd", "rsce", "rscl", "rsct"})
CHUNK = 1 << 20
DOWNLOAD_TIMEOUT_S = 60.0
_revalidated: set[str] = set()  # cache keys HEAD-checked by this process


def offline(flag: bool | None = None) -> bool:
    """`flag` (from `--offline`) wins; else `RUNNER_OFFLINE` set to anything but 0/false."""
    if flag is not None:
        return flag
    return os.environ.get(OFFLINE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def is_url(ref: str) -> bool:
    return urlparse(ref).scheme in ("http", "https")


def redact_url(url: str) -> str:
    """The URL fit for a log: SAS values and any user:password replaced by `REDACTED`."""
    parts = urlparse(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "REDACTED@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "REDACTED" if _secret(k) else v) for k, v in pairs], safe="")
    return urlunparse(parts._replace(netloc=netloc, query=query))


def _secret(key: str) -> bool:
    key = key.lower()
    return (key in SAS_PARAMS or "sig" in key or "token" in key or "key" in key
            or "pass" in key)  # a database URL's ?password=


_SIG_RE = re.compile(r"(?i)\b(sig|signature)=[^&\s\"']+")
# Any URL in a message: scheme://, then everything up to a space or a quote.
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]+")


def redact_text(text: str, url: str | None = None) -> str:
    """`text` (an error message, a tool's stderr) without the secrets of `url` in any
    spelling, nor any `sig=...` at all."""
    if url:
        parts = urlparse(url)
        if parts.query:
            text = text.replace(parts.query, urlparse(redact_url(url)).query)
            for key, value in parse_qsl(parts.query, keep_blank_values=True):
                if _secret(key) and len(value) >= 4:
                    for form in {value, quote(value, safe=""), quote_plus(value)}:
                        text = text.replace(form, "REDACTED")
        if "@" in parts.netloc:
            text = text.replace(parts.netloc.rsplit("@", 1)[0], "REDACTED")
    return redact_secrets(text)


def redact_secrets(text: str) -> str:
    """Every URL in `text` (an error message, any scheme) with its user:password and secret
    query values (SAS `sig`, tokens, keys) replaced by REDACTED, and any `sig=...` left.
    The CLI passes every message it prints through this, error paths included."""
    def one(m: re.Match[str]) -> str:
        url = m.group(0)
        trail = ""
        while url and url[-1] in ".,;:)]}":  # sentence punctuation after a URL
            url, trail = url[:-1], url[-1] + trail
        try:
            return redact_url(url) + trail
        except ValueError:  # not parseable as a URL (a bad port, brackets): hide all of it
            return "<URL REDACTED>" + trail
    return _SIG_RE.sub(lambda m: f"{m.group(1)}=REDACTED", _URL_RE.sub(one, text))


def cache_key(url: str) -> str:
    """The blob's identity: the URL without SAS parameters, user info or fragment."""
    parts = urlparse(url)
    pairs = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k.lower() not in SAS_PARAMS]
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunparse(parts._replace(netloc=netloc, query=urlencode(pairs), fragment=""))


def forget_revalidations() -> None:
    """Makes the next `fetch` of each URL ask the server again (long-lived processes)."""
    _revalidated.clear()


def download_path(url: str) -> Path:
    """The cache location of a URL: a hash directory keeps same-named blobs apart."""
    key = cache_key(url)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    name = Path(unquote(urlparse(key).path)).name or "blob"
    return cache_dir() / "downloads" / digest / name


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


@dataclass(frozen=True)
class RemoteInfo:
    """What the server says about a blob; any field may be missing."""

    size: int | None = None
    etag: str | None = None
    content_md5: str | None = None  # base64, as Azure sends it
    last_modified: str | None = None
    accept_ranges: bool = False

    @classmethod
    def from_headers(cls, headers, *, whole: bool = True) -> RemoteInfo:
        """`whole=False` for a 206: its Content-Length and Content-MD5 cover only the range."""
        size = None
        content_range = headers.get("Content-Range")
        if content_range and "/" in content_range:
            total = content_range.rsplit("/", 1)[1].strip()
            size = int(total) if total.isdigit() else None
        elif whole and headers.get("Content-Length", "").isdigit():
            size = int(headers["Content-Length"])
        md5 = headers.get("x-ms-blob-content-md5") or (headers.get("Content-MD5")
                                                        if whole else None)
        return cls(size=size, etag=headers.get("ETag"), content_md5=md5,
                   last_modified=headers.get("Last-Modified"),
                   accept_ranges="bytes" in headers.get("Accept-Ranges", "").lower())

    def same_blob(self, other: RemoteInfo) -> bool:
        """Strongest validator both sides have: ETag, then MD5, then date and size."""
        if self.etag and other.etag:
            return self.etag == other.etag
        if self.content_md5 and other.content_md5:
            return self.content_md5 == other.content_md5
        if self.last_modified and other.last_modified:
            return self.last_modified == other.last_modified and self.size == other.size
        return self.size is None or other.size is None or self.size == other.size


@dataclass(frozen=True)
class CachedBlob:
    path: Path
    remote: RemoteInfo
    md5: str  # hex md5 of the cached bytes
    url: str  # redacted


def _read_meta(path: Path) -> CachedBlob | None:
    try:
        raw = json.loads(meta_path(path).read_text())
        return CachedBlob(path, RemoteInfo(**raw["remote"]), raw["md5"], raw["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _request(url: str, method: str = "GET", headers: dict[str, str] | None = None):
    req = urllib.request.Request(url, method=method, headers={
        "User-Agent": "iree-sdxl-runner", "x-ms-version": "2021-08-06", **(headers or {})})
    return urllib.request.urlopen(req, timeout=DOWNLOAD_TIMEOUT_S)


def head(url: str) -> RemoteInfo | None:
    """The blob's validators, or None when the server does not answer HEAD."""
    try:
        with _request(url, "HEAD") as resp:
            return RemoteInfo.from_headers(resp.headers)
    except urllib.error.HTTPError as e:
        if e.code in (405, 501):
            return None
        if e.code == 404:
            raise ServiceUnreachable(f"{redact_url(url)}: not found on the server (HTTP 404)",
                                     fix="check the URL; a golden that was never uploaded reads "
                                     "this way") from e
        raise ServiceUnreachable(f"{redact_url(url)}: HTTP {e.code} {e.reason}",
                                 fix="check the URL and your access to it") from e


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One downloader per blob across processes (workers share the cache)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch(url: str, *, where: str | None = None, offline_mode: bool | None = None,
          revalidate: bool = True, attempts: int = 3, quiet: bool = False) -> Path:
    """The cached copy of `url`, downloaded or refreshed as needed (see the module doc)."""
    path = download_path(url)
    shown = redact_url(url)
    if offline(offline_mode):
        if path.is_file():
            return path
        raise BadInput(f"{shown} is not in the download cache and the runner is offline",
                       where=where, fix=f"fetch it on a connected machine (it goes to "
                       f"{path}), or unset {OFFLINE_ENV} / drop --offline")
    key = cache_key(url)
    if path.is_file() and (not revalidate or key in _revalidated):
        return path
    with _locked(path.parent):
        cached = _read_meta(path) if path.is_file() else None
        try:
            remote = head(url)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            if cached is not None:
                print(f"warning: cannot revalidate {shown} ({e}); using the cached copy",
                      file=sys.stderr)
                return path
            raise ServiceUnreachable(f"cannot reach {shown}: {e}", where=where,
                                     fix=f"check the network, or set {OFFLINE_ENV}=1 to use only "
                                     "cached artifacts") from e
        if cached is not None and (remote is None or cached.remote.same_blob(remote)):
            _revalidated.add(key)
            return path
        if cached is None and path.is_file() and remote is not None and remote.content_md5:
            md5 = _md5_file(path)  # placed by hand: keep it if it is the server's blob
            if base64.b64encode(bytes.fromhex(md5)).decode() == remote.content_md5:
                _write_meta(path, url, md5, remote)
                _revalidated.add(key)
                return path
        if cached is not None and not quiet:
            print(f"{shown} changed on the server; fetching it again", file=sys.stderr)
        _download(url, path, remote, attempts=attempts, where=where, quiet=quiet)
        _revalidated.add(key)
        return path


def _part_matches(part: Path, remote: RemoteInfo | None) -> bool:
    """A partial file may be resumed only if it belongs to the blob the server has now."""
    if not part.is_file() or remote is None or not remote.accept_ranges:
        return False
    try:
        started = RemoteInfo(**json.loads(meta_path(part).read_text()))
    except (OSError, ValueError, TypeError):
        return False
    return started.same_blob(remote) and (remote.size is None or part.stat().st_size
                                          <= remote.size)


def _download(url: str, path: Path, remote: RemoteInfo | None, *, attempts: int,
              where: str | None, quiet: bool) -> None:
    shown = redact_url(url)
    part = path.with_name(path.name + ".part")
    last_error: Exception | None = None
    for attempt in range(1, attempts + 1):
        if not _part_matches(part, remote):
            part.unlink(missing_ok=True)
        if remote is not None:
            atomic_write_json(meta_path(part), asdict(remote))
        offset = part.stat().st_size if part.is_file() else 0
        headers = {}
        if offset:
            headers["Range"] = f"bytes={offset}-"
            if remote is not None and remote.etag:
                headers["If-Range"] = remote.etag
        try:
            remote = _get_into(url, part, offset, headers, remote, quiet)
            break
        except RunnerError:
            raise
        except (urllib.error.URLError, OSError, http.client.HTTPException, _ShortRead) as e:
            last_error = e
            got = part.stat().st_size if part.is_file() else 0
            if not quiet:
                print(f"download of {shown} interrupted at {got} bytes "
                      f"(attempt {attempt}/{attempts}): {redact_text(str(e), url)}",
                      file=sys.stderr)
            if attempt < attempts:
                time.sleep(min(0.5 * attempt, 2.0))
    else:
        got = part.stat().st_size if part.is_file() else 0
        raise ServiceUnreachable(f"download of {shown} failed after {attempts} attempts "
                                 f"({got} bytes kept): {redact_text(str(last_error), url)}",
                                 where=where, fix="run the command again: it resumes from the "
                                 "partial file")
    md5 = _md5_file(part)
    expected = remote.content_md5 if remote else None
    if expected:
        got_b64 = base64.b64encode(bytes.fromhex(md5)).decode()
        if got_b64 != expected:
            part.unlink(missing_ok=True)
            meta_path(part).unlink(missing_ok=True)
            raise StepFailed(f"{shown}: MD5 mismatch (server says {expected}, the "
                             f"download is {got_b64}); the download was discarded",
                             where=where, fix="run it again; if it persists the blob on "
                             "the server is corrupt or was replaced mid-download")
    os.replace(part, path)
    meta_path(part).unlink(missing_ok=True)
    _write_meta(path, url, md5, remote)


def _write_meta(path: Path, url: str, md5: str, remote: RemoteInfo | None) -> None:
    atomic_write_json(meta_path(path), {"url": redact_url(url), "md5": md5,
                                        "remote": asdict(remote or RemoteInfo()),
                                        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})


class _ShortRead(Exception):
    pass


def _get_into(url: str, part: Path, offset: int, headers: dict[str, str],
              remote: RemoteInfo | None, quiet: bool) -> RemoteInfo:
    """One GET into `part` (appending after a 206); returns the blob's info."""
    try:
        resp = _request(url, "GET", headers)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:  # the partial file is not a prefix of this blob
            part.unlink(missing_ok=True)
            raise _ShortRead("server refused the range; restarting") from e
        raise ServiceUnreachable(f"{redact_url(url)}: HTTP {e.code} {e.reason}",
                                 fix="check the URL and your access to it") from e
    with resp:
        if resp.status == 206:
            mode = "ab"
            info = RemoteInfo.from_headers(resp.headers, whole=False)
            info = RemoteInfo(info.size, info.etag or (remote.etag if remote else None),
                              info.content_md5 or (remote.content_md5 if remote else None),
                              info.last_modified, True)
            expect = (info.size - offset) if info.size is not None else None
        else:  # 200: the whole blob, from the start
            mode, offset = "wb", 0
            info = RemoteInfo.from_headers(resp.headers)
            same = remote is not None and remote.same_blob(info)
            info = RemoteInfo(info.size, info.etag,
                              info.content_md5 or (remote.content_md5 if remote and same
                                                   else None),
                              info.last_modified,
                              info.accept_ranges or bool(remote and remote.accept_ranges))
            expect = info.size
        got = 0
        with open(part, mode) as f:
            while block := resp.read(CHUNK):
                f.write(block)
                got += len(block)
        if expect is not None and got < expect:
            raise _ShortRead(f"connection closed after {offset + got} of "
                             f"{offset + expect} bytes")
    if not quiet and (info.size or 0) > 64 * CHUNK:
        print(f"fetched {redact_url(url)} ({info.size} bytes)", file=sys.stderr)
    return info


def _md5_file(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def resolve_source(ref: str, *, base_dir: Path | None = None, where: str | None = None,
                   download: bool = True, offline_mode: bool | None = None,
                   must_exist: bool = True) -> Path:
    """Any reference to a local path: URLs fetched through the cache (or, with
    `download=False`, their cache path), `file://` URLs, `builtin:` files the runner ships,
    and paths relative to `base_dir` (a test file's directory)."""
    parts = urlparse(ref)
    if ref.startswith(BUILTIN):
        path = builtin_path(ref)
    elif parts.scheme in ("http", "https"):
        if download:
            return fetch(ref, where=where, offline_mode=offline_mode)
        path = download_path(ref)
    elif parts.scheme == "file":
        path = Path(unquote(parts.path))
    else:
        path = Path(ref).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(os.path.abspath(base_dir / path))  # no `..` in printed commands
    if must_exist and not path.is_file():
        raise BadInput(f"file not found: {path}", where=where,
                       fix="fix the reference, or fetch the artifact first")
    return path


def local_source(ref: str, where: str, must_exist: bool = True) -> Path:
    """`must_exist=False` is for dry runs, which print where a file would be read from."""
    if ref.startswith("file://"):
        path = Path(unquote(urlparse(ref).path))
    elif "://" in ref:
        path = download_path(ref)
        if must_exist and not path.is_file():
            raise BadInput(f"{redact_url(ref)} is not in the download cache", where=where,
                           fix=f"fetch it (`python -m runner.config.sources URL`; it goes to "
                           f"{path}), or point the field at a local file")
        return path
    else:
        path = Path(ref).expanduser()
    if must_exist and not path.is_file():
        raise BadInput(f"file not found: {path}", where=where,
                       fix="fix the path, or run `runner export tiny` for the tiny model")
    return path


def main(argv: list[str] | None = None) -> int:
    """`python -m runner.config.sources URL...`: fetch into the cache and print the local paths."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m runner.config.sources", allow_abbrev=False,
                                     description=main.__doc__)
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--offline", action="store_true", default=None)
    args = parser.parse_args(argv)
    try:
        for url in args.urls:
            print(resolve_source(url, offline_mode=args.offline))
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
