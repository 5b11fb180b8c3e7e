"""The test kinds of `runner bisect --test`, and one build's verdict against the good one.

A verdict is good, bad or skip (`git bisect skip`: the build cannot be judged). Kinds that
compare with the good build (images, pixels, throughput, compstat) take its measurement
as the reference; the others judge a build on its own (accuracy ranges, a golden suite, a
script's exit code, whether it compiles).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runner.base.errors import BadInput
from runner.base.outcome import Outcome

TEST_KINDS = ("images", "pixels", "accuracy", "throughput", "compile", "compstat",
              "goldens", "script")
SCRIPT_SKIP_CODE = 125  # git bisect run's "cannot test this commit"
_USAGE = ("images | pixels:TOL | accuracy | throughput:PCT | compile | compstat | "
          "goldens:SUITE | script:CMD")


@dataclass(frozen=True)
class TestSpec:
    kind: str
    arg: str = ""  # TOL, PCT, SUITE or CMD as given
    number: float = 0.0  # TOL or PCT

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind

    @property
    def passes(self) -> int:
        """generate passes the probe makes: throughput is measured twice."""
        return {"images": 1, "pixels": 1, "accuracy": 1, "throughput": 2}.get(self.kind, 0)

    @property
    def probes(self) -> bool:
        """Whether the build is measured by the probe (not a suite or a user's script)."""
        return self.kind not in ("goldens", "script")

    @property
    def script_argv(self) -> list[str]:
        return shlex.split(self.arg)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "arg": self.arg, "text": self.text}


def parse_test(text: str, where: str = "--test") -> TestSpec:
    kind, colon, arg = text.partition(":")
    if kind not in TEST_KINDS:
        raise BadInput(f"unknown test {text!r}", where=where, fix=f"use one of: {_USAGE}")
    needs_arg = kind in ("pixels", "throughput", "goldens", "script")
    if needs_arg and not arg:
        raise BadInput(f"{kind} needs an argument", where=where, fix=f"use one of: {_USAGE}")
    if not needs_arg and colon:
        raise BadInput(f"{kind} takes no argument", where=where, fix=f"use one of: {_USAGE}")
    number = 0.0
    if kind in ("pixels", "throughput"):
        try:
            number = float(arg.rstrip("%"))
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < 0 or (kind == "pixels" and number > 255):
            what = "tolerance 0-255" if kind == "pixels" else "percentage"
            raise BadInput(f"{arg!r} is not a {what}", where=where,
                           fix="e.g. pixels:1 or throughput:5")
    if kind == "goldens" and not Path(arg).exists():
        raise BadInput(f"golden suite {arg!r} not found", where=where,
                       fix="give an IREE CI test-suite directory or JSON file")
    if kind == "script":
        try:
            argv = shlex.split(arg)
        except ValueError as e:
            raise BadInput(f"cannot split the command: {e}", where=where,
                           fix="close the quotes, e.g. script:'./repro.sh --flag'") from e
        if not argv:
            raise BadInput("empty command", where=where, fix="e.g. script:'./check.sh'")
    return TestSpec(kind, arg, number)


@dataclass
class BuildVerdict:
    """One build judged against the good one (runner.accuracy.verdict.Verdict judges scores
    against ranges; this one ends a bisect step)."""

    state: Outcome  # good | bad | skip (read back from bisect.json as the plain word)
    metric: str  # one line for the step table
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"state": self.state, "metric": self.metric, "detail": self.detail}


# ----------------------------------------------------------------------------- images

def sample_digests(run_dir: Path) -> dict[int, str]:
    """qsl_idx -> sha256 of the pixels, as `runner generate` recorded them."""
    import json

    manifest = json.loads((run_dir / "manifest.json").read_text())
    return {int(s["qsl_idx"]): s["sha256"] for s in manifest["samples"]}


def image_diffs(ref_dir: Path, run_dir: Path) -> list[dict[str, Any]]:
    """Every sample whose pixels differ: max |Δ| and the share of differing values."""
    from runner.model.images import decode_png

    ref, now = sample_digests(ref_dir), sample_digests(run_dir)
    out = []
    for qsl_idx in sorted(set(ref) & set(now)):
        if ref[qsl_idx] == now[qsl_idx]:
            continue
        name = f"images/{qsl_idx:05d}.png"
        a = decode_png((ref_dir / name).read_bytes()).astype(np.int16)
        b = decode_png((run_dir / name).read_bytes()).astype(np.int16)
        diff = np.abs(a - b)
        out.append({"qsl_idx": qsl_idx, "max_abs": int(diff.max()),
                    "differing_fraction": float((diff > 0).mean())})
    return out


def _images(test: TestSpec, ref: dict, now: dict) -> BuildVerdict:
    diffs = image_diffs(Path(ref["dir"]), Path(now["dir"]))
    n = now["probe"]["run"]["samples"]
    worst = max((d["max_abs"] for d in diffs), default=0)
    detail = {"changed": diffs, "samples": n, "max_abs": worst}
    if test.kind == "images":
        state = Outcome.BAD if diffs else Outcome.GOOD
        metric = (f"{len(diffs)} of {n} samples differ (max |Δ| {worst})" if diffs
                  else f"all {n} samples byte-identical")
    else:
        state = Outcome.BAD if worst > test.number else Outcome.GOOD
        metric = f"max |Δpixel| {worst} (tolerance {test.number:g}); {len(diffs)} of {n} differ"
    return BuildVerdict(state, metric, detail)


# ----------------------------------------------------------------------------- the rest

def throughput(measurement: dict) -> tuple[float, float]:
    """(mean samples/s over the passes, relative spread between them)."""
    rates = measurement["probe"]["run"]["samples_per_s"]
    mean = float(np.mean(rates))
    return mean, (max(rates) - min(rates)) / mean if mean > 0 else 0.0


def _throughput(test: TestSpec, ref: dict, now: dict) -> BuildVerdict:
    (r, r_noise), (n, n_noise) = throughput(ref), throughput(now)
    drop = 100.0 * (r - n) / r if r > 0 else 0.0
    noise = 100.0 * max(r_noise, n_noise)
    state = Outcome.BAD if drop > test.number else Outcome.GOOD
    caveat = "; the change is within that noise: measure again" if abs(drop) <= noise else ""
    return BuildVerdict(state, f"{n:.3f} samples/s ({-drop:+.1f}% vs good {r:.3f}; pass-to-pass "
                          f"noise {noise:.1f}%{caveat})",
                   {"samples_per_s": n, "good_samples_per_s": r, "change_pct": -drop,
                    "noise_pct": noise, "within_noise": abs(drop) <= noise})


def _compstat(ref: dict, now: dict) -> BuildVerdict:
    r, n = ref["probe"]["compile"], now["probe"]["compile"]
    over = [name for name in ("dispatch_count", "vmfb_bytes") if n[name] > r[name]]
    return BuildVerdict(Outcome.BAD if over else Outcome.GOOD,
                        f"dispatches {n['dispatch_count']} "
                        f"({n['dispatch_count'] - r['dispatch_count']:+d}), "
                        f"vmfb {n['vmfb_bytes']} B ({n['vmfb_bytes'] - r['vmfb_bytes']:+d})",
                        {"over": over, "dispatch_count": n["dispatch_count"],
                         "vmfb_bytes": n["vmfb_bytes"],
                         "modules": [{k: m.get(k) for k in ("mlir", "dispatch_count", "vmfb_bytes")}
                                for m in n["modules"]]})


def _accuracy(now: dict) -> BuildVerdict:
    score = now["score"]
    if "error" in score:  # scoring happens on this host: the build's images could not decide
        return BuildVerdict(Outcome.SKIP, f"skipped: not scored: {score['error']}", score)
    return BuildVerdict(Outcome.GOOD if score["passed"] else Outcome.BAD,
                        f"FID {score['fid']:.6g}, CLIP {score['clip']:.6g}: {score['state']}",
                        score)


def _exit_code(test: TestSpec, now: dict) -> BuildVerdict:
    run = now[test.kind]
    rc = run["exit_code"]
    if test.kind == "script":
        state = Outcome.GOOD if rc == 0 else Outcome.SKIP if rc == SCRIPT_SKIP_CODE else Outcome.BAD
        return BuildVerdict(state, f"exit {rc}", run)
    state = Outcome.GOOD if rc == 0 else Outcome.BAD if rc == 1 else Outcome.SKIP
    failed = run.get("first_failure")
    return BuildVerdict(state, f"exit {rc}" + (f"; first failing: {failed}" if failed else ""), run)


def judge_build(test: TestSpec, ref: dict | None, now: dict) -> BuildVerdict:
    """`now` is one build's measurement (runner.bisect.measure); `ref` the good build's,
    or None while the good build itself is being judged on its own."""
    unavailable = now.get("unavailable")
    if unavailable:
        return BuildVerdict(Outcome.SKIP, f"skipped: {unavailable}", {"reason": unavailable})
    if test.probes:
        probe = now["probe"]
        if not probe.get("ok"):
            stage, error = probe.get("stage", "import"), probe.get("error", "?")
            first = str(error).strip().splitlines()[0][:300] if error else "?"
            if stage == "preflight":  # the environment's fault, not the build's
                said = (probe.get("preflight") or {}).get("detail") or first
                return BuildVerdict(Outcome.SKIP, f"skipped: preflight: worker environment: "
                                    f"{said}", {"error": error})
            if stage == "compile" and test.kind == "compile":
                return BuildVerdict(Outcome.BAD, f"does not compile: {first}", {"error": error})
            if stage in ("import", "compile"):
                return BuildVerdict(Outcome.SKIP, f"skipped: {stage} failed: {first}",
                                    {"error": error})
            return BuildVerdict(Outcome.BAD, f"the pipeline failed: {first}", {"error": error})
    if test.kind == "compile":
        c = now["probe"]["compile"]
        return BuildVerdict(Outcome.GOOD,
                            f"{len(c['modules'])} modules compile ({c['seconds']:.1f}s)", c)
    if test.kind == "accuracy":
        return _accuracy(now)
    if test.kind in ("goldens", "script"):
        return _exit_code(test, now)
    if ref is None:
        return BuildVerdict(Outcome.GOOD, "the reference", {})
    if test.kind in ("images", "pixels"):
        return _images(test, ref, now)
    if test.kind == "throughput":
        return _throughput(test, ref, now)
    return _compstat(ref, now)
