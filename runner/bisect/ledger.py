"""The out dir's state file (bisect.json / trend.json): inputs, candidates, each finished
step with its measurement, the answer. Written atomically after every step, so an
interrupted bisect resumes from its out dir and repeats no finished step; a second command
with other inputs into the same dir is refused instead of mixing two bisections."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_json
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
        self.state.setdefault("steps", [])
        self.state.setdefault("started", time.time())

    @property
    def candidates(self) -> list[Build] | None:
        raw = self.state.get("candidates")
        return [Build.from_dict(b) for b in raw] if raw else None

    def set_candidates(self, builds: list[Build]) -> None:
        self.state["candidates"] = [b.to_dict() for b in builds]

    def step(self, index: int) -> dict[str, Any] | None:
        return next((s for s in self.state["steps"] if s["index"] == index), None)

    def record(self, step: dict[str, Any]) -> None:
        self.state["steps"] = [s for s in self.state["steps"] if s["index"] != step["index"]]
        self.state["steps"].append(step)
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, self.state)
