"""Device layout: parsing, validation, and the worker plan AMD's harness would start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from runner.base.errors import RunnerError
from runner.config.layout import (
    CPU_IDS_FLAG,
    PARTITIONS,
    LayoutSpec,
    format_device_ids,
    numa_node_of,
    parse_device_ids,
    partition_command,
    plan_workers,
)

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
WHERE = "configs/mi325x.yaml"


def mi325x(**extra) -> LayoutSpec:
    raw = {"gpus": 8, "partition": "cpx", "devices": "0-63", "cpd": 1, "batch_size": 32}
    raw.update(extra)
    return LayoutSpec.from_dict(raw, "hip", WHERE)


def cpu(**extra) -> LayoutSpec:
    raw = {"devices": "0-1", "batch_size": 1}
    raw.update(extra)
    return LayoutSpec.from_dict(raw, "cpu", "configs/cpu.yaml")


def error_of(fn, *args, **kwargs) -> RunnerError:
    with pytest.raises(RunnerError) as info:
        fn(*args, **kwargs)
    err = info.value
    assert err.fix, f"error without a fix: {err}"
    return err


# --- device ID parsing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0-63", tuple(range(64))),
        ("0,2,4", (0, 2, 4)),
        ("0-3,8-11", (0, 1, 2, 3, 8, 9, 10, 11)),
        (" 5 , 1-2 ", (5, 1, 2)),  # order kept: it is the worker assignment order
        (7, (7,)),
        ([3, 1, "4-5"], (3, 1, 4, 5)),
        ("2-2", (2,)),
    ],
)
def test_parse_device_ids(spec, expected):
    assert parse_device_ids(spec, "f: layout.devices") == expected


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("0-", "'0-'"),
        ("3-1", "backwards"),
        ("5-2", "backwards"),
        ("x", "'x'"),
        ("a-b", "'a-b'"),
        ("-1", "negative"),
        (-1, "negative"),
        ("", "empty"),
        ("0,,1", "empty entry"),
        ([], "no device IDs"),
        (True, "not a device ID"),
        (1.5, "not a device list"),
        ("0-100000", "more than"),
    ],
)
def test_parse_device_ids_rejects_malformed(spec, says):
    err = error_of(parse_device_ids, spec, "configs/mi325x.yaml: layout.devices")
    assert err.where == "configs/mi325x.yaml: layout.devices"
    assert "layout.devices" in str(err)
    assert says in str(err)


@pytest.mark.parametrize("spec", ["0-3,3", "1,2,1", [0, "0-1"]])
def test_parse_device_ids_rejects_duplicates_naming_the_id(spec):
    err = error_of(parse_device_ids, spec, "f: layout.devices")
    dup = 3 if spec == "0-3,3" else (1 if spec == "1,2,1" else 0)
    assert f"device {dup} is listed twice" in str(err)


@pytest.mark.parametrize("ids", [(0, 1, 2, 3), (0, 2, 4), (5, 6, 7, 0, 1), (3,), (0, 1, 9)])
def test_format_device_ids_round_trips(ids):
    assert parse_device_ids(format_device_ids(ids), "x") == ids


# --- layout validation ------------------------------------------------------------------------


def test_mi325x_cpx_gives_64_workers_on_ids_0_to_63():
    plan = plan_workers(mi325x())
    assert len(plan.workers) == 64
    assert [w.device_id for w in plan.workers] == list(range(64))
    assert [w.name for w in plan.workers[:3]] == ["w000", "w001", "w002"]
    assert plan.workers[-1].name == "w063"
    assert {w.slot for w in plan.workers} == {0}
    assert all(w.batch_size == 32 and w.vae_batch_size == 32 for w in plan.workers)


def test_default_devices_are_every_visible_id():
    for mode, parts in PARTITIONS.items():
        spec = LayoutSpec.from_dict({"gpus": 8, "partition": mode, "batch_size": 4}, "hip", "f")
        assert spec.devices == tuple(range(8 * parts))
    # hip with gpus but no partition: the boot-time SPX mode
    spec = LayoutSpec.from_dict({"gpus": 8, "batch_size": 4}, "hip", "f")
    assert (spec.partition, spec.devices) == ("spx", tuple(range(8)))


def test_partition_override_spx_resets_devices_to_0_7():
    spec = mi325x().with_overrides(partition="spx")
    assert spec.partition == "spx"
    assert spec.devices == tuple(range(8))
    plan = plan_workers(spec)
    assert [w.device_id for w in plan.workers] == list(range(8))


def test_partition_override_is_case_insensitive_and_keeps_explicit_devices():
    spec = mi325x().with_overrides(partition="QPX", devices="0-3,8")
    assert (spec.partition, spec.devices) == ("qpx", (0, 1, 2, 3, 8))


def test_cpd_2_gives_128_workers_slot_major():
    plan = plan_workers(mi325x().with_overrides(cpd=2))
    assert len(plan.workers) == 128
    w64 = plan.workers[64]
    assert (w64.name, w64.device_id, w64.slot) == ("w064", 0, 1)
    assert [w.device_id for w in plan.workers] == list(range(64)) * 2
    assert [w.slot for w in plan.workers] == [0] * 64 + [1] * 64
    assert plan.workers[127].name == "w127"


def test_worker_device_is_devices_i_mod_n():
    spec = LayoutSpec.from_dict({"devices": "5,3,9", "cpd": 3, "batch_size": 2}, "cuda", "f")
    plan = plan_workers(spec)
    assert [w.device_id for w in plan.workers] == [5, 3, 9] * 3
    assert [w.slot for w in plan.workers] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_names_widen_past_999_workers():
    spec = LayoutSpec.from_dict({"devices": "0-499", "cpd": 3, "batch_size": 1}, "cuda", "f")
    names = [w.name for w in plan_workers(spec).workers]
    assert names[0] == "w0000" and names[-1] == "w1499"
    assert names == sorted(names)


def test_hip_env_exact():
    w = plan_workers(mi325x()).workers[37]
    # ROCr picks the partition; HIP then indexes within the one device ROCr left.
    assert w.env == {"ROCR_VISIBLE_DEVICES": "37", "HIP_VISIBLE_DEVICES": "0"}
    assert w.device_uri == "hip://0"
    assert w.cpu_affinity is None and w.runtime_flags == ()
    assert w.numa_node is None and w.command_prefix == ()


def test_cuda_env():
    spec = LayoutSpec.from_dict({"gpus": 4, "batch_size": 2}, "cuda", "f")
    plan = plan_workers(spec)
    assert [w.env for w in plan.workers] == [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(4)]
    assert {w.device_uri for w in plan.workers} == {"cuda://0"}
    err = error_of(LayoutSpec.from_dict, {"gpus": 4, "devices": "0-4", "batch_size": 2},
                   "cuda", "f")
    assert err.where == "f: layout.devices"
    assert "device 4 does not exist on 4 GPUs (IDs 0-3)" in str(err)


def test_cpu_affinity_split_for_two_devices_over_two_cores():
    plan = plan_workers(cpu(), available_cores=(0, 1))
    assert [w.cpu_affinity for w in plan.workers] == [(0,), (1,)]
    assert [w.runtime_flags for w in plan.workers] == [
        ("--task_topology_cpu_ids=0",), ("--task_topology_cpu_ids=1",)]
    assert CPU_IDS_FLAG == "--task_topology_cpu_ids"
    for w in plan.workers:
        assert w.env == {}
        assert w.device_uri == "local-task"


def test_cpu_default_cores_per_device_divides_available_cores():
    plan = plan_workers(cpu(), available_cores=(4, 5, 6, 7, 8, 9, 10, 11))
    assert [w.cpu_affinity for w in plan.workers] == [(4, 5, 6, 7), (8, 9, 10, 11)]
    assert plan.workers[1].runtime_flags == ("--task_topology_cpu_ids=8,9,10,11",)
    # a device ID is a fixed slice of the machine: device 1 alone keeps its cores
    alone = plan_workers(cpu(devices="1", cores_per_device=4), available_cores=tuple(range(4, 12)))
    assert alone.workers[0].cpu_affinity == (8, 9, 10, 11)


def test_cpu_default_uses_process_affinity(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {3, 2})
    plan = plan_workers(cpu())
    assert [w.cpu_affinity for w in plan.workers] == [(2,), (3,)]


def test_cpu_cpd_slots_share_their_device_cores():
    plan = plan_workers(cpu(cpd=2), available_cores=(0, 1))
    assert [(w.device_id, w.slot, w.cpu_affinity) for w in plan.workers] == [
        (0, 0, (0,)), (1, 0, (1,)), (0, 1, (0,)), (1, 1, (1,))]


def test_cpu_oversubscription_is_an_error_unless_allowed():
    err = error_of(plan_workers, cpu(devices="0-2"), (0, 1), where="configs/cpu.yaml")
    assert err.where == "configs/cpu.yaml: layout.devices"
    assert "3 cpu device(s)" in str(err) and "allow_oversubscribe" in err.fix
    err = error_of(plan_workers, cpu(cores_per_device=2), (0, 1, 2))
    assert "need 4 cores" in str(err)
    err = error_of(plan_workers, cpu(devices="0,2"), (0, 1))  # fits in count, not by ID
    assert "devices 0 and 2 would share core 0" in str(err)

    plan = plan_workers(cpu(devices="0-2", allow_oversubscribe=True), (0, 1))
    assert [w.cpu_affinity for w in plan.workers] == [(0,), (1,), (0,)]
    assert any("allow_oversubscribe" in n for n in plan.notes)


def test_numa_cpx_id_37_is_gpu_4_on_node_1():
    assert numa_node_of(37, 8, "cpx") == 1
    assert numa_node_of(31, 8, "cpx") == 0
    assert numa_node_of(3, 8, "spx") == 0 and numa_node_of(4, 8, "spx") == 1
    plan = plan_workers(mi325x(numa=True))
    w = plan.workers[37]
    assert w.numa_node == 1
    assert w.command_prefix == ("numactl", "--cpunodebind=1", "--membind=1")
    assert plan.workers[0].command_prefix == ("numactl", "--cpunodebind=0", "--membind=0")
    assert [w.numa_node for w in plan.workers] == [0] * 32 + [1] * 32


def test_partition_command_and_note():
    assert partition_command("cpx") == ["rocm-smi", "--setcomputepartition", "CPX"]
    assert partition_command("SPX") == ["rocm-smi", "--setcomputepartition", "SPX"]
    notes = plan_workers(mi325x()).notes
    assert any("rocm-smi --setcomputepartition CPX" in n for n in notes)
    assert not any("rocm-smi" in n for n in plan_workers(cpu(), (0, 1)).notes)
    with pytest.raises(RunnerError):
        partition_command("npx")


# --- every bad input names its field --------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ({"devices": "0-"}, "devices", "'0-'"),
        ({"devices": "3-1"}, "devices", "backwards"),
        ({"devices": "x"}, "devices", "'x'"),
        ({"devices": "0-3,2"}, "devices", "device 2 is listed twice"),
        ({"devices": "0-64"}, "devices", "device 64 does not exist in CPX mode on 8 GPUs"),
        ({"partition": "npx"}, "partition", "unknown partition mode 'npx'"),
        ({"partition": 4}, "partition", "unknown partition mode"),
        ({"batch_size": 0}, "batch_size", "at least 1"),
        ({"batch_size": None}, "batch_size", "required"),
        ({"batch_size": "32"}, "batch_size", "whole number"),
        ({"batch_size": True}, "batch_size", "whole number"),
        ({"vae_batch_size": 33}, "vae_batch_size", "larger than batch_size 32"),
        ({"vae_batch_size": 0}, "vae_batch_size", "at least 1"),
        ({"cpd": 0}, "cpd", "at least 1"),
        ({"gpus": 0}, "gpus", "at least 1"),
        ({"numa": "yes"}, "numa", "true or false"),
        ({"cores_per_device": 2}, "cores_per_device", "cpu backend only"),
        ({"allow_oversubscribe": True}, "allow_oversubscribe", "cpu backend only"),
        ({"batchsize": 3}, "batchsize", "unknown field"),
        ({"backend": "cuda"}, "backend", "'cuda'"),
    ],
)
def test_bad_profile_values_name_the_field(extra, field, says):
    err = error_of(mi325x, **extra)
    assert err.where == f"{WHERE}: layout.{field}"
    assert f"layout.{field}" in str(err)
    assert says in str(err)


def test_unknown_layout_field_suggests_the_closest_one():
    err = error_of(mi325x, vae_batchsize=4)
    assert err.where == f"{WHERE}: layout.vae_batchsize"
    assert err.fix.startswith("did you mean `layout.vae_batch_size`?")
    assert "allow_oversubscribe" in err.fix  # and lists every valid key


def test_id_out_of_range_for_spx_suggests_partition_or_range():
    err = error_of(LayoutSpec.from_dict,
                   {"gpus": 8, "partition": "spx", "devices": "0-63", "batch_size": 32},
                   "hip", WHERE)
    assert err.where == f"{WHERE}: layout.devices"
    assert "device 8 does not exist in SPX mode on 8 GPUs (IDs 0-7)" in str(err)
    assert "layout.partition: cpx" in err.fix and "layout.devices: 0-7" in err.fix

    err = error_of(mi325x().with_overrides, partition="spx", devices="12")
    assert err.where == "command line: --devices"
    assert "device 12 does not exist in SPX mode on 8 GPUs (IDs 0-7)" in str(err)
    assert "--partition" in err.fix and "--devices 0-7" in err.fix

    err = error_of(mi325x().with_overrides, devices="64")  # no mode has it
    assert err.fix == "use --devices 0-63"


def test_unknown_backend_and_partition_on_other_backends():
    err = error_of(LayoutSpec.from_dict, {"batch_size": 1}, "rocm", "p.yaml")
    assert "target.backend" in err.where
    err = error_of(LayoutSpec.from_dict, {"partition": "cpx", "batch_size": 1}, "cpu", "p.yaml")
    assert err.where == "p.yaml: layout.partition" and "hip backend" in str(err)
    err = error_of(LayoutSpec.from_dict, {"partition": "spx", "devices": 0, "batch_size": 1},
                   "cuda", "p.yaml")
    assert err.where == "p.yaml: layout.partition"
    err = error_of(LayoutSpec.from_dict, {"gpus": 2, "batch_size": 1}, "cpu", "p.yaml")
    assert err.where == "p.yaml: layout.gpus"
    err = error_of(LayoutSpec.from_dict, {"numa": True, "batch_size": 1}, "cpu", "p.yaml")
    assert err.where == "p.yaml: layout.numa"
    err = error_of(LayoutSpec.from_dict, {"partition": "cpx", "batch_size": 1}, "hip", "p.yaml")
    assert err.where == "p.yaml: layout.partition" and "layout.gpus" in str(err)
    err = error_of(LayoutSpec.from_dict, {"batch_size": 1}, "cuda", "p.yaml")
    assert err.where == "p.yaml: layout.devices"
    err = error_of(LayoutSpec.from_dict, ["gpus", 8], "hip", "p.yaml")
    assert err.where == "p.yaml: layout"


@pytest.mark.parametrize(
    ("overrides", "flag", "says"),
    [
        ({"devices": "0-"}, "--devices", "'0-'"),
        ({"devices": "1,1"}, "--devices", "device 1 is listed twice"),
        ({"partition": "npx"}, "--partition", "unknown partition mode"),
        ({"cpd": 0}, "--cpd", "at least 1"),
        ({"batch_size": 0}, "--batch-size", "at least 1"),
        ({"vae_batch_size": 64}, "--vae-batch-size", "larger than batch_size 32"),
    ],
)
def test_bad_overrides_name_the_flag(overrides, flag, says):
    err = error_of(mi325x().with_overrides, **overrides)
    assert err.where == f"command line: {flag}"
    assert says in str(err)


def test_batch_override_carries_the_vae_batch():
    assert mi325x().with_overrides(batch_size=8).vae_batch_size == 8
    spec = mi325x(vae_batch_size=4)
    assert spec.with_overrides(batch_size=16).vae_batch_size == 4
    assert spec.with_overrides(batch_size=2).vae_batch_size == 2
    assert spec.with_overrides(batch_size=16, vae_batch_size=16).vae_batch_size == 16


def test_overrides_leave_the_original_untouched():
    spec = mi325x()
    spec.with_overrides(cpd=4, batch_size=1)
    assert (spec.cpd, spec.batch_size) == (1, 32)


# --- serialization and display ----------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: mi325x(),
        lambda: mi325x(numa=True, vae_batch_size=1, cpd=2, devices="8-15,0-7"),
        lambda: mi325x().with_overrides(partition="spx"),
        lambda: LayoutSpec.from_dict({"devices": [2, 0], "batch_size": 4}, "hip", "f"),
        lambda: LayoutSpec.from_dict({"gpus": 2, "batch_size": 4}, "cuda", "f"),
        lambda: LayoutSpec.from_dict({"devices": "0-3", "batch_size": 1, "cores_per_device": 2,
                                      "allow_oversubscribe": True}, "cpu", "f"),
    ],
)
def test_to_dict_round_trips_through_json_and_from_dict(make):
    spec = make()
    d = json.loads(json.dumps(spec.to_dict()))
    assert LayoutSpec.from_dict(d, d["backend"], "record.json") == spec


def test_plan_to_dict_is_json():
    plan = plan_workers(mi325x(numa=True))
    d = json.loads(json.dumps(plan.to_dict()))
    assert len(d["workers"]) == 64
    assert d["workers"][37]["env"] == {"ROCR_VISIBLE_DEVICES": "37", "HIP_VISIBLE_DEVICES": "0"}
    assert d["workers"][37]["command_prefix"] == ["numactl", "--cpunodebind=1", "--membind=1"]
    assert d["layout"]["devices"] == "0-63"
    assert d["notes"] == list(plan.notes)


def test_table_lists_every_worker_aligned():
    plan = plan_workers(mi325x(numa=True).with_overrides(cpd=2))
    lines = plan.table().splitlines()
    assert lines[0].split() == ["worker", "device", "slot", "uri", "env", "affinity", "numa",
                                "batch/vae"]
    assert len(lines) == 1 + 128
    for w, line in zip(plan.workers, lines[1:], strict=True):
        assert line.startswith(w.name + " ")
        assert f"ROCR_VISIBLE_DEVICES={w.device_id} " in line
    # columns line up: every row has its device column at the same offset
    col = lines[0].index("device")
    assert all(line[col:].split()[0].isdigit() for line in lines[1:])

    cpu_table = plan_workers(cpu(cores_per_device=2), (0, 1, 2, 3)).table()
    assert "w000" in cpu_table and "w001" in cpu_table and "2,3" in cpu_table


# --- the shipped layout sections ----------------------------------------------------------------


def load_layout(name: str, backend: str) -> LayoutSpec:
    path = CONFIGS / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert "layout" in raw, f"{path} has no layout section"
    return LayoutSpec.from_dict(raw["layout"], backend, str(path))


@pytest.mark.parametrize("sku", ["mi300x", "mi325x"])
def test_shipped_cpx_layouts(sku):
    spec = load_layout(sku, "hip")
    assert (spec.gpus, spec.partition, spec.cpd, spec.batch_size) == (8, "cpx", 1, 32)
    assert [w.device_id for w in plan_workers(spec).workers] == list(range(64))


def test_shipped_mi355x_layout():
    spec = load_layout("mi355x", "hip")
    assert (spec.partition, spec.devices, spec.cpd, spec.batch_size) == (
        "spx", tuple(range(8)), 1, 32)
    assert "assumption" in (CONFIGS / "mi355x.yaml").read_text().lower()


def test_shipped_cpu_layout_fits_two_cores():
    spec = load_layout("cpu", "cpu")
    plan = plan_workers(spec, available_cores=(0, 1))
    assert [(w.device_id, w.cpu_affinity) for w in plan.workers] == [(0, (0,)), (1, (1,))]
    assert spec.batch_size == 1
