"""iree-sdxl-runner: build, run, score and report SDXL on IREE, exactly and reproducibly."""

__version__ = "0.1.0"

__all__ = ["accuracy", "base", "batch", "bench", "bisect", "cli", "config", "docker",
           "goldens", "gpucheck", "history", "inputs", "lifecycle", "loadgen", "model",
           "report", "rundir", "validate"]
