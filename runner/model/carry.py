"""What a machine without iree-compile needs to run a profile, gathered into one directory to
carry there (`runner compile --out DIR`).

The directory is laid out as $RUNNER_CACHE_DIR is: `vmfb/` holds the compiled modules of the
batch sizes asked, with their cache metadata and MLIR index entries (how a machine with no
compiler finds them, runner.model.compile), and `exports/` an exported model's files (MLIR,
tokenizer, model.json, the weights spec) for those batch sizes, less the weights its spec
writes where they are used. A model outside the export cache (the embedded tiny model in the
package, a model.json of your own) is not copied: its files travel with it. On the other
machine, `RUNNER_CACHE_DIR=DIR runner bench ...` (or copy DIR into its cache).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_text, sha256_file
from runner.base.paths import PACKAGE_DIR, cache_dir
from runner.config.model_config import ModelConfig
from runner.inputs.jsonfile import read_json
from runner.inputs.paths import is_inside
from runner.model.compile import index_entry_path, vmfb_dir
from runner.model.compiled_model import CompiledModel


@dataclass
class Carried:
    out: Path
    files: list[Path] = field(default_factory=list)
    vmfb_bytes: int = 0
    model_bytes: int = 0
    exports: list[str] = field(default_factory=list)  # export directories carried
    not_carried: list[str] = field(default_factory=list)  # model dirs that travel on their own

    def summary(self) -> str:
        total = (self.vmfb_bytes + self.model_bytes) / 1e6
        lines = [f"carry: {self.out}: {len(self.files)} files, {total:.1f} MB "
                 f"(compiled modules {self.vmfb_bytes / 1e6:.1f} MB, model files "
                 f"{self.model_bytes / 1e6:.1f} MB)"]
        lines += [f"carry: model {name} (the export, less the weights its spec writes)"
                  for name in self.exports]
        lines += [f"carry: model files not copied: {d} ("
                  + ("the runner's own assets: they come with the runner)"
                     if is_inside(Path(d), PACKAGE_DIR) else
                     "outside the export cache: put them at the same path there)")
                  for d in self.not_carried]
        lines.append(f"carry: on the machine without iree-compile: RUNNER_CACHE_DIR={self.out} "
                     "runner run|bench ...")
        return "\n".join(lines)


def _copy(src: Path, dst: Path) -> int:
    """`src` to `dst`, atomically (a killed carry leaves no half file); its size."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst.stat().st_size


def carry(models: list[CompiledModel], out: Path) -> Carried:
    """Copies into `out` what `models` (compiled here, at their batch sizes) need."""
    result = Carried(out)
    try:
        _carry_modules(models, out, result)
        by_config: dict[str, set[int]] = {}
        vae: dict[str, set[int]] = {}
        for m in models:
            by_config.setdefault(m.model_config, set()).add(m.batch_size)
            vae.setdefault(m.model_config, set()).add(m.vae_batch_size)
        for config, sizes in by_config.items():
            _carry_model(ModelConfig.load(Path(config)), sizes, vae[config], out, result)
    except OSError as e:
        raise BadInput(f"cannot write the carry directory: {e.strerror or e}",
                       where=str(out), fix="give --out a writable directory with room for "
                       "the compiled modules") from e
    return result


def _carry_modules(models: list[CompiledModel], out: Path, result: Carried) -> None:
    root = vmfb_dir()
    for compiled in models:
        for c in compiled.compiled:
            vmfb = Path(c.vmfb)
            entry = index_entry_path(sha256_file(Path(c.mlir)), c.key)
            for src in (vmfb, vmfb.with_suffix(".json"), entry):
                if src.is_file():
                    dst = out / "vmfb" / src.relative_to(root)
                    size = _copy(src, dst)
                    result.vmfb_bytes += size
                    result.files.append(dst)


def _carry_model(model: ModelConfig, batch_sizes: set[int], vae_batch_sizes: set[int],
                 out: Path, result: Carried) -> None:
    """An export's files for these batch sizes, under a model.json that lists only them."""
    from runner.model.export.store import listed_files

    exports = cache_dir() / "exports"
    if not is_inside(model.base_dir, exports):
        result.not_carried.append(str(model.base_dir))
        return
    raw = read_json(model.path, what="export's model.json")
    decoder = model.functions["decode"][0]
    target = out / "exports" / model.base_dir.name
    # A second `--out` into the same carry (another batch size, `runner gpu-check prepare`'s one
    # compile per layout) adds its sizes to the ones carried before, rather than dropping them.
    if (target / "model.json").is_file():
        before = read_json(target / "model.json", what="carried model.json")
        sizes = before.get("batch_sizes", [])
        batch_sizes = batch_sizes | set(sizes)
        vae_batch_sizes = vae_batch_sizes | set(before["submodels"][decoder].get("batch_sizes",
                                                                                 sizes))
    raw["batch_sizes"] = sorted(batch_sizes & set(model.batch_sizes))
    vae_sizes = sorted(vae_batch_sizes & set(model.sizes_for(decoder)))
    if "batch_sizes" in raw["submodels"][decoder] or vae_sizes != raw["batch_sizes"]:
        raw["submodels"][decoder]["batch_sizes"] = vae_sizes
    from_spec = {sub.weights for sub in model.submodels.values()} if model.weights_spec else set()
    names = listed_files(raw)
    raw["files"] = {n: digest for n, digest in model.files.items() if n in names}
    for name in names:
        if name not in from_spec:
            dst = target / name
            result.model_bytes += _copy(Path(model.resolve(name)), dst)
            result.files.append(dst)
    text = json.dumps(raw, indent=2) + "\n"
    atomic_write_text(target / "model.json", text)  # last: it describes the files beside it
    result.model_bytes += len(text.encode())
    result.files.append(target / "model.json")
    result.exports.append(model.base_dir.name)
