"""Tiny pipeline time per image: IREE (compiled, CPU) vs the PyTorch eager oracle, one run.

Both use the same threads (all of this process's cores unless --threads), the same
prompts, latent and weights; the first image of each is a warm-up and not timed.
Prints a JSON line; the ratio is oracle time / IREE time (above 1: IREE is faster).
"""

from __future__ import annotations

import argparse
import os
import time

from measured import add_record_option, emit

from runner.config.layout import CPU_IDS_FLAG
from runner.config.mlperf_data import load_captions
from runner.config.profile import load_profile
from runner.model.compiled_model import compile_model
from runner.model.export.oracle import TorchOracle
from runner.model.pipeline.loader import open_pipeline


def per_image(generate, prompts: list[str]) -> float:
    generate(prompts[:1])
    start = time.perf_counter()
    for p in prompts:
        generate([p])
    return (time.perf_counter() - start) / len(prompts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    add_record_option(parser)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))[: args.threads]))
    profile = load_profile("tiny")
    captions = load_captions()
    prompts = [captions[i] for i in range(args.images)]
    with open_pipeline(compile_model(profile, 1), [f"{CPU_IDS_FLAG}={cores}"]) as pipeline:
        iree = per_image(pipeline.generate, prompts)
    torch_s = per_image(TorchOracle(profile.model).generate, prompts)
    emit("bench_pipeline", {"bench": "pipeline", "images": args.images, "threads": args.threads,
                            "iree_s_per_image": round(iree, 4),
                            "torch_s_per_image": round(torch_s, 4),
                            "speedup_iree_vs_torch": round(torch_s / iree, 2)}, args.record)


if __name__ == "__main__":
    main()
