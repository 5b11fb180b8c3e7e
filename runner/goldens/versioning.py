"""Golden versions live in blob names (`punet_fp16_out_v6.0.bin`); bumping renames them.

`bump_name` moves a name to the target version; a name with no version gets one appended
before its extension (`inference_output.0.bin` -> `inference_output.0_v1.bin`), and the
caller says so. `bump_file_text` rewrites a test JSON by replacing the exact string
literals of its output sources, so every other byte (indentation, key order, inputs,
trailing newline) stays as the author wrote it and the diff shows only the version.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlparse

from runner.base.errors import BadInput
from runner.goldens.testfile import tensor_fields
from runner.inputs.jsonfile import parse_json

# `v6`, `v6.0` as the last `_`/`-`/`.`-separated part of a file name's stem.
_VERSION_RE = re.compile(r"(?:(?<=[_\-.])|^)v(\d+)(?:\.(\d+))?$")
_TARGET_RE = re.compile(r"^v?(\d+)(?:\.(\d+))?$")
NEXT = "next"


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int | None = None

    def __str__(self) -> str:
        return f"v{self.major}" + (f".{self.minor}" if self.minor is not None else "")

    def key(self) -> tuple[int, int]:
        return (self.major, self.minor or 0)

    def next(self) -> Version:
        return Version(self.major + 1, 0 if self.minor is not None else None)


def parse_target(text: str) -> Version | str:
    """`--to`: `v7.0`, `v7`, `7`, or `next` (each name's own n+1)."""
    if text.strip().lower() == NEXT:
        return NEXT
    match = _TARGET_RE.match(text.strip())
    if not match:
        raise BadInput(f"cannot read version {text!r}", where="--to",
                       fix="write it as v7.0, v7, or `next`")
    return Version(int(match.group(1)), int(match.group(2)) if match.group(2) else None)


def _split(name: str) -> tuple[str, str]:
    """(stem, extension); the version sits at the end of the stem."""
    stem, dot, ext = name.rpartition(".")
    return (stem, dot + ext) if stem else (name, "")


def name_version(name: str) -> Version | None:
    match = _VERSION_RE.search(_split(name)[0])
    if not match:
        return None
    return Version(int(match.group(1)), int(match.group(2)) if match.group(2) else None)


@dataclass(frozen=True)
class Bump:
    old_name: str
    new_name: str
    old: Version | None
    new: Version

    @property
    def unversioned(self) -> bool:
        return self.old is None

    def describe(self) -> str:
        if self.old is None:
            return (f"{self.old_name} has no version in its name; the new golden is named "
                    f"{self.new_name} (its first versioned name)")
        return f"{self.old_name} -> {self.new_name}"


def bump_name(name: str, to: Version | str, where: str = "--to") -> Bump:
    old = name_version(name)
    stem, ext = _split(name)
    if to == NEXT:
        new = old.next() if old else Version(1)
    else:
        assert isinstance(to, Version)
        new = to
        if old is not None and old.minor is not None and new.minor is None:
            new = Version(new.major, 0)  # keep the file's `vN.M` style
    if old is not None:
        if new.key() <= old.key():
            raise BadInput(f"{name} is at {old}; {new} is not a newer version", where=where,
                           fix=f"bump to a version above {old} (or use --to next)")
        match = _VERSION_RE.search(stem)
        assert match is not None
        return Bump(name, stem[:match.start()] + str(new) + ext, old, new)
    return Bump(name, f"{stem}_{new}{ext}", None, new)


def bump_source(source: str, to: Version | str, where: str = "--to") -> tuple[str, Bump]:
    """The source reference with its file name bumped (directory, host and query kept)."""
    parsed = urlparse(source)
    path = parsed.path if parsed.scheme in ("http", "https", "file") else source
    name = PurePosixPath(path).name
    if not name:
        raise BadInput(f"no file name in {source!r}", where=where,
                       fix="give the source a file name, e.g. .../clip_out0_v1.0.bin")
    bump = bump_name(name, to, where)
    head = path[: len(path) - len(name)]
    if parsed.scheme in ("http", "https", "file"):
        return parsed._replace(path=head + bump.new_name).geturl(), bump
    return head + bump.new_name, bump


def bump_file_text(text: str, where: str, to: Version | str) -> tuple[str, list[Bump]]:
    """The test file's text with every expected output's reference bumped (`outputs[].source`,
    or `expected_outputs[].url` in the torch layout), nothing else changed."""
    raw = parse_json(text, where, what="test file")
    if not isinstance(raw, dict):
        raise BadInput("a test file must hold a JSON object", where=where,
                       fix="point at IREE CI test JSON files")
    (in_field, in_key), (out_field, out_key) = tensor_fields(raw)
    outputs = [o.get(out_key) for o in raw.get(out_field) or [] if isinstance(o, dict)]
    inputs = {i.get(in_key) for i in raw.get(in_field) or [] if isinstance(i, dict)}
    bumps, seen = [], set()
    for i, source in enumerate(outputs):
        if not isinstance(source, str) or source in seen:
            continue
        seen.add(source)
        field_where = f"{where}: {out_field}[{i}].{out_key}"
        if source in inputs:
            raise BadInput("this output is also an input; bumping it textually would "
                           "change the input too", where=field_where,
                           fix="edit the file by hand")
        new_source, bump = bump_source(source, to, field_where)
        literal = json.dumps(source)
        variants = {literal, literal.replace("/", "\\/")}
        found = sum(text.count(v) for v in variants)
        if found == 0:
            raise BadInput("cannot find the source's exact text in the file", where=field_where,
                           fix="write the source as a plain JSON string (no escapes) to "
                           "bump it")
        for v in variants:
            escaped = v != literal
            new_literal = json.dumps(new_source)
            text = text.replace(v, new_literal.replace("/", "\\/") if escaped else new_literal)
        bumps.append(bump)
    return text, bumps
