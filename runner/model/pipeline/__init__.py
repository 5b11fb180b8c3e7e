"""Runs SDXL-shaped IREE artifacts: tiny and real SDXL go through the same code."""
