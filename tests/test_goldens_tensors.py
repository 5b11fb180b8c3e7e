"""Tensor files: raw .bin (shape from `value`), .npy and single-tensor .irpa, read and written."""

from __future__ import annotations

import subprocess

import ml_dtypes
import numpy as np
import pytest

from runner.base.errors import RunnerError
from runner.model.tensors import TensorSpec, iree_type, read_tensor, write_tensor

DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16,
          "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
          "i1": np.bool_}


def sample(dtype: str, shape=(2, 3, 4)) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dtype == "i1":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in ("i8", "i16", "i32", "i64", "u8"):
        return rng.integers(0, 100, shape).astype(DTYPES[dtype])
    return rng.standard_normal(shape).astype(DTYPES[dtype])


def test_value_spelling():
    spec = TensorSpec.parse("2x64x2048xf16")
    assert spec.shape == (2, 64, 2048) and spec.dtype == "f16" and spec.nbytes == 2 * 64 * 2048 * 2
    assert str(TensorSpec.parse("1x64xi64")) == "1x64xi64"
    assert TensorSpec.parse("f32").shape == () and TensorSpec.parse("f32").size == 1
    assert TensorSpec.parse("4xsi8").same_as(TensorSpec.parse("4xi8"))
    for bad in ("2x64", "2x64xf17", "x2xf16", "2xx3xf32", ""):
        with pytest.raises(RunnerError, match="cannot read tensor type") as e:
            TensorSpec.parse(bad, "t.json: inputs[0].value")
        assert "t.json: inputs[0].value" in str(e.value)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("suffix", [".bin", ".npy", ".irpa"])
def test_round_trip(tmp_path, dtype, suffix):
    array = sample(dtype)
    path = write_tensor(tmp_path / f"t{suffix}", array)
    spec = TensorSpec.parse(f"2x3x4x{dtype}")
    # bf16 has no .npy type code: such a file needs its `value`, like a raw .bin.
    back = read_tensor(path, spec if suffix == ".bin" or dtype == "bf16" else None)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()
    assert iree_type(back.dtype) == dtype


def test_bin_is_raw_little_endian(tmp_path):
    array = np.arange(6, dtype=">f4").reshape(2, 3)  # big-endian in memory
    path = write_tensor(tmp_path / "x.bin", array)
    assert path.read_bytes() == np.arange(6, dtype="<f4").tobytes()
    assert read_tensor(path, TensorSpec.parse("2x3xf32")).tolist() == array.tolist()


def test_errors_name_the_file(tmp_path):
    path = write_tensor(tmp_path / "x.bin", np.zeros((2, 3), np.float16))
    with pytest.raises(RunnerError, match="has 12 bytes, a 2x4xf16 tensor has 16") as e:
        read_tensor(path, TensorSpec.parse("2x4xf16"))
    assert str(path) in str(e.value)
    with pytest.raises(RunnerError, match="needs a shape and type"):
        read_tensor(path)
    npy = write_tensor(tmp_path / "x.npy", np.zeros((2, 3), np.float16))
    with pytest.raises(RunnerError, match="holds a 2x3xf16 tensor, the test says 2x3xf32"):
        read_tensor(npy, TensorSpec.parse("2x3xf32"))
    bf16 = write_tensor(tmp_path / "b.npy", sample("bf16"))
    with pytest.raises(RunnerError, match="untyped 2-byte values"):
        read_tensor(bf16)
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    with pytest.raises(RunnerError, match=r"not a readable \.npy"):
        read_tensor(tmp_path / "junk.npy")
    with pytest.raises(RunnerError, match="not found"):
        read_tensor(tmp_path / "missing.bin", TensorSpec.parse("1xf32"))


def test_irpa_must_hold_one_tensor(tmp_path):
    import iree.runtime as rt

    index = rt.ParameterIndex()
    rt.parameter_index_add_numpy_ndarray(index, "a", np.zeros(3, np.float32))
    rt.parameter_index_add_numpy_ndarray(index, "b", np.ones(3, np.float32))
    index.create_archive_file(str(tmp_path / "two.irpa"))
    with pytest.raises(RunnerError, match="exactly one entry, this one has 2"):
        read_tensor(tmp_path / "two.irpa")


def test_iree_tools_read_what_we_write(tmp_path):
    """The files are IREE's formats, not ours: IREE's own tools read them."""
    array = sample("f16", (2, 5))
    write_tensor(tmp_path / "p.irpa", array, key="input0")
    dump = subprocess.run(["iree-dump-parameters", f"--parameters=model={tmp_path / 'p.irpa'}"],
                          capture_output=True, text=True, check=True).stdout
    assert "input0" in dump and "20" in dump  # 2x5 f16 = 20 bytes
    mlir = tmp_path / "id.mlir"
    mlir.write_text("func.func @main(%a: tensor<2x5xf16>) -> tensor<2x5xf16> {\n"
                    "  return %a : tensor<2x5xf16>\n}\n")
    vmfb = tmp_path / "id.vmfb"
    subprocess.run(["iree-compile", str(mlir), "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "-o", str(vmfb)],
                   check=True)
    write_tensor(tmp_path / "in.bin", array)
    write_tensor(tmp_path / "in.npy", array)
    for flag in (f"--input=2x5xf16=@{tmp_path / 'in.bin'}", f"--input=@{tmp_path / 'in.npy'}"):
        subprocess.run(["iree-run-module", "--device=local-sync", f"--module={vmfb}",
                        "--function=main", flag, f"--output=@{tmp_path / 'out.npy'}"],
                       check=True, capture_output=True)
        assert np.load(tmp_path / "out.npy").tobytes() == array.tobytes()
