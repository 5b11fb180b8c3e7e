"""Markdown tables, shared by every Markdown report (bench.md, summary.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def md_cell(value: object) -> str:
    """A value as one table cell: a `|` or newline inside would break the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]]
