"""A run directory and what it holds: its files and lock (`directory`), the typed `run.json`
(`manifest`), the sample store (`store`, with verified parallel reads in `parallel`) and
MLPerf's accuracy log (`mlperf_log`, hex-encoded in C by `_hex.c`)."""

__all__ = ["directory", "manifest", "mlperf_log", "parallel", "store"]
