"""`runner bisect` / `runner trend` over real IREE builds.

The per-commit path is tested for real without the network: a local git repository whose
commits each map to real IREE release wheels in a per-commit find-links directory
(DIR/<sha>/*.whl, the layout of IREE's bisect script's work dir), or to none (a commit
without packages, which the bisection must skip). The PyPI path bisects real releases.
Venvs are cached by build under $RUNNER_CACHE_DIR, so a second session reuses them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_support import Ran, cli
from host_support import host_build_tree
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.base.outcome import Outcome
from runner.bisect.builds import Sources, parse_build, version_key
from runner.bisect.judge import parse_test
from runner.bisect.search import Bisection

SHA = re.compile(r"\b[0-9a-f]{40}\b")


def runner(*args: str, cwd: Path = REPO, cache: Path | None = None) -> Ran:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RUNNER_PROGRESS": "plain"}
    if cache is not None:
        env["RUNNER_CACHE_DIR"] = str(cache)
    return cli(*args, cwd=cwd, env=env)


def make_repo(root: Path, wheels: dict[str, list[Path]], versions: list[str | None]
              ) -> tuple[Path, Path, list[str]]:
    """A git repo of one commit per entry, and a find-links dir holding each commit's
    wheels (hard links to the real release wheels), none for a None entry."""
    repo, links = root / "iree", root / "packages"
    repo.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    shas = []
    for i, version in enumerate(versions):
        (repo / "iree_version.txt").write_text(f"{version or 'none'}\n")
        subprocess.run([*git, "add", "iree_version.txt"], check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m",
                        f"change {i}: IREE {version}"], check=True)
        sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        shas.append(sha)
        if version is not None:
            (links / sha).mkdir(parents=True)
            for wheel in wheels[version]:
                os.link(wheel, links / sha / wheel.name)
    return repo, links, shas


def git_bisect_run(repo: Path, good: str, bad: str, script: str) -> str:
    """A plain exit-code bisect with git itself (IREE's script's contract)."""
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "bisect", "start", "--first-parent"], check=True, capture_output=True)
    subprocess.run([*git, "bisect", "good", good], check=True, capture_output=True)
    subprocess.run([*git, "bisect", "bad", bad], check=True, capture_output=True)
    proc = subprocess.run([*git, "bisect", "run", "sh", "-c", script], capture_output=True,
                          text=True, check=False)
    subprocess.run([*git, "bisect", "reset"], check=True, capture_output=True)
    return proc.stdout


# --------------------------------------------------------------------------- fast checks

def test_bisection_picks_the_middle_and_names_a_range_hidden_by_skips():
    state = Bisection(list(range(6)))  # type: ignore[arg-type]
    state.verdicts.update({0: Outcome.GOOD, 5: Outcome.BAD})
    assert state.next() == 2 and state.steps_left() == 3
    state.verdicts[2] = Outcome.SKIP  # git bisect skip: the next nearest the middle instead
    assert state.next() == 3
    state.verdicts[3] = Outcome.GOOD
    assert state.next() == 4
    state.verdicts[4] = Outcome.BAD
    assert state.next() is None and (state.last_good, state.first_bad) == (3, 4)
    assert state.skipped() == []  # the skip lies below the last good: it hides nothing
    hidden = Bisection(list(range(4)))  # type: ignore[arg-type]
    hidden.verdicts.update({0: Outcome.GOOD, 1: Outcome.GOOD, 2: Outcome.SKIP, 3: Outcome.BAD})
    assert hidden.next() is None and hidden.skipped() == [2]


def test_byte_identical_images_take_the_score_of_the_build_that_made_them(tmp_path):
    from runner.bisect.measure import ScoredImages

    def step(name: str, digests: list[str], score: dict | None) -> dict:
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"samples": [
            {"qsl_idx": i, "sha256": d} for i, d in enumerate(digests)]}))
        return {"dir": str(tmp_path / name), "build": {"spec": f"wheels:{name}"},
                **({"score": score} if score else {})}

    scored = ScoredImages()
    scored.add(step("1", ["a", "b"], {"fid": 0.5, "clip": -2.0}))
    scored.add(step("2", ["a", "c"], {"error": "no images to score"}))  # not a score
    scored.add(step("3", ["a", "d"], None))  # not scored
    assert scored.find(Path(step("4", ["a", "b"], None)["dir"])) == {
        "fid": 0.5, "clip": -2.0, "same_images_as": "wheels:1"}
    assert scored.find(Path(step("5", ["a", "c"], None)["dir"])) is None
    assert scored.find(Path(step("6", ["b", "a"], None)["dir"])) is None  # other samples
    assert scored.find(tmp_path / "no-such-run") is None
    scored.add(step("7", ["a", "b"], {"fid": 0.5, "clip": -2.0, "same_images_as": "wheels:1"}))
    assert scored.find(tmp_path / "4")["same_images_as"] == "wheels:1"  # the first scorer


def test_one_image_is_refused_fid_before_any_network_is_loaded(tmp_path):
    """A build's step scores its images only after every check that can refuse them: one
    image (FID needs two) is refused by the checks a dry run makes, not after the networks
    load and score it."""
    import numpy as np

    from runner.accuracy.evaluate import score_plan
    from runner.base.fileio import sha256_bytes
    from runner.model.images import write_png

    image = np.full((128, 128, 3), 90, np.uint8)
    write_png(tmp_path / "images" / "00000.png", image)
    (tmp_path / "manifest.json").write_text(json.dumps({"profile": "tiny", "samples": [
        {"qsl_idx": 0, "png": "00000.png", "sha256": sha256_bytes(image.tobytes())}]}))
    with pytest.raises(RunnerError, match=r"1 image\(s\) to score; FID needs at least 2"):
        score_plan(tmp_path)
    assert score_plan(tmp_path, metrics=("clip",))  # CLIP alone scores one


def test_versions_order_nightlies_by_date_and_before_their_release():
    versions = ["3.4.0", "3.4.0rc20250105", "3.3.1", "3.4.0rc20241231", "3.10.0", "2.9.0"]
    assert sorted(versions, key=version_key) == [
        "2.9.0", "3.3.1", "3.4.0rc20241231", "3.4.0rc20250105", "3.4.0", "3.10.0"]


@pytest.mark.parametrize("spec", ["wheels:$(touch pwned)", "wheels:3.1;ls", "commit:--all",
                                  "commit:a..b", "nightly:3.1", "wheels:", "3.13.0"])
def test_hostile_or_malformed_builds_are_refused(spec, tmp_path):
    with pytest.raises(RunnerError):
        parse_build(spec, Sources(repo=tmp_path))
    assert not (REPO / "pwned").exists()


@pytest.mark.parametrize("text", ["pixels", "pixels:-1", "pixels:nan", "throughput:x",
                                  "images:3", "goldens:/no/such/suite", "script:", "fid"])
def test_bad_tests_are_refused(text):
    with pytest.raises(RunnerError):
        parse_test(text)


def test_script_tests_keep_their_words():
    spec = parse_test("script:sh -c 'echo \"$(touch pwned)\"' _")
    assert spec.script_argv == ["sh", "-c", 'echo "$(touch pwned)"', "_"]


@pytest.mark.slow
def test_commit_dry_run_lists_first_parent_commits_and_the_first_step(tmp_path,
                                                                     release_wheels):
    repo, links, shas = make_repo(tmp_path, release_wheels, ["3.11.0", None, "3.12.0"])
    proc = runner("bisect", "--good", f"commit:{shas[0]}", "--bad", f"commit:{shas[2][:12]}",
                  "--repo", str(repo), "--find-links", str(links), "--test", "images",
                  "--profile", "tiny", "--count", "1", "--out", str(tmp_path / "b"),
                  "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "candidate builds, good .. bad" in line)
    assert all(line.startswith("# preflight ") for line in lines[:at])  # the machine's first
    assert [SHA.search(line).group(0)  # type: ignore[union-attr]
            for line in lines[at + 1:at + 4]] == shas
    assert "change 1: IREE None" in lines[at + 2]
    text = proc.stdout
    assert f"{links / shas[0]}/iree_base_compiler-3.11.0-" in text  # its own wheels
    assert "-m venv" in text and "-m runner.bisect.probe" in text
    assert not (tmp_path / "b").exists()  # a dry run writes nothing


@pytest.mark.slow
def test_commit_without_packages_dry_run_prints_the_pkgci_fetch(tmp_path, release_wheels):
    repo, _, shas = make_repo(tmp_path, release_wheels, [None, None])
    proc = runner("bisect", "--good", f"commit:{shas[0]}", "--bad", f"commit:{shas[1]}",
                  "--repo", str(repo), "--test", "script:true", "--out", str(tmp_path / "b"),
                  "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert (f"RUN_ID=$(gh api -H 'Accept: application/vnd.github+json' -H "
            f"'X-GitHub-Api-Version: 2022-11-28' '/repos/iree-org/iree/actions/workflows/"
            f"pkgci.yml/runs?head_sha={shas[0]}'") in proc.stdout
    assert ("gh run download --repo iree-org/iree \"$RUN_ID\" --name "
            "linux_x86_64_release_packages --dir") in proc.stdout


def test_other_inputs_into_a_bisect_dir_are_refused(tmp_path, release_wheels):
    repo, _, shas = make_repo(tmp_path, release_wheels, [None, None])
    out = tmp_path / "b"
    out.mkdir()
    (out / "bisect.json").write_text(json.dumps({"command": "bisect", "key": "other",
                                                 "steps": []}))
    proc = runner("bisect", "--good", f"commit:{shas[0]}", "--bad", f"commit:{shas[1]}",
                  "--repo", str(repo), "--test", "script:true", "--out", str(out))
    assert proc.returncode == 2 and "of other inputs" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_wheels_dry_run_lists_the_index_releases(tmp_path):
    # An empty cache: with the wheels already fetched the plan prints their hashed dir
    # instead of the pip download line this test reads.
    proc = runner("bisect", "--good", "wheels:3.10.0", "--bad", "wheels:3.13.0", "--test",
                  "images", "--out", "/nonexistent/never-written", "--dry-run",
                  cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    listed = re.findall(r"^\s+\d+\s+wheels:(\S+)", proc.stdout, re.MULTILINE)
    assert listed == ["3.10.0", "3.11.0", "3.12.0", "3.13.0"]
    assert "iree-base-compiler==3.10.0 iree-base-runtime==3.10.0" in proc.stdout


def test_throughput_bisect_probes_profile_dispatches(tmp_path):
    for date in ("20250601", "20250620"):
        for package in ("compiler", "runtime"):
            (tmp_path / f"iree_base_{package}-3.14.0rc{date}-cp311-cp311-"
                        "manylinux_2_28_x86_64.whl").write_bytes(b"")
    builds = ["wheels:3.14.0rc20250601", "wheels:3.14.0rc20250620"]
    common = ["--pre", "--find-links", str(tmp_path), "--out", str(tmp_path / "b"),
              "--dry-run"]
    probes = {}
    for test in ("throughput:5", "images"):  # a trend profiles too: its slow test runs it
        proc = runner("bisect", "--good", builds[0], "--bad", builds[1], "--test", test,
                      *common)
        assert proc.returncode == 0, proc.stderr
        (probes[test],) = [x for x in proc.stdout.splitlines() if "runner.bisect.probe" in x]
    assert probes["throughput:5"].endswith(" --dispatches 5")
    assert "--dispatches" not in probes["images"]


def test_nightlies_from_a_find_links_dir_are_listed_by_date(tmp_path):
    for date in ("20250620", "20250601", "20250610"):
        for package in ("compiler", "runtime"):
            (tmp_path / f"iree_base_{package}-3.14.0rc{date}-cp311-cp311-"
                        "manylinux_2_28_x86_64.whl").write_bytes(b"")
    proc = runner("bisect", "--good", "wheels:3.14.0rc20250601", "--bad",
                  "wheels:3.14.0rc20250620", "--pre", "--find-links", str(tmp_path), "--test",
                  "compile", "--out", str(tmp_path / "b"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert re.findall(r"wheels:(3\.14\.0rc\d+)", proc.stdout)[:3] == [
        "3.14.0rc20250601", "3.14.0rc20250610", "3.14.0rc20250620"]
    assert f"--find-links {tmp_path} --pre" in proc.stdout


# --------------------------------------------------------------------------- real bisects

@pytest.mark.slow
def test_images_bisect_over_commits_finds_the_first_changed_build(tmp_path, release_wheels):
    versions = ["3.11.0", None, "3.11.0", "3.12.0", None, "3.12.0"]
    repo, links, shas = make_repo(tmp_path, release_wheels, versions)
    out = tmp_path / "b"
    args = ["bisect", "--good", f"commit:{shas[0]}", "--bad", f"commit:{shas[-1]}",
            "--repo", str(repo), "--find-links", str(links), "--test", "images",
            "--profile", "tiny", "--count", "1", "--out", str(out)]
    proc = runner(*args)
    assert proc.returncode == 0, proc.stderr
    state = json.loads((out / "bisect.json").read_text())
    answer = state["answer"]
    assert answer["first_bad"] == f"commit:{shas[3]}" and answer["exact"]
    assert answer["last_good"] == f"commit:{shas[2]}"
    changed = answer["evidence"]["changed_samples"]
    assert [c["qsl_idx"] for c in changed] == [0] and changed[0]["max_abs"] >= 1
    tested = {s["build"]: s["verdict"]["state"] for s in state["steps"]}
    assert tested == {f"commit:{shas[0]}": Outcome.GOOD, f"commit:{shas[5]}": Outcome.BAD,
                      f"commit:{shas[2]}": Outcome.GOOD, f"commit:{shas[3]}": Outcome.BAD}
    # commits with the same wheels share one venv (keyed by the wheels' bytes)
    envs = {s["measurement"]["env"]["root"] for s in state["steps"]}
    assert len(envs) == 2
    assert "is the first bad build" in (out / "bisect.md").read_text()
    ET.fromstring((out / "report.html").read_text().split("\n", 1)[1])  # well-formed
    assert subprocess.run(["bash", "-n", str(out / "reproduce.sh")]).returncode == 0
    # a second run resumes from bisect.json: every step is reused, none runs again
    again = runner(*args)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("not run again") == 4 and "step 5" not in again.stderr
    # an interrupted bisect (the last step and the answer lost) runs only what is missing
    state["steps"] = [s for s in state["steps"] if s["order"] < 4]
    del state["answer"]
    (out / "bisect.json").write_text(json.dumps(state))
    resumed = runner(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("not run again") == 3
    assert re.search(r"step 4: " + shas[3][:10] + r": BAD", resumed.stderr)


SCRIPT = 'iree-compile --version | grep -q "compiler version 3.11"'  # good while 3.11
GIT_SCRIPT = ('v=$(cat iree_version.txt); [ "$v" = none ] && exit 125; '
              '[ "$v" = 3.11.0 ]')  # the same, from the checkout, for git bisect run


@pytest.mark.slow
@pytest.mark.parametrize("versions,expected", [
    (["3.11.0", None, "3.11.0", "3.12.0"], [3]),  # a skip on the way, the answer exact
    (["3.11.0", "3.11.0", None, "3.12.0"], [2, 3]),  # a skip hides which of two it is
])
def test_script_bisect_reproduces_git_bisect_run(tmp_path, release_wheels, versions,
                                                 expected):
    repo, links, shas = make_repo(tmp_path, release_wheels, versions)
    git_says = git_bisect_run(repo, shas[0], shas[-1], GIT_SCRIPT)
    out = tmp_path / "b"
    proc = runner("bisect", "--good", f"commit:{shas[0]}", "--bad", f"commit:{shas[-1]}",
                  "--repo", str(repo), "--find-links", str(links), "--test",
                  f"script:sh -c '{SCRIPT}'", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    answer = json.loads((out / "bisect.json").read_text())["answer"]
    if len(expected) == 1:
        assert f"{shas[3]} is the first bad commit" in git_says
        assert answer["exact"] and answer["first_bad"] == f"commit:{shas[3]}"
    else:
        assert "could be any of" in git_says
        assert set(SHA.findall(git_says.split("could be any of", 1)[1])) == \
            {shas[i] for i in expected}
        assert not answer["exact"]
        assert answer["range"] == [f"commit:{shas[i]}" for i in expected]
        assert answer["skipped"] == [f"commit:{shas[2]}"]
        assert "skipped build(s) hide which" in (out / "bisect.md").read_text()
    skipped = [s for s in json.loads((out / "bisect.json").read_text())["steps"]
               if s["verdict"]["state"] == Outcome.SKIP]
    assert skipped and "no packages for this commit" in skipped[0]["verdict"]["metric"]


@pytest.mark.slow
def test_images_bisect_over_pypi_releases(tmp_path):
    out = tmp_path / "b"
    proc = runner("bisect", "--good", "wheels:3.11.0", "--bad", "wheels:3.13.0", "--test",
                  "images", "--profile", "tiny", "--count", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    answer = json.loads((out / "bisect.json").read_text())["answer"]
    # 3.12.0 and 3.13.0 make the same bytes; 3.11.0 differs from both by 1 LSB
    assert answer["first_bad"] == "wheels:3.12.0" and answer["last_good"] == "wheels:3.11.0"
    assert "bisect: 3 builds from 3.11.0 (good) to 3.13.0 (bad)" in proc.stderr


@pytest.mark.slow
def test_trend_over_commits_marks_image_changes_and_which_dispatches_moved(tmp_path,
                                                                          release_wheels):
    """Four commits: 3.11, none (skipped), 3.12 (1 LSB off 3.11), 3.13 (3.12's bytes). The
    trend marks where the image bytes changed, and lines up each profiled build's dispatches
    with the last profiled build's (3.11 has no HAL profiler)."""
    from runner.bench.dispatch_profile import HOST_MODE
    from runner.bisect.measure import dispatch_profiles
    from runner.bisect.report import bisect_markdown
    from runner.bisect.search import evidence

    repo, links, shas = make_repo(tmp_path, release_wheels, ["3.11.0", None, "3.12.0", "3.13.0"])
    out = tmp_path / "t"
    proc = runner("trend", "--range", f"commit:{shas[0]}..commit:{shas[3]}", "--repo",
                  str(repo), "--find-links", str(links), "--profile", "tiny", "--count", "2",
                  "--out", str(out))  # FID needs two images
    assert proc.returncode == 0, proc.stderr
    state = json.loads((out / "trend.json").read_text())
    points = state["points"]
    assert [p["verdict"] for p in points] == [Outcome.GOOD, Outcome.SKIP, Outcome.BAD, Outcome.BAD]
    assert [p["images_changed"] for p in points] == [None, None, True, False]
    for p in (points[0], points[2], points[3]):
        assert p["dispatch_count"] > 0 and p["vmfb_bytes"] > 0 and p["compile_s"] > 0
        assert len(p["samples_per_s_passes"]) == 2 and p["fid"] is not None
    # 3.13 made 3.12's images byte for byte: they are scored once, the score named as 3.12's
    assert [p["score_from"] for p in points] == [None, None, None, points[2]["build"]]
    assert (points[3]["fid"], points[3]["clip"]) == (points[2]["fid"], points[2]["clip"])
    assert sorted(p.parent.name[:3] for p in (out / "builds").glob("*/accuracy.json")) == [
        "000", "002"]  # only the builds that were scored wrote a score
    assert f"made the images of {points[2]['build']} byte for byte" in proc.stderr
    html = (out / "report.html").read_text()
    root = ET.fromstring(html.split("\n", 1)[1])
    svgs = [el for el in root.iter() if el.tag == "svg"]
    assert len(svgs) == 6  # FID, CLIP, samples/s, compile time, dispatches, vmfb size
    assert "the image bytes changed at this build" in html
    # 3.11 has no HAL profiler: a note, and 3.12 (profiled) has nothing to compare with
    assert "unavailable on local-task with IREE 3.11.0" in points[0]["dispatch_note"]
    assert not points[0]["dispatch_ms"] and points[2]["dispatch_changes"] is None
    # 3.13 against 3.12: every dispatch matched by its key, or named as added / removed
    first, second = points[2], points[3]
    assert second["dispatch_against"] == first["build"] == f"commit:{shas[2]}"
    by_build = {s["build"]: s for s in state["steps"]}
    steps = [by_build[first["build"]], by_build[second["build"]]]
    profiles = [dispatch_profiles(s["measurement"]) for s in steps]
    assert all(p is not None for p in profiles)
    changes = second["dispatch_changes"]
    # a stage whose profile did not come out ok says why (the fresh-clone suite at ffa23d2
    # once had 3.12's `unet` profile not ok beside load, which this then names)
    assert set(first["dispatch_ms"]) == {"clip", "unet_step", "unet", "vae"}, {
        stage: {k: v for k, v in prof.items() if k in ("status", "note")}
        for stage, prof in (profiles[0] or {}).items()}
    assert set(changes) == set(first["dispatch_ms"])
    for stage, change in changes.items():
        before, after = (p[stage] for p in profiles)  # type: ignore[index]
        assert before["mode"] == after["mode"] == HOST_MODE
        keys = [{r["key"] for r in p["dispatches"]} for p in (before, after)]
        assert change["matched_keys"] == len(keys[0] & keys[1]) > 0
        assert {r["key"] for r in change["added"]} == keys[1] - keys[0]
        assert {r["key"] for r in change["removed"]} == keys[0] - keys[1]
        assert change["dispatch_ms"]["before_ms"] == before["per_call_ms"]["dispatch_sum"]
        assert change["dispatch_ms"]["after_ms"] == second["dispatch_ms"][stage]
        top = max(change["moved"], key=lambda r: abs(r["change_ms"]))
        assert change["moved"][0] == top
    md = (out / "trend.md").read_text()
    assert "## Dispatches" in md and f"### `{first['build']}` -> `{second['build']}`" in md
    assert f"- `{second['build']}`: FID/CLIP of `{first['build']}`" in md
    assert "unet_step: dispatches that moved most" in md
    assert "unet_step: dispatches that moved most" in html
    # A throughput bisect's evidence holds the same comparison (last good -> first bad).
    ev = evidence(parse_test("throughput:5"), steps[0]["measurement"],
                  steps[1]["measurement"])
    assert ev["dispatch_changes"] == changes
    state["answer"] = {"text": "t", "first_bad": second["build"],
                       "last_good": first["build"], "evidence": ev}
    assert "### Dispatches: `" + first["build"] + "` -> the first bad build" in \
        bisect_markdown(state)


@pytest.mark.slow
def test_docker_and_source_build_dry_runs(tmp_path, release_wheels):
    repo, _, shas = make_repo(tmp_path, release_wheels, [None, None])
    ends = ["--good", f"commit:{shas[0]}", "--bad", f"commit:{shas[1]}", "--repo", str(repo)]
    built = runner("bisect", *ends, "--build", "--test", "compile", "--out",
                   str(tmp_path / "b"), "--dry-run")
    assert built.returncode == 0, built.stderr
    assert f"runner image build --iree source:{shas[0]}" in built.stdout
    assert "# in the harness image: python3 -m runner.bisect.probe" in built.stdout
    refused = runner("bisect", *ends, "--install", "docker", "--test", "compile", "--out",
                     str(tmp_path / "b"), "--dry-run")
    assert refused.returncode == 2 and "add --build" in refused.stderr
    assert refused.stdout == ""  # refused before any candidate is listed
    trend = runner("trend", "wheels:3.12.0", "wheels:3.13.0", "--install", "docker",
                   "--test", "throughput:5", "--out", str(tmp_path / "t"), "--dry-run")
    assert trend.returncode == 0, trend.stderr
    assert "runner image build --iree wheels:3.12.0" in trend.stdout
    assert "--passes 2 --compstat --dispatches 5" in trend.stdout


def test_script_bisect_over_build_trees_with_hostile_names(tmp_path):
    good = host_build_tree(tmp_path / "tree good")
    bad = host_build_tree(tmp_path / "tree $(touch pwned) bad")
    out = tmp_path / "out $(touch pwned)\n'q"
    # the build's tools come first on PATH, and RUNNER_BUILD says which build it is
    script = ('command -v iree-compile | grep -q "/tools/iree-compile$" || exit 125; '
              'case "$RUNNER_BUILD" in *bad) exit 3;; esac')
    proc = runner("bisect", "--good", f"build-dir:{good}", "--bad", f"build-dir:{bad}",
                  "--test", f"script:sh -c '{script}'", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads((out / "bisect.json").read_text())["answer"]
    assert answer["first_bad"] == f"build-dir:{bad}" and answer["exact"]
    steps = json.loads((out / "bisect.json").read_text())["steps"]
    assert [s["verdict"]["metric"] for s in steps] == ["exit 0", "exit 3"]
    assert sorted(p.name for p in (out / "builds").iterdir()) == [
        "000-tree_good", "001-tree___touch_pwned__bad"]
    assert subprocess.run(["bash", "-n", str(out / "reproduce.sh")]).returncode == 0
    ET.fromstring((out / "report.html").read_text().split("\n", 1)[1])
    assert not list(tmp_path.rglob("pwned")) and not (REPO / "pwned").exists()


def test_goldens_bisect_runs_the_suite_with_each_build(tmp_path):
    good = host_build_tree(tmp_path / "a")
    same = host_build_tree(tmp_path / "b")
    out = tmp_path / "out"
    proc = runner("bisect", "--good", f"build-dir:{good}", "--bad", f"build-dir:{same}",
                  "--test", f"goldens:{REPO / 'goldens' / 'tiny'}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    state = json.loads((out / "bisect.json").read_text())
    assert state["answer"]["no_change"]  # the same IREE twice: nothing to find
    for step in state["steps"]:
        results = json.loads((Path(step["measurement"]["dir"]) / "goldens" / "results.json")
                             .read_text())
        assert results["compiler"]["path"].startswith(str(tmp_path))  # that build's compiler
        assert {r["status"] for r in results["results"]} == {"passed"}


def test_verdicts_of_throughput_compstat_accuracy_and_exit_codes():
    from runner.bisect.judge import judge_build

    def run(*rates):
        return {"probe": {"ok": True, "run": {"samples_per_s": list(rates)}}}

    good = run(10.0, 10.4)
    slower = judge_build(parse_test("throughput:5"), good, run(9.0, 9.2))
    assert slower.state == Outcome.BAD
    assert slower.detail["change_pct"] == pytest.approx(-100 * 1.1 / 10.2)
    assert slower.detail["noise_pct"] == pytest.approx(100 * 0.4 / 10.2, 1e-6)  # stated
    assert judge_build(parse_test("throughput:15"), good, run(9.0, 9.2)).state == Outcome.GOOD

    def stats(dispatches, size):
        return {"probe": {"ok": True, "compile": {"dispatch_count": dispatches,
                                                  "vmfb_bytes": size, "modules": []}}}

    same = judge_build(parse_test("compstat"), stats(480, 1000), stats(480, 1000))
    assert same.state == Outcome.GOOD
    grown = judge_build(parse_test("compstat"), stats(480, 1000), stats(481, 900))
    assert grown.state == Outcome.BAD and grown.detail["over"] == ["dispatch_count"]
    script = parse_test("script:true")
    assert [judge_build(script, None, {"script": {"exit_code": rc}}).state
            for rc in (0, 1, 125, 245)] == [Outcome.GOOD, Outcome.BAD, Outcome.SKIP, Outcome.BAD]
    suite = parse_test(f"goldens:{REPO / 'goldens' / 'tiny'}")
    assert [judge_build(suite, None, {"goldens": {"exit_code": rc}}).state
            for rc in (0, 1, 2)] == [Outcome.GOOD, Outcome.BAD, Outcome.SKIP]
    # a build that cannot compile: skipped, unless compiling is the test
    broken = {"probe": {"ok": False, "stage": "compile", "error": "iree-compile failed"}}
    assert judge_build(parse_test("images"), good, broken).state == Outcome.SKIP
    assert judge_build(parse_test("compile"), None, broken).state == Outcome.BAD
    crashed = {"probe": {"ok": False, "stage": "run", "error": "the pipeline crashed"}}
    assert judge_build(parse_test("images"), good, crashed).state == Outcome.BAD
    # accuracy: the build's own FID/CLIP against the profile's ranges; unscored is a skip
    accuracy = parse_test("accuracy")

    def scored(**score):
        return {"probe": {"ok": True}, "score": score}

    inside = judge_build(accuracy, None, scored(fid=0.007, clip=-2.59, passed=True, state="pass"))
    assert inside.state == Outcome.GOOD and inside.metric == "FID 0.007, CLIP -2.59: pass"
    assert judge_build(accuracy, None, scored(fid=9.5, clip=-9.0, passed=False,
                                              state="fail")).state == Outcome.BAD
    unscored = judge_build(accuracy, None, scored(error="no images to score", passed=False,
                                                  state="error"))
    assert unscored.state == Outcome.SKIP and "no images to score" in unscored.metric
    assert judge_build(accuracy, None, crashed).state == Outcome.BAD


def test_accuracy_needs_the_profiles_sample_set(tmp_path):
    proc = runner("bisect", "--good", "wheels:3.12.0", "--bad", "wheels:3.13.0", "--test",
                  "accuracy", "--profile", "tiny", "--count", "2", "--out",
                  str(tmp_path / "b"), "--dry-run")
    assert proc.returncode == 2 and "drop --count/--samples" in proc.stderr


def build_tree_without_driver(root: Path, driver: str) -> Path:
    """This host's IREE as a build tree whose runtime imports but does not register
    `driver` (a build made without it): its own `iree.runtime` runs the host's and hides
    the driver from `query_available_drivers`."""
    import iree.runtime

    host = Path(iree.runtime.__file__).parent
    tree = host_build_tree(root)
    runtime = tree / "runtime" / "bindings" / "python" / "iree" / "runtime"
    runtime.unlink()
    runtime.mkdir()
    (runtime / "__init__.py").write_text(
        f"__path__ = [{str(host)!r}]\n"
        f"exec(compile(open({str(host / '__init__.py')!r}).read(), __file__, 'exec'))\n"
        "_drivers = query_available_drivers\n"
        f"def query_available_drivers():\n    return [d for d in _drivers() if d != {driver!r}]\n")
    return tree


def test_a_build_whose_environment_fails_the_preflight_is_skipped_not_judged_bad(tmp_path):
    """The bad end's runtime lacks the profile's driver: the worker's check, which its probe
    runs in its environment before compiling, fails, so the build cannot be judged (the
    bisect stops: an end must be measured) where it was judged bad before (the pipeline
    failed); it is never the first bad build. The good end's check passed and is kept in
    its probe's record; the machine's checks were shown first."""
    good = host_build_tree(tmp_path / "good")
    bad = build_tree_without_driver(tmp_path / "nodriver", "local-task")
    out = tmp_path / "b"
    proc = runner("bisect", "--good", f"build-dir:{good}", "--bad", f"build-dir:{bad}",
                  "--profile", "cpu", "--test", "images", "--count", "1", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "preflight absent GPUs: a cpu layout uses none" in proc.stderr
    assert ("the bad build nodriver cannot be measured: skipped: preflight: worker "
            "environment: the IREE runtime has no 'local-task' driver") in proc.stderr
    steps = json.loads((out / "bisect.json").read_text())["steps"]
    assert [s["verdict"]["state"] for s in steps] == ["good", "skip"]
    first, second = (s["measurement"]["probe"] for s in steps)
    assert first["preflight"]["detail"] == "imports ok; IREE driver local-task registered"
    assert first["ok"] and first["run"]["samples"] == 1
    assert second["stage"] == "preflight" and "compile" not in second
    assert "Traceback" not in proc.stderr


def test_the_dry_run_prints_the_machines_preflight_and_the_first_builds_check(tmp_path):
    good, bad = host_build_tree(tmp_path / "a"), host_build_tree(tmp_path / "b")
    for command in (["bisect", "--good", f"build-dir:{good}", "--bad", f"build-dir:{bad}"],
                    ["trend", f"build-dir:{good}", f"build-dir:{bad}"]):
        proc = runner(*command, "--profile", "cpu", "--test", "images", "--out",
                      str(tmp_path / "never"), "--dry-run")
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert "# preflight absent GPUs: a cpu layout uses none" in lines
        assert any(line.startswith("# preflight ok     disk: ") for line in lines)
        check = lines.index(next(line for line in lines if "worker environment" in line))
        assert lines[check] == (
            "# preflight absent worker environment: checked by the probe below before it "
            "compiles, in the build's environment: a worker's `--check local-task` (a failure "
            "skips the build)")
        assert "-m runner.bisect.probe " in lines[check + 1]
        assert str(good / "tools") in lines[check + 1]
        assert not (tmp_path / "never").exists()
