"""MkDocs hook (mkdocs.yml `hooks:`): fills docs/cli.md's marker with the CLI reference
generated from this checkout's argparse parser (runner.clidoc), so the site cannot drift
from `runner --help`."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARKER = "<!-- cli-reference -->"


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if page.file.src_uri != "cli.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/cli.md lost its {MARKER} line: the reference goes there")
    # This checkout's runner, even where another copy is installed.
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from runner.cli import build_parser
    from runner.clidoc import reference

    return markdown.replace(MARKER, reference(build_parser()))
