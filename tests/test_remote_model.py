"""The real-SDXL path end to end with URLs: a model config whose artifacts live on an HTTP
server (a real one on 127.0.0.1) is fetched into the cache, then runs like the shipped one."""

import json
import os

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


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_fetch_of_an_exported_model_says_what_makes_it(tmp_path, dry):
    """A lab profile's model is exported from a checkpoint: fetch names the checkpoint
    directory it needs (and the flag that names another) and the profile's own export
    command, never a placeholder path or `runner export tiny`."""
    missing = tmp_path / "no-such-checkpoint"
    ran = cli("fetch", "--profile", "mi325x", "--set", f"model=checkpoint:{missing}", *dry)
    assert ran.returncode == 2, ran.stderr
    assert f"exported from the checkpoint directory {missing}, which is not here" in ran.stderr
    assert "--set model=checkpoint:DIR" in ran.stderr
    assert (f"runner export sdxl --from {missing} --batch-sizes 32 --vae-batch-sizes 1 "
            "--dtype fp16 --vae-dtype fp16") in ran.stderr
    assert "<key" not in ran.stderr and "export tiny" not in ran.stderr
    cache = {**os.environ, "RUNNER_CACHE_DIR": str(tmp_path / "cache")}  # nothing exported
    seeded = cli("fetch", "--profile", "sdxl-seeded", *dry, env=cache)
    assert seeded.returncode == 2 and "is not exported yet" in seeded.stderr, seeded.stderr
    assert "`runner export sdxl --seeded --batch-sizes 1 " in seeded.stderr
