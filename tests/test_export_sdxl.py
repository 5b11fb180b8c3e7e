"""`runner export sdxl`: a diffusers-format checkpoint written here (the tiny configs and
seeded weights, saved with save_pretrained) goes through the same exporter as the embedded
model and runs byte-identically; bad checkpoints are clear errors that write nothing."""

import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_support import cli

pytest.importorskip("iree.turbine")

from diffusers_support import assert_within_one_lsb, diffusers_images
from shared_work import cache_sharing_traces

from runner.base.errors import RunnerError
from runner.cli.main import main
from runner.config.exports import ExportSource, export_dir, export_key
from runner.model.export.export_tiny import TINY_DIR, first_difference
from runner.model.export.store import ensure_export

pytestmark = pytest.mark.slow

SDXL_SUITE = (Path(__file__).resolve().parent / "fixtures" / "iree-test-suites" /
              "sharktank_models" / "quality_tests" / "sdxl")


@pytest.fixture(scope="module")
def checkpoint(small_checkpoint) -> Path:
    """The session's small checkpoint (written once for every file that reads it). Read
    only: tests that damage or move it work on a copy."""
    return small_checkpoint


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "tiny-from-checkpoint"
    assert main(["export", "sdxl", "--from", str(checkpoint), "--batch-sizes", "1,2",
                 "--dtype", "fp32", "--out", str(out)]) == 0
    return out


def _assert_same_file(fresh: Path, shipped: Path) -> None:
    """Byte for byte, but an MLIR's float32 literals torch computed (the scheduler's sigmas)
    may sit LITERAL_ULP apart when this host's torch rounds them unlike the shipping host's."""
    if fresh.suffix == ".mlir":
        assert first_difference(shipped.read_bytes(), fresh.read_bytes()) is None, fresh.name
    else:
        assert fresh.read_bytes() == shipped.read_bytes(), fresh.name


def _same_bytes(a: Path, b: Path, names: tuple[str, ...]) -> bool:
    return all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def test_checkpoint_export_is_the_embedded_model(exported):
    """One exporter: the checkpoint's export is the shipped tiny model, file for file."""
    assert "tokenizer.json" not in {p.name for p in (exported / "tokenizer").iterdir()}
    for name in ("clip_bs1.mlir", "unet_bs2.mlir", "unet_pipeline_bs1.mlir", "vae_bs2.mlir",
                 "clip.irpa", "unet.irpa", "vae.irpa", "tokenizer/vocab.json",
                 "tokenizer/merges.txt"):
        _assert_same_file(exported / name, TINY_DIR / name)
    config = json.loads((exported / "model.json").read_text())
    assert config["batch_sizes"] == [1, 2] and config["source"].startswith("checkpoint:")


def test_out_dir_takes_more_batch_sizes_of_the_same_inputs_only(exported, checkpoint, capsys):
    assert main(["export", "sdxl", "--from", str(checkpoint), "--batch-sizes", "2",
                 "--dtype", "fp32", "--out", str(exported)]) == 0  # already there: no work
    assert "export: " not in capsys.readouterr().err
    assert main(["export", "sdxl", "--from", str(checkpoint), "--dtype", "fp16",
                 "--out", str(exported)]) == 2
    err = capsys.readouterr().err
    assert "with other inputs" in err and "--dtype: fp32 in the attempt, fp16 now" in err


def test_an_out_dir_holding_a_users_file_is_refused_before_any_work(checkpoint, tmp_path,
                                                                     capsys):
    """The docs promise an empty directory or one holding an export: a user's own file
    there is refused, dry run included, and nothing is written beside it."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for dry in ([], ["--dry-run"]):
        assert main(["export", "sdxl", "--from", str(checkpoint), "--dtype", "fp32",
                     "--out", str(out), *dry]) == 2
        err = capsys.readouterr().err
        assert "not `runner export`'s own (notes.txt)" in err, err
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # nothing beside it


def test_an_export_of_other_inputs_writes_every_file_again(exported, checkpoint, tmp_path):
    """Files without their model.json (written last) are never reused: an export of
    another dtype into that dir writes every file again (a bug once kept the old dtype's
    weights, "0 written", under a model.json claiming the new dtype), and the model.json
    it writes records the sha256 of every file beside it."""
    from runner.base.fileio import sha256_file
    from runner.model.export.store import _verified

    out = tmp_path / "out"
    shutil.copytree(exported, out)  # the fp32 export, without its model.json
    (out / "model.json").unlink()
    said: list[str] = []
    ensure_export(ExportSource(checkpoint, None, "float16"), [1], [1], out, log=said.append)
    assert all(f"export: {name}.irpa written" in said for name in ("clip", "unet", "vae"))
    config = json.loads((out / "model.json").read_text())
    assert config["dtype"] == "float16"
    assert sorted(config["files"]) == ["clip.irpa", "clip_bs1.mlir", "tokenizer/merges.txt",
                                       "tokenizer/vocab.json", "unet.irpa", "unet_bs1.mlir",
                                       "unet_pipeline_bs1.mlir", "vae.irpa", "vae_bs1.mlir"]
    assert all(sha256_file(out / name) == digest for name, digest in config["files"].items())
    assert (out / "unet.irpa").read_bytes() != (exported / "unet.irpa").read_bytes()
    # A file changed behind model.json's back: the export is not reused, model.json goes.
    with open(out / "vae.irpa", "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    said.clear()
    assert _verified(out, config["export_key"], said.append) == ([], [], {})
    assert "vae.irpa is not the file it records" in said[0]
    assert not (out / "model.json").exists()


class _Stop(KeyboardInterrupt):
    """Raised from the export's log right after a given file: an interrupt at that point."""


def test_an_interrupted_export_keeps_the_files_it_finished(exported, checkpoint, tmp_path):
    out = tmp_path / "out"

    def stop_after_unet(line: str) -> None:
        if line == "export: unet.irpa written":
            raise _Stop()

    source = ExportSource(checkpoint, None, "float32")
    with pytest.raises(_Stop):
        ensure_export(source, [1, 2], [1, 2], out, log=stop_after_unet)
    assert not (out / "model.json").exists() and not (out / "unet.irpa").exists()
    staged = {p.name: p.stat().st_mtime_ns for p in (out / ".staging").iterdir()}
    assert {"clip.irpa", "unet.irpa"} <= set(staged) and "vae.irpa" not in staged
    said: list[str] = []
    ensure_export(source, [1, 2], [1, 2], out, log=said.append)
    assert said[0] == "export: 4 file(s) an interrupted export finished are kept"
    assert "export: unet.irpa written" not in said and "export: vae.irpa written" in said
    assert (out / "unet.irpa").stat().st_mtime_ns == staged["unet.irpa"]  # moved, not rewritten
    assert not (out / ".staging").exists()
    for name in ("clip.irpa", "unet.irpa", "vae.irpa", "unet_bs2.mlir", "model.json"):
        assert (out / name).read_bytes() == (exported / name).read_bytes(), name


def test_an_architecture_traced_before_is_not_traced_again(exported, checkpoint, tmp_path):
    """The MLIR holds no weight: an export of what was traced before (here the `exported`
    fixture's, in this session's cache) takes its MLIR from the trace cache, the same bytes
    (the embedded model's, which `runner export tiny` traces afresh)."""
    from runner.base.paths import cache_dir
    from runner.model.export.traces import TRACES

    said: list[str] = []
    out = tmp_path / "again"
    ensure_export(ExportSource(checkpoint, None, "float32"), [1], [1], out, log=said.append)
    for name in ("clip_bs1.mlir", "unet_bs1.mlir", "vae_bs1.mlir"):
        (line,) = [m for m in said if m.startswith(f"export: {name} in ")]
        assert f"s, as traced before ({cache_dir() / TRACES}/" in line, line
        assert (out / name).read_bytes() == (exported / name).read_bytes(), name
        _assert_same_file(out / name, TINY_DIR / name)


def _run(profile: Path, out: Path, *args: str) -> dict[int, str]:
    proc = cli("run", "--profile", profile, "--count", "2", "--no-score", "--out", out, *args)
    assert proc.returncode == 0, proc.stderr
    return _hashes(out)


def _hashes(out: Path) -> dict[int, str]:
    data = json.loads((out / "dataset.json").read_text())
    return {s["qsl_idx"]: s["sha256"] for s in data["samples"]}


@pytest.fixture(scope="module")
def builtin_run(tmp_path_factory, tiny_compiled) -> Path:
    """The builtin tiny model's two images, run once for the tests comparing with them.
    Read only."""
    out = tmp_path_factory.mktemp("runs") / "builtin"
    _run(Path("tiny"), out)
    return out


@pytest.fixture(scope="module")
def exported_run(exported, tmp_path_factory, tiny_compiled) -> Path:
    """The checkpoint's export run at batch 1, once for the tests comparing its images, its
    profile `exported.yaml` beside it. Read only."""
    root = tmp_path_factory.mktemp("runs")
    profile = root / "exported.yaml"
    profile.write_text(f"extends: tiny\nname: exported\nmodel: {exported / 'model.json'}\n")
    _run(profile, root / "bs1")
    return root / "bs1"


def test_runs_byte_identical_to_the_builtin_model_at_batch_1_and_2(exported, exported_run,
                                                                    builtin_run, tmp_path):
    builtin, bs1 = _hashes(builtin_run), _hashes(exported_run)
    bs2 = _run(exported_run.parent / "exported.yaml", tmp_path / "bs2", "--batch-size", "2")
    modules = ("unet_bs1.mlir", "unet_bs2.mlir", "unet_pipeline_bs1.mlir", "clip_bs1.mlir")
    if _same_bytes(exported, TINY_DIR, modules):
        assert bs1 == builtin and bs2 == builtin
    else:  # this host's torch rounds a sigma LITERAL_ULP apart: the images are 1 LSB apart
        assert_within_one_lsb(_images(exported_run), _images(builtin_run))
        assert_within_one_lsb(_images(tmp_path / "bs2"), _images(builtin_run))


def _images(out: Path, count: int = 2) -> np.ndarray:
    from runner.rundir.store import SampleStore

    return np.stack([SampleStore(out).load(i) for i in range(count)])


def test_images_equal_diffusers_pipeline_within_one_lsb(exported, checkpoint, exported_run):
    """The reference for every image is diffusers' own pipeline: the checkpoint's export,
    run by the runner through IREE, gives its images to 1 LSB (the float order of the two
    differs; the mean absolute difference is ~1e-4)."""
    assert_within_one_lsb(_images(exported_run),
                          diffusers_images(checkpoint, exported / "model.json"))


def test_prompt_length_is_the_checkpoints_and_max_length_overrides_it(checkpoint, tmp_path,
                                                                      builtin_run):
    """A checkpoint whose tokenizers pad to 48 tokens (SDXL base's pad to 77) exports
    48-token prompts and still equals diffusers' pipeline, which pads to the same; its images
    differ from the 64-token export's. `--max-length 64` gives the 64-token export (IREE CI's
    and AMD's artifact shape) of the same weights, file for file the embedded model's."""
    root = tmp_path / "ckpt48"
    shutil.copytree(checkpoint, root)
    set_prompt_length(root, 48)
    out = tmp_path / "export48"
    assert main(["export", "sdxl", "--from", str(root), "--dtype", "fp32", "--out",
                 str(out)]) == 0
    assert json.loads((out / "model.json").read_text())["max_length"] == 48
    clip = (out / "clip_bs1.mlir").read_text()
    assert "@encode_prompts(%arg0: !torch.vtensor<[1,48],si64>" in clip
    profile = tmp_path / "p48.yaml"
    profile.write_text(f"extends: tiny\nname: p48\nmodel: {out / 'model.json'}\n")
    _run(profile, tmp_path / "run48")
    mine = _images(tmp_path / "run48")
    assert_within_one_lsb(mine, diffusers_images(root, out / "model.json"))
    assert not np.array_equal(mine, _images(builtin_run))  # the 64-token export's images

    out64 = tmp_path / "export64"
    assert main(["export", "sdxl", "--from", str(root), "--dtype", "fp32", "--max-length", "64",
                 "--out", str(out64)]) == 0
    for name in ("clip_bs1.mlir", "unet_bs1.mlir", "unet_pipeline_bs1.mlir", "clip.irpa"):
        _assert_same_file(out64 / name, TINY_DIR / name)


def test_max_length_beyond_the_text_encoders_is_refused(checkpoint, capsys):
    for dry in (["--dry-run"], []):  # the dry run opens the checkpoint as the export does
        assert main(["export", "sdxl", "--from", str(checkpoint), "--max-length", "100",
                     *dry]) == 2
        err = capsys.readouterr().err
        assert "--max-length" in err and "prompts of 100 tokens, but the text encoders " \
            "have 64 positions" in err


@pytest.fixture(scope="module")
def cached_fp32(checkpoint, tmp_path_factory) -> Path:
    """An export cache into which the checkpoint's fp32 batch-1 export was written, once
    for the tests of the cache (each works on a copy). Returns the cache directory."""
    cache = cache_sharing_traces(tmp_path_factory.mktemp("cache") / "cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RUNNER_CACHE_DIR", str(cache))
        source = ExportSource(checkpoint, None, "float32")
        said: list[str] = []
        config = ensure_export(source, [1], [1], log=said.append)
        assert config.parent == export_dir(source, export_key(source))
        assert "export: unet.irpa written" in said
    return cache


def test_export_cache_adds_batch_sizes_and_skips_what_is_there(checkpoint, cached_fp32,
                                                                monkeypatch, tmp_path):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(shutil.copytree(cached_fp32, tmp_path / "cache",
                                                              symlinks=True)))
    source = ExportSource(checkpoint, None, "float32")
    config = export_dir(source, export_key(source)) / "model.json"  # where cached_fp32 wrote
    first = {p.name: p.stat().st_mtime_ns for p in config.parent.iterdir()}
    messages: list[str] = []
    assert ensure_export(source, [1], [1], log=messages.append) == config
    assert messages == []  # nothing exported twice
    assert json.loads(config.read_text())["batch_sizes"] == [1]
    assert not (config.parent / ".staging").exists()  # staged inside the export, moved in
    assert not [p for p in (tmp_path / "cache" / "exports").iterdir()
                if p.name.startswith(".staging")]
    assert first["clip.irpa"] == config.parent.joinpath("clip.irpa").stat().st_mtime_ns


def test_a_cached_export_is_exported_from_where_its_checkpoint_is_now(checkpoint, cached_fp32,
                                                                     monkeypatch, tmp_path):
    """The export cache finds an export by its checkpoint's content: the same files in
    another directory are named as they are now, so a later batch size (and its dry run)
    reads them there, not where the first export read them (`checkpoint`, for cached_fp32's
    export)."""
    from runner.config.profile import load_profile

    monkeypatch.setenv("RUNNER_CACHE_DIR", str(shutil.copytree(cached_fp32, tmp_path / "cache",
                                                              symlinks=True)))
    moved = shutil.copytree(checkpoint, tmp_path / "moved $(touch PWNED) 'q'")
    model = load_profile("sdxl-checkpoint", {"model": f"checkpoint:{moved}",
                                             "model.dtype": "fp32",
                                             "model.vae_dtype": "fp32"}).model
    assert model.batch_sizes == (1,)  # the cached export, found by content
    assert model.source == f"checkpoint:{moved}"
    ran = cli("compile", "--profile", "sdxl-checkpoint", "--set", f"model=checkpoint:{moved}",
              "--set", "model.dtype=fp32", "--set", "model.vae_dtype=fp32", "--batch-sizes", "2",
              "--dry-run")
    assert ran.returncode == 0, ran.stderr
    assert shlex.split(ran.stdout.splitlines()[0])[:5] == ["runner", "export", "sdxl",
                                                          "--from", str(moved)]
    assert not list(tmp_path.rglob("PWNED"))


def test_profile_naming_a_checkpoint_exports_missing_batch_sizes_on_demand(
        checkpoint, monkeypatch, tmp_path):
    """What `runner compile` does for `model: checkpoint:DIR` (fp16, the lab's dtype): the
    layout's batch is exported first; a VAE batch of its own is exported at that size only."""
    from runner.config.profile import load_profile
    from runner.model.compiled_model import with_batch_sizes

    monkeypatch.setenv("RUNNER_CACHE_DIR", str(cache_sharing_traces(tmp_path / "cache")))
    overrides = {"model": f"checkpoint:{checkpoint}"}
    assert load_profile("tiny", overrides).model.batch_sizes == ()
    model = with_batch_sizes(load_profile("tiny", overrides).model, 1, 1, where="tiny")
    assert model.batch_sizes == (1,) and model.dtype == "float16"
    assert_vae_is_diffusers_fp16_pipelines(model.base_dir / "vae.irpa", checkpoint)
    assert load_profile("tiny", overrides).model.path == model.path  # found in the cache
    model = with_batch_sizes(model, 2, 1, where="tiny")
    assert model.batch_sizes == (1, 2) and model.sizes_for("vae") == (1,)
    assert sorted(p.name for p in model.base_dir.glob("*_bs2.mlir")) == [
        "clip_bs2.mlir", "unet_bs2.mlir", "unet_pipeline_bs2.mlir"]


def irpa_arrays(path: Path) -> dict[str, np.ndarray]:
    import iree.runtime as rt

    index = rt.ParameterIndex()
    index.load(str(path))
    return {key: np.array(rt.parameter_index_entry_as_numpy_ndarray(entry))
            for key, entry in index.items()}


def assert_vae_is_diffusers_fp16_pipelines(vae_irpa: Path, checkpoint: Path) -> None:
    """The exported VAE weights are the ones diffusers' fp16 pipeline decodes with: loaded
    with torch_dtype=float16 (rounded to half), then upcast to float32 (`force_upcast`),
    although the checkpoint holds full-precision files only."""
    import torch
    from diffusers import AutoencoderKL, StableDiffusionXLPipeline

    assert not list(checkpoint.glob("vae/*.fp16.safetensors"))
    pipe = StableDiffusionXLPipeline.from_pretrained(str(checkpoint), dtype=torch.float16)
    assert pipe.vae.config.force_upcast
    pipe.vae.to(torch.float32)  # the pipeline's own upcast before it decodes
    theirs = {k: v.numpy() for k, v in pipe.vae.state_dict().items()}
    full = AutoencoderKL.from_pretrained(checkpoint / "vae").state_dict()
    ours = irpa_arrays(vae_irpa)
    assert len(ours) > 10 and all(k.startswith("vae.") for k in ours)
    rounded = 0
    for key, value in ours.items():
        name = key.removeprefix("vae.")
        assert value.dtype == np.float32 and np.array_equal(value, theirs[name]), key
        rounded += not np.array_equal(value, full[name].numpy())
    assert rounded > len(ours) // 2  # the full-precision weights were not what shipped


def test_model_dtype_is_a_profile_field_keyed_into_the_export_cache(
        checkpoint, exported, monkeypatch, tmp_path, capsys):
    """`model: {source: checkpoint:DIR, dtype: fp32}`, or `--set model.dtype=fp32` on a
    profile naming only the checkpoint, is the fp32 export's entry in the export cache (its
    own key; fp16 stays the default): found from the profile alone, no model.json path to
    copy around. The cache is seeded with the `exported` fixture's fp32 export of the same
    checkpoint (an export's key does not depend on where it was written), so no second
    export runs here; that export is the embedded model file for file
    (test_checkpoint_export_is_the_embedded_model)."""
    from runner.config.profile import load_profile

    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    profile = tmp_path / "fp32.yaml"
    profile.write_text(f"extends: tiny\nname: fp32\nmodel:\n  source: checkpoint:{checkpoint}\n"
                       "  dtype: fp32\n")
    assert main(["compile", "--profile", str(profile), "--dry-run"]) == 0
    mapped = capsys.readouterr().out.splitlines()
    assert main(["compile", "--set", f"model=checkpoint:{checkpoint}", "--set",
                 "model.dtype=fp32", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == mapped
    assert mapped[0] == (f"runner export sdxl --from {checkpoint} --batch-sizes 1 "
                         "--vae-batch-sizes 1 --dtype fp32 --vae-dtype fp32")
    fp32 = load_profile(str(profile)).model
    fp16 = load_profile("tiny", {"model": f"checkpoint:{checkpoint}"}).model
    source = ExportSource(checkpoint, None, "float32")
    assert fp32.path == export_dir(source, export_key(source)) / "model.json"
    assert fp32.dtype == "float32" and fp16.dtype == "float16"
    assert fp32.base_dir.parent == fp16.base_dir.parent == tmp_path / "cache" / "exports"
    assert fp32.base_dir != fp16.base_dir and "-float32-" in fp32.base_dir.name
    assert json.loads((exported / "model.json").read_text())["export_key"] == \
        export_key(source)
    shutil.copytree(exported, fp32.base_dir)
    model = load_profile(str(profile)).model
    assert model.path == fp32.path and model.batch_sizes == (1, 2)
    assert main(["compile", "--profile", str(profile), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()  # exported already: compiles only
    assert [shlex.split(line)[1] for line in lines] == [
        str(fp32.base_dir / f"{name}_bs1.mlir") for name in ("clip", "unet", "unet_pipeline",
                                                              "vae")]


def test_model_dtype_mistakes_are_clear_errors(capsys):
    assert main(["compile", "--set", "model.dtype=fp8", "--dry-run"]) == 2
    assert "`model.dtype` is 'fp8'" in capsys.readouterr().err
    assert main(["compile", "--set", "model.dtype=fp16", "--dry-run"]) == 2  # builtin:tiny
    err = capsys.readouterr().err
    assert "model.json was exported in float32" in err and "checkpoint:DIR" in err
    assert main(["compile", "--set", "model.precision=fp16", "--dry-run"]) == 2
    assert "valid keys in model: dtype, source, vae_dtype, vae_from" in capsys.readouterr().err


def _broken(checkpoint: Path, tmp_path: Path, damage) -> Path:
    root = tmp_path / "broken"
    shutil.copytree(checkpoint, root)
    damage(root)
    return root


def _sd15(root: Path) -> None:
    index = json.loads((root / "model_index.json").read_text())
    index["_class_name"] = "StableDiffusionPipeline"
    (root / "model_index.json").write_text(json.dumps(index))


def _sd15_unet(root: Path) -> None:
    config = json.loads((root / "unet" / "config.json").read_text())
    config["cross_attention_dim"] = 768
    (root / "unet" / "config.json").write_text(json.dumps(config))


def _fp16_only(root: Path) -> None:
    unet = root / "unet"
    (unet / "diffusion_pytorch_model.safetensors").rename(
        unet / "diffusion_pytorch_model.fp16.safetensors")


def _truncate(root: Path) -> None:
    path = root / "text_encoder_2" / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])


def set_prompt_length(root: Path, first: int, second: int | None = None) -> None:
    """Both tokenizers' `model_max_length` (the second defaults to the first)."""
    for name, length in (("tokenizer", first), ("tokenizer_2", second or first)):
        path = root / name / "tokenizer_config.json"
        config = json.loads(path.read_text())
        config["model_max_length"] = length
        path.write_text(json.dumps(config))


@pytest.mark.parametrize(("damage", "file", "message"), [
    (lambda r: shutil.rmtree(r / "text_encoder_2"), "text_encoder_2/config.json",
     "file missing"),
    (lambda r: set_prompt_length(r, 48, 32), "tokenizer/tokenizer_config.json",
     "the tokenizers pad prompts to different lengths: 48 here, 32 in"),
    (lambda r: set_prompt_length(r, 77), "tokenizer/tokenizer_config.json",
     "prompts of 77 tokens, but the text encoders have 64 positions"),
    (lambda r: (r / "vae" / "diffusion_pytorch_model.safetensors").unlink(),
     "vae/diffusion_pytorch_model.safetensors", "the vae weights are missing"),
    (_sd15, "model_index.json", "'StableDiffusionPipeline' checkpoint, not SDXL"),
    (_sd15_unet, "unet/config.json", "cross_attention_dim 768"),
    (_fp16_only, "unet/diffusion_pytorch_model.fp16.safetensors", "only fp16 weights"),
    (_truncate, "text_encoder_2/model.safetensors", "truncated safetensors file"),
])
def test_bad_checkpoint_is_a_clear_error_and_writes_nothing(checkpoint, tmp_path, monkeypatch,
                                                            capsys, damage, file, message):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    root = _broken(checkpoint, tmp_path, damage)
    assert main(["export", "sdxl", "--from", str(root), "--dtype", "fp32"]) == 2
    err = capsys.readouterr().err
    assert message in err and str(root / file) in err, err
    exports = tmp_path / "cache" / "exports"
    left = [p.name for p in exports.iterdir()] if exports.is_dir() else []
    assert all(n.endswith((".lock", ".json")) for n in left), left


def test_fp16_only_checkpoint_exports_in_fp16(checkpoint, tmp_path):
    """The fp16 variant files are what --dtype fp16 reads (diffusers' `variant`)."""
    from runner.config.checkpoint import open_checkpoint

    root = _broken(checkpoint, tmp_path, _fp16_only)
    ckpt = open_checkpoint(root, "float16")
    assert ckpt.variants["unet"] == "fp16" and ckpt.variants["vae"] is None
    with pytest.raises(RunnerError, match="only fp16 weights"):
        open_checkpoint(root, "float32")


def test_export_dry_run_refuses_the_sources_the_export_refuses(tmp_path):
    """`--from` a directory that is not there and an empty `--vae-from` directory: the dry
    run fails as the export does (the same checks), naming the path, and writes nothing."""
    empty = tmp_path / "vae"
    empty.mkdir()
    out = tmp_path / "out"
    for argv, where in ((["--from", tmp_path / "nonexistent"], "checkpoint directory not found"),
                        (["--seeded", "--vae-from", empty], f"{empty}/config.json: file missing")):
        for dry in (["--dry-run"], []):
            ran = cli("export", "sdxl", *argv, "--out", out, *dry)
            assert ran.returncode == 2 and where in ran.stderr, ran.stderr
            assert "Traceback" not in ran.stderr and not out.exists()
            if "--vae-from" in argv:  # the fix is a VAE directory's, not a checkpoint's
                assert "diffusers-format VAE directory" in ran.stderr, ran.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["vae"] and not list(empty.iterdir())


@pytest.mark.parametrize("command", ["run", "compile"])
def test_a_dry_run_without_the_checkpoint_fails_as_the_run(command, tmp_path):
    """The export the run would start with cannot run without its checkpoint: the dry run
    fails there as the run does (exit 2, nothing written), naming the profile's field and
    the path as typed, however hostile."""
    missing = tmp_path / "no such $(touch PWNED) 'q'"
    for dry in (["--dry-run"], []):
        ran = cli(command, "--profile", "mi325x", "--set", f"model=checkpoint:{missing}",
                  "--out", tmp_path / "r", *dry)
        assert ran.returncode == 2, ran.stderr
        assert f"the checkpoint directory {missing} is not here" in ran.stderr
        assert "mi325x.yaml: model" in ran.stderr
        assert "--set model=checkpoint:DIR" in ran.stderr and "Traceback" not in ran.stderr
        assert not (tmp_path / "r").exists() and not list(tmp_path.rglob("PWNED"))


def test_compile_dry_run_of_lab_profiles_prints_batch_32(lab_profiles, capsys):
    """MI325X: batch 32 for CLIP and UNet, the VAE one image at a time (AMD's published
    MI325X scripts pass --vae_batch_size 1; configs/mi325x.yaml)."""
    assert main(["compile", "--profile", "mi325x", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("runner export sdxl --from ")
    assert "--batch-sizes 32 --vae-batch-sizes 1 --dtype fp16" in lines[0]
    assert [Path(shlex.split(line)[1]).name for line in lines[1:] if line[0] != "#"] == [
        "clip_bs32.mlir", "unet_bs32.mlir", "unet_pipeline_bs32.mlir", "vae_bs1.mlir"]


def test_validate_dry_run_of_the_lab_profile_prints_batch_32(lab_profiles, capsys, tmp_path,
                                                             monkeypatch):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    suite = SDXL_SUITE
    assert main(["validate", "--iree", "source:" + "0123456789abcdef" * 2 + "01234567",
                 "--profile", "mi325x", "--count", "5000", "--goldens", str(suite),
                 "--dry-run", "--out", str(tmp_path / "validate")]) == 0
    out, err = capsys.readouterr()
    assert "--batch-sizes 32 --vae-batch-sizes 1 --dtype fp16" in out
    assert "compile-bs32-vae1.yaml" in err


def test_seeded_model_refuses_scoring(tmp_path, capsys):
    from runner.config.profile import load_profile

    model = load_profile("sdxl-seeded").model
    assert model.source == "seeded:sdxl"
    with pytest.raises(RunnerError, match=r"scoring refused.*seeded random weights"):
        model.check_scorable()
    (tmp_path / "mlperf_log_accuracy.json").write_text("[]\n")
    assert main(["score", str(tmp_path), "--profile", "sdxl-seeded",
                 "--log", str(tmp_path / "mlperf_log_accuracy.json")]) == 2
    assert "scoring refused for model sdxl-seeded-sdxl" in capsys.readouterr().err


# --- the seeded full-size export against IREE CI's SDXL signatures ---------------------

_FUNC = re.compile(r"func\.func (?:private )?@([\w.]+)\((.*?)\)\s*->\s*(.*?)\s*"
                   r"(?:attributes\b|\{|\n)", re.S)


def _mlir_type(text: str) -> str:
    """`!torch.vtensor<[2,64,2048],f16>` or `tensor<2x64x2048xf16>` -> `2x64x2048xf16`."""
    m = re.search(r"vtensor<\[([\d,]*)\],(\w+)>", text)
    if m:
        dims = m.group(1).replace(",", "x")
        return f"{dims}x{m.group(2).replace('si64', 'i64')}"
    m = re.search(r"tensor<([\w]+)>", text)
    assert m, text
    return m.group(1)


def signatures(mlir: str) -> dict[str, tuple[list[str], list[str]]]:
    out = {}
    for name, args, results in _FUNC.findall(mlir):
        out[name] = ([_mlir_type(a) for a in re.findall(r"(?:!torch\.v)?tensor<[^>]*>", args)],
                     [_mlir_type(r) for r in re.findall(r"(?:!torch\.v)?tensor<[^>]*>",
                                                        results)])
    return out


def ci_signature(test_file: str) -> tuple[list[str], list[str]]:
    raw = json.loads((SDXL_SUITE / test_file).read_text())
    return [i["value"] for i in raw["inputs"]], [o["value"] for o in raw["outputs"]]


@pytest.mark.slow
def test_seeded_full_size_export_has_iree_ci_signatures(tmp_path):
    """The real SDXL graph at batch 1 fp16 takes and returns what IREE CI's artifacts do;
    the VAE returns float32 images (MLPerf decodes in fp32: SDXL's VAE has force_upcast);
    its weights, written again from their spec, are the exported files byte for byte."""
    out = tmp_path / "seeded"
    assert main(["export", "sdxl", "--seeded", "--out", str(out)]) == 0
    clip = signatures((out / "clip_bs1.mlir").read_text())
    assert clip["encode_prompts"] == ci_signature("clip_rocm.json")
    unet = signatures((out / "unet_bs1.mlir").read_text())
    pipeline = signatures((out / "unet_pipeline_bs1.mlir").read_text())
    assert pipeline["produce_image_latents"] == ci_signature("unet_fp16_rocm.json")
    # the pipeline module's declarations link to what the unet module exports
    assert pipeline["compiled_unet.run_forward"] == unet["run_forward"]
    assert pipeline["compiled_unet.run_initialize"] == unet["run_initialize"]
    vae_in, vae_out = ci_signature("vae_rocm.json")
    vae = signatures((out / "vae_bs1.mlir").read_text())["decode"]
    assert vae == (vae_in, [vae_out[0].replace("xf16", "xf32")])
    # The 7 GB of weights come from a spec of well under a megabyte: written again from it,
    # an archive is the exported file (ensure_weights checks model.json's sha256). The
    # smallest one here (each archive takes the same path; tests/test_seeded_weights.py
    # writes every one of the tiny model's).
    from runner.config.model_config import ModelConfig
    from runner.model.seeded_weights import ensure_weights

    weights = {p.name: p.stat().st_size for p in out.glob("*.irpa")}
    assert sum(weights.values()) > 6e9 and (out / "weights.spec.json").stat().st_size < 1e6
    smallest = min(weights, key=weights.__getitem__)
    (out / smallest).unlink()
    written = ensure_weights(ModelConfig.load(out / "model.json"))
    assert [m.archive for m in written] == [smallest]
    assert {p.name: p.stat().st_size for p in out.glob("*.irpa")} == weights
