"""What runs inside one build's environment: `python -m runner.bisect.probe`.

It imports only what a worker does (the IREE runtime, numpy) plus the build's own
`iree-compile` (first on PATH), so it runs in a bare venv of any IREE release and in a
harness image alike. Stages, each recorded in `probe.json` as it ends, so the host can
tell a build that cannot be installed or imported (skip) from one that cannot compile
(skip, or the verdict of a `compile` test) from one whose pipeline fails (bad):

1. import: `iree.runtime` and `iree-compile` of this build;
   preflight (when the pipeline runs): what a worker checks before it starts
   (`runner.batch.worker --check DRIVER`: its imports, the profile's IREE driver
   registered), in this process, so with the build's interpreter and environment and at no
   cost of a second interpreter; a failure is the environment's, and skips the build;
2. compile: the profile's modules through the compile cache (keyed by the compiler's
   version and commit, so every build has its own, shared with `runner run`), each
   module's compile time (the time it took when it was compiled, for a cached one) and
   vmfb size; with `--compstat`, also IREE CI's dispatch count (the scheduling statistics
   of the same compile stopped before code generation, cached as well);
3. run: `runner generate` of the samples, `--passes` times (the first writes `images/`,
   later ones `passN/`), each pass timed, and whether every pass made the same bytes;
4. dispatches (`--dispatches CALLS`): every stage's dispatch profile with this build's
   own `iree-benchmark-module` and `iree-profile` (runner.bench.stages.profile_stages),
   after the timed passes so it cannot disturb them, into `dispatches.json` (probe.json
   keeps each stage's status and totals). A build without the profiler (IREE < 3.12) or
   whose profile fails gets a note there; the build's verdict never depends on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported at run time only once the build's runtime imports
    from runner.config.profile import Profile

PROBE_FILE = "probe.json"
DISPATCHES_FILE = "dispatches.json"


def _write(out: Path, state: dict[str, Any]) -> None:
    from runner.base.fileio import atomic_write_json

    atomic_write_json(out / PROBE_FILE, state)


def _compile_seconds(result) -> float:
    """How long the module took to compile: now, or (cached) when it was compiled."""
    if not result.cached:
        return float(result.seconds)
    try:
        return float(json.loads(Path(result.vmfb).with_suffix(".json").read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def _dispatch_count(result, compiler) -> int:
    """IREE CI's compstat number for one module: its scheduling statistics (the compile up
    to the executables' sources), cached, named by the plain compile's key."""
    from runner.base.paths import cache_dir
    from runner.goldens.plan import STATS_FILE_FLAG, STATS_FORMAT_FLAG, dispatch_count
    from runner.model.compile import scheduling_statistics

    stats = cache_dir() / "compstat" / result.key[:2] / f"{result.key}.json"
    if not stats.is_file():
        stats.parent.mkdir(parents=True, exist_ok=True)
        written = stats.with_suffix(f".{os.getpid()}.tmp")
        scheduling_statistics(result, (f"{STATS_FORMAT_FLAG}=json",
                                       f"{STATS_FILE_FLAG}={written}"), compiler)
        written.replace(stats)  # (none written: FileNotFoundError, the probe's failure)
    return dispatch_count(stats)


def _dispatches(compiled, out: Path, calls: int) -> dict[str, Any]:
    """Each stage's profile into dispatches.json; what probe.json keeps of it."""
    from runner.base.errors import recorded_name
    from runner.base.fileio import atomic_write_json
    from runner.bench.stages import profile_stages

    try:
        profiles = profile_stages(compiled, out / "dispatches", calls)
    except Exception as e:  # an optional measurement: recorded, never the build's verdict
        return {"status": "error", "note": f"{recorded_name(e)}: {e}"}
    atomic_write_json(out / DISPATCHES_FILE, profiles)
    stages = {stage: {"status": p["status"], "note": p.get("note"),
                      "dispatch_ms_per_call": p.get("per_call_ms", {}).get("dispatch_sum"),
                      "functions": p.get("functions")} for stage, p in profiles.items()}
    failed = next((p for p in profiles.values() if p["status"] != "ok"), None)
    if failed is not None and all(p["status"] != "ok" for p in profiles.values()):
        return {"status": failed["status"], "note": failed.get("note"), "stages": stages}
    return {"status": "ok", "file": DISPATCHES_FILE, "calls": calls, "stages": stages}


def _run_passes(profile: Profile, ids: list[int], out: Path, passes: int) -> dict[str, Any]:
    """The samples generated `passes` times (the first into `out`): each pass's seconds, and
    whether every pass made the same images, which a build that is not deterministic fails."""
    from runner.model.generate import generate

    seconds, digests = [], []
    for k in range(passes):
        result = generate(profile, ids, out if k == 0 else out / f"pass{k + 1}")
        seconds.append(round(result.seconds, 4))
        manifest = json.loads((result.out / "manifest.json").read_text())
        digests.append([s["sha256"] for s in manifest["samples"]])
    return {"samples": len(ids), "seconds": seconds,
            "samples_per_s": [len(ids) / max(s, 1e-9) for s in seconds],
            "repeatable": all(d == digests[0] for d in digests[1:])}


class WorkerCheckFailed(Exception):
    """The build's environment cannot start a worker (the check's own message)."""


def _worker_check(profile: Profile) -> dict[str, Any]:
    """`runner.batch.worker --check`'s check of the first worker's driver: its state, what
    it said and its seconds."""
    import contextlib
    import io

    from runner.batch.run import plan_for
    from runner.batch.worker import check_environment

    start = time.perf_counter()
    driver = plan_for(profile).workers[0].driver
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        rc = check_environment(driver)
    text = said.getvalue().strip().removeprefix("error: ")
    return {"state": "ok" if rc == 0 else "failed", "detail": text,
            "seconds": round(time.perf_counter() - start, 3)}


def _preflight(profile: Profile, out: Path, state: dict[str, Any]) -> None:
    state["stage"] = "preflight"
    _write(out, state)
    state["preflight"] = _worker_check(profile)
    _write(out, state)  # kept for the host, which judges a failure the environment's
    if state["preflight"]["state"] != "ok":
        raise WorkerCheckFailed(state["preflight"]["detail"])


def probe(profile_path: Path, ids: list[int], out: Path, passes: int, compstat: bool,
          dispatch_calls: int = 0) -> dict[str, Any]:
    state: dict[str, Any] = {"stage": "import", "ok": False, "pid": os.getpid()}
    out.mkdir(parents=True, exist_ok=True)
    _write(out, state)
    from runner.base.signals import import_held

    import_held("iree.runtime")  # a build whose runtime does not import is skipped

    from runner.base.iree_tools import compiler_info
    from runner.base.provenance import iree_provenance
    from runner.config.profile import load_profile
    from runner.model.compiled_model import compile_model

    compiler = compiler_info()
    state.update(iree=iree_provenance(), compiler={"path": compiler.path,
                                                   "version": compiler.version,
                                                   "commit": compiler.commit})
    profile = load_profile(str(profile_path))
    if passes:  # the pipeline runs: a worker's environment must start
        _preflight(profile, out, state)
    state["stage"] = "compile"
    _write(out, state)
    lay = profile.layout
    compiled = compile_model(profile, lay.batch_size, lay.vae_batch_size)
    modules: list[dict[str, Any]] = [
        {"mlir": Path(r.mlir).name, "seconds": round(_compile_seconds(r), 3), "cached": r.cached,
         "vmfb_bytes": Path(r.vmfb).stat().st_size, "key": r.key} for r in compiled.compiled]
    state["compile"] = {"modules": modules,
                        "seconds": round(sum(m["seconds"] for m in modules), 3),
                        "vmfb_bytes": sum(m["vmfb_bytes"] for m in modules)}
    if compstat:
        counts = [_dispatch_count(r, compiler) for r in compiled.compiled]
        for m, count in zip(modules, counts, strict=True):
            m["dispatch_count"] = count
        state["compile"]["dispatch_count"] = sum(counts)
    _write(out, state)
    if passes:
        state["stage"] = "run"
        _write(out, state)
        state["run"] = _run_passes(profile, ids, out, passes)
    if dispatch_calls:
        state["stage"] = "dispatches"
        _write(out, state)
        state["dispatches"] = _dispatches(compiled, out, dispatch_calls)
    state.update(stage="done", ok=True)
    _write(out, state)
    return state


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m runner.bisect.probe", description=__doc__,
                                allow_abbrev=False)
    p.add_argument("--profile", required=True, help="a standalone profile YAML")
    p.add_argument("--samples", required=True, help="sample ids, e.g. 0-3")
    p.add_argument("--out", required=True, help="where probe.json and images go")
    p.add_argument("--passes", type=int, default=1, help="generate passes (0: compile only)")
    p.add_argument("--compstat", action="store_true", help="also the dispatch count")
    p.add_argument("--dispatches", type=int, default=0, metavar="CALLS",
                   help="also each stage's dispatch profile over CALLS calls (0: none)")
    args = p.parse_args(argv)
    out = Path(args.out)
    start = time.perf_counter()
    from runner.accuracy.samples import parse_ids
    from runner.base.signals import exit_code, raised_as_interrupted, signal_name

    # A signal (Ctrl-C reaches the whole group) is raised between the runtime's calls, not in
    # the middle of one (runner.base.signals.deferred), and ignored once the probe is done.
    with raised_as_interrupted(restore=False):
        try:
            probe(Path(args.profile), list(parse_ids(args.samples)), out, args.passes,
                  args.compstat, args.dispatches)
            return 0
        except KeyboardInterrupt as e:
            _record_failure(out, start, e, interrupted=signal_name(e))
            return exit_code(e)
        except Exception as e:  # recorded for the host, which decides
            _record_failure(out, start, e)
            return 1


def _record_failure(out: Path, start: float, error: BaseException,
                    interrupted: str | None = None) -> None:
    """The stage the probe was in and what ended it, into probe.json. The traceback's
    frames are cleared here: they hold the IREE runtime's objects, which must be freed
    while the runtime still is, not by the interpreter's shutdown (a crash there)."""
    from runner.base.errors import recorded_name

    path = out / PROBE_FILE
    state = json.loads(path.read_text()) if path.is_file() else {"stage": "import"}
    state.update(ok=False, error=f"{recorded_name(error)}: {error}",
                 traceback=traceback.format_exc()[-4000:],
                 seconds=round(time.perf_counter() - start, 3))
    if interrupted:
        state["interrupted"] = interrupted
    from runner.base.errors import clear_frames

    clear_frames(error)
    _write(out, state)
    how = f"interrupted ({interrupted})" if interrupted else f"failed: {error}"
    print(f"probe: {state['stage']} {how}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
