"""A `runner mlperf --mode submission` out dir as MLPerf's submission tree, and its check.

The layout is the round's (v6.x: compliance results beside the scenario's own, measurements
in the scenario dir, the code under `src/`), for one system, SDXL and its scenarios:

    <division>/<submitter>/systems/<system>.json
    <division>/<submitter>/src/stable-diffusion-xl/README.md    (runner version, commit,
                                                                  the exact commands)
    <division>/<submitter>/results/<system>/stable-diffusion-xl/<Scenario>/
        README.md, user.conf, measurements.json
        accuracy/{mlperf_log_summary.txt, mlperf_log_detail.txt, accuracy.txt,
                  mlperf_log_accuracy.json (truncated), images/{<id>.png, captions.txt}}
        performance/run_1/{mlperf_log_summary.txt, mlperf_log_detail.txt}
        TEST01/{verify_accuracy.txt, verify_performance.txt,
                accuracy/{accuracy.txt, mlperf_log_accuracy.json (truncated)},
                performance/run_1/{mlperf_log_summary.txt, mlperf_log_detail.txt}}
        TEST04/{verify_performance.txt, performance/run_1/{...}}

Accuracy logs are truncated as MLPerf's `truncate_accuracy_log.py` does it: the sha256 of
the full log appended to accuracy.txt as `hash=...`, the log cut to its first and last 4096
characters; the full logs stay in the out dir, outside the tree. `check_tree` checks a tree
against all of it (files, fields, hashes, sizes, the round's seeds), so the project's own
tests catch what MLPerf's checker would.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

from runner.base.fileio import atomic_write_bytes, atomic_write_json, atomic_write_text, sha256_file
from runner.config.mlperf_data import load_review_ids
from runner.loadgen.conf import MODEL
from runner.loadgen.logs import ACCURACY_LOG, DETAIL, SUMMARY_LOG, detail_values, parse_summary
from runner.loadgen.rules import Round
from runner.model.images import write_png
from runner.rundir.mlperf_log import iter_log_samples

LOGS = (SUMMARY_LOG, DETAIL)
ACCURACY_TXT = "accuracy.txt"
MEASUREMENTS = "measurements.json"
IMAGES_DIR = "images"
CAPTIONS_TXT = "captions.txt"
VIEWABLE_CHARS = 4096  # truncate_accuracy_log.py's VIEWABLE_SIZE
_HASH = re.compile(r"^hash=([\w\d]+)$", re.M)


def submitter_root(root: Path, division: str, submitter: str) -> Path:
    return root / division / submitter


def scenario_dir(root: Path, division: str, submitter: str, system: str, scenario: str
                 ) -> Path:
    return submitter_root(root, division, submitter) / "results" / system / MODEL / scenario


def image_ids(rules: Round) -> list[int]:
    """The accuracy images MLPerf wants: the round checker's list, else the reference's
    own sample_ids.txt (text_to_image/tools/sample_ids.txt, shipped with the runner)."""
    return list(rules.image_ids) if rules.image_ids is not None else load_review_ids()


def truncate_accuracy_log(full: Path, dst: Path, accuracy_txt: Path) -> str:
    """MLPerf's truncation: `hash=<sha256 of the full log>` appended to accuracy.txt (made
    if absent, as for TEST01), the log's first and last 4096 characters written to `dst`
    (a log under 4096 characters is copied whole). Returns the hash."""
    digest = sha256_file(full)
    size = full.stat().st_size
    if size < VIEWABLE_CHARS:
        atomic_write_bytes(dst, full.read_bytes())
    else:
        with open(full, encoding="utf-8") as src:  # the log is ASCII: chars are bytes
            start = src.read(VIEWABLE_CHARS)
            src.seek(size - VIEWABLE_CHARS)
            end = src.read(VIEWABLE_CHARS)
        atomic_write_text(dst, f"{start}\n\n...\n\n{end}")
    before = accuracy_txt.read_text(encoding="utf-8") if accuracy_txt.is_file() else ""
    atomic_write_text(accuracy_txt, f"{before}\nhash={digest}\n")
    return digest


def write_images(log: Path, images_dir: Path, ids: list[int], captions,
                 shape: tuple[int, int, int]) -> list[int]:
    """`images/<id>.png` for each id the log holds and `captions.txt` for all ids, as
    MLPerf's accuracy_coco.py writes them (`<id>  <caption>` lines). Returns the ids
    written."""
    images_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(images_dir / CAPTIONS_TXT,
                      "".join(f"{i}  {captions[i]}\n" for i in ids if i < len(captions)))
    wanted, written = set(ids), []
    for qsl_idx, image in iter_log_samples(log, shape):
        if qsl_idx in wanted:
            write_png(images_dir / f"{qsl_idx}.png", image)
            written.append(qsl_idx)
    return sorted(written)


def _copy(src: Path, dst: Path) -> None:
    """A file the run did not produce (accuracy.txt of an unscored run) is left out; the
    tree's check then names it."""
    if src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def code_readme(runner_info: dict[str, Any], argv: list[str], manifest) -> str:
    """src/stable-diffusion-xl/README.md: which runner, which commit, the exact commands."""
    commit = runner_info.get("commit") or "not a git checkout (installed package)"
    dirty = " (with local changes)" if runner_info.get("dirty") else ""
    workers = "\n".join(f"{name}: {cmd}" for name, cmd in
                        sorted((manifest.worker_commands or {}).items()))
    return ("# stable-diffusion-xl with iree-sdxl-runner\n\n"
            f"- iree-sdxl-runner {runner_info['version']}, commit {commit}{dirty}\n"
            "- LoadGen (in the `runner mlperf` process) drives the runner's per-device IREE\n"
            "  workers through its file queue; the workers' commands are below.\n\n"
            "## The command that produced these results\n\n"
            f"```bash\nrunner {shlex.join(argv)}\n```\n\n"
            "## The worker commands it ran\n\n"
            f"```\n{workers or 'none recorded'}\n```\n")


def write_tree(root: Path, plan, out: Path, scenarios: tuple[str, ...],
               compliance: tuple[str, ...], system_json: dict[str, Any],
               measurements: dict[str, str], readme: str, code: str, captions,
               shape: tuple[int, int, int]) -> list[str]:
    """Copies a submission out dir's logs into the round's tree under `root`; returns its
    files. `plan` is the run's SubmissionPlan (division, submitter, system id, rules)."""
    base = submitter_root(root, plan.division, plan.submitter)
    atomic_write_json(base / "systems" / f"{plan.system.id}.json", system_json)
    atomic_write_text(base / plan.rules.code_dir / MODEL / "README.md", code)
    ids = image_ids(plan.rules)
    for scenario in scenarios:
        src = out / scenario
        dst = scenario_dir(root, plan.division, plan.submitter, plan.system.id, scenario)
        _copy(out / "user.conf", dst / "user.conf")
        atomic_write_text(dst / "README.md", readme)
        atomic_write_json(dst / MEASUREMENTS, measurements)
        for name in LOGS:
            _copy(src / "accuracy" / name, dst / "accuracy" / name)
            _copy(src / "performance" / name, dst / "performance" / "run_1" / name)
        _copy(src / "accuracy" / ACCURACY_TXT, dst / "accuracy" / ACCURACY_TXT)
        full_log = src / "accuracy" / ACCURACY_LOG
        if full_log.is_file():
            if (dst / "accuracy" / ACCURACY_TXT).is_file():
                truncate_accuracy_log(full_log, dst / "accuracy" / ACCURACY_LOG,
                                      dst / "accuracy" / ACCURACY_TXT)
            write_images(full_log, dst / "accuracy" / IMAGES_DIR, ids, captions, shape)
        for test in compliance:
            for name in LOGS:
                _copy(src / test / name, dst / test / "performance" / "run_1" / name)
            for verify in sorted((src / test).glob("verify_*.txt")):
                _copy(verify, dst / test / verify.name)
            if test == "TEST01" and (src / test / ACCURACY_LOG).is_file():
                truncate_accuracy_log(src / test / ACCURACY_LOG,
                                      dst / test / "accuracy" / ACCURACY_LOG,
                                      dst / test / "accuracy" / ACCURACY_TXT)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def expected_files(plan, scenarios: tuple[str, ...], compliance: tuple[str, ...]
                   ) -> dict[str, str]:
    """Relative path -> what must be there (LoadGen mode for summaries, else a note)."""
    base = f"{plan.division}/{plan.submitter}"
    out = {f"{base}/systems/{plan.system.id}.json": "system description",
           f"{base}/{plan.rules.code_dir}/{MODEL}/README.md": "the submitter's code"}
    for scenario in scenarios:
        d = f"{base}/results/{plan.system.id}/{MODEL}/{scenario}"
        out.update({
            f"{d}/{MEASUREMENTS}": "measurements", f"{d}/README.md": "how to reproduce",
            f"{d}/user.conf": "LoadGen user.conf",
            f"{d}/accuracy/{SUMMARY_LOG}": "AccuracyOnly", f"{d}/accuracy/{DETAIL}": "log",
            f"{d}/accuracy/{ACCURACY_LOG}": "truncated log",
            f"{d}/accuracy/{ACCURACY_TXT}": "accuracy script output and hash",
            f"{d}/accuracy/{IMAGES_DIR}/{CAPTIONS_TXT}": "captions of the accuracy images",
            f"{d}/performance/run_1/{SUMMARY_LOG}": "PerformanceOnly",
            f"{d}/performance/run_1/{DETAIL}": "log"})
        for test in compliance:
            out[f"{d}/{test}/verify_performance.txt"] = "verification"
            out[f"{d}/{test}/performance/run_1/{SUMMARY_LOG}"] = "PerformanceOnly"
            out[f"{d}/{test}/performance/run_1/{DETAIL}"] = "log"
            if test == "TEST01":
                out[f"{d}/{test}/verify_accuracy.txt"] = "verification"
                out[f"{d}/{test}/accuracy/{ACCURACY_LOG}"] = "truncated log"
                out[f"{d}/{test}/accuracy/{ACCURACY_TXT}"] = "hash"
    return out


def _check_hash(tree_log: Path, accuracy_txt: Path, full_log: Path, rel: str,
                max_bytes: int) -> list[str]:
    problems = []
    if tree_log.stat().st_size > max_bytes:
        problems.append(f"{rel}: {tree_log.stat().st_size} bytes, not truncated "
                        f"(at most {max_bytes})")
    found = _HASH.findall(accuracy_txt.read_text(encoding="utf-8", errors="replace")) \
        if accuracy_txt.is_file() else []
    if not found:
        problems.append(f"{rel}: no hash= line in {accuracy_txt.name}")
    elif full_log.is_file() and found[-1] != sha256_file(full_log):
        problems.append(f"{rel}: hash in {accuracy_txt.name} is not the full log's "
                        f"({full_log})")
    return problems


def check_tree(root: Path, plan, scenarios: tuple[str, ...], compliance: tuple[str, ...],
               out: Path) -> list[str]:
    """Problems with a tree against the round's layout and files; empty when it conforms.
    `out` holds the full accuracy logs the tree's hashes must match."""
    rules: Round = plan.rules
    problems = []
    for rel, what in expected_files(plan, scenarios, compliance).items():
        path = root / rel
        if not path.is_file():
            problems.append(f"missing {rel} ({what})")
        elif path.name == SUMMARY_LOG:
            summary = parse_summary(path)
            scenario = rel.split("/")[5]
            if summary.scenario != scenario:
                problems.append(f"{rel}: scenario {summary.scenario}, expected {scenario}")
            if summary.mode != what:
                problems.append(f"{rel}: mode {summary.mode}, expected {what}")
        elif path.name == DETAIL:
            facts = detail_values(path)
            for key, value in rules.seeds.items():
                if facts.get(f"effective_{key}") != value:
                    problems.append(f"{rel}: {key} {facts.get(f'effective_{key}')}, "
                                    f"MLPerf {rules.version}'s is {value}")
        elif rel.endswith(f"/systems/{plan.system.id}.json"):
            problems += _check_system(json.loads(path.read_text()), rel, plan)
        elif path.name == MEASUREMENTS:
            fields = json.loads(path.read_text())
            absent = [f for f in rules.measurement_fields if not fields.get(f)]
            if absent:
                problems.append(f"{rel}: no value for {', '.join(absent)}")
    for scenario in scenarios:
        d = scenario_dir(root, plan.division, plan.submitter, plan.system.id, scenario)
        rel = str(d.relative_to(root))
        if (d / "accuracy" / ACCURACY_LOG).is_file():
            problems += _check_hash(d / "accuracy" / ACCURACY_LOG, d / "accuracy" / ACCURACY_TXT,
                                    out / scenario / "accuracy" / ACCURACY_LOG,
                                    f"{rel}/accuracy/{ACCURACY_LOG}", rules.max_accuracy_log_bytes)
        if "TEST01" in compliance and (d / "TEST01" / "accuracy" / ACCURACY_LOG).is_file():
            problems += _check_hash(d / "TEST01" / "accuracy" / ACCURACY_LOG,
                                    d / "TEST01" / "accuracy" / ACCURACY_TXT,
                                    out / scenario / "TEST01" / ACCURACY_LOG,
                                    f"{rel}/TEST01/accuracy/{ACCURACY_LOG}",
                                    rules.max_accuracy_log_bytes)
        for name in ("README.md", "user.conf"):
            if (d / name).is_file() and (d / name).stat().st_size == 0:
                problems.append(f"{rel}/{name} is empty")
    return problems


def _check_system(fields: dict[str, Any], rel: str, plan) -> list[str]:
    rules: Round = plan.rules
    problems = []
    absent = [f for f in rules.system_fields if f not in fields]
    if absent:
        problems.append(f"{rel}: no field(s) {', '.join(absent)}")
    empty = [f for f in rules.system_fields if f in fields and fields[f] in ("", None)]
    empty += [f for f in rules.meaningful_fields if f in fields and not fields[f]
              and f not in empty]
    if empty:
        problems.append(f"{rel}: empty field(s) {', '.join(empty)}")
    for key, expected in (("submitter", plan.submitter), ("division", plan.division)):
        if str(fields.get(key, "")).lower() != expected.lower():
            problems.append(f"{rel}: {key} {fields.get(key)!r}, its directory says "
                            f"{expected!r}")
    system_type = fields.get("system_type")
    if system_type not in rules.scenarios:
        problems.append(f"{rel}: system_type {system_type!r} takes no SDXL result in "
                        f"{rules.version}")
    if str(fields.get("status", "")).lower() not in rules.system_statuses:
        problems.append(f"{rel}: status {fields.get('status')!r}")
    return problems


def rules_not_met(root: Path, plan, scenarios: tuple[str, ...], compliance: tuple[str, ...]
                  ) -> list[str]:
    """The round's rules for a result that this run does not meet, as the checker reads
    them from the tree's logs: a short test (duration, counts), early stopping, the
    accuracy bounds, compliance verdicts. A conforming tree of a short run lists them; a
    real submission lists none."""
    rules: Round = plan.rules
    out = []
    for scenario in scenarios:
        d = scenario_dir(root, plan.division, plan.submitter, plan.system.id, scenario)
        runs = [("performance", d / "performance" / "run_1" / DETAIL)] + [
            (test, d / test / "performance" / "run_1" / DETAIL) for test in compliance]
        for name, detail in runs:
            if not detail.is_file():
                continue
            facts = detail_values(detail)
            at = f"{scenario}/{name}"
            count = facts.get("effective_performance_sample_count", 0)
            if count < rules.performance_sample_count:
                out.append(f"{at}: performance sample count {count} < "
                           f"{rules.performance_sample_count}")
            duration = facts.get("effective_min_duration_ms", 0)
            if duration < rules.min_duration_ms:
                out.append(f"{at}: min_duration {duration} ms < {rules.min_duration_ms}")
            if scenario in rules.early_stopping:
                if not facts.get("early_stopping_met"):
                    out.append(f"{at}: early stopping not met")
            elif facts.get("effective_min_query_count", 0) < rules.min_queries.get(scenario, 0):
                out.append(f"{at}: min_query_count {facts.get('effective_min_query_count')} < "
                           f"{rules.min_queries[scenario]}")
            if scenario == "Offline" and facts.get("effective_samples_per_query", 0) < \
                    rules.offline_min_samples_per_query:
                out.append(f"{at}: samples per query {facts.get('effective_samples_per_query')}"
                           f" < {rules.offline_min_samples_per_query}")
            if facts.get("result_validity") != "VALID":
                out.append(f"{at}: LoadGen result {facts.get('result_validity')}")
        accuracy = d / "accuracy" / DETAIL
        if accuracy.is_file():
            facts = detail_values(accuracy)
            total = facts.get("effective_accuracy_sample_count",
                              facts.get("qsl_reported_total_count"))
            if total != rules.dataset_size:
                out.append(f"{scenario}/accuracy: {total} samples, the dataset has "
                           f"{rules.dataset_size}")
        out += _accuracy_bounds(d / "accuracy" / ACCURACY_TXT, rules, scenario)
        for test in compliance:
            for verify in sorted((d / test).glob("verify_*.txt")):
                if "TEST PASS" not in verify.read_text(encoding="utf-8", errors="replace"):
                    out.append(f"{scenario}/{test}: {verify.name} says TEST FAIL")
    return out


_SCORE = {name: re.compile(rf".*'{name}':\s+'?([\d.]+).*") for name in ("CLIP_SCORE",
                                                                        "FID_SCORE")}


def _accuracy_bounds(accuracy_txt: Path, rules: Round, scenario: str) -> list[str]:
    """accuracy.txt's FID/CLIP read with the checker's patterns, against the round's
    inclusive bounds (a score the pattern cannot read, e.g. a negative CLIP, is not met)."""
    if not accuracy_txt.is_file():
        return []
    text = accuracy_txt.read_text(encoding="utf-8", errors="replace")
    out = []
    for name, pattern in _SCORE.items():
        found = [m.group(1) for line in text.splitlines() if (m := pattern.match(line))]
        low, high = rules.accuracy_low[name], rules.accuracy_high[name]
        if not found:
            out.append(f"{scenario}/accuracy: no {name} MLPerf can read")
        elif not low <= float(found[0]) <= high:
            out.append(f"{scenario}/accuracy: {name} {found[0]} outside [{low}, {high}]")
    return out
