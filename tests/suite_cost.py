"""What the suite costs, test by test: wall and CPU seconds, written as JSON for
`scripts/suite_cost.py` (which compares a run with tests/suite_budget.json and names what grew).

CPU seconds are this process's and its finished children's (workers, compilers, exports),
so they change little when other work loads the machine, where wall seconds can double. A
test's cost includes the session or module fixtures it is the first to need: what running it
alone would cost. Under pytest-xdist each worker measures its own tests; the numbers reach
the controller with the tests' reports.

`--suite-cost PATH` (or $RUNNER_SUITE_COST) names the file; without either nothing is written.

Under pytest-xdist the costliest files (tests/suite_budget.json's CPU seconds) are handed out
first, so the last minutes are not one worker finishing a long test while the other idles.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import pytest

CPU_KEY = "suite_cost_cpu_s"
_START = pytest.StashKey[float]()
BUDGET = Path(__file__).with_name("suite_budget.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--suite-cost", metavar="PATH", default=os.environ.get("RUNNER_SUITE_COST"),
                     help="write each test's wall and CPU seconds here as JSON "
                          "(scripts/suite_cost.py reads it; default: $RUNNER_SUITE_COST)")
    parser.addoption("--suite-budget", metavar="PATH", type=Path, default=BUDGET,
                     help="the per-file costs that order the files under pytest-xdist "
                          "(default: tests/suite_budget.json)")


def _cpu_seconds() -> float:
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_START] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and _START in item.stash:
        report.user_properties.append((CPU_KEY, round(_cpu_seconds() - item.stash[_START], 3)))


class _Collector:
    """On the controller (or a plain run): each test's phases as their reports arrive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tests: dict[str, dict[str, Any]] = {}
        self.started = time.time()
        self.start = time.monotonic()
        self.load_at_start = os.getloadavg()[0]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {
            "nodeid": report.nodeid, "file": report.nodeid.split("::", 1)[0], "wall_s": 0.0,
            "cpu_s": 0.0, "outcome": "passed"})
        entry["wall_s"] = round(entry["wall_s"] + report.duration, 3)
        entry["cpu_s"] = round(entry["cpu_s"] + dict(report.user_properties).get(CPU_KEY, 0.0), 3)
        if report.outcome != "passed" and entry["outcome"] == "passed":
            entry["outcome"] = report.outcome if report.when == "call" else f"{report.when} " \
                f"{report.outcome}"

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = session.config
        data = {"started": self.started, "wall_s": round(time.monotonic() - self.start, 1),
                "load": [round(self.load_at_start, 2), round(os.getloadavg()[0], 2)],
                "workers": getattr(config.option, "numprocesses", None) or 0,
                "markexpr": config.option.markexpr or "", "args": list(config.args),
                "tests": sorted(self.tests.values(), key=lambda t: t["nodeid"])}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.path)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        cpu = sum(t["cpu_s"] for t in self.tests.values())
        terminalreporter.write_line(
            f"suite cost: {len(self.tests)} tests, {time.monotonic() - self.start:.0f} s wall, "
            f"{cpu:.0f} s CPU; each test's in {self.path} (compare: python3 "
            f"scripts/suite_cost.py {self.path})")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--suite-cost")
    if path and not hasattr(config, "workerinput"):  # the controller, or a plain run
        config.pluginmanager.register(_Collector(Path(path)), "suite-cost-collector")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On pytest-xdist workers: the files in order of their budgeted CPU seconds, costliest
    first, each file's tests together and in their own order (so a module fixture is still
    built once). Every worker sorts the same way, as xdist requires; a plain run keeps
    pytest's order."""
    budget = config.getoption("--suite-budget")
    if not hasattr(config, "workerinput") or not budget.is_file():
        return
    files = json.loads(budget.read_text()).get("files", {})
    first_seen = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("::", 1)[0], index)

    def order(indexed: tuple[int, pytest.Item]) -> tuple[float, int, int]:
        index, item = indexed
        file = item.nodeid.split("::", 1)[0]
        return (-files.get(file, {}).get("cpu_s", 0.0), first_seen[file], index)

    items[:] = [item for _, item in sorted(enumerate(items), key=order)]
