"""Structural tier: a fresh export must equal the shipped assets byte for byte.

`RUNNER_FREEZE_GOLDENS=1` re-freezes: the export then writes into the shipped assets.
"""

import os

import pytest

pytest.importorskip("iree.turbine")

import numpy as np

from runner.model.export.export_tiny import (
    LITERAL_ULP,
    TINY_DIR,
    diff_exports,
    export_tiny,
    first_difference,
)


@pytest.mark.slow
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


def _literal(values) -> bytes:
    blob = (b"\x04\x00\x00\x00" + np.asarray(values, "<f4").tobytes()).hex().upper()
    return f'  torch_tensor_3_torch.float32: "0x{blob}",\n'.encode()


def test_float32_literals_may_differ_by_the_named_ulp_and_no_more():
    """torch's kernels round the scheduler's sigmas differently on another CPU: a float32
    resource within LITERAL_ULP per element is the same export; one more ULP, another
    header, or any other byte is a difference."""
    base = np.array([0.5, -1.25, 14.6, 0.0], "<f4")
    near = base.view("<i4").copy()
    near[:3] += np.array([LITERAL_ULP, -LITERAL_ULP, 1], "<i4")
    far = base.view("<i4").copy()
    far[2] += LITERAL_ULP + 1
    head = b"module {\n"
    assert first_difference(head + _literal(base), head + _literal(near.view("<f4"))) is None
    diff = first_difference(head + _literal(base), head + _literal(far.view("<f4")))
    assert diff is not None and diff.startswith("line 2:")
    renamed = _literal(base).replace(b"tensor_3", b"tensor_4")
    assert first_difference(head + _literal(base), head + renamed) is not None
    # -0.0 and +0.0 are 0 ULP apart on the integer line; a sign flip of 1.0 is not.
    assert first_difference(head + _literal([0.0]), head + _literal([-0.0])) is None
    assert first_difference(head + _literal([1.0]), head + _literal([-1.0])) is not None


@pytest.mark.slow  # torch.export's first trace in a process: ~3 s of CPU
def test_tracing_records_no_stack_traces_and_restores_torchs_setting():
    """torch.export's per-op Python stacks feed only MLIR locations, which the exported text
    never prints: the exporter traces without them (the shipped assets still come out byte
    for byte: test_reexport_matches_shipped_assets_byte_for_byte) and leaves torch's setting
    as it found it, an error included."""
    import torch
    import torch.fx.config

    from runner.model.export.exporter import _export_programs

    seen: list[bool] = []

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.fx.config.do_not_emit_stack_traces)
            return x + 1

    before = torch.fx.config.do_not_emit_stack_traces
    mlir = _export_programs(Probe(), "compiled_probe", {"forward": (torch.zeros(2),)})
    assert "func.func @forward" in mlir and seen and all(seen)
    assert torch.fx.config.do_not_emit_stack_traces is before

    class Broken(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("mid-trace")

    with pytest.raises(ValueError, match="mid-trace"):
        _export_programs(Broken(), "compiled_broken", {"forward": (torch.zeros(2),)})
    assert torch.fx.config.do_not_emit_stack_traces is before


def test_seeding_modules_fills_each_archive_with_one_thread_pool(monkeypatch):
    """`seed_modules` writes into the modules' own storage exactly what `generate_seeded`
    gives for the spec it derives (a transposed, non-contiguous weight included), filling
    each archive's tensors through one thread pool: a full-size SDXL's 2535 tensors once
    took 2535 pools, each with fresh scratch blocks."""
    import torch

    import runner.model.seeded_weights as sw
    from runner.model.export.seeded import seed_modules

    pools: list[int] = []

    class Counted(sw.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(sw, "ThreadPoolExecutor", Counted)
    torch.manual_seed(3)
    first, second = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)), \
        torch.nn.Linear(4, 2)
    second.weight.data = second.weight.data.t().contiguous().t()  # a view in another order
    spec = seed_modules({"a.irpa": first, "b.irpa": second}, 11)
    assert len(pools) == 2
    assert [t.name for t in spec.archives["a.irpa"]] == ["0.weight", "0.bias", "1.weight",
                                                         "1.bias"]
    for archive, module in (("a.irpa", first), ("b.irpa", second)):
        fresh = sw.generate_seeded(spec.archives[archive], 11)
        ours = [t.detach().numpy() for t in module.state_dict().values()]
        assert all(np.array_equal(a, b) for a, b in zip(fresh, ours, strict=True)), archive
