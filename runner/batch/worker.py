"""One pipeline process: load the modules once, then pull batches until the queue is empty.

Started as `python -m runner.batch.worker --task RUN/workers/wNNN.json`, locally, in a
container or on a cluster node; it needs only the IREE runtime and numpy. Samples are
encoded, hashed and written by a background thread (`SampleWriter`), so generation never
waits on the disk; a batch is marked done only after its samples are durably written, so
killing this process loses at most its in-flight batches, which go back to the queue.

A sample the pipeline cannot make (its decoder's output is not finite) is recorded as
failed, with the error and its fix (`samples/failed/`), and the worker goes on: handing
the batch back would only have the next worker fail on it too.

SIGTERM (its driver stopping it, or the kernel's parent-death signal), SIGINT and SIGHUP
end it in order: the samples already generated are written, its IREE device is closed
(the same path on CPU as on a GPU, whose memory is free before the process exits), then
it exits with 128 + the signal. Its driver waits for that (runner/batch/executors.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from runner.base.errors import RunnerError
from runner.base.fileio import atomic_write_json
from runner.base.signals import exit_code, handlers_ready, raised_as_interrupted, signal_name
from runner.batch.lifeline import EXIT_DRIVER_GONE, die_with_parent, record_worker, watch_driver
from runner.batch.queue import Batch, WorkQueue
from runner.config.mlperf_data import load_captions
from runner.config.sources import redact_secrets
from runner.model.compiled_model import CompiledModel
from runner.model.pipeline.loader import open_pipeline
from runner.model.pipeline.sdxl import SampleFailures, SdxlPipeline
from runner.rundir.store import SampleFailure, SampleStore, SampleWriter

TASKS_DIR = "workers"


def task_path(run_dir: Path, worker: str) -> Path:
    return Path(run_dir) / TASKS_DIR / f"{worker}.json"


def stats_path(run_dir: Path, worker: str) -> Path:
    return Path(run_dir) / TASKS_DIR / f"{worker}.stats.json"


def write_task(run_dir: Path, worker: dict, compiled: CompiledModel, captions: str,
               lifeline: dict | None = None) -> Path:
    """The worker's task file; `lifeline` is its driver's heartbeat (runner.batch.lifeline)."""
    path = task_path(run_dir, worker["name"])
    atomic_write_json(path, {"run_dir": str(Path(run_dir).resolve()), "worker": worker,
                             "compiled": compiled.to_dict(), "captions": captions,
                             "lifeline": lifeline})
    return path


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def _end_with_driver(lifeline: dict | None, name: str, driver_gone: threading.Event | None
                     ) -> None:
    """Ends this worker with its driver: at once when the driver is our parent, else once
    its heartbeat stops (then as SIGTERM would, `driver_gone` set first), so no worker
    outlives the run that started it."""
    if lifeline:
        die_with_parent(int(lifeline["driver"]["pid"]))
    def stop() -> None:
        if driver_gone is not None:
            driver_gone.set()
        os.kill(os.getpid(), signal.SIGTERM)

    watch_driver(lifeline, lambda message: log(f"{name}: {message}"), stop=stop)


def _generate_into(writer: SampleWriter, pipeline: SdxlPipeline, ids: list[int], prompts: list[str],
                   name: str, device: str) -> float:
    """One pipeline batch generated and handed to the writer, a sample that failed recorded
    as failed (the batch's others are kept); the seconds spent waiting on the writer."""
    failed: dict[int, str] = {}
    fix = ""
    try:
        images = pipeline.generate(prompts)
    except SampleFailures as e:
        images, failed, fix = e.images, e.failed, e.fix or ""
        log(f"{name}: {len(failed)} sample(s) failed: {e}")
    waited = time.perf_counter()
    for n, (qsl_idx, image) in enumerate(zip(ids, images, strict=True)):
        if n in failed:
            writer.fail(SampleFailure(qsl_idx, name, device, failed[n], fix))
        else:
            writer.put(qsl_idx, image, name, device)
    return time.perf_counter() - waited


def run_worker(task_file: Path, driver_gone: threading.Event | None = None) -> int:
    """`driver_gone` is set when the watchdog found the driver's heartbeat stopped (it
    then stops this process as SIGTERM would)."""
    task = json.loads(task_file.read_text())
    run_dir, worker = Path(task["run_dir"]), task["worker"]
    name = worker["name"]
    device = f"{worker['device_uri']}#{worker['device_id']}"
    lifeline = task.get("lifeline")
    _end_with_driver(lifeline, name, driver_gone)
    record_worker(run_dir, name, lifeline)
    if worker.get("cpu_affinity"):
        os.sched_setaffinity(0, worker["cpu_affinity"])
    start, started_at = time.perf_counter(), time.time()
    compiled = CompiledModel.from_dict(task["compiled"])
    with open_pipeline(compiled, worker.get("runtime_flags", ())) as pipeline:
        captions = load_captions(Path(task["captions"]))
        queue, store = WorkQueue(run_dir), SampleStore(run_dir)
        stats = {"worker": name, "device": device, "pid": os.getpid(), "started_at": started_at,
                 "load_seconds": time.perf_counter() - start, "samples": 0, "batches": [],
                 "store_wait_seconds": 0.0,
                 # The device view as this process really has it: what a stage benchmark that
                 # stands for this worker must reproduce (runner bench checks it in tests).
                 "view": {"cores": sorted(os.sched_getaffinity(0)),
                          "env": {k: os.environ.get(k) for k in sorted(worker["env"])}}}
        log(f"{name} on {device}: modules loaded in {stats['load_seconds']:.2f}s")
        atomic_write_json(stats_path(run_dir, name), stats)  # says "ready" to a LoadGen driver

        def batch_written(batch: Batch, count: int, t0: float) -> None:
            """Runs on the writer thread once the batch's samples are durably on disk: only
            then is the batch done in the queue, so a crash before it hands the batch back."""
            queue.done(name, batch)
            stats["samples"] += count
            stats["batches"].append({"start": t0, "end": time.time(), "samples": count})
            stats["stage_times"] = pipeline.times.to_dict()
            stats["store_busy_seconds"] = writer.busy_seconds
            atomic_write_json(stats_path(run_dir, name), stats)
            log(f"{name}: batch {batch.name} done ({count} samples, {stats['samples']} total)")

        with SampleWriter(store) as writer:
            while (batch := queue.next_batch(name)) is not None:
                prompt = dict(zip(batch.ids, batch.prompt_ids, strict=True))
                todo = [i for i in batch.ids if not store.path(i).is_file()]
                t0 = time.time()
                for lo in range(0, len(todo), compiled.batch_size):
                    ids = todo[lo : lo + compiled.batch_size]
                    stats["store_wait_seconds"] += _generate_into(
                        writer, pipeline, ids, [captions[prompt[i]] for i in ids], name, device)
                writer.after(functools.partial(batch_written, batch, len(todo), t0))
    log(f"{name}: queue empty, exiting")
    return 0


def check_environment(driver: str) -> int:
    """`--check DRIVER`: what a worker needs beyond this module's own imports (which already
    ran to get here: numpy, the pipeline, the store), loaded the way a worker loads it, and
    the IREE driver its device URI names. The preflight starts this as it would start a
    worker, so an environment that cannot run one is found before any work, not as every
    worker's traceback after the run."""
    from runner.base.signals import import_held

    try:
        rt = import_held("iree.runtime")
    except ImportError as e:
        print(f"error: cannot import iree.runtime: {e}", file=sys.stderr, flush=True)
        return 2
    drivers = sorted(rt.query_available_drivers())
    if driver not in drivers:
        print(f"error: the IREE runtime has no {driver!r} driver (it has "
              f"{', '.join(drivers)})", file=sys.stderr, flush=True)
        return 2
    print(f"imports ok; IREE driver {driver} registered", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runner.batch.worker", allow_abbrev=False)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", type=Path)
    which.add_argument("--check", metavar="DRIVER",
                       help="import what a worker imports and find the IREE driver; exit 0")
    args = parser.parse_args(argv)
    if args.check:
        return check_environment(args.check)
    driver_gone = threading.Event()
    with raised_as_interrupted(restore=False):  # (then ignored to the end: work_done)
        try:
            handlers_ready()  # (started by `start_child`: a signal sent while it started)
            return run_worker(args.task, driver_gone)
        except RunnerError as e:
            print(f"error: {redact_secrets(str(e))}", file=sys.stderr, flush=True)
            return 2
        except KeyboardInterrupt as e:
            log(f"stopped ({signal_name(e)}): finished samples written, IREE device closed")
            return EXIT_DRIVER_GONE if driver_gone.is_set() else exit_code(e)


if __name__ == "__main__":
    raise SystemExit(main())
