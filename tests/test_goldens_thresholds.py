"""Threshold semantics: parsed from IREE CI's `threshold_args`, and agreeing with the real
`iree-run-module --expected_output` verdict on the same files."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from runner.base.errors import RunnerError
from runner.goldens.thresholds import Thresholds, compare
from runner.model.tensors import write_tensor


def test_parse_threshold_args():
    t = Thresholds.parse(["--expected_f16_threshold=1.0f"])
    assert t.atol["f16"] == 1.0 and t.atol["f32"] == 1e-4 and t.rtol == 1e-5
    t = Thresholds.parse(["--expected_f32_threshold=0.02", "--expected_rtol=0",
                          "--equality_mode=exact", "--some_other_flag=1"])
    assert t.atol["f32"] == 0.02 and t.rtol == 0 and t.mode == "exact"
    assert t.passthrough == ("--some_other_flag=1",)
    assert Thresholds.parse([]).atol == {"f16": 1e-3, "f32": 1e-4, "f64": 1e-4, "bf16": 1e-2}
    with pytest.raises(RunnerError, match="unknown threshold type 'f8'") as e:
        Thresholds.parse(["--expected_f8_threshold=1"], "sdxl/vae_cpu.json: threshold_args")
    assert "sdxl/vae_cpu.json: threshold_args" in str(e.value)
    with pytest.raises(RunnerError, match="cannot read the number"):
        Thresholds.parse(["--expected_f16_threshold=big"])
    with pytest.raises(RunnerError, match="finite number >= 0"):
        Thresholds.parse(["--expected_f16_threshold=-1"])


def test_report_names_the_worst_elements():
    expected = np.zeros((2, 3, 4), np.float16)
    actual = expected.copy()
    actual[1, 2, 3] = 0.5
    actual[0, 1, 0] = -0.25
    actual[0, 0, 0] = 0.0005  # within the default f16 threshold
    c = compare(0, "out.bin", expected, actual, Thresholds.parse([]))
    assert not c.passed and c.mismatches == 2 and c.elements == 24
    assert [w.index for w in c.worst] == [(1, 2, 3), (0, 1, 0)]
    assert c.worst[0].actual == 0.5 and c.worst[0].expected == 0.0
    assert c.max_abs == 0.5 and c.mean_abs == pytest.approx((0.5 + 0.25 + 0.0005) / 24, 1e-3)
    text = c.describe()
    assert "2/24 elements over tolerance" in text and "at [1, 2, 3]: expected 0, actual 0.5" in text
    ok = compare(0, "out.bin", expected, actual, Thresholds.parse(["--expected_f16_threshold=1"]))
    assert ok.passed and ok.worst == () and ok.max_abs == 0.5


def test_shape_and_dtype_mismatch_fail_clearly():
    c = compare(1, "o.bin", np.zeros((2, 2), np.float16), np.zeros(4, np.float16), Thresholds())
    assert not c.passed and "returned 4xf16, the golden is 2x2xf16" in c.error
    c = compare(1, "o.bin", np.zeros(4, np.float16), np.zeros(4, np.float32), Thresholds())
    assert not c.passed and "4xf32" in c.error


def test_nan_and_integers():
    e = np.array([np.nan, 1.0, np.inf], np.float32)
    assert compare(0, "x", e, e.copy(), Thresholds()).passed  # NaN == NaN, inf == inf
    a = np.array([1.0, 1.0, np.inf], np.float32)
    c = compare(0, "x", e, a, Thresholds())
    assert not c.passed and c.mismatches == 1 and c.worst[0].index == (0,)
    ints = np.array([1, 2, 3], np.int64)
    assert not compare(0, "x", ints, ints + np.array([0, 0, 1]), Thresholds()).passed


CASES = [  # (expected, actual, threshold_args)
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], []),
    ([1.0, 2.0, 3.0], [1.0, 2.05, 3.0], []),
    ([1.0, 2.0, 3.0], [1.0, 2.05, 3.0], ["--expected_f32_threshold=0.1"]),
    ([100.0, 0.0, 3.0], [100.0009, 0.0, 3.0], []),  # inside atol + rtol*|e| = 0.0011
    ([100.0, 0.0, 3.0], [100.0013, 0.0, 3.0], []),  # outside it
    ([100.0, 0.0, 3.0], [100.0009, 0.0, 3.0], ["--expected_rtol=0"]),
    ([1.0, 2.0, 3.0], [1.0, 2.00001, 3.0], ["--equality_mode=exact"]),
    ([float("nan"), 2.0, 3.0], [float("nan"), 2.0, 3.0], []),
    ([float("nan"), 2.0, 3.0], [0.0, 2.0, 3.0], []),
]


@pytest.fixture(scope="module")
def identity_vmfb(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("id")
    mlir = tmp / "id.mlir"
    mlir.write_text("func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
                    "  return %a : tensor<3xf32>\n}\n")
    subprocess.run(["iree-compile", str(mlir), "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "-o",
                    str(tmp / "id.vmfb")], check=True)
    return tmp / "id.vmfb"


@pytest.mark.parametrize("case", range(len(CASES)))
def test_same_verdict_as_iree_run_module(tmp_path, identity_vmfb, case):
    expected, actual, args = CASES[case]
    e, a = np.array(expected, np.float32), np.array(actual, np.float32)
    write_tensor(tmp_path / "e.bin", e)
    write_tensor(tmp_path / "a.bin", a)
    tool = subprocess.run(["iree-run-module", "--device=local-sync", f"--module={identity_vmfb}",
                           "--function=main", f"--input=3xf32=@{tmp_path / 'a.bin'}",
                           f"--expected_output=3xf32=@{tmp_path / 'e.bin'}", *args],
                          capture_output=True, text=True, check=False)
    ours = compare(0, "e.bin", e, a, Thresholds.parse(args))
    assert ours.passed == (tool.returncode == 0), (args, tool.stdout, tool.stderr)
