"""One way to read a config mapping into typed values, driven by the dataclass it fills.

Profiles, layouts, model configs and IREE CI's test JSONs are all mappings read into frozen
dataclasses. Each used to check its own keys and types with its own helpers and its own error
texts; now `read` walks a dataclass's fields and type hints, and `Fields` holds the typed reads
(text, flag, number, list, mapping) a reader with rules of its own calls directly. So a new
config field is a new dataclass field (with `rules(...)` where a type alone says too little),
and every config error has one shape, made in `Fields.error` alone:

    configs/x.yaml: layout.cpd: `cpd` must be a whole number at least 1, not 0
      fix: use e.g. layout.cpd: 1

that is, the file and the field path (`where`), what is wrong, and the fix. An unknown key is
such an error too, naming the closest known key and all of them: YAML and JSON accept any key,
so a typo (`layoutt:`) would otherwise leave the default in place and a run that looks right.

The types a field may have: str, int, float, bool, `X | None`, `tuple[X, ...]` (a list in
the file) and `dict[str, X]` (a mapping; X may be a dataclass, each entry read the same way
and, where it has a `name` field, named by its key).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from runner.base.errors import BadInput

# dataclasses.field(metadata=...) keys `read` honours; see `rules`.
_RULES = "runner.inputs.fields"


def rules(*, minimum: float | None = None, above: float | None = None,
          choices: Iterable[str] = (), example: Any = None, nonempty: bool = False
          ) -> dict[str, Any]:
    """A dataclass field's metadata for `read`: what its type alone does not say (a number's
    least value, or the value it must exceed; the strings it may be; that a string or list
    may not be empty) and an example value for the fix. Use as
    `field(metadata=rules(minimum=1))`."""
    return {_RULES: {"minimum": minimum, "above": above, "choices": tuple(choices),
                     "example": example, "nonempty": nonempty}}


def dataclass_keys(cls: Any, skip: Iterable[str] = ()) -> tuple[str, ...]:
    """The field names of dataclass `cls`, minus `skip` (fields not read from the file)."""
    skipped = set(skip)
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in skipped)


def _show(value: Any) -> str:
    return type(value).__name__ if isinstance(value, Mapping | list) else repr(value)


class Fields:
    """Typed reads of one mapping `raw` of the file `where`, found at the dotted `section`
    ("" at the top): each read refuses a value of the wrong type or range with `error`.

    A reader whose values also come from elsewhere (a layout's flags) overrides `where_of`
    and `setting`, so errors point at the flag and fixes are written in its syntax.
    """

    def __init__(self, raw: Mapping[str, Any], where: str | None, section: str = ""):
        self.raw, self.where, self.section = raw, where, section

    def path(self, key: str) -> str:
        """`key`'s dotted path in the file: `layout.cpd`, `submodels.vae.mlir`."""
        return f"{self.section}.{key}" if self.section and key else self.section or key

    def where_of(self, key: str) -> str:
        """Where an error about `key` points: `configs/x.yaml: layout.cpd`."""
        path = self.path(key)
        return f"{self.where}: {path}" if self.where and path else self.where or path

    def setting(self, key: str, value: Any) -> str:
        """How to give `key` the value `value`, as the file writes it."""
        return f"{self.path(key)}: {value}"

    def error(self, key: str, message: str, fix: str) -> BadInput:
        """The one error every config reader raises: where (file and field), what, fix."""
        return BadInput(message, where=self.where_of(key), fix=fix)

    def within(self, key: str, raw: Mapping[str, Any]) -> Fields:
        """Reads of the mapping `raw` found at `key`."""
        return Fields(raw, self.where, self.path(key))

    # --- keys -------------------------------------------------------------------------

    def unknown(self, key: Any, known: Iterable[str]) -> BadInput:
        """The error for `key`, not one of `known`: the closest known key, and all of them."""
        known = sorted(known)
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean `{self.path(close[0])}`? " if close else ""
        within = f" in {self.section}" if self.section else ""
        return self.error(str(key), f"unknown field `{self.path(str(key))}`",
                          fix=f"{hint}valid keys{within}: {', '.join(known) or '(none)'}")

    def check_keys(self, known: Iterable[str]) -> None:
        """Refuses the first key that is not in `known`."""
        known = tuple(known)
        for key in self.raw:
            if key not in known:
                raise self.unknown(key, known)

    # --- values -----------------------------------------------------------------------

    def wrong(self, key: str, want: str, example: Any = None) -> BadInput:
        """The error for `key`'s value (None when absent), which is not `want` (`a list of
        strings`)."""
        fix = (f"use e.g. {self.setting(key, example)}" if example is not None
               else f"give `{key}` as {want}")
        return self.error(key, f"`{key}` must be {want}, not {_show(self.raw.get(key))}", fix)

    def missing(self, key: str, example: Any = None) -> BadInput:
        return self.error(key, f"missing required field `{key}`",
                          fix=f"add {self.setting(key, example)}" if example is not None
                          else f"add `{self.path(key)}`")

    def given(self, key: str) -> bool:
        """Whether `key` holds a value: an absent key and a null one both leave the default."""
        return self.raw.get(key) is not None

    @typing.overload
    def text(self, key: str, default: str, *, nonempty: bool = ...,
             choices: Iterable[str] = ..., example: Any = ...) -> str: ...

    @typing.overload
    def text(self, key: str, default: None = None, *, nonempty: bool = ...,
             choices: Iterable[str] = ..., example: Any = ...) -> str | None: ...

    def text(self, key: str, default: str | None = None, *, nonempty: bool = True,
             choices: Iterable[str] = (), example: Any = None) -> str | None:
        """A string (non-empty unless `nonempty` is False; one of `choices` if given)."""
        if not self.given(key):
            return default
        value = self.raw[key]
        if not isinstance(value, str) or (nonempty and not value):
            raise self.wrong(key, "a non-empty string" if nonempty else "a string", example)
        choices = tuple(choices)
        if choices and value not in choices:
            raise self.error(key, f"`{key}` is {value!r}, not one of {', '.join(choices)}",
                             fix=f"use one of {', '.join(choices)}")
        return value

    def required(self, key: str, example: Any = None) -> str:
        value = self.text(key)
        if value is None:
            raise self.missing(key, example)
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        if not self.given(key):
            return default
        if not isinstance(self.raw[key], bool):
            raise self.wrong(key, "true or false", "true")
        return self.raw[key]

    def number(self, key: str, kind: type = float, *, minimum: float | None = None,
               above: float | None = None, example: Any = None) -> Any:
        """An int (a float with no fraction counts) or a float, never a bool; None when
        absent."""
        if not self.given(key):
            return None
        if not _fits(self.raw[key], kind, minimum, above):
            raise self.wrong(key, _words(kind, minimum, above, plural=False), example)
        return kind(self.raw[key])

    def texts(self, key: str) -> tuple[str, ...]:
        """A list of strings; () when absent."""
        return self.items(key, str, None, None) if self.given(key) else ()

    def items(self, key: str, kind: type, minimum: float | None, example: Any,
              nonempty: bool = False) -> tuple[Any, ...]:
        """A list of `kind` values (at least `minimum` where numbers; not empty if
        `nonempty`)."""
        value = self.raw[key]
        if not isinstance(value, list) or (nonempty and not value) \
                or not all(_fits(v, kind, minimum) for v in value):
            raise self.wrong(key, f"a list of {_words(kind, minimum)}", example)
        return tuple(kind(v) for v in value)

    def mapping(self, key: str, kind: type | tuple[type, ...], want: str) -> dict[str, Any]:
        """A mapping whose values are all `kind`, never a bool; {} when absent."""
        value = self.raw.get(key) or {}
        if not isinstance(value, Mapping) or not all(
                isinstance(v, kind) and not isinstance(v, bool) for v in value.values()):
            raise self.wrong(key, want)
        return dict(value)

    def entries(self, key: str, want: str) -> list[tuple[Any, Fields]]:
        """A list's items ([] when absent), each with the reads that point at it
        (`inputs[0]`; an item that is no mapping reads as an empty one)."""
        value = self.raw.get(key) or []
        if not isinstance(value, list):
            raise self.wrong(key, want)
        return [(item, self.within(f"{key}[{i}]", item if isinstance(item, Mapping) else {}))
                for i, item in enumerate(value)]

    def section_of(self, key: str) -> Fields:
        """Reads of the mapping at `key` (an empty one when absent)."""
        value = self.raw.get(key)
        if value is None:
            return self.within(key, {})
        if not isinstance(value, Mapping):
            raise self.wrong(key, "a mapping of `key: value` fields")
        return self.within(key, value)

    def value(self, cls: Any, name: str) -> Any:
        """Field `name` of dataclass `cls`, read as its type hint and `rules` say; None when
        absent or null (the caller knows the default, which may depend on other fields)."""
        if not self.given(name):
            return None
        spec = next(f for f in dataclasses.fields(cls) if f.name == name)
        return self.typed(name, _hints(cls)[name], spec.metadata.get(_RULES, {}))

    def typed(self, key: str, hint: Any, rule: Mapping[str, Any]) -> Any:
        """`key`'s value, present and not null, read as the type hint `hint` says (see the
        module docstring) and as `rules` say."""
        minimum, example = rule.get("minimum"), rule.get("example")
        if not self.given(key):  # a null inside a list or mapping: no default to take
            raise self.missing(key, example)
        hint = _not_none(hint)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is bool:
            return self.flag(key)
        if hint is str:
            return self.text(key, nonempty=rule.get("nonempty", False),
                             choices=rule.get("choices", ()), example=example)
        if hint in (int, float):
            return self.number(key, hint, minimum=minimum, above=rule.get("above"),
                               example=example)
        if origin is tuple and args[1:] == (Ellipsis,):
            return self.items(key, args[0], minimum, example, rule.get("nonempty", False))
        if origin is dict and args[0] is str and dataclasses.is_dataclass(args[1]):
            entries = self.section_of(key)
            named = "name" in dataclass_keys(args[1])
            return {name: read(args[1], value, self.where, entries.path(name),
                               **({"name": name} if named else {}))
                    for name, value in entries.raw.items()}
        if origin is dict and args[0] is str:
            entries = self.section_of(key)
            return {name: entries.typed(name, args[1], rule) for name in entries.raw}
        raise TypeError(f"runner.inputs.fields cannot read {hint!r} (field `{key}`)")


def _fits(value: Any, kind: type, minimum: float | None, above: float | None = None) -> bool:
    """Whether `value` is a `kind`; numbers are never bools, an int may be written 3.0."""
    if kind in (int, float):
        return (isinstance(value, int | float) and not isinstance(value, bool)
                and (kind is float or value == int(value))
                and (minimum is None or value >= minimum)
                and (above is None or value > above))
    return isinstance(value, kind)


def _words(kind: type, minimum: float | None, above: float | None = None,
           plural: bool = True) -> str:
    """`a whole number at least 1`, `strings`: what a value (or each of many) must be."""
    names = {str: ("a string", "strings"), int: ("a whole number", "whole numbers"),
             float: ("a number", "numbers"), bool: ("true or false", "true/false values")}
    one, many = names.get(kind, (f"a {kind.__name__}", f"{kind.__name__} values"))
    return (many if plural else one) + ("" if minimum is None else f" at least {minimum:g}") \
        + ("" if above is None else f" above {above:g}")


def _not_none(hint: Any) -> Any:
    """`X` for `X | None`; any other hint as it is."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return hint


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def values(cls: Any, raw: Any, where: str | None, section: str = "", *,
           skip: Iterable[str] = (), also: Iterable[str] = ()) -> dict[str, Any]:
    """The fields of dataclass `cls` read from the mapping `raw` at `section` of the file
    `where`, as keyword arguments for `cls`.

    Every key must be one of `cls`'s fields, less `skip` (fields the file does not hold, or
    that the caller reads itself), plus `also` (keys the caller reads itself that are no
    field). A field present and not null is read as its type hint and `rules` say; an absent
    or null one takes its default (left out here), None where its type allows None, or is an
    error.
    """
    if not isinstance(raw, Mapping):
        parent, _, key = section.rpartition(".")
        raise Fields({}, where, parent).error(
            key, f"{f'`{section}`' if section else 'the file'} must be a mapping of `key: "
            f"value` fields, not {_show(raw)}",
            fix="write `key: value` fields" + (f" under `{section}`" if section else ""))
    fields = Fields(raw, where, section)
    skipped = set(skip)
    fields.check_keys((*dataclass_keys(cls, skip=skipped), *also))
    out = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skipped:
            continue
        if fields.given(f.name):
            out[f.name] = fields.value(cls, f.name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if _not_none(hints[f.name]) is hints[f.name]:
                raise fields.missing(f.name, f.metadata.get(_RULES, {}).get("example"))
            out[f.name] = None
    return out


def read(cls: Any, raw: Any, where: str | None, section: str = "", **given: Any) -> Any:
    """The dataclass `cls` read from `raw` (see `values`); `given` holds the fields the file
    does not (a submodel's `name`, its key)."""
    return cls(**values(cls, raw, where, section, skip=given), **given)


def unknown_key(key: Any, known: Iterable[str], where: str, section: str = "") -> BadInput:
    """The error for `key` in `section` (a dotted path, "" at the top) of the file `where`."""
    return Fields({}, where, section).unknown(key, known)


def check_keys(mapping: Mapping[Any, Any], known: Iterable[str], where: str,
               section: str = "") -> None:
    """Raises `unknown_key` for the first key of `mapping` that is not in `known`."""
    Fields(mapping, where, section).check_keys(known)
