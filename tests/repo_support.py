"""The repository's root, for the tests that read its files (goldens, fixtures, configs, docs,
scripts): one definition, where each test module used to work it out from its own path."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
