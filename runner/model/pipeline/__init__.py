"""Runs SDXL-shaped IREE artifacts: tiny and real SDXL go through the same code."""

__all__ = ["iree_session", "loader", "sdxl"]
