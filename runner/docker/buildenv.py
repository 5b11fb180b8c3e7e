"""What a build's RUN steps need from the host to reach a package index: the CA bundle, the
pip index settings, and the proxies.

Lab networks (and this machine) intercept TLS with their own CA and often point pip at a
mirror, so a container that knows only the base image's CA bundle and PyPI cannot install
anything. These settings may carry credentials (an index URL with a token), so they go into
the build context's `runner-build/secrets/`, which only build stages read (see
dockerfiles/fragments/python-base.Dockerfile), never into build args or the image hash, and
URLs are shown with their userinfo masked.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Files a host may keep its CA bundle in, after the variables that name one explicitly.
CA_ENV = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
CA_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
            "/etc/ssl/cert.pem")
# Docker's predefined build args: usable without an ARG line and kept out of `docker history`.
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY",
              "http_proxy", "https_proxy", "ftp_proxy", "no_proxy", "all_proxy")
# pip settings that describe where packages come from; everything else is the host's taste.
_INDEX_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "proxy",
               "timeout", "retries")
_URL_KEYS = ("index-url", "extra-index-url", "find-links")
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def mask(text: str) -> str:
    """URLs with any `user:token@` replaced by `***@`, for logs and errors."""
    return _USERINFO.sub("***@", text)


@dataclass(frozen=True)
class BuildNetwork:
    """The host's network settings, ready to be written into a build context."""

    ca_bundle: Path
    pip_conf: str
    proxies: dict[str, str]
    notes: tuple[str, ...]

    def write(self, secrets_dir: Path) -> None:
        secrets_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(secrets_dir, 0o700)
        for name, data in (("ca-bundle.crt", self.ca_bundle.read_bytes()),
                           ("pip.conf", self.pip_conf.encode())):
            target = secrets_dir / name
            target.write_bytes(data)
            os.chmod(target, 0o600)


def host_build_network() -> BuildNetwork:
    notes: list[str] = []
    settings = _pip_settings()
    lines = ["[global]"]
    for key in _INDEX_KEYS:
        value = settings.get(key)
        if not value:
            continue
        if key in _URL_KEYS:
            kept: list[str] = []
            dropped: list[str] = []
            for item in value.split():
                (kept if re.match(r"https?://", item) else dropped).append(item)
            for item in dropped:
                notes.append(f"pip {key} {mask(item)} is a local path or file:// URL, not "
                             "reachable from a container: left out")
            value = " ".join(kept)
            if not value:
                continue
        lines.append(f"{key} = {value}")
        notes.append(f"pip {key} = {mask(value)} passed to the build")
    for key in ("constraint", "client-cert"):
        if settings.get(key):
            notes.append(f"pip {key} is a host file: left out of the build")
    proxies = {k: os.environ[k] for k in PROXY_VARS if os.environ.get(k)}
    if proxies:
        notes.append(f"proxies passed as build args: {', '.join(sorted(proxies))}")
    return BuildNetwork(_ca_bundle(settings.get("cert")), "\n".join(lines) + "\n", proxies,
                        tuple(notes))


def _ca_bundle(pip_cert: str | None) -> Path:
    candidates = [os.environ.get(v) for v in CA_ENV[:1]]
    candidates += [pip_cert]
    candidates += [os.environ.get(v) for v in CA_ENV[1:]]
    candidates += list(CA_FILES)
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    # No system bundle: pip's own (certifi) is what pip on this host would use too.
    from pip._vendor import certifi  # pip is always there: this runs under it

    return Path(certifi.where())


def _pip_settings() -> dict[str, str]:
    """The effective global/install settings, as `pip config list` reports them.

    pip itself is asked so that every source it reads (the global, user and site files,
    PIP_CONFIG_FILE and PIP_* variables) is honoured in its own precedence; later lines win.
    """
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                          capture_output=True, text=True, check=False)
    settings: dict[str, str] = {}
    if proc.returncode != 0:
        return settings
    for line in proc.stdout.splitlines():
        name, eq, raw = line.partition("=")
        section, _, key = name.rpartition(".")
        if not eq or section not in ("global", "install", ":env:"):
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw.strip("'\"")
        settings[key] = str(value)
    return settings
