"""The docs check (scripts/docs_check.py): the README, every page and the CLI reference pass
it, and it fails on each thing it exists for: development-log wording, a measured number
that is not docs/measurements.json's, one quantity shown with two values on two pages, a
command that does not exist, a stale provenance table."""

from __future__ import annotations

import pytest
from script_support import load_script

measured = load_script("measured")
docs_check = load_script("docs_check")

DATA = {"records": {
    "run": {"command": "python3 scripts/bench_x.py", "date": "2026-01-02", "commit": "abc1234",
            "machine": {"cpu": "Some CPU", "cores": 2, "memory_gib": 24}, "load": [0.5, 1.5],
            "result": {"samples_per_s": 4.54, "rounds": [5.02, 5.06], "fraction": 0.0042,
                       "nested": {"ms": 365.7}, "name": "cpu",
                       "inputs": {"generation_s": 3.44},
                       "table": {"header": ["stage", "ms", "share"],
                                 "rows": [["clip", 1.07, "14.8%"], ["vae", 97.7, "88.7%"]]}}},
    "pasted": {"command": "python3 scripts/bench_y.py", "result": {"ms": 12.5}},
    "published": {"command": "(published)", "source": "MLPerf v5.1", "result": {"qps": 2.4}},
}}


def problems(pages: dict[str, str], data=DATA) -> list[str]:
    return [str(p) for p in docs_check.check(pages, data)]


def test_the_readme_and_every_page_pass():
    found = docs_check.check(docs_check.repo_texts(), measured.load(), docs_check.cli_text())
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize("phrase", [
    "Numbers from this session.", "in an earlier session", "(aim was 0.97)", "(aim: <= 1%)",
    "download.pytorch.org is not reachable from here", "no H100 having been reachable",
    "No GPU machine was available to this session", "so it could not be run",
    "we tried 2.9.0", "Measured here from a fresh clone", "tried here: 3.0.0",
    "Before this change, the weights", "# fp16, as before", "on the development machine",
    "is not measured yet", "an assumption that has not been checked", "An earlier reading of 1.39",
    "TODO: fill in",
])
def test_development_log_wording_fails(phrase):
    found = problems({"docs/page.md": f"A page.\n\n{phrase}\n"})
    assert len(found) >= 1 and "development-log wording" in found[0], (phrase, found)
    assert found[0].startswith("docs/page.md:3: ")


def test_plain_user_wording_passes():
    page = ("# Runs\n\nA lost SSH session of a driver ends its workers. The cache is reachable\n"
            "from every node. Measured on 2026-01-02 on a 2-core VM. Earlier builds are skipped;\n"
            "an earlier bisect's venvs are reused, and the aim of a layout is throughput.\n")
    assert problems({"docs/runs.md": page}) == []


def test_a_measured_value_is_the_files_and_update_rewrites_it():
    good = ("4.54<!-- measured run.samples_per_s --> samples/s, rounds "
            "5.02-5.06<!-- measured run.rounds .2f -->, 365.7<!-- measured run.nested.ms .1f --> "
            "ms, 0.42%<!-- measured run.fraction .2% -->\n")
    assert problems({"README.md": good}) == []
    stale = good.replace("4.54<!--", "4.42<!--").replace("5.02-5.06", "5.02-5.09")
    found = problems({"README.md": stale})
    assert len(found) == 2
    assert "shows 4.42 where docs/measurements.json has 4.54 for run.samples_per_s" in found[0]
    assert "shows 5.02-5.09 where" in found[1]
    assert docs_check.update(stale, DATA) == good
    for bad, message in [("1<!-- measured nope.x -->", "no record 'nope'"),
                         ("1<!-- measured run.missing -->", "record 'run' has no 'missing'"),
                         ("1<!-- measured run.name -->", "'cpu' is not a number")]:
        found = problems({"docs/p.md": bad + "\n"})
        assert len(found) == 1 and message in found[0], (bad, found)


def test_one_quantity_with_two_values_on_two_pages_fails():
    pages = {"README.md": "The run: 4.54<!-- measured run.samples_per_s --> samples/s.\n",
             "docs/benchmarks.md": "Two workers: 4.42 samples/s on the same layout.\n",
             "docs/mlperf.md": "\nThe run gave 5.02-5.09 samples per second.\n",
             "docs/install.md": "The UNet takes 365.7 ms a call.\n",
             "docs/bench.md": "UNet 365.7<!-- measured run.nested.ms .1f --> ms; 365.7 (a time "
                              "in s) and 1.00 stay.\n"}
    found = problems(pages)
    assert len(found) == 3, found
    assert found[0].startswith("docs/benchmarks.md:1: the rate '4.42 samples/s' is a bare literal")
    assert found[1].startswith("docs/mlperf.md:2: the rate '5.02-5.09 samples per second'")
    assert found[2].startswith("docs/install.md:1: 365.7 is the measured run.nested.ms")
    # Code blocks are output and commands, not prose.
    assert problems({"docs/p.md": "```text\n4.42 samples/s\n```\n"}) == []


def test_a_command_that_does_not_exist_fails():
    found = problems({"docs/layouts.md": "`runner bench sweep` there settles it; see\n"
                                         "`runner benchh --profile cpu`.\n"})
    assert len(found) == 2, found
    assert "`runner bench sweep` does not exist" in found[0]
    assert "`runner benchh` does not exist" in found[1]
    fine = ("`runner bench goldens goldens/tiny-bench`, `runner score runs/main`, "
            "`runner COMMAND --help`, `runner run --resume DIR`, `runner goldens check`\n")
    assert problems({"docs/p.md": fine}) == []


def test_the_provenance_table_is_the_files():
    stale = "<!-- measurements -->\n| old |\n<!-- /measurements -->\n"
    found = problems({"docs/benchmarks.md": stale})
    assert len(found) == 1 and "measurements table" in found[0]
    fresh = docs_check.update(stale, DATA)
    assert problems({"docs/benchmarks.md": fresh}) == []
    assert ("| `run` | `python3 scripts/bench_x.py` | 2026-01-02, 2 cores (Some CPU), 24 GiB, "
            "load average 0.5-1.5 | abc1234 |") in fresh


def test_a_number_comes_from_a_measured_record_not_an_input():
    """A mark on a record without date, machine and commit, or on an input the script was
    given, fails; a published record (its source) is shown as published."""
    found = problems({"docs/p.md": "Put 12.5<!-- measured pasted.ms --> ms against "
                                   "3.44<!-- measured run.inputs.generation_s --> s; MLPerf: "
                                   "2.4<!-- measured published.qps --> per GPU.\n"})
    assert len(found) == 2, found
    assert "pasted.ms: its record has no date, machine, commit" in found[0]
    assert "run.inputs.generation_s is an input the script was given" in found[1]


def test_a_pasted_table_fails_and_a_measured_one_is_the_records():
    pasted = ("| stage | ms | share |\n| --- | --- | --- |\n| clip | 1.07 | 14.8% |\n"
              "| vae | 97.7 | 88.7% |\n\nText.\n")
    found = problems({"docs/bench.md": pasted})
    assert len(found) == 1 and found[0].startswith("docs/bench.md:3: a pasted table of "
                                                   "measured numbers (1.07, 14.8")
    # One value a row (a version, a threshold) and quoted messages are not a table of them.
    assert problems({"docs/p.md": "| IREE | 3.13 |\n| `expected=23.010858, found=0.0141` | "
                                  "x |\n"}) == []
    stale = "<!-- measured-table run.table -->\n| old | 1.23 | 4.56 |\n<!-- /measured-table -->\n"
    found = problems({"docs/bench.md": stale})
    assert len(found) == 1 and "the table is not record run.table's" in found[0]
    fresh = docs_check.update(stale, DATA)
    assert problems({"docs/bench.md": fresh}) == []
    assert "| clip | 1.07 | 14.8% |" in fresh
    assert ("Record `run`: 2026-01-02, 2 cores (Some CPU), 24 GiB, load average 0.5-1.5, "
            "commit abc1234, `python3 scripts/bench_x.py`.") in fresh
    bad = "<!-- measured-table run.nested -->\n<!-- /measured-table -->\n"
    assert "is not a table" in problems({"docs/p.md": bad})[0]


def test_render_and_record_store(tmp_path, monkeypatch):
    assert [measured.render(v, f) for v, f in [(4.5412, ""), (48, ""), (48.0, ".0f"),
                                               ([0.65, 1.02], ".2f"), ([2, 2], ""),
                                               (0.00002, ".3%")]] == \
        ["4.54", "48", "48", "0.65-1.02", "2", "0.002%"]
    data = tmp_path / "measurements.json"
    measured.store("bench_x", {"ratio": 1.5}, ["python3", "scripts/bench_x.py"], [0.1, 0.2],
                   path=data)
    record = measured.load(data)["records"]["bench_x"]
    assert record["result"] == {"ratio": 1.5} and record["load"] == [0.1, 0.2]
    assert record["machine"]["cores"] >= 1 and record["date"].count("-") == 2
