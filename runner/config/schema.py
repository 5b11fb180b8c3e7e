"""Unknown keys in a config file are errors, named with the closest valid key.

YAML silently accepts any key, so a typo (`layoutt:`, `batchsize:`) would otherwise leave
the default in place and produce a run that looks right and is not what was asked for.
The valid keys come from the dataclasses a section is read into (`dataclass_keys`), so a
new field is a new valid key without a second list to keep in step.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from runner.base.errors import BadInput


def dataclass_keys(cls: Any, skip: Iterable[str] = ()) -> tuple[str, ...]:
    """The field names of dataclass `cls`, minus `skip` (fields not read from the file)."""
    skipped = set(skip)
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in skipped)


def unknown_key(key: Any, known: Iterable[str], where: str, section: str = "") -> BadInput:
    """The error for `key` in `section` (a dotted path, "" at the top) of the file `where`."""
    known = sorted(known)
    prefix = f"{section}." if section else ""
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"did you mean `{prefix}{close[0]}`? " if close else ""
    return BadInput(f"unknown field `{prefix}{key}`", where=f"{where}: {prefix}{key}",
                    fix=f"{hint}valid keys{' in ' + section if section else ''}: "
                    f"{', '.join(known) or '(none)'}")


def check_keys(mapping: Mapping[Any, Any], known: Iterable[str], where: str,
               section: str = "") -> None:
    """Raises `unknown_key` for the first key of `mapping` that is not in `known`."""
    known = tuple(known)
    for key in mapping:
        if key not in known:
            raise unknown_key(key, known, where, section)
