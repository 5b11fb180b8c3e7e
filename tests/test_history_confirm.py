"""`runner history confirm`: a change across two builds is measured again, the two builds
interleaved on this machine with their real IREE tools, before `runner history` calls it a
regression; what it finds is stored and judged by."""

from __future__ import annotations

import json
import shlex
import socket
from pathlib import Path

import pytest
from history_support import two_builds_store as two_builds_store_at

from runner.cli.main import main


@pytest.fixture
def two_builds_store(tmp_path) -> str:
    """Eight runs of the tiny UNet under 3.12.0 at ~10 ms, then eight under 3.13.0 at
    ~15 ms: a step across builds, not confirmed."""
    return two_builds_store_at(tmp_path / "history.sqlite")


def printed_confirm(url: str, capsys) -> tuple[dict, list[str]]:
    assert main(["history", "--results", url, "--json"]) == 0  # unconfirmed: no alert
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["kind"] == "unconfirmed"
    argv = shlex.split(change["confirm"])
    assert argv[:3] == ["runner", "history", "confirm"]
    return change, argv[1:]


def test_confirm_dry_run_prints_each_round_interleaved_and_writes_nothing(two_builds_store,
                                                                          tmp_path, capsys):
    _, argv = printed_confirm(two_builds_store, capsys)
    assert argv[argv.index("--good") + 1] == "wheels:3.12.0"
    assert argv[argv.index("--bad") + 1] == "wheels:3.13.0"
    before = Path(two_builds_store).read_bytes()
    out = tmp_path / "confirm $(touch pwned) 'x"
    argv[argv.index("--out") + 1] = str(out)
    assert main([*argv, "--results", two_builds_store, "--rounds", "3", "--max-rounds", "11",
                 "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rounds = [line for line in lines if " bench goldens " in line and line[0] != "#"]
    assert [shlex.split(r)[shlex.split(r).index("--out") + 1].rsplit("/", 1)[1]
            for r in rounds] == ["01-good", "01-bad", "02-bad", "02-good", "03-good", "03-bad"]
    assert "undecided, the same rounds again, judged after 7, 11 rounds" in "\n".join(lines)
    for line, version in zip(rounds, ["3.12.0", "3.13.0", "3.13.0", "3.12.0", "3.12.0",
                                      "3.13.0"], strict=True):
        words = shlex.split(line)
        assert f"iree-{version}-" in words[words.index("--iree-tools") + 1]
        assert words[words.index("--results") + 1] == str(out / "rounds.sqlite")
        assert words[words.index("goldens") + 1].endswith("goldens/tiny-bench/unet_cpu.json")
    assert Path(two_builds_store).read_bytes() == before and not out.exists()
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("flags, where, says", [
    (["--metric", "stage_ms"], "--metric", "confirm measures bench goldens' time_ms"),
    (["--stage", "tiny-bench/vae_cpu"], "--stage", "the store holds no series"),
    (["--bad", "wheels:3.12.0"], "--bad", "--good and --bad are one build"),
    (["--sku", "mi325"], "--stage", "the store holds no series"),
    (["--max-rounds", "2"], "--max-rounds", "--max-rounds 2 is fewer than --rounds 10"),
])
def test_confirm_refuses_what_it_cannot_measure_naming_the_flag(two_builds_store, flags, where,
                                                                 says, tmp_path, capsys):
    _, argv = printed_confirm(two_builds_store, capsys)
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    argv[argv.index("--out") + 1] = str(tmp_path / "c")
    assert main([*argv, "--results", two_builds_store, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{where}: " in err and says in err and "Traceback" not in err


def test_a_series_of_another_machine_is_confirmed_on_that_machine(tmp_path, capsys):
    url = two_builds_store_at(tmp_path / "h.sqlite", machine="lab-7")
    _, argv = printed_confirm(url, capsys)
    argv[argv.index("--out") + 1] = str(tmp_path / "c")
    assert main([*argv, "--results", url, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"of this machine ({socket.gethostname()}); it has one of lab-7" in err


@pytest.mark.slow
def test_confirm_measures_both_builds_interleaved_and_history_judges_by_it(
        two_builds_store, release_wheels, tmp_path, capsys):
    """Real rounds: the tiny UNet's bench goldens under IREE 3.12.0's and 3.13.0's own tools
    (their release wheels, a cached venv each), good, bad, bad, good, good, bad, every
    repetition kept and judged. Three rounds a side are too few to hold at 99% (the test's
    cost; tests/test_history_paired.py judges many), so the history follows the finding:
    still unconfirmed where the estimate was past --min-change (undecided), else the
    machine's."""
    links = tmp_path / "links"
    links.mkdir()
    for version in ("3.12.0", "3.13.0"):
        for wheel in release_wheels[version]:
            (links / wheel.name).symlink_to(wheel)
    _, argv = printed_confirm(two_builds_store, capsys)
    out = tmp_path / "confirm"
    argv[argv.index("--out") + 1] = str(out)
    code = main([*argv, "--results", two_builds_store, "--rounds", "3", "--max-rounds", "3",
                 "--find-links", str(links), "--json"])
    stored = json.loads(capsys.readouterr().out)
    assert code == (1 if stored["holds"] else 0)
    assert json.loads((out / "confirm.json").read_text()) == stored
    assert len(stored["good_values"]) == len(stored["bad_values"]) == 3
    order = [(r["round"], r["side"]) for r in stored["details"]["rounds"]]
    assert order == [(1, "good"), (1, "bad"), (2, "bad"), (2, "good"), (3, "good"), (3, "bad")]
    for r in stored["details"]["rounds"]:
        bench = json.loads((out / "rounds" / f"{r['round']:02d}-{r['side']}" / "bench.json")
                           .read_text())
        version = bench["versions"]["compiler"]["version"]
        assert version.startswith("3.12.0" if r["side"] == "good" else "3.13.0")
        (g,) = bench["goldens"]
        assert r["value"] == g["checks"][0]["measured"] and "beside_foreign_load" in r
        assert r["times_ms"] == g["latency_ms"]["times_ms"]  # every repetition judged
    verdict = stored["details"]["verdict"]
    assert verdict["rounds"] == 3 and verdict["repetitions"] == 6 * len(r["times_ms"])
    # three rounds reach 75% at most, below 99%: measured, never held
    assert not stored["holds"] and verdict["confidence"] < 0.99
    assert main(["history", "--results", two_builds_store, "--json"]) == code
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["kind"] == ("unconfirmed" if verdict["undecided"] else "machine")
    assert change["confirmation"]["good_values"] == stored["good_values"]
