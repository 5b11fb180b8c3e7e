"""`runner gpu-check`: what the runner measures on a GPU machine lent for minutes.

`prepare` (plan.py, check.py), on a machine with iree-compile, compiles everything the check
runs into a carry directory and writes its plan; `run` (check.py), on the GPU machine with
neither a compiler nor a network, runs that plan inside a budget (steps.py), in the order
that gets the most valuable numbers first, and writes gpu_check.json and gpu_check.md
(summary.py). device.py says whether the GPU found runs the code the profile compiled.
docs/gpu-check.md describes both commands.
"""

__all__ = ["check", "cli", "device", "plan", "steps", "summary", "wheel"]
