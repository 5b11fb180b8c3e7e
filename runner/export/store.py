"""The export cache: SDXL exported once per (checkpoint bytes, export code, dtype), batch
sizes added as they are asked for.

An export lives in `$RUNNER_CACHE_DIR/exports/<name>-<key>/`: weights (`*.irpa`, shared by
all batch sizes), the tokenizer, one MLIR set per batch size and `model.json`, which lists
only batch sizes whose files are all there, with the sha256 of every file it names. New files
are written into a staging directory and moved in complete, `model.json` last. An export
reuses only the files of a verified one (its model.json, same inputs, every file matching
its hash): a killed export's leftovers (files, no model.json) or a file changed since are
written again, so model.json always describes the bytes beside it. Profiles name an export
by its source (`model: checkpoint:DIR` or `model: seeded:sdxl`); this module is torch-free
so loading such a profile stays cheap.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.errors import RunnerError
from runner.fileio import atomic_write_json, atomic_write_text, sha256_file
from runner.inputs.jsonfile import read_json
from runner.inputs.paths import is_inside
from runner.model_config import ModelConfig
from runner.paths import ASSETS_DIR, cache_dir

SOURCE_PREFIXES = ("checkpoint:", "seeded:")
SEEDED_MODELS = ("sdxl",)
SEED = 20251123
DTYPES = {"fp16": "float16", "fp32": "float32", "float16": "float16", "float32": "float32"}
SEEDED_MAX_LENGTH = 64  # the seeded model stands in for IREE CI's and AMD's artifacts
STEPS = 20  # MLPerf
SEEDED_REFUSAL = ("seeded random weights: its images mean nothing, so FID/CLIP cannot judge "
                  "them (this model is for throughput and compile checks)")
_PACKAGES = ("torch", "diffusers", "transformers", "iree-turbine")


@dataclass(frozen=True)
class ExportSource:
    """What to export: a local checkpoint directory, or a seeded model by name."""

    checkpoint: Path | None
    seeded: str | None
    dtype: str
    # Prompt tokens; None: the checkpoint's own (`checkpoint.prompt_length`, what diffusers
    # pads to), 64 for the seeded model.
    max_length: int | None = None

    @classmethod
    def parse(cls, ref: str, dtype: str = "float16", base: Path | None = None,
              where: str = "model") -> ExportSource:
        kind, _, value = ref.partition(":")
        if kind == "seeded":
            if value not in SEEDED_MODELS:
                known = ", ".join("seeded:" + m for m in SEEDED_MODELS)
                raise RunnerError(f"unknown seeded model {value!r}", where=where,
                                  fix=f"use one of {known}")
            return cls(None, value, dtype)
        if kind != "checkpoint" or not value:
            raise RunnerError(f"{ref!r} names no export source", where=where,
                              fix="use checkpoint:<diffusers dir> or seeded:sdxl")
        path = Path(value).expanduser()
        return cls(path if path.is_absolute() or base is None else base / path, None, dtype)

    @property
    def ref(self) -> str:
        return f"seeded:{self.seeded}" if self.seeded else f"checkpoint:{self.checkpoint}"

    @property
    def name(self) -> str:
        return f"sdxl-seeded-{self.seeded}" if self.seeded else "sdxl"


def code_version() -> str:
    """The exporter's source and the versions of what traces: a change re-exports."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    for package in _PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            h.update(f"{package}={importlib.metadata.version(package)}".encode())
    return h.hexdigest()


def _hash_files(files: list[Path], root: Path) -> dict[str, str]:
    """sha256 per file, remembered by (path, size, mtime) so a 7 GB checkpoint is read once."""
    memo_path = cache_dir() / "exports" / "file-hashes.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):  # a damaged memo is only a cache: start it again
        memo = {}
    out, changed = {}, False
    for path in files:
        st = path.stat()
        stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        if stamp not in memo:
            memo[stamp] = sha256_file(path)
            changed = True
        out[str(path.relative_to(root))] = memo[stamp]
    if changed:
        atomic_write_json(memo_path, memo)
    return out


def checkpoint_sha256(checkpoint: Path, dtype: str) -> str | None:
    """One name for a checkpoint's weights: sha256 of its files' sha256s (by relative path,
    as `export_key` hashes them); None when the checkpoint is not on this machine."""
    from runner.export.checkpoint import open_checkpoint

    if not checkpoint.is_dir():
        return None
    ckpt = open_checkpoint(checkpoint, dtype)
    files = _hash_files(ckpt.files(), ckpt.root)
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def _seeded_files() -> list[Path]:
    return sorted(p for p in (ASSETS_DIR / "sdxl").rglob("*.json"))


def export_key(source: ExportSource) -> str | None:
    """The content key, or None when the checkpoint is not on this machine (a dry run can
    still print what it would do)."""
    if source.seeded:
        root = ASSETS_DIR / "sdxl"
        inputs = {"seeded": source.seeded, "seed": SEED, "files": _hash_files(_seeded_files(),
                                                                              root),
                  "max_length": prompt_length(source)}
    else:
        from runner.export.checkpoint import open_checkpoint

        assert source.checkpoint is not None
        if not source.checkpoint.is_dir():
            return None
        ckpt = open_checkpoint(source.checkpoint, source.dtype, source.max_length)
        inputs = {"files": _hash_files(ckpt.files(), ckpt.root), "max_length": ckpt.max_length}
    inputs.update(code=code_version(), dtype=source.dtype, steps=STEPS)
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def prompt_length(source: ExportSource) -> int:
    """The export's prompt tokens: `max_length` if given, else the checkpoint's own, else
    64 for the seeded model (IREE CI's artifacts' length), and for a checkpoint not on this
    machine (a dry run) SDXL base's 77."""
    from runner.export.architecture import check_prompt_length, sdxl_architecture

    if source.checkpoint is not None and source.checkpoint.is_dir():
        from runner.export.checkpoint import open_checkpoint

        return open_checkpoint(source.checkpoint, source.dtype, source.max_length).max_length
    arch = sdxl_architecture()
    default = SEEDED_MAX_LENGTH if source.seeded else arch.prompt_positions
    return check_prompt_length(source.max_length or default, arch, "--max-length")


def export_dir(source: ExportSource, key: str | None) -> Path:
    tag = key[:16] if key else "<key: sha256 of the checkpoint files and the exporter>"
    return cache_dir() / "exports" / f"{source.name}-{source.dtype}-{tag}"


def export_command(source: ExportSource, batch_sizes: list[int], vae_batch_sizes: list[int],
                   out: Path | None = None) -> list[str]:
    """The exact `runner export sdxl` command for these batch sizes."""
    what = ["--seeded"] if source.seeded else ["--from", str(source.checkpoint)]
    argv = ["runner", "export", "sdxl", *what,
            "--batch-sizes", ",".join(map(str, sorted(batch_sizes))),
            "--vae-batch-sizes", ",".join(map(str, sorted(vae_batch_sizes))),
            "--dtype", "fp16" if source.dtype == "float16" else "fp32"]
    if source.max_length:
        argv += ["--max-length", str(source.max_length)]
    return argv + (["--out", str(out)] if out else [])


def _config_dict(source: ExportSource, arch, batch_sizes: list[int],
                 vae_batch_sizes: list[int], key: str | None, max_length: int) -> dict:
    from runner.export.exporter import model_config

    extra: dict = {"source": source.ref, "export_key": key}
    if source.seeded:
        extra["no_scoring"] = SEEDED_REFUSAL
    return model_config(source.name, source.dtype, batch_sizes, vae_batch_sizes,
                        arch.image_size, arch.latent_size, STEPS, max_length, extra)


def _architecture(source: ExportSource):
    from runner.export.architecture import load_architecture, sdxl_architecture

    if source.seeded:
        return sdxl_architecture()
    assert source.checkpoint is not None
    return load_architecture(source.checkpoint)


def exported_model(ref: str, base: Path, where: str, dtype: str = "float16") -> ModelConfig:
    """A profile's `model: checkpoint:DIR | seeded:sdxl` (with its `dtype`): the cached
    export's config, or, before any export, the config it will have (no batch sizes yet, so
    `runner compile` exports them on demand or prints the command)."""
    source = ExportSource.parse(ref, dtype, base=base, where=where)
    key = export_key(source)
    path = export_dir(source, key) / "model.json"
    if path.is_file():
        return ModelConfig.load(path)
    arch = _architecture(source) if key else None
    if arch is None:  # the checkpoint is elsewhere: SDXL's own shapes, for dry runs
        from runner.export.architecture import sdxl_architecture

        arch = sdxl_architecture()
    return ModelConfig.from_dict(_config_dict(source, arch, [], [], key,
                                               prompt_length(source)), path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One exporter per export directory across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _verified(out: Path, key: str | None, log: Callable[[str], None]
              ) -> tuple[list[int], list[int], dict[str, str]]:
    """(batch sizes, VAE batch sizes, files) of the complete export in `out`: its model.json
    (an export of the same inputs) and every file it lists, each holding the sha256 it
    records. Anything else is not reused: a killed export's leftovers (no model.json), an
    older export without hashes, a file changed since. Then model.json goes first, so nothing
    claims the bytes about to be written, and everything is exported again."""
    path = out / "model.json"
    if not path.is_file():
        if out.is_dir() and any(out.iterdir()):
            log(f"export: {out} holds files but no model.json (a killed export?): none is "
                "reused, every file is written again")
        return [], [], {}
    raw = read_json(path, what="export's model.json")
    if raw.get("export_key") != key:
        raise RunnerError("this directory holds an export of other inputs (another "
                          "checkpoint, dtype or exporter version)", where=str(path),
                          fix="export into an empty --out, or leave --out out to use the "
                          "export cache")
    try:
        config = ModelConfig.from_dict(raw, path)
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
    actual = _hash_files(paths, out)
    changed = [name for name, digest in files.items() if actual.get(name) != digest]
    return f"{changed[0]} is not the file it records" if changed else None


def _listed_files(config: dict) -> list[str]:
    """Every file an export's model.json names (relative to it)."""
    names = ["tokenizer/vocab.json", "tokenizer/merges.txt"]
    for sub in config["submodels"].values():
        names.append(sub["weights"])
        sizes = sub.get("batch_sizes", config["batch_sizes"])
        for pattern in (sub["mlir"], *sub.get("extra_mlir", ())):
            names += [pattern.format(batch=b) for b in sizes]
    return names


def ensure_export(source: ExportSource, batch_sizes: list[int], vae_batch_sizes: list[int],
                  out: Path | None = None,
                  log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> Path:
    """Exports what is missing (never what is there) and returns the model.json path."""
    try:
        import iree.turbine  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise RunnerError(f"export needs the [export] extra: {e}",
                          fix="pip install -e '.[export]', then run: "
                          + shlex.join(export_command(source, batch_sizes, vae_batch_sizes,
                                                      out))) from e
    if source.checkpoint is not None:
        from runner.export.checkpoint import open_checkpoint

        ckpt = open_checkpoint(source.checkpoint, source.dtype,  # every check, before writing
                               source.max_length)
    key = export_key(source)
    out = out or export_dir(source, key)
    with _locked(out):
        have, have_vae, reuse = _verified(out, key, log)
        need = sorted(set(batch_sizes) - set(have))
        need_vae = sorted(set(vae_batch_sizes) - set(have_vae))
        if not need and not need_vae:
            return out / "model.json"
        for stale in out.parent.glob(f".staging-{out.name}-*"):  # a killed export's
            shutil.rmtree(stale, ignore_errors=True)  # (we hold the lock: nobody else's)
        staging = out.parent / f".staging-{out.name}-{os.getpid()}"
        staging.mkdir(parents=True)
        try:
            arch = ckpt.arch if source.checkpoint is not None else _architecture(source)
            # The checkpoint opened above already holds its length: not opened again.
            length = ckpt.max_length if source.checkpoint is not None else prompt_length(source)
            if not reuse:  # nothing verified is kept: write every batch size asked for
                need, need_vae = sorted(set(batch_sizes)), sorted(set(vae_batch_sizes))
            _write(source, arch, staging, set(reuse), need, need_vae, length, log,
                   ckpt if source.checkpoint is not None else None)
            out.mkdir(parents=True, exist_ok=True)
            for path in sorted(staging.rglob("*")):
                if path.is_file():
                    target = out / path.relative_to(staging)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(path, target)
            config = _config_dict(source, arch, sorted({*have, *need}),
                                  sorted({*have_vae, *need_vae}), key, length)
            # model.json last, with the sha256 of every file it names: it describes the
            # bytes beside it, and the next export reuses only what still matches.
            listed = _listed_files(config)
            config["files"] = _hash_files([out / name for name in listed], out)
            atomic_write_text(out / "model.json", json.dumps(config, indent=2) + "\n")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    ModelConfig.load(out / "model.json")  # what we wrote must load
    return out / "model.json"


def _write(source: ExportSource, arch, staging: Path, reuse: set[str], batch_sizes: list[int],
           vae_batch_sizes: list[int], max_length: int, log: Callable[[str], None],
           ckpt) -> None:
    """Builds the modules and writes into `staging` every file not in `reuse` (the files of
    the verified export already in place)."""
    from runner.export import exporter, sdxl_model
    from runner.export.checkpoint import write_tokenizer

    start = time.perf_counter()
    if ckpt is None:
        modules = sdxl_model.build_seeded(arch, SEED, source.dtype, STEPS)
    else:
        modules = sdxl_model.load_checkpoint(arch, ckpt.root, ckpt.variants, source.dtype,
                                             STEPS)
    log(f"export: built {source.ref} ({source.dtype}) in {time.perf_counter() - start:.1f}s")
    if "tokenizer/vocab.json" not in reuse:
        tokenizer = ASSETS_DIR / "tiny" / "tokenizer" if ckpt is None else ckpt.root / "tokenizer"
        write_tokenizer(tokenizer, staging / "tokenizer")
    named = modules.named()
    exporter.externalize(named)
    names = exporter.file_names()
    for name, module in named.items():
        if names[name]["weights"] not in reuse:
            exporter.save_weights(module, staging / names[name]["weights"])
            log(f"export: {names[name]['weights']} written")
    dims = (arch.latent_size, max_length, arch.embed_dim, arch.pooled_dim)
    for name in exporter.SUBMODELS:
        for batch in vae_batch_sizes if name == "vae" else batch_sizes:
            t0 = time.perf_counter()
            mlir = exporter.export_mlir(named[name], name, batch, *dims, source.dtype)
            file = names[name]["mlir"].format(batch=batch)
            atomic_write_text(staging / file, mlir)
            log(f"export: {file} in {time.perf_counter() - t0:.1f}s")
            if name == "unet":
                atomic_write_text(staging / names["unet"]["extra_mlir"][0].format(batch=batch),
                                  exporter.unet_pipeline_mlir(batch, *dims, STEPS, source.dtype))
