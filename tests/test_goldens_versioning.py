"""Regenerate and bump: new blobs under v{n+1} names, JSON diffs touching only those names."""

from __future__ import annotations

import difflib
import json
import shutil

import numpy as np
import pytest
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.cli.main import main
from runner.goldens.versioning import (
    Version,
    bump_file_text,
    bump_name,
    bump_source,
    name_version,
    parse_target,
)
from runner.model.tensors import TensorSpec, read_tensor

TINY = REPO / "goldens" / "tiny"
QUALITY = REPO / "tests" / "fixtures" / "iree-test-suites" / "sharktank_models" / \
    "quality_tests" / "sdxl"


def test_version_names():
    assert name_version("punet_fp16_out_v6.0.bin") == Version(6, 0)
    assert name_version("punet_output_v2.bin") == Version(2)
    assert name_version("inference_output.0.bin") is None
    assert name_version("golden_out.npy") is None and name_version("dev2.bin") is None
    assert bump_name("punet_fp16_out_v6.0.bin", parse_target("v7.0")).new_name == \
        "punet_fp16_out_v7.0.bin"
    assert bump_name("punet_fp16_out_v6.0.bin", parse_target("v7")).new_name == \
        "punet_fp16_out_v7.0.bin"  # the file's vN.M style is kept
    assert bump_name("punet_output_v2.bin", parse_target("next")).new_name == "punet_output_v3.bin"
    assert bump_name("x_v9.1.bin", "next").new_name == "x_v10.0.bin"
    b = bump_name("inference_output.0.bin", parse_target("v1.0"))
    assert b.unversioned and b.new_name == "inference_output.0_v1.0.bin"
    assert "has no version in its name" in b.describe()
    with pytest.raises(RunnerError, match=r"is at v6\.0; v6\.0 is not a newer version"):
        bump_name("punet_fp16_out_v6.0.bin", parse_target("v6"))
    with pytest.raises(RunnerError, match="cannot read version"):
        parse_target("seven")
    url = "https://sharkpublic.blob.core.windows.net/sharkpublic/sdxl/IO/punet_out_v2.0.bin"
    assert bump_source(url, "next")[0] == url.replace("v2.0", "v3.0")
    assert bump_source("sub/dir/a_v1.bin", Version(4))[0] == "sub/dir/a_v4.bin"


@pytest.mark.parametrize("path", sorted(QUALITY.glob("*.json")), ids=lambda p: p.stem)
def test_bump_changes_only_the_output_sources(path):
    text = path.read_text()
    raw = json.loads(text)
    new_text, bumps = bump_file_text(text, str(path), "next")
    outputs = [o["source"] for o in raw.get("outputs", [])]
    assert len(bumps) == len(set(outputs))
    changed = [(a, b) for a, b in zip(text.splitlines(), new_text.splitlines(), strict=True)
               if a != b]
    assert len(changed) == len(outputs)
    for (old_line, new_line), bump in zip(changed, bumps, strict=True):
        assert bump.old_name in old_line and bump.new_name in new_line
        assert old_line.replace(bump.old_name, bump.new_name) == new_line
    new = json.loads(new_text)
    assert {k: v for k, v in new.items() if k != "outputs"} == \
        {k: v for k, v in raw.items() if k != "outputs"}
    assert [o["value"] for o in new.get("outputs", []) if "value" in o] == \
        [o["value"] for o in raw.get("outputs", []) if "value" in o]



def test_generate_then_bump_touches_only_versioned_names(tmp_path, capsys):
    suite = tmp_path / "suite"
    shutil.copytree(TINY, suite)  # runs as it is: the model is `builtin:tiny/...`
    before = {p.name: p.read_text() for p in suite.glob("*.json")}
    new = tmp_path / "v2"
    assert main(["goldens", "generate", str(suite), "--to", "v2.0", "--out", str(new)]) == 0
    manifest = json.loads((new / "manifest.json").read_text())
    names = sorted(g["file"] for g in manifest["goldens"])
    assert names == ["clip_out0_v2.0.bin", "clip_out1_v2.0.bin", "unet_out0_v2.0.bin",
                     "vae_out0_v2.0.bin"]
    for g in manifest["goldens"]:
        old = suite / g["old_source"]
        spec = TensorSpec.parse(g["spec"])
        # Same compiler; the committed goldens may come from another CPU (`target-cpu=host`
        # vectorizes differently), so they agree within the test's thresholds, not bitwise.
        change = g["change_vs_old"]
        assert change["over_threshold"] == 0 and change["max_abs"] < 1e-4, g
        assert np.allclose(read_tensor(new / g["file"], spec), read_tensor(old, spec),
                           rtol=0, atol=1e-4)
    assert main(["goldens", "bump", str(suite), "--to", "v2.0"]) == 0
    out = capsys.readouterr().out
    assert "clip_out0_v1.0.bin -> clip_out0_v2.0.bin" in out
    for name, old_text in before.items():
        diff = unified_text(old_text, (suite / name).read_text())
        assert diff, name
        for line in diff:
            assert "_out" in line and ("v1.0.bin" in line) == line.startswith("-")
            assert ("v2.0.bin" in line) == line.startswith("+")
        removed = [line[1:] for line in diff if line.startswith("-")]
        added = [line[1:] for line in diff if line.startswith("+")]
        assert [r.replace("_v1.0.bin", "_v2.0.bin") for r in removed] == added
    for g in manifest["goldens"]:
        shutil.copy(new / g["file"], suite / g["file"])
    assert main(["goldens", "check", str(suite)]) == 0  # the bumped suite passes


def unified_text(a: str, b: str) -> list[str]:
    return [line for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="",
                                                 n=0)
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]


def test_bump_to_out_dir_and_unversioned_names(tmp_path, capsys):
    src = QUALITY / "vae_cpu.json"
    assert main(["goldens", "bump", str(src), "--to", "v1.0", "--out", str(tmp_path)]) == 0
    assert src.read_text() != (tmp_path / "vae_cpu.json").read_text()  # original untouched
    out = capsys.readouterr().out
    assert "inference_output.0.bin has no version in its name" in out
    assert "inference_output.0_v1.0.bin" in (tmp_path / "vae_cpu.json").read_text()
    # A version that is not newer is refused before any file is written.
    target = tmp_path / "again"
    assert main(["goldens", "bump", str(QUALITY / "punet_int8_fp16_rocm.json"), "--to", "v2",
                 "--out", str(target)]) == 2
    assert not target.exists()
    assert "is not a newer version" in capsys.readouterr().err
