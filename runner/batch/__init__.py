"""Batch runs: a layout's workers pull sample batches from one queue into one sample store."""

__all__ = ["aggregate", "cli", "cluster", "docker_executor", "executor_for", "executors",
           "lifeline", "node", "queue", "reproduce", "run", "slurm", "status", "worker"]
