"""`runner goldens generate`: run each test with this IREE and write its v{n+1} outputs.

The new blobs go to `--out` under the bumped names, in the old blob's format (raw `.bin`
stays raw), with `manifest.json` recording for each: the test, the old and new `source`,
the local file, its sha256 and base64 MD5 (what Azure will report as Content-MD5), and how
far it moved from the old golden when that could be read. `upload` reads this manifest to
put each blob where its new `source` says; `bump` then rewrites the JSON files.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from runner.base.errors import BadInput, StepFailed
from runner.base.fileio import atomic_write_json, sha256_file
from runner.base.iree_tools import compiler_info
from runner.base.provenance import iree_provenance
from runner.base.steps import StepStatus
from runner.config.sources import redact_url
from runner.goldens.check import run_test
from runner.goldens.plan import CheckOptions
from runner.goldens.report import console_line
from runner.goldens.result import TestResult
from runner.goldens.testfile import GoldenTest
from runner.goldens.versioning import Version, bump_source
from runner.model.tensors import TensorSpec, write_tensor

GOLDENS_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class NewGolden:
    test: str
    index: int
    old_source: str
    new_source: str
    file: Path
    spec: str
    sha256: str
    md5_b64: str
    note: str | None
    change: dict[str, float] | None  # max_abs etc. against the old golden

    def to_dict(self) -> dict:
        return {"test": self.test, "index": self.index, "old_source": redact_url(self.old_source),
                "new_source": redact_url(self.new_source), "file": self.file.name,
                "spec": self.spec, "sha256": self.sha256, "md5_b64": self.md5_b64,
                "note": self.note, "change_vs_old": self.change}

    @classmethod
    def from_dict(cls, raw: dict, out: Path) -> NewGolden:
        """A golden `to_dict` recorded, its file in `out`."""
        return cls(raw["test"], raw["index"], raw["old_source"], raw["new_source"],
                   out / raw["file"], raw["spec"], raw["sha256"], raw["md5_b64"], raw["note"],
                   raw["change_vs_old"])


def _md5_b64(path: Path) -> str:
    return base64.b64encode(hashlib.md5(path.read_bytes(), usedforsecurity=False).digest()
                            ).decode()


def generate_plan(tests: list[GoldenTest], to: Version | str, out: Path, opts: CheckOptions
                  ) -> list[str]:
    """What `generate` would run and write (a dry run): each test's iree-compile and
    iree-run-module commands, then each new blob's file and new source. Nothing is run,
    downloaded or written."""
    compiler = compiler_info()
    lines: list[str] = []
    for test in tests:
        if not test.outputs:
            lines.append(f"# skip {test.name}: no {test.outputs_field} to regenerate")
            continue
        result = run_test(test, replace(opts, out=None, compile_only=False, dry_run=True,
                                        require_goldens=False), compiler)
        lines.append(console_line(result, dry_run=True))
        for i, ref in enumerate(test.outputs):
            new_source, bump = bump_source(ref.source, to, ref.where)
            lines.append(f"# writes {out / bump.new_name} ({test.name} output {i} -> "
                         f"{redact_url(new_source)})")
    lines.append(f"# and {out / GOLDENS_MANIFEST}")
    return lines


def _test_key(test: GoldenTest, compiler) -> str:
    """A test's outputs depend on the test file and the compiler that ran it."""
    return f"test:{test.name}:{sha256_file(test.path)}:{compiler.version}@{compiler.commit}"


def _kept(key: str, out: Path, attempt) -> list[NewGolden] | None:
    """The outputs an interrupted attempt wrote for this test, every file as written."""
    if attempt is None or not attempt.resumed:
        return None
    recorded = attempt.kept(key, lambda detail: all(
        g.file.is_file() and sha256_file(g.file) == g.sha256
        for g in (NewGolden.from_dict(raw, out) for raw in detail)))
    return None if recorded is None else [NewGolden.from_dict(raw, out) for raw in recorded]


def _new_goldens(test: GoldenTest, result: TestResult, to: Version | str, out: Path,
                 key: str, echo: bool) -> list[NewGolden]:
    """Each output the test's run produced, written as its new golden under the bumped
    name, with how far it moved from the old one (the run's comparison against it)."""
    mine: list[NewGolden] = []
    for i, ref in enumerate(test.outputs):
        new_source, bump = bump_source(ref.source, to, ref.where)
        array = result.actual[i]
        spec = ref.spec
        if spec is not None and not TensorSpec.of(array).same_as(spec):
            raise BadInput(f"output {i} is {TensorSpec.of(array)}, the test says {spec}",
                           where=f"{test.path}: outputs[{i}].value",
                           fix="fix the test's output type, or the model that changed "
                           "its shape")
        path = write_tensor(out / bump.new_name, array, key=f"output{i}")
        change = None
        old = next((o for o in result.outputs if o.index == i), None)
        if old is not None:
            change = {"max_abs": old.max_abs, "mean_abs": old.mean_abs,
                      "max_rel": old.max_rel, "over_threshold": old.mismatches}
        note = bump.describe() if bump.unversioned else None
        golden = NewGolden(test.name, i, ref.source, new_source, path, str(
            TensorSpec.of(array)), sha256_file(path), _md5_b64(path), note, change)
        mine.append(golden)
        if echo:
            moved = (f"; vs old: max_abs {change['max_abs']:.3g}, "
                     f"mean_abs {change['mean_abs']:.3g}" if change else "")
            print(f"wrote {path}  ({test.name} output {i}{moved})")
            if note:
                print(f"note: {note}")
    return mine


def generate_goldens(tests: list[GoldenTest], to: Version | str, out: Path, opts: CheckOptions,
             *, echo: bool = True, attempt=None) -> list[NewGolden]:
    """Runs every test (failures against the old goldens are expected and only reported).
    `attempt` (the out dir's record, runner/base/outdir.py) keeps the tests an interrupted
    attempt wrote outputs for, and records each test as its outputs are written."""
    compiler = compiler_info()
    written: list[NewGolden] = []
    for test in tests:
        if not test.outputs:
            if echo:
                print(f"skip  {test.name}: no {test.outputs_field} to regenerate",
                      file=sys.stderr)
            continue
        key = _test_key(test, compiler)
        kept = _kept(key, out, attempt)
        if kept is not None:
            written += kept
            if echo:
                print(f"kept  {test.name}: its outputs from an earlier attempt",
                      file=sys.stderr)
            continue
        start = time.perf_counter()
        result = run_test(test, replace(opts, out=None, compile_only=False, dry_run=False,
                                        require_goldens=False), compiler)
        if not result.actual:
            raise StepFailed(f"{test.name} did not produce outputs ({result.status} in "
                             f"{result.phase}): {result.message}", where=str(test.path),
                             fix="fix the test or the compiler, then generate again")
        mine = _new_goldens(test, result, to, out, key, echo)
        written += mine
        if attempt is not None:
            attempt.record_part(key, StepStatus.FINISHED, time.perf_counter() - start,
                                [g.to_dict() for g in mine])
    atomic_write_json(out / GOLDENS_MANIFEST, {"to": str(to), "iree": iree_provenance(),
                                               "goldens": [g.to_dict() for g in written]})
    return written
