"""MLPerf LoadGen runs: LoadGen decides which samples are issued and when; the runner's
per-device workers and file queue compute them (`runner mlperf`).

conf.py (scenarios, modes, user.conf/audit.config), rules.py (MLPerf's rules for SDXL per
round, and which round the installed LoadGen belongs to), batcher.py (samples -> queue
batches), sut.py (LoadGen's SUT over the queue and store), session.py (one LoadGen test, in
its own process, and the settings it will use), logs.py (LoadGen's summary and detail
logs), compliance.py (TEST01/TEST04 verification as MLPerf's scripts do it), system.py (the
systems JSON and measurements.json), submission.py (MLPerf's submission tree and its
check), report.py (results.json, summary.md, report.html), run.py (request checks, workers
through the run lifecycle, the tests), command.py (the whole command), entry.py (the
command as one call, `mlperf(...)`), cli.py (`runner mlperf`).
"""

from runner.base.lazy import lazy_exports

# The entry points, each imported from its module when first used.
_ENTRIES = {"mlperf": "entry", "run_mlperf": "command", "MlperfRequest": "run", "Flags": "conf"}
__getattr__ = lazy_exports(__name__, _ENTRIES)

__all__ = ["Flags", "MlperfRequest", "batcher", "cli", "command", "compliance", "conf", "entry",
           "logs", "mlperf", "report", "rules", "run", "run_mlperf", "session",
           "submission", "sut", "system"]
