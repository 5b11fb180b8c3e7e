#!/usr/bin/env python3
"""Runs IREE CI's own test-suite runners beside `runner goldens check` and `runner bench
goldens` on the tiny suites and on mutated copies of them, and reports, test by test, whether
the verdicts and the numbers agree.

IREE's runners come from a checkout of iree-org/iree-test-suites (nothing of theirs is copied
here): `torch_models/` (pytest_iree) for goldens/tiny-torch, `sharktank_models/quality_tests`
and `benchmarks` for goldens/tiny and goldens/tiny-bench, and, with --regression-checkout (a
checkout of a8791d2^, the last commit that has it), `test_model_threshold.py` for the
regression schema. Their files must name Azure blob URLs, so each case gets two copies of
its suite: IREE's, whose references become `https://sharkpublic.blob.core.windows.net/...`
URLs served from this machine (a local HTTPS proxy the Azure SDK reaches through
HTTPS_PROXY, with a throwaway certificate it trusts through REQUESTS_CA_BUNDLE), and ours,
whose files are copied beside the test files that name them (the runner refuses a reference
out of a test file's folder other than its shipped assets). Each mutation is applied to both.

Times are measured twice and cannot be equal; a time verdict is made robust by the mutation
itself (a golden far above or below the measurement), and the times are reported.

Usage (see docs/goldens.md for the setup):
  scripts/iree_conformance.py --iree-test-suites /tmp/its --python /tmp/its-venv/bin/python \\
      --work /tmp/conformance [--regression-checkout /tmp/its-regression] [--only NAME ...]
Exit 0 when every compared verdict and number agrees, 1 otherwise.
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime
import hashlib
import http.server
import json
import os
import shutil
import socketserver
import ssl
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.config.sources import resolve_source  # noqa: E402
from runner.goldens.fields import IREE_TEST_SUITES_COMMIT  # noqa: E402
from runner.goldens.random_weights import archive_path  # noqa: E402

GOLDENS = REPO / "goldens"
HOST = "sharkpublic.blob.core.windows.net"
STATS = ["--iree-scheduling-dump-statistics-format=json",
         "--iree-scheduling-dump-statistics-file=compilation_info.json"]


# --- Azure blob storage on this machine -------------------------------------------------

class _Blobs(http.server.BaseHTTPRequestHandler):
    """HEAD and GET (with x-ms-range) of the blobs in `server.blobs`, as Azure answers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _find(self) -> bytes | None:
        data = self.server.blobs.get(self.path.split("?", 1)[0])  # type: ignore[attr-defined]
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
        return data

    def _head(self, status: int, data: bytes, length: int) -> None:
        self.send_response(status)
        self.send_header("ETag", '"0x1"')
        self.send_header("Last-Modified", "Sat, 22 Nov 2025 00:00:00 GMT")
        self.send_header("x-ms-blob-type", "BlockBlob")
        self.send_header("Content-Type", "application/octet-stream")
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
        self.send_header("Content-MD5" if status == 200 else "x-ms-blob-content-md5", md5)
        self.send_header("Content-Length", str(length))

    def do_HEAD(self):
        data = self._find()
        if data is not None:
            self._head(200, data, len(data))
            self.end_headers()

    def do_GET(self):
        data = self._find()
        if data is None:
            return
        rng = self.headers.get("x-ms-range") or self.headers.get("Range")
        if not rng:
            self._head(200, data, len(data))
            self.end_headers()
            self.wfile.write(data)
            return
        first, _, last = rng.removeprefix("bytes=").partition("-")
        a, b = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
        self._head(206, data, b - a + 1)
        self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.end_headers()
        self.wfile.write(data[a:b + 1])


class _Tunnel(socketserver.StreamRequestHandler):
    """An HTTPS proxy that answers CONNECT itself: TLS with our certificate, then Azure."""

    def handle(self):
        line = self.rfile.readline().decode("latin-1")
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        if not line.startswith(f"CONNECT {HOST}:"):
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        tls = self.server.tls.wrap_socket(self.connection, server_side=True)  # type: ignore
        _Blobs(tls, self.client_address, self.server)


class AzureOnThisMachine(socketserver.ThreadingTCPServer):
    daemon_threads = True

    def __init__(self, folder: Path):
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.blobs: dict[str, bytes] = {}
        self.cert = folder / "azure-cert.pem"
        key = folder / "azure-key.pem"
        _self_signed(self.cert, key)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(self.cert, key)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def put(self, data: bytes, name: str) -> str:
        path = f"/sharkpublic/conformance/{hashlib.sha256(data).hexdigest()[:16]}/{name}"
        self.blobs[path] = data
        return f"https://{HOST}{path}"

    def env(self) -> dict[str, str]:
        return {"HTTPS_PROXY": f"http://127.0.0.1:{self.server_address[1]}",
                "REQUESTS_CA_BUNDLE": str(self.cert), "NO_PROXY": ""}


def _self_signed(cert: Path, key: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.timezone.utc)
    built = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
             .public_key(private.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
             .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
             .sign(private, hashes.SHA256()))
    cert.write_bytes(built.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))


# --- suites and their two copies -------------------------------------------------------

@dataclass
class Suite:
    """Test files (relative path -> JSON) and the folder each came from (its references
    are relative to it)."""

    layout: str  # torch | quality | regression
    files: dict[str, dict]
    origin: dict[str, Path]
    bench: dict[str, dict] = field(default_factory=dict)  # older benchmark files


def _load(folder: Path, rel: str) -> dict:
    return json.loads((folder / rel).read_text())


# The shipped time goldens are tight (a loaded machine misses them now and then); a time
# verdict is compared only where a case sets the golden far from the measurement, so the
# other cases get goldens no run can miss.
ROOMY_MS = 1e5


def torch_suite() -> Suite:
    root = GOLDENS / "tiny-torch"
    rels = sorted(str(p.relative_to(root)) for p in root.rglob("*.json"))
    files = {f"tiny-torch/{r}": _load(root, r) for r in rels}
    for raw in files.values():
        if "golden_time_ms" in raw:
            raw["golden_time_ms"] = ROOMY_MS
    return Suite("torch", files, {f"tiny-torch/{r}": (root / r).parent for r in rels})


def quality_suite(names=("clip", "vae")) -> Suite:
    files, origin, bench = {}, {}, {}
    for name in names:
        raw = _load(GOLDENS / "tiny", f"{name}_cpu.json")
        raw["compiler_flags"] = [*raw["compiler_flags"], *STATS]  # as IREE CI's files have
        files[f"tiny/{name}_cpu.json"] = raw
        origin[f"tiny/{name}_cpu.json"] = GOLDENS / "tiny"
        b = _load(GOLDENS / "tiny-bench", f"{name}_cpu.json")
        b.pop("quality_test")
        b["golden_time_ms"] = {"cpu": ROOMY_MS}
        bench[f"tiny/{name}_cpu.json"] = b
    return Suite("quality", files, origin, bench)


def regression_suite(names=("clip", "vae")) -> Suite:
    files, origin = {}, {}
    for name in names:
        q = _load(GOLDENS / "tiny", f"{name}_cpu.json")
        raw = {k: q[k] for k in ("inputs", "outputs", "real_weights", "mlir")}
        flags = [f for f in q["compiler_flags"] if not f.startswith("--iree-hal-target-device")
                 and not f.startswith("--iree-hal-local-target-device-backends")]
        raw.update(cpu_compiler_flags=flags, cpu_threshold_args=q["threshold_args"],
                   run_cpu_function=q["run_function"], rocm_tests_only=False)
        files[f"tinyconf/{name}.json"] = raw
        origin[f"tinyconf/{name}.json"] = GOLDENS / "tiny"
    return Suite("regression", files, origin)


REF_KEYS = {"torch": ("url", "mlir"), "quality": ("source", "mlir", "pipeline_mlir",
                                                  "real_weights"),
            "regression": ("source", "mlir", "pipeline_mlir", "real_weights")}


def _rewrite(obj, keys: tuple[str, ...], fn: Callable[[str, str], str]):
    """A copy of `obj` with every reference (a string under one of `keys`) replaced."""
    if isinstance(obj, dict):
        return {k: fn(v, k) if k in keys and isinstance(v, str) else _rewrite(v, keys, fn)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rewrite(v, keys, fn) for v in obj]
    return obj


# A vmfb embeds the path of the MLIR it was compiled from (its folder, and its file name a
# few dozen times), so its size depends on the lengths of both. IREE's runners keep the MLIRs
# they download in folders shared by every case: the torch runner under
# `<artifacts>/azure/<name>` (the name from `manifest.json`, which write_copies pre-seeds),
# the sharktank runners under `<IREE_TEST_FILES>/artifacts/<model>_<submodel>/<name>`. Ours
# must lie beside the test file that names it (the runner refuses anything else outside its
# shipped assets), in the case's folder, so it gets IREE's file name in a padding folder that
# makes its folder's path as long as IREE's. The shared folders' names leave room for the
# longest case name ("r" for room).
TORCH_ARTIFACTS = "torch-artifacts-" + "r" * 48
SHARKTANK_FILES = "sk-iree-" + "r" * 48
ASSETS = REPO / "runner" / "assets"


def iree_mlir_path(suite: Suite, rel: str, work: Path, name: str) -> Path:
    """Where IREE's runner keeps (and compiles) the MLIR `name` that `rel` names."""
    if suite.layout == "torch":
        return work / TORCH_ARTIFACTS / "azure" / name
    model, file_name = Path(rel).parent.name, Path(rel).stem
    submodel = file_name.rsplit("_", 1)[0]
    return work / SHARKTANK_FILES / "artifacts" / f"{model}_{submodel}" / name


def padded_copy(src: Path, home: Path, iree: Path) -> Path:
    """A copy of `src` as `home/<padding>/<IREE's file name>`, its folder's path as long as
    IREE's."""
    room = len(str(iree.parent)) - len(str(home / "p"))
    if room < 0:
        raise SystemExit(f"{home} is {-room} characters too long to match IREE's MLIR folder "
                         f"{iree.parent}: lengthen TORCH_ARTIFACTS / SHARKTANK_FILES")
    out = home / ("p" * (room + 1)) / iree.name
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, out)
    assert len(str(out.parent)) == len(str(iree.parent)) and out.name == iree.name, (out, iree)
    return out


def beside(src: Path, home: Path) -> str:
    """`src` copied into `home` (a test file's folder), named relative to it; a file of
    the runner's shipped assets stays where it is, named by absolute path."""
    if src.is_relative_to(ASSETS):
        return str(src)
    out = home / src.name
    if out.is_file() and out.read_bytes() != src.read_bytes():
        raise SystemExit(f"two files named {src.name} would land in {home}")
    shutil.copyfile(src, out)
    return src.name


@dataclass
class MlirPair:
    """The MLIR one test file compiles: where IREE's runner keeps it and our copy (the same
    file name, folders of the same length)."""

    iree: Path
    ours: Path


def write_copies(suite: Suite, case_dir: Path, azure: AzureOnThisMachine,
                 work: Path) -> list[MlirPair]:
    """ours/: every file a test file names is copied beside it (the runner's shipped assets
    named where they are); iree/: references as Azure URLs served from here. The MLIRs both
    compile, where vmfb sizes are compared (torch, quality, bench), lie at paths of the same
    length (see TORCH_ARTIFACTS); the regression schema reports no sizes and names the
    shipped MLIR."""
    manifest_path = work / TORCH_ARTIFACTS / "azure" / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    pairs: list[MlirPair] = []
    for rel, raw in suite.files.items():
        base = suite.origin[rel]
        home = case_dir / "ours" / Path(rel).parent
        home.mkdir(parents=True, exist_ok=True)

        def local(ref: str, key: str, base=base, rel=rel, home=home) -> str:
            path = resolve_source(ref, base_dir=base).resolve()
            if key != "mlir" or suite.layout == "regression":
                return beside(path, home)
            name = path.name
            if suite.layout == "torch":
                name = f"{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}-{path.name}"
                manifest[azure.put(path.read_bytes(), path.name)] = name
            iree = iree_mlir_path(suite, rel, work, name)
            pairs.append(MlirPair(iree, padded_copy(path, home, iree)))
            return str(pairs[-1].ours.relative_to(home))

        def url(ref: str, key: str, base=base) -> str:
            path = resolve_source(ref, base_dir=base).resolve()
            name = "real_weights.irpa" if key == "real_weights" else path.name
            return azure.put(path.read_bytes(), name)

        for side, fn in (("ours", local), ("iree", url)):
            out = case_dir / side / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(_rewrite(raw, REF_KEYS[suite.layout], fn), indent=1))
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=1))
    for rel, raw in suite.bench.items():
        for side in ("ours", "iree"):
            out = case_dir / side / "bench" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(raw, indent=1))
    return pairs


def misplaced(pairs: list[MlirPair]) -> str:
    """After IREE's run: the MLIRs it did not keep where iree_mlir_path says (its vmfb sizes
    would then not be comparable with ours), as a message; empty when all are there."""
    missing = sorted({str(p.iree) for p in pairs if not p.iree.is_file()})
    return f"IREE's MLIR not at {', '.join(missing)}: vmfb sizes not comparable" \
        if missing else ""


# --- running both ----------------------------------------------------------------------

@dataclass
class Verdict:
    status: str  # passed | failed | xfailed | skipped | missing
    numbers: dict = field(default_factory=dict)
    message: str = ""


def junit(path: Path) -> dict[str, Verdict]:
    found: dict[str, Verdict] = {}
    if not path.is_file():
        return found
    for case in ET.parse(path).getroot().iter("testcase"):
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, message = "failed", (child.get("message") or "")[:300]
            elif child.tag == "skipped":
                status = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                message = (child.get("message") or "")[:300]
        name = case.get("name", "")
        prior = found.get(name)
        if prior is None or prior.status == "passed":
            found[name] = Verdict(status, message=message)
    return found


def ours_status(status: str) -> str:
    return {"error": "failed", "unchecked": "passed"}.get(status, status)


def run(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> int:
    with open(log, "w") as f:
        return subprocess.run(argv, cwd=cwd, env={**os.environ, **env}, stdout=f,
                              stderr=subprocess.STDOUT, check=False, timeout=1800).returncode


def runner(args: list[str], log: Path) -> int:
    """Our runner. The sharktank suites get a compile cache of their own: a cached vmfb keeps
    the MLIR path of its first compile, and the torch suite compiles the same MLIR with the
    same flags from a path of another length (see TORCH_ARTIFACTS)."""
    cache = Path(os.environ["RUNNER_CACHE_DIR"])
    if "/tiny-torch" not in " ".join(args):
        cache = cache.with_name(cache.name + "-sharktank")
    return run([sys.executable, "-m", "runner", *args], REPO,
               {"PYTHONPATH": str(REPO), "RUNNER_CACHE_DIR": str(cache)}, log)


def _ours(command: list[str], folder: Path, out: Path, extra: Sequence[str], results: str,
          key: str, numbers: Callable[[dict], dict]) -> dict[str, Verdict]:
    """Runs one of our golden commands on `folder` into `out` and reads its verdicts alike,
    whichever it is: each test's status, `numbers` of its record (in the list `key` of the
    file `results`) and message; a refusal (exit 2, or no results file) is one "*" verdict
    holding the log's tail."""
    code = runner([*command, str(folder), "--out", str(out), *extra], out.with_suffix(".log"))
    path = out / results
    if code == 2 or not path.is_file():
        return {"*": Verdict("refused", message=out.with_suffix(".log").read_text()[-300:])}
    return {r["name"].rsplit("/", 1)[1]: Verdict(ours_status(r["status"]), numbers(r),
                                                 r["message"][:300])
            for r in json.loads(path.read_text())[key]}


def ours_check(folder: Path, out: Path, extra: Sequence[str] = ()) -> dict[str, Verdict]:
    return _ours(["goldens", "check"], folder, out, extra, "results.json", "results",
                 lambda r: {s["name"]: s["measured"] for s in r["compile_stats"]})


def _bench_numbers(r: dict) -> dict:
    """A bench record's numbers: each check's measured value and limit, the dispatch count and
    the module's size where measured."""
    numbers = {c["name"]: c["measured"] for c in r["checks"]}
    numbers.update({f"{c['name']}_limit": c["limit"] for c in r["checks"]})
    if r["dispatch_count"] is not None:
        numbers["dispatch_count"] = r["dispatch_count"]
    if r["size_bytes"] is not None:
        numbers["size_bytes"] = r["size_bytes"]
    return numbers


def ours_bench(folder: Path, out: Path, extra: list[str]) -> dict[str, Verdict]:
    return _ours(["bench", "goldens"], folder, out, extra, "bench.json", "goldens",
                 _bench_numbers)


@dataclass
class Env:
    its: Path
    python: str
    work: Path
    azure: AzureOnThisMachine
    regression: Path | None

    def iree_env(self, extra: dict[str, str]) -> dict[str, str]:
        return {**self.azure.env(), "PYTHONPATH": str(self.its / "sharktank_models"), **extra}


def iree_torch(env: Env, case_dir: Path) -> dict[str, Verdict]:
    art = env.work / TORCH_ARTIFACTS  # shared: downloads, modules, random archives cached
    art.mkdir(parents=True, exist_ok=True)
    xml, summary = case_dir / "iree.xml", case_dir / "iree-summary"
    summary.mkdir(exist_ok=True)
    run([env.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={xml}",
         f"--test-file-directory={case_dir / 'iree'}", f"--module-directory={case_dir / 'iree'}",
         f"--external-file-directory={case_dir / 'iree'}", f"--artifact-directory={art}",
         "--cache-modules", f"--job-summary-path={summary}"],
        env.its / "torch_models", env.iree_env({"PYTHONPATH": str(env.its)}),
        case_dir / "iree.log")
    found = {Path(k).stem: v for k, v in junit(xml).items()}
    table = summary / "job_summary.json"
    for kind, part in (json.loads(table.read_text()) if table.is_file() else {}).items():
        for row in part["rows"]:
            v = found.get(Path(row[0]).stem)
            if v is None:
                continue
            if kind == "compstat":
                v.numbers.update(dispatch_count=row[2], binary_size=row[4])
            elif kind == "benchmark":
                v.numbers.update(time_ms=float(row[1]) if row[1] != "N/A" else None,
                                 time_ms_limit=float(row[4]) if row[4] != "N/A" else None)
    return found


def iree_quality(env: Env, case_dir: Path, vmfbs: Path) -> dict[str, Verdict]:
    xml = case_dir / "iree-quality.xml"
    run([env.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={xml}",
         "model_quality_run.py", f"--test-file-directory={case_dir / 'iree' / 'tiny'}"],
        env.its / "sharktank_models" / "quality_tests",
        env.iree_env({"BACKEND": "cpu", "ROCM_CHIP": "gfx942", "SKU": "mi300",
                      "IREE_TEST_FILES": str(env.work / SHARKTANK_FILES),
                      "TEST_OUTPUT_ARTIFACTS": str(vmfbs)}), case_dir / "iree-quality.log")
    return {k.split("::")[-1].strip(): v for k, v in junit(xml).items()}


def iree_bench(env: Env, case_dir: Path, vmfbs: Path) -> dict[str, Verdict]:
    xml, summary = case_dir / "iree-bench.xml", case_dir / "iree-bench-summary"
    summary.mkdir(exist_ok=True)
    run([env.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={xml}",
         "model_benchmark_run.py", f"--test-file-directory={case_dir / 'iree' / 'bench'}"],
        env.its / "sharktank_models" / "benchmarks",
        env.iree_env({"BACKEND": "cpu", "ROCM_CHIP": "gfx942", "SKU": "cpu",
                      "IREE_TEST_FILES": str(env.work / SHARKTANK_FILES),
                      "TEST_OUTPUT_ARTIFACTS": str(vmfbs), "JOB_SUMMARY_PATH": str(summary)}),
        case_dir / "iree-bench.log")
    found = {k.split("::")[-1].strip(): v for k, v in junit(xml).items()}
    table = summary / "job_summary.json"
    for key, number in (("time_summary", "time_ms"), ("dispatch_summary", "dispatch_count"),
                        ("size_summary", "size_bytes")):
        for row in (json.loads(table.read_text()) if table.is_file() else {}).get(key, []):
            v = found.get(f"{row[1]}_cpu")
            if v is not None:
                v.numbers[number] = float(row[2]) if number == "time_ms" else int(row[2])
    return found


def iree_regression(env: Env, case_dir: Path, suite: Suite) -> dict[str, Verdict]:
    """test_model_threshold.py reads `<its dir>/<model>/*.json`: the files go there."""
    assert env.regression is not None
    home = env.regression / "sharktank_models" / "test_suite" / "regression_tests"
    model = home / "tinyconf"
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(case_dir / "iree" / "tinyconf", model)
    shared = case_dir / "iree-artifacts"
    xml = case_dir / "iree-regression.xml"
    run([env.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={xml}",
         "test_model_threshold.py", "-k", "cpu"], home,
        env.iree_env({"PYTHONPATH": str(env.regression / "sharktank_models" / "test_suite"),
                      "THRESHOLD_MODEL": "tinyconf", "IREE_TEST_FILES": str(shared),
                      "TEST_OUTPUT_ARTIFACTS": str(shared)}), case_dir / "iree-regression.log")
    items = junit(xml)
    found = {}
    for name in suite.files:
        sub = Path(name).stem
        compile_v = items.get(f"test_compile_cpu[{sub}]", Verdict("missing"))
        run_v = items.get(f"test_run_cpu_threshold[{sub}]", Verdict("missing"))
        # One verdict per (file, backend), as `goldens check` gives: the compile's if it
        # did not pass, else the run's.
        found[f"{sub}_cpu"] = compile_v if compile_v.status != "passed" else run_v
    return found


# --- the cases -------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    layout: str  # torch | quality | bench | regression
    intent: str
    mutate: Callable[[Suite, Path], object] = lambda s, d: None  # what it returns is unused
    strict: bool = False  # also run ours with --strict (reported, not compared)


def corrupt(path: Path, case_dir: Path) -> str:
    """A copy of `path` with its first four bytes flipped, written into the case."""
    data = bytearray(path.read_bytes())
    for i in range(4):
        data[i] ^= 0xFF
    out = case_dir / f"corrupt_{path.name}"
    out.write_bytes(bytes(data))
    return str(out)


def torch_file(s: Suite, stem: str) -> dict:
    return s.files[f"tiny-torch/{stem}.json"]


def _random(s: Suite, stem: str, keep_outputs: bool) -> Suite:
    t = torch_file(s, stem)
    t["weights"] = [{"type": "random", "module": "tiny-torch/modules/clip_cpu", "seed": 7,
                     "scope": "model"}]
    if not keep_outputs:
        t.pop("expected_outputs", None)
    return s


def _outputs(s: Suite, d: Path) -> None:
    torch_file(s, "clip_quality_cpu")["outputs"] = [{"value": f"@{d}/o0.npy"},
                                                    {"value": f"@{d}/o1.npy"}]


CASES = [
    Case("torch-base", "torch", "the suite (time goldens roomy): everything passes"),
    Case("torch-corrupt-output", "torch", "expected output corrupted: quality fails",
         lambda s, d: torch_file(s, "clip_quality_cpu")["expected_outputs"][0].update(
             url=corrupt(GOLDENS / "tiny-torch" / "clip_out0_v1.0.bin", d))),
    Case("torch-dispatch-golden-below", "torch", "golden_dispatch_count one below: fails",
         lambda s, d: torch_file(s, "clip_compstat_cpu").update(golden_dispatch_count=135)),
    Case("torch-size-golden-below", "torch", "golden_binary_size below the vmfb: fails",
         lambda s, d: torch_file(s, "vae_compstat_cpu").update(golden_binary_size=1000)),
    Case("torch-time-golden-below", "torch", "golden_time_ms far below: benchmark fails",
         lambda s, d: torch_file(s, "vae_benchmark_cpu").update(golden_time_ms=0.001)),
    Case("torch-tolerance-rescues", "torch",
         "golden far below but tolerance_factor 1e7: passes (factor honoured)",
         lambda s, d: torch_file(s, "clip_benchmark_cpu").update(golden_time_ms=0.001,
                                                                  tolerance_factor=1e7)),
    Case("torch-tolerance-tightens", "torch",
         "golden far above but tolerance_factor 1e-6: fails (factor honoured)",
         lambda s, d: torch_file(s, "vae_benchmark_cpu").update(tolerance_factor=1e-6)),
    Case("torch-random-weights", "torch",
         "random weights (seed 7), no expected outputs: runs and passes; archives compared",
         lambda s, d: (_random(s, "clip_quality_cpu", False),
                       _random(s, "clip_benchmark_cpu", False))),
    Case("torch-random-weights-vs-goldens", "torch",
         "random weights against the real-weight goldens: quality fails (they are used)",
         lambda s, d: _random(s, "clip_quality_cpu", True)),
    Case("torch-two-weight-scopes", "torch",
         "a second archive under scope `other`: passes (--parameters per weight)",
         lambda s, d: torch_file(s, "clip_quality_cpu")["weights"].append(
             {"type": "url", "url": "builtin:tiny/vae.irpa", "scope": "other"})),
    Case("torch-wrong-scope", "torch", "the archive under scope `params`: the run fails",
         lambda s, d: torch_file(s, "vae_quality_cpu")["weights"][0].update(scope="params")),
    Case("torch-outputs", "torch", "`outputs` (--output=@file.npy): passes", _outputs),
    Case("torch-bench-input-file", "torch",
         "benchmark input given by url (the real input): passes",
         lambda s, d: torch_file(s, "vae_benchmark_cpu")["inputs"][0].update(
             url="vae_input0_v1.0.bin")),
    Case("torch-bench-input-wrong-file", "torch",
         "benchmark input url of the wrong size: fails (the file is fed, not zeros)",
         lambda s, d: torch_file(s, "vae_benchmark_cpu")["inputs"][0].update(
             url="clip_input0_v1.0.bin")),
    Case("torch-bench-expected-outputs", "torch",
         "benchmark expected_outputs (wrong ones): passes (iree-benchmark-module ignores them)",
         lambda s, d: torch_file(s, "vae_benchmark_cpu").update(expected_outputs=[
             {"url": "clip_out1_v1.0.bin", "value": "1x3x128x128xf32"}])),
    Case("torch-run-arg-passed", "torch",
         "quality run_args --device_allocator=caching: passes (handed to the tool)",
         lambda s, d: torch_file(s, "clip_quality_cpu")["run_args"].append(
             "--device_allocator=caching")),
    Case("torch-run-arg-bogus", "torch",
         "quality run_args --no_such_flag=1: fails (the tool rejects it)",
         lambda s, d: torch_file(s, "vae_quality_cpu")["run_args"].append("--no_such_flag=1")),
    Case("torch-fewer-expected-outputs", "torch",
         "one expected output for two results: fails (iree-run-module requires all)",
         lambda s, d: torch_file(s, "clip_quality_cpu")["expected_outputs"].pop()),
    Case("torch-no-function", "torch",
         "no --function in run_args: the module's one function runs, passes",
         lambda s, d: torch_file(s, "vae_quality_cpu").update(run_args=[
             a for a in torch_file(s, "vae_quality_cpu")["run_args"]
             if not a.startswith("--function=")])),
    Case("torch-unknown-fields", "torch",
         "unknown fields (top level, module file): pass; ours warns, fails under --strict",
         lambda s, d: (torch_file(s, "clip_quality_cpu").update(golden_time_ms=1.0, owner="x"),
                       s.files["tiny-torch/modules/vae_cpu.json"].update(notes="x")),
         strict=True),
    Case("quality-base", "quality", "goldens/tiny clip and vae: pass"),
    Case("quality-compile-only", "quality", "compile_only: compiled, run skipped",
         lambda s, d: s.files["tiny/vae_cpu.json"].update(compile_only=True)),
    Case("quality-run-expecting-to-fail", "quality", "run_test_expecting_to_fail: xfailed",
         lambda s, d: s.files["tiny/clip_cpu.json"].update(run_test_expecting_to_fail=True)),
    Case("quality-chip-expecting-to-fail", "quality",
         "compile_chip_expecting_to_fail [gfx942] on a cpu file: xfailed, not compiled",
         lambda s, d: s.files["tiny/clip_cpu.json"].update(
             compile_chip_expecting_to_fail=["gfx942"])),
    Case("quality-corrupt-output", "quality", "expected output corrupted: fails",
         lambda s, d: s.files["tiny/vae_cpu.json"]["outputs"][0].update(
             source=corrupt(GOLDENS / "tiny" / "vae_out0_v1.0.bin", d))),
    Case("quality-splat-weights", "quality",
         "no real_weights, no outputs: runs on splat weights, passes",
         lambda s, d: (s.files["tiny/vae_cpu.json"].pop("real_weights"),
                       s.files["tiny/vae_cpu.json"].pop("outputs"))),
    Case("quality-no-run-function", "quality", "run_function missing: fails (--function=None)",
         lambda s, d: s.files["tiny/clip_cpu.json"].pop("run_function")),
    Case("quality-no-device", "quality", "device missing: fails (--device=None)",
         lambda s, d: s.files["tiny/vae_cpu.json"].pop("device")),
    Case("quality-fewer-outputs", "quality", "one expected output for two results: fails",
         lambda s, d: s.files["tiny/clip_cpu.json"]["outputs"].pop()),
    Case("quality-threshold-passthrough", "quality",
         "threshold_args --device_allocator=caching: passes (handed to the tool)",
         lambda s, d: s.files["tiny/clip_cpu.json"]["threshold_args"].append(
             "--device_allocator=caching")),
    Case("quality-unknown-field", "quality", "an unknown field: passes; ours warns",
         lambda s, d: s.files["tiny/clip_cpu.json"].update(owner="x"), strict=True),
    Case("bench-base", "bench", "goldens/tiny-bench clip and vae: pass"),
    Case("bench-time-golden-below", "bench", "golden_time_ms far below: fails",
         lambda s, d: s.bench["tiny/vae_cpu.json"]["golden_time_ms"].update(cpu=0.001)),
    Case("bench-dispatch-golden-below", "bench", "golden_dispatch one below: fails",
         lambda s, d: s.bench["tiny/clip_cpu.json"]["golden_dispatch"].update(cpu=135)),
    Case("bench-size-golden-below", "bench", "golden_size below the vmfb: fails",
         lambda s, d: s.bench["tiny/vae_cpu.json"]["golden_size"].update(cpu=1000)),
    Case("bench-no-multiplier", "bench",
         "golden_time_ms for the SKU without a tolerance multiplier: fails",
         lambda s, d: s.bench["tiny/clip_cpu.json"].pop("golden_time_tolerance_multiplier")),
    Case("bench-zero-goldens", "bench", "goldens of 0: not checked, passes",
         lambda s, d: s.bench["tiny/vae_cpu.json"].update(
             golden_time_ms={"cpu": 0}, golden_dispatch={"cpu": 0}, golden_size={"cpu": 0})),
    Case("bench-one-repetition", "bench", "--benchmark_repetitions=1: no mean row, fails",
         lambda s, d: s.bench["tiny/clip_cpu.json"].update(benchmark_flags=[
             "--benchmark_repetitions=1"])),
    Case("bench-chip-ignored", "bench", "specific_chip_to_ignore [gfx942]: skipped",
         lambda s, d: s.bench["tiny/vae_cpu.json"].update(specific_chip_to_ignore=["gfx942"])),
    Case("bench-no-function", "bench", "function_run missing: fails (--function=None)",
         lambda s, d: s.bench["tiny/clip_cpu.json"].pop("function_run")),
    Case("regression-base", "regression", "regression schema, cpu: passes"),
    Case("regression-run-expecting-to-fail", "regression",
         "cpu_run_test_expecting_to_fail: xfailed",
         lambda s, d: s.files["tinyconf/clip.json"].update(cpu_run_test_expecting_to_fail=True)),
    Case("regression-compile-only", "regression", "compile_only: run skipped",
         lambda s, d: s.files["tinyconf/vae.json"].update(compile_only=True)),
    Case("regression-corrupt-output", "regression", "expected output corrupted: fails",
         lambda s, d: s.files["tinyconf/vae.json"]["outputs"][0].update(
             source=corrupt(GOLDENS / "tiny" / "vae_out0_v1.0.bin", d))),
    Case("regression-no-weights", "regression",
         "no real_weights: no archive is passed, the run fails",
         lambda s, d: s.files["tinyconf/clip.json"].pop("real_weights")),
]


def random_archives(case_dir: Path, env: Env) -> dict[str, str]:
    """sha256 of IREE's generated archive and of ours, for (clip module, seed 7)."""
    iree = env.work / TORCH_ARTIFACTS / "random_irpa" / "tiny-torch" / "modules" / \
        "clip_cpu" / "param_7.irpa"
    mlir = REPO / "runner" / "assets" / "tiny" / "clip_bs1.mlir"
    from runner.base.fileio import sha256_file

    ours = archive_path(mlir, 7)
    return {"iree": sha256_file(iree) if iree.is_file() else "missing",
            "ours": sha256_file(ours) if ours.is_file() else "missing"}


def run_case(case: Case, env: Env) -> list[dict]:
    case_dir = env.work / case.name
    shutil.rmtree(case_dir, ignore_errors=True)
    case_dir.mkdir(parents=True)
    base = {"torch": torch_suite, "quality": quality_suite, "bench": quality_suite,
            "regression": regression_suite}[case.layout]()
    suite = copy.deepcopy(base)
    case.mutate(suite, case_dir)
    pairs = write_copies(suite, case_dir, env.azure, env.work)
    ours_dir = case_dir / "ours"
    extra: dict[str, dict[str, Verdict]] = {}
    if case.layout == "torch":
        iree = iree_torch(env, case_dir)
        ours = {**ours_check(ours_dir / "tiny-torch", case_dir / "ours-check"),
                **ours_bench(ours_dir / "tiny-torch", case_dir / "ours-bench", [])}
        if case.strict:
            extra = {"strict": ours_check(ours_dir / "tiny-torch", case_dir / "ours-strict",
                                          ["--strict"])}
    elif case.layout == "quality":
        iree = iree_quality(env, case_dir, case_dir / "iree-vmfbs")
        ours = ours_check(ours_dir / "tiny", case_dir / "ours-check")
        if case.strict:
            extra = {"strict": ours_check(ours_dir / "tiny", case_dir / "ours-strict",
                                          ["--strict"])}
    elif case.layout == "bench":
        iree_quality(env, case_dir, case_dir / "iree-vmfbs")  # the modules benchmarked
        iree = iree_bench(env, case_dir, case_dir / "iree-vmfbs")
        ours = ours_bench(ours_dir / "bench" / "tiny", case_dir / "ours-bench",
                          ["--sku", "cpu", "--quality-dir", str(ours_dir / "tiny")])
    else:
        if env.regression is None:
            return []
        iree = iree_regression(env, case_dir, suite)
        ours = ours_check(ours_dir / "tinyconf", case_dir / "ours-check",
                          ["--backend", "cpu"])
        ours = {k if k.endswith("_cpu") else f"{k}_cpu": v for k, v in ours.items()}
    rows = []
    elsewhere = misplaced(pairs)
    for name in sorted(set(iree) | set(ours) - {"*"}):
        a = iree.get(name, Verdict("missing"))
        b = ours.get(name, ours.get("*", Verdict("missing")))
        # Numbers both report (a run that errored reports none of its own).
        same = {k: (a.numbers[k], b.numbers[k]) for k in a.numbers
                if k in ("dispatch_count", "binary_size", "size_bytes", "time_ms_limit")
                and b.numbers.get(k) is not None}
        numbers_agree = all(x == y or (isinstance(x, float) and abs(x - y) < 1e-3)
                            for x, y in same.values())
        row = {"case": case.name, "intent": case.intent, "test": name, "iree": a.status,
               "ours": b.status,
               "agree": a.status == b.status and numbers_agree and not elsewhere,
               "numbers": same, "iree_time_ms": a.numbers.get("time_ms"),
               "ours_time_ms": b.numbers.get("time_ms"),
               "iree_message": elsewhere or a.message, "ours_message": b.message}
        if "strict" in extra:
            row["ours_strict"] = extra["strict"].get(name, Verdict("missing")).status
        rows.append(row)
    if case.name.startswith("torch-random-weights") and case.name.endswith("weights"):
        archives = random_archives(case_dir, env)
        rows.append({"case": case.name, "intent": "random archive bytes (clip, seed 7)",
                     "test": "param_7.irpa sha256", "iree": archives["iree"][:16],
                     "ours": archives["ours"][:16],
                     "agree": archives["iree"] == archives["ours"] != "missing",
                     "numbers": {}})
    (case_dir / "rows.json").write_text(json.dumps(rows, indent=1))
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [f"iree-test-suites {IREE_TEST_SUITES_COMMIT[:12]}", "",
             "| case | test | IREE's runner | runner | agree | numbers (IREE, ours) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        nums = ", ".join(f"{k} {a} / {b}" for k, (a, b) in r["numbers"].items())
        if r.get("iree_time_ms") is not None or r.get("ours_time_ms") is not None:
            nums += (", " if nums else "") + \
                f"time_ms {r.get('iree_time_ms')} / {r.get('ours_time_ms')} (measured twice)"
        ours = r["ours"] + (f" (--strict: {r['ours_strict']})" if "ours_strict" in r else "")
        lines.append(f"| {r['case']} | {r['test']} | {r['iree']} | {ours} | "
                     f"{'yes' if r['agree'] else '**NO**'} | {nums} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iree-test-suites", required=True, type=Path,
                    help="a checkout of iree-org/iree-test-suites")
    ap.add_argument("--regression-checkout", type=Path,
                    help="a checkout of its commit a8791d2^ (test_model_threshold.py)")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter with IREE's runner's requirements")
    ap.add_argument("--work", type=Path, default=Path("/tmp/iree-conformance"))
    ap.add_argument("--only", nargs="*", help="case names (prefixes) to run")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    # Our own cache: a cached vmfb keeps the MLIR path of its first compile (TORCH_ARTIFACTS).
    os.environ["RUNNER_CACHE_DIR"] = str(args.work.resolve() / "runner-cache")
    env = Env(args.iree_test_suites.resolve(), args.python, args.work.resolve(),
              AzureOnThisMachine(args.work.resolve()),
              args.regression_checkout.resolve() if args.regression_checkout else None)
    for case in CASES:
        if args.only and not any(case.name.startswith(o) for o in args.only):
            continue
        print(f"== {case.name}: {case.intent}", file=sys.stderr, flush=True)
        got = run_case(case, env)
        for r in got:
            print(f"   {r['test']}: IREE {r['iree']}, ours {r['ours']}"
                  + ("" if r["agree"] else "  <-- DISAGREE"), file=sys.stderr, flush=True)
    # Every case's latest rows, this invocation's and earlier ones' (--only reruns a few).
    rows = [r for case in CASES if (args.work / case.name / "rows.json").is_file()
            for r in json.loads((args.work / case.name / "rows.json").read_text())]
    (args.work / "conformance.json").write_text(json.dumps(rows, indent=1))
    (args.work / "conformance.md").write_text(markdown(rows) + "\n")
    print(markdown(rows))
    return 0 if rows and all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
