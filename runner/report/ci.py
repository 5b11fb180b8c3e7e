"""GitHub Actions, natively: summary.md into the job summary, failures as annotations.

Both are keyed on the variables the runner sets (`GITHUB_STEP_SUMMARY`, `GITHUB_ACTIONS`),
so the same command prints nothing extra on a laptop or another CI. Any report writer
(runs, goldens, bench) can call `publish`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO


def github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _escape(text: str, prop: bool = False) -> str:
    """GitHub's workflow-command escaping: data keeps %/CR/LF; properties also : and ,."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def annotation(level: str, message: str, title: str | None = None,
               file: str | None = None) -> str:
    """`::error title=T,file=F::message`; level is error, warning or notice."""
    props = ",".join(f"{k}={_escape(v, prop=True)}"
                     for k, v in (("title", title), ("file", file)) if v)
    return f"::{level}{' ' + props if props else ''}::{_escape(message)}"


def annotate(level: str, message: str, title: str | None = None, file: str | None = None,
             stream: TextIO | None = None) -> None:
    """Prints the annotation under GitHub Actions only (workflow commands go to stdout)."""
    if github_actions():
        print(annotation(level, message, title, file), file=stream or sys.stdout, flush=True)


def append_step_summary(markdown: str) -> Path | None:
    """Appends to $GITHUB_STEP_SUMMARY when set (GitHub sets it per step); returns its path.
    Appended, not written: several commands in one step each add their part."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as f:
        f.write(markdown.rstrip("\n") + "\n\n")
    return path


def publish(summary_md: str, errors: Iterable[tuple[str, str]] = (),
            warnings: Iterable[tuple[str, str]] = ()) -> None:
    """The job summary plus one annotation per (title, message) failure and warning."""
    append_step_summary(summary_md)
    for title, message in errors:
        annotate("error", message, title)
    for title, message in warnings:
        annotate("warning", message, title)
