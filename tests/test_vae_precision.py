"""The decoder's precision (`model.vae_dtype`, `runner export sdxl --vae-dtype`): the tiny
model renders within 1 LSB of diffusers' own pipeline decoding at the same precision, a
checkpoint's fp16 export is the tiny model's shipped fp16 decoder file for file, and a
decode that overflows in fp16 (as SDXL base's VAE does) never becomes an image: its samples
fail naming the fix, the workers go on, and aggregation, scoring and LoadGen refuse."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_support import cli

pytest.importorskip("iree.turbine")

from diffusers_support import assert_within_one_lsb, diffusers_images
from shared_work import cache_sharing_traces

from runner.cli.main import main
from runner.config.exports import ExportSource, export_key
from runner.config.mlperf_data import load_captions
from runner.model.export.export_tiny import TINY_DIR
from runner.model.pipeline.loader import open_pipeline
from runner.model.pipeline.sdxl import SampleFailures
from runner.rundir.store import SampleStore

COUNT = 2
DTYPES = {"fp32": "float32", "fp16": "float16"}
OVERFLOW_SCALE = 1e4  # the decoder's first conv: ~1e5 activations, past fp16's 65504


@pytest.fixture(scope="module")
def checkpoint(small_checkpoint) -> Path:
    """The session's small checkpoint (written once for every file that reads it), not one
    of this file's own. Read only: the tests here copy what they change."""
    return small_checkpoint


def images(run_dir: Path, count: int = COUNT) -> np.ndarray:
    store = SampleStore(run_dir)
    return np.stack([store.load(i) for i in range(count)])


@pytest.mark.slow
def test_tiny_renders_within_one_lsb_of_diffusers_with_each_decoder_precision(
        checkpoint, tmp_path, tiny_compiled):
    """Each decoder against diffusers' pipeline at its own precision (the reference made
    here, from the same weights as a diffusers checkpoint); the precision is in run.json and
    every report; and the fp16 decoder's images are not the fp32 one's."""
    made = {}
    for vae, dtype in DTYPES.items():
        out = tmp_path / vae
        proc = cli("run", "--profile", "tiny", "--set", f"model.vae_dtype={vae}",
                   "--count", str(COUNT), "--no-score", "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        made[vae] = images(out)
        assert_within_one_lsb(made[vae], diffusers_images(checkpoint, TINY_DIR / "model.json",
                                                          COUNT, dtype))
        assert json.loads((out / "run.json").read_text())["model"]["vae_dtype"] == dtype
        results = json.loads((out / "results.json").read_text())
        assert results["model_precision"] == {"dtype": "float32", "vae_dtype": dtype}
        assert f"tiny-sdxl (fp32, VAE {vae})" in (out / "summary.md").read_text()
        assert f"(fp32, VAE {vae})" in (out / "report.html").read_text()
    assert not np.array_equal(made["fp32"], made["fp16"])


@pytest.mark.slow
def test_a_checkpoints_fp16_decoder_is_the_shipped_one_and_keyed_apart(checkpoint, tmp_path,
                                                                      monkeypatch, capsys):
    """`--set model.vae_dtype=fp16` names its own export (`--vae-dtype fp16`, its own cache
    key); that export of the diffusers checkpoint is the tiny model's fp16 decoder file for
    file (one exporter), so it renders as the test above measured."""
    # its own exports; the session's MLIR traces (the overflowing VAE's export below, of
    # the same modules, reads them)
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(cache_sharing_traces(tmp_path / "cache")))
    assert main(["compile", "--set", f"model=checkpoint:{checkpoint}", "--set",
                 "model.dtype=fp32", "--set", "model.vae_dtype=fp16", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"runner export sdxl --from {checkpoint} --batch-sizes 1 --vae-batch-sizes 1 "
        "--dtype fp32 --vae-dtype fp16")
    out = tmp_path / "export"
    assert main(["export", "sdxl", "--from", str(checkpoint), "--dtype", "fp32",
                 "--vae-dtype", "fp16", "--out", str(out)]) == 0
    for name, shipped in (("vae.irpa", "vae_fp16.irpa"), ("vae_bs1.mlir", "vae_fp16_bs1.mlir"),
                          ("clip.irpa", "clip.irpa"), ("unet.irpa", "unet.irpa")):
        assert (out / name).read_bytes() == (TINY_DIR / shipped).read_bytes(), name
    config = json.loads((out / "model.json").read_text())
    assert config["vae_dtype"] == "float16" and config["dtype"] == "float32"
    fp16 = ExportSource(checkpoint, None, "float32", vae_dtype="float16")
    assert config["export_key"] == export_key(fp16) != export_key(
        ExportSource(checkpoint, None, "float32"))


def overflowing_vae(vae_dir: Path, root: Path) -> Path:
    """A copy of a VAE directory that overflows in fp16 and not in fp32, as SDXL base's VAE
    does: its decoder's first conv scaled up (the GroupNorm after it undoes the scale)."""
    import torch
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(vae_dir)
    with torch.no_grad():
        vae.decoder.conv_in.weight.mul_(OVERFLOW_SCALE)
        vae.decoder.conv_in.bias.mul_(OVERFLOW_SCALE)
    vae.save_pretrained(root)
    return root


@pytest.mark.slow
def test_a_decode_that_overflows_fails_its_samples_and_nothing_scores_them(checkpoint,
                                                                          tmp_path):
    """The checkpoint decoding with an fp16-unsafe VAE of its own (`--vae-from`): every
    sample fails on two workers, none dies, none becomes an image, and aggregation, scoring
    and a LoadGen test refuse, each naming the fix. The fix, an fp16-safe VAE, is the
    checkpoint's own here: its export is the tiny model's fp16 decoder (test above). The
    modules' MLIR is the shipped tiny model's (weights are external), so the compile cache
    has them."""
    import torch
    from diffusers import AutoencoderKL

    bad = overflowing_vae(checkpoint / "vae", tmp_path / "vae-overflows")
    # The premise, in diffusers itself: this VAE decodes in fp32, and not in fp16.
    vae = AutoencoderKL.from_pretrained(bad).eval()
    latents = torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(0))
    latents /= vae.config.scaling_factor  # what the decoder is given
    with torch.no_grad():
        assert torch.isfinite(vae.decode(latents, return_dict=False)[0]).all()
        vae16 = vae.to(torch.float16)
        assert not torch.isfinite(vae16.decode(latents.half(), return_dict=False)[0]).all()

    export = tmp_path / "export16"
    assert main(["export", "sdxl", "--from", str(checkpoint), "--dtype", "fp32", "--vae-dtype",
                 "fp16", "--vae-from", str(bad), "--out", str(export)]) == 0
    config = json.loads((export / "model.json").read_text())
    assert config["vae_from"] == str(bad) and config["export_key"] != export_key(
        ExportSource(checkpoint, None, "float32", vae_dtype="float16"))
    assert (export / "clip.irpa").read_bytes() == (TINY_DIR / "clip.irpa").read_bytes()
    assert (export / "vae.irpa").read_bytes() != (TINY_DIR / "vae_fp16.irpa").read_bytes()
    profile = tmp_path / "overflow.yaml"  # two workers (the cpu profile's layout)
    profile.write_text(f"extends: cpu\nname: overflow\nmodel: {export / 'model.json'}\n")
    run_dir = tmp_path / "run"
    proc = cli("run", "--profile", str(profile), "--count", "3", "--out", str(run_dir))
    assert proc.returncode == 2, proc.stderr
    assert "3 of 3 samples failed" in proc.stderr and "not finite" in proc.stderr
    assert "decode in fp32" in proc.stderr and "--vae-from DIR" in proc.stderr
    assert "Traceback" not in proc.stderr
    run = json.loads((run_dir / "run.json").read_text())
    assert sorted(f["qsl_idx"] for f in run["failed"]) == [0, 1, 2]
    assert all(f["worker"].startswith("w0") and "fp32" in f["fix"] for f in run["failed"])
    assert run["attempts"][-1]["deaths"] == []  # no worker was sunk by them
    assert not list((run_dir / "samples").glob("*.png"))  # none became an image
    assert "3 of 3 samples failed" in (run_dir / "summary.md").read_text()
    for command, refused in ((["aggregate", str(run_dir)], "no dataset is written"),
                             (["score", str(run_dir)], "scoring refused")):
        proc = cli(*command)
        assert proc.returncode == 2 and refused in proc.stderr, (command, proc.stderr)
        assert "decode in fp32" in proc.stderr

    user_conf = tmp_path / "user.conf"
    user_conf.write_text("stable-diffusion-xl.*.min_duration = 1000\n"
                         "stable-diffusion-xl.*.min_query_count = 2\n")
    proc = cli("mlperf", "--profile", str(profile), "--scenario", "offline", "--mode",
               "accuracy", "--count", "2", "--no-score", "--user-conf", str(user_conf),
               "--out", str(tmp_path / "mlperf"))
    assert proc.returncode == 2 and "could not be made" in proc.stderr, proc.stderr


def test_only_the_images_of_a_batch_that_are_not_finite_fail(tiny_compiled):
    """A batch of two whose second latent is NaN: the first image is the one it would have
    been, the second fails, saying where the NaN came from."""
    captions = load_captions()
    with open_pipeline(tiny_compiled[2]) as pipeline:
        prompts = [captions[0], captions[1]]
        good = pipeline.generate(prompts)
        pipeline.latents[1] = np.nan
        with pytest.raises(SampleFailures) as err:
            pipeline.generate(prompts)
    assert list(err.value.failed) == [1] and "latents" in err.value.failed[1]
    assert np.array_equal(err.value.images[0], good[0]) and not err.value.images[1].any()
    assert "UNet" in str(err.value.fix)


@pytest.mark.slow
def test_bench_reports_carry_the_decoders_precision(tmp_path, tiny_compiled):
    out = tmp_path / "bench"
    assert main(["bench", "--profile", "tiny", "--set", "model.vae_dtype=fp16",
                 "--no-throughput", "--stage", "vae", "--repetitions", "1",
                 "--out", str(out)]) == 0
    bench = json.loads((out / "bench.json").read_text())
    assert bench["model_precision"] == {"dtype": "float32", "vae_dtype": "float16"}
    assert "(model tiny-sdxl, fp32, VAE fp16)" in (out / "bench.md").read_text()


def _bash_words(line: str) -> list[str]:
    """The words bash reads from one printed command line (run as printf's arguments only)."""
    assert "\n" not in line.strip()
    out = subprocess.run(["bash", "-c", f"printf '%s\\0' {line.strip()}"],
                         capture_output=True, check=True).stdout.decode()
    return out.split("\0")[:-1]


@pytest.mark.slow
def test_a_hostile_vae_directory_name_stays_one_argument(checkpoint, tmp_path, capsys):
    """`--vae-from` reaches the printed export command (and a profile's `model.vae_from` the
    one `runner compile --dry-run` prints): quoted, it is one argument. (A VAE directory
    that is there: the dry run opens it as the export does.)"""
    hostile = tmp_path / "a b'$(touch pwned)\"\nc"
    shutil.copytree(checkpoint / "vae", hostile)
    assert main(["export", "sdxl", "--seeded", "--vae-dtype", "fp16", "--vae-from",
                 str(hostile), "--dry-run"]) == 0
    argv = _bash_words(capsys.readouterr().out)  # one line: bash's $'...' quoting
    assert argv[argv.index("--vae-from") + 1] == str(hostile)
    assert main(["compile", "--profile", "sdxl-seeded", "--set", "model.vae_dtype=fp16",
                 "--set", f"model.vae_from={json.dumps(str(hostile))}", "--dry-run"]) == 0
    words = shlex.split(capsys.readouterr().out)  # the export command's newline is quoted
    assert words[words.index("--vae-from") + 1] == str(hostile)
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


@pytest.mark.slow
def test_vae_mistakes_are_clear_errors(checkpoint, tmp_path, capsys):
    assert main(["compile", "--set", "model.vae_dtype=fp8", "--dry-run"]) == 2
    assert "`model.vae_dtype` is 'fp8'" in capsys.readouterr().err
    assert main(["compile", "--set", "model.vae_from=/models/vae", "--dry-run"]) == 2
    assert "is for a model the runner exports" in capsys.readouterr().err
    assert main(["export", "sdxl", "--from", str(checkpoint), "--vae-from",
                 str(tmp_path / "nowhere")]) == 2
    assert "VAE directory not found" in capsys.readouterr().err
    other = tmp_path / "vae8"
    shutil.copytree(checkpoint / "vae", other)
    config = json.loads((other / "config.json").read_text())
    config["latent_channels"] = 8
    (other / "config.json").write_text(json.dumps(config))
    assert main(["export", "sdxl", "--from", str(checkpoint), "--vae-from", str(other),
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "8-channel latents" in err and str(other / "config.json") in err


@pytest.mark.parametrize("dtype,vae_dtype", [("float16", "float32"), ("float32", "float16")])
def test_decoder_casts_say_nothing_and_round_as_diffusers_fp16_pipeline(dtype, vae_dtype):
    """The export's deliberate casts of the VAE print no diffusers warning (its `.to` said
    "modules ... should be kept in float32: []" twice per export), and give the weights
    diffusers' fp16 pipeline decodes with: rounded to half precision."""
    import logging

    import torch
    from diffusers import AutoencoderKL

    from runner.config.architecture import tiny_architecture
    from runner.model.export.sdxl_model import vae_decoder

    torch.manual_seed(0)
    vae = AutoencoderKL.from_config(tiny_architecture(0, 1, 2, 8).vae)
    weight = vae.decoder.conv_in.weight.detach().clone()
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("diffusers").addHandler(handler)
    try:
        decoder = vae_decoder(vae, dtype, vae_dtype)
    finally:
        logging.getLogger("diffusers").removeHandler(handler)
    assert said == []
    cast = decoder.vae.decoder.conv_in.weight
    assert cast.dtype == getattr(torch, vae_dtype)
    assert torch.equal(cast.float(), weight.half().float())
