"""`iree-compile` behind a content-addressed cache: a second run compiles nothing.

The key covers everything that changes the output: the MLIR bytes, every flag, the bytes
of any file a flag points at (tuning specs), and the compiler's version and commit. The
compiler is the one runner.base.iree_tools finds (--iree-tools / $IREE_TOOL_PATH, then PATH, then
the installed iree-base-compiler), so a source build placed first on PATH wins over the
wheel, as in AMD's from-source harness image.

Where no iree-compile exists (a GPU node given a compile cache made on another machine),
the vmfbs are found through an index by MLIR: `vmfb/by-mlir/<sha256 of the MLIR>/<key>.json`
records each vmfb compiled from that MLIR with its flags and compiler. A request matches an
entry when the key it would have under that entry's compiler (the flags recomputed for it:
the HIP chip flag depends on the version) is the entry's key. Exactly one match is used and
reported ("compiled elsewhere by iree-compile X @ commit"); several, or none, are errors
naming them, or the exact compile command to run where the compiler is.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from runner.base.errors import BadInput, RunnerError, StepFailed, ToolFailed
from runner.base.fileio import atomic_write_json, sha256_file
from runner.base.iree_tools import CompilerInfo, compiler_info
from runner.base.paths import cache_dir
from runner.base.progress import echo
from runner.inputs.jsonfile import read_json
from runner.model.gpu_targets import check_gpu_target

# Flags naming a file iree-compile writes: what it holds afterwards is no input of the key.
OUTPUT_FILE_FLAGS = ("--iree-scheduling-dump-statistics-file=",)


def _flag_files(flags: tuple[str, ...]) -> dict[str, str]:
    """sha256 of every existing file a `--flag=path` names, so an edited spec recompiles."""
    hashes = {}
    for flag in flags:
        _, eq, value = flag.partition("=")
        if eq and value and not flag.startswith(OUTPUT_FILE_FLAGS) and Path(value).is_file():
            hashes[value] = sha256_file(Path(value))
    return hashes


@dataclass(frozen=True)
class CompileResult:
    mlir: str
    vmfb: str
    key: str
    cached: bool
    seconds: float
    command: list[str]
    vmfb_sha256: str = ""  # empty for a dry run
    # "iree-compile 3.13.0 @ <commit>", and whether that was on another machine (this one
    # has no iree-compile: the vmfb came with a carried compile cache).
    compiled_by: str = ""
    elsewhere: bool = False


def _run_compiler(argv: list[str], mlir: Path) -> subprocess.CompletedProcess:
    """iree-compile with a time limit (`$RUNNER_COMPILE_TIMEOUT` s, default 3600), tried a
    second time after a timeout or a stall: iree-compile 3.13 was seen to hang, rarely and
    not reproducibly, at 0% CPU on a tiny module that compiles in 4 s. A compile that used
    no CPU for `$RUNNER_COMPILE_STALL` s (default 120; a working compiler always uses some)
    is taken as hung then, not after the hour of the limit."""
    limit = float(os.environ.get("RUNNER_COMPILE_TIMEOUT", "3600"))
    stall = float(os.environ.get("RUNNER_COMPILE_STALL", "120"))
    for attempt in (1, 2):
        done = _compile_once(argv, limit, stall)
        if isinstance(done, subprocess.CompletedProcess):
            return done
        echo(f"warning: iree-compile of {mlir.name} {done} (attempt {attempt} of 2)")
    raise ToolFailed(f"iree-compile did not finish within {limit:.0f}s, twice (or hung: no "
                     f"CPU used for {stall:.0f}s)", where=str(mlir),
                     fix="raise RUNNER_COMPILE_TIMEOUT (and RUNNER_COMPILE_STALL), or "
                     f"reproduce: {shlex.join(argv)}")


def _compile_once(argv: list[str], limit: float, stall: float
                  ) -> subprocess.CompletedProcess | str:
    """The finished compile, or why it was killed ("exceeded 300s", "used no CPU for
    120s"). Its output goes to files, so a long log never blocks it on a full pipe."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            why = _watch(proc, limit, stall)
        finally:
            if proc.poll() is None:  # stopped, or a signal (Interrupted) on the way out
                proc.kill()
                proc.wait()
        if why:
            return why
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(argv, proc.returncode,
                                           out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))


def _watch(proc: subprocess.Popen, limit: float, stall: float) -> str:
    """Waits for `proc`: "" once it exits, or the reason to stop it."""
    start = moved = time.monotonic()
    used = _tree_cpu_seconds(proc.pid)
    while True:
        try:
            proc.wait(timeout=min(1.0, max(limit, 0.01)))
            return ""
        except subprocess.TimeoutExpired:
            pass
        now, cpu = time.monotonic(), _tree_cpu_seconds(proc.pid)
        if cpu is None or used is None or cpu > used:
            used, moved = cpu, now
        if now - start >= limit:
            return f"exceeded {limit:.0f}s"
        if now - moved >= stall:
            return f"used no CPU for {stall:.0f}s (hung)"


def _tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds used by `pid`, its threads and its descendants (Linux /proc); None where
    that cannot be read (then only the time limit applies)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    try:
        while todo:
            each = todo.pop()
            stat = Path(f"/proc/{each}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            total += sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
            for task in Path(f"/proc/{each}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return None
    return total


def compiler_errors(stderr: str) -> str:
    """iree-compile's first `error:` line, then the tail of what it printed: the first line
    says what went wrong (an unknown target, a bad flag), the IR dump after it runs long."""
    text = stderr.strip()
    first = next((line for line in text.splitlines() if "error:" in line), "")
    tail = text[-2000:]
    return tail if not first or first in tail else f"{first}\n...\n{tail}"


def compile_key(mlir: Path, flags: tuple[str, ...], compiler: CompilerInfo) -> str:
    return _key(sha256_file(mlir), flags, compiler)


def _key(mlir_sha256: str, flags: tuple[str, ...], compiler: CompilerInfo) -> str:
    h = hashlib.sha256()
    for part in (mlir_sha256, *flags, json.dumps(_flag_files(flags), sort_keys=True),
                 compiler.version, compiler.commit):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _named(compiler: CompilerInfo) -> str:
    return f"iree-compile {compiler.version} @ {compiler.commit}"


def vmfb_dir() -> Path:
    return cache_dir() / "vmfb"


def vmfb_path(key: str) -> Path:
    return vmfb_dir() / key[:2] / f"{key}.vmfb"


def index_entry_path(mlir_sha256: str, key: str) -> Path:
    return vmfb_dir() / "by-mlir" / mlir_sha256[:2] / mlir_sha256 / f"{key}.json"


def _record(mlir_sha256: str, result: CompileResult, flags: tuple[str, ...],
            compiler: CompilerInfo) -> None:
    """The MLIR index's entry for a vmfb in the cache (written once; small)."""
    path = index_entry_path(mlir_sha256, result.key)
    if not path.is_file():
        atomic_write_json(path, {
            "key": result.key, "mlir_sha256": mlir_sha256, "flags": list(flags),
            "compiler": {"version": compiler.version, "commit": compiler.commit},
            "vmfb_sha256": result.vmfb_sha256, "command": result.command})


def compile_mlir(mlir: Path, flags: tuple[str, ...], *, dry_run: bool = False,
                 compiler: CompilerInfo | None = None) -> CompileResult:
    """Returns the cached vmfb for (mlir, flags, compiler), compiling it on a miss."""
    compiler = compiler or compiler_info()
    if not mlir.is_file():
        if not dry_run:
            raise BadInput("MLIR file not found", where=str(mlir),
                           fix="run `runner export tiny`, or fix the model config's `mlir`")
        key, shard = "<key: sha256 of the MLIR, flags and compiler>", "<key[:2]>"
        mlir_sha256 = ""
    else:
        mlir_sha256 = sha256_file(mlir)
        key = _key(mlir_sha256, flags, compiler)
        shard = key[:2]
    out_dir = vmfb_dir() / shard
    vmfb = out_dir / f"{key}.vmfb"
    command = [compiler.path, str(mlir), *flags, "-o", str(vmfb)]
    if not vmfb.is_file():  # a CUDA/HIP chip this compiler does not know: said up front
        check_gpu_target(flags, compiler, str(mlir))
    if dry_run or vmfb.is_file():
        return _cached(mlir, mlir_sha256, vmfb, key, command, flags, compiler, dry_run)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _compiling(vmfb):
        if vmfb.is_file():  # compiled by another process while this one waited
            return _cached(mlir, mlir_sha256, vmfb, key, command, flags, compiler, dry_run)
        return _compile(mlir, mlir_sha256, vmfb, key, command, flags, compiler)


def _cached(mlir: Path, mlir_sha256: str, vmfb: Path, key: str, command: list[str],
            flags: tuple[str, ...], compiler: CompilerInfo, dry_run: bool) -> CompileResult:
    digest = sha256_file(vmfb) if vmfb.is_file() else ""
    result = CompileResult(str(mlir), str(vmfb), key, vmfb.is_file(), 0.0, command, digest,
                           _named(compiler))
    if digest and not dry_run:  # vmfbs cached before the index: listed on first use
        _record(mlir_sha256, result, flags, compiler)
    return result


@contextlib.contextmanager
def _compiling(vmfb: Path) -> Iterator[None]:
    """Held while this process compiles `vmfb`: another one that needs the same module (a
    second worker, a second runner command on the same cache) waits for it and then finds
    it cached, instead of running the same iree-compile beside it. The kernel releases the
    lock of a process that dies; the empty lock file stays beside the module."""
    with open(vmfb.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"compile: another process is compiling {vmfb.name}; waiting for it",
                  file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _compile(mlir: Path, mlir_sha256: str, vmfb: Path, key: str, command: list[str],
             flags: tuple[str, ...], compiler: CompilerInfo) -> CompileResult:
    tmp = vmfb.with_suffix(f".{time.monotonic_ns()}.tmp")
    start = time.perf_counter()
    proc = _run_compiler([*command[:-1], str(tmp)], mlir)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise ToolFailed(f"iree-compile failed (exit {proc.returncode}):\n"
                         f"{compiler_errors(proc.stderr)}", where=str(mlir),
                         fix=f"reproduce with: {shlex.join(command)}")
    tmp.replace(vmfb)
    result = CompileResult(str(mlir), str(vmfb), key, False, seconds, command, sha256_file(vmfb),
                           _named(compiler))
    atomic_write_json(vmfb.with_suffix(".json"), {**asdict(result), **asdict(compiler)})
    _record(mlir_sha256, result, flags, compiler)
    echo(f"compiled {mlir.name} in {seconds:.1f}s -> {vmfb.name}")
    return result


FlagsFor = Callable[[CompilerInfo], tuple[str, ...]]


def compile_or_find(mlir: Path, flags_for: FlagsFor, compiler: CompilerInfo | None, *,
                    dry_run: bool = False, recompile_hint: str = "") -> CompileResult:
    """With a compiler here: `compile_mlir` (today's cache). Without one: the one vmfb the
    compile cache holds for this MLIR and these flags, compiled elsewhere."""
    if compiler is not None:
        return compile_mlir(mlir, flags_for(compiler), dry_run=dry_run, compiler=compiler)
    return compiled_elsewhere(mlir, flags_for, recompile_hint)


def _entries(mlir_sha256: str) -> list[dict]:
    folder = index_entry_path(mlir_sha256, "x").parent
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            out.append(read_json(path, what="compile cache entry"))
        except RunnerError as e:  # a damaged entry is said, not fatal: others may match
            echo(f"warning: {e}")
    return out


def cached_compilers() -> list[tuple[str, str]]:
    """(version, commit) of every compiler the compile cache's MLIR index names: on a machine
    without iree-compile, the one that compiled its carried modules."""
    found = set()
    for path in vmfb_dir().glob("by-mlir/*/*/*.json"):
        try:
            raw = read_json(path, what="compile cache entry").get("compiler")
        except RunnerError:
            continue
        if isinstance(raw, dict):
            found.add((str(raw.get("version")), str(raw.get("commit"))))
    return sorted(found)


def _carried_matches(digest: str, flags_for: FlagsFor
                     ) -> list[tuple[dict, CompilerInfo]]:
    """The cache entries of the MLIR with this sha256 whose compiler, given the flags this
    request gives it, made a vmfb that is still in the cache: what may stand for a compile
    on a machine without the compiler."""
    matches = []
    for entry in _entries(digest):
        raw = entry.get("compiler")
        if not isinstance(raw, dict) or not isinstance(entry.get("key"), str):
            continue
        compiler = CompilerInfo("iree-compile", str(raw.get("version")), str(raw.get("commit")))
        if (_key(digest, flags_for(compiler), compiler) == entry["key"]
                and vmfb_path(entry["key"]).is_file()):
            matches.append((entry, compiler))
    return matches


def compiled_elsewhere(mlir: Path, flags_for: FlagsFor, recompile_hint: str = ""
                       ) -> CompileResult:
    """The vmfb of `mlir` compiled on another machine with the flags this request gives that
    machine's compiler; see the module doc."""
    if not mlir.is_file():
        raise BadInput("MLIR file not found", where=str(mlir),
                       fix="carry the model's files with the compile cache (`runner "
                       "compile --out DIR` gathers both)")
    digest = sha256_file(mlir)
    matches = _carried_matches(digest, flags_for)
    if not matches:
        from runner.base.iree_tools import nominal_compiler

        command = ["iree-compile", str(mlir), *flags_for(nominal_compiler()), "-o",
                   f"{mlir.stem}.vmfb"]
        raise ToolFailed(
            f"no iree-compile on this machine, and the compile cache ({vmfb_dir()}) holds no "
            f"vmfb of {mlir.name} (sha256 {digest[:16]}...) compiled with these flags",
            where=str(mlir),
            fix="on a machine with the compiler, run "
            + (f"`{recompile_hint}` and carry DIR here as $RUNNER_CACHE_DIR; the module's "
               "command is " if recompile_hint else "")
            + f"`{shlex.join(command)}`; or install iree-base-compiler here")
    if len(matches) > 1:
        names = "; ".join(f"{_named(c)} (vmfb/{e['key'][:2]}/{e['key'][:12]}...)"
                          for e, c in matches)
        raise ToolFailed(
            f"no iree-compile on this machine, and the compile cache holds {len(matches)} "
            f"vmfbs of {mlir.name} with these flags, by different compilers: {names}",
            where=str(vmfb_dir()),
            fix="carry one compiler's modules (`runner compile --out DIR` on the machine that "
            "compiles, DIR as $RUNNER_CACHE_DIR here), or put the compiler that should "
            "decide on this machine (`runner --iree-tools DIR`, or PATH)")
    entry, compiler = matches[0]
    vmfb = vmfb_path(entry["key"])
    actual = sha256_file(vmfb)
    if entry.get("vmfb_sha256") and actual != entry["vmfb_sha256"]:
        raise StepFailed("the carried vmfb is not the file its compiler wrote (sha256 "
                         "differs from the cache entry's)", where=str(vmfb),
                         fix="copy the compile cache again")
    recorded = entry.get("command")
    command = [str(c) for c in recorded] if isinstance(recorded, list) else []
    return CompileResult(str(mlir), str(vmfb), entry["key"], True, 0.0, command, actual,
                         _named(compiler), True)


def scheduling_statistics(result: CompileResult, flags: tuple[str, ...],
                          compiler: CompilerInfo) -> None:
    """IREE's stream scheduling statistics of a compiled module (IREE CI's compstat: the
    dispatch count), written where `flags` (the statistics flags) say. The compile stops
    once the executables' sources are formed: the statistics come from the stream phase
    before, so they are the full compile's byte for byte, without its code generation, most
    of its time."""
    mlir = Path(result.mlir)
    argv = [compiler.path, str(mlir), *result.command[2:-2], *flags,
            "--compile-to=executable-sources", "-o", os.devnull]
    proc = _run_compiler(argv, mlir)
    if proc.returncode != 0:
        raise ToolFailed(f"iree-compile failed (exit {proc.returncode}):\n"
                         f"{compiler_errors(proc.stderr)}", where=str(mlir),
                         fix=f"reproduce with: {shlex.join(argv)}")
