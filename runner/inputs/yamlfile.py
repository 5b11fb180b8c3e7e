"""YAML, bounded and JSON-shaped: what profiles, model configs and `--set` values are.

PyYAML's safe loader still builds whatever a document describes: an alias bomb (a few lines
of anchors and aliases that expand exponentially when the profile is merged, copied or
recorded), datetimes and sets (`!!set`, `2024-01-01`) that no run record can hold, NaN and
infinity, and nesting deep enough to overflow its recursive composer. This loader refuses
all of them:

- anchors and aliases: refused outright, rather than bounded. A profile shares settings with
  another through `extends:`, which the runner resolves and records; no shipped config uses
  an anchor, and any bound on aliases still lets a small file expand into a large tree.
- explicit tags (`!!python/...`, `!!binary`, `!!set`, `!custom`): refused; a profile's
  values are plain strings, numbers, booleans, lists and mappings.
- dates and times stay strings (no implicit timestamp resolution);
- mapping keys must be strings; floats must be finite; integers must fit in 64 bits;
- nesting is bounded while composing, so the parser never recurses past `MAX_DEPTH`.

Errors say line and column but never quote the document (PyYAML's own messages print the
offending line, which for a file that is not YAML at all could be anything).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from runner.base.errors import BadInput
from runner.inputs.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_DEPTH,
    BadNumber,
    MiB,
    check_depth,
    read_text,
    refuse_bad_numbers,
)

YAML_FIX = "write plain YAML: mappings, lists, strings, numbers, true/false (no anchors or tags)"


class _Refused(yaml.YAMLError):
    def __init__(self, message: str, mark: Any = None):
        super().__init__(message)
        self.message, self.mark = message, mark


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader composing at most `MAX_DEPTH` levels, with no anchors, aliases or tags."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self.found_bad = False  # a BadNumber was left in the data: its field is named after

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused("an alias (`*name`) is not allowed", event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise _Refused("an anchor (`&name`) is not allowed", event.start_mark)
        tag = getattr(event, "tag", None)
        implicit = getattr(event, "implicit", True)
        explicit = tag is not None and not (implicit is True or (
            isinstance(implicit, tuple) and any(implicit)))
        if explicit:
            raise _Refused(f"a tag ({str(tag)[:40]}) is not allowed", event.start_mark)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_float(self, node: Any) -> Any:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            return self._bad(node, False)
        return value

    def construct_yaml_int(self, node: Any) -> Any:
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # more digits than Python converts (4300)
            return self._bad(node, True)
        if not INT64_MIN <= value <= INT64_MAX:
            return self._bad(node, True)
        return value

    def _bad(self, node: Any, integer: bool) -> BadNumber:
        """Left in place; `parse_yaml` names its field once the document is read."""
        self.found_bad = True
        return BadNumber(str(node.value), integer, _position(node.start_mark))

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        for key_node, _ in node.value:
            if not (isinstance(key_node, yaml.ScalarNode)
                    and key_node.tag == "tag:yaml.org,2002:str"):
                raise _Refused("a mapping key must be a plain string", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


# Timestamps (`2024-01-01`) stay strings: drop the implicit resolver for them.
BoundedLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
BoundedLoader.add_constructor("tag:yaml.org,2002:float", BoundedLoader.construct_yaml_float)
BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
# Non-string keys would be refused above; `<<` merge keys need an alias, refused too.
BoundedLoader.add_constructor("tag:yaml.org,2002:map", BoundedLoader.construct_yaml_map)

def _position(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _message(e: yaml.YAMLError) -> str:
    """What went wrong and where, without PyYAML's quoted snippet of the document."""
    if isinstance(e, _Refused):
        return f"{e.message} ({_position(e.mark)})" if e.mark else e.message
    if isinstance(e, yaml.reader.ReaderError):
        return (f"a character YAML does not allow (0x{e.character:x}) at position "
                f"{e.position}" if isinstance(e.character, int) else "not valid text")
    if isinstance(e, yaml.MarkedYAMLError):
        parts = [p for p in (e.context, e.problem) if p]
        mark = e.problem_mark or e.context_mark
        return f"{'; '.join(parts) or 'not valid YAML'} ({_position(mark)})"
    return "not valid YAML"


_BRACKETS = re.compile(r"[\[\]{}]")


def _flow_depth_ok(text: str) -> bool:
    """Whether `[`/`{` nest at most MAX_DEPTH deep (quotes not told apart: a real profile's
    strings hold a few balanced braces at most). Checked before PyYAML sees the text: its
    scanner tracks every open flow level and slows down quadratically with their number."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_DEPTH:
            return False
    return True


def parse_yaml(text: str, where: str, what: str = "file") -> Any:
    """YAML text -> JSON-shaped data (None for an empty document), or RunnerError."""
    if not _flow_depth_ok(text):
        raise BadInput(f"the {what} is nested more than {MAX_DEPTH} levels deep",
                       where=where, fix=YAML_FIX)
    loader = None
    try:
        loader = BoundedLoader(text)  # its reader refuses non-printable characters here
        data = loader.get_single_data()
        found_bad = loader.found_bad
    except yaml.YAMLError as e:
        raise BadInput(f"cannot read the {what}: {_message(e)}", where=where,
                       fix=YAML_FIX) from None
    except RecursionError:
        raise BadInput(f"the {what} is nested too deeply", where=where, fix=YAML_FIX) from None
    finally:
        if loader is not None:
            loader.dispose()
    check_depth(data, where)  # strings that are not text (an escaped lone surrogate)
    if found_bad:
        refuse_bad_numbers(data, where, what)
    return data


MAX_YAML_BYTES = 4 * MiB  # a profile or model config is a few KiB


def read_yaml(path: Path, where: str | None = None, max_bytes: int = MAX_YAML_BYTES,
              what: str = "file") -> Any:
    where = where or str(path)
    return parse_yaml(read_text(path, where, max_bytes, what), where, what)
