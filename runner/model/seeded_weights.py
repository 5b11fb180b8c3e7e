"""Seeded weights from a spec: the `.irpa` files of a seeded export, written where they are
used instead of carried (SDXL's are 7 GB; its spec is under a megabyte).

A seeded export (`runner export sdxl --seeded`, `model: seeded:tiny`) writes beside its
weights `weights.spec.json`: the seed, and per archive every tensor's name, shape, dtype and
init rule, derived from the tensor as torch initialized it (`derive_rule`): `constant` where
torch filled it with one value (norm weights, zero biases), else `uniform` over the interval
with torch's mean and standard deviation. The export then writes its `.irpa` files *from*
that spec (`write_archive`), and the torch modules it traces hold the same values.

The generator is numpy's PCG64, one stream per block of `BLOCK` elements of a tensor, keyed
by (seed, block index, sha256 of the tensor name) through numpy's SeedSequence: blocks are
independent, so threads fill them in parallel, and the values are integer arithmetic then
IEEE float32 multiply/add and round-to-nearest casts (no transcendental function), so the
bytes are the same on any machine, with or without torch. `ensure_weights` writes the
archives a model.json names but lacks, checked against the sha256 it records: a written file
is byte-identical to the exported one or is not installed. Two exports that name an archive
with the same sha256 share one file: the second is a hard link to the first's
(`.weights-by-sha256/` beside the export directories).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runner.base.errors import BadInput, StepFailed
from runner.base.fileio import atomic_write_text, sha256_file
from runner.base.progress import Progress, echo
from runner.base.signals import import_held
from runner.config.model_config import ModelConfig
from runner.inputs.jsonfile import read_json
from runner.inputs.paths import inside

FORMAT = "iree-sdxl-runner seeded weights 1"
GENERATOR = "pcg64-uniform-float32-blocks"
BLOCK = 1 << 22  # elements per independently seeded stream
NUMPY_DTYPES: dict[str, np.dtype] = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}
SPEC_MAX_BYTES = 64 << 20  # SDXL's spec is ~0.6 MB
# Beside the export directories (in $RUNNER_CACHE_DIR/exports/, or a carry's): a hard link to
# each archive written from a spec, named by its sha256. Exports that differ only in the
# VAE's precision (seeded SDXL's fp32- and fp16-VAE exports) hold the same CLIP and UNet
# archives: the second links them (no second 7 GB).
SHARED_DIR = ".weights-by-sha256"
# iree-turbine's tensor metadata (iree.turbine.aot.params), so turbine and iree.runtime's
# `parameter_index_entry_as_numpy_ndarray` read these archives as they read its own.
_METADATA_PREFIX = "PYTORCH:"


@dataclass(frozen=True)
class SeededTensor:
    """One tensor of seeded weights and how its values are made: `init` is `constant`
    (`a`: the value) or `uniform` (over [a, b)). (model.tensors.TensorSpec is another thing:
    a test's shape and IREE type.)"""

    name: str
    shape: tuple[int, ...]
    dtype: str
    init: str
    a: float
    b: float = 0.0

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.count * NUMPY_DTYPES[self.dtype].itemsize

    def row(self) -> list:
        rule = [self.init, self.a] if self.init == "constant" else [self.init, self.a, self.b]
        return [self.name, list(self.shape), self.dtype, rule]


@dataclass(frozen=True)
class WeightsSpec:
    seed: int
    archives: dict[str, tuple[SeededTensor, ...]]  # archive file name -> its tensors

    def nbytes(self, archive: str) -> int:
        return sum(t.nbytes for t in self.archives[archive])

    def to_json(self) -> str:
        """One tensor per line: small, and a diff of two specs reads tensor by tensor."""
        head = json.dumps({"format": FORMAT, "generator": GENERATOR, "block": BLOCK,
                           "seed": self.seed})[:-1]
        parts = []
        for name, tensors in self.archives.items():
            rows = ",\n    ".join(json.dumps(t.row()) for t in tensors)
            parts.append(f"  {json.dumps(name)}: [\n    {rows}\n  ]")
        return head + ', "archives": {\n' + ",\n".join(parts) + "\n}}\n"


# --- deriving a rule from torch's values ------------------------------------------------

def _round(x: float) -> float:
    """4 significant digits: a readable spec that does not change with the last bits of the
    statistics (torch's init is the same everywhere; the float sums need not be)."""
    return float(f"{x:.4g}")


def derive_rule(values: np.ndarray, scratch: np.ndarray | None = None
                ) -> tuple[str, float, float]:
    """(init, a, b) reproducing a tensor's scale: one value stays that constant; anything
    else becomes uniform with the same mean and standard deviation (half-width sqrt(3) sd).
    torch's own init is uniform(+-1/sqrt(fan_in)) for convolutions and linear layers
    (recovered as such) and normal for the CLIP encoders (same scale, bounded tails).
    `scratch`: float64 room for at least `values.size` elements to compute in (a caller
    deriving many tensors allocates it once, not a new array per tensor)."""
    v = np.empty(values.size) if scratch is None else scratch[:values.size]
    np.copyto(v, values.ravel())  # float64, exactly; changed in place below
    if v.size == 0 or v.min() == v.max():
        return "constant", float(v[0]) if v.size else 0.0, 0.0
    # `v.mean()` and `v.std()`, the same float64 operations in the same order (numpy's
    # pairwise sum over the whole array, then the squared deviations' sum), in place: one
    # pass and one array fewer than numpy's std, which computes the mean again and squares
    # into a new array. A full-size model's 2.6 billion values go through here.
    mean = float(np.add.reduce(v)) / v.size
    np.subtract(v, mean, out=v)
    np.square(v, out=v)
    half = math.sqrt(3.0) * math.sqrt(float(np.add.reduce(v)) / v.size)
    low, high = _round(mean - half), _round(mean + half)
    if low >= high:  # spread below the rounding: the mean is the value
        return "constant", _round(mean), 0.0
    return "uniform", low, high


def tensor_spec(name: str, values: np.ndarray, scratch: np.ndarray | None = None
                ) -> SeededTensor:
    dtype = np.dtype(values.dtype).name
    if dtype not in NUMPY_DTYPES:
        raise BadInput(f"seeded weights are float32 or float16; {name} is {dtype}",
                       where=name, fix="export the seeded model in fp16 or fp32")
    return SeededTensor(name, tuple(int(d) for d in values.shape), dtype,
                        *derive_rule(values, scratch))


# --- generating values ------------------------------------------------------------------

def _stream(seed: int, name: str, block: int) -> np.random.Generator:
    digest = hashlib.sha256(name.encode()).digest()
    words = [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 32, 4)]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, block, *words])))


def _fill(t: SeededTensor, seed: int, flat: np.ndarray, block: int,
          scratch: np.ndarray | None) -> None:
    """Block `block` of tensor `t` into `flat` (its flat output array); a float16 tensor's
    float32 values go through `scratch` (at least BLOCK float32s), a float32 tensor's are
    generated in place."""
    start = block * BLOCK
    stop = min(start + BLOCK, flat.size)
    u = flat[start:stop] if scratch is None else scratch[:stop - start]
    _stream(seed, t.name, block).random(out=u, dtype=np.float32)  # k * 2**-24
    u *= np.float32(t.b - t.a)
    u += np.float32(t.a)
    if scratch is not None:
        flat[start:stop] = u  # float16: IEEE round to nearest even


def _blocks(t: SeededTensor) -> int:
    return 0 if t.init == "constant" else -(-t.count // BLOCK)


def generate_seeded(tensors: tuple[SeededTensor, ...], seed: int, *, workers: int | None = None,
                    on_bytes: Callable[[int], None] = lambda n: None,
                    out: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """Every tensor's values (in its dtype and shape), blocks filled by a thread pool
    (numpy releases the GIL in both the generator and the arithmetic); `on_bytes` is called
    from this thread as blocks complete. Each thread keeps one float32 block to generate
    float16 values in, rather than a new 16 MB array per block. `out`: C-contiguous arrays
    of the tensors' shapes and dtypes to fill (a model's own storage) instead of new ones."""
    arrays = out if out is not None else [np.empty(t.shape, NUMPY_DTYPES[t.dtype]) for t in tensors]
    for t, arr in zip(tensors, arrays, strict=True):
        if arr.shape != t.shape or arr.dtype != NUMPY_DTYPES[t.dtype] or not arr.flags.c_contiguous:
            raise ValueError(f"{t.name}: no room for its values in a {arr.dtype} "
                             f"{arr.shape} array")
        if t.init == "constant":
            np.copyto(arr, t.a, casting="unsafe")  # as np.full(shape, a, dtype) fills
    on_bytes(sum(a.nbytes for t, a in zip(tensors, arrays, strict=True)
                 if t.init == "constant"))
    jobs = [(t, arr.reshape(-1), b) for t, arr in zip(tensors, arrays, strict=True)
            for b in range(_blocks(t))]
    local = threading.local()

    def run(job: tuple[SeededTensor, np.ndarray, int]) -> int:
        t, flat, b = job
        scratch = None
        if flat.dtype != np.float32:
            scratch = getattr(local, "scratch", None)
            if scratch is None:
                scratch = local.scratch = np.empty(BLOCK, np.float32)
        _fill(t, seed, flat, b, scratch)
        return min(BLOCK, flat.size - b * BLOCK) * flat.itemsize

    with ThreadPoolExecutor(max_workers=workers or min(32, os.cpu_count() or 1)) as pool:
        for n in pool.map(run, jobs):
            on_bytes(n)
    return arrays


def _metadata(t: SeededTensor) -> str:
    dtype = NUMPY_DTYPES[t.dtype]
    return _METADATA_PREFIX + json.dumps({
        "type": "Tensor", "dtype": t.dtype, "shape": list(t.shape),
        "dtype_desc": {"class_name": "dtype", "is_complex": False, "is_floating_point": True,
                       "is_signed": True, "itemsize": dtype.itemsize}})


def write_archive(tensors: tuple[SeededTensor, ...], arrays: list[np.ndarray], path: Path,
                  expected_sha256: str | None = None) -> str:
    """The `.irpa` of `tensors` holding `arrays` (from `generate`), written by IREE's own
    archive writer next to `path` and moved in place only when complete (and, when given,
    holding `expected_sha256`); returns its sha256."""
    rt = import_held("iree.runtime")

    index = rt.ParameterIndex()
    for t, arr in zip(tensors, arrays, strict=True):
        index.add_buffer(t.name, arr.reshape(-1).view(np.uint8), metadata=_metadata(t))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            index.create_archive_file(str(tmp))
        except RuntimeError as e:  # IREE's stream errors: a full disk, an I/O error
            raise OSError(str(e).rsplit(";", 1)[-1].strip()) from e
        os.chmod(tmp, 0o644)  # IREE's 0640 would hide the weights from other users
        digest = sha256_file(tmp)
        if expected_sha256 is not None and digest != expected_sha256:
            raise StepFailed(
                f"the weights written from the spec are not the exported file (sha256 "
                f"{digest[:16]}..., model.json records {expected_sha256[:16]}...)",
                where=str(path), fix="export again (`runner export sdxl --seeded`), or carry "
                "the .irpa itself; the spec and model.json must come from the same export")
        os.replace(tmp, path)
    except OSError as e:
        raise StepFailed(f"cannot write the weights: {e.strerror or e}", where=str(path),
                         fix=f"make room for {sum(a.nbytes for a in arrays) / 1e9:.1f} GB "
                         "there and make it writable (or set $RUNNER_CACHE_DIR to a disk "
                         "that is)") from e
    finally:
        tmp.unlink(missing_ok=True)
    return digest


# --- the spec file ----------------------------------------------------------------------

def write_spec(spec: WeightsSpec, path: Path) -> None:
    atomic_write_text(path, spec.to_json())


def _field(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise BadInput(f"the weights spec is damaged: {what}", where=where,
                       fix="export it again (`runner export sdxl --seeded`)")


def read_spec(path: Path) -> WeightsSpec:
    """The spec, every field checked: a damaged file is a clear error, never a traceback."""
    raw = read_json(path, max_bytes=SPEC_MAX_BYTES, what="weights spec")
    where = str(path)
    _field(raw.get("format") == FORMAT and raw.get("generator") == GENERATOR
           and raw.get("block") == BLOCK, where,
           f"written by another version (format {raw.get('format')!r}, generator "
           f"{raw.get('generator')!r})")
    seed = raw.get("seed")
    _field(isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**63,
           f"{where}: seed", "the seed is not an integer")
    archives = raw.get("archives")
    _field(isinstance(archives, dict) and all(isinstance(v, list) for v in archives.values()),
           f"{where}: archives", "`archives` must map file names to tensor lists")
    out = {}
    for archive, rows in archives.items():
        out[archive] = tuple(_tensor(row, f"{where}: archives.{archive}") for row in rows)
    return WeightsSpec(seed, out)


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _tensor(row: Any, where: str) -> SeededTensor:
    """`[name, shape, dtype, [init, a(, b)]]`, each part checked."""
    ok = isinstance(row, list) and len(row) == 4
    name, shape, dtype, rule = row if ok else ("", [], "", [])
    ok = ok and isinstance(name, str) and bool(name) and dtype in NUMPY_DTYPES
    ok = ok and isinstance(shape, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ok = ok and isinstance(rule, list) and (
        (len(rule) == 2 and rule[0] == "constant") or (len(rule) == 3 and rule[0] == "uniform"))
    ok = ok and all(_number(x) for x in rule[1:])
    _field(ok, where, f"a tensor entry is not [name, shape, dtype, rule]: {str(row)[:120]}")
    _field(math.prod(shape) < 1 << 40, where, f"{name}: shape {shape} is not a weight's")
    return SeededTensor(name, tuple(shape), dtype, rule[0], *(float(x) for x in rule[1:]))


# --- writing what a model lacks ---------------------------------------------------------

@dataclass(frozen=True)
class MissingWeights:
    """An `.irpa` a model.json names that is not there, and its spec."""

    archive: str  # as model.json names it
    path: Path
    nbytes: int
    tensors: int
    sha256: str | None  # what model.json records


def missing_weights(model: ModelConfig) -> tuple[WeightsSpec | None, list[MissingWeights]]:
    """The spec and the archives to write from it; (None, []) when nothing is missing or
    the model has no spec (then a missing file stays the error it was)."""
    if not model.weights_spec or not model.path.is_file():  # not exported yet (a dry run)
        return None, []
    names = [sub.weights for sub in model.submodels.values() if sub.weights]
    absent = [n for n in names if not Path(model.resolve(n)).exists()]
    if not absent:
        return None, []
    where = f"{model.path}: weights_spec"
    spec_path = inside(model.weights_spec, model.base_dir, where, absolute_ok=False)
    if not spec_path.is_file():
        raise BadInput(f"{absent[0]} is missing and so is its spec {spec_path.name}",
                       where=str(spec_path), fix="carry the export's weights.spec.json "
                       "(`runner compile --out DIR` does), or export again")
    recorded = model.files.get(model.weights_spec)
    if recorded and sha256_file(spec_path) != recorded:
        raise BadInput("the weights spec is not the one this export wrote (sha256 differs "
                       "from model.json's)", where=str(spec_path),
                       fix="carry the export's own model.json and weights.spec.json together")
    spec = read_spec(spec_path)
    out = []
    for name in absent:
        if name not in spec.archives:
            raise BadInput(f"{name} is missing and the spec does not describe it",
                           where=str(spec_path), fix="export again")
        out.append(MissingWeights(name, Path(model.resolve(name)), spec.nbytes(name),
                                  len(spec.archives[name]), model.files.get(name)))
    return spec, out


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One writer per export directory: a second run waits, then finds the files there."""
    try:
        lock = open(directory / ".weights.lock", "w")  # noqa: SIM115 (held while yielding)
    except OSError as e:
        raise StepFailed(f"cannot write in {directory}: {e.strerror}", where=str(directory),
                         fix="make the export directory writable, or copy it (with "
                         "$RUNNER_CACHE_DIR) to a disk that is") from e
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_weights(model: ModelConfig, *, dry_run: bool = False,
                   say: Callable[[str], None] = echo) -> list[MissingWeights]:
    """Writes every `.irpa` the model names but lacks from its spec, with progress; returns
    what was (dry run: would be) written. Files there are left alone (the export checks
    them against model.json before it reuses them)."""
    spec, todo = missing_weights(model)
    if spec is None or not todo:
        return []
    total = sum(m.nbytes for m in todo)
    if dry_run:
        for m in todo:
            say(f"would write {m.path} ({m.tensors} tensors, {m.nbytes / 1e9:.2f} GB) from "
                f"{model.weights_spec} (seed {spec.seed})")
        return todo
    written = []
    with _locked(model.base_dir):
        start = time.perf_counter()
        with Progress("weights from spec", round(total / 1e6), unit="MB") as bar:
            done = 0

            def on_bytes(n: int) -> None:
                nonlocal done
                done += n
                bar.update(round(done / 1e6))

            linked = []
            for m in todo:
                if m.path.exists():  # another process wrote it while we waited
                    continue
                if _link_shared(m):
                    linked.append(m)
                    continue
                bar.start_item(m.archive)
                tensors = spec.archives[m.archive]
                arrays = generate_seeded(tensors, spec.seed, on_bytes=on_bytes)
                write_archive(tensors, arrays, m.path, m.sha256)
                del arrays
                _share(m)
                written.append(m)
        if written:
            say(f"weights: wrote {', '.join(m.archive for m in written)} "
                f"({sum(m.nbytes for m in written) / 1e9:.2f} GB) from {model.weights_spec} "
                f"in {time.perf_counter() - start:.1f}s, sha256 as model.json records")
        if linked:
            say(f"weights: linked {', '.join(m.archive for m in linked)} "
                f"({sum(m.nbytes for m in linked) / 1e9:.2f} GB, no more disk) from another "
                f"export's identical files ({_shared_dir(model)})")
    return [*written, *linked]


def _shared_dir(model: ModelConfig) -> Path:
    return model.base_dir.parent / SHARED_DIR


def _shared_path(m: MissingWeights) -> Path | None:
    return m.path.parent.parent / SHARED_DIR / f"{m.sha256}.irpa" if m.sha256 else None


def _link_shared(m: MissingWeights) -> bool:
    """Hard-links the file another export wrote with the same sha256 into place; False
    where there is none (or it is on another filesystem)."""
    shared = _shared_path(m)
    if shared is None or not shared.is_file():
        return False
    try:
        os.link(shared, m.path)
    except OSError:
        return False
    return True


def _share(m: MissingWeights) -> None:
    """Makes a written file (sha256 checked) available to the next export that names the
    same bytes; best effort: without the link the next one writes its own."""
    shared = _shared_path(m)
    if shared is None:
        return
    try:
        shared.parent.mkdir(parents=True, exist_ok=True)
        os.link(m.path, shared)
    except OSError:
        pass
