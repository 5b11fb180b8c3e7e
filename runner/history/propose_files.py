"""Where `runner goldens propose` writes its test files, so that `runner bench goldens` can
check them there.

A benchmark file names the quality test it takes its module from by a path relative to
itself (our `quality_test` field, e.g. tiny-bench's `../tiny/unet_cpu.json`) or by where
IREE CI keeps it (`../../quality_tests/<model>/`). A proposed file is therefore written at
`<out>/json/<the file's last two directories>/<name>` and the directory of the quality test
it names is copied to the place the same reference reaches from there (its test files and the
inputs beside them; benchmark files left out), so every reference resolves unchanged and the
diff stays the golden values alone.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from runner.base.fileio import atomic_write_bytes, atomic_write_text
from runner.bench.goldens import quality_candidates
from runner.goldens.testfile import BenchmarkTest, file_kind
from runner.history.propose import Proposal

PROPOSED_DIR = "json"


def written_path(bench: BenchmarkTest, out: Path) -> Path:
    """Where the proposal of `bench` is written under `out`."""
    suite = bench.path.resolve().parent
    return out / PROPOSED_DIR / suite.parent.name / suite.name / bench.path.name


def _copy_dir(src: Path, dst: Path) -> None:
    """`src`'s files but its benchmark files, into `dst`; a file already there is kept (a
    proposal written there wins)."""
    def skipped(folder: str, names: list[str]) -> list[str]:
        here = Path(folder)
        return [n for n in names if (here / n).is_file() and n.endswith(".json")
                and file_kind(here / n) == "benchmark"]

    def copy(s: str, d: str) -> None:
        if not Path(d).exists():
            atomic_write_bytes(Path(d), Path(s).read_bytes())

    shutil.copytree(src, dst, ignore=skipped, dirs_exist_ok=True, copy_function=copy)


def write_proposals(proposals: list[tuple[BenchmarkTest, Proposal]], out: Path) -> list[Path]:
    """Each changed proposal's file, and the quality tests they name; the files written."""
    written = []
    for bench, p in proposals:
        if not p.changed:
            continue
        target = written_path(bench, out)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, p.new_text)
        written.append(target)
        there = quality_candidates(replace(bench, path=target))
        for src, dst in zip(quality_candidates(bench), there, strict=True):
            if src.is_file():
                _copy_dir(src.parent, dst.parent)
                break
    return written
