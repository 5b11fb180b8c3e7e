"""A run's `reproduce.sh`: the command that re-runs it, from its recorded argv.

Built with runner/base/shellscript.py, so a hostile run dir name, image tag or argument is only
ever a quoted word or sanitized comment text, and the default output dir is found at run
time next to the script (it works from any cwd, and after the run dir was moved).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runner.base.outdir import without_option
from runner.base.shellscript import Script, Var, join

OUT, HERE, IMAGE_ID = Var("out"), Var("here"), Var("image_id")


def rerun_argv(argv: Sequence[str]) -> list[str]:
    """The recorded argv without its `--out DIR` / `--out=DIR`: the script passes its own."""
    return without_option(argv, "--out")


def _image(script: Script, image: Mapping[str, Any]) -> None:
    """For a docker run: rebuild the harness image (a content-addressed tag, so an unchanged
    build is a cache hit) and check it is the very image the run used."""
    labels = image.get("labels") or {}
    build = ["runner", "image", "build", "--iree",
             str(labels.get("org.iree-sdxl-runner.source", "?")), "--tag", str(image["ref"])]
    base = labels.get("org.iree-sdxl-runner.base-image")
    if base:
        build += ["--base-image", str(base)]
    script.comment(f"Harness image {image['ref']} ({image['id']}); `--dry-run` prints its "
                   "docker build.")
    script.run(build)
    script.capture(IMAGE_ID, ["docker", "image", "inspect", "--format", "{{.Id}}",
                              str(image["ref"])])
    script.run(["test", IMAGE_ID, "=", str(image["id"])],
               warn_on_failure="warning: image differs from the recorded one")


def _slurm(script: Script, jobs: Sequence[Mapping[str, Any]]) -> None:
    """A Slurm run's exact sbatch commands and batch scripts (runner/batch/slurm.py), as
    comments: re-running the driver above submits them again."""
    script.blank()
    script.comment("The Slurm jobs that command submitted for this run, exactly (one array "
                   "task per node;")
    script.comment("each node plans and starts its own workers, listed below):")
    for job in jobs:
        script.comment(f"  job {job.get('job_id', '?')} ({job.get('reason', '')}):")
        script.comment(f"    {join(job['sbatch'])}")
        for line in str(job.get("script_text", "")).splitlines():
            script.comment(f"    | {line}")


def reproduce_script(run_name: str, *, argv: Sequence[str], profile: str, samples: int,
                     iree_version: str, image: Mapping[str, Any] | None = None,
                     slurm_jobs: Sequence[Mapping[str, Any]] = (),
                     worker_commands: Sequence[str] = (), cwd: str = "") -> str:
    """The text of reproduce.sh. `worker_commands` are one-line shell commands (the
    executors' `describe`), shown as comments. `cwd` is where the run's driver ran: the
    command runs from there, so relative paths in its argv (`--ids FILE`, `--profile
    my.yaml`) name the same files whatever directory the script is started from."""
    script = Script()
    script.comment(f"Reproduces run {run_name}: profile {profile}, {samples} samples, "
                   f"IREE {iree_version}.")
    script.comment("Usage: reproduce.sh [OUT_DIR]   (default: <this run dir>-reproduced)")
    script.strict()
    script.script_dir(HERE)
    script.arg_or(OUT, 1, [HERE, "-reproduced"])
    script.absolute(OUT)
    if image:
        _image(script, image)
    if cwd:
        script.cd_if_exists(cwd)
    script.run(["runner", *rerun_argv(argv), "--out", OUT])
    if slurm_jobs:
        _slurm(script, slurm_jobs)
    script.blank()
    script.comment("The worker processes this run started (after the driver filled the queue):")
    for command in worker_commands:
        script.comment(f"  {command}")
    return script.text()
