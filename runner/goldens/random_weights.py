"""Random parameter archives for `weights` of `type: random`, made the way IREE CI's
torch_models runner makes them (iree-test-suites `pytest_iree/irpa_gen.py`), so one
(MLIR, seed) gives the same archive, byte for byte, in both.

The recipe: parse the module's MLIR with IREE's Python bindings; walk the top-level
`util.global` ops in order and keep those whose initial value is a named parameter
(`#flow.parameter.named<"model"::"name">`, or `#stream.`, scope optional); draw every
parameter from one `numpy.random.default_rng(seed)`: a float one (f16/f32/f64, bf16, the two
f8E4M3 types) as `normal(0.0, 0.01, shape)` cast to its type, an integer one as
`integers(min, max, shape, dtype)` (max excluded, as numpy does); add each to an
`iree.runtime.ParameterIndex` under its name and write it with `create_archive_file`. The scope
is not stored: the test's `scope` names it at run time (`--parameters=<scope>=<file>`).

Archives are cached by the MLIR's sha256 and the seed (IREE keys its copy by the module name
and the MLIR's md5).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.fileio import sha256_file
from runner.base.paths import cache_dir
from runner.base.progress import Progress
from runner.base.signals import import_held

# The printed initial value of a parameter-backed global, as IREE's runner matches it.
_NAMED = re.compile(r'#(?:stream|flow)\.parameter\.named<(?:"[^"]*"::)?"([^"]+)"> : ')
FLOAT_SCALE = 0.01


def parameters(mlir: Path) -> list[tuple[str, list[int], object]]:
    """(name, shape, MLIR element type) of every parameter-backed global, in order."""
    util_d = import_held("iree.compiler.dialects.util")
    ir = import_held("iree.compiler.ir")

    try:
        text = mlir.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read the module's MLIR: {e}", where=str(mlir),
                       fix="check the test's MLIR path") from e
    found = []
    with ir.Context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except Exception as e:  # the bindings raise MLIRError (an Exception) on bad IR
            raise BadInput(f"cannot parse the MLIR: {str(e)[:500]}", where=str(mlir),
                           fix="use MLIR this IREE can read (`iree-opt FILE` shows why "
                           "not)") from e
        for op in module.body.operations:
            if not isinstance(op, util_d.GlobalOp) or op.initial_value is None:
                continue
            match = _NAMED.match(str(op.initial_value))
            if match:
                shaped = ir.ShapedType(op.type_.value)
                found.append((match.group(1), list(shaped.shape), shaped.element_type))
    return found


def _numpy_dtype(element_type: object, name: str, where: str):
    ir = import_held("iree.compiler.ir")
    import ml_dtypes
    import numpy as np

    if isinstance(element_type, ir.IntegerType):
        ints = {8: (np.int8, np.uint8), 16: (np.int16, np.uint16), 32: (np.int32, np.uint32),
                64: (np.int64, np.uint64)}
        if element_type.width in ints:
            return ints[element_type.width][1 if element_type.is_unsigned else 0]
    floats = ((ir.F64Type, np.float64), (ir.F32Type, np.float32), (ir.F16Type, np.float16),
              (ir.BF16Type, ml_dtypes.bfloat16),
              (ir.Float8E4M3FNUZType, ml_dtypes.float8_e4m3fnuz),
              (ir.Float8E4M3FNType, ml_dtypes.float8_e4m3fn))
    for kind, dtype in floats:
        if isinstance(element_type, kind):
            return dtype
    raise BadInput(f"parameter {name!r} has element type {element_type}, which IREE CI's "
                   "random weights do not generate either", where=where,
                   fix="give the test a `url` archive instead")


def generate_random_weights(mlir: Path, seed: int, out: Path, where: str) -> int:
    """Writes the archive for (mlir, seed) to `out`; returns how many parameters it holds."""
    rt = import_held("iree.runtime")
    import numpy as np

    params = parameters(mlir)
    rng = np.random.default_rng(seed)
    index = rt.ParameterIndex()
    with Progress(f"random weights (seed {seed})", len(params), unit="params") as progress:
        for name, shape, element_type in params:
            dtype = _numpy_dtype(element_type, name, where)
            if np.issubdtype(dtype, np.integer):
                info = np.iinfo(dtype)
                array = rng.integers(info.min, info.max, size=shape, dtype=dtype)
            else:
                array = rng.normal(loc=0.0, scale=FLOAT_SCALE, size=shape).astype(dtype)
            index.add_buffer(name, array)
            progress.advance()
    index.create_archive_file(str(out))
    return len(params)


def archive_path(mlir: Path, seed: int) -> Path:
    key = sha256_file(mlir) if mlir.is_file() else "<sha256 of the MLIR>"
    return cache_dir() / "random-irpa" / key / f"param_{seed}.irpa"


def random_weights(mlir: Path, seed: int, where: str, dry_run: bool = False) -> Path:
    """The cached archive for (mlir, seed), generated on first use."""
    path = archive_path(mlir, seed)
    if dry_run or path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f"{path.stem}.{time.monotonic_ns()}.tmp.irpa")
    try:
        generate_random_weights(mlir, seed, scratch, where)
        scratch.replace(path)
    finally:
        scratch.unlink(missing_ok=True)
    return path
