"""The real-SDXL path end to end with URLs: a model config whose artifacts live on an HTTP
server (a real one on 127.0.0.1) is fetched into the cache, then runs like the shipped one."""

import json

import numpy as np
import pytest
import yaml
from blob_server import BlobServer
from cli_support import cli

from runner.base.paths import ASSETS_DIR
from runner.model.images import decode_png

TINY = ASSETS_DIR / "tiny"


@pytest.fixture
def server():
    s = BlobServer()
    yield s
    s.close()


def test_fetch_then_generate_from_urls(server, tmp_path):
    config = json.loads((TINY / "model.json").read_text())
    for sub in config["submodels"].values():
        for key in ("mlir", "weights"):
            for batch in (1, 2):
                name = sub[key].format(batch=batch)
                server.put(f"/tiny/{name}", (TINY / name).read_bytes())
            sub[key] = server.url(f"/tiny/{sub[key]}")
        sub["extra_mlir"] = [server.url(f"/tiny/{m}") for m in sub.get("extra_mlir", [])]
        for m in sub["extra_mlir"]:
            for batch in (1, 2):
                name = m.rsplit("/", 1)[1].format(batch=batch)
                server.put(f"/tiny/{name}", (TINY / name).read_bytes())
    config["tokenizer"]["dir"] = str(TINY / "tokenizer")
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(config))
    profile = tmp_path / "remote.yaml"
    profile.write_text("name: remote\nextends: tiny\nmodel: model.yaml\n")

    before = cli("compile", "--profile", str(profile))
    assert before.returncode == 2 and "not in the download cache" in before.stderr
    fetched = cli("fetch", "--profile", str(profile))
    assert fetched.returncode == 0, fetched.stderr
    # (clip, unet, unet pipeline, vae) x 2 batch sizes + 3 weight archives
    assert len(fetched.stdout.split()) == 11
    out = tmp_path / "gen"
    gen = cli("generate", "--profile", str(profile), "--count", "2", "--out", str(out))
    assert gen.returncode == 0, gen.stderr
    shipped = tmp_path / "shipped"
    assert cli("generate", "--profile", "tiny", "--count", "2", "--out",
               str(shipped)).returncode == 0
    for name in ("00000.png", "00001.png"):
        assert np.array_equal(decode_png((out / "images" / name).read_bytes()),
                              decode_png((shipped / "images" / name).read_bytes()))
