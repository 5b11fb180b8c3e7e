"""The night's steps: what a golden update needs, each a runner command run with the
build's own IREE (its venv from runner/bisect/envs.py, the interpreter and tools first on
PATH), so the numbers recorded are the build's, not the host's IREE's.

The accuracy run generates in the build's venv and is scored by this runner's own
interpreter (`runner score`): the venv holds only what the worker needs, not PyTorch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NightStep:
    """One step: its name in nightly.json, the runner words it runs, the dir it writes
    under the night dir, and the command the history records it as (None: not recorded)."""

    name: str
    words: tuple[str, ...]
    subdir: str
    records: str | None
    host: bool = False  # run by this runner's interpreter, not the build's

    def argv(self, build_python: str, night: Path) -> list[str]:
        python = sys.executable if self.host else build_python
        out = night / self.subdir
        if self.host:  # a step over another step's dir (score)
            return [python, "-m", "runner", *self.words, str(out)]
        return [python, "-m", "runner", *self.words, "--out", str(out)]


def night_steps(profile: str, count: int | None = None) -> list[NightStep]:
    """In the order a golden update reads them: the goldens first (a failing golden is the
    night's first news), then the accuracy run and its score, then throughput. `count`
    (--count) is the samples of the run and the bench, None the profile's `count`."""
    samples = ("--count", str(count)) if count is not None else ()
    return [
        NightStep("goldens check", ("goldens", "check"), "goldens", "goldens check"),
        NightStep("bench goldens", ("bench", "goldens", "--profile", profile),
                  "bench-goldens", "bench goldens"),
        NightStep("run", ("run", "--profile", profile, *samples, "--no-score"), "run", None),
        NightStep("score", ("score",), "run", "run", host=True),
        NightStep("bench", ("bench", "--profile", profile, *samples), "bench", "bench"),
    ]
