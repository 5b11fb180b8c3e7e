"""Tensor files as IREE's test suites store them: raw `.bin`, `.npy`, single-tensor `.irpa`.

A raw `.bin` carries no shape or dtype, so the test file's `value` (`2x64x2048xf16`, the
same spelling `iree-run-module --input=` takes) supplies them; the bytes are little-endian,
row-major, one byte per `i1`. `.npy` and `.irpa` describe themselves, and a `value` given
with them is checked against what the file says.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runner.base.errors import BadInput, ToolFailed
from runner.base.fileio import atomic_write_bytes
from runner.base.signals import import_held
from runner.inputs.limits import INT64_MAX

FORMATS = (".bin", ".npy", ".irpa")
IRPA_METADATA_PREFIX = "TENSORv0"  # what iree.runtime writes before a tensor's JSON metadata


def _bf16() -> np.dtype:
    try:
        import ml_dtypes
    except ImportError as e:  # pragma: no cover - ml_dtypes ships with the IREE runtime
        raise ToolFailed("bf16 tensors need the `ml_dtypes` package",
                         fix="pip install ml_dtypes") from e
    return np.dtype(ml_dtypes.bfloat16)


# IREE element type name -> numpy dtype name ("bf16" is resolved lazily through ml_dtypes).
_IREE_TO_NUMPY = {
    "f16": "<f2", "f32": "<f4", "f64": "<f8", "bf16": "bf16",
    "i8": "i1", "i16": "<i2", "i32": "<i4", "i64": "<i8",
    "si8": "i1", "si16": "<i2", "si32": "<i4", "si64": "<i8",
    "u8": "u1", "u16": "<u2", "u32": "<u4", "u64": "<u8",
    "ui8": "u1", "ui16": "<u2", "ui32": "<u4", "ui64": "<u8",
    "i1": "bool",
}
_VALUE_RE = re.compile(r"^((?:\d+x)*)([a-z]+\d*)$")


def numpy_dtype(iree_type: str) -> np.dtype:
    name = _IREE_TO_NUMPY.get(iree_type)
    if name is None:
        raise ValueError(f"unknown element type {iree_type!r}")
    return _bf16() if name == "bf16" else np.dtype(name)


def iree_type(dtype: np.dtype) -> str:
    """The canonical IREE spelling of a numpy dtype (`float16` -> `f16`)."""
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        return "bf16"
    if dtype == np.bool_:
        return "i1"
    kind = {"f": "f", "i": "i", "u": "u"}.get(dtype.kind)
    if kind is None:
        raise ValueError(f"no IREE element type for numpy dtype {dtype}")
    return f"{kind}{dtype.itemsize * 8}"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's shape and IREE element type, as `iree-run-module` spells it."""

    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def parse(cls, value: str, where: str = "value") -> TensorSpec:
        text = value.strip()
        match = _VALUE_RE.match(text)
        if not match or match.group(2) not in _IREE_TO_NUMPY:
            raise BadInput(f"cannot read tensor type {value!r}", where=where,
                           fix="spell it as iree-run-module does: <d0>x<d1>x...x<type>, "
                           f"type one of {', '.join(sorted(_IREE_TO_NUMPY))}, e.g. "
                           "2x64x2048xf16")
        digits = [d for d in match.group(1).split("x") if d]
        name = _IREE_TO_NUMPY[match.group(2)]
        nbytes = 2 if name == "bf16" else np.dtype(name).itemsize
        for d in digits:  # the byte count must fit in int64 (numpy's sizes would wrap)
            nbytes *= int(d) if len(d) <= 19 else INT64_MAX + 1
            if nbytes > INT64_MAX or len(d) > 19:
                raise BadInput(f"tensor type {value[:80]!r} is larger than any file can "
                               "hold (its byte count overflows 64 bits)", where=where,
                               fix="check the shape's dimensions")
        return cls(tuple(int(d) for d in digits), match.group(2))

    @classmethod
    def of(cls, array: np.ndarray) -> TensorSpec:
        return cls(tuple(int(d) for d in array.shape), iree_type(array.dtype))

    @property
    def np_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * self.np_dtype.itemsize

    def same_as(self, other: TensorSpec) -> bool:
        """Equal up to spelling (`i8` and `si8` are one type)."""
        return self.shape == other.shape and self.np_dtype == other.np_dtype

    def __str__(self) -> str:
        return "x".join([*(str(d) for d in self.shape), self.dtype])


def tensor_format(path: Path) -> str:
    """`.npy` and `.irpa` by suffix; anything else is raw bytes, as IREE CI's `.bin` blobs."""
    suffix = path.suffix.lower()
    return suffix if suffix in (".npy", ".irpa") else ".bin"


def _check_spec(array: np.ndarray, spec: TensorSpec | None, path: Path) -> np.ndarray:
    if spec is not None and not TensorSpec.of(array).same_as(spec):
        raise BadInput(f"file holds a {TensorSpec.of(array)} tensor, the test says {spec}",
                       where=str(path), fix="fix the test's `value`, or the file")
    return array


def read_tensor(path: Path, spec: TensorSpec | None = None) -> np.ndarray:
    """Reads one tensor; a raw `.bin` needs `spec` and must be exactly its size."""
    fmt = tensor_format(path)
    if not path.is_file():
        raise BadInput("tensor file not found", where=str(path),
                       fix="check the path (a test's inputs are downloaded by `runner "
                       "goldens check`)")
    if fmt == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise BadInput(f"not a readable .npy file: {e}", where=str(path),
                           fix="fetch or write the file again") from e
        if array.dtype.kind == "V":  # bf16 has no .npy type code: numpy stores raw 2 bytes
            if spec is None or spec.np_dtype.itemsize != array.dtype.itemsize:
                raise BadInput(f"the .npy holds untyped {array.dtype.itemsize}-byte "
                               "values (how numpy stores bf16)", where=str(path),
                               fix='give the entry a "value" such as "1x4xbf16"')
            array = array.view(spec.np_dtype)
        return _check_spec(array, spec, path)
    if fmt == ".irpa":
        return _check_spec(_read_irpa(path), spec, path)
    if spec is None:
        raise BadInput("a raw .bin tensor needs a shape and type", where=str(path),
                       fix='give the entry a "value" such as "1x4x128x128xf16"')
    size = path.stat().st_size
    if size != spec.nbytes:
        raise BadInput(f"file has {size} bytes, a {spec} tensor has {spec.nbytes}",
                       where=str(path), fix="the blob or the test's `value` is wrong")
    return np.fromfile(path, dtype=spec.np_dtype).reshape(spec.shape)


def _read_irpa(path: Path) -> np.ndarray:
    rt = import_held("iree.runtime")

    index = rt.ParameterIndex()
    try:
        index.load(str(path))
        entries = list(index.items())
    except (RuntimeError, ValueError) as e:
        raise BadInput(f"not a readable .irpa archive: {e}", where=str(path),
                       fix="fetch or export the file again") from e
    if len(entries) != 1:
        raise BadInput(f"a tensor .irpa holds exactly one entry, this one has "
                       f"{len(entries)}: {[k for k, _ in entries][:5]}", where=str(path),
                       fix="IREE's test assets store one input or result per .irpa file")
    key, entry = entries[0]
    try:
        array = rt.parameter_index_entry_as_numpy_ndarray(entry)
    except (ValueError, KeyError) as e:
        array = _bf16_entry(entry, rt)  # IREE's helper has no bf16; turbine writes it
        if array is None:
            raise BadInput(f"entry {key!r} has no tensor metadata IREE can read: {e}",
                           where=str(path), fix="write the archive with IREE's "
                           "iree.runtime.ParameterIndex") from e
    return np.array(array, copy=True)


def _metadata(raw: bytes) -> dict | None:
    prefix, sep, body = raw.decode(errors="replace").partition(":")
    if not sep or prefix not in (IRPA_METADATA_PREFIX, "PYTORCH"):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def _bf16_entry(entry, rt) -> np.ndarray | None:
    meta = _metadata(bytes(entry.metadata))
    if not meta or meta.get("type") != "Tensor" or meta.get("dtype") != "bfloat16":
        return None
    flat = rt.parameter_index_entry_as_numpy_flat_ndarray(entry)
    return flat.view(_bf16()).reshape([int(d) for d in meta["shape"]])


def encode_tensor(array: np.ndarray, fmt: str, key: str = "tensor") -> bytes:
    """The bytes of `array` in format `.bin`, `.npy` or `.irpa`."""
    array = np.require(array, requirements="C")  # keeps 0-d arrays 0-d
    if fmt == ".bin":
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        return array.tobytes()
    if fmt == ".npy":
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        return buf.getvalue()
    if fmt == ".irpa":
        return _irpa_bytes(array, key)
    raise ValueError(f"unknown tensor format {fmt!r} (one of {FORMATS})")


def _irpa_bytes(array: np.ndarray, key: str) -> bytes:
    import tempfile

    rt = import_held("iree.runtime")

    index = rt.ParameterIndex()
    if array.dtype == _bf16():  # the same metadata format, with the name torch uses
        meta = {"type": "Tensor", "dtype": "bfloat16", "shape": list(array.shape),
                "dtype_desc": {"class_name": "dtype", "is_complex": False,
                               "is_floating_point": True, "is_signed": True, "itemsize": 2}}
        index.add_buffer(key, array.reshape(-1).view(np.uint8),
                         metadata=f"{IRPA_METADATA_PREFIX}:{json.dumps(meta)}")
    else:
        rt.parameter_index_add_numpy_ndarray(index, key, array)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.irpa"
        index.create_archive_file(str(path))
        return path.read_bytes()


def write_tensor(path: Path, array: np.ndarray, key: str = "tensor") -> Path:
    """Atomically writes `array` in the format `path`'s suffix names (`.bin` if unknown)."""
    atomic_write_bytes(path, encode_tensor(array, tensor_format(path), key))
    return path
