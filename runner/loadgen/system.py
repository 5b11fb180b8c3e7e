"""MLPerf's system description (`systems/<id>.json`) and measurements.json for a submission.

Every field the round requires is filled: detected where a machine can tell (CPU model,
sockets, cores, caches and clock from /proc and /sys; memory; storage; OS; accelerators via
rocm-smi (model, memory) / nvidia-smi (model, memory, clock), or none when IREE runs on the
CPU; IREE and runner versions as
framework and software), derived from the profile's layout, or given in the profile's
`mlperf.system` section (a given value wins over a detected one: the submitter answers for
the description). A field that is none of these is an error naming every such field before
anything runs; an empty string is never written. Which source filled each field is recorded.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput, ToolFailed
from runner.base.fileio import sha256_file
from runner.base.gpu_info import nvidia_csv
from runner.config.model_config import precision_text
from runner.loadgen.rules import DIVISIONS, SYSTEM_TYPES, Round

SMI_TIMEOUT_S = 20
# A name that is a directory in the tree (submitter, system id): no separators, no quotes,
# no shell or control characters.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
_NAMED_ELSEWHERE = {"division": "--division / mlperf.division",
                    "submitter": "--submitter / mlperf.submitter"}


def check_name(value: str | None, what: str, where: str) -> str:
    if value is None:
        raise BadInput(f"no {what} for the submission tree", where=where,
                       fix=f"give the {what} (letters, digits, . _ + -)")
    if not _NAME.match(value):
        raise BadInput(f"{what} {value!r} is not a plain name: it names a directory of "
                       "the submission tree", where=where,
                       fix="use letters, digits and . _ + - (at most 100), no spaces")
    return value


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _cpuinfo() -> list[dict[str, str]]:
    blocks = []
    for block in _read("/proc/cpuinfo").split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if fields:
            blocks.append(fields)
    return blocks


def _binary(n_bytes: float) -> str:
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}".replace(".0 ", " ")
    return f"{int(n_bytes)} B"


def _decimal(n_bytes: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}".replace(".0 ", " ")
    return f"{int(n_bytes)} B"


def _caches() -> str | None:
    """L1d/L1i/L2/L3 per core of cpu0, from sysfs (`L1d 32 KiB, L1i 32 KiB, L2 512 KiB, ...`)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    out = []
    for index in sorted(base.glob("index*")):
        level, kind, size = (_read(str(index / n)).strip() for n in ("level", "type", "size"))
        if level and size:
            suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
            out.append(f"L{level}{suffix} {size.replace('K', ' KiB').replace('M', ' MiB')}")
    return ", ".join(out) or None


def _frequency(cpus: list[dict[str, str]]) -> str | None:
    top = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if top.isdigit():
        return f"{int(top) // 1000} MHz (max)"
    mhz = cpus[0].get("cpu MHz") if cpus else None
    return f"{float(mhz):.0f} MHz (as /proc/cpuinfo reports it)" if mhz else None


def _storage(out_dir: Path) -> tuple[str | None, str | None]:
    """Capacity and kind of the block devices (loop, ram and zram devices left out); the out
    dir's filesystem when /sys shows none."""
    sizes, kinds = 0, []
    for dev in sorted(Path("/sys/block").glob("*")):
        if dev.name.startswith(("loop", "ram", "zram", "dm-", "sr", "md")):
            continue
        sectors = _read(str(dev / "size")).strip()
        if not sectors.isdigit() or int(sectors) == 0:
            continue
        sizes += int(sectors) * 512
        if dev.name.startswith("nvme"):
            kind = "NVMe SSD"
        elif dev.name.startswith(("vd", "xvd")):
            kind = "virtual disk"
        else:
            kind = "HDD" if _read(str(dev / "queue/rotational")).strip() == "1" else "SSD"
        if kind not in kinds:
            kinds.append(kind)
    if not sizes:
        try:
            st = os.statvfs(out_dir if out_dir.exists() else out_dir.parent)
        except OSError:
            return None, None
        return _decimal(st.f_blocks * st.f_frsize), None
    return _decimal(sizes), " + ".join(kinds) or None


def _os_name() -> str:
    release = dict(line.split("=", 1) for line in _read("/etc/os-release").splitlines()
                   if "=" in line)
    name = release.get("PRETTY_NAME", "").strip('"') or platform.system()
    return f"{name}, kernel {platform.release()}"


def host_facts(out_dir: Path) -> dict[str, Any]:
    """What this machine tells about itself; a field it cannot tell is absent."""
    cpus = _cpuinfo()
    facts: dict[str, Any] = {}
    if cpus and cpus[0].get("model name"):
        facts["host_processor_model_name"] = cpus[0]["model name"]
    sockets = {c.get("physical id") for c in cpus if c.get("physical id") is not None}
    facts["host_processors_per_node"] = len(sockets) or 1
    cores = cpus[0].get("cpu cores") if cpus else None
    facts["host_processor_core_count"] = int(cores) if cores and cores.isdigit() else (
        os.cpu_count() or 1)
    for key, value in (("host_processor_frequency", _frequency(cpus)),
                       ("host_processor_caches", _caches())):
        if value:
            facts[key] = value
    mem = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo"), re.M)
    if mem:
        facts["host_memory_capacity"] = _binary(int(mem.group(1)) * 1024)
    capacity, kind = _storage(out_dir)
    if capacity:
        facts["host_storage_capacity"] = capacity
    if kind:
        facts["host_storage_type"] = kind
    facts["operating_system"] = _os_name()
    return facts


def _run(argv: list[str]) -> str | None:
    """A vendor tool's output, or None when it is absent or fails (no GPU on this host)."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


NVIDIA_QUERY = ("name", "memory.total", "clocks.max.sm")


def nvidia_facts(text: str) -> dict[str, Any]:
    """`nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader`
    (units kept: MLPerf's fields are free text); {} where it cannot be read."""
    try:
        rows = nvidia_csv(text, NVIDIA_QUERY)
    except ToolFailed:
        return {}
    if not rows:
        return {}
    return {"accelerator_model_name": rows[0]["name"],
            "accelerator_memory_capacity": rows[0]["memory.total"],
            "accelerator_frequency": rows[0]["clocks.max.sm"], "gpus_seen": len(rows)}


def rocm_facts(text: str) -> dict[str, Any]:
    """`rocm-smi --showproductname --showmeminfo vram --json`: one object per card
    (`Card series`, `VRAM Total Memory (B)`, ...); keys matched loosely, as their spelling
    varies across ROCm releases."""
    try:
        cards = {k: v for k, v in json.loads(text).items() if k.startswith("card")}
    except (ValueError, AttributeError):
        return {}
    if not cards:
        return {}
    first = next(iter(cards.values()))
    out: dict[str, Any] = {"gpus_seen": len(cards)}
    for key, value in first.items():
        low = key.lower()
        if "card series" in low or ("card model" in low and "accelerator_model_name" not in out):
            out["accelerator_model_name"] = str(value)
        elif "vram total memory" in low and str(value).isdigit():
            out["accelerator_memory_capacity"] = _binary(int(value)).replace("iB", "B")
    return out


def accelerator_facts(profile) -> dict[str, Any]:
    """The accelerators the profile's backend runs on: none for IREE on the CPU; otherwise
    what the vendor tool reports, and the count from the layout."""
    layout, backend = profile.layout, profile.target.backend
    if backend == "cpu":
        return {"accelerators_per_node": "0",  # a JSON 0 reads as an empty answer to MLPerf
                **{f: "N/A" for f in ACCELERATOR_FIELDS}}
    facts: dict[str, Any] = {}
    if backend == "hip":
        facts = rocm_facts(_run(["rocm-smi", "--showproductname", "--showmeminfo", "vram",
                                     "--json"]) or "")
    elif backend == "cuda":
        facts = nvidia_facts(_run(["nvidia-smi", f"--query-gpu={','.join(NVIDIA_QUERY)}",
                                   "--format=csv,noheader"]) or "")
    facts.pop("gpus_seen", None)
    facts["accelerators_per_node"] = layout.gpus or len(layout.devices)
    return facts


ACCELERATOR_FIELDS = (
    "accelerator_model_name", "accelerator_memory_capacity", "accelerator_frequency",
    "accelerator_host_interconnect", "accelerator_interconnect",
    "accelerator_interconnect_topology", "accelerator_memory_configuration",
    "accelerator_on-chip_memories")


def software_facts(iree: dict[str, Any], runner_info: dict[str, Any]) -> dict[str, str]:
    """framework (IREE) and other_software_stack (runner, LoadGen, Python, numpy)."""
    import importlib.metadata

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    compiler = (iree.get("iree.compiler") or {})
    runtime = (iree.get("iree.runtime") or {})
    framework = (f"IREE {runtime.get('version') or compiler.get('version') or 'unknown'}"
                 f" (compiler {compiler.get('version', 'unknown')}, runtime "
                 f"{runtime.get('version', 'unknown')}, commit "
                 f"{runtime.get('commit') or compiler.get('commit') or 'unknown'})")
    commit = runner_info.get("commit")
    runner_text = f"iree-sdxl-runner {runner_info['version']}" + (
        f" ({commit[:12]}{', modified' if runner_info.get('dirty') else ''})" if commit else "")
    return {"framework": framework, "other_software_stack": (
        f"{runner_text}, mlcommons-loadgen {version('mlcommons-loadgen')}, Python "
        f"{platform.python_version()}, numpy {version('numpy')}")}


@dataclass(frozen=True)
class SystemDescription:
    id: str
    fields: dict[str, Any]  # the systems JSON, in the round's field order
    sources: dict[str, str]  # field -> detected | layout | profile | command | runner


def _sourced_values(profile, nodes: int, out_dir: Path, iree: dict[str, Any],
                    runner_info: dict[str, Any], command: dict[str, Any],
                    given: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """Each systems-JSON field's value and where it came from (the description says so):
    detected, then the runner's, the layout's, the command's and the profile's, each
    overriding the ones before; an empty value sets nothing."""
    layout = profile.layout
    values: dict[str, tuple[Any, str]] = {}

    def put(facts: dict[str, Any], source: str) -> None:
        for key, value in facts.items():
            if value is not None and value != "":
                values[key] = (value, source)

    put(host_facts(out_dir), "detected")
    put(accelerator_facts(profile), "detected")
    put(software_facts(iree, runner_info), "runner")
    put({"number_of_nodes": nodes,
         "hw_notes": (f"IREE {profile.target.backend} on {profile.target.chip}; "
                      f"{layout.gpus or 0} GPU(s), partition {layout.partition or 'none'}, "
                      f"{len(layout.devices)} device ID(s), {layout.cpd} pipeline(s) per ID"),
         "sw_notes": (f"iree-sdxl-runner layout {json.dumps(layout.to_dict(), sort_keys=True)}"
                      f"; model {profile.model.name} ("
                      f"{precision_text(profile.model.dtype, profile.model.vae_dtype)})")},
        "layout")
    put(command, "command")
    put(given, "profile")
    return values


def describe_system(rules: Round, profile, division: str, submitter: str, nodes: int,
                    out_dir: Path, iree: dict[str, Any], runner_info: dict[str, Any]
                    ) -> SystemDescription:
    """The systems JSON for this run; every missing field named at once."""
    where = f"{profile.path}: mlperf.system"
    given = dict(profile.mlperf.system or {})
    system_id = check_name(given.pop("id", None), "system id (mlperf.system.id)", where)
    unknown = sorted(k for k in given if k not in rules.system_fields)
    if unknown:
        raise BadInput(f"mlperf.system has key(s) MLPerf {rules.version}'s systems JSON "
                       f"does not know: {', '.join(unknown)}", where=where,
                       fix=f"use {', '.join(rules.system_fields)}")
    clash = [k for k in _NAMED_ELSEWHERE if k in given]
    if clash:
        raise BadInput(f"mlperf.system.{clash[0]} is set from the command", where=where,
                       fix=f"use {_NAMED_ELSEWHERE[clash[0]]}")
    values = _sourced_values(profile, nodes, out_dir, iree, runner_info,
                             {"division": division, "submitter": submitter}, given)
    missing = [f for f in rules.system_fields if f not in values]
    if missing:
        raise BadInput(
            f"the MLPerf {rules.version} system description lacks {len(missing)} field(s) "
            f"that nothing detects: {', '.join(missing)}", where=where,
            fix="give them in the profile's mlperf.system section or with "
            f"--set mlperf.system.{missing[0]}=VALUE (\"N/A\" where a field does not apply)")
    system_type = values["system_type"][0]
    if system_type not in SYSTEM_TYPES:
        raise BadInput(f"system_type {system_type!r} is not one of MLPerf's",
                       where=f"{where}.system_type", fix=f"use {' or '.join(SYSTEM_TYPES)}")
    status = str(values["status"][0])
    if status.lower() not in rules.system_statuses:
        raise BadInput(f"status {status!r} is not one of MLPerf's", where=f"{where}.status",
                       fix=f"use {' or '.join(rules.system_statuses)}")
    if division not in DIVISIONS:
        raise BadInput(f"unknown division {division!r}", where="--division",
                       fix=f"use {' or '.join(DIVISIONS)}")
    return SystemDescription(system_id, {f: values[f][0] for f in rules.system_fields},
                             {f: values[f][1] for f in rules.system_fields})


_DATA_TYPES = {"float32": "fp32", "float16": "fp16"}


def _weights(profile) -> str:
    """The starting weights: a checkpoint by name and sha256 of its files; otherwise each
    submodel's weights file by name and sha256 (or its URL when it is fetched)."""
    model = profile.model
    if model.source and model.source.startswith("checkpoint:"):
        from runner.config.exports import checkpoint_sha256

        path = Path(model.source.partition(":")[2])
        digest = checkpoint_sha256(path, model.dtype, model.vae_dtype)
        text = (f"diffusers checkpoint {path.name}, sha256 {digest} (of its files' sha256s)"
                if digest else f"diffusers checkpoint {path.name} (not on this machine)")
        return text + _vae_from(model)
    parts = []
    for name, sub in sorted(model.submodels.items()):
        if sub.weights is None:
            continue
        ref = model.resolve(sub.weights)
        if "://" in ref:
            parts.append(f"{name}: {ref}")
        else:
            path = Path(ref)
            digest = sha256_file(path) if path.is_file() else "not on this machine"
            parts.append(f"{name}: {path.name} sha256 {digest}")
    return (f"{model.name} ({model.source or 'artifacts'}): " + "; ".join(parts)
            + _vae_from(model))


def _vae_from(model) -> str:
    """The `--vae-from` VAE an export decodes with instead of the checkpoint's, if any."""
    if not model.vae_from:
        return ""
    from runner.config.exports import vae_sha256

    path = Path(model.vae_from)
    digest = vae_sha256(path, model.dtype, model.vae_dtype)
    return (f"; VAE from {path.name}, sha256 {digest} (of its files' sha256s)" if digest
            else f"; VAE from {path.name} (not on this machine)")


def weight_types(model) -> str:
    """The precision each part computes in: `fp16`, or `fp16; VAE fp32` when they differ
    (MLPerf's reference decodes in fp32, IREE CI's and AMD's SDXL in fp16)."""
    dtype = _DATA_TYPES.get(model.dtype, model.dtype)
    vae = _DATA_TYPES.get(model.vae_dtype, model.vae_dtype)
    return dtype if vae == dtype else f"{dtype} (text encoders, UNet); VAE {vae}"


def measurements(profile) -> dict[str, str]:
    """measurements.json: the model's real precision and starting weights."""
    model = profile.model
    return {"input_data_types": "int64 (prompt token ids)", "retraining": "No",
            "starting_weights_filename": _weights(profile),
            "weight_data_types": weight_types(model),
            "weight_transformations": "none (IREE compiles the weights as given)"
            if not (model.source and model.source.startswith("checkpoint:"))
            else "exported with iree-turbine, compiled by IREE"}
