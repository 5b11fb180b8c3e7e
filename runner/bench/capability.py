"""Whether a measuring mechanism works on a driver, learnt from what the tool does.

A tool's `--help` says which flags it parses, not what its drivers can do: IREE 3.13's
`iree-benchmark-module` lists `--device_profiling_mode=dispatch-events` and its CUDA and HIP
drivers then answer "HAL-native profiling is not implemented". So a mechanism is tried for
real, and where it fails although the same work ran unmeasured, the tool's own reason is
kept per (tool, driver, mechanism) for the rest of the process: later stages on that driver
say `unavailable on cuda with IREE 3.13.0: <reason>` without starting the tool again. A try
killed by a signal or a time limit says nothing about the driver and is never kept.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from pathlib import Path

from runner.base.signals import import_held

_UNAVAILABLE: dict[tuple[str, str, str], str] = {}


def driver_name(device: str) -> str:
    """`cuda://0` -> `cuda`: what a capability is kept per."""
    return device.split("://", 1)[0]


@functools.cache
def tool_release(tool: str) -> str:
    """`IREE 3.13.0` for a tool of the installed runtime package (its binary, or the
    console script pip put on PATH that runs it); otherwise the tool's directory (a build,
    an override), since these tools have no --version flag."""
    try:
        version = importlib.metadata.version("iree-base-runtime")  # 3.13.0, as released
        package = Path(import_held("iree._runtime_libs").__file__ or "").parent
    except (ImportError, importlib.metadata.PackageNotFoundError):
        return f"the IREE tools in {Path(tool).parent}"
    path = Path(tool).resolve()
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        head = b""
    if path.parent == package.resolve() or (head.startswith(b"#!")
                                            and b"from iree._runtime.scripts" in head):
        return f"IREE {version}"
    return f"the IREE tools in {Path(tool).parent}"


def reason_of(output: str) -> str:
    """The tool's own reason: its last status line (`...: UNIMPLEMENTED; ...`), else its
    last non-empty line."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    status = [line for line in lines if "; " in line and ".c" in line.split(";")[0]]
    return (status or lines or ["(no output)"])[-1][:500]


def note(tool: str, device: str, reason: str) -> str:
    return f"unavailable on {driver_name(device)} with {tool_release(tool)}: {reason}"


def known(tool: str, device: str, mechanism: str) -> str | None:
    """The kept note when `mechanism` already failed on this driver with this tool."""
    return _UNAVAILABLE.get((tool, driver_name(device), mechanism))


def killed(returncode: int | None) -> bool:
    """A signal (negative) or a shell's 128+N, or no exit at all (a time limit)."""
    return returncode is None or returncode < 0 or returncode > 128


def failed(tool: str, device: str, mechanism: str, returncode: int | None, output: str
           ) -> str:
    """The note for a try that failed, kept unless it was killed (then it may work next
    time, and the note says it was stopped)."""
    text = note(tool, device, reason_of(output))
    if killed(returncode):
        return f"{text} (stopped, exit {returncode}: not kept, the next stage tries again)"
    _UNAVAILABLE[(tool, driver_name(device), mechanism)] = text
    return text


def forget() -> None:
    """Drops every kept answer (a new tool directory, a test)."""
    _UNAVAILABLE.clear()
