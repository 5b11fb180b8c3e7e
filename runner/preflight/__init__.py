"""The preflight: everything that would stop a run at its end, checked before its first batch.

A long run (hours of GPUs for MLPerf's 5000 samples) must not find at its end that scoring
cannot read its statistics, at its first batch that no worker can import the IREE runtime,
or half-way that the disk is full. `runner run`, `runner mlperf`, `runner validate` and
`runner bench` run it through `Lifecycle.create` before compiling, and their `--dry-run`
prints it (runner/lifecycle.py); `runner gpu-check run` runs what applies of it before its
first step (runner/gpucheck/preflight.py), `runner bisect` and `runner trend` the GPUs and
disk once and each build's worker check in its probe (runner/bisect/preflight.py).

- `check`: one `PreflightCheck` per fact, the `Preflight` of them all and its verdict;
- `files`: the files the last steps read (captions, FID statistics, scoring weights), opened
  by the functions those steps use;
- `worker_env`: a worker's environment started the way the executor starts a worker;
- `gpus`: the GPUs the layout names, present, free and in its partition mode;
- `disk`: free space for the run's samples, its MLPerf log and logs;
- `run`: all of them for one run.
"""

__all__ = ["check", "disk", "files", "gpus", "run", "worker_env"]
