"""Profiles: extends/merge, overrides, and errors that name the file and field."""

import subprocess
import sys

import pytest

from runner.errors import RunnerError
from runner.profile import load_profile


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
def test_bad_fields_name_file_and_field(overrides, field):
    with pytest.raises(RunnerError) as err:
        load_profile("tiny", overrides)
    assert field in str(err.value) and "tiny.yaml" in str(err.value)


def test_unknown_profile_lists_known_ones():
    with pytest.raises(RunnerError) as err:
        load_profile("mi999x")
    assert "mi325x" in str(err.value.fix)


def test_cli_exits_2_with_a_message_not_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "runner", "compile", "--profile", "nope"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "unknown profile 'nope'" in proc.stderr and "Traceback" not in proc.stderr
