"""MLPerf LoadGen runs: LoadGen decides which samples are issued and when; the runner's
per-device workers and file queue compute them (`runner mlperf`).

conf.py (scenarios, modes, user.conf/audit.config), batcher.py (samples -> queue batches),
sut.py (LoadGen's SUT over the queue and store), session.py (one LoadGen test), logs.py
(LoadGen's summary), compliance.py (TEST01/TEST04 verification), submission.py (MLPerf's
results tree), report.py (results.json, summary.md, report.html), run.py (the whole command).
"""
