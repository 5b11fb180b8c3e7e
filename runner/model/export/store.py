"""The export cache's writer: exports what a profile or `runner export sdxl` asks for, never
what is there.

An export lives in `$RUNNER_CACHE_DIR/exports/<name>-<key>/` (named by
`runner.config.exports`): weights (`*.irpa`, shared by all batch sizes), the tokenizer, one
MLIR set per batch size and `model.json`, which lists only batch sizes whose files are all
there, with the sha256 of every file it names. New files are written into a staging
directory and moved in complete, `model.json` last. An export reuses only the files of a
verified one (its model.json, same inputs, every file matching its hash): a killed export's
leftovers (files, no model.json) or a file changed since are written again, so model.json
always describes the bytes beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from runner.base.errors import BadInput, RunnerError, ToolFailed
from runner.base.fileio import atomic_write_text
from runner.base.signals import import_held
from runner.config.checkpoint import Checkpoint, VaeFiles, open_checkpoint, open_vae
from runner.config.exports import (
    SEEDED_SEED,
    SEEDED_TOKENIZER,
    STEPS,
    WEIGHTS_SPEC,
    ExportSource,
    architecture_of,
    config_dict,
    export_command,
    export_dir,
    export_key,
    file_names,
    hash_files,
    prompt_length,
)
from runner.config.model_config import ModelConfig
from runner.inputs.jsonfile import read_json
from runner.inputs.paths import is_inside
from runner.model.seeded_weights import ensure_weights, write_spec

STAGING = ".staging"  # inside the export directory: new files before they are moved in
STAGED = "staged.json"  # in it: the export key, and each file finished there
EXPORT_LOCK = ".export.lock"


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """One exporter per export directory across processes (a file inside it: an export
    writes nothing beside its --out)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / EXPORT_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class _Staging:
    """`<out>/.staging/`: where an export writes its new files, each atomically, before
    they are moved in with model.json last. Each finished file is recorded (size, mtime)
    in `staged.json` with the export key, so an export interrupted half way (a signal, a
    full disk) and run again with the same inputs keeps what it finished: a 7 GB export
    does not start over. Staged files of other inputs are removed."""

    def __init__(self, out: Path, key: str | None, log: Callable[[str], None]):
        self.dir, self.key = out / STAGING, key
        record = {}
        if (self.dir / STAGED).is_file():
            try:
                record = json.loads((self.dir / STAGED).read_text())
            except (OSError, ValueError):
                record = {}
        if not isinstance(record, dict) or record.get("key") != key:
            shutil.rmtree(self.dir, ignore_errors=True)
            record = {}
        files = record.get("files", {}) if isinstance(record.get("files"), dict) else {}
        self.files = {name: stat for name, stat in files.items() if self._same(name, stat)}
        # sha256 of files this process wrote, hashed as they were written: model.json's
        # hashes of them need not read them again (7 GB for a seeded SDXL).
        self.digests: dict[str, str] = {}
        if self.files:
            log(f"export: {len(self.files)} file(s) an interrupted export finished are kept")
        self.dir.mkdir(parents=True, exist_ok=True)

    def _stat(self, name: str) -> list[int] | None:
        path = self.dir / name
        if not is_inside(path, self.dir) or not path.is_file():
            return None
        st = path.stat()
        return [st.st_size, st.st_mtime_ns]

    def _same(self, name: str, stat: object) -> bool:
        return self._stat(name) == stat

    def has(self, name: str) -> bool:
        return name in self.files

    def written(self, name: str) -> None:
        self.files[name] = self._stat(name)  # type: ignore[assignment]
        atomic_write_text(self.dir / STAGED, json.dumps({"key": self.key,
                                                         "files": self.files}) + "\n")


def _verified(out: Path, key: str | None, log: Callable[[str], None]
              ) -> tuple[list[int], list[int], dict[str, str]]:
    """(batch sizes, VAE batch sizes, files) of the complete export in `out`: its model.json
    (an export of the same inputs) and every file it lists, each holding the sha256 it
    records. Anything else is not reused: a killed export's leftovers (no model.json), an
    older export without hashes, a file changed since. Then model.json goes first, so nothing
    claims the bytes about to be written, and everything is exported again."""
    path = out / "model.json"
    if not path.is_file():
        return [], [], {}
    raw = read_json(path, what="export's model.json")
    if raw.get("export_key") != key:
        raise BadInput("this directory holds an export of other inputs (another "
                       "checkpoint, dtype, VAE or exporter version)", where=str(path),
                       fix="export into an empty --out, or leave --out out to use the "
                       "export cache")
    try:
        config = ModelConfig.from_dict(raw, path)
        ensure_weights(config, say=log)  # a seeded export's weights left behind: from its spec
        problem = _files_problem(out, config.files)
    except RunnerError as e:
        problem = str(e)
    if problem is None:
        return list(config.batch_sizes), list(config.sizes_for("vae")), dict(config.files)
    log(f"export: {path} is not reused ({problem}); every file is written again")
    path.unlink()
    return [], [], {}


def _files_problem(out: Path, files: dict[str, str]) -> str | None:
    """Why `files` (name -> sha256) do not describe the bytes in `out`; None when they do."""
    if not files:
        return "it records no file hashes (an export from before they were recorded)"
    paths = [out / name for name in files]
    outside = [name for name, p in zip(files, paths, strict=True) if not is_inside(p, out)]
    if outside:
        return f"it names {outside[0]!r} outside the export"
    missing = [name for name, p in zip(files, paths, strict=True) if not p.is_file()]
    if missing:
        return f"{missing[0]} is missing"
    actual = hash_files(paths, out)
    changed = [name for name, digest in files.items() if actual.get(name) != digest]
    return f"{changed[0]} is not the file it records" if changed else None


def listed_files(config: dict) -> list[str]:
    """Every file an export's model.json names (relative to it)."""
    names = ["tokenizer/vocab.json", "tokenizer/merges.txt"]
    if config.get("weights_spec"):
        names.append(config["weights_spec"])
    for sub in config["submodels"].values():
        names.append(sub["weights"])
        sizes = sub.get("batch_sizes", config["batch_sizes"])
        for pattern in (sub["mlir"], *sub.get("extra_mlir", ())):
            names += [pattern.format(batch=b) for b in sizes]
    return names


def open_sources(source: ExportSource) -> tuple[Checkpoint | None, VaeFiles | None]:
    """The checkpoint and the `vae_from` VAE an export reads (None where it reads none),
    opened with every check: what `runner export sdxl` and its dry run both refuse."""
    ckpt = (None if source.checkpoint is None else
            open_checkpoint(source.checkpoint, source.dtype, source.max_length,
                            source.vae_dtype))
    vae = None if source.vae_from is None else open_vae(source.vae_from, source.dtype,
                                                        source.vae_dtype)
    return ckpt, vae


def ensure_export(source: ExportSource, batch_sizes: list[int], vae_batch_sizes: list[int],
                  out: Path | None = None,
                  log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> Path:
    """Exports what is missing (never what is there) and returns the model.json path."""
    try:
        import_held("iree.turbine")
        import_held("torch")
    except ImportError as e:
        raise ToolFailed(f"export needs the [export] extra: {e}",
                         fix="pip install -e '.[export]', then run: "
                         + shlex.join(export_command(source, batch_sizes, vae_batch_sizes,
                                                     out))) from e
    ckpt, vae_files = open_sources(source)  # every check, before writing
    key = export_key(source)
    out = out or export_dir(source, key)
    with _locked(out):
        have, have_vae, reuse = _verified(out, key, log)
        need = sorted(set(batch_sizes) - set(have))
        need_vae = sorted(set(vae_batch_sizes) - set(have_vae))
        if not need and not need_vae:
            return out / "model.json"
        # We hold the lock: the staging dir is ours, or an interrupted export's.
        staging = _Staging(out, key, log)
        arch = ckpt.arch if ckpt is not None else architecture_of(source)
        if vae_files is not None:
            arch = vae_files.with_arch(arch)
        # The checkpoint opened above already holds its length: not opened again.
        length = ckpt.max_length if ckpt is not None else prompt_length(source)
        if not reuse:  # nothing verified is kept: write every batch size asked for
            need, need_vae = sorted(set(batch_sizes)), sorted(set(vae_batch_sizes))
        _write(source, arch, staging, set(reuse), need, need_vae, length, log,
               ckpt, vae_files)
        for path in sorted(staging.dir.rglob("*")):
            if path.is_file() and path.name != STAGED:
                target = out / path.relative_to(staging.dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
        config = config_dict(source, arch, sorted({*have, *need}),
                             sorted({*have_vae, *need_vae}), key, length)
        # model.json last, with the sha256 of every file it names: it describes the
        # bytes beside it, and the next export reuses only what still matches.
        listed = listed_files(config)
        config["files"] = hash_files([out / name for name in listed], out, staging.digests)
        atomic_write_text(out / "model.json", json.dumps(config, indent=2) + "\n")
        shutil.rmtree(staging.dir, ignore_errors=True)
    ModelConfig.load(out / "model.json")  # what we wrote must load
    return out / "model.json"


def _build_modules(source: ExportSource, arch, log: Callable[[str], None], ckpt, vae_files):
    """The SDXL modules in torch: seeded (from torch's init) or from the checkpoint, with
    the VAE of `vae_files` where given; warns of an fp16 VAE whose config says it
    overflows in fp16."""
    from runner.model.export import sdxl_model

    start = time.perf_counter()
    vae = None if vae_files is None else sdxl_model.load_vae(vae_files.root, vae_files.variant)
    if ckpt is None:
        modules = sdxl_model.build_seeded(arch, SEEDED_SEED, source.dtype, STEPS, source.vae_dtype,
                                          vae)
    else:
        modules = sdxl_model.load_checkpoint(arch, ckpt.root, ckpt.variants, source.dtype,
                                             STEPS, source.vae_dtype, vae)
    log(f"export: built {source.ref} ({source.dtype}, VAE {source.vae_dtype}) in "
        f"{time.perf_counter() - start:.1f}s")
    if source.vae_dtype == "float16" and arch.vae.get("force_upcast", True):
        log("export: warning: this VAE's config says `force_upcast: true`: diffusers decodes "
            "it in fp32 because its fp16 decode overflows (SDXL base's does); samples whose "
            "decode is not finite fail. An fp16-safe VAE: --vae-from DIR")
    return modules


def _write_weights(module, file: str, spec, staging: _Staging) -> None:
    """One module's weights into the staging dir: as torch holds them, or (a seeded export)
    the values its spec derives, whose digest is kept for the export's record."""
    from runner.model.export import exporter, seeded

    if spec is None:
        exporter.save_weights(module, staging.dir / file)
    else:
        staging.digests[file] = seeded.save_seeded_weights(
            module, spec.archives[file], staging.dir / file)
    staging.written(file)


def _write(source: ExportSource, arch, staging: _Staging, reuse: set[str],
           batch_sizes: list[int], vae_batch_sizes: list[int], max_length: int,
           log: Callable[[str], None], ckpt, vae_files) -> None:
    """Builds the modules and writes into the staging dir every file not in `reuse` (the
    files of the verified export already in place) nor staged already."""
    from runner.config.checkpoint import convert_tokenizer
    from runner.model.export import exporter, seeded

    modules = _build_modules(source, arch, log, ckpt, vae_files)

    def needed(name: str) -> bool:
        return name not in reuse and not staging.has(name)

    tokenizer_files = ("tokenizer/vocab.json", "tokenizer/merges.txt")
    if any(needed(f) for f in tokenizer_files):
        tokenizer = SEEDED_TOKENIZER if ckpt is None else ckpt.root / "tokenizer"
        convert_tokenizer(tokenizer, staging.dir / "tokenizer")
        for f in tokenizer_files:
            staging.written(f)
    named = modules.named()
    names = file_names()
    spec = None
    if ckpt is None:  # seeded: weights from a spec derived from torch's init (see seeded.py)
        t0 = time.perf_counter()
        spec = seeded.seed_modules({names[n]["weights"]: m for n, m in named.items()}, SEEDED_SEED)
        if needed(WEIGHTS_SPEC):
            write_spec(spec, staging.dir / WEIGHTS_SPEC)
            staging.written(WEIGHTS_SPEC)
        log(f"export: {WEIGHTS_SPEC} and its values in {time.perf_counter() - t0:.1f}s")
    exporter.externalize(named)
    for name, module in named.items():
        file = names[name]["weights"]
        if needed(file):
            _write_weights(module, file, spec, staging)
            log(f"export: {file} written")
    dims = (arch.latent_size, max_length, arch.embed_dim, arch.pooled_dim)
    for name in exporter.SUBMODELS:
        for batch in vae_batch_sizes if name == "vae" else batch_sizes:
            file = names[name]["mlir"].format(batch=batch)
            if needed(file):
                _write_mlir(source, arch, named[name], name, batch, dims, staging.dir / file,
                            log)
                staging.written(file)
            extra = names["unet"]["extra_mlir"][0].format(batch=batch)
            if name == "unet" and needed(extra):
                atomic_write_text(staging.dir / extra,
                                  exporter.unet_pipeline_mlir(batch, *dims, STEPS, source.dtype))
                staging.written(extra)


def _write_mlir(source: ExportSource, arch, module, name: str, batch: int,
                dims: tuple[int, int, int, int], path: Path, log: Callable[[str], None]) -> None:
    """One submodel's MLIR at one batch size: traced, or as an earlier export of the same
    architecture traced it (`traces`: the MLIR holds no weight)."""
    from runner.model.export import exporter, traces

    t0 = time.perf_counter()
    key = traces.trace_key(arch, name, batch, dims, source.dtype, source.vae_dtype)
    mlir, before = traces.traced(key, lambda: exporter.export_mlir(module, name, batch, *dims,
                                                                   source.dtype))
    atomic_write_text(path, mlir)
    how = f"as traced before ({traces.trace_path(key)})" if before else "traced"
    log(f"export: {path.name} in {time.perf_counter() - t0:.1f}s, {how}")
