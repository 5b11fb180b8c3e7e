"""The suite tells its cost: the pytest plugin (tests/suite_cost.py) writes each test's wall and
CPU seconds, under pytest-xdist too, and scripts/suite_cost.py compares a run with the budget,
names the files that grew and the tests that cost most, and judges the tier's wall limit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from repo_support import REPO
from script_support import load_script

suite_cost = load_script("suite_cost")

# A test whose CPU is spent in a child process: the plugin counts finished children's CPU.
CHILD_BURN = """
import subprocess, sys

def test_burns_in_a_child():
    code = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

def test_waits():
    import time
    time.sleep(0.2)
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_the_plugin_writes_each_tests_wall_and_cpu(tmp_path, workers):
    (tmp_path / "test_cost_probe.py").write_text(CHILD_BURN)
    out = tmp_path / "cost.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_cost",
         *workers, "--suite-cost", str(out), "-m", "not slow", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO / "tests")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "suite cost: 2 tests" in proc.stdout
    cost = json.loads(out.read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in cost["tests"]}
    assert set(tests) == {"test_burns_in_a_child", "test_waits"}
    burn, wait = tests["test_burns_in_a_child"], tests["test_waits"]
    assert burn["cpu_s"] >= 0.3 and burn["wall_s"] >= 0.3
    assert wait["wall_s"] >= 0.2 and wait["cpu_s"] < 0.15
    assert all(t["outcome"] == "passed" for t in tests.values())
    assert cost["markexpr"] == "not slow" and suite_cost.tier(cost) == "fast"
    assert cost["workers"] == (2 if workers else 0)
    assert len(cost["load"]) == 2 and cost["wall_s"] > 0


def test_under_workers_the_costliest_files_go_first(tmp_path):
    """Under pytest-xdist each worker orders the files by the budget's CPU seconds, costliest
    first, a file's tests together in their own order; a plain run keeps pytest's order."""
    ran = tmp_path / "ran.txt"
    for name in ("test_a_cheap", "test_b_costly"):
        (tmp_path / f"{name}.py").write_text("".join(
            f"def test_{i}():\n    with open({str(ran)!r}, 'a') as f:\n"
            f"        f.write('{name}::{i}\\n')\n\n" for i in (1, 2)))
    budget = tmp_path / "budget.json"
    budget.write_text(json.dumps({"files": {"test_a_cheap.py": {"cpu_s": 1.0},
                                            "test_b_costly.py": {"cpu_s": 90.0}}}))
    orders = []
    for workers in ([], ["-n", "1"]):
        ran.unlink(missing_ok=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
             "suite_cost", *workers, "--suite-budget", str(budget), "."], cwd=tmp_path,
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "PYTHONPATH": str(REPO / "tests")})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        orders.append(ran.read_text().split())
    assert orders[0] == ["test_a_cheap::1", "test_a_cheap::2", "test_b_costly::1",
                         "test_b_costly::2"]
    assert orders[1] == ["test_b_costly::1", "test_b_costly::2", "test_a_cheap::1",
                         "test_a_cheap::2"]


def _cost(wall_s: float, tests: list[tuple[str, float, float]], markexpr: str = "") -> dict:
    return {"wall_s": wall_s, "markexpr": markexpr, "workers": 2, "load": [0.1, 0.2],
            "tests": [{"nodeid": f"{f}::{name}", "file": f, "wall_s": w, "cpu_s": c,
                       "outcome": "passed"} for f, name, w, c in
                      [(t[0].split("::")[0], t[0].split("::")[1], t[1], t[2]) for t in tests]]}


def test_a_file_that_grew_is_named_with_its_costliest_tests():
    budget = {"files": {"tests/test_a.py": {"wall_s": 10.0, "cpu_s": 9.0, "tests": 2},
                        "tests/test_b.py": {"wall_s": 30.0, "cpu_s": 28.0, "tests": 1}}}
    run = _cost(600, [("tests/test_a.py::one", 20.0, 19.0), ("tests/test_a.py::two", 2.0, 2.0),
                      ("tests/test_b.py::three", 33.0, 30.0), ("tests/test_c.py::new", 9.0, 8.0),
                      ("tests/test_d.py::small", 1.0, 1.0)])
    lines, ok = suite_cost.compare(run, budget)
    assert not ok
    assert lines[0].startswith("full suite: 5 tests, 600 s wall (within its 20 min)")
    grew = [line for line in lines if line.startswith("grew:")]
    # test_a: +12 s wall and +12 s CPU, over both 25% and 5 s; test_b +3 s is noise;
    # test_c is new and costs more than 5 s; test_d is new and small.
    assert grew == ["grew: tests/test_a.py: 10 -> 22 s wall; 9 -> 21 s CPU "
                    "(most: one 20 s, two 2 s)",
                    "grew: tests/test_c.py: new, 9 s (most: new 9 s)"]


def test_the_tiers_limits_are_judged_on_the_whole_runs_wall():
    budget = {"files": {"tests/test_a.py": {"wall_s": 10.0, "cpu_s": 9.0, "tests": 1}}}
    same = [("tests/test_a.py::one", 10.0, 9.0)]
    assert suite_cost.compare(_cost(20 * 60, same), budget) == (
        ["full suite: 1 tests, 1200 s wall (within its 20 min), 9 s CPU, 2 process(es)",
         "every file within its budget"], True)
    lines, ok = suite_cost.compare(_cost(301, same, "not slow"), budget)
    assert not ok and "OVER its 5 min" in lines[0] and lines[0].startswith("fast suite")


def test_update_takes_the_whole_suite_and_record_keeps_the_totals(tmp_path, monkeypatch):
    run = _cost(700, [("tests/test_a.py::one", 12.0, 11.0), ("tests/test_b.py::two", 3.0, 2.5)])
    cost, budget = tmp_path / "cost.json", tmp_path / "budget.json"
    cost.write_text(json.dumps(run))
    monkeypatch.setattr(sys, "argv", ["scripts/suite_cost.py"])
    stored = []
    monkeypatch.setattr(suite_cost, "emit", lambda *a: stored.append(a))
    # test_a is new and costs over 5 s: named, and the budget then takes it
    assert suite_cost.main([str(cost), "--budget", str(budget), "--update", "--record"]) == 1
    assert suite_cost.main([str(cost), "--budget", str(budget)]) == 0
    assert json.loads(budget.read_text())["files"] == {
        "tests/test_a.py": {"wall_s": 12.0, "cpu_s": 11.0, "tests": 1},
        "tests/test_b.py": {"wall_s": 3.0, "cpu_s": 2.5, "tests": 1}}
    assert stored == [("suite_full", {"tests": 2, "wall_s": 700, "wall_min": 11.7, "cpu_s": 14,
                                      "passed": 2, "workers": 2}, True, [0.1, 0.2])]
    cost.write_text(json.dumps({**run, "markexpr": "not slow"}))
    assert suite_cost.main([str(cost), "--budget", str(budget), "--update"]) == 2
    assert suite_cost.main([str(tmp_path / "missing.json")]) == 2


def test_the_budget_names_every_test_file_of_the_suite():
    """tests/suite_budget.json is the whole suite's last measured run: a file missing from it
    (a new file whose budget was not set) or one that no longer exists is a stale budget."""
    budget = json.loads((REPO / "tests" / "suite_budget.json").read_text())
    files = {f"tests/{p.name}" for p in (REPO / "tests").glob("test_*.py")}
    assert set(budget["files"]) == files


# Writes each collected test's pytest-xdist group (None: shared out freely) as JSON, as the
# worker hands the tests to the scheduler: `--dist loadgroup` has put the group in the nodeid.
GROUPS_PLUGIN = """
import json, os
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        name, _, group = item.nodeid.partition("@")
        groups[name] = group or None
    with open(os.environ["GROUPS_OUT"], "w") as f:
        json.dump(groups, f)
    items[:] = []  # what the worker would run is known: run none of it
"""


def test_docker_and_slurm_tests_share_one_worker(tmp_path):
    """Every test that needs the docker engine or the Slurm cluster is in one xdist group,
    as a pytest-xdist worker hands it to the scheduler, so none runs beside another that
    takes the cluster's slots or retags an image (the Slurm sweep over a docker-built IREE
    needs both); a module's tests that share a module fixture are one group too."""
    (tmp_path / "groups_probe.py").write_text(GROUPS_PLUGIN)
    out = tmp_path / "groups.json"
    files = ["tests/test_slurm.py", "tests/test_docker_image.py", "tests/test_shell_scripts.py",
             "tests/test_loadgen_submission.py"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "groups_probe",
         "-n", "1", "--dist", "loadgroup", *files], cwd=REPO,
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "GROUPS_OUT": str(out),
             "PYTHONPATH": f"{tmp_path}:{REPO / 'tests'}"})
    assert proc.returncode == 5, proc.stdout + proc.stderr  # pytest's "no tests ran"
    groups = json.loads(out.read_text())
    assert any(g is not None for g in groups.values()), (  # see the pytest pin in pyproject.toml
        f"--dist loadgroup grouped nothing under pytest {pytest.__version__}")
    sweep = "tests/test_slurm.py::test_slurm_sweep_over_two_iree_builds"
    engine = {groups[n] for n in groups if n.startswith(("tests/test_slurm.py",
                                                         "tests/test_docker_image.py"))}
    assert engine == {groups[sweep]} and groups[sweep] is not None
    assert groups["tests/test_shell_scripts.py::"
                  "test_slurm_run_in_a_hostile_dir_keeps_its_node_logs_there"] == groups[sweep]
    assert any(g is None for n, g in groups.items() if n.startswith("tests/test_shell_scripts"))
    tree = ("tests/test_loadgen_submission.py::"
            "test_tree_is_the_rounds_layout_under_division_and_submitter")
    assert groups[tree] == "tests/test_loadgen_submission.py"  # its module fixture: built once


def test_the_readme_test_command_runs_beside_an_earlier_runs_cost_file(tmp_path):
    """scripts/test.sh, run a second time on one machine (CI keeps $RUNNER_CACHE_DIR), finds
    the first run's cost file there. Passed as two words, pytest took that existing file for a
    test path, rooted itself in the cache without pyproject.toml and stopped on "unrecognized
    arguments: --suite-cost" (exit 4) before any test. A run that stops before writing its own
    cost file reports nothing rather than the earlier run's numbers."""
    project = tmp_path / "a checkout $(touch pwned)"
    for name in ("pyproject.toml", "scripts/test.sh", "scripts/suite_cost.py",
                 "tests/suite_cost.py", "tests/suite_budget.json"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_bytes((REPO / name).read_bytes())
    (project / "tests" / "conftest.py").write_text('pytest_plugins = ("suite_cost",)\n')
    (project / "tests" / "test_probe.py").write_text("def test_probe():\n    pass\n")
    cache = tmp_path / "cache"
    cost = cache / "suite-cost.json"
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_SUITE_COST"}
    env.update(RUNNER_CACHE_DIR=str(cache), RUNNER_TEST_SETUP="0", RUNNER_TEST_WORKERS="0",
               RUNNER_RESULTS_URL=str(tmp_path / "results.sqlite"))

    def test_sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(project / "scripts" / "test.sh"), *args],
                              capture_output=True, text=True, timeout=300, check=False, env=env)

    for run in ("first", "second"):
        proc = test_sh()
        assert proc.returncode == 0, f"{run} run: {proc.stdout}{proc.stderr}"
        assert "1 passed" in proc.stdout and "suite cost: 1 tests" in proc.stdout
        [probe] = json.loads(cost.read_text())["tests"]
        assert probe["nodeid"] == "tests/test_probe.py::test_probe"
    proc = test_sh("--no-such-option")
    assert proc.returncode == 4 and "unrecognized arguments: --no-such-option" in proc.stderr
    assert not cost.exists() and "full suite" not in proc.stdout
    assert not (project / "pwned").exists() and not (tmp_path / "pwned").exists()


def _as_a_background_nohup_job() -> None:
    """`nohup bash scripts/test.sh &` from a script: a shell without job control starts a
    background job with SIGINT ignored, and nohup then ignores SIGHUP."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_the_readme_test_command_is_green_under_nohup(tmp_path):
    """A long suite is started under `nohup` (and in the background), so every process it
    starts inherits SIGHUP and SIGINT ignored, and the runner rightly keeps an ignored signal
    ignored. The suite's signal tests, run that way through the README's command, must still
    pass: each starts what it signals as a terminal would (tests/cli_support.py). Before they
    did, SIGHUP's in-process and finalizer cases failed under nohup."""
    env = {**os.environ, "RUNNER_TEST_SETUP": "0", "RUNNER_TEST_WORKERS": "0",
           "RUNNER_SUITE_COST": str(tmp_path / "cost.json"),
           "RUNNER_RESULTS_URL": str(tmp_path / "results.sqlite")}
    probe = subprocess.run(
        ["nohup", sys.executable, "-c",
         "import signal as s; print(s.getsignal(s.SIGHUP) == s.getsignal(s.SIGINT) == s.SIG_IGN)"],
        capture_output=True, text=True, timeout=60, check=True, env=env,
        preexec_fn=_as_a_background_nohup_job)
    assert probe.stdout == "True\n"  # the premise: both ignored
    proc = subprocess.run(
        ["nohup", "bash", "scripts/test.sh", "tests/test_interrupts.py"],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False, env=env,
        stdin=subprocess.DEVNULL, preexec_fn=_as_a_background_nohup_job)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
