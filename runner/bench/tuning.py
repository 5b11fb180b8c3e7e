"""Tuning-spec A/B: the same stages compiled without and with a spec, measured alike.

Arm A is the profile with no user spec (`target.tuning_spec` cleared), arm B the profile
with `--iree-codegen-tuning-spec-path=SPEC`; everything else (default specs, flags, inputs,
benchmark settings) is shared, so a latency difference is the spec's. `iree-compile`
prints errors for a spec it cannot parse and still exits 0, compiling untuned code, so the
spec is parsed with `iree-opt` first (`runner.goldens.plan.check_spec`).

The final specs (the user's linked with the defaults) are dumped with
`--iree-codegen-dump-tuning-specs-to` by a separate compile that stops at
`executable-configurations`, where the specs are applied: a dump flag in the real compile
would name the run dir and so change the compile cache key on every run.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
from pathlib import Path

from runner.base.errors import BadInput, ToolFailed
from runner.base.iree_tools import compiler_info
from runner.config.profile import Profile
from runner.config.sources import local_source
from runner.goldens.plan import check_spec

DUMP_PHASE = "executable-configurations"


def ab_profiles(profile: Profile, spec: Path, *, dry_run: bool = False
                ) -> tuple[Profile, Profile]:
    """(without the spec, with it)."""
    if not spec.is_file():
        raise BadInput("tuning spec not found", where=f"--ab-tuning-spec {spec}",
                       fix="give the path of a tuning spec .mlir file")
    if not dry_run:
        check_spec(spec)
    target = profile.target
    return (dataclasses.replace(profile, target=dataclasses.replace(target, tuning_spec=None)),
            dataclasses.replace(profile, target=dataclasses.replace(
                target, tuning_spec=str(spec.resolve()))))


def has_specs(profile: Profile) -> bool:
    return bool(profile.target.tuning_spec) or bool(profile.target.default_tuning_specs)


def dump_commands(profile: Profile, batch_size: int, out_dir: Path, *, dry_run: bool = False,
                  submodels: list[str] | None = None) -> list[list[str]]:
    """One `iree-compile ... --iree-codegen-dump-tuning-specs-to=<out_dir>/<submodel>` per
    module of the profile's model at `batch_size` (of `submodels`, default all)."""
    compiler = compiler_info()
    model = profile.model
    commands = []
    for name in submodels or list(model.submodels):
        where = f"{model.path}: submodels.{name}.mlir"
        for i, source in enumerate(model.mlir_sources(name, batch_size)):
            mlir = local_source(source, where, must_exist=not dry_run)
            target = out_dir / (name if i == 0 else f"{name}.{i}")  # extra (pipeline) modules
            commands.append([compiler.path, str(mlir), *profile.target.flags_for(name, compiler),
                             profile.target.tuning_flags(target)[-1],
                             f"--compile-to={DUMP_PHASE}", "-o", "/dev/null"])
    return commands


def dump_specs(commands: list[list[str]]) -> list[Path]:
    """Runs the dump compiles; returns the spec files written."""
    written: list[Path] = []
    for cmd in commands:
        target = Path(next(a for a in cmd if a.startswith("--iree-codegen-dump-tuning-specs-to="))
                      .split("=", 1)[1])
        target.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ToolFailed(f"dumping tuning specs failed (exit {proc.returncode}):\n"
                             f"{proc.stderr.strip()[-1500:]}",
                             fix=f"reproduce with: {shlex.join(cmd)}")
        found = sorted(target.glob("*.mlir"))
        print(f"bench: {len(found)} tuning spec file(s) -> {target}", file=sys.stderr,
              flush=True)
        written += found
    return written
