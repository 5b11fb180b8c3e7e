"""runner.base.progress: a live line on a terminal, readable whole lines in CI logs."""

from __future__ import annotations

import io
import time

import pytest

from runner.base.progress import Progress, duration, echo, mode


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _auto_mode(monkeypatch):
    monkeypatch.delenv("RUNNER_PROGRESS", raising=False)


def test_mode_follows_the_stream_and_the_environment(monkeypatch):
    assert mode(Tty()) == "live"
    assert mode(io.StringIO()) == "plain"
    monkeypatch.setenv("RUNNER_PROGRESS", "plain")
    assert mode(Tty()) == "plain"
    monkeypatch.setenv("RUNNER_PROGRESS", "off")
    assert mode(io.StringIO()) == "off"


def test_duration():
    assert [duration(s) for s in (0.4, 59, 65, 3725)] == ["0s", "59s", "1m05s", "1h02m"]


def test_plain_lines_start_each_item_and_step_by_tenths():
    out = io.StringIO()
    p = Progress("compile", 4, stream=out, interval=3600)
    p.start_item("unet.mlir")
    p.advance()
    p.start_item("vae.mlir")
    p.finish()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("compile 0/4  unet.mlir running 0s  elapsed 0s")
    assert lines[1].startswith("compile 1/4  elapsed")  # the 25% step
    assert lines[2].startswith("compile 1/4  vae.mlir")
    assert lines[-1].startswith("compile 1/4  elapsed")
    assert "\r" not in out.getvalue()


def test_plain_lines_are_throttled_between_tenths():
    out = io.StringIO()
    p = Progress("score", 1000, unit="images", stream=out, interval=3600)
    for n in range(1, 1001):
        p.update(n)
    p.finish()
    lines = out.getvalue().splitlines()
    # one line per 10% step, not a line per image; the last is the 100% line, not twice
    assert len(lines) == 10
    assert len({line.split("  ")[0] for line in lines}) == 10
    assert lines[0].startswith("score 100/1000 images")
    assert "images/s" in lines[0] and "ETA" in lines[0]
    assert lines[-1].startswith("score 1000/1000 images") and "ETA" not in lines[-1]


def test_live_line_is_rewritten_in_place_and_echo_lifts_it():
    out = Tty()
    with Progress("run", 8, unit="samples", stream=out) as p:
        p.update(3, extra="workers alive: 2")
        echo("worker w1 died", stream=out)
    text = out.getvalue()
    assert text.startswith("\r\x1b[K")
    assert "\r\x1b[Kworker w1 died\n\r\x1b[Krun 3/8 samples" in text
    assert "workers alive: 2" in text
    assert text.endswith("\n") and text.count("\n") == 2


def test_ticker_keeps_a_long_item_visible_in_logs():
    out = io.StringIO()
    with Progress("compile", 1, stream=out, interval=0.05, heartbeat=0.05) as p:
        p.start_item("unet.mlir")
        time.sleep(0.4)
    heartbeats = [ln for ln in out.getvalue().splitlines() if "unet.mlir" in ln]
    assert len(heartbeats) >= 3  # the start line plus periodic ones while nothing changed


def test_off_prints_nothing(monkeypatch):
    monkeypatch.setenv("RUNNER_PROGRESS", "off")
    out = io.StringIO()
    with Progress("x", 2, stream=out) as p:
        p.start_item("a")
        p.advance()
    assert out.getvalue() == ""


def test_compile_shows_each_module_with_n_of_total(tiny_compiled, capsys, monkeypatch):
    from runner.cli.main import main

    monkeypatch.setenv("RUNNER_PROGRESS", "plain")
    assert main(["compile", "--profile", "tiny"]) == 0
    lines = capsys.readouterr().err.splitlines()
    starts = [ln for ln in lines if " running " in ln]
    assert [ln.split("  ")[0] for ln in starts] == [f"compile {i}/4 modules" for i in range(4)]
    assert "clip bs1: clip_bs1.mlir" in starts[0] and "vae bs1: vae_bs1.mlir" in starts[3]
    assert lines[-1].startswith("compile 4/4 modules  elapsed")


def test_several_meters_on_one_terminal_print_whole_lines():
    out = Tty()
    a = Progress("run-a", 2, unit="samples", stream=out, live=False)
    b = Progress("run-b", 2, unit="samples", stream=out, live=False)
    a.finish(done=2)
    b.finish(done=1)
    assert "\r" not in out.getvalue()
    assert [ln.split("  ")[0] for ln in out.getvalue().splitlines()] == [
        "run-a 2/2 samples", "run-b 1/2 samples"]
