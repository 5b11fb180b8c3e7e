"""SIGINT, SIGTERM and SIGHUP as one exception (runner/base/signals.py), and the processes a
command started stopped and waited for before it exits (runner/base/procs.py): in-process,
with real signals and real child processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_support import as_from_a_terminal, at_default

from runner.base.procs import ProcessGuard
from runner.base.signals import (
    Interrupted,
    deferred,
    exit_code,
    raised_as_interrupted,
    start_child,
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_signal_is_one_exception_with_its_exit_code(sig):
    with at_default(sig):  # as a terminal starts the suite; under nohup SIGHUP is ignored
        before = signal.getsignal(sig)
        with pytest.raises(Interrupted) as e, raised_as_interrupted():
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises at the next bytecode
        assert signal.getsignal(sig) == before  # put back
    assert e.value.signum == sig and exit_code(e.value) == 128 + sig
    assert isinstance(e.value, KeyboardInterrupt)  # every `except KeyboardInterrupt` sees it


def test_a_signal_inside_a_deferred_stretch_is_raised_at_its_end(capsys):
    done = []
    with at_default(signal.SIGTERM), at_default(signal.SIGINT), pytest.raises(Interrupted) as e, \
            raised_as_interrupted(), deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # not raised here: the stretch goes on to its end
        os.kill(os.getpid(), signal.SIGINT)  # a second one while stopping: noted only
        time.sleep(0.2)
        done.append(True)
    assert done and e.value.signum == signal.SIGTERM
    assert "SIGINT while stopping after SIGTERM" in capsys.readouterr().err


def test_an_ignored_signal_stays_ignored():
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with raised_as_interrupted():
            os.kill(os.getpid(), signal.SIGHUP)  # nohup's SIGHUP
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGHUP, before)


# A signal that lands while a finalizer runs (here a __del__ that sleeps, as a regex's or an
# IREE object's can take a moment): Python swallows what the handler raises there.
IN_A_FINALIZER = """import sys, time
from runner.base.signals import Interrupted, interruptible, raised_as_interrupted, work_done

class Slow:
    def __del__(self):
        print("finalizing", flush=True)
        time.sleep(1)

stretch = raised_as_interrupted() if sys.argv[1] == "raised" else interruptible()
if sys.argv[1] != "raised":
    work_done()
try:
    with stretch:
        Slow()
        time.sleep(3)
        print("went on", flush=True)
except Interrupted as e:
    print("interrupted", e.name, flush=True)
    sys.exit(e.exit_code)
"""


@pytest.mark.parametrize("stretch", ["raised", "interruptible"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_inside_a_finalizer_still_stops_the_command(stretch, sig):
    """Python swallows an exception raised in a `__del__` ("Exception ignored in ..."), so a
    signal landing there once let `runner trend` go on to its end: the signal is sent again
    to land after the finalizer, and the command stops as it would anywhere else."""
    child = subprocess.Popen([sys.executable, "-c", IN_A_FINALIZER, stretch],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=as_from_a_terminal)
    assert child.stdout.readline() == "finalizing\n"
    time.sleep(0.3)
    child.send_signal(sig)
    out, err = child.communicate(timeout=30)
    assert (child.returncode, out) == (128 + sig, f"interrupted {signal.Signals(sig).name}\n"), \
        err
    assert "Exception ignored" not in err and "Traceback" not in err


# A child that takes a while to start (Python's imports), then sets its handlers. Its
# signals start as Python starts them from an interactive shell (pytest in the background
# may run with SIGINT ignored, which children inherit).
STARTING_CHILD = """import signal, time
signal.signal(signal.SIGINT, signal.default_int_handler)
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_DFL)
print("importing", flush=True)
time.sleep(2)
from runner.base.signals import exit_at_once, handlers_ready
exit_at_once()
handlers_ready()
print("not reached", flush=True)
"""


def _signal_while_starting(start, sig: int) -> tuple[int, str, str]:
    child = start([sys.executable, "-c", STARTING_CHILD], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "importing\n"
    child.send_signal(sig)
    out, err = child.communicate(timeout=30)
    return child.returncode, out, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_child_signalled_while_it_starts_exits_quietly_once_its_handlers_are_set(sig):
    """Ctrl-C reaches a LoadGen test process or a worker still importing: it waits for the
    child's own handlers, then ends it with 128 + the signal and no traceback."""
    rc, out, err = _signal_while_starting(start_child, sig)
    assert (rc, out, err) == (128 + sig, "", "")


def test_without_the_shield_a_signal_while_starting_is_a_traceback():
    """What start_child prevents: the same child started plainly."""
    rc, _, err = _signal_while_starting(subprocess.Popen, signal.SIGINT)
    assert rc == -signal.SIGINT and "Traceback" in err and "KeyboardInterrupt" in err


def test_the_guard_stops_what_the_command_started_and_nothing_else():
    """A child that ignores SIGTERM is killed after the grace; a process that ran before
    the command is left alone, and so is the child it starts meanwhile (a test's own
    `runner` driver starting its workers while a command runs in the test's process)."""
    older = subprocess.Popen(["sh", "-c", "read go; sleep 60 & echo $!; wait"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    olders_child = 0
    try:
        guard = ProcessGuard()
        older.stdin.write("go\n")
        older.stdin.flush()
        olders_child = int(older.stdout.readline())
        stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                     "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                     "print('ready', flush=True)\ntime.sleep(60)"],
                                    stdout=subprocess.PIPE, text=True)
        assert stubborn.stdout.readline() == "ready\n"
        started = {p.pid for p in guard.started()}
        assert stubborn.pid in started and older.pid not in started
        assert olders_child not in started and _running(olders_child)
        said: list[str] = []
        stopped = guard.stop(grace=1.0, say=said.append)
        assert stubborn.pid in {p.pid for p in stopped}
        assert not _running(stubborn.pid) and "SIGKILL" in said[-1]  # (reaped by the guard)
        assert older.poll() is None and _running(olders_child)
    finally:
        older.kill()
        older.wait()
        if olders_child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(olders_child, signal.SIGKILL)


ORPHAN = """
import subprocess
from runner.base.procs import ProcessGuard, become_subreaper
become_subreaper()
guard = ProcessGuard()
sh = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True)
orphan = int(sh.stdout.readline())
sh.wait()
stopped = guard.stop(grace=2.0)
print(orphan, orphan in {p.pid for p in stopped})
"""


def test_a_driver_adopts_and_waits_for_the_child_of_a_child_that_died():
    """`sleep &` outlives the shell that started it: the driver (a subreaper, as `runner`
    is) adopts it and has it gone, not left to init, when it returns."""
    done = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True,
                          timeout=60)
    pid, stopped = done.stdout.split()
    assert done.returncode == 0 and stopped == "True", done.stderr
    assert not _running(int(pid))


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in "ZX"
    except OSError:
        return False
