"""The trace cache's key and its files (runner.model.export.traces): what changes an
exported module's graph changes the key, and a dry run keeps nothing. (That an export
reads its MLIR from there: tests/test_export_sdxl.py.)"""

from dataclasses import replace

from runner.base.paths import caches_read_only
from runner.config.exports import seeded_architecture
from runner.model.export.traces import trace_key, trace_path, traced

DIMS = (16, 64, 96, 64)


def test_what_shapes_the_graph_is_in_the_key_and_the_vae_precision_only_in_the_vaes():
    arch = seeded_architecture("tiny")
    key = trace_key(arch, "unet", 1, DIMS, "float32", "float32")
    assert trace_key(arch, "unet", 1, DIMS, "float32", "float32") == key
    wider = replace(arch, unet={**arch.unet, "sample_size": 32})
    others = {trace_key(arch, "unet", 2, DIMS, "float32", "float32"),
              trace_key(arch, "unet", 1, (16, 48, 96, 64), "float32", "float32"),
              trace_key(arch, "unet", 1, DIMS, "float16", "float32"),
              trace_key(arch, "clip", 1, DIMS, "float32", "float32"),
              trace_key(wider, "unet", 1, DIMS, "float32", "float32")}
    assert key not in others and len(others) == 5
    # the VAE's precision and config are the VAE's graph alone, but for the image size the
    # UNet's time ids hold
    vae = trace_key(arch, "vae", 1, DIMS, "float32", "float32")
    clip = trace_key(arch, "clip", 1, DIMS, "float32", "float32")
    assert trace_key(arch, "vae", 1, DIMS, "float32", "float16") != vae
    assert trace_key(arch, "unet", 1, DIMS, "float32", "float16") == key
    other_vae = replace(arch, vae={**arch.vae, "scaling_factor": 0.5})
    assert trace_key(other_vae, "vae", 1, DIMS, "float32", "float32") != vae
    assert trace_key(other_vae, "unet", 1, DIMS, "float32", "float32") == key
    blocks = [*arch.vae["block_out_channels"], 64]
    deeper = replace(arch, vae={**arch.vae, "block_out_channels": blocks})
    assert deeper.image_size != arch.image_size
    assert trace_key(deeper, "unet", 1, DIMS, "float32", "float32") != key
    assert trace_key(deeper, "clip", 1, DIMS, "float32", "float32") == clip
    schedule = replace(arch, scheduler={**arch.scheduler, "beta_end": 0.02})
    assert trace_key(schedule, "unet", 1, DIMS, "float32", "float32") != key
    assert trace_key(schedule, "clip", 1, DIMS, "float32", "float32") == clip


def test_a_trace_is_kept_for_the_next_export_but_not_by_a_dry_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    key = trace_key(seeded_architecture("tiny"), "vae", 1, DIMS, "float32", "float32")
    calls: list[int] = []

    def trace() -> str:
        calls.append(1)
        return "module @compiled_vae {}\n"

    with caches_read_only():
        assert traced(key, trace) == ("module @compiled_vae {}\n", False)
    assert not (tmp_path / "cache").exists()
    assert traced(key, trace) == ("module @compiled_vae {}\n", False)
    assert trace_path(key).read_text() == "module @compiled_vae {}\n"
    assert traced(key, trace) == ("module @compiled_vae {}\n", True)
    assert len(calls) == 2
