"""`runner bench` for real on the cpu profile: a layout sweep through the run lifecycle, one
table with a best row, per-worker numbers from the workers' own stats, stage latencies,
and a dry run that prints exactly the commands the real bench runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runner.bench import benchmark_module as bm
from runner.cli.main import main
from runner.history.extract import extract

COMMON = ["--profile", "cpu", "--batch-size", "1,2,3", "--count", "4", "--stage", "clip",
          "--stage", "vae", "--repetitions", "2", "--min-time", "0.02s"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, dict, str, list[str]]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the cpu profile's layout needs 2 cores")
    out = tmp_path_factory.mktemp("bench") / "out"
    import contextlib
    import io

    dry = io.StringIO()
    with contextlib.redirect_stdout(dry):
        assert main(["bench", *COMMON, "--out", str(out), "--dry-run"]) == 0
    assert not out.exists()  # a dry run writes nothing
    md = io.StringIO()
    with contextlib.redirect_stdout(md):
        assert main(["bench", *COMMON, "--out", str(out)]) == 0
    return out, json.loads((out / "bench.json").read_text()), md.getvalue(), \
        dry.getvalue().splitlines()


@pytest.mark.slow
def test_sweep_runs_each_layout_and_reports_the_best(sweep):
    out, report, md, _ = sweep
    layouts = report["layouts"]
    assert [lay["label"] for lay in layouts] == [
        "devices=0,1 cpd=1 bs=1", "devices=0,1 cpd=1 bs=2", "devices=0,1 cpd=1 bs=3"]
    ok = [lay for lay in layouts if lay["status"] == "ok"]
    assert len(ok) == 2
    skipped = layouts[2]
    assert skipped["status"] == "skipped"
    assert "model tiny-sdxl: no clip artifact for batch size 3 (the model has [1, 2])" \
        in skipped["reason"]
    best = max(ok, key=lambda lay: lay["samples_per_s"])
    assert [lay["best"] for lay in layouts] == [lay is best for lay in layouts]
    assert report["best"] == {"label": best["label"], "samples_per_s": best["samples_per_s"]}
    for lay in ok:
        assert lay["samples"] == 4 and lay["workers"] == 2
        assert lay["samples_per_s"] == pytest.approx(4 / lay["wall_s"], rel=1e-3)
        run = json.loads((Path(lay["run_dir"]) / "run.json").read_text())
        # Every sample stored; a throughput run is not aggregated, so not `complete`.
        assert run["status"] == "executed" and run["layout"] == lay["layout"]
        assert [a["status"] for a in run["attempts"]] == ["finished"]
        workers = lay["per_worker"]
        assert sum(w["samples"] for w in workers) == 4
        for w in workers:  # per-worker throughput is samples over busy seconds
            stats = json.loads((Path(lay["run_dir"]) / "workers" /
                                f"{w['worker']}.stats.json").read_text())
            busy = sum(b["end"] - b["start"] for b in stats["batches"])
            assert w["busy_s"] == pytest.approx(busy, abs=1e-3)
            # A worker the other one beat to every batch did no work: its rate is 0.
            rate = w["samples"] / busy if busy > 0 else 0.0
            assert w["samples_per_s"] == pytest.approx(rate, rel=1e-2)
            # ... and timed no stage (the same race as its rate's).
            assert set(w["stage_ms"]) == ({"clip", "unet", "vae"} if w["samples"] else set())
        over = lay["overhead"]
        assert over["fraction"] == pytest.approx(
            1 - sum(w["busy_s"] for w in workers) / (2 * lay["wall_s"]), abs=1e-3)
        assert 0 < over["fraction"] < 1
        assert 0 < over["time_to_first_sample_s"] <= lay["wall_s"]
        # startup is the workers' mean first start: below the last worker's first end (one
        # worker started late, beside load, may start after the other's first sample)
        assert 0 < over["startup_s"] < max(w["first_end_s"] for w in workers
                                           if w["first_end_s"] is not None) + 1e-3
        reproduce = (Path(lay["run_dir"]) / "reproduce.sh").read_text()
        assert (f"runner run --profile cpu --devices 0,1 --cpd 1 --batch-size "
                f"{lay['layout']['batch_size']}") in reproduce
    # One throughput table: three layout rows, the best marked once.
    table = [line for line in md.split("## Throughput")[1].split("###")[0].splitlines()
             if line.startswith("| devices=") or line.startswith("| **devices=")]
    assert len(table) == 3
    assert sum("(best)" in row for row in table) == 1
    assert f"| **{best['label']}** (best) |" in md
    assert "skipped: model tiny-sdxl: no clip artifact for batch size 3" in md
    assert (out / "bench.md").read_text().strip() == md.strip()
    # the history keeps every module the layouts measured, named by layout and module
    (kept,) = extract(out)
    assert kept.environment is not None and kept.environment.modules == {
        f"{lay['label']}: {Path(c['mlir']).stem}": c["vmfb_sha256"] for lay in ok
        for c in json.loads((Path(lay["run_dir"]) / "run.json").read_text())["compiled"][
            "compiled"]}
    assert "devices=0,1 cpd=1 bs=2: unet_bs2" in kept.environment.modules


def test_stage_latencies_per_batch_size_from_recorded_inputs(sweep):
    out, report, _, _ = sweep
    stages = {(s["batch_size"], s["stage"]): s for s in report["stages"]}
    assert sorted(stages) == [(1, "clip"), (1, "vae"), (2, "clip"), (2, "vae")]
    for (bs, stage), s in stages.items():
        assert s["error"] == "" and s["latency_ms"]["repetitions"] == 2
        assert s["latency_ms"]["mean_ms"] > 0
        raw = out / "stages" / f"bs{bs}" / stage / "benchmark.json"
        # bench.json keeps 6 decimals (a sub-millisecond mean loses more than 1e-6 relative)
        assert round(bm.parse_benchmark_json(raw.read_text()).mean_ms, 6) == \
            s["latency_ms"]["mean_ms"]
        assert "--task_topology_cpu_ids=0" in s["command"]  # as worker w000 sees its device
        # ... with its affinity too: without taskset the tool's calling thread runs on any
        # core and a stage reads faster than the same worker's calls.
        assert s["command"].startswith("taskset -c 0 iree-benchmark-module ")
        assert s["device_view"] == "cores 0"
        # timed as a distribution, under conditions kept with it, and so in the history
        assert s["latency_ms"]["spread"]["n"] == len(s["latency_ms"]["times_ms"]) == 2
        assert s["conditions"]["cores"] == os.cpu_count()
        assert isinstance(s["conditions"]["beside_foreign_load"], bool)
        kept = extract(out)[0].details
        assert kept["spread"][f"{stage} bs{bs}"] == s["latency_ms"]["spread"]
        assert kept["conditions"][f"{stage} bs{bs}"] == s["conditions"]
        layout = next(lay for lay in report["layouts"] if lay["layout"]["batch_size"] == bs)
        w000 = next(w for w in layout["per_worker"] if w["worker"] == "w000")
        in_run = w000["stage_ms"].get(stage)  # None: w001 took every batch of the run
        if in_run is None:
            assert s["in_run_ms_per_call"] is None and s["in_run_over_stage"] is None
            continue
        assert s["in_run_ms_per_call"] == pytest.approx(in_run, abs=1e-4)
        assert s["in_run_over_stage"] == pytest.approx(
            s["in_run_ms_per_call"] / s["latency_ms"]["mean_ms"], rel=1e-3)
    import numpy as np

    ids = [np.load(out / "stages" / "bs2" / "clip" / f"input{i}.npy") for i in range(4)]
    assert [a.shape for a in ids] == [(2, 64)] * 4 and ids[0].dtype == np.int64
    assert (ids[0] != ids[2]).any()  # the caption and the negative prompt, really tokenized
    latent = np.load(out / "stages" / "bs1" / "vae" / "input0.npy")
    assert latent.shape == (1, 4, 16, 16) and np.isfinite(latent).all() and latent.std() > 0
    assert report["versions"]["iree.runtime"]["version"].startswith("3.13")


@pytest.mark.slow
def test_dry_run_prints_exactly_what_runs(sweep):
    _, report, _, dry = sweep
    benchmark_lines = [x for x in dry if x.startswith("taskset -c 0 iree-benchmark-module")]
    assert len(benchmark_lines) == 4
    assert benchmark_lines == [s["command"] for s in report["stages"]]
    for lay in report["layouts"]:
        if lay["status"] == "ok":
            assert lay["run_command"] in dry
    assert any("skipped: model tiny-sdxl: no clip artifact" in x for x in dry)


def test_bad_sweep_values_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:  # a usage error: the flag and the --help to read
        main(["bench", "--batch-size", "1,x", "--out", str(tmp_path)])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("error: runner bench: argument --batch-size: '1,x' is not "
                                       "a comma list of whole numbers from 1 to 10000000, e.g. "
                                       "1,8,32\n  fix: see `runner bench --help`\n")
    (tmp_path / "bench.json").write_text("{}")
    assert main(["bench", "--no-stages", "--out", str(tmp_path)]) == 2
    assert "holds the output of an earlier `runner bench`" in capsys.readouterr().err


def test_slurm_sweep_dry_run_is_one_job_per_combination(capsys):
    """No cluster or engine needed: the images, in-image compiles and sbatch commands of a
    2 IREE x 2 batch-size x 2 cpd sweep, exactly as the real sweep would submit them."""
    assert main(["bench", "--profile", "cpu", "--executor", "slurm", "--devices", "0",
                 "--batch-size", "1,2", "--cpd", "1,2", "--cpus-per-node", "2",
                 "--iree", "source:a1b2c3d,wheels:3.13.0", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    builds = [x for x in lines if x.startswith("docker build ")]
    assert len(builds) == 2 and "IREE_COMMIT=a1b2c3d" in builds[0]
    runs = [x for x in lines if x.startswith("runner run ")]
    sbatch = [x for x in lines if x.startswith("#   sbatch ")]
    assert len(runs) == len(sbatch) == 8  # one Slurm job per combination
    tags = [b.split(" -t ")[1].split()[0] for b in builds]
    for i, line in enumerate(runs):
        tag = tags[i // 4]
        assert (f"--executor slurm --nodes 1 --cpus-per-node 2 --node-executor docker "
                f"--image {tag}") in line
        assert f"--out '<out>/runs/{tag.split(':', 1)[1]}/" in line
    assert sum("compile in iree-sdxl-runner:source-a1b2c3d" in x for x in lines) == 4


@pytest.mark.parametrize("argv, where", [
    (["--iree", "wheels:3.13.0"], "--executor local"),
    (["--executor", "docker"], "--executor docker"),
    (["--nodes", "2"], "--nodes"),
    (["--executor", "slurm", "--ab-tuning-spec", "x.mlir"], "--iree/--image/--executor"),
    (["--executor", "slurm", "--iree", "main;rm"], "--iree"),
])
def test_sweep_flags_that_cannot_work_exit_2(argv, where, capsys):
    assert main(["bench", "--profile", "cpu", *argv, "--dry-run"]) == 2
    assert where in capsys.readouterr().err


def test_stage_benchmarks_run_in_the_workers_own_device_view(sweep):
    """The recorded stage command, run as printed with a probe in the tool's place, sees
    exactly the cores and visibility variables the real worker recorded for itself."""
    import shlex
    import subprocess
    import sys

    _, report, md, _ = sweep
    for s in report["stages"]:
        layout = next(lay for lay in report["layouts"]
                      if lay["layout"]["batch_size"] == s["batch_size"])
        stats = json.loads((Path(layout["run_dir"]) / "workers" / "w000.stats.json"
                            ).read_text())
        words = shlex.split(s["command"])
        env = dict(os.environ)
        if words[0] == "env":
            words.pop(0)
            while "=" in words[0]:
                key, value = words.pop(0).split("=", 1)
                env[key] = value
        prefix = words[:words.index(bm.TOOL)]
        probe = ("import json, os, sys; keys = json.loads(sys.argv[1]); print(json.dumps("
                 "{'cores': sorted(os.sched_getaffinity(0)), "
                 "'env': {k: os.environ.get(k) for k in keys}}))")
        seen = subprocess.run([*prefix, sys.executable, "-c", probe,
                               json.dumps(sorted(stats["view"]["env"]))],
                              env=env, capture_output=True, text=True, check=True)
        assert json.loads(seen.stdout) == stats["view"]
        assert stats["view"]["cores"] == [0]
    assert "in-run / stage" in md and "| cores 0 |" in md


def test_a_gpu_workers_stage_commands_carry_its_whole_view(capsys):
    """A ROCm worker's stage benchmark: its visibility variables and NUMA binding, as in
    the plan; the dry run prints the exact commands, the table will print the view."""
    argv = ["bench", "--profile", "sdxl", "--set", "layout.numa=true", "--set",
            "layout.gpus=8", "--set", "layout.partition=cpx", "--devices", "41",
            "--no-throughput", "--stage", "vae", "--dry-run"]
    assert main(argv) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if bm.TOOL in x]
    assert len(lines) == 1
    assert lines[0].startswith("env HIP_VISIBLE_DEVICES=0 ROCR_VISIBLE_DEVICES=41 "
                               f"numactl --cpunodebind=1 --membind=1 {bm.TOOL} --device=hip ")

    from runner.batch.run import plan_for
    from runner.config.profile import load_profile

    worker = plan_for(load_profile("sdxl", {"layout.numa": True, "layout.gpus": 8,
                                            "layout.partition": "cpx", "layout.devices": "41"})
                      ).workers[0]
    assert worker.view_text() == ("ROCR_VISIBLE_DEVICES=41, HIP_VISIBLE_DEVICES=0, "
                                  "NUMA node 1")
