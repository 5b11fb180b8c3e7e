"""The documentation site: `mkdocs build --strict` passes, fails on a broken link or anchor
and on a measured number that is not docs/measurements.json's, wraps long code lines,
leaves docs/incoming/ out, and its CLI reference is the parser's; the README's links to the
pages resolve (GitHub shows them as files)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.base.paths import PACKAGE_DIR
from runner.cli.doc import anchor, inline, reference
from runner.cli.grammar import walk
from runner.cli.main import build_parser

pytest.importorskip("mkdocs")
pytest.importorskip("material")

from repo_support import REPO

PAGES = ["index", "quickstart", "task-mi325x-accuracy", "task-validate-commit",
         "task-mlperf-submission", "task-find-breaking-build", "install", "runs", "layouts",
         "images", "goldens", "validate", "bench", "accuracy", "mlperf", "sdxl", "slurm",
         "failure-modes", "benchmarks", "cli", "CONTRIBUTING"]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    proc = build(REPO, site)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr
    return site


def test_the_site_builds_strict(site):
    for page in PAGES:
        path = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert path.is_file(), page
    assert not (site / "incoming").exists()


def test_code_blocks_wrap_rather_than_hide_their_ends(site):
    """Long commands wrap, so the end of a command and its comment stay in view."""
    html = (site / "quickstart" / "index.html").read_text(encoding="utf-8")
    assert 'href="../stylesheets/extra.css"' in html
    css = (site / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert re.search(r"\.md-typeset pre > code \{[^}]*white-space: pre-wrap", css)


def test_the_cli_reference_is_the_parsers(site):
    html = (site / "cli" / "index.html").read_text(encoding="utf-8")
    parser = build_parser()
    for path, sub in walk(parser):
        assert f'id="{anchor(path)}"' in html, path
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue  # old spellings and -h are not documented options
            for option in action.option_strings:
                assert f"<code>{option}" in html or f", {option}" in html, (path, option)
    # The generator's own Markdown, escaped so that `<sha>` and `*` show as written.
    assert str(REPO) not in html  # the same on any machine: the suites by name
    assert "or a shipped suite by name: tiny, tiny-bench, tiny-torch (default: tiny)" in html
    assert inline(f"{PACKAGE_DIR}/assets/goldens/x") == "&lt;runner&gt;/assets/goldens/x"
    assert "with a directory: its &lt;model&gt;/ subdirectory" in html
    assert inline("a <b> *c* | d_e `x|y`") == "a &lt;b&gt; \\*c\\* \\| d\\_e `x|y`"
    assert "<code>FILES|DIR</code>" in html and "<code>--profile NAME|YAML</code>" in html
    assert 'id="shared-options"' in html and "<code>--slurm-time</code>" in html
    assert reference(parser).count("\n## runner ") == len([p for p, _ in walk(parser)
                                                            if len(p) == 1])


def test_a_broken_anchor_or_link_fails_the_build_and_incoming_is_left_out(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root)
    shutil.copytree(REPO / "scripts", root / "scripts")
    incoming = root / "docs" / "incoming"
    incoming.mkdir(exist_ok=True)
    (incoming / "draft.md").write_text("[a draft's link](nowhere.md#nothing)\n")
    assert build(root, tmp_path / "ok").returncode == 0  # drafts are not checked
    assert not (tmp_path / "ok" / "incoming").exists()
    index = root / "docs" / "index.md"
    broken = {"[x](runs.md#no-such-heading)": "does not contain an anchor '#no-such-heading'",
              "[y](#no-such-heading)": "there is no such anchor on this page",
              "[z](no-such-page.md)": "not found among documentation files"}
    index.write_text(index.read_text() + "\n" + "\n".join(broken) + "\n")
    # A measured number that is not docs/measurements.json's fails the build too.
    quickstart = root / "docs" / "quickstart.md"
    text = quickstart.read_text()
    mark = re.search(r"([\d.]+)(<!-- measured main_job\.run_samples_per_s -->)", text)
    quickstart.write_text(text.replace(mark.group(0), "9.99" + mark.group(2)))
    proc = build(root, tmp_path / "site")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for link, message in broken.items():
        assert message in output, link
    assert f"quickstart.md:{text[:mark.start()].count(chr(10)) + 1}: shows 9.99 where " \
           f"docs/measurements.json has {mark.group(1)} for main_job.run_samples_per_s" in output
    assert "Aborted with 4 warnings in strict mode" in output


def test_readme_links_resolve_and_the_readme_stays_a_front_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert {f"docs/{page}.md" for page in PAGES} <= set(local)
    for link in local:
        assert (REPO / link).exists(), link
    assert len(readme.splitlines()) < 120
