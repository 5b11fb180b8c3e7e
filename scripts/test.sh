#!/usr/bin/env bash
# The README's test command: installs everything the suite needs, then runs it.
# Idempotent: on a machine that already has the packages and engine it only checks them.
set -euo pipefail
cd "$(dirname "$0")/.."

# RUNNER_TEST_SETUP=0 skips the installs below (about 10 s on 2 cores when all is there):
# for a machine where this script has already run from this checkout.
if [ "${RUNNER_TEST_SETUP:-1}" != 0 ]; then
  python3 -m pip install -q --disable-pip-version-check \
    -e '.[export,metrics,docker,mlperf,docs,dev]' 2>&1 | grep -v "as the 'root' user" || true
  python3 -c "import runner, iree.runtime, iree.compiler, iree.turbine, torch, open_clip, docker, mkdocs, material"

  # Debian's headless Chromium renders report.html in the report tests.
  if ! command -v chromium >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      chromium fonts-dejavu-core >/dev/null
  fi

  # Debian's PostgreSQL server for the results store's tests (tests/history_support.py starts
  # one on loopback as the postgres user; the package's own cluster is not used).
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      postgresql >/dev/null
  fi

  # A real docker engine for the harness-image tests (dockerd without a bridge: no iptables here).
  if [ -x scripts/docker_setup.sh ]; then
    bash scripts/docker_setup.sh
  fi
fi

# Commands under test record their results: into a store of this run, not the user's.
export RUNNER_RESULTS_URL="${RUNNER_RESULTS_URL:-$(mktemp -d)/results.sqlite}"

# Tiny modules compile in seconds: one that runs this long is stopped and tried again (a
# compile that uses no CPU for $RUNNER_COMPILE_STALL s, default 120, is taken as hung sooner).
export RUNNER_COMPILE_TIMEOUT="${RUNNER_COMPILE_TIMEOUT:-300}"

# pytest-xdist workers: one per core, and one more where the machine has 7 GiB of memory for
# each (a test waiting on docker, Slurm or a child process leaves its core to the extra one;
# `runner export sdxl --seeded`, the largest test, peaks at 8.0 GiB resident). On 2 cores two
# workers took the whole suite from 50 min to 28 (docs/CONTRIBUTING.md). Each worker's
# OpenMP/BLAS pools get its share of the cores, a module's tests that share a module fixture
# stay together, and the docker and Slurm tests run on one worker in turn (tests/conftest.py).
# RUNNER_TEST_WORKERS=N runs N workers, 0 one process. What each test cost goes to
# $RUNNER_SUITE_COST, compared with tests/suite_budget.json at the end.
cores="$(nproc)"
memory_kib="$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
WORKERS="${RUNNER_TEST_WORKERS:-$(( memory_kib >= (cores + 1) * 7 * 1024 * 1024 ? cores + 1 : cores ))}"
COST="${RUNNER_SUITE_COST:-${RUNNER_CACHE_DIR:-$HOME/.cache/iree-sdxl-runner}/suite-cost.json}"
parallel=()
if [ "$WORKERS" != 0 ]; then
  parallel=(-n "$WORKERS" --dist loadgroup)
fi
# The cost file of an earlier run goes first, so a run that stops before writing its own is
# not reported with the old numbers. `--suite-cost=PATH` is one word: pytest takes a separate
# word that names an existing file for a test path and roots itself there (no pyproject.toml,
# no plugin, "unrecognized arguments").
rm -f "$COST"
status=0
python3 -m pytest -q -p no:cacheprovider "${parallel[@]}" --suite-cost="$COST" "$@" || status=$?
if [ -f "$COST" ]; then
  python3 scripts/suite_cost.py "$COST" || true
fi
exit "$status"
