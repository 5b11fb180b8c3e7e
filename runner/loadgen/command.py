"""`runner mlperf` end to end: prepare -> (dry run | tests) -> score -> verify -> tree -> reports.

The out dir's `results.json` is the record of everything (LoadGen's settings and summaries,
the SUT's counts, FID/CLIP, compliance verdicts, the submission tree's check), written with
`summary.md` and `report.html` even when a test fails, so a failed run says why.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from runner.errors import RunnerError
from runner.fileio import atomic_write_json
from runner.loadgen.compliance import Verification, verify
from runner.loadgen.logs import ACCURACY_LOG
from runner.loadgen.report import write_reports
from runner.loadgen.run import (
    MLPERF_SAMPLES,
    RECORD,
    WORK_DIR,
    MlperfRequest,
    Prepared,
    dry_run_text,
    execute,
    prepare,
)
from runner.loadgen.session import TestOutcome
from runner.loadgen.submission import check_tree, system_description, write_tree

SUBMISSION_DIR = "submission"


def score_accuracy(prepared: Prepared, log_dir: Path) -> dict[str, Any]:
    """LoadGen's accuracy log scored by the runner's FID/CLIP (MLPerf's computation)."""
    from runner.accuracy.evaluate import evaluate_run
    from runner.accuracy.settings import accuracy_settings

    profile = prepared.request.profile
    if not profile.accuracy.has_ranges():
        return {"verdict": "not scored: the profile has no accuracy ranges"}
    ranges_for = accuracy_settings(profile).samples
    qsl = set(range(prepared.total))
    subset = qsl != set(ranges_for) if ranges_for is not None else prepared.total != MLPERF_SAMPLES
    score = evaluate_run(log_dir, profile=str(profile.path), log=log_dir / ACCURACY_LOG,
                         allow_subset=subset, progress=False, metrics=profile.accuracy.metrics)
    return {"fid": score.result.fid, "clip": score.result.clip, "n": score.result.n,
            "verdict": score.verdict.state, "exit_code": score.verdict.exit_code,
            "lines": score.verdict.lines(), "accuracy_json": str(score.json_path)}


def _readme(prepared: Prepared) -> str:
    r = prepared.request
    return (f"# {r.profile.name}: stable-diffusion-xl {prepared.scenario}\n\n"
            "Run with iree-sdxl-runner:\n\n```bash\n"
            f"runner {shlex.join(r.argv)}\n```\n")


def _compliance(prepared: Prepared, outcomes: dict[str, TestOutcome]) -> list[Verification]:
    size = prepared.request.profile.model.image_size
    performance = outcomes["performance"].summary
    out = []
    for test in prepared.request.compliance:
        outcome = outcomes.get(test)
        if outcome is None or outcome.summary is None or performance is None:
            continue
        out.append(verify(test, outcome.log_dir, outcome.summary, performance,
                          outcomes["accuracy"].log_dir, (size, size, 3)))
    return out


def _status(record: dict[str, Any]) -> str:
    if record["failure"]:
        return "FAILED"
    ok = all(t["summary"] and (t["mode"] == "accuracy" or t["summary"]["valid"])
             for t in record["tests"])
    ok = ok and (record.get("accuracy") or {}).get("exit_code", 0) == 0
    ok = ok and all(v["passed"] for v in record.get("compliance", []))
    ok = ok and not (record.get("submission") or {}).get("problems")
    return "PASS" if ok else "FAIL"


def run_mlperf(request: MlperfRequest, executor, dry_run: bool = False) -> int:
    """0 when every test is VALID, accuracy passes and compliance verifies; 1 otherwise."""
    from runner.batch.run import plan_for
    from runner.compiled_model import compile_model

    prepared = prepare(request)
    if dry_run:
        layout = request.profile.layout
        compiled = compile_model(request.profile, layout.batch_size, layout.vae_batch_size,
                                 dry_run=True)
        print(dry_run_text(prepared, plan_for(request.profile), executor, compiled), end="")
        return 0
    outcomes, failure = execute(prepared, executor)
    by_name = {o.spec.name: o for o in outcomes}
    system = request.profile.mlperf.system or request.profile.name
    record: dict[str, Any] = {
        "kind": "mlperf", "profile": request.profile.name, "system": system,
        "scenario": prepared.scenario, "mode": request.mode,
        "compliance_tests": list(request.compliance), "total": prepared.total,
        "performance_count": prepared.performance_count, "failure": failure,
        "settings": prepared.settings, "tests": [o.to_dict() for o in outcomes],
        "work_dir": str(request.out / WORK_DIR)}
    if failure is None and "accuracy" in by_name and request.score:
        record["accuracy"] = score_accuracy(prepared, by_name["accuracy"].log_dir)
    if failure is None and request.compliance:
        record["compliance"] = [v.to_dict() for v in _compliance(prepared, by_name)]
    if failure is None and request.mode == "submission":
        from runner.rundir import RunDir

        manifest = RunDir(request.out / WORK_DIR).load()  # the recorded host and IREE
        root = request.out / SUBMISSION_DIR
        files = write_tree(root, system, prepared.scenario, request.out, request.compliance,
                           system_description(system, request.profile, manifest.host,
                                              manifest.iree), _readme(prepared))
        record["submission"] = {"root": str(root), "files": files, "problems": check_tree(
            root, system, prepared.scenario, request.compliance)}
    record["status"] = _status(record)
    atomic_write_json(request.out / RECORD, record)
    paths = write_reports(request.out, record)
    for o in outcomes:
        s = o.summary
        rate = f", {s.samples_per_second:.3f} samples/s" if s and s.samples_per_second else ""
        print(f"{o.spec.name}: {(s.result or 'log written') if s else 'no summary'}{rate}"
              + (f" ({'; '.join(s.reasons)})" if s and not s.valid and s.reasons else ""))
    for line in (record.get("accuracy") or {}).get("lines", []):
        print(line)
    for v in record.get("compliance", []):
        print(f"{v['test']}: {'PASS' if v['passed'] else 'FAIL'}")
    print(f"status: {record['status']}; reports: {', '.join(str(p) for p in paths)}")
    if failure:
        raise RunnerError(failure, where=str(request.out / WORK_DIR / "logs"),
                          fix="read the worker logs; LoadGen's logs so far are kept in "
                          f"{request.out}")
    return 0 if record["status"] == "PASS" else 1

