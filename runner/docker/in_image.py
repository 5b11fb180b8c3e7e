"""Runner commands inside a harness image, above all the compile.

A run whose workers are containers of an image must also get its modules from that image's
`iree-compile`: the image *is* the IREE build under test (`--iree wheels:3.13.0`, a
from-source commit, a build dir), and its runtime loads what its compiler wrote. So every
containerized path (`runner run --executor docker`, Slurm with the docker node executor,
`runner validate`, `runner bench --iree`) compiles through `ImageCompiler`. Host paths are
mounted at the same paths, so the compile cache ($RUNNER_CACHE_DIR) is shared: an image
whose compiler is the host's (same version and commit) finds the host's modules cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from runner.base import outdir
from runner.base.dirlock import drop_locks_of
from runner.base.errors import ToolFailed
from runner.base.fileio import atomic_write_text
from runner.base.paths import cache_dir
from runner.base.procs import STOP_GRACE_S
from runner.config.profile import Profile
from runner.docker.container import covering_mounts
from runner.model.compiled_model import CompiledModel


def standalone_profile(profile: Profile) -> dict[str, Any]:
    """The profile as one self-contained mapping (no `extends`, absolute paths, the layout
    actually used), so a container that has no `configs/` can load it.

    The model is this host's model config, even a builtin one (mounted at the same path):
    the model files are inputs, the image only the IREE build under test, and the compiled
    model then names files that a node task outside the container can check too."""
    raw = dict(profile.raw)
    raw["name"] = profile.name
    raw["model"] = str(profile.model.path.resolve())
    raw["target"] = {**raw["target"], "tuning_spec": profile.target.tuning_spec}
    raw["layout"] = {k: v for k, v in profile.layout.to_dict().items() if k != "backend"}
    return raw


def run_in_image(tag: str, argv: list[str], mounts: list[tuple[str, bool]], dry_run: bool) -> str:
    """Runs `argv` in a fresh container of the harness image; returns its stdout. The exact
    `docker run` line is printed first (and is all a dry run does)."""
    from runner.docker.container import kill, make_spec, run_command_text, start, wait

    spec = make_spec(tag, argv, "cpu", mounts=mounts, user=f"{os.getuid()}:{os.getgid()}",
                     env={"RUNNER_CACHE_DIR": str(cache_dir())}, planned=dry_run)
    print(f"  {run_command_text(spec, detach=False, remove=True)}", file=sys.stderr)
    if dry_run:
        return ""
    container = start(spec)
    try:
        rc = wait(container)
        stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    except BaseException:
        # Stopped (a signal, an error): SIGTERM first, so a `runner` in there ends in order
        # (its workers, its record), then SIGKILL after the grace; docker waits for it.
        with contextlib.suppress(Exception):
            container.stop(timeout=int(STOP_GRACE_S))
        raise
    finally:
        hostname = container.attrs.get("Config", {}).get("Hostname", "")
        kill(container)
        # A `runner` stopped in there (a signal reached us first) left its out dir's lock
        # held by the container's host name; the container is gone, so the lock is stale.
        if hostname:
            drop_locks_of(hostname, [Path(p) for p, read_only in mounts if not read_only],
                          (outdir.LOCK,))
    if rc != 0:
        raise ToolFailed(f"`{shlex.join(argv)}` failed in {tag} (exit {rc}):\n"
                         f"{stderr.strip()[-2000:]}", where=tag,
                         fix="run the printed docker command by hand to see it fail")
    return stdout


def _compile_argv(profile_file: Path) -> list[str]:
    return ["python3", "-m", "runner", "compile", "--profile", str(profile_file.resolve()),
            "--json"]


class ImageCompiler:
    """A `compile_fn(profile, batch, vae_batch)` that runs `runner compile` in the image.

    The profile it compiles is written as a standalone YAML under `work_dir` (mounted
    read-only into the container) with the requested batch sizes as its layout. Results are
    kept per (profile, batch sizes), so a sweep compiles each combination once.
    """

    def __init__(self, image: str, work_dir: Path, dry_run: bool = False):
        self.image, self.work_dir, self.dry_run = image, Path(work_dir), dry_run
        self._done: dict[str, CompiledModel] = {}

    def _profile_file(self, profile: Profile, batch_size: int, vae_batch_size: int | None
                      ) -> tuple[Path, str]:
        """Where the standalone profile at these batch sizes goes, and its text."""
        layout = profile.layout.with_overrides(batch_size=batch_size,
                                               vae_batch_size=vae_batch_size or batch_size)
        raw = standalone_profile(profile)
        raw["layout"] = {k: v for k, v in layout.to_dict().items() if k != "backend"}
        path = self.work_dir / f"compile-bs{batch_size}-vae{layout.vae_batch_size}.yaml"
        return path, yaml.safe_dump(raw, sort_keys=True)

    def command(self, profile: Profile, batch_size: int, vae_batch_size: int | None = None
                ) -> list[str]:
        """The command run in the image (`runner compile` prints the compiled model)."""
        return _compile_argv(self._profile_file(profile, batch_size, vae_batch_size)[0])

    def __call__(self, profile: Profile, batch_size: int,
                 vae_batch_size: int | None = None) -> CompiledModel:
        path, text = self._profile_file(profile, batch_size, vae_batch_size)
        if text in self._done:
            return self._done[text]
        if not self.dry_run:
            atomic_write_text(path, text)
        argv = _compile_argv(path)
        vae = vae_batch_size or batch_size
        if self.dry_run:  # nothing is written, so nothing to mount: the command and the
            # compiles it would run (the host's dry-run compile: the same commands)
            from runner.model.compiled_model import compile_model

            print(f"  in {self.image}: {shlex.join(argv)}", file=sys.stderr)
            return compile_model(profile, batch_size, vae_batch_size, dry_run=True)
        from runner.model.compiled_model import with_batch_sizes

        # A model from the export cache is exported here on the host (the image has no
        # torch), into the directory the standalone profile already names.
        with_batch_sizes(profile.model, batch_size, vae, where=str(profile.path))
        stdout = run_in_image(self.image, argv,
                              self._mounts(profile, {batch_size, vae}),
                              self.dry_run)
        try:
            compiled = CompiledModel.from_dict(json.loads(stdout)[0])
        except (ValueError, KeyError, IndexError) as e:
            raise ToolFailed(f"`runner compile --json` in {self.image} printed no compiled "
                             f"model ({e}): {stdout[-500:]!r}", where=self.image,
                             fix="the image's runner may be older than this one: rebuild it "
                             "with `runner image build`") from e
        self._done[text] = compiled
        return compiled

    def _mounts(self, profile: Profile, batch_sizes: set[int]) -> list[tuple[str, bool]]:
        return compile_mounts(profile, batch_sizes, [(self.work_dir, True)])


def compile_mounts(profile: Profile, batch_sizes: set[int], extra: list[tuple[Path, bool]]
                   ) -> list[tuple[str, bool]]:
    """What a compile in the image reads and writes: the model dir and any MLIR kept
    elsewhere (read-only), the compile cache (read-write: the modules are written there),
    and the caller's own directories (`extra`)."""
    model = profile.model
    mlir = [Path(m).parent for name in model.submodels for b in batch_sizes
            for m in model.mlir_sources(name, b) if "://" not in m]
    return covering_mounts([(model.base_dir, True), *extra, (cache_dir(), False),
                            *[(d, True) for d in mlir]])
