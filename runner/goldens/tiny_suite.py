"""The tiny golden suite (`goldens/tiny/`): IREE CI's quality-test schema on the tiny model.

Three tests, one per submodel, on CPU: clip `encode_prompts` on a real MLPerf caption
(tokenized with the pipeline's own tokenizers, negative prompt as the unconditional half),
unet `run_forward` for one mid-schedule step on the latent IREE itself reached after
`UNET_STEP` steps from MLPerf's fixed latent, and vae `decode` of the fully denoised latent.
Expected outputs are IREE's own results (a golden records what a known-good compiler
computed). Blob and model references are paths relative to the JSON file, so the suite
moves with the repository; blobs are raw little-endian `.bin` files named `..._v1.0.bin`.

`build_tiny_suite` regenerates all of it; inputs come out byte-identical on any machine,
outputs within the thresholds below.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from runner.compiled_model import compile_model
from runner.fileio import atomic_write_text
from runner.mlperf_data import load_captions
from runner.paths import ASSETS_DIR, REPO_DIR
from runner.pipeline.loader import open_pipeline
from runner.profile import load_profile
from runner.tensors import TensorSpec, write_tensor

SUITE_DIR = REPO_DIR / "goldens" / "tiny"
VERSION = "v1.0"
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


def _rel(path: Path, start: Path) -> str:
    return os.path.relpath(path, start).replace(os.sep, "/")


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
        "real_weights": _rel(tiny / f"{submodel}.irpa", out),
        "mlir": _rel(tiny / f"{submodel}_bs1.mlir", out),
        "device": "local-task",
        "compiler_flags": list(CPU_FLAGS),
        "threshold_args": [THRESHOLDS[submodel]],
        "run_function": FUNCTIONS[submodel],
    }


def build_tiny_suite(out: Path = SUITE_DIR, prompt_id: int = PROMPT_ID,
                     version: str = VERSION) -> list[Path]:
    """Runs the tiny pipeline on IREE (CPU) and writes the three tests and their blobs."""
    profile = load_profile("tiny")
    config = profile.model
    session, pipe = open_pipeline(compile_model(profile, 1))
    try:
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
    finally:
        session.close()
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


if __name__ == "__main__":
    for p in build_tiny_suite():
        print(p)
