"""Every command the README and the docs site show (fenced `bash` blocks in README.md and
docs/*.md, and the examples of the generated CLI reference) either runs here, verbatim, from
a directory outside a fresh copy of the repo (as from a pip install: the shipped suites by
name, not `goldens/...`), or is in NOT_HERE with the reason
it cannot and the test that covers it. A shown command in neither fails the suite, and so
does an entry for a command no page shows any more."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lab_support import lab_home
from repo_support import REPO
from test_slurm import slurm_cluster  # noqa: F401

from runner.base.paths import cache_dir
from runner.cli.doc import examples
from runner.cli.main import build_parser

FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
CONTINUATION = re.compile(r"\s*\\\n\s*")


def strip_comment(line: str) -> str:
    """The line without its shell comment (a `#` outside quotes, after a blank)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands_in(markdown: str) -> list[str]:
    """The commands of a page's fenced bash blocks, one per (continued) line."""
    found = []
    for block in FENCE.findall(markdown):
        for line in CONTINUATION.sub(" ", block).splitlines():
            command = strip_comment(line).strip()
            if command:
                found.append(command)
    return found


def doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def shown_commands() -> dict[str, list[str]]:
    """command -> the pages that show it ("cli" for the generated CLI reference)."""
    shown: dict[str, list[str]] = {}
    for page in doc_pages():
        for command in commands_in(page.read_text(encoding="utf-8")):
            shown.setdefault(command, []).append(str(page.relative_to(REPO)))
    for example in examples(build_parser()):
        shown.setdefault(strip_comment(example).strip(), []).append("cli")
    return shown


# Run here in a fresh copy, in this order: command -> text its output must contain.
# No compile and no samples: plans, dry runs, --version, completion.
QUICK = {
    "runner --version": "iree-compile 3.13",
    "runner plan --profile mi325x": "64 workers",
    "runner plan --profile mi325x --partition spx": "8 workers",
    "runner plan --profile mi325x --cpd 2 --json": '"w127"',
    "runner plan --profile cpu --set layout.cpd=2": "4 workers",
    "runner plan --profile mi325x | head -3": "w001",
    "runner compile --profile mi325x --dry-run": "--batch-sizes 32",
    "runner compile --profile sdxl-seeded --dry-run": "unet_pipeline_bs1.mlir",
    "runner fetch --profile sdxl --dry-run": "sharkpublic/sai/sdxl-vae-decode/model.mlir -> ",
    "runner export sdxl --seeded --dry-run": "runner export sdxl --seeded --batch-sizes 1",
    "runner export tiny --out /tmp/tiny --dry-run": "runner export tiny --out /tmp/tiny",
    "runner run --profile cpu --count 4 --out runs/smoke --dry-run":
        "python3 -m runner.batch.worker --task ",
    "runner generate --profile tiny --count 4 --out runs/gen --dry-run": "-o ",
    "runner goldens generate tiny-torch --to next --out new-goldens --dry-run":
        "# writes new-goldens/",
    "runner goldens bump tiny-torch --to next --dry-run": "_v2.0.bin",
    "runner goldens check iree-test-suites/sharktank_models/quality_tests/sdxl "
    "--sku mi300 --rocm-chip gfx942 --backend rocm --dry-run": "iree-run-module --device=hip",
    'runner goldens check iree-test-suites/torch_models --marker "hip and gfx942" '
    "--dry-run": "--iree-rocm-target=gfx942",
    "runner goldens check iree-test-suites/torch_models --marker gfx942 "
    "--dry-run": "--iree-rocm-target=gfx942",
    "runner bench goldens --profile tiny --dry-run": "PLANNED   tiny-bench/clip_cpu [cpu]",
    "runner nightly --iree wheels:3.13.0 --profile tiny --out runs/nightly --dry-run":
        "goldens check: BUILD_PYTHON -m runner goldens check --out ",
    "runner validate --iree wheels:3.13.0 --profile cpu --count 32 --goldens tiny "
    "--to v2.0 --out runs/validate --dry-run": "# validate: DRY RUN (nothing was run or judged)",
    "runner bisect --good wheels:3.10.0 --bad wheels:3.13.0 --test images --profile tiny "
    "--count 2 --out runs/bisect --dry-run": "# 4 candidate builds, good .. bad:",
    "runner compile --profile sdxl-checkpoint --set model.dtype=fp32 --dry-run":
        "exports/sdxl-float32-",
    "runner compile --profile mi325x --set model=checkpoint:$HOME/models/"
    "stable-diffusion-xl-base-1.0 --set model.dtype=fp32 --dry-run": "exports/sdxl-float32-",
    "runner compile --profile sdxl-checkpoint --set model.vae_dtype=fp16 --dry-run":
        "--dtype fp16 --vae-dtype fp16",
    "runner plan --profile h100-seeded": "CUDA_VISIBLE_DEVICES=7",
    "runner compile --profile h100-seeded --dry-run": "--iree-cuda-target=sm_80",
    "runner gpu-check prepare --profile h100-seeded --out carry --dry-run":
        "iree-base-runtime==3.13",
    "source <(runner completion bash)": "_shtab_runner",
    "printf 'stable-diffusion-xl.*.min_query_count = 32\\nstable-diffusion-xl.*.min_duration = "
    "2000\\n' > short.conf": "stable-diffusion-xl.*.min_duration = 2000",
    "printf 'stable-diffusion-xl.*.min_duration = 1000\\nstable-diffusion-xl.*.min_query_count = "
    "8\\n' > short8.conf": "stable-diffusion-xl.*.min_query_count = 8",
    # The task pages' dry runs: the real command's path, up to the GPU, the cluster or the
    # hours-long build.
    "runner validate --iree source:89ece87b --profile cpu --count 32 --goldens tiny "
    "--to v2.0 --out runs/validate-89ece87b --dry-run":
        "# validate: DRY RUN (nothing was run or judged)",
    "runner image build --iree source:89ece87b --dry-run": "IREE_COMMIT=89ece87b",
    "runner bisect --good wheels:3.12.0 --bad wheels:3.13.0 --install docker --test images "
    "--profile tiny --count 2 --out runs/bisect-docker --dry-run":
        "# 2 candidate builds, good .. bad:",
    # Where neither nvidia-smi nor rocm-smi exists the check says it is skipped; on a GPU
    # machine it says no process holds GPU memory (tests/test_gpu_holders.py checks both).
    "python3 -m runner.base.gpu_holders snapshot > gpu-before.json": '"tool"',
    "python3 -m runner.base.gpu_holders check gpu-before.json": "GPU",
}
# The lab path's dry runs stop at the preflight on a machine without the layout's GPUs
# (exit 2, before anything is compiled or started), as their runs would: the preflight
# names each check that fails (tests/test_preflight.py covers it on a GPU node's tool
# output, and the mi325x page's first block).
REFUSED_HERE = {
    "runner mlperf --profile mi325x --scenario Offline --mode performance --cpd 2 "
    "--batch-size 8 --out runs/lg-cpd2 --dry-run":
        "preflight failed GPUs: no amd-smi or rocm-smi on PATH: the 64 hip device ID(s)",
    "runner mlperf --profile mi325x --scenario singlestream,offline,server --mode submission "
    "--out runs/lg-mi325x --dry-run": "preflight failed GPUs: no amd-smi or rocm-smi on PATH",
    "runner mlperf --profile mi325x --scenario singlestream,offline,server --mode submission "
    "--out runs/lg-sub --dry-run": "preflight failed GPUs: no amd-smi or rocm-smi on PATH",
    "runner run --profile mi325x --out runs/acc --dry-run":
        "preflight failed GPUs: no amd-smi or rocm-smi on PATH: the 64 hip device ID(s)",
    "runner mlperf --profile mi325x --scenario SingleStream,Offline,Server --mode submission "
    "--out runs/lg-mi325x --dry-run": "preflight failed GPUs: no amd-smi or rocm-smi on PATH",
}
# With the tiny model's modules in the compile cache (the tiny_compiled fixture).
CACHED = {
    "runner compile --profile tiny": "cached ->",
    "runner compile --profile tiny --out carry": "12 files, 0.",
    "runner generate --profile tiny --count 4 --out runs/gen": "4 images",
}
# Dry runs on Slurm: they check the Slurm commands as the real run does, so they need the
# suite's one-node cluster (scripts/slurm_setup.sh, the slurm_cluster fixture). The clone's
# HOME holds no MLPerf FID statistics (the profile's ~/.cache/.../val2014.npz), so the
# preflight stops it (exit 2), after the Slurm commands' check, as the run would.
SLURM_DRY = {
    "runner run --profile mi325x --executor slurm --nodes 2 --slurm-partition mi325x "
    "--slurm-time 1:00:00 --sbatch-arg=--gres=gpu:8 --out /shared/runs/acc2 --dry-run":
        "preflight failed FID statistics: FID statistics file not found",
}
# The main job (slow: a scored run of 32 samples), then the commands that read its run dir.
MAIN_JOB = {
    "runner run --profile cpu --count 32 --out runs/main": "verdict: PASS",
    "runner run --resume runs/main": "is already complete (32 samples); nothing to do",
    "runner aggregate runs/main": "32 samples -> ",
    "runner status runs/main": "complete): 32/32 samples (100%)",
    "runner report runs/main": "PASS",
    # The results store: the main job recorded itself into the clone's (environment()).
    "runner history import runs/main --dry-run": "would record: run ",
    "runner history import runs/main": "already there: run runs/main",
    "runner history --since 7d": "## History: 1 result(s)",
    "runner history --profile-match cpu --metric stage_ms --since 30d": "stage_ms unet ",
    "runner history --metric fid --metric clip --json": '"name": "clip"',
    "runner history --out runs/history": "runs/history/history.html",
    # bench goldens records one run: propose has its dispatch counts, and a time at 1 run
    "runner bench goldens tiny-bench --sku cpu --out runs/nightly-bench":
        "3 benchmark goldens: ",
    "runner goldens propose tiny-bench --sku cpu": "fewer than 5: no golden time",
    "runner goldens propose tiny-bench --sku cpu --min-runs 1 --since 30d --out "
    "runs/propose": "runs/propose/proposal.md",
}
# What a shell command is checked by, run in the same shell right after it.
THEN = {
    "source <(runner completion bash)": "declare -F _shtab_runner",
    "printf 'stable-diffusion-xl.*.min_query_count = 32\\nstable-diffusion-xl.*.min_duration = "
    "2000\\n' > short.conf": "cat short.conf",
    "printf 'stable-diffusion-xl.*.min_duration = 1000\\nstable-diffusion-xl.*.min_query_count = "
    "8\\n' > short8.conf": "cat short8.conf",
    "python3 -m runner.base.gpu_holders snapshot > gpu-before.json": "cat gpu-before.json",
}

GPU = "needs an AMD GPU (ROCm) and a lab node"
WEIGHTS = "needs the real SDXL checkpoint (about 7 GB of weights)"
PLACEHOLDER = "holds a placeholder to fill in (<sha>, <hash>, <account>, a path of yours)"
SLURM = "needs a lab Slurm cluster with GPU nodes and a shared /shared filesystem"
INSTALL = "installs packages into the Python that runs the tests"
LONG = "minutes of work that the covering test does at a smaller size"
DOCKER_LONG = "builds a harness image or runs workers in containers (minutes)"
BUILDS = "installs IREE releases into venvs of their own and runs each (minutes)"
MLCOMMONS = ("needs a clone of mlcommons/inference from GitHub (the tests run its checker where "
             "MLPERF_INFERENCE_DIR names a checkout)")
NETWORK = ("needs a clone of iree-org/iree-test-suites from GitHub, and its runner's packages "
           "in a venv of its own")

GPU_CHECK = "tests/test_gpu_check.py::test_prepare_then_run_on_this_cpu"
LAB_DB = "needs a lab's PostgreSQL server (the tests start a real one on loopback)"

# Shown but not run here: command -> (why, the test or script that covers it).
NOT_HERE: dict[str, tuple[str, str]] = {
    "runner nightly --pre --find-links https://iree.dev/pip-release-links.html --out "
    "/data/nightly --notify https://hooks.slack.com/services/T0/B0/token": (
        "a whole night, from IREE's nightlies page, posted to Slack; its dry runs over a "
        "directory of nightly wheels are tested",
        "tests/test_nightly.py::test_the_cron_line_runs_as_a_dry_run"),
    "python3 -m pip install -e '.[compile,metrics]' && python3 -m runner run --profile cpu "
    "--count 32 --out runs/main": (
        INSTALL + "; its run is `runner run --profile cpu --count 32 --out runs/main`, run here",
        "tests/test_doc_commands.py::test_the_main_job_and_what_reads_its_run_dir"),
    "python3 -m pip install -e '.[compile,metrics]'": (INSTALL, "scripts/test.sh"),
    "python3 -m pip install -e '.[docs]'": (INSTALL, "scripts/test.sh"),
    "python3 -m pip install -e '.[docs]' && mkdocs serve": (
        INSTALL + "; a server that runs until stopped",
        "tests/test_docs.py::test_the_site_builds_strict"),
    "mkdocs serve": ("a server that runs until stopped",
                     "tests/test_docs.py::test_the_site_builds_strict"),
    "mkdocs build --strict": ("run with --site-dir in a temporary directory, to leave the "
                              "checkout clean", "tests/test_docs.py::test_the_site_builds_strict"),
    "python3 -m pip install torch==2.14.1 torchvision==0.29.1 --index-url "
    "https://download.pytorch.org/whl/cpu": (
        INSTALL + "; download.pytorch.org is not reachable here", "scripts/test.sh"),
    "python3 -m pip install torch==2.14.1 torchvision==0.29.1 --index-url "
    "https://download.pytorch.org/whl/rocm<X.Y>": (INSTALL + "; " + PLACEHOLDER,
                                                  "scripts/test.sh"),
    "bash scripts/test.sh": ("it is the test suite itself", "scripts/test.sh"),
    'bash scripts/test.sh -m "not slow"': ("it is the test suite itself",
                                                                 "scripts/test.sh"),
    "python3 scripts/suite_cost.py ~/.cache/iree-sdxl-runner/suite-cost.json --update "
    "--record": ("it reads a whole run of the suite and rewrites the budget and "
                 "docs/measurements.json", "tests/test_suite_cost.py::"
                 "test_update_takes_the_whole_suite_and_record_keeps_the_totals"),
    "python3 -m pip wheel --no-deps -w dist .": (
        "writes the wheel into the checkout; the covering test builds it from a copy",
        "tests/test_install.py::test_the_installed_wheel_runs_the_readme_from_anywhere"),
    "python3 -m venv ~/venvs/runner && ~/venvs/runner/bin/pip install --find-links dist "
    "'iree-sdxl-runner[compile,metrics]'": (
        INSTALL + " (a venv of its own, with torch)",
        "tests/test_install.py::test_the_installed_wheel_runs_the_readme_from_anywhere"),
    "pipx install '.[compile,metrics]'": (
        INSTALL + " (a venv of pipx's, with torch)",
        "tests/test_install.py::test_the_installed_wheel_runs_the_readme_from_anywhere"),
    # Runs and what reads them
    "runner run --profile cpu --count 4 --out runs/smoke": (
        LONG, "tests/test_cli.py::test_a_short_run_completes_as_a_labelled_subset"),
    "runner run --resume runs/main --rescore": (
        LONG, "tests/test_lifecycle.py::"
              "test_rescore_is_the_only_work_a_complete_run_does_on_resume"),
    "bash runs/main/reproduce.sh": (
        LONG, "tests/test_shell_scripts.py::"
              "test_reproduce_sh_resolves_relative_arguments_where_the_run_was_made"),
    "bash runs/main/reproduce.sh /tmp/main-again": (
        LONG, "tests/test_shell_scripts.py::"
              "test_reproduce_sh_takes_a_hostile_out_dir_and_renders_image_and_slurm_safely"),
    "runner report runs/main --against runs/other": (
        PLACEHOLDER + " (runs/other: a second run)",
        "tests/test_report.py::test_against_shows_the_worst_samples"),
    "runner run --profile mi325x --out runs/acc": (GPU, "tests/test_run.py::"
                                                        "test_plan_mi325x_cpx_spx_and_cpd"),
    "runner status runs/acc": (GPU + " (the MI325X run's dir)",
                               "tests/test_slurm.py::test_status_shows_each_node_and_worker"),
    "runner run --resume runs/acc": (GPU + " (the MI325X run's dir)",
                                     "tests/test_run.py::"
                                     "test_killed_run_resumes_without_loss_or_duplicates"),
    "runner report runs/acc --against runs/acc-previous": (
        GPU + " (two MI325X run dirs)",
        "tests/test_report.py::test_against_shows_the_worst_samples"),
    # Accuracy
    "runner score runs/main": (LONG, "tests/test_accuracy_tiny.py::"
                                     "test_iree_run_passes_through_the_cli"),
    "runner score runs/smoke --require-full": (
        LONG, "tests/test_report.py::test_subset_is_labelled_not_judged_and_require_full_fails_it"),
    "runner score ANY_DIR --profile mi325x --log mlperf_log_accuracy.json": (
        PLACEHOLDER + "; needs MLPerf's pretrained Inception/CLIP weights and val2014 statistics",
        "tests/test_accuracy_tiny.py::"
        "test_oracle_images_pass_and_reproduce_the_calibration_via_an_mlperf_log"),
    "runner compare runs/a runs/b": (PLACEHOLDER + " (two run dirs)",
                                     "tests/test_accuracy_cli.py::"
                                     "test_compare_lists_the_images_that_moved"),
    "runner compare runs/a runs/b --out cmp": (
        PLACEHOLDER + " (two run dirs)", "tests/test_accuracy_cli.py::"
                                         "test_compare_lists_the_images_that_moved"),
    "runner calibrate runs/known-good --out calib --fid-percent 2 --clip-percent 0.2": (
        PLACEHOLDER + " (a known-good run)",
        "tests/test_accuracy_cli.py::test_calibrate_then_score_with_the_written_snippet"),
    "runner oracle --count 32 --out runs/oracle": (
        LONG, "tests/test_accuracy_tiny.py::"
              "test_oracle_images_pass_and_reproduce_the_calibration_via_an_mlperf_log"),
    "runner oracle --guidance 2.0 --out runs/g2": (LONG, "tests/test_accuracy_tiny.py::"
                                                         "test_broken_pipeline_fails"),
    # Validate
    "runner validate --iree wheels:3.13.0 --profile cpu --count 32 --goldens tiny --to "
    "v2.0 --out runs/validate": (DOCKER_LONG, "tests/test_validate.py::"
                                              "test_validate_passes_and_writes_bumped_goldens"),
    "runner validate --iree source:89ece87b --profile mi325x --count 5000 --goldens "
    "iree-test-suites/sharktank_models/quality_tests/sdxl --out runs/validate-89ece87b": (
        GPU + "; a from-source IREE build takes hours",
        "tests/test_validate.py::test_validate_passes_and_writes_bumped_goldens"),
    "runner validate --iree source:<sha> --profile mi325x --dry-run --out runs/v": (
        PLACEHOLDER, "tests/test_export_sdxl.py::"
                     "test_validate_dry_run_of_the_lab_profile_prints_batch_32"),
    "runner validate --iree source:<sha> --profile mi325x --count 5000 --goldens "
    "iree-test-suites/sharktank_models/quality_tests/sdxl --out runs/validate-<sha>": (
        GPU + "; " + PLACEHOLDER, "tests/test_validate.py::"
                                  "test_validate_passes_and_writes_bumped_goldens"),
    "runner validate --iree source:<sha> --profile mi325x --count 5000 --goldens "
    "iree-test-suites/sharktank_models/quality_tests/sdxl --out runs/validate-<sha> --baseline "
    "runs/validate-<previous sha>": (
        GPU + "; " + PLACEHOLDER, "tests/test_validate.py::"
                                  "test_failing_accuracy_stops_before_goldens"),
    # Goldens
    "runner goldens check tiny tiny-torch": (
        LONG + " (5 compiles with a cold cache)", "tests/test_goldens_check.py::"
                                                  "test_tiny_suite_passes_on_cpu"),
    "runner goldens check tiny tiny-torch --out reports/goldens": (
        LONG + " (5 compiles with a cold cache)",
        "tests/test_goldens_torch_layout.py::test_tiny_torch_suite_passes_on_cpu"),
    'BACKEND=cpu runner goldens check tiny-torch -k "clip or compstat" --timeout 600 '
    "--strict": (LONG, "tests/test_goldens_torch_layout.py::"
                       "test_within_its_timeout_a_test_runs_isolated_and_passes"),
    "BACKEND=cpu runner goldens check tiny-torch -k clip --timeout 600 --strict": (
        LONG, "tests/test_goldens_torch_layout.py::"
              "test_environment_variables_as_iree_ci_reads_them"),
    "runner goldens generate tiny --to v2.0 --out runs/goldens-v2": (
        LONG, "tests/test_goldens_versioning.py::"
              "test_generate_then_bump_touches_only_versioned_names"),
    "runner goldens generate tiny-torch --to next --out new-goldens": (
        LONG, "tests/test_goldens_torch_layout.py::"
              "test_generate_then_bump_changes_only_versioned_names"),
    "runner goldens bump tiny --to v2.0 --out runs/goldens-v2/json": (
        "needs runs/goldens-v2 from `goldens generate` above",
        "tests/test_goldens_versioning.py::test_bump_to_out_dir_and_unversioned_names"),
    "runner goldens bump tiny-torch --to next --out bumped": (
        LONG, "tests/test_goldens_torch_layout.py::"
              "test_generate_then_bump_changes_only_versioned_names"),
    "runner goldens upload runs/goldens-v2 --container-url "
    "https://<account>.blob.core.windows.net/sharkpublic/...": (
        PLACEHOLDER + "; uploads to Azure",
        "tests/test_goldens_upload.py::test_dry_run_prints_exact_commands_without_secrets"),
    "runner goldens upload runs/goldens-v2 --container-url "
    "https://<account>.blob.core.windows.net/sharkpublic/<path>": (
        PLACEHOLDER, "tests/test_goldens_upload.py::"
                     "test_upload_passes_the_sas_through_the_environment"),
    "runner goldens upload runs/goldens-v2 --container-url "
    "https://<account>.blob.core.windows.net/sharkpublic/<path> --dry-run": (
        PLACEHOLDER, "tests/test_goldens_upload.py::"
                     "test_dry_run_prints_exact_commands_without_secrets"),
    "runner goldens upload runs/validate/goldens --container-url "
    "https://<account>.blob.core.windows.net/sharkpublic/... --dry-run": (
        PLACEHOLDER, "tests/test_goldens_upload.py::"
                     "test_dry_run_prints_exact_commands_without_secrets"),
    "runner goldens upload runs/validate/goldens --container-url "
    "https://<account>.blob.core.windows.net/sharkpublic/...": (
        PLACEHOLDER, "tests/test_goldens_upload.py::"
                     "test_dry_run_prints_exact_commands_without_secrets"),
    "runner goldens compare-steps --profile tiny --samples 0": (
        LONG, "tests/test_goldens_steps.py::test_every_stage_is_compared_on_its_own"),
    # Failure modes
    "runner bench --profile cpu --count 4 --out runs/bench-x": (
        "shown stopped by a time limit half way, which a page of commands cannot do",
        "tests/test_signals.py::test_a_stopped_command_goes_on_as_its_help_says"),
    "runner bench --resume runs/bench-x": (
        "goes on from a bench stopped half way (the command above)",
        "tests/test_signals.py::test_a_stopped_command_goes_on_as_its_help_says"),
    # Benchmarks
    "runner bench --profile cpu --count 32 --batch-size 1,2 --cpd 1,2 --out runs/bench": (
        LONG, "tests/test_bench_sweep.py::test_sweep_runs_each_layout_and_reports_the_best"),
    "runner bench goldens tiny-bench --sku cpu": (
        LONG, "tests/test_bench_goldens.py::test_shipped_tiny_goldens_pass_and_report_everything"),
    "runner bench goldens tiny-torch --sku cpu": (
        LONG, "tests/test_goldens_torch_layout.py::"
              "test_tiny_torch_benchmarks_through_bench_goldens"),
    "runner bench goldens tiny-torch --marker cpu -k clip": (
        LONG, "tests/test_goldens_torch_layout.py::"
              "test_tiny_torch_benchmarks_through_bench_goldens"),
    "runner bench --profile tiny --ab-tuning-spec tiny-bench/tiny_bmm_spec_cpu.mlir "
    "--no-throughput --out runs/ab": (LONG, "tests/test_bench_ab.py::"
                                            "test_ab_measures_both_arms_and_dumps_the_final_specs"),
    "runner bench --profile tiny --no-throughput --dispatches --out runs/profile": (
        LONG, "tests/test_dispatch_profile.py::"
              "test_profile_matches_iree_profiles_own_aggregation"),
    "runner bench --profile mi325x --batch-size 1,2,4 --cpd 1,2 --out runs/bench": (
        GPU, "tests/test_bench_sweep.py::test_sweep_runs_each_layout_and_reports_the_best"),
    # Images and containers
    "runner image build --iree wheels:3.13.0": (
        DOCKER_LONG, "tests/test_docker_image.py::"
                     "test_wheels_image_imports_runner_and_runs_iree_compile"),
    "runner image build --iree source:<sha> --dry-run": (
        PLACEHOLDER, "tests/test_docker_image.py::"
                     "test_the_printed_docker_build_command_builds_the_same_image"),
    "runner image build --iree build-dir:/path/to/iree-build": (
        PLACEHOLDER + "; " + DOCKER_LONG,
        "tests/test_docker_image.py::test_build_dir_image_takes_iree_from_the_tree"),
    "runner image build --iree source:<sha> --base-image rocm/dev-ubuntu-22.04:6.3 --backends "
    "llvm-cpu,rocm --drivers local-task,hip": (
        PLACEHOLDER + "; a from-source IREE build takes hours",
        "tests/test_docker_dockerfiles.py"),
    "runner image inspect iree-sdxl-runner:wheels-3.13.0-<hash>": (
        PLACEHOLDER, "tests/test_docker_image.py::"
                     "test_image_info_has_id_labels_and_the_provenance_from_inside"),
    "runner run --profile cpu --executor docker --image iree-sdxl-runner:wheels-3.13.0-<hash> "
    "--out runs/d": (PLACEHOLDER + "; " + DOCKER_LONG,
                     "tests/test_docker_run.py::"
                     "test_docker_workers_match_local_workers_and_reproduce"),
    # MLPerf
    "runner mlperf --profile cpu --scenario offline --mode performance --count 32 --user-conf "
    "short.conf --out runs/lg-offline": (
        LONG, "tests/test_loadgen.py::test_offline_performance_summary_and_reports"),
    "runner mlperf --profile cpu --scenario server --mode performance --count 32 "
    "--server-target-qps 3 "
    "--user-conf short.conf --out runs/lg-server": (
        LONG, "tests/test_loadgen.py::test_server_batches_fill_up_to_the_batch_size"),
    "runner mlperf --profile cpu --scenario singlestream,offline,server --mode submission "
    "--count 32 --user-conf short.conf --out runs/lg-sub": (
        LONG, "tests/test_loadgen_submission.py::"
              "test_tree_is_the_rounds_layout_under_division_and_submitter"),
    "runner mlperf --profile cpu --scenario singlestream,offline,server --mode submission "
    "--count 8 --user-conf short8.conf --out runs/lg-sub8": (
        LONG, "tests/test_loadgen_submission.py::"
              "test_tree_is_the_rounds_layout_under_division_and_submitter"),
    "git clone https://github.com/mlcommons/inference /tmp/inference && git -C /tmp/inference "
    "checkout b66003e10e2db4b8c36a448b0545ec90fcc6e9e9": (
        MLCOMMONS, "tests/test_loadgen_submission.py::"
                   "test_mlperfs_checker_finds_only_the_short_runs_errors"),
    "PYTHONPATH=/tmp/inference/tools/submission python3 -m submission_checker.main --input "
    "runs/lg-sub8/submission --version v6.1 --submitter Demo --csv runs/lg-sub8.csv": (
        MLCOMMONS, "tests/test_loadgen_submission.py::"
                   "test_mlperfs_checker_finds_only_the_short_runs_errors"),
    "PYTHONPATH=/tmp/inference/tools/submission python3 -m submission_checker.main --input "
    "runs/lg-sub8-docker/submission --version v6.1 --submitter Demo --csv "
    "runs/lg-sub8-docker.csv": (
        MLCOMMONS, "tests/test_loadgen_submission.py::"
                   "test_mlperfs_checker_finds_only_the_short_runs_errors"),
    "runner image build --iree wheels:3.13.0 --tag iree-sdxl-runner:mlperf": (
        DOCKER_LONG, "tests/test_docker_image.py::"
                     "test_wheels_image_imports_runner_and_runs_iree_compile"),
    "runner mlperf --profile cpu --scenario singlestream,offline,server --mode submission "
    "--count 8 --user-conf short8.conf --executor docker --image iree-sdxl-runner:mlperf "
    "--out runs/lg-sub8-docker": (
        DOCKER_LONG, "tests/test_loadgen_docker.py::test_loadgen_drives_docker_workers"),
    "runner mlperf --profile mi325x --scenario singlestream,offline,server --mode submission "
    "--out runs/lg-sub": (
        GPU, "tests/test_loadgen.py::test_mi325x_dry_run_prints_the_settings_of_every_test"),
    "runner mlperf --profile cpu --scenario offline --mode performance --count 16 "
    "--min-duration 0.1 --min-query-count 16 --out runs/lg-perf": (
        LONG, "tests/test_loadgen.py::test_every_help_example_is_short_and_shows_progress"),
    # Slurm
    "runner run --profile mi325x --executor slurm --nodes 4 --slurm-partition mi325x "
    "--slurm-time 2:00:00 --sbatch-arg=--gres=gpu:8 --out /shared/runs/acc": (
        SLURM, "tests/test_slurm.py::test_slurm_run_gives_the_local_bytes_and_records_nodes"),
    "runner run --profile mi325x --executor slurm --nodes 4 --slurm-partition mi325x --out "
    "/shared/runs/acc": (SLURM, "tests/test_slurm.py::"
                                "test_slurm_run_gives_the_local_bytes_and_records_nodes"),
    "runner bench --profile mi325x --executor slurm --nodes 1 --slurm-partition mi325x "
    "--batch-size 1,2,4 --cpd 1,2 --iree source:a1b2c3d,source:d4e5f6a --count 640 "
    "--out /shared/runs/sweep": (
        SLURM, "tests/test_slurm.py::test_slurm_sweep_over_two_iree_builds"),
    "runner bench --profile mi325x --executor slurm --nodes 1 --slurm-partition mi325x "
    "--batch-size 1,2 --iree source:a1b2c3d,source:d4e5f6a --out /shared/runs/sweep": (
        SLURM, "tests/test_bench_sweep.py::test_slurm_sweep_dry_run_is_one_job_per_combination"),
    "runner status /shared/runs/acc --json": (
        SLURM, "tests/test_slurm.py::test_status_shows_each_node_and_worker"),
    # Models
    "runner export tiny": ("rewrites the shipped assets; torch export (minutes)",
                           "tests/test_export.py::"
                           "test_reexport_matches_shipped_assets_byte_for_byte"),
    "runner export sdxl --seeded": (
        "exports SDXL's full graph: 7 GB of weights, 8 GB of memory, about 4 minutes",
        "tests/test_export_sdxl.py::test_seeded_full_size_export_has_iree_ci_signatures"),
    "runner export sdxl --seeded && runner compile --profile sdxl-seeded": (
        "exports SDXL's full graph (about 4 minutes) and compiles it for gfx942 (about 6)",
        "tests/test_export_sdxl.py::test_seeded_full_size_export_has_iree_ci_signatures"),
    "python3 scripts/measure_sdxl_seeded.py --out /tmp/sdxl-measure": (
        "the measurement of the seeded SDXL export and compiles (about 15 minutes)",
        "tests/test_export_sdxl.py::test_seeded_full_size_export_has_iree_ci_signatures"),
    "runner export sdxl --from ~/models/stable-diffusion-xl-base-1.0 --batch-sizes 1,8,32": (
        WEIGHTS, "tests/test_export_sdxl.py::test_checkpoint_export_is_the_embedded_model"),
    "runner export sdxl --from /path/to/sdxl-base-1.0 --batch-sizes 1,8": (
        WEIGHTS, "tests/test_export_sdxl.py::"
                 "test_export_cache_adds_batch_sizes_and_skips_what_is_there"),
    "runner export sdxl --from ~/models/stable-diffusion-xl-base-1.0 --vae-dtype fp16 "
    "--vae-from ~/models/sdxl-vae-fp16-fix": (
        WEIGHTS, "tests/test_vae_precision.py::"
                 "test_a_decode_that_overflows_fails_its_samples_and_nothing_scores_them"),
    "runner export sdxl --from /path/to/sdxl-base-1.0 --vae-dtype fp16 --vae-from "
    "/path/to/sdxl-vae-fp16-fix": (
        WEIGHTS, "tests/test_vae_precision.py::"
                 "test_a_checkpoints_fp16_decoder_is_the_shipped_one_and_keyed_apart"),
    "runner run --profile cpu --set model.vae_dtype=fp16 --count 32 --out runs/vae16": (
        LONG, "tests/test_vae_precision.py::"
              "test_tiny_renders_within_one_lsb_of_diffusers_with_each_decoder_precision"),
    "python3 scripts/measure_vae_precision.py --out /tmp/vae-measure": (
        "the measurement of 32 prompts through IREE and diffusers at both VAE precisions, "
        "two exports included (minutes)",
        "tests/test_vae_precision.py::"
        "test_tiny_renders_within_one_lsb_of_diffusers_with_each_decoder_precision"),
    "runner compile --profile mi325x --set "
    "model=checkpoint:$HOME/models/stable-diffusion-xl-base-1.0": (
        WEIGHTS, "tests/test_export_sdxl.py::"
                 "test_profile_naming_a_checkpoint_exports_missing_batch_sizes_on_demand"),
    "runner compile --profile mi325x": (
        WEIGHTS + "; exports it at batch 32 and compiles for gfx942 (minutes)",
        "tests/test_export_sdxl.py::"
        "test_profile_naming_a_checkpoint_exports_missing_batch_sizes_on_demand"),
    "runner fetch --profile sdxl": ("downloads IREE CI's SDXL artifacts (GBs) from Azure",
                                    "tests/test_remote_model.py::"
                                    "test_fetch_then_generate_from_urls"),
    # IREE's own test-suite runner beside ours (iree-test-suites is a network clone)
    "git clone https://github.com/iree-org/iree-test-suites /tmp/its": (
        NETWORK, "scripts/iree_conformance.py"),
    "git -C /tmp/its checkout 612f93663b32ea86ea442e87be549f1056a5de1c": (
        NETWORK, "scripts/iree_conformance.py"),
    "git -C /tmp/its worktree add /tmp/its-regression a8791d2^": (
        NETWORK, "scripts/iree_conformance.py"),
    "python3 -m venv --system-site-packages /tmp/its-venv": (
        NETWORK, "scripts/iree_conformance.py"),
    "/tmp/its-venv/bin/pip install azure-storage-blob tabulate pytest-timeout pytest-check": (
        NETWORK, "scripts/iree_conformance.py"),
    "python3 scripts/iree_conformance.py --iree-test-suites /tmp/its --regression-checkout "
    "/tmp/its-regression --python /tmp/its-venv/bin/python --work /tmp/conformance": (
        NETWORK + "; about 40 minutes", "tests/test_goldens_conformance.py::"
        "test_random_weights_match_iree_runners_bytes"),
    # Bisect and trend: each build is a venv of its own IREE release (about 95 MB of wheels)
    "runner bisect --good wheels:3.10.0 --bad wheels:3.13.0 --test images --profile tiny "
    "--count 2 --out runs/bisect": (
        BUILDS, "tests/test_bisect.py::test_images_bisect_over_pypi_releases"),
    "runner trend --range wheels:3.10.0..wheels:3.13.0 --profile tiny --count 2 --out "
    "runs/trend": (
        BUILDS, "tests/test_bisect.py::"
                "test_trend_over_commits_marks_image_changes_and_which_dispatches_moved"),
    "runner trend wheels:3.12.0 wheels:3.13.0 --profile tiny --count 2 --out "
    "runs/trend-dispatches": (
        BUILDS, "tests/test_bisect.py::"
                "test_trend_over_commits_marks_image_changes_and_which_dispatches_moved"),
    "runner trend wheels:3.12.0 wheels:3.13.0 --test throughput:5 --out runs/t": (
        BUILDS, "tests/test_bisect.py::"
        "test_verdicts_of_throughput_compstat_accuracy_and_exit_codes"),
    "runner bisect --good commit:<good-sha> --bad commit:<bad-sha> --repo ~/iree --test accuracy "
    "--profile mi325x --out runs/bisect-sdxl": (
        GPU + "; " + PLACEHOLDER + " (an IREE checkout, two of its commits)",
        "tests/test_bisect.py::test_commit_dry_run_lists_first_parent_commits_and_the_first_step"),
    "runner bisect --good commit:<sha> --bad commit:<sha> --repo ~/iree --test "
    "script:./repro.sh --out runs/b --dry-run": (
        PLACEHOLDER + "; an IREE checkout", "tests/test_bisect.py::"
        "test_commit_dry_run_lists_first_parent_commits_and_the_first_step"),
    "runner bisect --good wheels:3.5.0rc20250601 --bad wheels:3.5.0rc20250620 --pre "
    "--find-links https://iree.dev/pip-release-links.html --test accuracy --out runs/n": (
        "needs iree.dev's nightly index (not a package registry)", "tests/test_bisect.py::"
        "test_nightlies_from_a_find_links_dir_are_listed_by_date"),
    'python3 -m pytest -q -p no:cacheprovider tests/test_bisect.py -m "not slow"': (
        "the suite itself", "scripts/test.sh"),
    "python3 -m pytest -q -p no:cacheprovider tests/test_bisect.py -m slow": (
        "the suite itself", "scripts/test.sh"),
    'python3 scripts/fuzz_inputs.py --examples 300 -k "yaml or conf"': (
        "a longer fuzz run, from a random seed (minutes)",
        "tests/test_inputs_fuzz.py"),
    # One metric, IREE tools of your own, the H100
    "runner run --profile cpu --count 4 --metrics clip --out runs/clip-only": (
        LONG, "tests/test_cli.py::"
              "test_a_run_scoring_one_metric_records_it_and_rescores_the_same"),
    "runner score runs/clip-only --metrics fid": (
        LONG, "tests/test_cli.py::"
              "test_a_run_scoring_one_metric_records_it_and_rescores_the_same"),
    "runner score runs/main --metrics fid": (
        LONG, "tests/test_accuracy_cli.py::test_one_metric_is_scored_and_judged_alone"),
    "runner --iree-tools ~/iree-build/tools --version": (
        PLACEHOLDER, "tests/test_iree_tools.py::test_override_dir_comes_first_and_is_used"),
    "IREE_TOOL_PATH=~/iree-build/tools runner compile --profile tiny --dry-run": (
        PLACEHOLDER, "tests/test_iree_tools.py::test_override_dir_comes_first_and_is_used"),
    "runner compile --profile h100-seeded": (
        "exports SDXL's full graph (8 GB of memory, minutes) and compiles it for CUDA",
        "tests/test_h100_profile.py::test_cuda_backend_compiles_the_tiny_model_with_the_"
        "profiles_flags"),
    "runner bench --profile h100-seeded": (
        "needs an NVIDIA H100 node", "tests/test_h100_profile.py::"
        "test_compile_dry_run_prints_the_export_then_cuda_compiles"),
    "RUNNER_CACHE_DIR=carry runner run --profile tiny --count 4 --out runs/elsewhere": (
        "shows a machine without iree-compile; here the compiler would compile into carry",
        "tests/test_compile_elsewhere.py::test_run_without_a_compiler_uses_the_carried_modules"),
    "runner compile --profile h100-seeded --batch-sizes 1,8 --out carry": (
        "exports SDXL's full graph (8 GB of memory, minutes) and compiles it for CUDA",
        "tests/test_compile_elsewhere.py::"
        "test_seeded_model_runs_from_its_spec_without_torch"),
    "runner export weights --from carry/exports/sdxl-seeded-sdxl-float16-<key>": (
        PLACEHOLDER + " (an export's key)",
        "tests/test_seeded_weights.py::test_export_weights_writes_what_the_spec_describes"),
    # The GPU check (docs/gpu-check.md)
    "runner gpu-check prepare --profile h100-seeded --out carry": (
        "exports SDXL's full graph (8 GB of memory, minutes) and compiles it for CUDA", GPU_CHECK),
    "runner gpu-check run --carry carry --out results": (
        "needs the carry `prepare --profile h100-seeded` writes, and an NVIDIA GPU", GPU_CHECK),
    "runner gpu-check run --carry carry --out results --budget 480": (
        "needs the carry `prepare --profile h100-seeded` writes, and an NVIDIA GPU", GPU_CHECK),
    "runner gpu-check run --resume results": (
        "needs a GPU check's results to resume", GPU_CHECK),
    "runner gpu-check prepare --profile cpu --batch-sizes 1,2 --no-wheels --out carry-cpu": (
        LONG, GPU_CHECK),
    "runner gpu-check run --carry carry-cpu --out results-cpu": (LONG, GPU_CHECK),
    # The results store
    "export RUNNER_RESULTS_URL=postgresql://runner:PASSWORD@db.lab:5432/results": (
        LAB_DB, "tests/test_history_store.py::test_two_writers_at_once_both_land_whole"),
    "runner history --iree-match 3.12.0..3.13.0 --machine 'mi325x-*' --results "
    "postgresql://lab@db.lab/results": (LAB_DB, "tests/test_history.py::test_history_filters"),
    "runner history import runs/nightly-* --results postgresql://lab@db.lab/results": (
        LAB_DB, "tests/test_history.py::"
                "test_import_records_a_real_out_dir_once_whatever_its_name"),
    "runner history confirm --good wheels:3.12.0 --bad wheels:3.13.0 --command 'bench "
    "goldens' --metric time_ms --stage tiny-bench/unet_cpu --sku cpu --out runs/confirm-unet "
    "--dry-run": (
        "needs a history of that series on this machine, which the main job's store lacks",
        "tests/test_history_confirm.py::"
        "test_confirm_dry_run_prints_each_round_interleaved_and_writes_nothing"),
    "runner history confirm --good wheels:3.12.0 --bad wheels:3.13.0 --command 'bench "
    "goldens' --metric time_ms --stage tiny-bench/unet_cpu --sku cpu --out runs/confirm-unet": (
        LONG, "tests/test_history_confirm.py::"
              "test_confirm_measures_both_builds_interleaved_and_history_judges_by_it"),
    "python3 scripts/bench_history.py": (
        "the benchmark: the main job, then a store of 10,000 results (minutes)",
        "tests/test_history.py::test_a_run_records_itself_and_an_unreachable_store_fails_nothing"),
    "python3 scripts/bench_history_alarms.py": (
        "the benchmark: 20 real nights of bench goldens, a third beside a CPU hog, and a "
        "new build's first-night A/B of real rounds (minutes)",
        "tests/test_bench_alarms.py::"
        "test_a_slower_build_is_flagged_across_the_builds_from_its_third_night"),
    "runner completion zsh > ~/.zfunc/_runner": (
        "writes into your home directory", "tests/test_cli.py::"
                                           "test_completion_scripts_know_the_subcommands"),
}


def test_every_shown_command_runs_here_or_is_listed():
    shown = shown_commands()
    runs = {*QUICK, *REFUSED_HERE, *CACHED, *SLURM_DRY, *MAIN_JOB}
    assert not runs & set(NOT_HERE), "a command both runs and is listed as not run"
    missing = {c: where for c, where in shown.items() if c not in runs and c not in NOT_HERE}
    assert not missing, ("commands shown in the docs that no test runs; run them in "
                         f"tests/test_doc_commands.py or list them in NOT_HERE: {missing}")
    stale = (runs | set(NOT_HERE)) - set(shown)
    assert not stale, f"no page shows these any more: {sorted(stale)}"
    assert set(THEN) <= runs


def test_every_covering_test_exists():
    for command, (reason, cover) in NOT_HERE.items():
        assert reason, command
        path, _, name = cover.partition("::")
        assert (REPO / path).is_file(), f"{command}: {path} does not exist"
        if name:
            text = (REPO / path).read_text(encoding="utf-8")
            assert re.search(rf"^def {re.escape(name)}\(", text, re.M), \
                f"{command}: {cover} does not exist"


def test_commands_are_read_as_a_shell_would():
    page = ("```bash\nrunner a --x 'y # z' \\\n  --w   # note\n# alone\n\nB=1 runner b\n```\n"
            "```text\nnot a command\n```\n")
    assert commands_in(page) == ["runner a --x 'y # z' --w", "B=1 runner b"]


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory, small_checkpoint) -> Path:
    """The repo's files as a clone has them (tracked and not ignored), a `runner` on PATH
    that is this copy's, as `pip install -e .` would make it, and a HOME where the lab
    profiles find their checkpoint (environment())."""
    clone = tmp_path_factory.mktemp("clone") / "iree-sdxl-runner"
    if (REPO / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=REPO, capture_output=True,
                                check=True)
        for name in filter(None, listed.stdout.decode().split("\0")):
            source = REPO / name
            if source.is_symlink():  # runner/assets/ links to configs/, goldens/, ...
                (clone / name).parent.mkdir(parents=True, exist_ok=True)
                (clone / name).symlink_to(os.readlink(source))
            elif source.is_file():
                (clone / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, clone / name)
    else:  # an unpacked archive: what .gitignore leaves out, by hand
        shutil.copytree(REPO, clone, ignore=shutil.ignore_patterns(
            "runs", "site", "build", "__pycache__", "*.egg-info", "*.so", ".*_cache"))
    bin_dir = clone.parent / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "runner"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m runner \"$@\"\n")
    shim.chmod(0o755)
    lab_home(clone.parent, small_checkpoint)
    # Where the commands run: outside the checkout, as from a pip install. A page's
    # `iree-test-suites/` is the reader's clone of iree-org/iree-test-suites: here the copy
    # of its files the tests keep.
    work_dir(clone).mkdir()
    (work_dir(clone) / "iree-test-suites").symlink_to(
        clone / "tests" / "fixtures" / "iree-test-suites")
    return clone


def work_dir(clone: Path) -> Path:
    """The directory the shown commands run in: beside the clone, not inside it."""
    return clone.parent / "work"


def environment(clone: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(clone), RUNNER_PROGRESS="off",
               RUNNER_RESULTS_URL=str(work_dir(clone) / "runs" / "results.sqlite"),
               HOME=str(clone.parent / "home"), RUNNER_CACHE_DIR=str(cache_dir()))
    env["PATH"] = f"{clone.parent / 'bin'}{os.pathsep}{env['PATH']}"
    return env


# Plain `runner ...` commands run one after another in one Python, through runner.cli.main.main
# with the command's own argv (as the console script calls it), which saves an interpreter
# start and the imports per command; anything that needs a shell runs in bash.
DRIVER = """
import contextlib, io, json, sys
from runner.cli.main import main
results = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    results.append([code, out.getvalue()])
print(json.dumps(results))
"""


def plain(command: str) -> list[str] | None:
    """The argv of a command that needs no shell (no pipe, redirect, variable or `~`)."""
    if re.search(r"[|&;<>$~`(]", command):
        return None
    argv = shlex.split(command)
    return argv[1:] if argv[0] == "runner" else None


def run_commands(clone: Path, commands: dict[str, str], code_expected: int = 0) -> None:
    env = environment(clone)
    outputs: dict[str, tuple[int, str]] = {}
    batch = [c for c in commands if plain(c) is not None]
    if batch:
        proc = subprocess.run([sys.executable, "-c", DRIVER,
                               json.dumps([plain(c) for c in batch])],
                              cwd=work_dir(clone), env=env, capture_output=True, text=True,
                              timeout=1800)
        assert proc.returncode == 0, proc.stderr
        results = json.loads(proc.stdout.splitlines()[-1])
        outputs.update({c: (code, out) for c, (code, out) in zip(batch, results, strict=True)})
    for command in commands:
        if command in outputs:
            continue
        script = f"set -e -o pipefail\n{command}\n{THEN.get(command, '')}"
        proc = subprocess.run(["bash", "-c", script], cwd=work_dir(clone), env=env,
                              capture_output=True, text=True, timeout=1800)
        outputs[command] = (proc.returncode, proc.stdout + proc.stderr)
    for command, expected in commands.items():
        code, out = outputs[command]
        assert code == code_expected, f"`{command}` exited {code}:\n{out[-3000:]}"
        assert expected in out, f"`{command}` did not print {expected!r}:\n{out[-3000:]}"


def test_quick_commands(fresh_clone):
    run_commands(fresh_clone, QUICK)


def test_lab_dry_runs_stop_at_the_preflight_here(fresh_clone):
    if any(shutil.which(tool) for tool in ("rocm-smi", "nvidia-smi")):
        pytest.skip("a GPU machine: the preflight reads its GPUs (tests/test_preflight.py)")
    run_commands(fresh_clone, REFUSED_HERE, code_expected=2)


def test_commands_that_use_the_compile_cache(fresh_clone, tiny_compiled):
    run_commands(fresh_clone, CACHED)


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_dry_runs(fresh_clone, slurm_cluster):  # noqa: F811
    run_commands(fresh_clone, SLURM_DRY, code_expected=2)


@pytest.mark.slow
def test_the_main_job_and_what_reads_its_run_dir(fresh_clone):
    pytest.importorskip("torch")
    run_commands(fresh_clone, MAIN_JOB)


# --- what the pages show is the grammar the parser takes -------------------------------------
PLACEHOLDER_TEXT = re.compile(r"<[^<>]*>")  # `<sha>`, `<previous sha>`: one word each
INLINE_COMMAND = re.compile(r"`(runner [^`\n]+)`")
SHELL_STOPS = {"|", "&&", ";", ">", "||"}


def runner_words(command: str) -> list[str] | None:
    """The arguments after `runner` in a shown command, placeholders as one word; None
    when it runs no `runner`."""
    words = shlex.split(PLACEHOLDER_TEXT.sub("X", command))
    if "runner" not in words:
        return None
    words = words[words.index("runner") + 1:]
    stop = next((i for i, w in enumerate(words) if w in SHELL_STOPS), len(words))
    return words[:stop]


def test_every_shown_command_parses_as_written(capsys):
    """Each `runner` command a page or a help example shows is one the parser takes: no
    old spelling (refused), no flag it lacks, no abbreviation, no missing argument."""
    from runner.cli.output import lenient_if_resuming

    plain_parser = build_parser()
    refused = {}
    for command in shown_commands():
        argv = runner_words(command)
        if argv is None:
            continue
        parser = plain_parser
        if "--resume" in argv:  # as the CLI reads it: the attempt's record holds the rest
            parser = build_parser()
            lenient_if_resuming(parser, argv)
        try:
            _, extra = parser.parse_known_args(argv)
            if extra:
                refused[command] = f"unrecognized: {extra}"
        except SystemExit as e:
            if e.code:
                refused[command] = capsys.readouterr().err
    assert refused == {}


def _live_flags(parser) -> set[str]:
    return {f for a in parser._actions if a.help != "==SUPPRESS==" for f in a.option_strings}


def test_every_flag_a_page_names_in_passing_is_one_its_command_takes():
    """An inline `runner image build --from` names a flag that is gone: each `--flag` in an
    inline `runner ...` span is a live option of the command it follows."""
    from runner.cli.grammar import subparsers_of

    root = build_parser()
    wrong = []
    for page in doc_pages():
        for span in INLINE_COMMAND.findall(page.read_text(encoding="utf-8")):
            words, parser = runner_words(span) or [], root
            if words and words[0].isupper():  # `runner CMD --resume DIR`: any command
                continue
            while words and (choices := {n: p for a in subparsers_of(parser)
                                         for n, p in a.choices.items()}).get(words[0]):
                parser = choices[words.pop(0)]
            taken = _live_flags(parser) | _live_flags(root)
            wrong += [f"{page.name}: `{span}`: {w}" for w in words
                      if w.startswith("--") and w.partition("=")[0] not in taken]
    assert wrong == []


def test_a_flag_that_is_gone_is_named_only_as_refused():
    """A page told users `goldens upload` is a dry run "until you add `--execute`", a flag
    that is refused: a flag no command takes any more (an old spelling) appears on a page
    only in a paragraph that says it is refused."""
    from runner.cli.grammar import Renamed, walk

    root = build_parser()
    live, gone = set(), set()
    for _, parser in [((), root), *walk(root)]:
        for action in parser._actions:
            (gone if isinstance(action, Renamed) else live).update(action.option_strings)
    gone -= live
    assert {"--execute", "--qps", "--time"} <= gone
    named = re.compile(r"`[^`\n]*?(" + "|".join(map(re.escape, sorted(gone))) + r")(?![\w-])")
    wrong = [f"{page.name}: {m.group(1)} in: {paragraph[:120]}"
             for page in doc_pages()
             for paragraph in re.split(r"\n\s*\n", page.read_text(encoding="utf-8"))
             for m in named.finditer(paragraph)
             if not re.search(r"refused|no longer", paragraph, re.I)]
    assert wrong == []
