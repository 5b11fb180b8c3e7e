"""iree-sdxl-runner: build, run, score and report SDXL on IREE, exactly and reproducibly."""

__version__ = "0.1.0"
