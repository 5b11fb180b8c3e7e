"""`iree-compile` behind a content-addressed cache: a second run compiles nothing.

The key covers everything that changes the output: the MLIR bytes, every flag, the bytes
of any file a flag points at (tuning specs), and the compiler's version and commit. The
compiler is the one runner.base.iree_tools finds (--iree-tools / $IREE_TOOL_PATH, then PATH, then
the installed iree-base-compiler), so a source build placed first on PATH wins over the
wheel, as in AMD's from-source harness image.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from runner.base.errors import RunnerError
from runner.base.fileio import atomic_write_json, sha256_file
from runner.base.iree_tools import CompilerInfo, compiler_info
from runner.base.paths import cache_dir
from runner.base.progress import echo
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


def _run_compiler(argv: list[str], mlir: Path) -> subprocess.CompletedProcess:
    """iree-compile with a time limit (`$RUNNER_COMPILE_TIMEOUT` s, default 3600), tried a
    second time after a timeout: iree-compile 3.13 was seen to hang, rarely and not
    reproducibly, at 0% CPU on a tiny module that compiles in 4 s."""
    limit = float(os.environ.get("RUNNER_COMPILE_TIMEOUT", "3600"))
    for attempt in (1, 2):
        try:
            return subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=limit)
        except subprocess.TimeoutExpired:
            echo(f"warning: iree-compile of {mlir.name} exceeded {limit:.0f}s "
                 f"(attempt {attempt} of 2)")
    raise RunnerError(f"iree-compile did not finish within {limit:.0f}s, twice", where=str(mlir),
                      fix=f"raise RUNNER_COMPILE_TIMEOUT, or reproduce: {shlex.join(argv)}")


def compiler_errors(stderr: str) -> str:
    """iree-compile's first `error:` line, then the tail of what it printed: the first line
    says what went wrong (an unknown target, a bad flag), the IR dump after it runs long."""
    text = stderr.strip()
    first = next((line for line in text.splitlines() if "error:" in line), "")
    tail = text[-2000:]
    return tail if not first or first in tail else f"{first}\n...\n{tail}"


def compile_key(mlir: Path, flags: tuple[str, ...], compiler: CompilerInfo) -> str:
    h = hashlib.sha256()
    for part in (sha256_file(mlir), *flags, json.dumps(_flag_files(flags), sort_keys=True),
                 compiler.version, compiler.commit):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def compile_mlir(mlir: Path, flags: tuple[str, ...], *, dry_run: bool = False,
                 compiler: CompilerInfo | None = None) -> CompileResult:
    """Returns the cached vmfb for (mlir, flags, compiler), compiling it on a miss."""
    compiler = compiler or compiler_info()
    if not mlir.is_file():
        if not dry_run:
            raise RunnerError("MLIR file not found", where=str(mlir),
                              fix="run `runner export tiny`, or fix the model config's `mlir`")
        key, shard = "<key: sha256 of the MLIR, flags and compiler>", "<key[:2]>"
    else:
        key = compile_key(mlir, flags, compiler)
        shard = key[:2]
    out_dir = cache_dir() / "vmfb" / shard
    vmfb = out_dir / f"{key}.vmfb"
    command = [compiler.path, str(mlir), *flags, "-o", str(vmfb)]
    if not vmfb.is_file():  # a CUDA/HIP chip this compiler does not know: said up front
        check_gpu_target(flags, compiler, str(mlir))
    if dry_run or vmfb.is_file():
        digest = sha256_file(vmfb) if vmfb.is_file() else ""
        return CompileResult(str(mlir), str(vmfb), key, vmfb.is_file(), 0.0, command, digest)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = vmfb.with_suffix(f".{time.monotonic_ns()}.tmp")
    start = time.perf_counter()
    proc = _run_compiler([*command[:-1], str(tmp)], mlir)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RunnerError(f"iree-compile failed (exit {proc.returncode}):\n"
                          f"{compiler_errors(proc.stderr)}", where=str(mlir),
                          fix=f"reproduce with: {shlex.join(command)}")
    tmp.replace(vmfb)
    result = CompileResult(str(mlir), str(vmfb), key, False, seconds, command, sha256_file(vmfb))
    atomic_write_json(vmfb.with_suffix(".json"), {**asdict(result), **asdict(compiler)})
    echo(f"compiled {mlir.name} in {seconds:.1f}s -> {vmfb.name}")
    return result
