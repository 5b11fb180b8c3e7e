"""The verification step of MLPerf's compliance tests for SDXL (TEST01, TEST04).

TEST01 (results are real in performance mode): the images LoadGen sampled into the
accuracy log during a performance-mode run must equal the accuracy-mode images of the same
qsl_idx, and the run's throughput must be within 10% of the performance run's. MLPerf's
script compares only the first byte of each record; this compares the sha256 of all of
them. TEST04 (no caching: one sample issued over and over): the run must not be more than
10% faster than the performance run. Both need VALID summaries, as MLPerf's scripts do.
The verdicts are written as MLPerf's `verify_accuracy.txt` / `verify_performance.txt`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from runner.fileio import atomic_write_text
from runner.loadgen.logs import ACCURACY_LOG, Summary
from runner.mlperf_log import iter_log_samples

THRESHOLD = 0.10


@dataclass(frozen=True)
class Check:
    name: str  # accuracy | performance
    passed: bool
    text: str  # the verify_*.txt content


@dataclass(frozen=True)
class Verification:
    test: str
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_dict(self) -> dict:
        return {"test": self.test, "passed": self.passed,
                "checks": {c.name: {"passed": c.passed, "text": c.text} for c in self.checks}}


def _digests(log: Path, shape: tuple[int, int, int]) -> dict[int, str]:
    return {i: hashlib.sha256(image.tobytes()).hexdigest()
            for i, image in iter_log_samples(log, shape)}


def check_accuracy(reference_log: Path, test_log: Path, shape: tuple[int, int, int]) -> Check:
    reference = _digests(reference_log, shape)
    test = _digests(test_log, shape)
    matched = [i for i in test if i in reference]
    mismatched = [i for i in matched if test[i] != reference[i]]
    missing = [i for i in test if i not in reference]
    passed = bool(matched) and not mismatched
    lines = [f"reference (accuracy mode) log: {reference_log}", f"test log: {test_log}",
             f"num_acc_log_entries = {len(reference)}", f"num_perf_log_entries = {len(test)}",
             f"num_perf_log_qsl_idx_match = {len(matched)}",
             f"num_perf_log_data_mismatch = {len(mismatched)}",
             f"num_missing_qsl_idxs = {len(missing)}"]
    if mismatched:
        lines.append(f"mismatched qsl_idx: {mismatched[:20]}")
    if not matched:
        lines.append("no sampled record to compare (raise accuracy_log_sampling_target)")
    lines.append("TEST PASS" if passed else "TEST FAIL")
    return Check("accuracy", passed, "\n".join(lines) + "\n")


def check_performance(reference: Summary, test: Summary, test_name: str) -> Check:
    lines = [f"reference summary: {reference.path}", f"test summary: {test.path}"]
    ref, got = reference.samples_per_second, test.samples_per_second
    lines += [f"reference score = {ref}", f"test score = {got}"]
    problems = []
    if reference.scenario != test.scenario:
        problems.append("Test and reference scenarios do not match")
    if not reference.valid:
        problems.append("Reference results are invalid")
    if not test.valid:
        problems.append("Test results are invalid")
    if ref is None or got is None:
        problems.append("a summary has no samples per second")
    elif test_name == "TEST04":
        if got >= ref * (1 + THRESHOLD):
            problems.append(f"test score is more than {THRESHOLD:.0%} above the reference")
    elif not ref * (1 - THRESHOLD) < got < ref * (1 + THRESHOLD):
        problems.append(f"test score is not within {THRESHOLD:.0%} of the reference")
    lines += [f"TEST FAIL: {p}" for p in problems] or ["TEST PASS"]
    return Check("performance", not problems, "\n".join(lines) + "\n")


def verify(test: str, test_dir: Path, test_summary: Summary, performance: Summary,
           accuracy_dir: Path | None, shape: tuple[int, int, int]) -> Verification:
    """Runs the test's checks and writes their verify_*.txt into `test_dir`."""
    checks = []
    if test == "TEST01":
        assert accuracy_dir is not None
        checks.append(check_accuracy(accuracy_dir / ACCURACY_LOG, test_dir / ACCURACY_LOG,
                                     shape))
    checks.append(check_performance(performance, test_summary, test))
    for check in checks:
        atomic_write_text(test_dir / f"verify_{check.name}.txt", check.text)
    return Verification(test, tuple(checks))
