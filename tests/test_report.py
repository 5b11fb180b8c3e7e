"""`runner report` on real runs of the cpu profile: the four files, verdicts, escaping, a
comparison, a killed worker, and the page rendered by a real headless Chromium."""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import struct
import subprocess
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from cli_support import Ran, cli, start_runner

from runner.accuracy.backbones import BackboneInfo
from runner.accuracy.frechet import FrechetResult
from runner.accuracy.score import AccuracyResult
from runner.accuracy.verdict import JSON_NAME, judge, write_results
from runner.cli.main import main as runner_main
from runner.config.mlperf_data import CAPTIONS_FILE, load_captions
from runner.config.profile import load_profile
from runner.model.images import decode_png
from runner.report import REPORT_FILES, write_reports
from runner.report.cli import register
from runner.rundir.store import SampleStore


def main(args: list[str]) -> int:
    return runner_main(["report", *args])

EVIL = '<script>alert("x")</script> & a cat on a <b>mat</b>'
EVIL_ID = 4475  # one of MLPerf's review ids
IDS = (0, 1, EVIL_ID, 3627)
PASS_BG, FAIL_BG, NONE_BG = (0x1A, 0x7F, 0x37), (0xCF, 0x22, 0x2E), (0x6E, 0x77, 0x81)


def run_cli(*args: str) -> Ran:
    args = (*args, "--no-score") if args[0] == "run" else args  # scoring is tested apart
    return cli(*args)


def evil_captions(path: Path) -> Path:
    """MLPerf's captions with one review sample's caption replaced by markup (the file is
    read with QUOTE_NONE, so it is edited as plain tab-separated lines)."""
    lines = CAPTIONS_FILE.read_text(encoding="utf-8").splitlines(keepends=True)
    column = lines[0].rstrip("\n").split("\t").index("caption")
    fields = lines[1 + EVIL_ID].rstrip("\n").split("\t")
    fields[column] = EVIL
    lines[1 + EVIL_ID] = "\t".join(fields) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    assert load_captions(path)[EVIL_ID] == EVIL
    return path


@pytest.fixture(scope="module")
def review_run(tmp_path_factory) -> Path:
    """Two workers, two of MLPerf's review ids (one with a `<script>` caption), two others."""
    base = tmp_path_factory.mktemp("report")
    ids = base / "ids.txt"
    ids.write_text(" ".join(map(str, IDS)) + "\n")
    run_dir = base / "review"
    proc = run_cli("run", "--profile", "cpu", "--ids", str(ids), "--captions",
                   str(evil_captions(base / "captions.tsv")), "--out", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    return run_dir


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory) -> Path:
    """A real worker death: w001 SIGKILLed after the first sample; w000 finishes its work."""
    run_dir = tmp_path_factory.mktemp("report") / "killed"
    proc = start_runner("run", "--profile", "cpu", "--count", "8", "--no-score", "--out", run_dir)
    pid_file, log = run_dir / "workers" / "w001.pid", run_dir / "logs" / "w001.log"
    deadline = time.monotonic() + 300
    # Killed once it has loaded its modules (what its log tail then shows) and a sample is
    # stored: w000 alone may store the first while w001 still loads, under load.
    while not (pid_file.is_file() and SampleStore(run_dir).done_ids() and log.is_file()
               and "modules loaded" in log.read_text(errors="replace")):
        assert time.monotonic() < deadline and proc.poll() is None, "run never started"
        time.sleep(0.05)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "worker w001 died (exit -9)" in err
    return run_dir


def copy_run(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to)
    return to


def score(run_dir: Path, fid: float | None, clip: float | None, subset: bool = False,
          require_full: bool = False) -> dict:
    """accuracy.json through the accuracy module's own writer, as `runner score` leaves it,
    with given scores (the seeded backbones take minutes on CPU; their numbers are not what
    this file tests). `subset`: scored as fewer samples than the ranges were set for. A score
    of None: that metric not scored (`--metrics`)."""
    profile = load_profile("cpu")
    ids = tuple(sorted(SampleStore(run_dir).done_ids()))
    info = BackboneInfo("seeded", 0, "seeded:0", "seeded:0", "f" * 64, "c" * 64)
    result = AccuracyResult(
        fid=fid, clip=clip, n=len(ids), sample_ids=ids, duplicates=0,
        clip_per_sample=() if clip is None else tuple(clip + 0.001 * k
                                                      for k in range(len(ids))),
        frechet=None if fid is None else FrechetResult(fid, "sqrtm"), frechet_check=None,
        backbones=info,
        statistics_path=None, statistics_sha256=None, batch_size=1, device="cpu",
        seconds=1.0, frechet_seconds=0.1, mu=np.zeros(2), sigma=np.eye(2))
    verdict = judge(fid, clip, profile.accuracy, (info.label,),
                    subset_of=len(ids) if subset else None, require_full=require_full)
    write_results(run_dir, result, verdict, {
        "profile": "cpu", "sample_ids": ",".join(map(str, ids)), "ranges_samples": "0-31",
        "subset": subset, "missing": ""})
    return json.loads((run_dir / JSON_NAME).read_text())


def mid(bounds) -> float:
    return (bounds[0] + bounds[1]) / 2


def junit_cases(run_dir: Path) -> dict[str, ET.Element]:
    suite = ET.parse(run_dir / "junit.xml").getroot()
    assert suite.tag == "testsuite"
    return {case.get("name"): case for case in suite.iter("testcase")}


class Page(HTMLParser):
    """Every start tag with its attributes, and the text, as a browser's tokenizer sees them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def read_page(run_dir: Path) -> tuple[str, Page]:
    text = (run_dir / "report.html").read_text(encoding="utf-8")
    ET.fromstring(text.split("\n", 1)[1])  # strictly well-formed (after the doctype line)
    return text, Page(text)


def test_unscored_run_gets_four_parseable_files(review_run):
    paths = write_reports(review_run)
    assert [p.name for p in paths] == list(REPORT_FILES)
    assert all(p.parent == review_run and p.stat().st_size > 0 for p in paths)
    results = json.loads((review_run / "results.json").read_text())
    assert results["verdict"] == "NOT SCORED" and results["scores"] is None
    assert "accuracy.json" in results["not_scored_reason"]
    assert results["samples"]["requested"] == results["samples"]["done"] == len(IDS)
    assert results["versions"]["iree_runtime"]["version"].startswith("3.13")
    assert results["versions"]["iree_runtime"]["file"].endswith("__init__.py")
    assert results["layout"]["devices"] == "0,1" and results["plan"]["workers"] == 2
    workers = results["workers"]
    assert [w["worker"] for w in workers] == ["w000", "w001"]
    assert sum(w["samples"] for w in workers) == len(IDS)
    # two workers share one queue: one that the other beat to every batch made none (rate 0)
    assert all((w["samples_per_s"] > 0 and w["batches"]) or w["samples"] == 0
               for w in workers)
    assert results["timings"]["samples_per_s"] > 0 and results["deaths"] == []
    assert results["gallery"] == {"kind": "review", "ids": [EVIL_ID, 3627]}
    assert "runner run --profile cpu --ids" in results["reproduce"]

    cases = junit_cases(review_run)
    assert list(cases) == ["completeness", "fid_range", "clip_range", "worker_survived[w000]",
                           "worker_survived[w001]"]
    assert cases["fid_range"].find("skipped") is not None
    assert not any(c.find("failure") is not None for c in cases.values())

    summary = (review_run / "summary.md").read_text()
    assert summary.splitlines()[0].startswith("## ") and "NOT SCORED" in summary.splitlines()[0]
    for needle in ("samples/s", "IREE runtime", "iree-compile", "worker deaths | none",
                   "```sh", "runner run --profile cpu"):
        assert needle in summary, needle

    text, page = read_page(review_run)
    assert 'class="verdict none"' in text and "NOT SCORED" in text
    svgs = [attrs for tag, attrs in page.tags if tag == "svg"]
    assert len(svgs) == 2  # throughput per worker, samples over time; no score bars
    assert "4475" in text and "Review images" in text


def test_the_results_store_keeps_what_the_report_says(review_run):
    """The history's extraction reads the run's results.json: the same numbers."""
    from runner.history.extract import extract

    write_reports(review_run)
    results = json.loads((review_run / "results.json").read_text())
    (kept,) = extract(review_run)
    assert (kept.command, kept.profile, kept.device, kept.verdict) == (
        "run", "cpu", "cpu:host", "NOT SCORED")
    assert kept.layout == "devices 0,1, cpd 1, bs 1, vae bs 1"
    assert kept.machine == results["host"]["hostname"]
    assert kept.runtime_version == results["versions"]["iree_runtime"]["version"]
    numbers = {(m.name, m.subject): m.value for m in kept.metrics}
    assert numbers.pop(("samples_per_s", "")) == results["timings"]["samples_per_s"]
    # Each worker's mean, weighted by its samples. The two workers share one queue, so under
    # load one may make every sample and the other none (and no stage times): it weighs 0.
    workers = [w for w in results["workers"] if w["samples"]]
    for stage in ("clip", "unet", "vae"):
        weighted = sum(w["stage_ms"][stage] * w["samples"] for w in workers)
        assert numbers.pop(("stage_ms", stage)) == pytest.approx(
            weighted / sum(w["samples"] for w in workers), rel=1e-12)
    assert numbers == {}  # not scored: no FID, no CLIP


def test_caption_markup_is_escaped_everywhere(review_run):
    write_reports(review_run)
    text, page = read_page(review_run)
    assert "<script" not in text and "<b>mat" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; a cat" in text
    assert "script" not in [tag for tag, _ in page.tags]
    assert EVIL in "".join(page.text)  # a reader sees the caption as it was written
    assert "<script" not in (review_run / "summary.md").read_text()


def test_page_fetches_nothing(review_run):
    write_reports(review_run)
    text, page = read_page(review_run)
    assert "http" not in text and "url(" not in text and "@import" not in text
    assert 'src="/' not in text
    linked = [(tag, k, v) for tag, attrs in page.tags for k, v in attrs.items()
              if k in ("src", "href", "xlink:href", "data", "srcset", "poster")]
    assert linked and all(v.startswith("data:image/png;base64,") for _, _, v in linked)
    assert {tag for tag, _ in page.tags}.isdisjoint({"script", "link", "iframe", "object"})
    for _, _, uri in linked:  # each one is a real, small PNG of a sample
        image = decode_png(base64.b64decode(uri.split(",", 1)[1]))
        assert image.shape == (128, 128, 3) and image.std() > 0


def test_scores_pass_then_edited_ranges_fail(review_run, tmp_path):
    run_dir = copy_run(review_run, tmp_path / "scored")
    ranges = load_profile("cpu").accuracy
    record = score(run_dir, mid(ranges.fid), mid(ranges.clip))
    assert record["verdict"] == "pass"
    assert main([str(run_dir)]) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "PASS"
    assert results["scores"]["fid"]["pass"] and results["scores"]["clip"]["pass"]
    assert results["scores"]["comparable_with_mlperf"] is False
    assert results["scores"]["fid"]["margin"] > 0
    assert not any(c.find("failure") is not None for c in junit_cases(run_dir).values())
    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("## ✅ PASS")
    assert "Seeded random backbones" in summary and "Subset" not in summary
    text, page = read_page(run_dir)
    assert 'class="verdict pass"' in text and "Seeded random backbones" in text
    assert len([1 for tag, _ in page.tags if tag == "svg"]) == 4  # FID, CLIP, 2 throughput

    # Tighten the FID range below the score: the report follows the numbers in the file.
    fid = record["fid"]["score"]
    record["fid"]["range"] = [fid / 4, fid / 2]
    (run_dir / JSON_NAME).write_text(json.dumps(record))
    assert main([str(run_dir)]) == 0
    failure = junit_cases(run_dir)["fid_range"].find("failure")
    assert failure is not None
    message = failure.get("message")
    assert f"{fid:.8g}" in message and f"{fid / 2:.8g}" in message
    assert "above the upper bound" in message
    assert junit_cases(run_dir)["clip_range"].find("failure") is None
    suite = ET.parse(run_dir / "junit.xml").getroot()
    assert suite.get("failures") == "1" and suite.get("tests") == "5"
    assert json.loads((run_dir / "results.json").read_text())["verdict"] == "FAIL"
    assert (run_dir / "summary.md").read_text().startswith("## ❌ FAIL")


def test_a_metric_not_scored_is_named_in_every_report(review_run, tmp_path):
    """`--metrics fid`: FID passes, CLIP has no score; the run passes on FID, and summary.md,
    report.html, results.json and junit.xml all say CLIP was not scored and why."""
    run_dir = copy_run(review_run, tmp_path / "fid-only")
    ranges = load_profile("cpu").accuracy
    record = score(run_dir, mid(ranges.fid), None)
    assert (record["verdict"], record["clip"], record["not_scored"]) == ("pass", None, ["clip"])
    assert main([str(run_dir)]) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "PASS" and results["scores"]["clip"] is None
    assert results["scores"]["fid"]["pass"] and results["scores"]["not_scored"] == ["clip"]
    assert results["scores"]["mlperf_line"].endswith("'}") and "CLIP_SCORE" not in \
        results["scores"]["mlperf_line"]
    label = ("CLIP not scored (--metrics fid): the verdict judges FID only; an MLPerf result "
             "needs both")
    assert label in results["scores"]["labels"]
    note = "CLIP not scored: only FID was asked for (--metrics fid)"
    cases = junit_cases(run_dir)
    skipped = cases["clip_range"].find("skipped")
    assert skipped is not None and skipped.get("message") == note
    assert cases["fid_range"].find("skipped") is None
    assert not any(c.find("failure") is not None for c in cases.values())
    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("## ✅ PASS")
    assert f"| CLIP | — | — | — | ⚪ {note} |" in summary
    assert "**CLIP not scored (--metrics fid):** the verdict judges FID only" in summary
    text, page = read_page(run_dir)
    assert "NOT SCORED</span>" in text and note in text
    assert "CLIP not scored (--metrics fid)" in text
    assert len([1 for tag, _ in page.tags if tag == "svg"]) == 3  # FID's bar, 2 throughput


def test_subset_is_labelled_not_judged_and_require_full_fails_it(review_run, tmp_path):
    run_dir = copy_run(review_run, tmp_path / "subset")
    ranges = load_profile("cpu").accuracy
    # Far outside the FID range: a subset is still not judged against it.
    record = score(run_dir, ranges.fid[1] * 3, mid(ranges.clip), subset=True)
    label = f"subset of {len(IDS)}: not judged against the full-set ranges"
    assert record["verdict"] == "subset" and label in record["labels"]
    assert main([str(run_dir)]) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "SUBSET" and results["scores"]["verdict"] == "subset"
    cases = junit_cases(run_dir)
    skipped = cases["fid_range"].find("skipped")
    assert skipped is not None and skipped.get("message").startswith(
        f"subset of {len(IDS)}, not judged: FID")
    assert not any(c.find("failure") is not None for c in cases.values())
    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("## 🔹 SUBSET")
    assert "**Subset of 4:** not judged against the full-set ranges" in summary
    assert "not judged (subset)" in summary
    text, _ = read_page(run_dir)
    assert 'class="verdict none"' in text and "NOT JUDGED (subset)" in text

    record = score(run_dir, mid(ranges.fid), mid(ranges.clip), subset=True, require_full=True)
    assert record["verdict"] == "fail" and record["require_full"] is True
    assert main([str(run_dir)]) == 0  # `runner report` writes files whatever the verdict
    failure = junit_cases(run_dir)["full_set"].find("failure")
    assert failure is not None and "only 4 samples" in failure.get("message")
    assert json.loads((run_dir / "results.json").read_text())["verdict"] == "FAIL"


def test_junit_testcases_carry_their_time(review_run, tmp_path):
    run_dir = copy_run(review_run, tmp_path / "timed")
    ranges = load_profile("cpu").accuracy
    score(run_dir, mid(ranges.fid), mid(ranges.clip))
    write_reports(run_dir)
    suite = ET.parse(run_dir / "junit.xml").getroot()
    cases = junit_cases(run_dir)
    times = {name: float(case.get("time")) for name, case in cases.items()}
    assert times["completeness"] == pytest.approx(float(suite.get("time")), abs=1e-3)
    assert times["fid_range"] == times["clip_range"] == 1.0  # the scoring's seconds
    stats = json.loads((run_dir / "results.json").read_text())["workers"]
    for w in stats:
        assert times[f"worker_survived[{w['worker']}]"] > 0


@pytest.mark.slow
def test_github_step_summary_is_appended_and_failures_annotated(killed_run, tmp_path,
                                                                 monkeypatch, capsys):
    run_dir = copy_run(killed_run, tmp_path / "gha")
    summary_file = tmp_path / "step_summary.md"
    summary_file.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    write_reports(run_dir)
    assert "::error" not in capsys.readouterr().out  # not under GitHub Actions: no commands
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    write_reports(run_dir)
    text = summary_file.read_text()
    own = (run_dir / "summary.md").read_text()
    assert text.startswith("# earlier step\n") and text.count(own.rstrip("\n")) == 2
    out = capsys.readouterr().out.splitlines()
    errors = [line for line in out if line.startswith("::error ")]
    assert len(errors) == 1
    assert errors[0].startswith("::error title=worker w001 survived::w001 died (exit -9)")


def test_killed_worker_fails_its_testcase(killed_run):
    write_reports(killed_run)
    cases = junit_cases(killed_run)
    failure = cases["worker_survived[w001]"].find("failure")
    assert failure is not None and "exit -9" in failure.get("message")
    assert "modules loaded" in failure.text  # the dead worker's log tail
    assert cases["worker_survived[w000]"].find("failure") is None
    assert cases["completeness"].find("failure") is None
    results = json.loads((killed_run / "results.json").read_text())
    assert results["verdict"] == "FAIL"
    assert [d["worker"] for d in results["deaths"]] == ["w001"]
    assert [w["worker"] for w in results["workers"]] == ["w000", "w001"]  # dead one too
    assert results["gallery"]["kind"] == "first" and results["gallery"]["ids"] == list(range(8))
    text, _ = read_page(killed_run)
    assert "w001 died" in text and "First 8 samples" in text
    assert "w001 (exit -9" in (killed_run / "summary.md").read_text()


def test_against_shows_the_worst_samples(review_run, tmp_path):
    other = copy_run(review_run, tmp_path / "other")
    store = SampleStore(other)
    image = store.load(1).astype(np.int16)
    noisy = np.clip(image + np.random.default_rng(0).integers(-40, 41, image.shape), 0, 255)
    store.put(1, noisy.astype(np.uint8), "w000", "local-task#0")
    run_dir = copy_run(review_run, tmp_path / "this")
    assert main([str(run_dir), "--against", str(other)]) == 0
    comparison = json.loads((run_dir / "results.json").read_text())["comparison"]
    assert comparison["summary"]["common"] == len(IDS)
    assert comparison["summary"]["identical"] == len(IDS) - 1
    [worst] = comparison["worst"]  # identical samples are not listed
    assert worst["qsl_idx"] == 1 and 10 < worst["psnr"] < 40 and worst["ssim"] < 1
    assert worst["max_abs"] == 40
    text, page = read_page(run_dir)
    assert 'id="compare"' in text and f"PSNR {worst['psnr']:.2f} dB" in text
    images = [a["alt"] for tag, a in page.tags if tag == "img"]
    assert images == [f"sample {EVIL_ID}", "sample 3627", "this run 1", "other run 1"]
    assert f"| 1 | {worst['psnr']:.2f} |" in (run_dir / "summary.md").read_text()


def test_interrupted_run_with_a_broken_accuracy_file_still_reports(review_run, tmp_path):
    """What a killed driver leaves: run.json without attempts or worker stats, a missing
    sample; and an accuracy.json that is not JSON. The report says so instead of failing."""
    run_dir = copy_run(review_run, tmp_path / "interrupted")
    manifest = json.loads((run_dir / "run.json").read_text())
    for key in ("attempts", "workers", "missing", "unexpected"):
        manifest.pop(key, None)
    manifest["status"] = "running"
    (run_dir / "run.json").write_text(json.dumps(manifest))
    SampleStore(run_dir).path(3627).unlink()
    (run_dir / JSON_NAME).write_text("{not json")
    write_reports(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "FAIL" and results["scores"] is None
    assert "unreadable" in results["not_scored_reason"]
    assert results["samples"]["missing"] == [3627]
    assert "runner run --resume" in results["failures"][0]
    assert results["timings"]["samples_per_s"] is None
    assert len(results["workers"]) == 2  # read from workers/*.stats.json instead
    assert results["gallery"]["ids"] == [EVIL_ID]
    read_page(run_dir)
    assert junit_cases(run_dir)["completeness"].find("failure") is not None


def test_bad_input_exits_2_and_keeps_the_previous_files(review_run, tmp_path, capsys):
    run_dir = copy_run(review_run, tmp_path / "keep")
    write_reports(run_dir)
    before = {name: (run_dir / name).read_bytes() for name in REPORT_FILES}
    assert main([str(run_dir), "--against", str(tmp_path / "missing")]) == 2
    assert "run dir not found" in capsys.readouterr().err
    assert {name: (run_dir / name).read_bytes() for name in REPORT_FILES} == before
    assert main([str(tmp_path)]) == 2
    assert "not a run dir" in capsys.readouterr().err


def test_register_adds_the_report_subcommand(review_run):
    parser = argparse.ArgumentParser(prog="runner")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", str(review_run), "--against", "x", "--worst", "3"])
    assert (args.run_dir, args.against, args.worst) == (str(review_run), "x", 3)
    assert args.func.__name__ == "cmd_report"


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("scored", [False, True], ids=["not-scored", "failing"])
@pytest.mark.slow
def test_headless_chromium_renders_the_page(review_run, tmp_path, scored):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (CI: apt-get install -y chromium)")
    run_dir = copy_run(review_run, tmp_path / "shot")
    if scored:
        ranges = load_profile("cpu").accuracy
        score(run_dir, ranges.fid[1] * 1.3, mid(ranges.clip))
    write_reports(run_dir)
    shot = tmp_path / "page.png"
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={shot}", "--window-size=1280,2000",
         (run_dir / "report.html").resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = shot.read_bytes()
    assert _png_size(data) == (1280, 2000) and len(data) > 50_000
    Image = pytest.importorskip("PIL.Image")
    with Image.open(shot) as im:
        rgb = np.asarray(im.convert("RGB"))
    # The verdict band, in its colour, across the top: the stylesheet applied.
    expected = FAIL_BG if scored else NONE_BG
    assert tuple(rgb[5, 640]) == expected and tuple(rgb[5, 1270]) == expected
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 1000  # images were decoded and drawn


def test_a_worker_that_made_no_sample_weighs_nothing_in_the_stored_stage_times():
    """Two workers share one queue; under load one can make every sample and the other none
    (no stage times at all). The stored stage means are the busy worker's, and a worker with
    samples counts by its samples."""
    from runner.history.extract import run_metrics

    report = {"workers": [
        {"worker": "w000", "samples": 3, "stage_ms": {"clip": 2.0, "unet": 10.0}},
        {"worker": "w001", "samples": 0, "stage_ms": {}},
        {"worker": "w002", "samples": 1, "stage_ms": {"clip": 6.0, "unet": 30.0}}]}
    stages = {m.subject: m.value for m in run_metrics(report) if m.name == "stage_ms"}
    assert stages == {"clip": pytest.approx(3.0), "unet": pytest.approx(15.0)}
    assert {m.subject: m.value for m in run_metrics({"workers": report["workers"][:2]})
            if m.name == "stage_ms"} == {"clip": 2.0, "unet": 10.0}
