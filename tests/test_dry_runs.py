"""A dry run writes nothing, the cache included, and runs from outside the checkout.

Every command a page or a help shows, of a command that acts (it takes `--dry-run`), runs
here with `--dry-run` (added where the example has none), over the command wrapper as a user
would type it: from an empty directory outside the checkout, with `RUNNER_CACHE_DIR` holding
what a warm cache holds (or, for a few, not made yet), and a HOME where the lab profiles find
their checkpoint. The cache, the working directory and the results store are snapshotted
(path, size, mtime, sha256 of small files) before and after: any difference fails, whatever
the command's exit code. HOME is not watched: pip, which a bisect's dry run asks for an
index's versions, keeps its own state there. A dry run ends with 0, or with a handled error
(exit 2, its fix said, no traceback) where the example names what only its reader has
(`<sha>`, their run dirs); a page's `iree-test-suites/` clone is here as the tests' copy.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from pathlib import Path

import pytest
from cli_support import cli
from lab_support import lab_home
from repo_support import REPO
from test_doc_commands import shown_commands, strip_comment

from runner.cli.grammar import options_of
from runner.cli.main import build_parser

SMALL = 1 << 20  # files up to this size are compared by content too
SHELL = {"|", "||", "&&", ";", ">", ">>", "<", "2>&1"}  # a pipeline or a redirect


def acting_commands() -> set[str]:
    """`run`, `goldens bump`, ...: every command that takes --dry-run."""
    return {c.removeprefix("runner ") for c, a in options_of(build_parser())
            if "--dry-run" in a.option_strings}


def shown_dry_runs() -> dict[str, tuple[list[str], dict[str, str]]]:
    """shown command -> (its words after `runner`, with --dry-run; the variables it sets)."""
    acting = acting_commands()
    found: dict[str, tuple[list[str], dict[str, str]]] = {}
    for command in shown_commands():
        words = shlex.split(strip_comment(command))
        if SHELL & set(words) or any(w.startswith(("<(", "$(")) for w in words):
            continue
        env = {}
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        if not words or words[0] != "runner":
            continue
        name = next((" ".join(words[1:n]) for n in (3, 2) if " ".join(words[1:n]) in acting),
                    None)
        if name is None:
            continue
        found[command] = ([*words[1:], *([] if "--dry-run" in words else ["--dry-run"])], env)
    return found


DRY_RUNS = shown_dry_runs()
# Each over a few seconds of CPU: the builds' installs planned, a sweep of slurm layouts.
SLOW = {c for c in DRY_RUNS if re.match(r"runner (bisect|trend) .*(--pre|--install docker|"
                                        r"--range)|runner bench (?!goldens)|runner validate |"
                                        r"runner .*--executor slurm", c)}


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`, links not followed: (kind, size, mtime_ns, sha256 of a
    small file)."""
    if not root.exists():
        return {}
    found: dict[str, tuple] = {}
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(top) / name
            st = path.lstat()
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir", st.st_mtime_ns)
            else:
                digest = (hashlib.sha256(path.read_bytes()).hexdigest()
                          if st.st_size <= SMALL else None)
                found[key] = ("file", st.st_size, st.st_mtime_ns, digest)
    return {".": ("dir", root.lstat().st_mtime_ns), **found}


def warm(cache: Path) -> Path:
    """What a cache holds after real work: a build context a gone process left (a real
    build clears it; a dry run must not), the GPU-target probe's answers and the export
    file-hash memo (a dry run that probes or hashes must not add to them)."""
    stale = cache / "docker" / "contexts" / "wheels-0123456789ab-4194305"  # > pid_max
    stale.mkdir(parents=True)
    (stale / "Dockerfile").write_text("FROM scratch\n")
    (cache / "gpu-targets").mkdir()
    (cache / "gpu-targets" / "0.0.0-unknown.json").write_text("{}\n")
    (cache / "exports").mkdir()
    (cache / "exports" / "file-hashes.json").write_text("{}\n")
    return cache


@pytest.fixture
def home(tmp_path, small_checkpoint) -> Path:
    """A HOME holding the lab profiles' checkpoint (a link to the session's small one)."""
    return lab_home(tmp_path, small_checkpoint)


def _expanded(words: list[str], home: Path) -> list[str]:
    """`~` and `$HOME` as the shell gives them to the command."""
    return [re.sub(r"^~(?=/|$)", str(home), w).replace("$HOME", str(home)) for w in words]


def test_every_command_that_acts_has_a_shown_dry_run():
    """Each command that takes --dry-run is shown (a page or its help) so this file runs it."""
    shown = {" ".join(w for w in argv[:2] if not w.startswith("-"))
             for argv, _ in DRY_RUNS.values()}
    names = {n for n in acting_commands()
             if n in shown or any(s.startswith(n + " ") or s == n for s in shown)}
    assert names == acting_commands(), sorted(acting_commands() - names)


def run_watched(argv: list[str], variables: dict[str, str], home: Path, tmp_path: Path,
                cache: Path) -> tuple[object, dict[str, list]]:
    """`runner ARGV` from an empty directory outside the checkout, and what it changed in
    the cache, that directory and the results store (none of them: [] each)."""
    work = tmp_path / "work"  # outside the checkout, as after a pip install
    work.mkdir()
    (work / "iree-test-suites").symlink_to(REPO / "tests" / "fixtures" / "iree-test-suites")
    store = tmp_path / "store" / "results.sqlite"
    watched = {"cache": cache, "cwd": work, "store": store.parent}
    before = {name: snapshot(root) for name, root in watched.items()}
    ran = cli(*_expanded(argv, home), cwd=work,
              env={**os.environ, "RUNNER_CACHE_DIR": str(cache), "HOME": str(home),
                   "RUNNER_RESULTS_URL": str(store), "RUNNER_PROGRESS": "off",
                   **variables})  # (an example's own RUNNER_CACHE_DIR=carry is in the cwd)
    after = {name: snapshot(root) for name, root in watched.items()}
    return ran, {name: sorted(set(after[name].items()) ^ set(before[name].items()))
                 for name in watched}


@pytest.mark.parametrize("shown", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c
                                   for c in sorted(DRY_RUNS)])
def test_a_shown_dry_run_writes_nothing_from_outside_the_checkout(shown, home, tmp_path):
    argv, variables = DRY_RUNS[shown]
    # An --out outside the cwd (`/tmp/tiny`, `/shared/runs/acc`) is not made either.
    outs = [Path(_expanded([argv[i + 1]], home)[0]) for i, w in enumerate(argv[:-1])
            if w == "--out" and Path(argv[i + 1]).is_absolute()]
    there = {out: out.exists() for out in outs}
    ran, changed = run_watched(argv, variables, home, tmp_path, warm(tmp_path / "cache"))
    assert changed == {"cache": [], "cwd": [], "store": []}, f"`{shown}` wrote: {changed}"
    assert {out: out.exists() for out in outs} == there
    assert "Traceback" not in ran.stderr, ran.stderr
    assert ran.returncode == 0 or (ran.returncode == 2 and "\n  fix: " in ran.stderr), \
        f"exit {ran.returncode}: {ran.stderr[-2000:]}"


@pytest.mark.parametrize("shown", [
    "runner run --profile cpu --count 4 --out runs/smoke --dry-run",
    "runner compile --profile h100-seeded --dry-run",
    "runner goldens check iree-test-suites/torch_models --marker gfx942 --dry-run"])
def test_a_dry_run_makes_no_cache_directory(shown, home, tmp_path):
    """With no cache yet (a fresh machine), a dry run does not make one: the compile
    cache's, the GPU-target probe's and the compile statistics' folders included."""
    ran, changed = run_watched(*DRY_RUNS[shown], home, tmp_path, tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    assert not (tmp_path / "cache").exists() and changed["cwd"] == []
