"""Compiles a profile's model for one layout's batch sizes, through the compile cache."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.iree_tools import CompilerInfo, compiler_here
from runner.base.progress import Progress, echo
from runner.config.model_config import ModelConfig
from runner.config.profile import Profile
from runner.config.sources import local_source
from runner.model.compile import CompileResult, compile_or_find
from runner.model.gpu_targets import check_gpu_target
from runner.model.pipeline.iree_session import ModuleFiles
from runner.model.seeded_weights import ensure_weights


@dataclass(frozen=True)
class CompiledModel:
    """Everything a worker needs to load the pipeline: plain paths, JSON-able."""

    model_config: str
    driver: str
    runtime_flags: tuple[str, ...]
    batch_size: int
    vae_batch_size: int
    modules: tuple[ModuleFiles, ...]
    compiled: tuple[CompileResult, ...]

    def to_dict(self) -> dict:
        return {
            "model_config": self.model_config, "driver": self.driver,
            "runtime_flags": list(self.runtime_flags), "batch_size": self.batch_size,
            "vae_batch_size": self.vae_batch_size,
            "modules": [{"name": m.name, "vmfbs": [str(v) for v in m.vmfbs],
                         "weights": str(m.weights) if m.weights else None}
                        for m in self.modules],
            "compiled": [asdict(c) for c in self.compiled],
        }

    @classmethod
    def from_dict(cls, raw: dict) -> CompiledModel:
        return cls(
            raw["model_config"], raw["driver"], tuple(raw["runtime_flags"]), raw["batch_size"],
            raw["vae_batch_size"],
            tuple(ModuleFiles(m["name"], tuple(Path(v) for v in m["vmfbs"]),
                              Path(m["weights"]) if m["weights"] else None)
                  for m in raw["modules"]),
            tuple(CompileResult(**c) for c in raw["compiled"]),
        )


def missing_batch_sizes(model: ModelConfig, batch_size: int, vae_batch_size: int
                        ) -> list[tuple[str, int]]:
    """(submodel, batch size) the model has no artifact for at these batch sizes. A model
    from the export cache (`model.source`) exports them on demand; any other model cannot
    have them, which is an error naming the model config and the fix."""
    decode_submodel = model.functions["decode"][0]
    missing = [(name, batch) for name in model.submodels
               for batch in [vae_batch_size if name == decode_submodel else batch_size]
               if batch not in model.sizes_for(name)]
    if missing and model.source is None:
        name, batch = missing[0]
        raise BadInput(
            f"no {name} artifact for batch size {batch} (the model has "
            f"{list(model.sizes_for(name))})", where=f"{model.path}: batch_sizes",
            fix="choose a layout batch size the model was exported for, or export it "
            "(`runner export sdxl --from DIR --batch-sizes ...`) and point the profile at "
            "`model: checkpoint:DIR`")
    return missing


def with_batch_sizes(model: ModelConfig, batch_size: int, vae_batch_size: int, *,
                     where: str, dry_run: bool = False,
                     say: Callable[[str], None] = print) -> ModelConfig:
    """`model` with artifacts at these batch sizes: as it is, or (a model from the export
    cache) with the missing sizes exported now; a dry run prints the export command.
    `runner compile`, `run`, `bench` and `mlperf` all get their models here."""
    if not missing_batch_sizes(model, batch_size, vae_batch_size):
        return model
    assert model.source is not None  # missing sizes of a model with no source: raised above
    from runner.config.exports import ExportSource, export_command
    from runner.model.export.store import ensure_export, open_sources

    source = ExportSource.parse(model.source, model.dtype, where=f"{model.path}: source",
                                vae_dtype=model.vae_dtype, vae_from=model.vae_from)
    for path, what, field, copy in (
            (source.checkpoint, "checkpoint", "model=checkpoint:DIR", "an SDXL base 1.0 copy"),
            (source.vae_from, "VAE", "model.vae_from=DIR", "a VAE directory")):
        if path is not None and not path.is_dir():
            raise BadInput(f"the {what} directory {path} is not here: the model is exported "
                           f"from it for batch size {batch_size}",
                           where=f"{where}: {field.split('=')[0]}",
                           fix=f"put {copy} (diffusers format) there, or name yours with "
                           f"--set {field}")
    if dry_run:
        say(shlex.join(export_command(source, [batch_size], [vae_batch_size])))
        open_sources(source)  # every file checked as the export checks it, writing nothing
        return model
    return ModelConfig.load(ensure_export(source, [batch_size], [vae_batch_size]))


def _submodel_files(profile: Profile, model: ModelConfig, batches: dict[str, int],
                    compiler: CompilerInfo | None, hint: str, dry_run: bool
                    ) -> tuple[list[ModuleFiles], list[CompileResult]]:
    """Each submodel's vmfbs at its batch size (given, or each of its MLIR sources compiled
    through the cache) and its weights file, unchecked: a seeded export's missing weights
    are written only after; and the compiles, to say where their modules came from."""
    modules, results = [], []
    todo = sum(len(model.mlir_sources(name, batches[name]))
               for name, sub in model.submodels.items() if not sub.vmfb)
    with Progress("compile", todo, unit="modules", rate=False, steps=False,
                  enabled=not dry_run) as progress:
        for name, sub in model.submodels.items():
            batch = batches[name]
            where = f"{model.path}: submodels.{name}"
            if sub.vmfb:
                vmfbs = [local_source(model.resolve(sub.vmfb.format(batch=batch)),
                                      f"{where}.vmfb", not dry_run)]
            else:
                vmfbs = []
                for i, source in enumerate(model.mlir_sources(name, batch)):
                    progress.start_item(f"{name} bs{batch}: {Path(source).name}")
                    # IREE CI compiles a pipeline module with flags of its own
                    part = name if i == 0 else f"{name}_pipeline"
                    result = compile_or_find(
                        local_source(source, f"{where}.mlir", not dry_run),
                        partial(profile.target.flags_for, part), compiler,
                        dry_run=dry_run, recompile_hint=hint)
                    progress.advance()
                    results.append(result)
                    vmfbs.append(Path(result.vmfb))
            weights = (local_source(model.resolve(sub.weights), f"{where}.weights", False)
                       if sub.weights else None)
            modules.append(ModuleFiles(name, tuple(vmfbs), weights))
    return modules, results


def compile_model(profile: Profile, batch_size: int, vae_batch_size: int | None = None,
                  *, dry_run: bool = False, say: Callable[[str], None] = print
                  ) -> CompiledModel:
    """The profile's modules at these batch sizes, compiled through the cache (with no
    iree-compile here: the ones a carried cache holds, runner.model.compile), and the
    weights they load (a seeded export's written from its spec where they are missing);
    a model from the export cache exports missing batch sizes first (a dry run `say`s the
    export command)."""
    vae_batch_size = vae_batch_size or batch_size
    model = with_batch_sizes(profile.model, batch_size, vae_batch_size, dry_run=dry_run,
                             say=say, where=str(profile.path))
    decode_submodel = model.functions["decode"][0]
    compiler = compiler_here()
    if compiler is not None:  # a chip the compiler does not know: said of the profile's key
        check_gpu_target(profile.target.device_flags(compiler), compiler,
                         f"{profile.path}: target.chip")
    hint = (f"runner compile --profile {profile.name} --batch-sizes {batch_size} --out DIR"
            if vae_batch_size == batch_size else "")
    batches = {name: vae_batch_size if name == decode_submodel else batch_size
               for name in model.submodels}
    modules, results = _submodel_files(profile, model, batches, compiler, hint, dry_run)
    elsewhere = sorted({r.compiled_by for r in results if r.elsewhere})
    if elsewhere:
        echo(f"no iree-compile on this machine: {model.name}'s modules were compiled elsewhere "
             f"by {', '.join(elsewhere)} (carried in the compile cache)")
    if any(r.elsewhere and "--iree-llvmcpu-target-cpu=host" in r.command for r in results):
        echo("warning: they were compiled for the CPU of the machine that compiled them "
             "(target.chip: host); they run here only on a CPU with its instruction set "
             "extensions (name a CPU in target.chip to compile for one)")
    ensure_weights(model, dry_run=dry_run)
    for name, sub in model.submodels.items():
        if sub.weights:
            local_source(model.resolve(sub.weights), f"{model.path}: submodels.{name}.weights",
                         not dry_run)
    return CompiledModel(str(model.path), profile.target.driver, profile.target.runtime_flags,
                         batch_size, vae_batch_size, tuple(modules), tuple(results))


def _check_exported(profile: Profile) -> None:
    """A model made by an export (a checkpoint's or a seeded one) has nothing to download:
    until it is exported its files have no path yet, so say what makes them."""
    model = profile.model
    if model.source is None or model.path.is_file():
        return
    from runner.config.exports import ExportSource, export_command

    source = ExportSource.parse(model.source, model.dtype, where=f"{profile.path}: model",
                                vae_dtype=model.vae_dtype, vae_from=model.vae_from)
    layout = profile.layout
    export = shlex.join(export_command(source, [layout.batch_size],
                                       [layout.vae_batch_size or layout.batch_size]))
    then = (f"export it with `{export}` (or let `runner compile --profile {profile.name}` or "
            "`runner run` export it on demand)")
    if source.checkpoint is not None and not source.checkpoint.is_dir():
        raise BadInput(
            f"profile {profile.name}'s model is exported from the checkpoint directory "
            f"{source.checkpoint}, which is not here; runner fetch downloads nothing for it",
            where=f"{profile.path}: model ({model.source})",
            fix="put a diffusers-format SDXL checkpoint there, or name yours with `--set "
            f"model=checkpoint:DIR`; then {then}")
    raise BadInput(
        f"profile {profile.name}'s model ({model.source}) is not exported yet; runner fetch "
        "downloads nothing for it", where=f"{profile.path}: model", fix=then)


def artifact_refs(profile: Profile) -> list[tuple[str, str]]:
    """(config field, reference) of every file the model needs, at every batch size."""
    model = profile.model
    refs: list[tuple[str, str]] = []
    for name, sub in model.submodels.items():
        where = f"{model.path}: submodels.{name}"
        for batch in model.sizes_for(name):
            if sub.vmfb:
                refs.append((f"{where}.vmfb", model.resolve(sub.vmfb.format(batch=batch))))
            else:
                refs += [(f"{where}.mlir", ref) for ref in model.mlir_sources(name, batch)]
        if sub.weights:
            refs.append((f"{where}.weights", model.resolve(sub.weights)))
    return list(dict.fromkeys(refs))


def fetch_artifacts(profile: Profile, *, dry_run: bool = False) -> list[tuple[str, Path]]:
    """Downloads (through the cache) or checks every artifact, a seeded export's weights
    written from its spec; returns (reference, path)."""
    from runner.config.sources import fetch, is_url

    _check_exported(profile)
    ensure_weights(profile.model, dry_run=dry_run)
    out = []
    for where, ref in artifact_refs(profile):
        if is_url(ref):
            path = local_source(ref, where, must_exist=False) if dry_run else fetch(ref,
                                                                                   where=where)
        else:
            path = local_source(ref, where)
        out.append((ref, path))
    return out
