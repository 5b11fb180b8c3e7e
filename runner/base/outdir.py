"""Every command's `--out`: what it may hold, and what a rerun into it does.

A lab engineer whose job a scheduler stopped (a time limit's SIGTERM, a lost session's
SIGHUP, Ctrl-C) runs the same command again. What happens then is one rule per command,
decided here for every command alike, before the command does any work (a dry run too):

- `--out DIR` that does not exist, or holds nothing but empty directories: a new attempt.
  Its record, `DIR/attempt.json`, is the first file written: the command, its argv and
  working directory, its inputs, and each attempt (pid, start, end, how it ended).
- `--out DIR` holding files and no record of this command: refused, naming some of them.
  A directory is the command's own only by what the command itself writes first (the
  record), or, for an out dir made before records existed, by the file only that command
  writes there (`Rerun.markers`: `run.json`, `bisect.json`, ...).
- `--out DIR` holding another command's record: refused, naming that command.
- `--out DIR` holding this command's record with other inputs: refused, naming each input
  that differs (as recorded and as given). Paths compare resolved, so `runs/x` and
  `/home/me/runs/x` are one input; a small input file (a profile, a user.conf) compares by
  its contents, so an edit since the attempt is named too.
- `--out DIR` holding this command's record with the same inputs: the command's rule.
  `RESUMES`: the attempt is finished, keeping what the command keeps (each command's help
  says what). `REFUSES`: refused, naming the two ways out: `runner CMD --resume DIR`, or
  another `--out`. A measurement (a bench, an MLPerf test) refuses, since going on mixes
  numbers of two sessions and someone should decide that.
- `--resume DIR` (every such command): DIR holds an interrupted attempt of this command:
  finish it, with the recorded inputs (the CLI re-reads the recorded argv).

One driver at a time: the attempt holds `DIR/attempt.lock` (runner/base/dirlock.py) until it
ends. The attempt's end is recorded in runner/base/steps.py's words (`StepStatus`):
`finished` (the command ran to its verdict), `failed` (an error, exit 2), `incomplete` (exit
3), `interrupted` (a signal); a driver killed with SIGKILL leaves `running`, which the next
attempt, holding the lock, reads as interrupted.
Parts of an attempt a command can keep (a bench layout, an MLPerf test, a golden test's
outputs) are steps of the record (`OutDir.steps`, runner/base/steps.py), recorded as they end
(`OutDir.record_part`), so a resume knows them without trusting a half-written file; a part
is kept where it finished and its outputs are still as recorded (`OutDir.kept`), like every
other record's steps. A part's name is its step key: it names all the part's inputs beyond
the attempt's own, which `claim` compares. A record written before parts were steps (its
`done`: part -> what was kept) is read as finished steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.dirlock import DirLock
from runner.base.errors import EXIT_BAD_INPUT, BadInput
from runner.base.fileio import atomic_write_bytes, atomic_write_json
from runner.base.steps import Steps, StepStatus

RECORD = "attempt.json"
LOCK = "attempt.lock"
ATTEMPT_SCHEMA = 1
RESUMES, REFUSES = "resumes", "refuses"
MAX_RECORD_BYTES = 16 << 20
HASHED_INPUT_BYTES = 16 << 20  # an input file up to this size is compared by its contents
SHOWN_ENTRIES = 3


@dataclass(frozen=True)
class Rerun:
    """A command's rule for its own `--out` (see the module docstring)."""

    rule: str  # RESUMES | REFUSES
    keeps: str  # what finishing an interrupted attempt keeps, for the help and the docs
    markers: tuple[str, ...] = ()  # a file only this command writes there (before records)
    free: tuple[str, ...] = ()  # flags a rerun may change (an export takes more batch sizes)

    def text(self) -> str:
        """The rule as the command's --help states it."""
        if self.rule == RESUMES:
            return ("running it again into the same --out with the same inputs finishes an "
                    f"interrupted attempt ({self.keeps}); `--resume DIR` does the same")
        return ("an --out holding an earlier attempt is refused; `--resume DIR` finishes "
                f"an interrupted one ({self.keeps})")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def read_record(path: Path) -> dict[str, Any] | None:
    """DIR/attempt.json, or None where there is none; a record that cannot be read is an
    error naming it (never taken for "no record", which would let a new attempt in)."""
    file = Path(path) / RECORD
    try:
        if file.stat().st_size > MAX_RECORD_BYTES:
            raise BadInput("the attempt record is larger than any record the runner "
                           "writes", where=str(file), fix="pass another --out")
        record = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadInput(f"cannot read the attempt record: {e}", where=str(file),
                       fix="pass another --out (or remove the directory)") from None
    if not isinstance(record, dict) or not isinstance(record.get("command"), str):
        raise BadInput("not an attempt record the runner wrote", where=str(file),
                       fix="pass another --out (or remove the directory)")
    return record


def _entries(path: Path) -> Iterator[Path]:
    """Files (and links, fifos, ...) anywhere under `path`: empty directories hold none."""
    for root, dirs, files in os.walk(path):
        for name in sorted(files) + sorted(d for d in dirs if os.path.islink(Path(root, d))):
            yield Path(root, name)


def foreign_files(path: Path) -> list[str]:
    """Up to SHOWN_ENTRIES + 1 of the files under `path`, relative to it."""
    out = []
    for entry in _entries(path):
        out.append(str(entry.relative_to(path)))
        if len(out) > SHOWN_ENTRIES:
            break
    return out


def normalize_input(value: Any, cwd: str, files: dict[str, str]) -> Any:
    """An input as compared across attempts: a string naming an existing path becomes its
    resolved path (a small regular file's contents hash goes into `files`); lists
    element by element; anything else as it is."""
    if isinstance(value, list | tuple):
        return [normalize_input(v, cwd, files) for v in value]
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str) or not value or "\n" in value or len(value) > 4096:
        return value
    path = Path(cwd, os.path.expanduser(value))
    try:
        if not path.exists():
            return value
        resolved = str(path.resolve())
        if path.is_file() and path.stat().st_size <= HASHED_INPUT_BYTES:
            files[resolved] = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return value
    return resolved


def inputs_record(inputs: Mapping[str, Any], cwd: str) -> dict[str, Any]:
    """{"inputs": normalized values, "files": resolved path -> sha256} of a command."""
    files: dict[str, str] = {}
    values = {k: normalize_input(v, cwd, files) for k, v in sorted(inputs.items())}
    return {"inputs": values, "files": files}


def differences(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Each input that differs between an attempt's record and this command, as a line."""
    out = []
    before, after = recorded.get("inputs", {}), now.get("inputs", {})
    for key in sorted({*before, *after}):
        if before.get(key) != after.get(key):
            out.append(f"{key}: {_shown(before.get(key))} in the attempt, "
                       f"{_shown(after.get(key))} now")
    old_files, new_files = recorded.get("files", {}), now.get("files", {})
    for path in sorted(set(old_files) & set(new_files)):
        if old_files[path] != new_files[path]:
            out.append(f"{path}: changed since the attempt started")
    return out


def without_option(argv: Sequence[str], option: str) -> list[str]:
    """`argv` without `option VALUE` / `option=VALUE`, wherever it stands: a recorded command
    line re-run elsewhere (`--out`) or kept without what is no input (`--results`)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def _shown(value: Any) -> str:
    if value is None or value is False or value == []:
        return "not given"
    if value is True:
        return "given"
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def _ended_how(record: Mapping[str, Any]) -> str:
    attempts = record.get("attempts") or [{}]
    last = attempts[-1]
    status = StepStatus.read(record.get("status"))
    since = f"started {last.get('started', '?')}"
    if status == StepStatus.RUNNING:
        return f"{since}; its driver (pid {last.get('pid', '?')}) ended without a word"
    if status == StepStatus.INTERRUPTED:
        return f"{since}; stopped by {last.get('signal', 'a signal')}"
    if status == StepStatus.FAILED:
        return f"{since}; failed: {str(last.get('error', '')).splitlines()[0][:200]}"
    if status == StepStatus.INCOMPLETE:
        return f"{since}; incomplete (exit {last.get('exit_code', 3)})"
    return f"{since}; finished (exit {last.get('exit_code', 0)})"


@dataclass
class OutDir:
    """This command's claim on its --out for one attempt (`claim` makes it)."""

    path: Path
    command: str
    record: dict[str, Any]
    resumed: bool  # an earlier attempt's files are there
    dry_run: bool = False
    nothing_to_do: bool = False  # --resume of a finished attempt (a refusing command)
    lock: DirLock | None = None
    created: bool = False  # this attempt made the directory
    # An existing out dir as this attempt found it: its record's bytes (None: it had none)
    # and every other file's size and mtime, so an attempt refused before any work can
    # put the record back and leave the directory exactly as it was.
    found: tuple[bytes | None, dict[str, tuple[int, int]]] | None = None

    @property
    def previous_status(self) -> StepStatus | None:
        """How the attempt before this one ended (None for a new out dir)."""
        return StepStatus.read(self.record.get("previous_status")) if self.resumed else None

    @property
    def steps(self) -> Steps:
        """The attempt's parts as steps (the record's `steps`, saved as each is recorded)."""
        return Steps(self.record.setdefault("steps", {}), self._save)

    def kept(self, part: str, still_there: Callable[[Any], bool] = lambda detail: True) -> Any:
        """What an earlier attempt recorded for `part` (its `detail`), where the part
        finished and `still_there` finds its outputs as that detail says; None: do it (again)
        and `record_part` it."""
        step = self.steps.kept(part, part, lambda step: still_there(step.get("detail")))
        return None if step is None else step.get("detail")

    def record_part(self, part: str, status: StepStatus, seconds: float, detail: Any) -> None:
        """Records how `part` ended, with what a resume needs to keep it (`detail`)."""
        self.steps.record(part, part, status, seconds, detail=detail)

    def note(self, **fields: Any) -> None:
        """Adds `fields` to this attempt's entry, saved when it ends (what the machine ran,
        asked once at its end: runner.history.environment)."""
        if self.record.get("attempts"):
            self.record["attempts"][-1].update(fields)

    def end(self, status: StepStatus, **fields: Any) -> None:
        """Records how this attempt ended and releases the out dir. A new attempt that
        ended before writing anything (bad input, a signal while it started) leaves
        nothing behind, so the same command, corrected or not, starts afresh."""
        try:
            if self.resumed and status != StepStatus.FINISHED and self._untouched():
                self._put_back()
                return
            if not self.resumed and status != StepStatus.FINISHED and self._wrote_nothing():
                (self.path / RECORD).unlink(missing_ok=True)
                self.release()
                if self.created:
                    _remove_empty_tree(self.path)
                return
            if self.record.get("attempts"):
                self.record["attempts"][-1].update(ended=_now(), status=status, **fields)
                self.record["status"] = status
                # Best effort: on a full disk the record keeps `running`, which the next
                # attempt reads as interrupted; the error that ended this one is what counts.
                with contextlib.suppress(OSError):
                    self._save()
        finally:
            self.release()

    def _wrote_nothing(self) -> bool:
        if self.dry_run or not self.path.is_dir():
            return False
        own = {self.path / RECORD, self.path / LOCK}
        return all(entry in own for entry in _entries(self.path))

    def _untouched(self) -> bool:
        if self.found is None or self.dry_run:
            return False
        before = steps_of(json.loads(self.found[0] or b"{}"))
        return before == self.record.get("steps") and _fingerprint(self.path) == self.found[1]

    def _put_back(self) -> None:
        """The record as the attempt found it (the attempt did nothing to record)."""
        assert self.found is not None
        before = self.found[0]
        if before is None:
            (self.path / RECORD).unlink(missing_ok=True)
        else:
            with contextlib.suppress(OSError):
                atomic_write_bytes(self.path / RECORD, before)

    def end_with(self, exit_code: int, error: str = "") -> None:
        fields: dict[str, Any] = {"exit_code": exit_code}
        if error or exit_code == EXIT_BAD_INPUT:
            fields["error"] = error
        self.end(StepStatus.of_exit(exit_code), **fields)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.unlock()
            self.lock = None

    def _save(self) -> None:
        if not self.dry_run:
            atomic_write_json(self.path / RECORD, self.record)


def claim(path: Path, command: str, inputs: Mapping[str, Any] | None, argv: list[str],
          rerun: Rerun, *, resume: bool = False, dry_run: bool = False,
          cwd: str | None = None) -> OutDir:
    """Checks `path` against the command's rule (module docstring) and, unless a dry run,
    records the new attempt in it (taking its lock). Raises RunnerError when refused.
    `inputs` None: a resume the command checks against its own record (a run's run.json)."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    cwd = cwd or os.getcwd()
    name = f"`runner {command}`"
    now = inputs_record(inputs, cwd) if inputs is not None else None
    if path.exists() and not path.is_dir():
        raise BadInput("--out names a file, not a directory", where=str(path),
                       fix="pass a new or empty directory as --out")
    record = read_record(path) if path.is_dir() else None
    legacy = record is None and any((path / m).is_file() for m in rerun.markers)
    if record is None and not legacy:
        found = foreign_files(path) if path.is_dir() else []
        if found:
            shown = ", ".join(found[:SHOWN_ENTRIES]) + (", ..." if len(found) > 3 else "")
            raise BadInput(f"the directory holds files that are not {name}'s own "
                           f"({shown})", where=str(path),
                           fix="pass a new or empty directory as --out (nothing was "
                           "written)")
        if resume:
            raise BadInput(f"no attempt of {name} to resume here", where=str(path),
                           fix=f"start one with `runner {command} ... --out {path}`")
        return _new(path, command, now or inputs_record({}, cwd), argv, cwd, dry_run)
    if record is not None and record.get("command") != command:
        other = record.get("command")
        raise BadInput(f"the directory holds the output of `runner {other}`, not of "
                       f"{name}", where=str(path / RECORD),
                       fix=f"pass another --out (or go on with `runner {other} --resume "
                       f"{path}`)")
    lock = None if dry_run else DirLock(path / LOCK, "out dir")
    if lock is not None:
        lock.lock()
    try:
        if lock is not None and record is not None:  # as it is now that we hold the lock
            record = read_record(path) or record
        return _existing(path, command, record, legacy, now, argv, cwd, rerun, resume,
                         dry_run, lock)
    except BaseException:
        if lock is not None:
            lock.unlock()
        raise


def _new(path: Path, command: str, now: dict[str, Any], argv: list[str], cwd: str,
         dry_run: bool) -> OutDir:
    record = {"schema": ATTEMPT_SCHEMA, "command": command, "argv": list(argv), "cwd": cwd, **now,
              "status": StepStatus.RUNNING, "attempts": [_attempt()], "steps": {}}
    out = OutDir(path, command, record, resumed=False, dry_run=dry_run,
                 created=not path.exists())
    if dry_run:
        return out
    out.lock = DirLock(path / LOCK, "out dir")
    out.lock.lock()
    try:
        if read_record(path) is not None:  # made meanwhile by another driver
            raise BadInput("another driver started here meanwhile", where=str(path),
                           fix="pass another --out")
        out._save()
    except BaseException:
        out.release()
        raise
    return out


def steps_of(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A record's parts as steps; a record of a runner before parts were steps keeps them as
    `done` (part -> its detail), each one finished, in a time it did not record."""
    steps = record.get("steps")
    if isinstance(steps, dict):
        return steps
    done = record.get("done")
    return {part: {"key": part, "status": StepStatus.FINISHED, "seconds": None,
                   "detail": detail}
            for part, detail in (done.items() if isinstance(done, dict) else ())}


def _fingerprint(path: Path) -> dict[str, tuple[int, int]]:
    """Size and mtime of every file under `path` but the record and the lock."""
    out = {}
    for entry in _entries(path):
        if entry.parent == path and entry.name in (RECORD, LOCK):
            continue
        try:
            st = entry.lstat()
        except OSError:
            continue
        out[str(entry.relative_to(path))] = (st.st_size, st.st_mtime_ns)
    return out


def _remove_empty_tree(path: Path) -> None:
    """Removes `path` if it holds nothing but empty directories (else leaves it)."""
    try:
        for root, dirs, _ in os.walk(path, topdown=False):
            for d in dirs:
                os.rmdir(Path(root, d))
        path.rmdir()
    except OSError:
        pass


def _attempt() -> dict[str, Any]:
    """Who made this attempt: its process, host, start, and the runner's version and commit
    (every result the history keeps of it says which runner measured it)."""
    from runner.base.provenance import runner_provenance

    mine = runner_provenance()
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": _now(),
            "runner": {"version": mine["version"], "commit": mine["commit"]}}


def _existing(path: Path, command: str, record: dict[str, Any] | None, legacy: bool,
              now: dict[str, Any] | None, argv: list[str], cwd: str, rerun: Rerun, resume: bool,
              dry_run: bool, lock: DirLock | None) -> OutDir:
    name = f"`runner {command}`"
    if record is None:  # an out dir of this command from before attempt records
        record = {"schema": ATTEMPT_SCHEMA, "command": command, "argv": list(argv), "cwd": cwd,
                  **(now or inputs_record({}, cwd)), "status": StepStatus.FINISHED, "attempts": [],
                  "steps": {}}
    elif now is not None:
        diffs = differences(record, now)
        if diffs:
            recorded = " ".join(["runner", *map(str, record.get("argv", [command]))])
            finished = StepStatus.read(record.get("status")) == StepStatus.FINISHED
            raise BadInput(
                f"the directory holds {'a finished' if finished else 'an'} attempt of {name} "
                "with other inputs:\n    " + "\n    ".join(diffs), where=str(path / RECORD),
                fix=f"pass another --out for these inputs (`runner {command} --resume {path}` "
                "goes on with the attempt's own, and finds nothing left to do)" if finished else
                f"finish it as it was (`runner {command} --resume {path}`, which runs "
                f"`{recorded[:300]}` again), or pass another --out")
    status = StepStatus.read(record.get("status"))
    if rerun.rule == REFUSES and not resume:
        if legacy:
            raise BadInput(f"the directory holds the output of an earlier {name}",
                           where=str(path), fix=f"if it was interrupted, finish it with "
                           f"`runner {command} --resume {path}`; else pass another --out")
        how = _ended_how(record)
        if status == StepStatus.FINISHED:
            raise BadInput(f"the directory holds a finished {name} ({how})",
                           where=str(path), fix=f"pass another --out for a new attempt "
                           f"(`runner {command} --resume {path}` finds nothing left to do)")
        raise BadInput(f"the directory holds an interrupted {name} ({how})",
                       where=str(path), fix=f"finish it with `runner {command} --resume "
                       f"{path}`, or pass another --out")
    out = OutDir(path, command, record, resumed=True, dry_run=dry_run, lock=lock)
    if not dry_run:
        with contextlib.suppress(OSError):
            out.found = ((path / RECORD).read_bytes() if (path / RECORD).is_file() else None,
                         _fingerprint(path))
    if rerun.rule == REFUSES and status == StepStatus.FINISHED:
        out.nothing_to_do = True
        return out
    record["previous_status"] = status.settled()
    record["status"] = StepStatus.RUNNING
    record.setdefault("attempts", []).append(_attempt())
    record["steps"] = steps_of(record)
    record.pop("done", None)
    out._save()
    return out
