"""The out dir's state file (bisect.json / trend.json): inputs, candidates, each finished
step with its measurement, the answer. Written atomically after every step, so an
interrupted bisect resumes from its out dir and repeats no finished step; a second command
with other inputs into the same dir is refused instead of mixing two bisections.

The steps are runner/base/steps.py's, named by the candidate's index and keyed by its build
(a step of another build at that index is measured again); the file keeps them as a list,
each with its `index`, as reports and older runners read it. Steps of files written before
they had a key and a status were all finished: they are read so."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_json
from runner.base.steps import Steps, StepStatus
from runner.bisect.builds import Build

LEDGER_SCHEMA = 1


def inputs_key(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


class Ledger:
    def __init__(self, path: Path, command: str, inputs: dict[str, Any], argv: list[str]):
        self.path = path
        key = inputs_key(inputs)
        self.state: dict[str, Any] = {}
        if path.is_file():
            try:
                self.state = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise BadInput(f"cannot read: {e}", where=str(path),
                               fix="remove it to start over, or use another --out") from e
            if self.state.get("key") != key or self.state.get("command") != command:
                raise BadInput(f"{path.parent} holds a {self.state.get('command', '?')} "
                               "of other inputs", where=str(path),
                               fix="use a new --out DIR (or the same arguments to resume)")
        self.resumed = bool(self.state.get("steps"))
        self.state.update(schema=LEDGER_SCHEMA, command=command, key=key, inputs=inputs, argv=argv)
        self.state.setdefault("started", time.time())
        table = {str(s["index"]): {"key": s.get("build"), "status": StepStatus.FINISHED, **s}
                 for s in self.state.setdefault("steps", [])}
        self.steps = Steps(table, self.save)
        self.state["steps"] = list(table.values())

    @property
    def candidates(self) -> list[Build] | None:
        raw = self.state.get("candidates")
        return [Build.from_dict(b) for b in raw] if raw else None

    def set_candidates(self, builds: list[Build]) -> None:
        self.state["candidates"] = [b.to_dict() for b in builds]

    def step(self, index: int) -> dict[str, Any] | None:
        """The recorded step of the candidate at `index` (None: not measured yet)."""
        return self.steps.table.get(str(index))

    def finished(self, index: int, build: Build) -> dict[str, Any] | None:
        """The step of `build` at `index` where it finished: not measured again."""
        return self.steps.finished(str(index), build.spec)

    def record(self, index: int, build: Build, seconds: float, **fields: Any) -> None:
        """Records the finished step of `build` at `index` and writes the file."""
        self.steps.record(str(index), build.spec, StepStatus.FINISHED, seconds, index=index,
                          build=build.spec, **fields)

    def save(self) -> None:
        self.state["steps"] = list(self.steps.table.values())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, self.state)
