"""MkDocs hook (mkdocs.yml `hooks:`): fills docs/cli.md's marker with the CLI reference
generated from this checkout's argparse parser (runner.cli.doc), so the site cannot drift
from `runner --help`; and fails the build on a page whose measured numbers are not
docs/measurements.json's (scripts/docs_check.py), so the site cannot show a stale one."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARKER = "<!-- cli-reference -->"
log = logging.getLogger("mkdocs.plugins.runner")



def on_page_markdown(markdown: str, page, config, **kwargs) -> str:
    # This checkout's runner and scripts, even where another copy is installed (here, not at
    # import: mkdocs puts sys.path back after loading a hook).
    for path in (REPO, REPO / "scripts"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    import docs_check
    import measured

    data = measured.load(Path(config["docs_dir"]) / "measurements.json")
    for problem in (*docs_check.measured(page.file.src_uri, markdown, data),
                    *docs_check.table(page.file.src_uri, markdown, data)):
        log.warning(str(problem))  # --strict makes a warning fail the build
    if page.file.src_uri != "cli.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/cli.md lost its {MARKER} line: the reference goes there")
    from runner.cli.doc import reference
    from runner.cli.main import build_parser

    return markdown.replace(MARKER, reference(build_parser()))
