"""Device layout: which worker processes a run starts, on which device, with which environment.

It follows AMD's SDXL harness: one pipeline process per
(CPD slot, device ID), each confined to its own device, all pulling batches from one queue. The
layout is computed here, before anything starts, so that `runner plan` can show it, the result
record can store it (results are not bit-identical across layouts), and a bad layout fails
before a 64-process launch rather than inside it.

Pure Python and stdlib only: planning must work on a laptop that has neither IREE nor a GPU.

`where` arguments are the prefix an error should point at (a profile path such as
`configs/mi325x.yaml`, or `command line`); the field is appended here, so every error names
the exact field or flag at fault.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from runner.base.errors import BadInput
from runner.inputs.fields import Fields, dataclass_keys, rules

# Compute partitions per physical GPU for each `rocm-smi --setcomputepartition` mode.
PARTITIONS = {"spx": 1, "dpx": 2, "qpx": 4, "cpx": 8}
BACKENDS = ("hip", "cuda", "cpu")
# AMD's 8-GPU MI300-series platforms are two-socket: GPUs 0-3 hang off NUMA node 0, 4-7 off 1.
NUMA_NODES = 2
# A typo such as `0-1000000` must fail, not build a million-entry list; no node has this many.
MAX_DEVICE_IDS = 4096
# The IREE runtime flag that confines local-task's executor to given cores. Checked against
# iree-base-runtime 3.13: `iree.runtime.flags.parse_flags("--task_topology_cpu_ids=0,1")` is
# accepted, and creating the local-task driver afterwards rejects an ID the process cannot use
# ("cpu_ids[0] 999 out of bounds"), so the flag really reaches the task topology.
CPU_IDS_FLAG = "--task_topology_cpu_ids"

# The command-line flag that overrides each field (what an error should tell the user to type).
_FLAGS = {
    "partition": "--partition",
    "devices": "--devices",
    "cpd": "--cpd",
    "batch_size": "--batch-size",
    "vae_batch_size": "--vae-batch-size",
}
CLI_WHERE = "command line: "  # a layout flag's errors say `command line: --devices`
_ID = re.compile(r"[0-9]+")
_RANGE = re.compile(r"([0-9]+)-([0-9]+)")
_ID_FIX = "write device IDs like 0-63, 0,2,4 or 0-3,8-11 (non-negative integers)"


def parse_device_ids(spec: str | int | list | tuple, where: str) -> tuple[int, ...]:
    """Device IDs in the order given; `where` is the full location (file and field, or flag).

    Order is kept because worker i runs on devices[i % len(devices)]: the user's order is the
    assignment order. A duplicate is an error, not silently merged, because listing an ID
    twice usually means a typo in a range (`0-7,7-15`), and it would double that device's load.
    """
    ids: list[int] = []
    _collect_ids(spec, where, ids, top=spec)
    if not ids:
        raise BadInput("no device IDs given", where=where, fix=_ID_FIX)
    seen: set[int] = set()
    for i in ids:
        if i in seen:
            raise BadInput(f"device {i} is listed twice in {_show(spec)}", where=where,
                           fix="list each device ID once")
        seen.add(i)
    return tuple(ids)


def _collect_ids(spec: Any, where: str, out: list[int], top: Any) -> None:
    if isinstance(spec, bool):  # YAML `yes`/`true` is not a device
        raise BadInput(f"{spec!r} is not a device ID", where=where, fix=_ID_FIX)
    if isinstance(spec, int):
        if spec < 0:
            raise BadInput(f"device ID {spec} is negative", where=where, fix=_ID_FIX)
        out.append(spec)
    elif isinstance(spec, str):
        if not spec.strip():
            raise BadInput("the device list is empty", where=where, fix=_ID_FIX)
        for token in (t.strip() for t in spec.split(",")):
            _collect_token(token, where, out, top)
    elif isinstance(spec, (list, tuple)):
        for item in spec:
            if isinstance(item, (list, tuple)):
                raise BadInput(f"nested list {_show(item)} in {_show(top)}", where=where,
                               fix=_ID_FIX)
            _collect_ids(item, where, out, top)
    else:
        raise BadInput(f"{_show(spec)} ({type(spec).__name__}) is not a device list",
                       where=where, fix=_ID_FIX)
    if len(out) > MAX_DEVICE_IDS:
        raise BadInput(f"{_show(top)} names more than {MAX_DEVICE_IDS} devices", where=where,
                       fix="check the range bounds")


def _collect_token(token: str, where: str, out: list[int], top: Any) -> None:
    if _ID.fullmatch(token):
        out.append(int(token))
        return
    m = _RANGE.fullmatch(token)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise BadInput(f"range '{token}' in {_show(top)} runs backwards", where=where,
                           fix=f"write it low to high: {hi}-{lo}")
        if hi - lo + 1 + len(out) > MAX_DEVICE_IDS:
            raise BadInput(f"range '{token}' names more than {MAX_DEVICE_IDS} devices",
                           where=where, fix="check the range bounds")
        out.extend(range(lo, hi + 1))
        return
    if token.startswith("-") and _ID.fullmatch(token[1:]):
        raise BadInput(f"device ID {token} in {_show(top)} is negative", where=where,
                       fix=_ID_FIX)
    what = "an empty entry" if not token else f"'{token}'"
    raise BadInput(f"{what} in {_show(top)} is not a device ID or range", where=where,
                   fix=_ID_FIX)


def format_device_ids(ids: Iterable[int]) -> str:
    """The compact spelling (`0-63`, `0,2,4`) that parse_device_ids reads back unchanged.

    Runs are collapsed only when ascending by one, so the order, which is the worker
    assignment, survives the round trip.
    """
    parts: list[str] = []
    run: list[int] = []
    for i in ids:
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(_run_text(run))
        run = [i]
    if run:
        parts.append(_run_text(run))
    return ",".join(parts)


def _run_text(run: list[int]) -> str:
    if len(run) == 1:
        return str(run[0])
    if len(run) == 2:
        return f"{run[0]},{run[1]}"
    return f"{run[0]}-{run[-1]}"


def _show(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else repr(value)


def partition_command(partition: str) -> list[str]:
    """The argv that puts the GPUs in `partition` mode; shown in the plan, never run by us.

    Repartitioning needs root, drains every process on the GPUs and changes what every device
    ID means, so it is the operator's decision, not a side effect of starting a benchmark.
    """
    mode = partition.lower()
    if mode not in PARTITIONS:
        raise BadInput(f"unknown partition mode {partition!r}", where="partition",
                       fix=f"use one of {', '.join(PARTITIONS)}")
    return ["rocm-smi", "--setcomputepartition", mode.upper()]


def visible_device_count(gpus: int, partition: str) -> int:
    """How many device IDs ROCm shows: each physical GPU appears once per partition."""
    return gpus * PARTITIONS[partition]


def gpu_of(device_id: int, partition: str) -> int:
    """The physical GPU a partition ID lives on; partitions of one GPU are numbered together."""
    return device_id // PARTITIONS[partition]


def numa_node_of(device_id: int, gpus: int, partition: str) -> int:
    """The NUMA node closest to a device ID, assuming GPUs split evenly over NUMA_NODES sockets.

    Pinning a worker there keeps its host buffers on the socket its GPU's PCIe link hangs off;
    on MI300X that is GPU g -> node g // 4.
    """
    per_node = max(1, -(-gpus // NUMA_NODES))
    return gpu_of(device_id, partition) // per_node


class _Source(Fields):
    """A layout's values (`raw`) and where each came from, so errors name the field or flag
    at fault and fixes use its syntax: the profile file (`layout.X: V`), a `--set
    layout.X=V` or a layout flag (`--X V`). `origins` maps the fields that did not come
    from the file to their `where` (`command line: --devices`, `--set layout.batch_size`)."""

    def __init__(self, prefix: str | None, values: Mapping[str, Any],
                 origins: Mapping[str, str] | None = None):
        super().__init__(values, prefix, "layout")
        self.origins = dict(origins or {})
        self.cli = any(o.startswith(CLI_WHERE) for o in self.origins.values())
        # A value typed on the command line (a flag or a `--set`): a fix is then written
        # as the user would type it there, never in the profile file's syntax.
        self.typed_here = self.cli or any(o.startswith("--set ") for o in self.origins.values())

    def where_of(self, key: str) -> str:
        return self.origins.get(key) or super().where_of(key)

    def setting(self, key: str, value: Any) -> str:
        origin = self.origins.get(key, "")
        if origin.startswith("--set "):
            return f"--set layout.{key}={value}"
        if self.cli and key in _FLAGS:
            return f"{_FLAGS[key]} {value}"
        if self.typed_here:
            return f"--set layout.{key}={value}"
        return super().setting(key, value)

    def removal(self, field: str) -> str:
        """How to take `field`'s value away, where it was given."""
        origin = self.origins.get(field, "")
        if origin.startswith("--set "):
            return f"drop --set layout.{field}"
        if origin.startswith(CLI_WHERE) and field in _FLAGS:
            return f"drop {_FLAGS[field]}"
        return f"remove layout.{field} from the profile"


@dataclass(frozen=True)
class LayoutSpec:
    """What the profile's `layout:` section asks for, validated, with defaults filled in.

    Defaults are filled here (not at plan time) so that to_dict() records the layout a run
    really used: the same profile on a differently partitioned node must not look identical.
    `cpd` is AMD's `--cores_per_devices`, which despite its name counts pipeline processes per
    device ID, not CPU cores or partitions.
    """

    # Fields the profile's `layout:` does not hold: the backend is `target.backend`'s.
    NOT_YAML: ClassVar[tuple[str, ...]] = ("backend", "where", "origins")

    backend: str
    gpus: int | None = field(metadata=rules(minimum=1, example=8))
    partition: str | None
    devices: tuple[int, ...]
    cpd: int = field(metadata=rules(minimum=1, example=1))
    batch_size: int = field(metadata=rules(minimum=1, example=32))
    vae_batch_size: int = field(metadata=rules(minimum=1, example=1))
    numa: bool
    cores_per_device: int | None = field(metadata=rules(minimum=1, example=1))
    allow_oversubscribe: bool
    # Where each value came from, for errors found later (a plan that does not fit this
    # machine): the profile file's path, and the fields a flag or `--set` gave. Not part
    # of the layout's identity.
    where: str | None = field(default=None, compare=False, repr=False)
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], backend: str, where: str,
                  set_fields: Iterable[str] = ()) -> LayoutSpec:
        """Read a `layout:` mapping; `where` is the profile path that errors should point at,
        `set_fields` the fields a `--set layout.X=V` gave (errors then name that)."""
        if not isinstance(raw, Mapping):
            raise BadInput(f"the layout section must be a mapping, not {type(raw).__name__}",
                           where=f"{where}: layout",
                           fix="write `layout:` followed by indented `key: value` lines")
        values = dict(raw)
        given_backend = values.pop("backend", None)
        src = _Source(where, values, {f: f"--set layout.{f}" for f in set_fields})
        if given_backend is not None and given_backend != backend:
            raise src.error("backend", f"layout says backend {given_backend!r} but the target "
                            f"is {backend!r}", fix="remove layout.backend or make them agree")
        src.check_keys(dataclass_keys(cls, skip=cls.NOT_YAML))
        return _build(backend, src)

    def with_overrides(
        self,
        *,
        partition: str | None = None,
        devices: str | int | list | tuple | None = None,
        cpd: int | None = None,
        batch_size: int | None = None,
        vae_batch_size: int | None = None,
        where: str = "command line",
    ) -> LayoutSpec:
        """The layout with command-line flags applied, validated again as a whole.

        A new partition without new devices resets devices to the new mode's full range:
        the old IDs meant different hardware (ID 12 is a partition of GPU 1 in CPX but does
        not exist in SPX), so keeping them would be wrong either way. A new batch size
        carries the VAE batch with it when the two were equal, and otherwise caps the VAE
        batch at it, so `--batch-size 8` alone is never rejected for a value the user did not
        type; the plan and the result record show the VAE batch actually used.
        """
        given = {
            "partition": partition, "devices": devices, "cpd": cpd,
            "batch_size": batch_size, "vae_batch_size": vae_batch_size,
        }
        given = {k: v for k, v in given.items() if v is not None}
        values: dict[str, Any] = self.to_dict()
        values.pop("backend")
        values.update(given)
        if "partition" in given and "devices" not in given:
            values["devices"] = None
        if "batch_size" in given and "vae_batch_size" not in given:
            old_vae = self.vae_batch_size
            new_batch = given["batch_size"]
            if isinstance(new_batch, int) and not isinstance(new_batch, bool):
                follows = old_vae == self.batch_size
                values["vae_batch_size"] = new_batch if follows else min(old_vae, new_batch)
        return _build(self.backend, _Source(self.where, values, {
            **self.origins, **{k: f"{where}: {_FLAGS[k]}" for k in given}}))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; from_dict(d, d["backend"], ...) gives back an equal LayoutSpec."""
        return {
            "backend": self.backend,
            "gpus": self.gpus,
            "partition": self.partition,
            "devices": format_device_ids(self.devices),
            "cpd": self.cpd,
            "batch_size": self.batch_size,
            "vae_batch_size": self.vae_batch_size,
            "numa": self.numa,
            "cores_per_device": self.cores_per_device,
            "allow_oversubscribe": self.allow_oversubscribe,
        }

    @property
    def worker_count(self) -> int:
        return self.cpd * len(self.devices)


def _build(backend: str, src: _Source) -> LayoutSpec:
    """The layout `src` holds, its fields read as LayoutSpec declares them, checked as a
    whole: what each field means depends on the backend and on the others."""
    if backend not in BACKENDS:
        raise Fields({}, src.where, "target").error(
            "backend", f"backend {backend!r} is not one of {', '.join(BACKENDS)}",
            fix="set target.backend to hip, cuda or cpu")
    get = src.raw.get

    gpus = src.value(LayoutSpec, "gpus")
    if gpus is not None and backend == "cpu":
        raise src.error("gpus", "gpus does not apply to the cpu backend",
                        fix=f"{src.removal('gpus')} (cpu devices come from layout.devices)")

    partition = get("partition")
    if partition is not None:
        if backend != "hip":
            raise src.error("partition", f"partition modes exist only on the hip backend, "
                            f"not {backend}", fix=src.removal("partition"))
        if not isinstance(partition, str) or partition.lower() not in PARTITIONS:
            raise src.error("partition", f"unknown partition mode {_show(partition)}",
                            fix=f"use one of {', '.join(PARTITIONS)} "
                                f"(e.g. {src.setting('partition', 'cpx')})")
        partition = partition.lower()
        if gpus is None:
            raise src.error("partition", "a partition mode needs layout.gpus to know how "
                            "many device IDs exist",
                            fix=f"add {src.setting('gpus', 8)} (MI300X/MI325X)")
    elif backend == "hip" and gpus is not None:
        partition = "spx"  # the mode a node boots in; stated in the plan's notes

    raw_devices = get("devices")
    if raw_devices is None:
        devices = _default_devices(backend, gpus, partition, src)
    else:
        devices = parse_device_ids(raw_devices, src.where_of("devices"))
    _check_device_range(backend, gpus, partition, devices, src)

    cpd = src.value(LayoutSpec, "cpd") or 1
    batch_size = src.value(LayoutSpec, "batch_size")
    if batch_size is None:
        raise src.missing("batch_size", "32 (the MLPerf recipe's)")
    vae_batch_size = src.value(LayoutSpec, "vae_batch_size") or batch_size
    if vae_batch_size > batch_size:
        raise src.error("vae_batch_size", f"vae_batch_size {vae_batch_size} is larger than "
                        f"batch_size {batch_size}: the VAE decodes the latents of one batch",
                        fix=f"use {src.setting('vae_batch_size', batch_size)} or less")

    numa = bool(src.value(LayoutSpec, "numa"))
    if numa and backend != "hip":
        raise src.error("numa", f"NUMA pinning is mapped for hip GPUs only, not {backend}",
                        fix=src.removal("numa"))
    if numa and gpus is None:
        raise src.error("numa", "NUMA pinning needs layout.gpus to map device IDs to GPUs",
                        fix=f"add {src.setting('gpus', 8)}, or {src.removal('numa')}")

    cores = src.value(LayoutSpec, "cores_per_device")
    if cores is not None and backend != "cpu":
        raise src.error("cores_per_device", "cores_per_device applies to the cpu backend "
                        "only", fix=src.removal("cores_per_device"))
    allow_oversubscribe = bool(src.value(LayoutSpec, "allow_oversubscribe"))
    if allow_oversubscribe and backend != "cpu":
        raise src.error("allow_oversubscribe", "allow_oversubscribe applies to the cpu "
                        "backend only", fix=src.removal("allow_oversubscribe"))

    return LayoutSpec(
        backend=backend, gpus=gpus, partition=partition, devices=devices, cpd=cpd,
        batch_size=batch_size, vae_batch_size=vae_batch_size, numa=numa,
        cores_per_device=cores, allow_oversubscribe=allow_oversubscribe,
        where=src.where, origins=src.origins,
    )


def _default_devices(backend: str, gpus: int | None, partition: str | None,
                     src: _Source) -> tuple[int, ...]:
    if backend == "cpu":
        return (0,)
    if gpus is None:
        raise src.error("devices", f"the {backend} backend needs layout.devices, or "
                        "layout.gpus to default to every GPU",
                        fix=f"add {src.setting('gpus', 8)} or {src.setting('devices', '0-7')}")
    count = visible_device_count(gpus, partition) if partition else gpus
    return tuple(range(count))


def _check_device_range(backend: str, gpus: int | None, partition: str | None,
                        devices: tuple[int, ...], src: _Source) -> None:
    if backend == "cpu" or gpus is None:
        return
    count = visible_device_count(gpus, partition) if partition else gpus
    bad = [d for d in devices if d >= count]
    if not bad:
        return
    ids = f"IDs 0-{count - 1}" if count > 1 else "ID 0"
    gpu_word = "GPU" if gpus == 1 else "GPUs"
    if partition:
        where_text = f"in {partition.upper()} mode on {gpus} {gpu_word} ({ids})"
    else:
        where_text = f"on {gpus} {gpu_word} ({ids})"
    more = f" (nor do {len(bad) - 1} more of the IDs given)" if len(bad) > 1 else ""
    message = f"device {bad[0]} does not exist {where_text}{more}"
    full = src.setting("devices", f"0-{count - 1}" if count > 1 else "0")
    fitting = [m for m, k in PARTITIONS.items() if gpus * k > max(bad)]
    if partition and fitting:
        fix = f"use {src.setting('partition', fitting[0])} or {full}"
    else:
        fix = f"use {full}"
    raise src.error("devices", message, fix=fix)


@dataclass(frozen=True)
class Worker:
    """One pipeline process: everything needed to start it, decided before any starts.

    `env` is an overlay on the parent's environment. Each worker sees exactly one device and
    opens it as device 0 (`device_uri`), so pipeline code never needs the layout.
    """

    index: int
    name: str
    device_id: int
    device_uri: str
    slot: int
    env: dict[str, str]
    cpu_affinity: tuple[int, ...] | None
    runtime_flags: tuple[str, ...]
    numa_node: int | None
    command_prefix: tuple[str, ...]
    batch_size: int
    vae_batch_size: int

    @property
    def driver(self) -> str:
        """The IREE driver its device URI names (`hip` of `hip://0`): what `--check` asks."""
        return self.device_uri.split("://")[0]

    def view_prefix(self) -> tuple[str, ...]:
        """The argv prefix that puts another process (an `iree-benchmark-module` stage) in
        this worker's device view: its NUMA binding, then its CPU affinity. The worker sets
        its affinity itself at start; a tool started beside it needs `taskset`, or its
        calling thread runs on any core and the stage looks faster than the worker's."""
        taskset = ("taskset", "-c", _core_ranges(self.cpu_affinity)) if self.cpu_affinity else ()
        return (*self.command_prefix, *taskset)

    def view_text(self) -> str:
        """The device view in one line: visibility variables, cores, NUMA binding."""
        parts = [f"{k}={v}" for k, v in self.env.items()]
        if self.cpu_affinity is not None:
            parts.append(f"cores {_core_ranges(self.cpu_affinity)}")
        if self.numa_node is not None:
            parts.append(f"NUMA node {self.numa_node}")
        return ", ".join(parts) or "whole host"

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "device_id": self.device_id,
            "device_uri": self.device_uri,
            "slot": self.slot,
            "env": dict(self.env),
            "cpu_affinity": None if self.cpu_affinity is None else list(self.cpu_affinity),
            "runtime_flags": list(self.runtime_flags),
            "numa_node": self.numa_node,
            "command_prefix": list(self.command_prefix),
            "batch_size": self.batch_size,
            "vae_batch_size": self.vae_batch_size,
        }


@dataclass(frozen=True)
class Plan:
    """The workers a layout expands to, plus what the operator must know or do first.

    `notes` carry facts the runner cannot check or change itself, such as the partition
    mode the node must already be in.
    """

    layout: LayoutSpec
    workers: tuple[Worker, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout.to_dict(),
            "workers": [w.to_dict() for w in self.workers],
            "notes": list(self.notes),
        }

    def table(self) -> str:
        """Plain aligned text, one row per worker, so 128 rows can be scanned or grepped."""
        header = ("worker", "device", "slot", "uri", "env", "affinity", "numa", "batch/vae")
        rows = [header]
        for w in self.workers:
            env = " ".join(f"{k}={v}" for k, v in w.env.items()) or "-"
            affinity = "-" if w.cpu_affinity is None else _core_ranges(w.cpu_affinity)
            numa = "-" if w.numa_node is None else str(w.numa_node)
            rows.append((w.name, str(w.device_id), str(w.slot), w.device_uri, env, affinity,
                         numa, f"{w.batch_size}/{w.vae_batch_size}"))
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        lines = ["  ".join(cell.ljust(wd) for cell, wd in zip(r, widths, strict=True)).rstrip()
                 for r in rows]
        return "\n".join(lines)


def _core_ranges(cores: Iterable[int]) -> str:
    """Cores as ranges (`0-3,8`): affinity is a set, so sorting loses nothing."""
    return format_device_ids(sorted(cores))


def _visibility_env(backend: str, device_id: int) -> dict[str, str]:
    """Environment that leaves a worker exactly one device, which it then opens as device 0.

    On ROCm, ROCR_VISIBLE_DEVICES filters first, and HIP_VISIBLE_DEVICES then indexes into
    what ROCr left (PyTorch's ROCm device discovery documents the same layering). So the ID
    goes into ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES is "0", the only index left:
    setting both to the ID, as a launcher script setting the full list on the parent can,
    would leave a single-device worker with no device for any ID but 0. HIP_VISIBLE_DEVICES
    is set rather than left out so a value inherited from the parent cannot interfere.
    """
    if backend == "hip":
        return {"ROCR_VISIBLE_DEVICES": str(device_id), "HIP_VISIBLE_DEVICES": "0"}
    if backend == "cuda":
        return {"CUDA_VISIBLE_DEVICES": str(device_id)}
    return {}


_DEVICE_URIS = {"hip": "hip://0", "cuda": "cuda://0", "cpu": "local-task"}


def cpu_cores_for(layout: LayoutSpec, available_cores: tuple[int, ...],
                  where: str | None = None) -> dict[int, tuple[int, ...]]:
    """Cores each cpu device ID gets: device d takes [d*k, (d+1)*k) of the available cores.

    Keyed by ID, not position, so `--devices 1` alone runs on the same cores as device 1 of a
    full run: a CPU "device" stays one fixed slice of the machine, like a GPU ID does.
    Overlapping slices make workers of different devices fight for cores and turn timings
    into noise, so they are an error unless the profile allows them.
    """
    src = _Source(where or layout.where, {}, layout.origins)
    cores = sorted(set(available_cores))
    if not cores:
        raise src.error("devices", "no CPU cores are available to this process",
                        fix="check the process's CPU affinity (taskset -p $$)")
    n = len(cores)
    count = len(layout.devices)
    k = layout.cores_per_device or max(1, n // count)
    available = f"{n} available to this process ({_core_ranges(cores)})"
    fit = max(1, n // k)
    fewer = (f", fewer cores per device ({src.setting('cores_per_device', k // 2)})"
             if k > 1 else "")
    fix = (f"use at most {fit} device(s) (e.g. {src.setting('devices', _first(fit))}){fewer}, "
           f"or let devices share cores ({src.setting('allow_oversubscribe', 'true')})")
    if not layout.allow_oversubscribe and count * k > n:
        raise src.error("devices", f"{count} cpu device(s) x {k} core(s) each need {count * k} "
                        f"cores; {available}", fix=fix)
    owner: dict[int, int] = {}
    result: dict[int, tuple[int, ...]] = {}
    for d in layout.devices:
        picked = [cores[(d * k + j) % n] for j in range(k)]
        if not layout.allow_oversubscribe:
            for c in picked:
                if c in owner:
                    raise src.error(
                        "devices", f"devices {owner[c]} and {d} would share core {c}: device "
                        f"d gets cores [d*{k}, (d+1)*{k}) modulo the {available}", fix=fix)
                owner[c] = d
        result[d] = tuple(dict.fromkeys(picked))
    return result


def _first(count: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"


def plan_workers(layout: LayoutSpec, available_cores: tuple[int, ...] | None = None,
                 *, where: str | None = None) -> Plan:
    """Expand a layout into its workers, in AMD's order: every device for slot 0, then slot 1.

    That order means the first len(devices) workers cover every device once, so a run cut
    short still spread its batches over all the hardware. `available_cores` defaults to this
    process's CPU affinity (not the machine's core count: containers and Slurm restrict it).
    """
    notes: list[str] = []
    cpu_cores: dict[int, tuple[int, ...]] = {}
    if layout.backend == "cpu":
        if available_cores is None:
            available_cores = tuple(sorted(os.sched_getaffinity(0)))
        cpu_cores = cpu_cores_for(layout, available_cores, where)
        k = len(next(iter(cpu_cores.values())))
        notes.append(f"{len(layout.devices)} cpu device(s) x {k} core(s) each, out of cores "
                     f"{_core_ranges(available_cores)}; local-task confined with {CPU_IDS_FLAG}")
        if layout.allow_oversubscribe:
            notes.append("allow_oversubscribe is on: devices may share cores, so timings "
                         "are not comparable with a run that does not")
    if layout.backend == "hip":
        if layout.partition is not None and layout.gpus is not None:
            mode = layout.partition.upper()
            count = visible_device_count(layout.gpus, layout.partition)
            notes.append(
                f"partition mode {mode} is a system setting the runner never changes: the "
                f"node must already be in it (`{' '.join(partition_command(mode))}`, as "
                f"root; `rocm-smi --showcomputepartition` shows the current mode); "
                f"{layout.gpus} GPUs x {PARTITIONS[layout.partition]} = {count} device IDs")
        else:
            notes.append("no layout.gpus/partition given: device IDs are not checked against "
                         "the node's partition mode")
        notes.append("each worker gets ROCR_VISIBLE_DEVICES=<id> and HIP_VISIBLE_DEVICES=0 "
                     "(HIP indexes within what ROCr exposes) and opens hip://0")
        if layout.numa:
            notes.append(f"NUMA pinning assumes {NUMA_NODES} NUMA nodes with the GPUs split "
                         "evenly (MI300X: GPUs 0-3 on node 0, 4-7 on node 1); check with "
                         "`rocm-smi --showtoponuma`")

    if layout.backend == "cuda":
        notes.append("each worker gets CUDA_VISIBLE_DEVICES=<id> and opens cuda://0 (the "
                     "one GPU it sees)")
    names_width = max(3, len(str(layout.worker_count - 1)))
    workers: list[Worker] = []
    index = 0
    for slot in range(layout.cpd):
        for device in layout.devices:
            numa_node = None
            prefix: tuple[str, ...] = ()
            if layout.numa and layout.gpus is not None and layout.partition is not None:
                numa_node = numa_node_of(device, layout.gpus, layout.partition)
                prefix = ("numactl", f"--cpunodebind={numa_node}", f"--membind={numa_node}")
            affinity = cpu_cores.get(device) if layout.backend == "cpu" else None
            flags = (f"{CPU_IDS_FLAG}={','.join(map(str, affinity))}",) if affinity else ()
            workers.append(Worker(
                index=index,
                name=f"w{index:0{names_width}d}",
                device_id=device,
                device_uri=_DEVICE_URIS[layout.backend],
                slot=slot,
                env=_visibility_env(layout.backend, device),
                cpu_affinity=affinity,
                runtime_flags=flags,
                numa_node=numa_node,
                command_prefix=prefix,
                batch_size=layout.batch_size,
                vae_batch_size=layout.vae_batch_size,
            ))
            index += 1
    return Plan(layout=layout, workers=tuple(workers), notes=tuple(notes))
