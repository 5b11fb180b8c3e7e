"""Which profile fields a command reads, so a `--set` it would not use is refused.

A command that loads a profile with `--set` declares the fields it acts on (`ProfileReads`,
in its package's `cli.py`); `--set` of any other field is bad input naming the fields it
does read, instead of a value recorded and quietly ignored (`runner plan --set
accuracy.fid_statistics=...` measures nothing against it). A field is a section key
(`layout.cpd`) or a top-level value (`count`); a declaration names a whole section by its
name (`layout`) and leaves fields of it out with `but`.

`effective_values` is the other half: the value a command's loaded profile holds for each
field set, as the typed profile reads it, which `runner run --dry-run` prints.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.base.errors import BadInput

if TYPE_CHECKING:
    from runner.config.profile import Profile


def settable_fields() -> tuple[str, ...]:
    """Every field `--set` can name: each section's keys (`target.chip`) and the top-level
    values (`count`), in the profile schema's order (runner.config.profile)."""
    from runner.config.profile import profile_schema

    out: list[str] = []
    for name, keys in profile_schema().items():
        if name != "extends":
            out += [name] if keys is None else [f"{name}.{k}" for k in keys]
    return tuple(out)


def _expand(names: Iterable[str]) -> set[str]:
    every = settable_fields()
    out: set[str] = set()
    for name in names:
        found = [f for f in every if f == name or f.startswith(f"{name}.")]
        if not found:  # a declaration's typo, not a user's: fails every use of the command
            raise ValueError(f"{name!r} is no profile field")
        out |= set(found)
    return out


@dataclass(frozen=True)
class ProfileReads:
    """`command` (as typed after `runner`) reads `fields` (sections or fields) less `but`."""

    command: str
    fields: tuple[str, ...]
    but: tuple[str, ...] = ()

    def read(self) -> tuple[str, ...]:
        """The fields read, one by one, in the schema's order."""
        chosen = _expand(self.fields) - _expand(self.but)
        return tuple(f for f in settable_fields() if f in chosen)

    def text(self) -> str:
        """The fields read, shortest: a whole section as its name (`layout`), most of one
        as what it leaves out (`target (not sku)`), a few of one by name."""
        read = set(self.read())
        words: list[str] = []
        for name in dict.fromkeys(f.split(".")[0] for f in settable_fields()):
            inside = [f for f in settable_fields() if f.split(".")[0] == name]
            taken = [f for f in inside if f in read]
            left = [f.partition(".")[2] for f in inside if f not in read]
            if taken and len(left) < len(taken) and len(left) <= 3:
                words.append(name + (f" (not {', '.join(left)})" if left else ""))
            else:
                words += taken
        return ", ".join(words)


def fields_set(overrides: Mapping[str, Any]) -> dict[str, str]:
    """Each field the `--set` overrides give -> the `--set` key that gave it. Below a field
    is the field (`mlperf.system.id` sets `mlperf.system`); a section set to a mapping sets
    its keys, to anything else all of it; `model=X` is `model.source` (the shorthand)."""
    every = settable_fields()
    out: dict[str, str] = {}
    for key, value in overrides.items():
        parts = key.split(".")
        if parts[0] not in {f.split(".")[0] for f in every}:
            continue  # an unknown key: load_profile names it with the closest known one
        if len(parts) > 1 or parts[0] in every:
            out.setdefault(".".join(parts[:2]), key)
        elif isinstance(value, Mapping):
            out.update({f"{key}.{k}": key for k in value if f"{key}.{k}" in every})
        elif key == "model":
            out.setdefault("model.source", key)
        else:
            out.update({f: key for f in every if f.startswith(f"{key}.")})
    return out


def refuse_unread(overrides: Mapping[str, Any], reads: ProfileReads) -> None:
    """Bad input for the first `--set` of a field `reads.command` does not read. A field no
    profile has (`model.precision`) is left to load_profile, which names the valid keys."""
    read, known = set(reads.read()), set(settable_fields())
    for field, key in fields_set(overrides).items():
        if field in known and field not in read:
            raise BadInput(f"`--set {key}` is not read by `runner {reads.command}`; it reads: "
                           f"{reads.text()}", where=f"--set {key}",
                           fix=f"drop --set {key}, or set it for a command that reads "
                           f"{field}")


def profile_field_value(profile: Profile, field: str) -> Any:
    """The value the loaded profile holds for `field`, as the command reads it: the typed
    value (a layout's device list, a model's dtype name), not the text given."""
    section, _, key = field.partition(".")
    if not key:
        return getattr(profile, section)
    if section == "model":
        model = profile.model
        return (model.source or str(model.path)) if key == "source" else getattr(model, key)
    if section == "accuracy" and key not in ("fid", "clip", "metrics"):
        return profile.accuracy.settings.get(key)
    obj = getattr(profile, section)
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key)


def effective_values(profile: Profile, overrides: Mapping[str, Any]) -> list[str]:
    """`# --set FIELD: VALUE` for each field the overrides set, the value as JSON."""
    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        return str(value)

    return [f"# --set {field}: {json.dumps(profile_field_value(profile, field), default=plain)}"
            for field in fields_set(overrides)]
