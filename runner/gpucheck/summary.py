"""The check's results: gpu_check.json after every step, gpu_check.md at the end.

What the steps measured is read from the files they wrote (bench.json, results.json,
compare.json), so the summary holds no number a command did not write. A rate is only set
beside one of the same model: MLPerf's published results (PUBLISHED, labelled as published;
the docs' measurements file holds the same values, which tests/test_gpu_check.py holds it
to) are SDXL's at 1024x1024 on GPUs, so they stand beside a check of that model on a GPU
alone; every check also sets the tiny model's rate on the device beside the same tiny run on
the CPU that prepared the carry (`runner run --profile tiny`, the same samples).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.base.mdtable import md_table
from runner.gpucheck.plan import (
    BENCH,
    BENCH_STAGES,
    DISPATCHES,
    LADDER,
    MLPERF,
    REPORT,
    RESULTS_SUMMARY,
    TINY_COUNT,
    Step,
)
from runner.gpucheck.steps import PASSED, load_own
from runner.inputs.jsonfile import read_json

PUBLISHED: dict[str, Any] = {
    "source": "MLPerf Inference v5.1 results (SDXL, Offline): QCT's 8xH200, the H100 result, "
              "and AMD's MI325X submission on IREE",
    "values": {
        "h200_qct_8gpu_offline_samples_per_s": 19.19,
        "h200_offline_samples_per_s_per_gpu": 2.40,
        "h100_offline_images_per_s_per_gpu": 2.26,
        "mi325x_iree_offline_images_per_s_per_gpu": 2.32,
        "mi325x_node_offline_samples_per_s": 18.6,
    },
}
SDXL_IMAGE_SIZE = 1024  # MLPerf's SDXL makes 1024x1024 images: the published rates' model


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def as_dict(step: Step | dict) -> dict:
    return step.to_dict() if isinstance(step, Step) else step


def _load(path: Path) -> dict | None:
    """A result file a step's `runner` command wrote (None where there is none)."""
    try:
        return read_json(path, what="result file")
    except RunnerError:
        return None



def _tiny(results: Path, manifest: dict) -> dict[str, Any]:
    cmp = _load(results / "tiny-compare" / "compare.json")
    if cmp is None:
        return {"verdict": "not run"}
    s = cmp.get("summary", {})
    expected = manifest.get("tiny_count", TINY_COUNT)
    within = (s.get("common") == expected and s.get("max_abs") is not None
              and s["max_abs"] <= 1 and not cmp.get("only_a") and not cmp.get("only_b"))
    return {"verdict": "within 1 LSB" if within else
            f"differs: max |d| {_cell(s.get('max_abs'))} over {_cell(s.get('common'))} of "
            f"{expected}",
            "common": s.get("common"), "identical": s.get("identical"),
            "max_abs": s.get("max_abs"), "min_psnr": s.get("min_psnr")}


def _bench_row(step: dict) -> dict[str, Any] | None:
    bench = _load(Path(step["outputs"][0])) if step.get("outputs") else None
    if bench is None:
        return None
    params = step.get("params", {})
    row: dict[str, Any] = {"step": step["name"], "vae_dtype": params.get("vae_dtype"),
                           "batch_size": params.get("batch_size"),
                           "images_per_s": (bench.get("best") or {}).get("samples_per_s"),
                           "stage_ms": {}, "dispatch_share": {}, "top_kinds": {}}
    for stage in bench.get("stages", []):
        name = stage.get("stage")
        row["stage_ms"][name] = (stage.get("latency_ms") or {}).get("median_ms")
        profile = stage.get("dispatch_profile") or {}
        if profile.get("status") == "ok":
            row["dispatch_share"][name] = profile.get("dispatch_share_of_wall")
            kinds = sorted(profile.get("kinds", []), key=lambda k: -k.get("share", 0))
            row["top_kinds"][name] = [[k.get("kind"), k.get("share")] for k in kinds[:3]]
    return row


def _mlperf(step: dict) -> dict[str, Any] | None:
    record = load_own(Path(step["outputs"][0])) if step.get("outputs") else None
    for test in (record or {}).get("tests", []):
        s = test.get("summary") or {}
        if test.get("mode") == "performance" and s.get("samples_per_second") is not None:
            return {"scenario": test.get("scenario", "Offline"),
                    "samples_per_s": s["samples_per_second"], "valid": s.get("valid"),
                    "reasons": s.get("reasons") or [],
                    "batch_size": step.get("params", {}).get("batch_size"),
                    "vae_dtype": step.get("params", {}).get("vae_dtype")}
    return None


def not_published_model(manifest: dict) -> str | None:
    """Why MLPerf's published rates do not compare with this check's (None: they do): they
    are SDXL's at full size on GPUs, and a tiny or CPU rate divided by them means nothing."""
    size, backend = manifest.get("image_size"), manifest.get("backend")
    if backend == "cpu":
        return "this check ran on a CPU"
    if size is None:
        return "the carry does not record its model's image size (prepare it again)"
    if size != SDXL_IMAGE_SIZE:
        return (f"this check's model, {manifest.get('model') or '?'}, makes {size}x{size} "
                "images")
    return None


def _run_rate(run_dir: Path) -> float | None:
    """A `runner run`'s samples/s, from the results.json it wrote."""
    found = _load(run_dir / "results.json") or {}
    rate = (found.get("timings") or {}).get("samples_per_s")
    return rate if isinstance(rate, int | float) and rate > 0 else None


def tiny_rates(results: Path, carry: str | None) -> dict[str, float | None]:
    """The tiny model's samples/s on the device and on the CPU that prepared the carry: the
    same command on the same samples, so their ratio is the device's speed against a CPU's
    (None where a run is missing)."""
    device = _run_rate(results / "tiny-device")
    cpu = _run_rate(Path(carry) / "tiny-cpu") if carry else None
    return {"device": device, "cpu": cpu,
            "device_over_cpu": round(device / cpu, 4) if device and cpu else None}


def measured(results: Path, manifest: dict, steps: list[dict], carry: str | None = None
             ) -> dict[str, Any]:
    """What the steps measured, from their files: the tiny verdict and rates (against the
    carry's CPU run), one row per bench that passed (throughput at the first batch size per
    VAE precision, then the largest batch that fit), the MLPerf test's rate, and the
    dispatch profile's outcome."""
    rows = [r for s in steps if s["kind"] in (BENCH, LADDER) and s["status"] == PASSED
            for r in [_bench_row(s)] if r is not None]
    fit = [s for s in steps if s["kind"] == LADDER]
    largest = next((s["params"]["batch_size"] for s in fit if s["status"] == PASSED), None)
    mlperf = next((m for s in steps if s["kind"] == MLPERF and s["status"] == PASSED
                   for m in [_mlperf(s)] if m is not None), None)
    dispatches = next(({"status": s["status"], "note": s.get("note", ""),
                        "row": _bench_row(s) if s["status"] == PASSED else None}
                       for s in steps if s["kind"] == DISPATCHES), None)
    return {"tiny": _tiny(results, manifest), "tiny_samples_per_s": tiny_rates(results, carry),
            "published_left_out": not_published_model(manifest),
            "bench": rows, "largest_batch": largest, "mlperf": mlperf, "dispatches": dispatches,
            "vae_fp16_over_fp32": vae_ratios(rows)}


def vae_ratios(rows: list[dict]) -> dict[str, float]:
    """The VAE stage's median fp16 / fp32 per batch size."""
    vae = {(r["vae_dtype"], r["batch_size"]): r["stage_ms"].get("vae") for r in rows}
    out = {}
    for (dtype, b), ms in vae.items():
        base = vae.get(("fp32", b))
        if dtype == "fp16" and ms and base:
            out[f"bs{b}"] = round(ms / base, 4)
    return out


def write(results: Path, summary: dict, final: bool) -> None:
    """gpu_check.json after every step (atomic: a kill leaves the last whole one), and at the
    end, with what the steps measured, gpu_check.md."""
    steps = [as_dict(s) for s in summary["steps"]]
    summary = dict(summary, steps=steps, written=now(),
                   **measured(results, summary["manifest"], steps, summary.get("carry")))
    atomic_write_json(results / RESULTS_SUMMARY, summary)
    if final:
        atomic_write_text(results / REPORT, report(summary))


def _ms(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"


def _cell(value: Any) -> Any:
    """A table cell: a value nothing recorded (the device step runs no command, so has no
    exit code) reads "-", never Python's None."""
    return "-" if value is None else value


def _holders_cell(found: dict) -> str:
    if found.get("tool") is None:
        return "-"
    leaks = found.get("leaks") or []
    return "none" if not leaks else ", ".join(f"pid {p['pid']}" for p in leaks)


def _dispatch_section(d: dict) -> list[str]:
    """Each stage's share of time in dispatches and its top kinds; or, when the step made
    no profile, its status and note, so the report says why."""
    row = d.get("row")
    if row and row["dispatch_share"]:
        return md_table(["stage", "dispatch share", "top kinds"],
                        [[s, "-" if share is None else f"{100 * share:.0f}%", ", ".join(
                            f"{k} {100 * (sh or 0):.0f}%" for k, sh in
                            row["top_kinds"].get(s, []))]
                         for s, share in row["dispatch_share"].items()])
    return [f"- {d.get('status', 'not run')}" + (f": {d['note']}" if d.get("note") else "")]


def report(summary: dict) -> str:
    m = summary["manifest"]
    gpu = summary.get("gpu") or {}
    lines = [f"# GPU check: {m['profile']} ({m.get('model') or '?'})", "",
             f"- device: {summary.get('device') or 'unknown'}",
             f"- runs the profile's code: {gpu.get('verdict', 'not checked')}",
             f"- status: {summary['status']} (budget {summary['budget_s']:.0f}s)",
             f"- IREE runtime {m.get('iree_runtime') or '?'}, compiled for {m['backend']} "
             f"{m['chip']}",
             f"- tiny on the device vs the CPU's images: {summary['tiny']['verdict']}",
             f"- largest batch that ran: {summary.get('largest_batch') or 'not measured'}", "",
             "## Throughput and stage latencies (measured)", ""]
    stages = list(m.get("stages", BENCH_STAGES))
    lines += md_table(["VAE", "batch", "images/s", *(f"{s} ms" for s in stages)],
                      [[_cell(r["vae_dtype"]), _cell(r["batch_size"]), _ms(r["images_per_s"]),
                        *(_ms(r["stage_ms"].get(s)) for s in stages)]
                       for r in summary["bench"]] or [["-"] * 3])
    lines += ["", "Stage ms: the median of `runner bench`'s repetitions.", ""]
    ratios = summary.get("vae_fp16_over_fp32") or {}
    lines += ["## VAE decode, fp16 over fp32", ""]
    lines += [f"- {b}: {r:.3f}" for b, r in ratios.items()] or ["- not measured"]
    lines += ["", "## MLPerf Offline, short performance test (measured)", ""]
    mlperf = summary.get("mlperf")
    lines += ([f"- {mlperf['samples_per_s']:.3f} samples/s on one device (batch "
               f"{_cell(mlperf['batch_size'])}, VAE {_cell(mlperf['vae_dtype'])}); LoadGen: "
               + ("VALID" if mlperf["valid"] else
                  "INVALID (" + "; ".join(mlperf["reasons"] or ["short"]) + ")")]
              if mlperf else ["- not measured"])
    lines += _references(summary, mlperf)
    lines += ["", "## Dispatch profile", "", *_dispatch_section(summary.get("dispatches") or {})]
    holders = [s.get("gpu_holders") or {} for s in summary["steps"]]
    skipped = next((h["note"] for h in holders if h.get("tool") is None and h.get("note")), "")
    lines += ["", "## Steps", ""] + ([f"GPU holders: {skipped}", ""] if skipped else [])
    lines += md_table(["step", "status", "exit", "seconds", "GPU holders left", "note"],
                      [[s["name"], s["status"], _cell(s.get("exit_code")),
                        _cell(s.get("seconds")), _holders_cell(h), s.get("note", "")]
                       for s, h in zip(summary["steps"], holders, strict=True)])
    return "\n".join(lines) + "\n"


def _references(summary: dict, mlperf: dict | None) -> list[str]:
    """The rates set beside a reference of the same model: the tiny model on the device
    against the carry's CPU run, then MLPerf's published SDXL rates, only where this check's
    model is SDXL at full size on a GPU (else a line saying why they are left out)."""
    tiny = summary.get("tiny_samples_per_s") or {}
    lines = ["", "## The tiny model, device against CPU (measured)", ""]
    if tiny.get("device_over_cpu") is not None:
        lines.append(f"- {tiny['device']:.3f} samples/s on the device, {tiny['cpu']:.3f} on "
                     "the CPU that prepared the carry (the same `runner run --profile tiny` "
                     f"samples): device / CPU {tiny['device_over_cpu']:.2f}")
    else:
        lines.append("- not measured: " + ("the device's tiny run" if tiny.get("device") is None
                                           else "the carry's CPU run") + " wrote no rate")
    lines += ["", "## MLPerf anchors (published, not measured)", ""]
    why_not = summary.get("published_left_out")
    if why_not:
        return [*lines, "- left out: MLPerf's published rates are SDXL's at "
                f"{SDXL_IMAGE_SIZE}x{SDXL_IMAGE_SIZE} on GPUs, and {why_not}"]
    rate = mlperf["samples_per_s"] if mlperf else None
    return [*lines, f"Source: {PUBLISHED['source']}", "", *md_table(
        ["published value", "number", "measured / published"],
        [[k, v, f"{rate / v:.2f}" if rate and "per_gpu" in k else "-"]
         for k, v in PUBLISHED["values"].items()])]
