"""Which IREE releases the runner is tested against, and whether an installed build is one.

The runner depends on `iree-base-runtime>=OLDEST` (and `[compile]` on
`iree-base-compiler>=OLDEST`) with no upper bound: the tool exists to test IREE builds
other than the newest release (a nightly, a self-built tree), and installing it must not
replace them. The suite runs the tiny model end to end with the real wheels of both ends
(tests/test_iree_range.py); `runner --version` says whether the IREE it would use lies
between them. A build outside the range may work; it is just not what was tested.

OLDEST is the first release that compiles the shipped tiny model (`runner trend --range
wheels:2.9.0..wheels:3.13.0 --test accuracy --profile tiny` over every PyPI release): 2.9.0 to
3.1.0 do not know `torch.aten._assert_tensor_metadata`, 3.2.0 to 3.6.0 cannot evaluate its
parameter-backed constants at compile time (no `io_parameters` module in consteval), 3.7.0
and 3.8.0 fail to legalize a `torch.constant.float`, and 3.7.1 has no runtime wheel.
"""

from __future__ import annotations

import re

OLDEST = "3.9.0"
NEWEST = "3.13.0"
PACKAGES = ("iree-base-compiler", "iree-base-runtime")


def release(version: str) -> tuple[int, int, int] | None:
    """The X.Y.Z a version string starts with: a release (`3.13.0`), its candidate as the
    release wheels report it (`3.13.0rc20251016`), a nightly of the next release
    (`3.14.0rc20260101`) or a source build (`3.14.0.dev0`); None when there is none."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def verdict(version: str | None) -> str:
    """`inside`, `older`, `newer` or `unknown`, against OLDEST..NEWEST by X.Y.Z."""
    found = release(version) if version else None
    if found is None:
        return "unknown"
    oldest, newest = release(OLDEST), release(NEWEST)
    assert oldest is not None and newest is not None
    if found < oldest:
        return "older"
    if found > newest:
        return "newer"
    return "inside"


def range_lines(found: dict[str, str | None]) -> list[str]:
    """`runner --version`'s lines on the tested range: one summary, then a warning for each
    IREE part (name -> version, None where it is missing) outside it."""
    span = f"{OLDEST} to {NEWEST}"
    judged = {name: verdict(version) for name, version in found.items() if version}
    outside = {name: v for name, v in judged.items() if v != "inside"}
    if not judged:
        return [f"IREE: tested with releases {span}; no IREE compiler or runtime found"]
    if not outside:
        return [f"IREE: inside the tested range ({span}): {', '.join(judged)}"]
    lines = [f"IREE: OUTSIDE the tested range ({span}) for {', '.join(outside)}"]
    why = {"older": f"older than the oldest tested release, {OLDEST}",
           "newer": f"newer than the newest tested release, {NEWEST}",
           "unknown": "its version is not a release number"}
    for name, v in outside.items():
        lines.append(f"  warning: {name} {found[name]} is {why[v]}: untested with this "
                     "runner; results may differ from a tested release's")
    return lines
