#!/usr/bin/env bash
# The GPU check: what the runner measures on a lent GPU machine (tiny on the GPU against the
# CPU's images; seeded SDXL's throughput, stage latencies and dispatch profile at two batch
# sizes with the VAE decoding in fp32 and in fp16), from artifacts compiled on a CPU machine.
# The GPU machine needs no network and no IREE compiler. docs/gpu-check.md has the details.
#
#   on a machine with iree-compile:  scripts/gpu_check.sh prepare --profile h100-seeded --out carry
#   copy carry/ and this checkout to the GPU machine, then there:
#                                    scripts/gpu_check.sh run --carry carry --out results
#
# Every step also runs on a CPU (`prepare --profile cpu`), which the test suite does.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec python3 "$root/scripts/gpu_check.py" "$@"
