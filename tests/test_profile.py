"""Profiles: extends/merge, overrides, and errors that name the file and field."""

import dataclasses
import json
import re

import pytest
import yaml
from cli_support import cli

from runner.base.errors import RunnerError
from runner.base.paths import CONFIGS_DIR
from runner.config.model_config import ModelConfig
from runner.config.profile import BUILTIN_MODELS, load_profile


def test_sku_profiles_extend_sdxl_with_their_layouts():
    p = load_profile("mi325x")
    assert p.target.backend == "hip" and p.target.chip == "gfx942"
    assert p.layout.partition == "cpx" and p.layout.devices == tuple(range(64))
    assert p.accuracy.fid == (23.01085758, 23.95007626)
    assert p.model.denoise == "produce_image_latents" and p.model.dtype == "float16"
    assert load_profile("mi355x").target.chip == "gfx950"


def test_cpu_profile_is_tiny_on_two_devices():
    p = load_profile("cpu")
    assert p.model.name == "tiny-sdxl" and p.layout.devices == (0, 1)


def test_set_overrides_any_field():
    p = load_profile("tiny", {"target.chip": "znver4", "layout.batch_size": 2})
    assert p.target.chip == "znver4" and p.layout.batch_size == 2


@pytest.mark.parametrize(("overrides", "field"), [
    ({"target.backend": "tpu"}, "target.backend"),
    ({"model": "builtin:huge"}, "model"),
    ({"accuracy.fid": [3, 1]}, "accuracy.fid"),
    ({"target.compile_flags": "--x"}, "target.compile_flags"),
    ({"target.tuning_spec": "/no/such/spec.mlir"}, "target.tuning_spec"),
    ({"layout.batch_size": 0}, "layout.batch_size"),
])
def test_bad_fields_name_file_and_field(overrides, field, tmp_path):
    """A bad value in the file names the file and the field; the same value given with
    `--set` names that `--set` (the user typed it there, the file is fine)."""
    with pytest.raises(RunnerError) as err:
        load_profile("tiny", overrides)
    assert err.value.where == f"--set {field}" and "tiny.yaml" not in str(err.value)
    assert err.value.fix
    section, _, key = field.partition(".")
    value = next(iter(overrides.values()))
    raw = {"extends": "tiny", section: {key: value} if key else value}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(RunnerError) as err:
        load_profile(str(path))
    assert err.value.where.startswith(f"{path}: ") and field in err.value.where


def test_unknown_profile_lists_known_ones():
    with pytest.raises(RunnerError) as err:
        load_profile("mi999x")
    assert "mi325x" in str(err.value.fix)
    assert "$RUNNER_PROFILE_PATH (not set)" in err.value.fix


def test_profile_path_dirs_come_first_and_may_extend_the_shipped_profile(tmp_path,
                                                                         monkeypatch):
    lab, other = tmp_path / "lab profiles", tmp_path / "other"
    lab.mkdir()
    other.mkdir()
    # A lab's mi325x replaces the shipped one by name, and extends it by the same name (the
    # next mi325x.yaml on the path: the shipped one).
    (lab / "mi325x.yaml").write_text("extends: mi325x\nlayout:\n  cpd: 2\n")
    (other / "mine.yaml").write_text("extends: mi325x\nname: mine\n")
    shipped = load_profile("mi325x")
    monkeypatch.setenv("RUNNER_PROFILE_PATH", f"{lab}::{other}")
    lab_profile = load_profile("mi325x")
    assert lab_profile.path == lab / "mi325x.yaml" and shipped.layout.cpd == 1
    assert lab_profile.layout == dataclasses.replace(shipped.layout, cpd=2)
    assert (lab_profile.model, lab_profile.target) == (shipped.model, shipped.target)
    mine = load_profile("mine")  # from the second directory, extending the lab's mi325x
    assert mine.name == "mine" and mine.layout.cpd == 2
    with pytest.raises(RunnerError) as err:
        load_profile("nope")
    assert "mine" in err.value.fix and "cpu" in err.value.fix and str(lab) in err.value.fix
    with pytest.raises(RunnerError) as err:
        load_profile("../mi325x")  # a name, not a path: never looked up outside the dirs
    assert "unknown profile" in str(err.value)
    # One more mi325x between the lab's and the shipped one: the lab's now extends that.
    (other / "mi325x.yaml").write_text("extends: cpu\nname: between\n")
    assert load_profile("mi325x").layout.backend == "cpu" and load_profile("mi325x").name == \
        "between"
    monkeypatch.setenv("RUNNER_PROFILE_PATH", str(tmp_path / "missing"))
    with pytest.raises(RunnerError) as err:
        load_profile("cpu")
    assert err.value.where == "$RUNNER_PROFILE_PATH" and "missing" in str(err.value)


def test_cli_exits_2_with_a_message_not_a_traceback():
    proc = cli("compile", "--profile", "nope")
    assert proc.returncode == 2
    assert "unknown profile 'nope'" in proc.stderr and "Traceback" not in proc.stderr


def write_profile(tmp_path, name, text):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "key", "closest"), [
    ("extends: tiny\nlayoutt:\n  devices: '0'\n", "layoutt", "layout"),
    ("extends: tiny\ntarget:\n  chpi: znver4\n", "target.chpi", "target.chip"),
    ("extends: tiny\nlayout:\n  batchsize: 2\n", "layout.batchsize", "layout.batch_size"),
    ("extends: tiny\naccuracy:\n  fid_stats: x.npz\n", "accuracy.fid_stats",
     "accuracy.fid_statistics"),
    ("extends: tiny\nmlperf:\n  sytem: x\n", "mlperf.sytem", "mlperf.system"),
])
def test_unknown_profile_keys_name_the_key_the_file_and_the_closest_one(tmp_path, text, key,
                                                                        closest):
    path = write_profile(tmp_path, "typo", text)
    with pytest.raises(RunnerError) as err:
        load_profile(str(path))
    assert err.value.where == f"{path}: {key}"
    assert f"unknown field `{key}`" in str(err.value)
    assert f"did you mean `{closest}`?" in err.value.fix


def test_a_typo_in_a_parent_profile_names_the_parent_file(tmp_path):
    parent = write_profile(tmp_path, "parent", "extends: tiny\ntraget:\n  chip: host\n")
    child = write_profile(tmp_path, "child", f"extends: {parent}\nname: child\n")
    with pytest.raises(RunnerError) as err:
        load_profile(str(child))
    assert err.value.where == f"{parent}: traget" and "`target`" in err.value.fix


def test_user_named_keys_below_a_section_are_not_checked():
    p = load_profile("tiny", {"target.submodel_flags": {"unet": ["--x"]}})
    assert p.target.submodel_flags == {"unet": ("--x",)}


@pytest.mark.parametrize(("dotted", "says", "fix"), [
    ("foo.bar", "unknown field `foo`", "valid keys: accuracy, count, layout"),
    ("layoutt.cpd", "unknown field `layoutt`", "did you mean `layout`?"),
    ("layout.cpdd", "unknown field `layout.cpdd`", "did you mean `layout.cpd`?"),
    ("target.chipp", "unknown field `target.chipp`", "did you mean `target.chip`?"),
    ("", "has an empty key", "--set SECTION.KEY=VALUE"),
    ("layout..cpd", "has an empty key", "--set SECTION.KEY=VALUE"),
    ("name.first", "`name` holds a value", "--set name=VALUE"),
    ("extends", "resolved before overrides", "--profile"),
])
def test_unknown_set_keys_are_errors(dotted, says, fix):
    with pytest.raises(RunnerError) as err:
        load_profile("tiny", {dotted: 1})
    assert says in str(err.value) and fix in err.value.fix
    assert "--set" in err.value.where and "tiny.yaml" in err.value.where


@pytest.mark.parametrize("setting", ["foo.bar=1", "=3", "layoutt.cpd=2"])
def test_cli_rejects_unknown_set_keys_with_exit_2(setting):
    proc = cli("plan", "--profile", "tiny", "--set", setting)
    assert proc.returncode == 2, proc.stdout
    assert "--set" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("change", "key", "closest"), [
    ({"stepz": 4}, "stepz", "steps"),
    ({"tokenizer": {"dir": "tokenizer", "pad_token": ["a", "b"]}}, "tokenizer.pad_token",
     "tokenizer.pad_tokens"),
])
def test_unknown_model_config_keys_name_the_key_the_file_and_the_closest_one(tmp_path, change,
                                                                            key, closest):
    raw = json.loads(BUILTIN_MODELS["tiny"].read_text())
    path = tmp_path / "model.json"
    path.write_text(json.dumps({**raw, **change}))
    with pytest.raises(RunnerError) as err:
        ModelConfig.load(path)
    assert err.value.where == f"{path}: {key}" and f"did you mean `{closest}`?" in err.value.fix


def test_unknown_submodel_keys_are_errors(tmp_path):
    raw = json.loads(BUILTIN_MODELS["tiny"].read_text())
    raw["submodels"]["vae"]["weigths"] = "x.irpa"
    path = tmp_path / "model.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(RunnerError) as err:
        ModelConfig.load(path)
    assert err.value.where == f"{path}: submodels.vae.weigths"
    assert "did you mean `submodels.vae.weights`?" in err.value.fix


def test_model_is_a_source_or_a_mapping_with_its_dtype(tmp_path, monkeypatch):
    """`model: X` is short for `model: {source: X}` where it meets a mapping: extends merge
    the two forms, `--set model.dtype` opens a string into the mapping, `--set model=Y`
    replaces only the source of a mapping. No export runs: the cache is empty."""
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    parent = tmp_path / "parent.yaml"
    parent.write_text("extends: tiny\nname: parent\nmodel: {source: seeded:sdxl, dtype: fp32}\n")
    child = tmp_path / "child.yaml"
    child.write_text(f"extends: {parent}\nname: child\nmodel: seeded:sdxl\n")
    assert load_profile(str(child)).raw["model"] == {"source": "seeded:sdxl", "dtype": "fp32"}
    assert load_profile(str(child)).model.dtype == "float32"
    p = load_profile("tiny", {"model": "seeded:sdxl", "model.dtype": "fp32"})
    assert p.raw["model"] == {"source": "seeded:sdxl", "dtype": "fp32"}
    assert p.model.dtype == "float32" and "-float32-" in p.model.base_dir.name
    p = load_profile(str(parent), {"model": "seeded:sdxl"})
    assert p.raw["model"] == {"source": "seeded:sdxl", "dtype": "fp32"}
    assert load_profile("tiny", {"model": "seeded:sdxl"}).model.dtype == "float16"
    with pytest.raises(RunnerError, match=r"`model\.dtype` is \[1\]"):
        load_profile("tiny", {"model.dtype": [1]})
    assert load_profile(str(parent), {"model": {"dtype": "fp16"}}).model.dtype == "float16"
    with pytest.raises(RunnerError, match="missing `model`"):
        load_profile(str(parent), {"model": {"source": None}})


def test_accuracy_metrics_is_a_profile_field():
    assert load_profile("tiny").accuracy.metrics == ("fid", "clip")
    assert load_profile("tiny", {"accuracy.metrics": ["clip"]}).accuracy.metrics == ("clip",)
    assert load_profile("tiny", {"accuracy.metrics": "clip,fid"}).accuracy.metrics == (
        "fid", "clip")
    assert load_profile("tiny", {"accuracy.metrics": None}).accuracy.metrics == ("fid", "clip")
    with pytest.raises(RunnerError, match=r"accuracy\.metrics") as e:
        load_profile("tiny", {"accuracy.metrics": ["is"]})
    assert "fid, clip or fid,clip" in str(e.value)
    sdxl_seeded = load_profile("sdxl-seeded").accuracy
    assert not sdxl_seeded.has_ranges() and load_profile("tiny").accuracy.has_ranges(("clip",))


LAB_PROFILES = ("h100", "h100-seeded", "mi300x", "mi325x", "mi355x")


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml")))
def test_a_plain_run_makes_the_profiles_count(name):
    """`runner run --profile P` with no --count/--samples/--ids makes the profile's `count`:
    MLPerf's 5000 on the lab profiles (it was 32 on every profile, so a lab run ended SUBSET,
    not judged, against ranges set for 5000), 32 on the others, as --count's help says."""
    from runner.cli.grammar import PROFILE_COUNT
    from runner.config.profile import DEFAULT_COUNT, MLPERF_SAMPLES

    count = MLPERF_SAMPLES if name in LAB_PROFILES else DEFAULT_COUNT
    assert load_profile(name).count == count
    assert (name in PROFILE_COUNT) == (name in LAB_PROFILES)
    # seeded weights (not scored): a dry run needs no checkpoint, download or scoring file
    assert _dry_run_count(name) == count
    assert _dry_run_count(name, "--count", "3") == 3  # --count wins


def _dry_run_count(name: str, *flags: str) -> int:
    """The samples `runner run --dry-run` plans: its heading where the preflight passes, the
    preflight's disk line where a GPU layout's tool is absent here (exit 2 before the plan)."""
    ran = cli("run", "--profile", name, *flags, "--set", "model=seeded:tiny", "--no-score",
              "--dry-run", "--out", "runs/x")
    said = ran.stdout + ran.stderr
    if ran.returncode == 2:
        assert "preflight failed GPUs: no " in said and "-smi on PATH" in said, said
        return int(re.search(r"needed for (\d+) sample\(s\)", said).group(1))
    assert ran.returncode == 0, said
    return int(re.search(rf"# runner run: (\d+) samples of profile {name} ", said).group(1))


@pytest.mark.parametrize(("value", "says"), [(0, "`count` is 0"), (5001, "`count` is 5001"),
                                             ("all", "`count` is 'all'"),
                                             (True, "`count` is True")])
def test_a_bad_count_names_the_field_and_the_fix(value, says):
    with pytest.raises(RunnerError) as err:
        load_profile("tiny", {"count": value})
    assert says in str(err.value) and err.value.where == "--set count"
    assert "from 1 to 5000" in err.value.fix
