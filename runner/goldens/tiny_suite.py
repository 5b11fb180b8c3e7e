"""The tiny golden suite (`goldens/tiny/`): IREE CI's quality-test schema on the tiny model.

Three tests, one per submodel, on CPU: clip `encode_prompts` on a real MLPerf caption
(tokenized with the pipeline's own tokenizers, negative prompt as the unconditional half),
unet `run_forward` for one mid-schedule step on the latent IREE itself reached after
`UNET_STEP` steps from MLPerf's fixed latent, and vae `decode` of the fully denoised latent.
Expected outputs are IREE's own results (a golden records what a known-good compiler
computed). Blobs are named relative to the JSON file and the tiny model as `builtin:tiny/...`
(the runner's shipped copy), so the suite works wherever it lies: the repository, the
installed package, a copy; blobs are raw little-endian `.bin` files named `..._v1.0.bin`.

`build_tiny_suite` regenerates all of it (in a source checkout: an installed package is never
written to); inputs come out byte-identical on any machine, outputs within the thresholds
below.

`build_tiny_torch_suite` writes the same clip and vae tests in IREE CI's torch_models layout
(`goldens/tiny-torch/`): shared `modules/*.json`, a quality, a compstat and a benchmark file
per submodel, the blobs copied from `goldens/tiny/`. Compstat goldens are this compiler's
dispatch counts, exactly, and its vmfb sizes + ~20% (`target-cpu=host` compiles other code
on another CPU); benchmark goldens are `BENCH_GOLDEN_MS`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from runner.base.fileio import atomic_write_text
from runner.base.paths import ASSETS_DIR, GOLDENS_DIR, builtin_ref, refuse_package_write
from runner.config.mlperf_data import load_captions
from runner.config.profile import load_profile
from runner.model.compiled_model import compile_model
from runner.model.pipeline.loader import open_pipeline
from runner.model.tensors import TensorSpec, write_tensor

SUITE_DIR = GOLDENS_DIR / "tiny"
TORCH_SUITE_DIR = GOLDENS_DIR / "tiny-torch"
SUITE_VERSION = "v1.0"
PROMPT_ID = 0
UNET_STEP = 10
CPU_FLAGS = ("--iree-hal-target-device=local",
             "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host")
# Absolute f32 tolerances (+ iree-run-module's default rtol 1e-5): far above IREE's
# run-to-run and host-to-host noise (~1e-6 here), far below a real numerics change.
THRESHOLDS = {"clip": "--expected_f32_threshold=0.0001",
              "unet": "--expected_f32_threshold=0.001",
              "vae": "--expected_f32_threshold=0.001"}
FUNCTIONS = {"clip": "encode_prompts", "unet": "run_forward", "vae": "decode"}


def _test_json(out: Path, submodel: str, inputs: list[np.ndarray],
               outputs: list[np.ndarray], version: str) -> dict:
    def entries(kind: str, arrays: list[np.ndarray]) -> list[dict]:
        refs = []
        for i, array in enumerate(arrays):
            name = f"{submodel}_{kind}{i}_{version}.bin"
            write_tensor(out / name, array)
            refs.append({"source": name, "value": str(TensorSpec.of(array))})
        return refs

    tiny = ASSETS_DIR / "tiny"
    return {
        "inputs": entries("input", inputs),
        "outputs": entries("out", outputs),
        "real_weights": builtin_ref(tiny / f"{submodel}.irpa"),
        "mlir": builtin_ref(tiny / f"{submodel}_bs1.mlir"),
        "device": "local-task",
        "compiler_flags": list(CPU_FLAGS),
        "threshold_args": [THRESHOLDS[submodel]],
        "run_function": FUNCTIONS[submodel],
    }


def build_tiny_suite(out: Path = SUITE_DIR, prompt_id: int = PROMPT_ID,
                     version: str = SUITE_VERSION) -> list[Path]:
    """Runs the tiny pipeline on IREE (CPU) and writes the three tests and their blobs."""
    refuse_package_write(out, "build_tiny_suite: out")
    profile = load_profile("tiny")
    config = profile.model
    with open_pipeline(compile_model(profile, 1)) as pipe:
        prompt = load_captions()[prompt_id]
        clip_in = [t.encode([prompt]) for t in pipe.tokenizers] + \
                  [t.encode([config.negative_prompt]) for t in pipe.tokenizers]
        embeds, pooled = pipe.fns["encode_prompts"](*clip_in)
        sample, time_ids = pipe.initialize()
        for i in range(UNET_STEP):
            sample = pipe.step(sample, embeds, pooled, time_ids, i)
        unet_in = [sample, embeds, pooled, time_ids,
                   np.array([config.guidance_scale], np.float32),
                   np.array([UNET_STEP], np.int64)]
        (unet_out,) = pipe.fns["run_forward"](*unet_in)
        latents = unet_out
        for i in range(UNET_STEP + 1, config.steps):
            latents = pipe.step(latents, embeds, pooled, time_ids, i)
        (image,) = pipe.fns["decode"](latents)
    out.mkdir(parents=True, exist_ok=True)
    tests = {"clip": (clip_in, [embeds, pooled]), "unet": (unet_in, [unet_out]),
             "vae": ([latents], [image])}
    written = []
    for submodel, (inputs, outputs) in tests.items():
        path = out / f"{submodel}_cpu.json"
        atomic_write_text(path, json.dumps(_test_json(out, submodel, inputs, outputs, version),
                                           indent=4) + "\n")
        written.append(path)
    return written


# The fastest of 5 repetitions must be under these (IREE CI's torch_models rule, no
# tolerance). Measured fastest on the 2-core development VM under load: clip 0.6-1.3 ms,
# vae 38-44 ms; the goldens are ~4x that, so they catch gross regressions only.
BENCH_GOLDEN_MS = {"clip": 5.0, "vae": 150.0}
BENCH_RUN_ARGS = ("--benchmark_repetitions=5", "--benchmark_min_warmup_time=0.2",
                  "--device_allocator=caching")
TORCH_SUBMODELS = ("clip", "vae")


def _write_json(path: Path, obj: dict) -> Path:
    atomic_write_text(path, json.dumps(obj, indent=4) + "\n")
    return path


def _compstat_goldens(test_path: Path) -> dict:
    """This compiler's dispatch count (exact) and vmfb size (+20%, rounded up to 1000 B)."""
    from runner.base.iree_tools import compiler_info
    from runner.goldens.plan import CheckOptions, compile_module, dispatch_count, plan
    from runner.goldens.testfile import load_test_file

    compiler = compiler_info()
    (test,) = load_test_file(test_path)
    planned = plan(test, CheckOptions(), compiler).modules[0]
    vmfb = Path(compile_module(planned, compiler).vmfb)
    assert planned.stats is not None
    size = vmfb.stat().st_size
    return {"golden_dispatch_count": dispatch_count(planned.stats),
            "golden_binary_size": -(-int(size * 1.2) // 1000) * 1000}


def build_tiny_torch_suite(out: Path = TORCH_SUITE_DIR, source: Path = SUITE_DIR
                           ) -> list[Path]:
    """The tiny clip and vae tests in the torch_models layout, from `goldens/tiny/`."""
    refuse_package_write(out, "build_tiny_torch_suite: out")
    written = []
    tiny = ASSETS_DIR / "tiny"
    module_root = out.name  # module names are relative to the suite's parent, as IREE CI's
    for submodel in TORCH_SUBMODELS:
        old = json.loads((source / f"{submodel}_cpu.json").read_text())
        module = f"{module_root}/modules/{submodel}_cpu"
        written.append(_write_json(out / "modules" / f"{submodel}_cpu.json", {
            "mlir": builtin_ref(tiny / f"{submodel}_bs1.mlir"),
            "compiler_flags": list(CPU_FLAGS)}))
        for ref in old["inputs"] + old["outputs"]:
            (out / ref["source"]).write_bytes((source / ref["source"]).read_bytes())
        weights = [{"type": "url", "url": builtin_ref(tiny / f"{submodel}.irpa"),
                    "scope": "model"}]
        run = [f"--function={FUNCTIONS[submodel]}", "--device=local-task"]
        written.append(_write_json(out / f"{submodel}_quality_cpu.json", {
            "type": "quality", "markers": ["cpu", "local-task"], "modules": [module],
            "weights": weights, "run_args": [*run, THRESHOLDS[submodel]],
            "inputs": [{"url": r["source"], "value": r["value"]} for r in old["inputs"]],
            "expected_outputs": [{"url": r["source"], "value": r["value"]}
                                 for r in old["outputs"]]}))
        compstat = out / f"{submodel}_compstat_cpu.json"
        _write_json(compstat, {"type": "compstat", "markers": ["cpu"], "module": module})
        written.append(_write_json(compstat, {**json.loads(compstat.read_text()),
                                              **_compstat_goldens(compstat)}))
        written.append(_write_json(out / f"{submodel}_benchmark_cpu.json", {
            "type": "benchmark", "markers": ["cpu", "local-task"], "modules": [module],
            "weights": weights, "run_args": [*run, *BENCH_RUN_ARGS],
            "inputs": [{"value": r["value"]} for r in old["inputs"]],
            "golden_time_ms": BENCH_GOLDEN_MS[submodel]}))
    return written


if __name__ == "__main__":
    import sys

    build = build_tiny_torch_suite if sys.argv[1:] == ["torch"] else build_tiny_suite
    for p in build():
        print(p)
