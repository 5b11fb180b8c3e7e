"""MLPerf LoadGen runs: LoadGen decides which samples are issued and when; the runner's
per-device workers and file queue compute them (`runner mlperf`).

conf.py (scenarios, modes, user.conf/audit.config), batcher.py (samples -> queue batches),
sut.py (LoadGen's SUT over the queue and store), session.py (one LoadGen test, in its own
process), logs.py (LoadGen's summary and detail logs), compliance.py (TEST01/TEST04
verification), submission.py (MLPerf's results tree), report.py (results.json, summary.md,
report.html), run.py (request checks, workers through the run lifecycle, the tests),
command.py (the whole command), cli.py (`runner mlperf`).
"""
