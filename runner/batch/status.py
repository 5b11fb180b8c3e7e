"""`runner status RUN_DIR`: where a run stands, per node and per worker, from its files.

Everything comes from the run dir, so it works from any machine that mounts it, while the
run goes on or after it ended: samples per worker from each sample PNG's tEXt metadata
(the record SampleStore.put writes), claimed batches from the queue, node state from the
node tasks' own files, job states from squeue when Slurm answers here (else as recorded).

Only the head of each PNG is read: the tEXt chunks come before the pixels, and a status
line for 5000 one-megapixel samples on NFS must not read gigabytes.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from runner.batch.cluster import live_tasks, node_of, read_node_state, task_ids
from runner.batch.queue import WorkQueue

HEAD_BYTES = 4096


def sample_worker(path: Path) -> str | None:
    from runner.model.images import png_text

    try:
        with open(path, "rb") as f:
            return png_text(f.read(HEAD_BYTES)).get("worker")
    except (OSError, ValueError):
        return None


def run_status(run_dir: Path, query_slurm: bool = True) -> dict[str, Any]:
    # Imported here: the CLI imports this module (runner/batch/cli.py) on every command.
    from runner.rundir.directory import RunDir
    from runner.rundir.store import SampleStore

    run = RunDir(run_dir)
    run_dir = run.path
    manifest = run.load()
    requested = set(manifest.sample_ids)
    store, queue = SampleStore(run_dir), WorkQueue(run_dir)
    done = store.done_ids() & requested
    per_worker = Counter(sample_worker(store.path(i)) or "?" for i in sorted(done))
    claims = {w: c for w in queue.claimants() if (c := queue.claimed_by(w))}
    slurm = manifest.slurm or {}
    nodes: list[dict[str, Any]] = []
    planned: list[str] = []
    if slurm.get("jobs"):
        ids = task_ids(slurm)
        live = None
        if query_slurm and shutil.which("squeue"):
            live = live_tasks(sorted({sid.split("_")[0] for sid in ids.values()}))
        for key, sid in ids.items():
            record = slurm.get("nodes", {}).get(key) or read_node_state(run_dir, key)
            workers = record.get("workers", [])
            planned += workers
            job_state = (live or {}).get(sid, {}).get("state") or \
                record.get("slurm", {}).get("JobState") or ("gone" if live is not None else "?")
            nodes.append({
                "node": key, "slurm_id": sid,
                "host": record.get("hostname") or record.get("nodelist") or "-",
                "state": record.get("outcome") or record.get("state") or "not started",
                "job_state": job_state, "workers": workers,
                "cores": record.get("cores"),
                "samples": sum(n for w, n in per_worker.items() if node_of(w) == key),
                "claimed": sum(len(c) for w, c in claims.items() if node_of(w) == key),
            })
    else:
        planned = [w["name"] for w in manifest.plan.get("workers", [])]
    names = list(dict.fromkeys([*planned, *sorted(per_worker), *sorted(claims)]))
    workers = [{"worker": w, "node": node_of(w) or "local", "samples": per_worker.get(w, 0),
                "claimed": claims.get(w, [])} for w in names]
    return {
        "run_dir": str(run_dir), "executor": manifest.executor,
        "status": manifest.status, "requested": len(requested), "done": len(done),
        "pending_batches": queue.pending_count(),
        "claimed_batches": sum(len(c) for c in claims.values()),
        "jobs": [{"job_id": j["job_id"], "index": j["index"], "tasks": j["tasks"],
                  "reason": j["reason"]} for j in slurm.get("jobs", [])],
        "nodes": nodes, "workers": workers,
    }


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def format_status(status: dict[str, Any]) -> str:
    pct = 100.0 * status["done"] / max(status["requested"], 1)
    lines = [f"run {status['run_dir']} ({status['executor']}, {status['status']}): "
             f"{status['done']}/{status['requested']} samples ({pct:.0f}%); queue: "
             f"{status['pending_batches']} pending, {status['claimed_batches']} claimed "
             "batch(es)"]
    for job in status["jobs"]:
        lines.append(f"job {job['job_id']} (j{job['index']}, {job['tasks']} task(s)): "
                     f"{job['reason']}")
    if status["nodes"]:
        rows: list[tuple[str, ...]] = [("node", "slurm task", "host", "state", "job state",
                                         "workers", "samples", "claimed")]
        rows += [(n["node"], n["slurm_id"], n["host"], n["state"], n["job_state"],
                  str(len(n["workers"])), str(n["samples"]), str(n["claimed"]))
                 for n in status["nodes"]]
        lines += ["", _table(rows)]
    if status["workers"]:
        rows = [("worker", "node", "samples", "claimed")]
        rows += [(w["worker"], w["node"], str(w["samples"]), ",".join(w["claimed"]) or "-")
                 for w in status["workers"]]
        lines += ["", _table(rows)]
    return "\n".join(lines)
