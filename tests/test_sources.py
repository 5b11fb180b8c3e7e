"""The artifact cache against a real HTTP server on 127.0.0.1 (Range, ETag, Content-MD5)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from blob_server import BlobServer

from runner.base.errors import RunnerError
from runner.config import sources


@pytest.fixture
def server():
    s = BlobServer()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(sources.OFFLINE_ENV, raising=False)
    sources.forget_revalidations()
    yield tmp_path / "cache"
    sources.forget_revalidations()


BLOB = bytes(range(256)) * 4096  # 1 MiB


def test_fetch_downloads_once_and_records_validators(server):
    url = server.put("/sharkpublic/sdxl/punet_fp16_out_v6.0.bin", BLOB)
    path = sources.fetch(url, quiet=True)
    assert path.read_bytes() == BLOB
    assert path == sources.download_path(url) and path.name == "punet_fp16_out_v6.0.bin"
    meta = sources._read_meta(path)
    assert meta.md5 == hashlib.md5(BLOB).hexdigest() and meta.remote.etag == '"v1"'
    sources.forget_revalidations()
    assert sources.fetch(url, quiet=True) == path  # revalidated with HEAD, not fetched again
    assert len(server.gets("/sharkpublic/sdxl/punet_fp16_out_v6.0.bin")) == 1


def test_interrupted_download_resumes_with_range(server):
    path_in_server = "/c/big.bin"
    url = server.put(path_in_server, BLOB)
    server.cut_after[path_in_server] = 300_000
    with pytest.raises(RunnerError, match="resumes from the partial file"):
        sources.fetch(url, attempts=1, quiet=True)
    part = sources.download_path(url).with_name("big.bin.part")
    assert part.stat().st_size == 300_000 and not sources.download_path(url).exists()
    path = sources.fetch(url, quiet=True)  # a new process would do the same: resume
    assert path.read_bytes() == BLOB and not part.exists()
    assert server.gets(path_in_server) == [None, "bytes=300000-"]


def test_interruption_is_retried_within_one_fetch(server):
    url = server.put("/c/retry.bin", BLOB)
    server.cut_after["/c/retry.bin"] = 1000
    assert sources.fetch(url, attempts=2, quiet=True).read_bytes() == BLOB
    assert server.gets("/c/retry.bin") == [None, "bytes=1000-"]


def test_md5_mismatch_is_rejected_and_nothing_cached(server):
    url = server.put("/c/corrupt.bin", BLOB)
    server.lie_md5.add("/c/corrupt.bin")
    with pytest.raises(RunnerError, match="MD5 mismatch"):
        sources.fetch(url, quiet=True)
    folder = sources.download_path(url).parent
    assert not [p for p in folder.iterdir() if p.name != ".lock"]


def test_changed_blob_is_fetched_again(server):
    url = server.put("/c/golden.bin", b"old golden")
    assert sources.fetch(url, quiet=True).read_bytes() == b"old golden"
    server.put("/c/golden.bin", b"new golden, other size")
    # Same process: the HEAD result is remembered, the cached copy is used.
    assert sources.fetch(url, quiet=True).read_bytes() == b"old golden"
    sources.forget_revalidations()
    assert sources.fetch(url, quiet=True).read_bytes() == b"new golden, other size"
    assert len(server.gets("/c/golden.bin")) == 2


def test_offline_uses_cache_and_fails_clearly_when_missing(server, monkeypatch):
    url = server.put("/c/cached.bin", b"abc")
    sources.fetch(url, quiet=True)
    seen = len(server.requests)
    monkeypatch.setenv(sources.OFFLINE_ENV, "1")
    sources.forget_revalidations()
    assert sources.fetch(url).read_bytes() == b"abc"
    assert len(server.requests) == seen  # no network at all
    with pytest.raises(RunnerError, match="not in the download cache and the runner is "
                       "offline") as e:
        sources.fetch(server.url("/c/never.bin"))
    assert "RUNNER_OFFLINE" in str(e.value)
    # --offline=False beats the environment.
    assert sources.fetch(server.put("/c/new.bin", b"x"), offline_mode=False).read_bytes() == b"x"


def test_404_and_unreachable_server(server):
    with pytest.raises(RunnerError, match="HTTP 404"):
        sources.fetch(server.url("/c/missing.bin"), quiet=True)
    port = server.httpd.server_address[1]
    server.close()
    with pytest.raises(RunnerError, match="cannot reach"):
        sources.fetch(f"http://127.0.0.1:{port}/c/x.bin", quiet=True)


def test_sas_tokens_are_redacted_and_not_part_of_the_key(server, capsys):
    url = server.put("/c/secret.bin", b"payload")
    with_sas = url + "?sv=2022-11-02&se=2030-01-01&sp=r&sig=SECRETSIGNATURE%3D"
    path = sources.fetch(with_sas)
    assert path == sources.download_path(url)  # a rotated token is the same blob
    assert sources.download_path(with_sas) == sources.download_path(url + "?sig=OTHER")
    redacted = sources.redact_url(with_sas)
    assert "SECRET" not in redacted and "sig=REDACTED" in redacted and "/c/secret.bin" in redacted
    assert "SECRET" not in sources.meta_path(path).read_text()
    assert "SECRET" not in capsys.readouterr().err
    with pytest.raises(RunnerError) as e:
        sources.fetch(server.url("/c/nope.bin") + "?sig=SECRETSIGNATURE", quiet=True)
    assert "SECRET" not in str(e.value)


def test_resolve_local_file_url_and_relative(tmp_path, server):
    blob = tmp_path / "suite" / "out_v1.0.bin"
    blob.parent.mkdir()
    blob.write_bytes(b"1")
    assert sources.resolve_source("out_v1.0.bin", base_dir=blob.parent) == blob
    assert sources.resolve_source(blob.as_uri()) == blob
    assert sources.resolve_source(str(blob)) == blob
    url = server.url("/c/later.bin")
    found = sources.resolve_source(url, download=False, must_exist=False)
    assert found == sources.download_path(url)
    with pytest.raises(RunnerError, match="file not found"):
        sources.resolve_source("missing.bin", base_dir=blob.parent, where="t.json: outputs[0]")
    with pytest.raises(RunnerError, match="not in the download cache"):
        sources.local_source(url, "model.json: mlir")
    assert sources.local_source(url, "x", must_exist=False) == sources.download_path(url)


def test_module_main_fetches(server, capsys):
    url = server.put("/c/cli.bin", b"cli")
    assert sources.main([url]) == 0
    assert Path(capsys.readouterr().out.strip()).read_bytes() == b"cli"


def test_a_blob_placed_by_hand_is_adopted_when_its_md5_matches(server):
    url = server.put("/c/manual.bin", BLOB)
    path = sources.download_path(url)
    path.parent.mkdir(parents=True)
    path.write_bytes(BLOB)  # what the old "download it to <path>" advice produced
    assert sources.fetch(url, quiet=True) == path and server.gets("/c/manual.bin") == []
    assert sources._read_meta(path).md5 == hashlib.md5(BLOB).hexdigest()
    other = sources.download_path(server.put("/c/wrong.bin", BLOB))
    other.parent.mkdir(parents=True)
    other.write_bytes(b"stale")
    assert sources.fetch(server.url("/c/wrong.bin"), quiet=True).read_bytes() == BLOB
