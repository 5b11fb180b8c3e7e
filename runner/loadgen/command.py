"""`runner mlperf` end to end: prepare -> (dry run | tests) -> score -> verify -> tree -> reports.

The out dir's `results.json` is the record of everything (LoadGen's settings and summaries,
the SUT's counts, FID/CLIP, compliance verdicts, the submission tree's check), written with
`summary.md` and `report.html` even when a test fails, so a failed run says why.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path
from typing import Any

from runner.base.errors import StepFailed
from runner.base.fileio import atomic_write_json
from runner.config.mlperf_data import CAPTIONS_FILE
from runner.loadgen.compliance import Verification, verify
from runner.loadgen.conf import MLPERF_SAMPLES
from runner.loadgen.logs import ACCURACY_LOG
from runner.loadgen.report import write_reports
from runner.loadgen.run import (
    MLPERF_RECORD,
    WORK_DIR,
    MlperfRequest,
    Prepared,
    dry_run_text,
    execute,
    loadgen_preflight,
    prepare_loadgen,
)
from runner.loadgen.session import TestOutcome
from runner.loadgen.submission import check_tree, code_readme, rules_not_met, write_tree
from runner.rundir.mlperf_log import iter_log_samples

SUBMISSION_DIR = "submission"


def images_digest(log: Path, shape: tuple[int, int, int]) -> str:
    """sha256 over the (qsl_idx, image) sequence of a log's first record per qsl_idx, in the
    log's order (the order FID's sums run in); seq_ids left out."""
    h = hashlib.sha256()
    for qsl_idx, image in iter_log_samples(log, shape):
        h.update(f"{qsl_idx}:".encode() + hashlib.sha256(image.tobytes()).digest())
    return h.hexdigest()


def score_accuracy(prepared: Prepared, log_dir: Path,
                   scored: dict[str, tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """LoadGen's accuracy log scored by the runner's FID/CLIP (MLPerf's computation). A log
    holding the same images in the same order as one already scored in this command
    (`scored`, by `images_digest`: Offline's and Server's accuracy tests answer in qsl_idx
    order, with other seq_ids) takes that score and its files, since FID/CLIP is a function
    of that sequence."""
    import shutil

    from runner.accuracy.evaluate import evaluate_run
    from runner.accuracy.settings import accuracy_settings
    from runner.accuracy.verdict import JSON_NAME, TXT_NAME

    profile = prepared.request.profile
    if not profile.accuracy.has_ranges():
        return {"verdict": "not scored: the profile has no accuracy ranges"}
    log = log_dir / ACCURACY_LOG
    size = profile.model.image_size
    digest = images_digest(log, (size, size, 3))
    if digest in scored:
        first, result = scored[digest]
        for name in (JSON_NAME, TXT_NAME):
            shutil.copyfile(first / name, log_dir / name)
        return {**result, "accuracy_json": str(log_dir / JSON_NAME),
                "same_log_as": str(first / ACCURACY_LOG)}
    ranges_for = accuracy_settings(profile).samples
    qsl = set(range(prepared.total))
    subset = qsl != set(ranges_for) if ranges_for is not None else prepared.total != MLPERF_SAMPLES
    score = evaluate_run(log_dir, profile=profile, log=log, allow_subset=subset,
                         progress=False, metrics=profile.accuracy.metrics)
    result = {"fid": score.result.fid, "clip": score.result.clip, "n": score.result.n,
              "verdict": score.verdict.state, "exit_code": score.verdict.exit_code,
              "lines": score.verdict.lines()}
    scored[digest] = (log_dir, result)
    return {**result, "accuracy_json": str(score.json_path)}


def _readme(prepared: Prepared) -> str:
    r = prepared.request
    return (f"# {r.profile.name}: stable-diffusion-xl {', '.join(prepared.scenarios)}\n\n"
            "Run with iree-sdxl-runner (see the submitter's src/stable-diffusion-xl):\n\n"
            f"```bash\nrunner {shlex.join(r.argv)}\n```\n")


def _compliance(prepared: Prepared, outcomes: dict[str, TestOutcome]) -> list[Verification]:
    size = prepared.request.profile.model.image_size
    out = []
    for scenario in prepared.scenarios:
        performance = outcomes.get(f"{scenario}/performance")
        accuracy = outcomes.get(f"{scenario}/accuracy")
        for test in prepared.compliance:
            outcome = outcomes.get(f"{scenario}/{test}")
            if outcome is None or performance is None or accuracy is None:
                continue
            v = verify(test, outcome.log_dir, performance.log_dir, accuracy.log_dir,
                       (size, size, 3))
            out.append(Verification(f"{scenario}/{v.test}", v.checks))
    return out


NOT_JUDGED = "NOT JUDGED"  # every test ran, but an accuracy log was not judged


def _status(record: dict[str, Any]) -> str:
    """FAILED (it stopped), FAIL, PASS; or NOT JUDGED where an accuracy test's log was not
    scored (--no-score, a profile without ranges) or was a subset the ranges do not hold
    for: it ran as asked, so not a failure, but never a PASS."""
    if record["failure"]:
        return "FAILED"
    ok = all(t["summary"] and (t["mode"] == "accuracy" or t["summary"]["valid"])
             for t in record["tests"])
    ok = ok and all(a.get("exit_code", 0) == 0 for a in record.get("accuracy", {}).values())
    ok = ok and all(v["passed"] for v in record.get("compliance", []))
    submission = record.get("submission") or {}
    ok = ok and not submission.get("problems") and not submission.get("rules_not_met")
    if not ok:
        return "FAIL"
    # the scenarios whose accuracy test ran (its log is what `accuracy` scores, by scenario)
    logs = {t["key"].split("/")[0] for t in record["tests"] if t["name"] == "accuracy"}
    accuracy = record.get("accuracy") or {}
    judged = all((accuracy.get(s) or {}).get("verdict") == "pass" for s in logs)
    return "PASS" if judged else NOT_JUDGED


def _submission(prepared: Prepared, record: dict[str, Any]) -> dict[str, Any]:
    """The tree, written from the out dir's logs, and its checks."""
    from runner.config.mlperf_data import load_captions
    from runner.loadgen.system import measurements, software_facts
    from runner.rundir.directory import RunDir

    request, plan = prepared.request, prepared.submission
    assert plan is not None
    manifest = RunDir(request.out / WORK_DIR).load()  # the IREE the workers really ran
    runner_info = record["runner"]
    system_json = {**plan.system.fields, **software_facts(manifest.iree, runner_info)}
    root = request.out / SUBMISSION_DIR
    size = request.profile.model.image_size
    files = write_tree(root, plan, request.out, prepared.scenarios, prepared.compliance,
                       system_json, measurements(request.profile), _readme(prepared),
                       code_readme(runner_info, request.argv, manifest),
                       load_captions(request.captions or CAPTIONS_FILE), (size, size, 3))
    return {"root": str(root), "round": plan.rules.version, "division": plan.division,
            "submitter": plan.submitter, "system": plan.system.id,
            "system_sources": plan.system.sources, "files": files,
            "problems": check_tree(root, plan, prepared.scenarios, prepared.compliance,
                                   request.out),
            "rules_not_met": rules_not_met(root, plan, prepared.scenarios,
                                           prepared.compliance)}


def _print_verdicts(outcomes: list[TestOutcome], record: dict[str, Any], paths: list[Path]
                    ) -> None:
    """Each test's result, then accuracy, compliance and the submission tree's problems,
    then the status and where the reports are: what to read first, on stdout."""
    for o in outcomes:
        s = o.summary
        rate = f", {s.samples_per_second:.3f} samples/s" if s and s.samples_per_second else ""
        print(f"{o.spec.key}: {(s.result or 'log written') if s else 'no summary'}{rate}"
              + (f" ({'; '.join(s.reasons)})" if s and not s.valid and s.reasons else ""))
    for scenario, accuracy in (record.get("accuracy") or {}).items():
        for line in accuracy.get("lines", []):
            print(f"{scenario}: {line}")
    for v in record.get("compliance", []):
        print(f"{v['test']}: {'PASS' if v['passed'] else 'FAIL'}")
    submission = record.get("submission") or {}
    for line in submission.get("problems", []):
        print(f"submission tree: {line}")
    for line in submission.get("rules_not_met", []):
        print(f"MLPerf {submission['round']} rule not met: {line}")
    print(f"status: {record['status']}; reports: {', '.join(str(p) for p in paths)}")


def run_mlperf(request: MlperfRequest, executor, dry_run: bool = False, attempt=None) -> int:
    """0 when every test is VALID, accuracy passes, compliance verifies and a submission's
    tree conforms and meets the round's rules; 1 otherwise. `attempt`: the out dir's
    record (an interrupted attempt's finished tests are kept)."""
    from runner.base.provenance import runner_provenance
    from runner.batch.run import plan_for

    prepared = prepare_loadgen(request)
    if dry_run:
        from runner.lifecycle import dry_compile

        compiled, model = dry_compile(executor, request.out / WORK_DIR, request.profile)
        loadgen_preflight(prepared, executor, True, [model])
        print(dry_run_text(prepared, plan_for(request.profile), executor, compiled), end="")
        return 0
    checked = loadgen_preflight(prepared, executor, False)
    outcomes, failure = execute(prepared, executor, attempt, checked)
    by_key = {o.spec.key: o for o in outcomes}
    record: dict[str, Any] = {
        "kind": "mlperf", "profile": request.profile.name,
        "system": request.profile.mlperf.system_id or request.profile.name,
        "scenarios": list(prepared.scenarios), "mode": request.mode,
        "compliance_tests": list(prepared.compliance), "total": prepared.total,
        "performance_count": prepared.performance_count, "failure": failure,
        "settings": prepared.settings, "tests": [o.to_dict() for o in outcomes],
        "runner": runner_provenance(), "work_dir": str(request.out / WORK_DIR)}
    if failure is None and request.score:
        scored: dict[str, tuple[Path, dict[str, Any]]] = {}
        record["accuracy"] = {key.split("/")[0]: score_accuracy(prepared, o.log_dir, scored)
                              for key, o in by_key.items() if o.spec.name == "accuracy"}
    if failure is None and prepared.compliance:
        record["compliance"] = [v.to_dict() for v in _compliance(prepared, by_key)]
    if failure is None and prepared.submission is not None:
        record["submission"] = _submission(prepared, record)
    record["status"] = _status(record)
    atomic_write_json(request.out / MLPERF_RECORD, record)
    _print_verdicts(outcomes, record, write_reports(request.out, record))
    if failure:
        raise StepFailed(failure, where=str(request.out / WORK_DIR / "logs"),
                         fix="read the worker logs; LoadGen's logs so far are kept in "
                         f"{request.out}")
    return 0 if record["status"] in ("PASS", NOT_JUDGED) else 1

