"""`runner goldens upload`: put the new goldens in the Azure container, dry-run by default.

Each blob goes where its new `source` URL (from generate's `manifest.json`) points when
that URL is in the container; otherwise (relative sources, no manifest) under the
container URL's path, by file name. Uploads never overwrite an existing blob (a published
golden is immutable; pass `--overwrite` to replace one on purpose) and set Content-MD5, which
the download cache checks on every later fetch.

Credentials never appear in a command line or a log: the `azure-storage-blob` SDK (used
when importable) takes a SAS from the container URL, else `AZURE_STORAGE_CONNECTION_STRING`,
else `DefaultAzureCredential`; the `az` CLI fallback gets a SAS through its
`AZURE_STORAGE_SAS_TOKEN` environment variable, or uses the environment's own
`AZURE_STORAGE_*` settings, or `--auth-mode login` (`az login`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from runner.base.errors import BadInput, ServiceUnreachable, ToolFailed
from runner.config.sources import redact_text, redact_url
from runner.goldens.generate import GOLDENS_MANIFEST
from runner.inputs.jsonfile import read_json
from runner.inputs.paths import inside

ENV_CREDENTIALS = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY",
                   "AZURE_STORAGE_SAS_TOKEN")
REDACTED = "<redacted>"


@dataclass(frozen=True)
class Container:
    account: str
    name: str
    prefix: str  # blob path prefix inside the container, no leading/trailing slash
    sas: str | None
    url: str

    @classmethod
    def parse(cls, url: str) -> Container:
        parts = urlparse(url)
        host = parts.hostname or ""
        segments = [s for s in unquote(parts.path).split("/") if s]
        if parts.scheme != "https" or ".blob." not in host or not segments:
            raise BadInput(f"not an Azure container URL: {redact_url(url)}",
                           where="--container-url",
                           fix="use https://<account>.blob.core.windows.net/<container>"
                           "[/<path>][?<SAS>]")
        return cls(host.split(".")[0], segments[0], "/".join(segments[1:]),
                   parts.query or None, url)

    @property
    def base(self) -> str:
        return f"https://{self.account}.blob.core.windows.net/{self.name}"

    def blob_url(self, blob: str) -> str:
        return f"{self.base}/{blob}"


@dataclass(frozen=True)
class UploadItem:
    file: Path
    blob: str
    md5_b64: str


def _md5(path: Path) -> str:
    return base64.b64encode(hashlib.md5(path.read_bytes(), usedforsecurity=False).digest()
                            ).decode()


def plan_uploads(folder: Path, container: Container) -> list[UploadItem]:
    if not folder.is_dir():
        raise BadInput("not a directory", where=str(folder),
                       fix="pass the --out directory of `runner goldens generate`")
    manifest = folder / GOLDENS_MANIFEST
    items = []
    if manifest.is_file():
        goldens = read_json(manifest, what="goldens manifest").get("goldens")
        if not isinstance(goldens, list) or not all(
                isinstance(g, dict) and all(isinstance(g.get(k), str)
                                            for k in ("file", "md5_b64", "new_source"))
                for g in goldens):
            raise BadInput("`goldens` must list {file, md5_b64, new_source} entries",
                           where=f"{manifest}: goldens",
                           fix="run `runner goldens generate` again")
        for i, g in enumerate(goldens):
            path = inside(g["file"], folder, f"{manifest}: goldens[{i}].file",
                          absolute_ok=False)
            if not path.is_file():
                raise BadInput("a file the manifest lists is missing", where=str(path),
                               fix="run `runner goldens generate` into this directory again")
            md5 = _md5(path)
            if md5 != g["md5_b64"]:
                raise BadInput("file changed since generate wrote it (MD5 differs)",
                               where=str(path), fix="run `goldens generate` again")
            target = urlparse(g["new_source"])
            prefix = f"/{container.name}/"
            if (target.scheme == "https" and target.hostname
                    == f"{container.account}.blob.core.windows.net"
                    and target.path.startswith(prefix)):
                blob = unquote(target.path[len(prefix):])
            else:
                blob = "/".join(p for p in (container.prefix, path.name) if p)
            items.append(UploadItem(path, blob, md5))
    else:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            items.append(UploadItem(path, "/".join(p for p in (container.prefix, rel) if p),
                                    _md5(path)))
    if not items:
        raise BadInput("nothing to upload", where=str(folder),
                       fix="pass the --out of `runner goldens generate`")
    return items


def _az_auth(container: Container) -> tuple[list[str], dict[str, str], str]:
    """(extra az args, extra env, the env prefix to print) for the credentials at hand."""
    if container.sas:
        return [], {"AZURE_STORAGE_SAS_TOKEN": container.sas}, \
            f"AZURE_STORAGE_SAS_TOKEN={REDACTED} "
    if any(os.environ.get(k) for k in ENV_CREDENTIALS):
        return [], {}, ""
    return ["--auth-mode", "login"], {}, ""


def az_command(item: UploadItem, container: Container, overwrite: bool = False) -> list[str]:
    extra, _, _ = _az_auth(container)
    return ["az", "storage", "blob", "upload", "--account-name", container.account,
            "--container-name", container.name, "--name", item.blob, "--file", str(item.file),
            "--content-md5", item.md5_b64, "--overwrite", str(overwrite).lower(), *extra]


def printable(item: UploadItem, container: Container, overwrite: bool = False) -> str:
    _, _, env_prefix = _az_auth(container)
    return env_prefix + shlex.join(az_command(item, container, overwrite))


def upload(folder: Path, container_url: str, *, execute: bool = False,
           overwrite: bool = False) -> list[UploadItem]:
    container = Container.parse(container_url)
    items = plan_uploads(folder, container)
    for item in items:
        print(printable(item, container, overwrite))
    if not execute:
        print(f"dry run: {len(items)} uploads to {container.base} not done; drop --dry-run to "
              "upload", file=sys.stderr)
        return items
    if _sdk_available():
        _upload_sdk(items, container, overwrite)
    elif shutil.which("az"):
        _upload_az(items, container, overwrite)
    else:
        raise ToolFailed("neither the azure-storage-blob package nor the `az` CLI is "
                         "available", fix="pip install azure-storage-blob azure-identity, "
                         "or install the Azure CLI and `az login`")
    return items


def _sdk_available() -> bool:
    try:
        import azure.storage.blob  # noqa: F401
    except ImportError:
        return False
    return True


def _upload_az(items: list[UploadItem], container: Container, overwrite: bool) -> None:
    _, env, _ = _az_auth(container)
    for item in items:
        proc = subprocess.run(az_command(item, container, overwrite), capture_output=True,
                              text=True, check=False, env={**os.environ, **env})
        if proc.returncode != 0:
            message = redact_text(proc.stderr.strip()[-1500:], container.url)
            raise ToolFailed(f"az upload of {item.file.name} failed: {message}",
                             where=container.blob_url(item.blob),
                             fix="check `az login` / the SAS permissions; an existing "
                             "blob is only replaced with --overwrite")
        print(f"uploaded {container.blob_url(item.blob)}", file=sys.stderr)


def _upload_sdk(items: list[UploadItem], container: Container,
                overwrite: bool) -> None:  # pragma: no cover - needs Azure (a boundary here)
    from azure.core.exceptions import AzureError
    from azure.storage.blob import BlobServiceClient, ContentSettings

    account_url = f"https://{container.account}.blob.core.windows.net"
    if container.sas:
        service = BlobServiceClient(account_url, credential=container.sas)
    elif os.environ.get("AZURE_STORAGE_CONNECTION_STRING"):
        service = BlobServiceClient.from_connection_string(
            os.environ["AZURE_STORAGE_CONNECTION_STRING"])
    else:
        from azure.identity import DefaultAzureCredential

        service = BlobServiceClient(account_url, credential=DefaultAzureCredential())
    for item in items:
        client = service.get_blob_client(container.name, item.blob)
        try:
            with open(item.file, "rb") as f:
                client.upload_blob(f, overwrite=overwrite, content_settings=ContentSettings(
                    content_md5=base64.b64decode(item.md5_b64)))
        except AzureError as e:
            raise ServiceUnreachable(f"upload failed: {redact_text(str(e), container.url)}",
                                     where=container.blob_url(item.blob),
                                     fix="check the credentials and the SAS permissions; an "
                                     "existing blob is only replaced with --overwrite") from e
        print(f"uploaded {container.blob_url(item.blob)}", file=sys.stderr)
