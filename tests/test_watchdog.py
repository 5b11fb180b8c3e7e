"""tests/watchdog.py: a test that hangs ends with the stacks of what hangs, and the suite goes
on. Each way a test can hang (on a child process, in its own Python code, in native code
holding the GIL) is run for real in a pytest of its own, under pytest-xdist as the suite is."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
LIMIT_S = 3

HANGING_TESTS = '''
import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

def test_waits_on_a_hung_child():
    child = Path(__file__).with_name("hung_child.py")
    assert subprocess.run([sys.executable, str(child)]).returncode == 0

def test_sleeps_in_this_process():
    time.sleep(600)

def test_holds_the_gil_in_native_code():
    ctypes.PyDLL(None).sleep(600)  # PyDLL keeps the GIL across the call

def test_after_them():
    assert True
'''

HUNG_CHILD = '''
import time

def wait_forever():
    time.sleep(600)

wait_forever()
'''


@pytest.mark.slow
def test_each_way_of_hanging_ends_with_its_stacks_and_the_suite_goes_on(tmp_path):
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent(HANGING_TESTS))
    (tmp_path / "hung_child.py").write_text(textwrap.dedent(HUNG_CHILD))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "watchdog", "-p", "no:cacheprovider", "-q",
         "-n", "1", f"--test-timeout={LIMIT_S}", "test_hangs.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**_env(), "PYTHONPATH": str(TESTS)})
    out = proc.stdout + proc.stderr

    assert proc.returncode == 1, out
    assert "3 failed, 1 passed" in out, out
    # A hung child: its command and where it waits (py-spy), then killed; this worker goes on.
    assert f"test_hangs.py::test_waits_on_a_hung_child ran past {LIMIT_S} s" in out, out
    assert "hung_child.py" in out and "wait_forever (hung_child.py:" in out, out
    assert "killing the 1 process(es) the test started" in out, out
    assert "crashed while running 'test_hangs.py::test_waits_on_a_hung_child'" not in out, out
    # Stuck in its own Python code: its stack, then its worker exits and another takes over.
    assert "test_hangs.py::test_sleeps_in_this_process ran past" in out, out
    assert "in test_sleeps_in_this_process" in out, out  # faulthandler's Python stack
    assert "test_sleeps_in_this_process (test_hangs.py:" in out, out  # py-spy's, native too
    assert "crashed while running 'test_hangs.py::test_sleeps_in_this_process'" in out, out
    # Native code holding the GIL: faulthandler's thread dumps the stack and exits.
    assert "Timeout (0:00:06)!" in out, out
    assert "in test_holds_the_gil_in_native_code" in out, out
    assert "crashed while running 'test_hangs.py::test_holds_the_gil_in_native_code'" in out, out


def _env() -> dict[str, str]:
    """This environment less what would make the inner pytest one of this suite's workers."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNNER_TEST"))}
