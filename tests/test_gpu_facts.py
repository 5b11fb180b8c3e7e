"""The GPU facts kept with every timed number (runner.base.gpu_sensors, conditions.gpu_state)
and the processes holding GPUs (runner.base.gpu_holders), read from the vendor tools' real
output: tests/fixtures/gpu_sensors/ and gpu_holders/ hold nvidia-smi captured on H100, H200
and RTX 2080 SUPER machines, and amd-smi/rocm-smi output in their formats (each README says
which were captured and which written from the tools' sources). A GPU cannot be had here:
stand-in tools on PATH print those files and everything from the PATH lookup on runs for
real; a power-cap change is then judged and drawn as the history does."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from runner.base.conditions import Watch, gpu_state
from runner.base.errors import ToolFailed
from runner.base.gpu_holders import (
    GpuProcess,
    amd_pid_gpus,
    amd_processes,
    held_devices,
    nvidia_processes,
    snapshot,
)
from runner.base.gpu_info import nvidia_csv, parse_nvidia_smi
from runner.base.gpu_sensors import (
    Sensors,
    parse_amd,
    parse_nvidia,
    parse_rocm,
    read_sensors,
    sensor_value,
    throttle_reasons,
)

FIXTURES = Path(__file__).parent / "fixtures"
SENSORS = FIXTURES / "gpu_sensors"
HOLDERS = FIXTURES / "gpu_holders"
H100 = SENSORS / "nvidia-smi-query-gpu-h100-load.csv"
H100_APPS = HOLDERS / "nvidia-smi-compute-apps-h100-load.csv"
AMD_METRIC = SENSORS / "amd-smi-metric-mi300x.json"
AMD_LIMIT = SENSORS / "amd-smi-static-limit-mi300x.json"


def stand_in(bin_dir: Path, tool: str, answers: list[tuple[str, Path]],
             exits: dict[str, int] | None = None) -> None:
    """`tool` on PATH printing the file of the first answer whose words all appear in its
    arguments (exiting as `exits` says for that answer, else 0), and failing as an unknown
    option does where none matches."""
    bin_dir.mkdir(exist_ok=True)
    table = [(key.split(), str(path), (exits or {}).get(key, 0)) for key, path in answers]
    script = bin_dir / tool
    script.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"for words, path, code in {table!r}:\n"
        "    if all(any(w in a for a in sys.argv[1:]) for w in words):\n"
        "        sys.stdout.write(open(path).read())\n        sys.exit(code)\n"
        "sys.stderr.write(f'unrecognized arguments: {sys.argv[1:]}\\n')\nsys.exit(2)\n")
    script.chmod(0o755)


def on_path(monkeypatch, bin_dir: Path) -> None:
    """Only the stand-ins and the system's own directories: no real GPU tool is reached."""
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


# --- the readers, on real captures ------------------------------------------------------------
def test_nvidia_smi_sensors_from_an_h100_under_load():
    (g,) = parse_nvidia(H100.read_text())
    assert g == Sensors(0, 59.0, 631.95, 700.0, {"sm": 1980.0, "memory": 2619.0}, ())


def test_a_power_capped_clock_is_named_and_an_idle_gpu_is_not_throttled():
    """The RTX 2080 SUPER's capture holds its clocks down by its power cap (mask 0x4); the
    idle H200's mask is 0x1 (GPU idle), which says nothing of the timed work."""
    (capped,) = parse_nvidia((SENSORS / "nvidia-smi-query-gpu-rtx2080s-idle.csv").read_text())
    assert capped.throttle == ("sw_power_cap",) and capped.power_cap_w == 250.0
    (idle,) = parse_nvidia((SENSORS / "nvidia-smi-query-gpu-h200-idle.csv").read_text())
    assert idle.throttle == () and idle.temperature_c == 28.0
    assert throttle_reasons("0x0000000000000044") == ("sw_power_cap", "hw_thermal_slowdown")
    assert throttle_reasons("[N/A]") == ()


@pytest.mark.parametrize("capture", sorted(SENSORS.glob("nvidia-smi-query-gpu-*.csv")),
                         ids=lambda p: p.stem)
def test_the_reasons_decoded_from_the_mask_are_those_the_driver_says_are_active(capture):
    """Each capture also holds every reason as its own column (`Active`/`Not Active`):
    the mask, decoded, names the same ones (less gpu_idle)."""
    (row,) = nvidia_csv(capture.read_text(), ("clocks_event_reasons.active",),
                        header=True)
    lines = capture.read_text().splitlines()
    cells = dict(zip([c.strip() for c in lines[0].split(",")],
                     [c.strip() for c in lines[1].split(",")], strict=True))
    active = {k.split(".", 1)[1] for k, v in cells.items()
              if k.startswith("clocks_event_reasons.") and v == "Active"}
    assert set(throttle_reasons(row["clocks_event_reasons.active"])) == active - {"gpu_idle"}


def test_a_driver_before_r535_is_asked_the_reasons_by_their_old_name(tmp_path, monkeypatch):
    """It refuses the whole query naming `clocks_event_reasons.active` (exit 2, as it
    refuses `compute_cap`); the sensors are asked again with the old name."""
    refused = "clocks_event_reasons.active"
    stand_in(tmp_path / "bin", "nvidia-smi", [
        ("clocks_throttle_reasons.active", H100),
        (refused, SENSORS / "nvidia-smi-no-event-reasons.txt")], exits={refused: 2})
    on_path(monkeypatch, tmp_path / "bin")
    got = read_sensors()
    assert got.note == "" and got.gpus[0].power_cap_w == 700.0


def test_the_gpu_description_reads_a_capture_of_every_field_by_its_header():
    """A driver's full field list in another order than asked, aliases headed by their full
    names (`clocks.sm` as `clocks.current.sm [MHz]`), units in the cells."""
    (g,) = parse_nvidia_smi(H100.read_text())
    assert (g.name, g.driver, g.memory_mib, g.arch) == (
        "NVIDIA H100 80GB HBM3", "590.48.01", 81559, "9.0")
    assert g.clocks_mhz == {"sm_max": 1980, "memory_max": 2619, "sm": 1980, "memory": 2619}
    rows = nvidia_csv("power.limit [W], index\n700.00 W, 3\n",
                      ("index", "gpu.power.requested_limit"), header=True)
    assert rows == [{"index": "3", "gpu.power.requested_limit": "700.00 W"}]
    with pytest.raises(ToolFailed, match=r"no column temperature\.gpu"):
        nvidia_csv("index, name\n0, X\n", ("index", "temperature.gpu"), header=True)


def test_nvidia_compute_apps_captured_under_load():
    assert nvidia_processes(H100_APPS.read_text()) == [
        GpuProcess(11327, 2566 << 20), GpuProcess(11328, 1542 << 20),
        GpuProcess(11345, 15690 << 20)]
    assert nvidia_processes((HOLDERS / "nvidia-smi-compute-apps-h100-idle.csv").read_text()) \
        == []


def test_amd_smi_describes_the_gpus_where_rocm_smi_is_gone():
    from runner.base.gpu_info import Gpu, parse_amd_smi

    gpus = parse_amd_smi((FIXTURES / "gpu_info" / "amd-smi-static-mi300x.json").read_text())
    assert gpus[1] == Gpu(1, "AMD Instinct MI300X", "6.8.5", 196592, {}, "gfx942",
                          "0000:26:00.0")
    bare = parse_amd_smi('{"gpu_data": [{"gpu": 0, "asic": "N/A", "vram": {"size": "N/A"}}]}')
    assert bare == [Gpu(0, "AMD GPU")]


def test_other_captures_read_where_the_runner_reads_them():
    """Windows' WDDM driver cannot tell a process' memory (`[N/A]`, unknown, still a
    holder); `nvidia-smi -q` gives the driver's CUDA, also once R610's deprecated line is
    gone (the CUDA UMD line then); a MIG node says so in its capture."""
    from runner.history.environment import cuda_version
    from runner.preflight.gpus import nvidia_mig

    wddm = nvidia_processes((HOLDERS / "nvidia-smi-compute-apps-rtx2080s-wddm.csv")
                            .read_text())
    assert len(wddm) == 19 and {p.used_bytes for p in wddm} == {None}
    assert wddm[0] == GpuProcess(2140, None)
    assert cuda_version((FIXTURES / "gpu_info" / "nvidia-smi-q-h200-590.txt").read_text()) \
        == "13.1"
    r610 = (FIXTURES / "gpu_info" / "nvidia-smi-q-rtx2080s-610.txt").read_text()
    assert cuda_version(r610) == "13.3"  # `13.3 [Deprecated; ...]` on R610
    after_cuda_14 = "\n".join(line for line in r610.splitlines()
                              if not line.startswith("CUDA Version"))
    assert "CUDA UMD Version" in after_cuda_14 and cuda_version(after_cuda_14) == "13.3"
    (mig,) = nvidia_mig((FIXTURES / "gpu_partition" / "nvidia-smi-query-gpu-h100-mig.csv")
                        .read_text())
    assert (mig.index, mig.compute) == (0, "ENABLED")


def test_amd_smi_sensors_in_both_layouts():
    """ROCm 6.x: a bare list after a warning line, the cap as the limit's socket_power;
    ROCm 7.2 on: `gpu_data` and the cap per PPT. The hotspot is the temperature kept."""
    idle, busy = parse_amd(AMD_METRIC.read_text(), AMD_LIMIT.read_text())
    assert idle == Sensors(0, 38.0, 141.0, 750.0, {"gfx": 132.0, "memory": 900.0}, ())
    assert busy.throttle == ("throttled",) and busy.temperature_c == 91.0
    (g,) = parse_amd((SENSORS / "amd-smi-metric-gpu-data.json").read_text(),
                     (SENSORS / "amd-smi-static-limit-ppt0.json").read_text())
    assert (g.power_cap_w, g.power_w, g.temperature_c) == (900.0, 212.0, 52.0)
    assert parse_amd(AMD_METRIC.read_text(), None)[0].power_cap_w is None
    bracketed = "[WARNING] amdgpu firmware is old\n" + AMD_METRIC.read_text()
    assert parse_amd(bracketed, None)[0].temperature_c == 38.0
    with pytest.raises(ToolFailed, match="JSON that cannot be read"):
        parse_amd('[{"gpu": 0,\n', None)
    with pytest.raises(ToolFailed, match="amd-smi listed no GPU"):
        parse_amd('{"gpu_data": []}', None)


def test_rocm_smi_sensors_and_values_as_the_tools_print_them():
    cards = parse_rocm((SENSORS / "rocm-smi-sensors-mi300x.json").read_text())
    assert [(c.temperature_c, c.power_w, c.power_cap_w) for c in cards] == [
        (38.0, 133.0, 750.0), (40.0, 131.0, 600.0)]
    assert cards[0].clocks_mhz == {"sclk": 131.0, "mclk": 900.0}
    assert [sensor_value(v) for v in ({"value": 38, "unit": "C"}, "700.00 W", "(131Mhz)", "N/A",
                                "[N/A]", "[Not Supported]", None, True)] == [
        38.0, 700.0, 131.0, None, None, None, None, None]


def test_amd_smi_process_list_per_gpu():
    """A process on two GPUs is one holder with both GPUs' VRAM; another user's, whose
    name amd-smi cannot read (`N/A`), is still a holder; an idle GPU lists none."""
    text = (HOLDERS / "amd-smi-process.json").read_text()
    assert amd_processes(text) == [GpuProcess(2345617, 42949672960 + 1073741824, "python3"),
                                   GpuProcess(2266127, 2040109465, "")]
    assert amd_pid_gpus(text) == {2345617: {0, 2}, 2266127: {0}}
    assert amd_processes((HOLDERS / "amd-smi-process-none.json").read_text()) == []
    with pytest.raises(ToolFailed, match="no process_list"):
        amd_processes((FIXTURES / "gpu_partition" / "amd-smi-static-partition-spx.json")
                      .read_text())
    hostile = ('[{"gpu": 0, "process_list": [{"process_info": {"name": "$(touch x)\\n\\"a b",'
               ' "pid": 7, "mem_usage": {"value": 1, "unit": "MB"}}}]}]')
    assert amd_processes(hostile)[0].text() == 'pid 7 ($(touch x)\n"a b): 1 MiB'


# --- the tools on PATH ------------------------------------------------------------------------
def test_an_amd_smi_only_node_lists_its_holders_and_their_gpus(tmp_path, monkeypatch):
    stand_in(tmp_path / "bin", "amd-smi", [("process", HOLDERS / "amd-smi-process.json")])
    on_path(monkeypatch, tmp_path / "bin")
    found = snapshot()
    assert found.tool == "amd-smi" and [p.pid for p in found.processes] == [2345617, 2266127]
    assert held_devices("amd-smi") == {2345617: {0, 2}, 2266127: {0}}


def test_rocm_smi_comes_before_amd_smi_where_both_are(tmp_path, monkeypatch):
    stand_in(tmp_path / "bin", "amd-smi", [("process", HOLDERS / "amd-smi-process.json")])
    stand_in(tmp_path / "bin", "rocm-smi",
             [("--showpids", HOLDERS / "rocm-smi-showpids-none.txt")])
    on_path(monkeypatch, tmp_path / "bin")
    assert snapshot().tool == "rocm-smi" and snapshot().processes == ()


def test_the_preflight_refuses_gpus_busy_on_an_amd_smi_only_node(tmp_path, monkeypatch):
    from runner.batch.run import plan_for
    from runner.config.profile import load_profile
    from runner.preflight.check import CheckState
    from runner.preflight.gpus import gpu_checks

    stand_in(tmp_path / "bin", "amd-smi", [
        ("static --partition", FIXTURES / "gpu_partition" / "amd-smi-static-partition-cpx.json"),
        ("process", HOLDERS / "amd-smi-process.json")])
    on_path(monkeypatch, tmp_path / "bin")
    plan = plan_for(load_profile("mi325x"))
    gpus, holders = gpu_checks(plan, False)
    assert gpus.state is CheckState.OK, gpus
    assert holders.state is CheckState.FAILED and holders.where == "amd-smi"
    assert "pid 2345617 (python3): 41984 MiB on device(s) 0, 2" in holders.detail
    assert gpu_checks(plan, True)[1].state is CheckState.SHARED


def test_the_preflight_reads_a_mig_node_and_its_holders_from_its_capture(tmp_path,
                                                                         monkeypatch):
    """A stand-in nvidia-smi printing the H100 MIG node's captures (every field, with its
    header) for each query the preflight asks: MIG on the layout's GPU 0 is refused, and
    its three processes are placed on GPU 0 through their GPU UUIDs."""
    from runner.batch.run import plan_for
    from runner.config.profile import load_profile
    from runner.preflight.check import CheckState
    from runner.preflight.gpus import gpu_checks

    mig = FIXTURES / "gpu_partition" / "nvidia-smi-query-gpu-h100-mig.csv"
    stand_in(tmp_path / "bin", "nvidia-smi", [("--query-compute-apps", H100_APPS),
                                              ("--query-gpu", mig)])
    on_path(monkeypatch, tmp_path / "bin")
    plan = plan_for(load_profile("h100"))
    gpus, holders = gpu_checks(plan, False)
    assert gpus.state is CheckState.FAILED and "MIG is enabled on GPU(s) 0" in gpus.detail
    assert holders.state is CheckState.FAILED
    assert "pid 11345: 15690 MiB on device(s) 0" in holders.detail


def test_sensors_from_each_tool_on_path_and_none_where_there_is_none(tmp_path, monkeypatch):
    stand_in(tmp_path / "bin", "rocm-smi",
             [("--showtemp", SENSORS / "rocm-smi-sensors-mi300x.json")])
    on_path(monkeypatch, tmp_path / "bin")
    assert read_sensors().tool == "rocm-smi" and read_sensors().gpus[1].power_cap_w == 600.0
    stand_in(tmp_path / "bin", "amd-smi", [("metric", AMD_METRIC)])  # static --limit fails
    got = read_sensors()
    assert got.tool == "amd-smi" and got.gpus[0].temperature_c == 38.0
    assert got.gpus[0].power_cap_w is None and got.note == ""
    stand_in(tmp_path / "bin", "nvidia-smi", [("--query-gpu", HOLDERS / "amd-smi-process.json")])
    broken = read_sensors()  # printed what cannot be read: unknown, with a note; no raise
    assert broken.tool == "nvidia-smi" and broken.gpus == ()
    assert "sensors unknown: nvidia-smi printed no CSV header" in broken.note
    on_path(monkeypatch, tmp_path / "none")
    none = read_sensors()
    assert none.tool is None and "no nvidia-smi, amd-smi or rocm-smi" in none.note


def test_a_timed_number_keeps_the_gpus_temperature_power_cap_clocks_and_holders(
        tmp_path, monkeypatch):
    """A stand-in nvidia-smi printing the H100 capture (every field, whatever is asked: the
    readers find their columns by the header) and its compute processes under load."""
    stand_in(tmp_path / "bin", "nvidia-smi", [("--query-compute-apps", H100_APPS),
                                              ("--query-gpu", H100)])
    on_path(monkeypatch, tmp_path / "bin")
    c = Watch(gpu=True).stop()
    (g,) = c.gpu["gpus"]
    assert (g["name"], g["driver"], g["temperature_c"], g["power_w"], g["power_cap_w"]) == (
        "NVIDIA H100 80GB HBM3", "590.48.01", 59.0, 631.95, 700.0)
    assert g["clocks_mhz"]["sm"] == 1980 and g["throttle"] == []
    assert c.gpu["foreign_processes"] == ["pid 11327: 2566 MiB", "pid 11328: 1542 MiB",
                                          "pid 11345: 15690 MiB"]
    assert "; GPU 0 59 C, 631.95 W of 700 W; BESIDE FOREIGN LOAD" in c.line()


def test_the_time_a_timing_was_throttled_is_the_counters_difference(tmp_path, monkeypatch):
    """The RTX 2080 SUPER's two real readings, idle then under load 14.8 s later: its
    software power cap held the clocks down for 221.310321 - 212.553937 s of that time.
    The stand-in prints the idle capture when the watch starts, the loaded one at stop."""
    apps = ("--query-compute-apps", HOLDERS / "nvidia-smi-compute-apps-rtx2080s-load.csv")

    def reading(state: str) -> None:
        stand_in(tmp_path / "bin", "nvidia-smi", [
            apps, ("--query-gpu", SENSORS / f"nvidia-smi-query-gpu-rtx2080s-{state}.csv")])

    reading("idle")
    on_path(monkeypatch, tmp_path / "bin")
    watch = Watch(gpu=True).start()
    reading("load")
    c = watch.stop()
    (g,) = c.gpu["gpus"]
    assert g["throttled_s"] == {"sw_power_cap": 8.756}
    assert ", sw_power_cap 8.756 s of the timing" in c.line()
    assert c.gpu["foreign_processes"] == ["pid 5268: 370 MiB", "pid 5267: 230 MiB"]
    unwatched = Watch(gpu=True).stop()  # never started: no counters read before it
    assert "throttled_s" not in unwatched.gpu["gpus"][0]


def test_throttle_time_only_where_both_readings_count_it():
    from runner.base.gpu_sensors import throttled_s

    before = {0: {"sw_power_cap": 1e6, "hw_thermal_slowdown": 0.0}, 1: {"sw_power_cap": 0.0}}
    after = {0: {"sw_power_cap": 1.5e6, "hw_thermal_slowdown": 0.0}, 2: {"sw_power_cap": 9.0}}
    assert throttled_s(before, after) == {0: {"sw_power_cap": 0.5}}
    assert throttled_s(None, after) == {} and throttled_s(before, None) == {}


def test_an_amd_smi_only_node_keeps_its_sensors_and_a_cpu_machine_nothing(tmp_path,
                                                                         monkeypatch):
    stand_in(tmp_path / "bin", "amd-smi", [
        ("metric", AMD_METRIC), ("static --limit", AMD_LIMIT),
        ("static --asic", FIXTURES / "gpu_info" / "amd-smi-static-mi300x.json"),
        ("process", HOLDERS / "amd-smi-process-none.json")])
    on_path(monkeypatch, tmp_path / "bin")
    state = gpu_state()
    assert state["tool"] == "amd-smi" and state["foreign_processes"] == []
    assert [(g["index"], g["name"], g["driver"], g["power_cap_w"], g["throttle"])
            for g in state["gpus"]] == [(0, "AMD Instinct MI300X", "6.8.5", 750.0, []),
                                        (1, "AMD Instinct MI300X", "6.8.5", 750.0, ["throttled"])]
    assert state["gpus"][1]["clocks_mhz"] == {"gfx": 2100.0, "memory": 1300.0}
    on_path(monkeypatch, tmp_path / "empty")
    assert gpu_state() == {}
    assert Watch(gpu=True).stop().gpu == {}


def test_an_amd_smi_only_node_records_its_driver_firmware_and_partitions(tmp_path,
                                                                        monkeypatch):
    """What each result keeps of its environment, from amd-smi where rocm-smi is gone:
    ROCm 7's firmware is `ifwi` (asked with the `--vbios` flag it still takes)."""
    from runner.history.environment import capture_environment

    stand_in(tmp_path / "bin", "amd-smi", [
        ("static --driver", FIXTURES / "gpu_info" / "amd-smi-static-versions.json"),
        ("static --partition",
         FIXTURES / "gpu_partition" / "amd-smi-static-partition-spx.json")])
    on_path(monkeypatch, tmp_path / "bin")
    env = capture_environment()
    assert (env.gpu_driver, env.vbios, env.compute_partition, env.memory_partition) == (
        "6.12.12", "022.040.003.043.000001", "SPX", "NPS1")


# --- a power cap changed between two results --------------------------------------------------
def _history(caps: list[float], builds: list[str]):
    from runner.history.model import Metric, Result

    values = 100.0 * np.random.default_rng(5).normal(1.0, 0.01, len(caps))
    values[len(caps) // 2:] *= 1.3
    t0 = datetime(2026, 11, 1, 2, 0)
    return [Result(key=f"n{i}", command="bench goldens", out_dir=f"/runs/n{i}",
                   finished_at=t0 + timedelta(days=i), profile="mi325x", machine="lab-1",
                   device="rocm:gfx942", sku="mi325x", compiler_version=build,
                   runner_version="0.9.0", metrics=(Metric("time_ms", "t", float(v)),),
                   details={"conditions": {"t": {"kernel": "6.8", "gpu": {"gpus": [
                       {"index": 0, "temperature_c": 40.0 + i, "power_cap_w": cap}]}}}})
            for i, (v, cap, build) in enumerate(zip(values, caps, builds, strict=True))]


def test_a_power_cap_change_is_the_machines_named_and_drawn_and_temperature_is_not():
    from runner.history.changes import detect
    from runner.history.judge import judge_changes
    from runner.history.render import chart
    from runner.history.series import series_of

    results = _history([750.0] * 15 + [600.0] * 15, ["3.12.0"] * 30)
    (change,) = judge_changes(detect(series_of(results)[0]), [])
    assert change.kind == "machine"
    assert "the GPU power cap changed with it: 750 W -> 600 W" in change.reasons
    drawn = chart(series_of(results)[0], [change])
    assert drawn.count('<g class="environment">') == 1 and ">GPU power cap</text>" in drawn
    assert "GPU 0 55 C, ? W of 600 W" in drawn  # each point's sensors, on hover
    same = _history([750.0] * 30, ["3.12.0"] * 30)  # only the temperature moved
    (steady,) = judge_changes(detect(series_of(same)[0]), [])
    assert not any("power cap" in r or "temperature" in r for r in steady.reasons)
    assert '<g class="environment">' not in chart(series_of(same)[0], [steady])
