"""Seeded weights from a spec (runner.model.seeded_weights): the generator gives the same
bytes in any process, with or without torch, in any thread count; rules follow torch's init;
a model.json's missing `.irpa` is written from its spec, checked against the sha256 it
records, and a damaged spec, a wrong file, a read-only or full disk are clear errors."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from host_support import tmpfs
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.base.fileio import sha256_file
from runner.config.exports import SEEDED_REFUSAL, WEIGHTS_SPEC, model_config
from runner.config.model_config import ModelConfig
from runner.model.seeded_weights import (
    BLOCK,
    SeededTensor,
    WeightsSpec,
    derive_rule,
    ensure_weights,
    generate_seeded,
    read_spec,
    write_archive,
    write_spec,
)

SPEC = WeightsSpec(7, {
    "clip.irpa": (SeededTensor("clip.w", (3, 5), "float32", "uniform", -0.25, 0.5),
                  SeededTensor("clip.norm", (5,), "float32", "constant", 1.0)),
    "unet.irpa": (SeededTensor("unet.w", (BLOCK + 1000,), "float16", "uniform", -1.0, 1.0),
                  SeededTensor("unet.b", (), "float16", "constant", 0.0)),
    "vae.irpa": (SeededTensor("vae.w", (2, 2, 3, 3), "float32", "uniform", -0.1, 0.1),),
})
# sha256 of the bytes `generate` gives for SPEC's tensors: the generator's contract (numpy's
# PCG64 and SeedSequence, whose streams numpy keeps stable, then IEEE float32 arithmetic),
# byte-exact on every machine, as the seeded weights' fingerprints are.
FINGERPRINTS = {
    "clip.w": "404b006cd5951bdfbcee38cb076355dafca3c65f76449c7a14b3c6e22cd80fae",
    "unet.w": "36e18f1e2e0bf5bc0cf2e857efa2af6347fcdcdf71fb648f34d85cd62036e18b",
}


def _digests(spec: WeightsSpec) -> dict[str, str]:
    return {t.name: hashlib.sha256(a.tobytes()).hexdigest()
            for tensors in spec.archives.values()
            for t, a in zip(tensors, generate_seeded(tensors, spec.seed), strict=True)}


def test_values_follow_the_rule_and_are_the_same_in_any_thread_count():
    values = generate_seeded(SPEC.archives["unet.irpa"], SPEC.seed, workers=1)
    assert values[0].dtype == np.dtype("<f2") and values[0].shape == (BLOCK + 1000,)
    assert values[1].shape == () and values[1] == 0
    w = values[0].astype(np.float64)
    assert w.min() >= -1.0 and w.max() <= 1.0 and abs(w.mean()) < 0.01
    assert abs(w.std() - 2 / math.sqrt(12)) < 0.01  # uniform(-1, 1)
    again = generate_seeded(SPEC.archives["unet.irpa"], SPEC.seed, workers=4)
    assert values[0].tobytes() == again[0].tobytes()
    # A stream per block: the first block does not depend on the tensor's length.
    short = SeededTensor("unet.w", (BLOCK,), "float16", "uniform", -1.0, 1.0)
    assert generate_seeded((short,), SPEC.seed)[0].tobytes() == values[0][:BLOCK].tobytes()
    other = generate_seeded((SeededTensor("unet.v", (BLOCK,), "float16", "uniform", -1.0, 1.0),),
                            SPEC.seed)[0]
    assert not np.array_equal(other, values[0][:BLOCK])  # the name keys the stream
    clip = generate_seeded(SPEC.archives["clip.irpa"], SPEC.seed)
    assert clip[1].tolist() == [1.0] * 5 and clip[0].dtype == np.dtype("<f4")


def test_the_same_bytes_in_a_process_without_torch():
    """The generator needs numpy only: a process that cannot import torch gives the same
    bytes (the GPU node regenerates SDXL's weights where torch may be absent)."""
    code = ("import sys, json; sys.modules['torch'] = None\n"
            "from test_seeded_weights import SPEC, _digests\n"
            "print(json.dumps(_digests(SPEC)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": f"{REPO}:{REPO / 'tests'}",
                                         "PATH": "/usr/bin:/bin"}, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    mine = _digests(SPEC)
    assert json.loads(proc.stdout) == mine
    assert {k: mine[k] for k in FINGERPRINTS} == FINGERPRINTS


def test_rules_follow_torchs_initialization():
    """Uniform where torch drew uniform(+-1/sqrt(fan_in)) (a Linear layer), with that bound;
    constants stay exactly constant; normal draws keep their scale."""
    import torch

    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 64)
    init, low, high = derive_rule(linear.weight.detach().numpy())
    bound = 1 / math.sqrt(256)
    assert init == "uniform" and max(abs(high - bound), abs(low + bound)) < 0.05 * bound
    assert derive_rule(torch.nn.LayerNorm(64).weight.detach().numpy()) == ("constant", 1.0, 0.0)
    assert derive_rule(np.zeros(7, np.float16)) == ("constant", 0.0, 0.0)
    normal = torch.empty(4096).normal_(0, 0.02).numpy()
    init, low, high = derive_rule(normal)
    assert init == "uniform" and abs((high - low) / math.sqrt(12) - normal.std()) < 1e-4


def test_values_generated_into_given_arrays_are_the_same_bytes():
    """`generate(out=...)` fills a model's own storage: the bytes it gives new arrays, every
    element written (constants too); an array without room for a tensor is refused."""
    tensors = (*SPEC.archives["unet.irpa"], *SPEC.archives["clip.irpa"])
    fresh = generate_seeded(tensors, SPEC.seed)
    given = [np.full(a.shape, 7, a.dtype) for a in fresh]
    assert all(g is a for g, a in zip(given, generate_seeded(tensors, SPEC.seed, out=given),
                                       strict=True))
    assert [a.tobytes() for a in given] == [a.tobytes() for a in fresh]
    for wrong in (np.empty(5, "<f4")[::-1], np.empty((5, 1), "<f4"), np.empty(5, "<f2")):
        with pytest.raises(ValueError, match=r"clip\.norm: no room"):
            generate_seeded(SPEC.archives["clip.irpa"][1:], SPEC.seed, out=[wrong])


def _rule_by_definition(values: np.ndarray) -> tuple[str, float, float]:
    """derive_rule as its docstring defines it, with numpy's own mean and std."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or v.min() == v.max():
        return "constant", float(v[0]) if v.size else 0.0, 0.0
    mean, half = float(v.mean()), math.sqrt(3.0) * float(v.std())
    low, high = float(f"{mean - half:.4g}"), float(f"{mean + half:.4g}")
    return ("constant", float(f"{mean:.4g}"), 0.0) if low >= high else ("uniform", low, high)


@pytest.mark.parametrize("dtype", ["<f2", "<f4"])
def test_rules_are_numpys_mean_and_std_to_the_last_bit(dtype):
    """derive_rule computes the mean and deviation in place (one float64 array, reused
    through `scratch`): the same float64 operations as numpy's mean() and std(), so the
    same rule as those give, for contiguous, reshaped and strided values alike."""
    rng = np.random.default_rng(5)
    scratch = np.empty(70_000)
    for n in (1, 2, 3, 129, 4099, 65_537):
        for scale in (1e-4, 0.02, 3.0):
            values = (rng.standard_normal(n) * scale + rng.uniform(-1, 1)).astype(dtype)
            for v in (values, values.reshape(-1, 1), values[::2]):
                expected = _rule_by_definition(v)
                assert derive_rule(v) == expected and derive_rule(v, scratch) == expected
    assert derive_rule(np.full(9, 0.3, dtype), scratch)[:2] == ("constant",
                                                                float(np.asarray(0.3, dtype)))


def test_spec_round_trips_and_damage_is_a_clear_error(tmp_path):
    path = tmp_path / WEIGHTS_SPEC
    write_spec(SPEC, path)
    assert read_spec(path) == SPEC
    lines = [line.strip().rstrip(",") for line in path.read_text().splitlines()]
    assert all(json.dumps(t.row()) in lines for ts in SPEC.archives.values() for t in ts)
    raw = json.loads(path.read_text())
    for damage, message in [
        (lambda r: r.update(generator="mt19937"), "written by another version"),
        (lambda r: r.update(seed="7"), "the seed is not an integer"),
        (lambda r: r["archives"]["clip.irpa"][0].__setitem__(1, [3, -5]), "is not [name, shape"),
        (lambda r: r["archives"]["clip.irpa"][0].__setitem__(3, ["normal", 0, 1]),
         "is not [name, shape"),
        (lambda r: r["archives"]["vae.irpa"][0][3].__setitem__(1, "0.1"),
         "is not [name, shape"),
    ]:
        bad = json.loads(json.dumps(raw))
        damage(bad)
        path.write_text(json.dumps(bad))
        with pytest.raises(RunnerError, match="the weights spec is damaged") as e:
            read_spec(path)
        assert message in str(e.value) and str(path) in e.value.where


def seeded_model_dir(root: Path) -> Path:
    """A seeded export's directory as `runner export` leaves it: model.json naming the spec
    and recording the sha256 of every weights file, written from SPEC."""
    root.mkdir(parents=True, exist_ok=True)
    write_spec(SPEC, root / WEIGHTS_SPEC)
    config = model_config("sdxl-seeded-test", "float32", [1], [1], 128, 16, 20, 64,
                          {"source": "seeded:tiny", "no_scoring": SEEDED_REFUSAL,
                           "weights_spec": WEIGHTS_SPEC})
    files = {WEIGHTS_SPEC: sha256_file(root / WEIGHTS_SPEC)}
    for name, tensors in SPEC.archives.items():
        files[name] = write_archive(tensors, generate_seeded(tensors, SPEC.seed), root / name)
    config["files"] = files
    (root / "model.json").write_text(json.dumps(config))
    return root / "model.json"


def test_missing_weights_are_written_from_the_spec_byte_identical(tmp_path, capsys):
    import iree.runtime as rt

    model = ModelConfig.load(seeded_model_dir(tmp_path / "export"))
    exported = {n: (model.base_dir / n).read_bytes() for n in SPEC.archives}
    for name in ("clip.irpa", "unet.irpa"):
        (model.base_dir / name).unlink()
    written = ensure_weights(model)
    assert [m.archive for m in written] == ["clip.irpa", "unet.irpa"]
    assert {n: (model.base_dir / n).read_bytes() for n in SPEC.archives} == exported
    assert "weights: wrote clip.irpa, unet.irpa" in capsys.readouterr().err
    assert (model.base_dir / "unet.irpa").stat().st_mode & 0o777 == 0o644
    assert ensure_weights(model) == []  # all there: nothing to do
    index = rt.ParameterIndex()
    index.load(str(model.base_dir / "clip.irpa"))
    loaded = {k: rt.parameter_index_entry_as_numpy_ndarray(e) for k, e in index.items()}
    assert loaded["clip.norm"].tolist() == [1.0] * 5 and loaded["clip.w"].shape == (3, 5)
    assert not list(model.base_dir.glob(".*.tmp"))


def test_dry_run_writes_nothing_and_a_wrong_spec_is_refused(tmp_path):
    model = ModelConfig.load(seeded_model_dir(tmp_path / "export"))
    (model.base_dir / "vae.irpa").unlink()
    said: list[str] = []
    assert [m.archive for m in ensure_weights(model, dry_run=True, say=said.append)] == [
        "vae.irpa"]
    assert said[0].startswith(f"would write {model.base_dir / 'vae.irpa'} (1 tensors")
    assert not (model.base_dir / "vae.irpa").exists()
    # Another seed: the file written would not be the exported one, so it is not installed.
    spec = json.loads((model.base_dir / WEIGHTS_SPEC).read_text())
    spec["seed"] = 8
    (model.base_dir / WEIGHTS_SPEC).write_text(json.dumps(spec))
    with pytest.raises(RunnerError, match="not the one this export wrote"):
        ensure_weights(model)
    raw = json.loads(model.path.read_text())
    raw["files"][WEIGHTS_SPEC] = sha256_file(model.base_dir / WEIGHTS_SPEC)
    model.path.write_text(json.dumps(raw))
    with pytest.raises(RunnerError, match="not the exported file") as e:
        ensure_weights(ModelConfig.load(model.path))
    assert e.value.where == str(model.base_dir / "vae.irpa")
    assert not (model.base_dir / "vae.irpa").exists() and not list(model.base_dir.glob(".*tmp"))


def test_read_only_and_full_disks_are_clear_errors(tmp_path):
    source = seeded_model_dir(tmp_path / "export").parent
    with tmpfs(tmp_path / "full", "size=64k") as full:
        for name in ("model.json", WEIGHTS_SPEC):
            (full / name).write_bytes((source / name).read_bytes())
        with pytest.raises(RunnerError, match="cannot write the weights") as e:
            ensure_weights(ModelConfig.load(full / "model.json"))
        assert "make room for" in e.value.fix and not list(full.glob(".*.tmp"))
    with tmpfs(tmp_path / "ro", "size=1m") as readonly:
        for name in ("model.json", WEIGHTS_SPEC):
            (readonly / name).write_bytes((source / name).read_bytes())
        subprocess.run(["mount", "-o", "remount,ro", str(readonly)], check=True)
        with pytest.raises(RunnerError, match=r"cannot write in") as e:
            ensure_weights(ModelConfig.load(readonly / "model.json"))
        assert "writable" in e.value.fix


def test_export_weights_writes_what_the_spec_describes(tmp_path, capsys):
    """`runner export weights --from DIR`, in a directory with a hostile name: a dry run
    lists, a run writes (byte-identical), a model without a spec is refused."""
    from runner.cli.main import main

    model = seeded_model_dir(tmp_path / "ex $(touch pwned) 'q'\nport")
    exported = (model.parent / "unet.irpa").read_bytes()
    (model.parent / "unet.irpa").unlink()
    assert main(["export", "weights", "--from", str(model.parent), "--dry-run"]) == 0
    assert f"would write {model.parent / 'unet.irpa'} (2 tensors" in capsys.readouterr().out
    assert not (model.parent / "unet.irpa").exists()
    assert main(["export", "weights", "--from", str(model)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(model.parent / "unet.irpa") and "weights: wrote unet.irpa" in err
    assert (model.parent / "unet.irpa").read_bytes() == exported
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
    assert main(["export", "weights", "--from", str(model.parent)]) == 0
    assert "nothing to write" in capsys.readouterr().err
    assert main(["export", "weights", "--from", str(REPO / "runner" / "assets" / "tiny")]) == 2
    assert "this model has no weights spec" in capsys.readouterr().err
    assert main(["export", "weights"]) == 2
    assert "--from DIR" in capsys.readouterr().err


def test_exports_with_the_same_weights_share_one_file(tmp_path, capsys):
    """Two exports naming archives of the same sha256 (seeded SDXL's fp32- and fp16-VAE
    exports share CLIP and UNet): the second's are hard links to the first's, no second
    write; a file the other export lacks is written."""
    first = ModelConfig.load(seeded_model_dir(tmp_path / "cache" / "exports" / "a"))
    second = ModelConfig.load(seeded_model_dir(tmp_path / "cache" / "exports" / "b"))
    exported = {n: (first.base_dir / n).read_bytes() for n in SPEC.archives}
    for model in (first, second):
        for name in SPEC.archives:
            (model.base_dir / name).unlink()
    (second.base_dir / "vae.irpa").write_bytes(exported["vae.irpa"])  # b's own, kept
    assert [m.archive for m in ensure_weights(first)] == ["clip.irpa", "unet.irpa", "vae.irpa"]
    assert "weights: wrote clip.irpa, unet.irpa, vae.irpa" in capsys.readouterr().err
    assert [m.archive for m in ensure_weights(second)] == ["clip.irpa", "unet.irpa"]
    assert "weights: linked clip.irpa, unet.irpa" in capsys.readouterr().err
    for name in ("clip.irpa", "unet.irpa"):
        a, b = first.base_dir / name, second.base_dir / name
        assert a.stat().st_ino == b.stat().st_ino and b.read_bytes() == exported[name]
    assert (first.base_dir / "vae.irpa").stat().st_ino != \
        (second.base_dir / "vae.irpa").stat().st_ino


@pytest.mark.slow
def test_seeded_tiny_fp32_and_fp16_vae_exports_write_clip_and_unet_once(tmp_path):
    """The small seeded model exported with the VAE in fp32 and in fp16 (two exports, as
    the GPU check's carry holds for SDXL): on the machine that writes the weights from
    their specs, the second export's CLIP and UNet are the first's files (one inode each),
    byte-identical to what the exporter wrote; each VAE is its own."""
    pytest.importorskip("torch")
    from cli_support import cli

    env = {**os.environ, "PYTHONPATH": str(REPO), "RUNNER_PROGRESS": "off"}
    carry = tmp_path / "carry"
    for vae in ("fp32", "fp16"):
        made = cli("compile", "--profile", "tiny", "--set", "model=seeded:tiny", "--set",
                   "model.dtype=fp32", "--set", f"model.vae_dtype={vae}", "--batch-sizes", "1",
                   "--out", carry, env=env)
        assert made.returncode == 0, made.stderr[-3000:]
    exports = sorted((carry / "exports").iterdir())
    assert len(exports) == 2 and not list(carry.glob("exports/*/*.irpa"))
    there = {**env, "RUNNER_CACHE_DIR": str(carry)}
    for export in exports:
        done = cli("export", "weights", "--from", export, env=there)
        assert done.returncode == 0, done.stderr[-3000:]
    a, b = exports
    for name in ("clip.irpa", "unet.irpa"):
        assert (a / name).stat().st_ino == (b / name).stat().st_ino, name
        recorded = json.loads((b / "model.json").read_text())["files"][name]
        assert sha256_file(b / name) == recorded
    assert (a / "vae.irpa").stat().st_ino != (b / "vae.irpa").stat().st_ino
