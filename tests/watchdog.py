"""A test that runs past its time limit ends with the stacks of what hangs, and the suite
goes on: one hung test must not spend the whole CI budget with nothing to show for it.

`--test-timeout SECONDS` (default $RUNNER_TEST_TIMEOUT, else 900: three times the costliest
test seen under load, its session fixtures included; 0: no limit) bounds each test's setup,
call and teardown together. When it passes:

1. this process's Python stacks, and `py-spy dump --native` of it and of every process the
   test started (a hung `runner` child shows where it waits), go to the terminal;
2. those processes are killed: a test waiting on a hung child fails at once and the suite
   goes on in this process;
3. a test still running STOP_WAIT_S later (or the limit, if shorter) is stuck in this
   process: it exits, which pytest-xdist reports as that test's failure, and another worker
   takes its place.

A test stuck in native code that holds the GIL (the runtime deadlocking in a destructor)
never lets step 1 run: faulthandler's own thread, which needs no GIL, dumps the Python
stacks and exits GIL_GRACE_S after the limit (or the limit again, if shorter) instead.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import subprocess
import threading
from typing import TextIO

import pytest

from runner.base.procs import ProcessGuard, send_signal

DEFAULT_S = 900.0
STOP_WAIT_S = 30.0
GIL_GRACE_S = 60.0
PY_SPY_TIMEOUT_S = 60.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--test-timeout", type=float, metavar="SECONDS",
                     default=float(os.environ.get("RUNNER_TEST_TIMEOUT", DEFAULT_S)),
                     help="end a test that runs longer, with the stacks of what it runs "
                          f"(default $RUNNER_TEST_TIMEOUT, else {DEFAULT_S:.0f}; 0: no limit)")


_TERMINAL = pytest.StashKey[TextIO]()


def pytest_configure(config: pytest.Config) -> None:
    """The stacks go to the terminal, not into a test's captured output (lost with the
    process): a copy of stderr taken here, where pytest's capture is suspended."""
    config.stash[_TERMINAL] = os.fdopen(os.dup(2), "w")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    limit = item.config.getoption("test_timeout")
    if not limit:
        yield
        return
    done = threading.Event()
    guard = ProcessGuard()  # what runs before the test (a session's servers) is left alone
    timer = threading.Timer(limit, _time_out, args=(item, limit, guard, done))
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(limit + min(GIL_GRACE_S, limit), exit=True,
                                      file=item.config.stash[_TERMINAL])
    try:
        yield
    finally:
        done.set()
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()


def _time_out(item: pytest.Item, limit: float, guard: ProcessGuard,
              done: threading.Event) -> None:
    if done.is_set():  # the test ended as the time ran out: the next one's limits stand
        return
    faulthandler.cancel_dump_traceback_later()  # this thread runs: the GIL is not stuck
    err = item.config.stash[_TERMINAL]
    started = guard.started()
    err.write(f"\n{'=' * 30} {item.nodeid} ran past {limit:.0f} s {'=' * 30}\n"
              f"Python stacks of pid {os.getpid()}:\n")
    err.flush()
    faulthandler.dump_traceback(file=err, all_threads=True)
    err.write(f"\n--- pid {os.getpid()} (this pytest process), native:\n"
              f"{_native_stack(os.getpid())}\n")
    for proc in started:
        err.write(f"\n--- pid {proc.pid} (started by the test): "
                  f"{_command_line(proc.pid)}\n{_native_stack(proc.pid)}\n")
    err.write(f"killing the {len(started)} process(es) the test started\n")
    err.flush()
    send_signal(started, signal.SIGKILL)  # not reaped: the test's own wait gets the status
    wait = min(STOP_WAIT_S, limit)
    if not done.wait(wait):
        err.write(f"{item.nodeid} still runs {wait:.0f} s later: this process exits\n")
        err.flush()
        os._exit(1)


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


def _native_stack(pid: int) -> str:
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        return "(no py-spy on PATH: no stack)"
    try:
        proc = subprocess.run([py_spy, "dump", "--native", "--pid", str(pid)],
                              capture_output=True, text=True, timeout=PY_SPY_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(py-spy: {e})"
    return (proc.stdout + proc.stderr).strip()
