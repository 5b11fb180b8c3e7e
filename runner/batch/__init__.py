"""Batch runs: a layout's workers pull sample batches from one queue into one sample store."""
