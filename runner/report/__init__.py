"""Reports people can read, from a run dir: `summary.md`, `results.json`, `junit.xml`,
`report.html`.

Everything is gathered once into a `RunReport` (collect.py) so the four files cannot
disagree; each renderer is a pure function of it, and `write_reports` writes them only
after all four rendered, each atomically.
"""

from __future__ import annotations

from runner.report.write import REPORT_FILES, write_reports

__all__ = ["REPORT_FILES", "write_reports"]
