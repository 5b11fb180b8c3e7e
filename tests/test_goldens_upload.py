"""Upload: exact `az` commands in a dry run; uploading, credentials only in the
environment. Azure is the boundary here: a stand-in `az` on PATH records what it was given,
everything up to it runs for real."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import stat
from pathlib import Path

import pytest

from runner.base.errors import RunnerError
from runner.cli.main import main
from runner.goldens.upload import Container, plan_uploads

BASE = "https://sharkpublic.blob.core.windows.net/sharkpublic"
SAS = "sv=2022-11-02&ss=b&srt=o&sp=rwc&se=2030-01-01&sig=TOPSECRETSIG%3D"


def generated(tmp_path: Path) -> Path:
    """What `goldens generate` leaves: blobs plus manifest.json (see test_goldens_versioning)."""
    out = tmp_path / "v7"
    out.mkdir(parents=True)
    goldens = []
    for name, source in (("punet_fp16_out_v7.0.bin", f"{BASE}/sdxl/03142025/IO/"
                                                     "punet_fp16_out_v7.0.bin"),
                         ("clip_out0_v2.0.bin", "clip_out0_v2.0.bin")):
        (out / name).write_bytes(name.encode() * 10)
        md5 = base64.b64encode(hashlib.md5((out / name).read_bytes()).digest()).decode()
        goldens.append({"file": name, "new_source": source, "md5_b64": md5})
    (out / "manifest.json").write_text(json.dumps({"goldens": goldens}))
    return out


def test_container_url():
    c = Container.parse(f"{BASE}/sdxl/tiny?{SAS}")
    assert (c.account, c.name, c.prefix, c.sas) == ("sharkpublic", "sharkpublic", "sdxl/tiny", SAS)
    for bad in ("http://x.blob.core.windows.net/c", "https://example.com/c",
                "https://a.blob.core.windows.net/"):
        with pytest.raises(RunnerError, match="not an Azure container URL"):
            Container.parse(bad)


def test_blob_names_follow_the_new_sources(tmp_path):
    items = plan_uploads(generated(tmp_path), Container.parse(f"{BASE}/goldens/tiny"))
    assert [i.blob for i in items] == ["sdxl/03142025/IO/punet_fp16_out_v7.0.bin",
                                       "goldens/tiny/clip_out0_v2.0.bin"]
    folder = generated(tmp_path / "x")
    (folder / "clip_out0_v2.0.bin").write_bytes(b"tampered")
    with pytest.raises(RunnerError, match="changed since generate wrote it"):
        plan_uploads(folder, Container.parse(BASE))


def test_dry_run_prints_exact_commands_without_secrets(tmp_path, capsys, monkeypatch):
    for key in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    folder = generated(tmp_path)
    assert main(["goldens", "upload", str(folder), "--container-url", BASE, "--dry-run"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 2 and "dry run: 2 uploads" in captured.err
    argv = shlex.split(lines[0])
    assert argv[:4] == ["az", "storage", "blob", "upload"]
    assert argv[argv.index("--name") + 1] == "sdxl/03142025/IO/punet_fp16_out_v7.0.bin"
    assert argv[argv.index("--file") + 1] == str(folder / "punet_fp16_out_v7.0.bin")
    assert argv[argv.index("--overwrite") + 1] == "false" and "--content-md5" in argv
    assert argv[-2:] == ["--auth-mode", "login"]
    assert main(["goldens", "upload", str(folder), "--container-url", f"{BASE}?{SAS}",
                 "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "TOPSECRET" not in captured.out + captured.err
    assert captured.out.startswith("AZURE_STORAGE_SAS_TOKEN=<redacted> az storage blob upload")


def fake_az(tmp_path: Path, rc: int = 0) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    az = bin_dir / "az"
    az.write_text(f"""#!/usr/bin/env python3
import json, os, sys
with open({str(tmp_path / 'az_calls.jsonl')!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:],
                        "sas": os.environ.get("AZURE_STORAGE_SAS_TOKEN")}}) + "\\n")
if {rc}:
    sys.stderr.write("ErrorCode:BlobAlreadyExists sig=TOPSECRETSIG%3D\\n")
sys.exit({rc})
""")
    az.chmod(az.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_upload_passes_the_sas_through_the_environment(tmp_path, monkeypatch, capsys):
    try:
        import azure.storage.blob  # noqa: F401
        pytest.skip("the SDK path would be taken; this test covers the az CLI path")
    except ImportError:
        pass
    folder = generated(tmp_path)
    monkeypatch.setenv("PATH", f"{fake_az(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    assert main(["goldens", "upload", str(folder), "--container-url", f"{BASE}?{SAS}"]) == 0
    calls = [json.loads(line) for line in (tmp_path / "az_calls.jsonl").read_text().splitlines()]
    assert len(calls) == 2 and all(c["sas"] == SAS for c in calls)
    assert all("TOPSECRET" not in " ".join(c["argv"]) for c in calls)
    assert "uploaded https://sharkpublic.blob.core.windows.net/sharkpublic/sdxl/03142025/IO/" \
        "punet_fp16_out_v7.0.bin" in capsys.readouterr().err
    failing = tmp_path / "failing"
    failing.mkdir()
    monkeypatch.setenv("PATH", f"{fake_az(failing, rc=1)}{os.pathsep}{os.environ['PATH']}")
    assert main(["goldens", "upload", str(folder), "--container-url", f"{BASE}?{SAS}"]) == 2
    err = capsys.readouterr().err
    assert "BlobAlreadyExists" in err and "TOPSECRET" not in err


def test_upload_without_any_uploader_fails_clearly(tmp_path, monkeypatch, capsys):
    try:
        import azure.storage.blob  # noqa: F401
        pytest.skip("the SDK is installed")
    except ImportError:
        pass
    monkeypatch.setenv("PATH", str(tmp_path))  # no az
    assert main(["goldens", "upload", str(generated(tmp_path)), "--container-url", BASE]) == 2
    assert "neither the azure-storage-blob package nor the `az` CLI" in capsys.readouterr().err
