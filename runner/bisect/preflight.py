"""A bisect's or a trend's preflight: what is the machine's is checked once, before the
first build (the GPUs the profile's layout names, free and in its partition mode, and the
disk under the out dir); what is each build's, its worker environment, is checked in that
build's environment before it is measured (runner.bisect.measure), where a failure skips
the build (the environment could not be judged) instead of judging it bad.

A failure here is no build's: the command stops, exit 2, before any build is set up.
"""

from __future__ import annotations

import math

from runner.accuracy.samples import parse_ids
from runner.base.progress import echo
from runner.batch.run import plan_for
from runner.bisect.measure import MeasurePlan
from runner.preflight.check import Preflight
from runner.preflight.disk import disk_check
from runner.preflight.gpus import gpu_checks


def bisect_steps(candidates: int) -> int:
    """The builds a bisect of `candidates` measures when none is skipped: both ends, then
    one per halving of the builds between them."""
    return 2 + math.ceil(math.log2(max(candidates - 1, 1)))


def machine_preflight(plan: MeasurePlan, builds: int) -> Preflight:
    """The GPUs and the disk for `builds` measured builds, each storing its samples once
    per pass."""
    run_plan = plan_for(plan.profile)
    samples = len(parse_ids(plan.samples)) * max(plan.passes, 1) * builds
    return Preflight.of([*gpu_checks(run_plan, plan.share_gpus),
                         disk_check(plan.out, plan.profile, run_plan, samples, 0)])


def check_machine(plan: MeasurePlan, builds: int, dry_run: bool) -> Preflight:
    """Raises (exit 2) with every line shown when a check fails, a dry run's too (on stdout,
    its output; on stderr otherwise); else shows them (as `# ` comments in a dry run)."""
    return machine_preflight(plan, builds).shown(dry_run, echo)
