"""Structural tier: a fresh export must equal the shipped assets byte for byte.

`RUNNER_FREEZE_GOLDENS=1` re-freezes: the export then writes into the shipped assets.
"""

import os

import pytest

pytest.importorskip("iree.turbine")

from runner.model.export.export_tiny import TINY_DIR, diff_exports, export_tiny, first_difference


def test_reexport_matches_shipped_assets_byte_for_byte(tmp_path):
    if os.environ.get("RUNNER_FREEZE_GOLDENS") == "1":
        export_tiny(TINY_DIR)
        pytest.skip("re-froze the shipped tiny assets")
    written = export_tiny(tmp_path)
    names = {p.name for p in written}
    assert {"unet_bs1.mlir", "unet_bs2.mlir", "clip.irpa", "model.json", "vocab.json"} <= names
    diffs = diff_exports(tmp_path)
    assert diffs == {}, "\n".join(f"{k}: {v}" for k, v in diffs.items())


def test_first_difference_names_the_line():
    assert first_difference(b"a\nb\nc", b"a\nb\nc") is None
    diff = first_difference(b"a\nb\nc", b"a\nX\nc")
    assert diff is not None and diff.startswith("line 2:") and "X" in diff
