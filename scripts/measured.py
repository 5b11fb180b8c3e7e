"""The measured numbers the README and the docs show, kept in one file: docs/measurements.json.

A benchmark script run with `--record` stores its JSON line there as a record, with the
date, the machine, the load average and the commit it measured. A page shows a recorded
value as the literal followed by a comment that names it:

    4.54<!-- measured main_job.run_samples_per_s .2f --> samples/s

so the Markdown reads the same on GitHub and on the site, and scripts/docs_check.py can
prove every such literal is the record's (`--update` rewrites them from the file). A key is
the record's name and a dotted path into its `result`; the optional format is Python's
(`.2f`, `.0f`, `,`), and a list (a range over rounds) shows as `min-max`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "docs" / "measurements.json"
# A benchmark imports this first thing, so this is the load its measurement started at.
LOAD_AT_START = os.getloadavg()[0]


def load(path: Path = DATA) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def lookup(data: dict[str, Any], key: str) -> Any:
    """The value `record.path.to.leaf` names; KeyError naming the missing part."""
    name, _, path = key.partition(".")
    if name not in data["records"]:
        raise KeyError(f"no record {name!r} in {DATA.name}")
    value = data["records"][name]["result"]
    for part in path.split(".") if path else []:
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"record {name!r} has no {path!r}")
        value = value[part]
    return value


def render(value: Any, fmt: str = "") -> str:
    """How a page writes a value: Python's format spec, else ints as they are and floats to
    three significant digits; a list of numbers is the range `min-max`."""
    if isinstance(value, list):
        low, high = render(min(value), fmt), render(max(value), fmt)
        return low if low == high else f"{low}-{high}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    if fmt:
        return format(value, fmt)
    return str(value) if isinstance(value, int) else f"{value:.3g}"


def machine() -> dict[str, Any]:
    """The host a measurement ran on, as a record keeps it."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text()
                      .splitlines() if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)),
            "memory_gib": round(mem_kb / 2**20), "os": f"{platform.system()} {platform.machine()}",
            "python": platform.python_version()}


def describe(record: dict[str, Any]) -> str:
    """One line of provenance: date, machine, load."""
    m = record["machine"]
    text = f"{record['date']}, {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB"
    if "gpu" in m:
        text += f", {m['gpu']}"
    if record.get("load"):
        text += f", load average {render(record['load'], '.2g')}"
    return text


def commit() -> str:
    proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def store(name: str, result: dict[str, Any], command: list[str], load: list[float],
          path: Path = DATA) -> None:
    """Put one record into the data file (replacing the one of that name), atomically."""
    sys.path.insert(0, str(REPO))
    from runner.base.fileio import atomic_write_text

    data = load_file(path)
    data["records"][name] = {
        "command": " ".join(command), "date": datetime.date.today().isoformat(),
        "machine": machine(), "load": [round(x, 2) for x in load], "commit": commit(),
        "result": result}
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)
                      + "\n")


def load_file(path: Path) -> dict[str, Any]:
    return load(path) if path.exists() else {"records": {}}


def add_record_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--record", action="store_true",
                        help=f"also store the result in {DATA.relative_to(REPO)} with the "
                             "date, machine, load and commit (the docs show it from there)")


def emit(name: str, result: dict[str, Any], record: bool,
         load: list[float] | None = None) -> None:
    """Print the script's one JSON line; with --record, store it as the record `name` (with
    `load`, the load averages at the measurement's start and end, where they were not this
    script's own: a run it reads)."""
    print(json.dumps(result))
    if record:
        script = Path(sys.argv[0]).resolve()
        shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
        store(name, result, ["python3", str(shown), *(a for a in sys.argv[1:] if a != "--record")],
              load or [LOAD_AT_START, os.getloadavg()[0]])
