"""Measures what the VAE's precision does to the images, on this machine's CPU.

    python scripts/measure_vae_precision.py --out DIR [--count 32]

For MLPerf's first N prompts: the embedded tiny model's images through IREE with the fp32
and the fp16 decoder (the shipped assets), the same from a diffusers-written checkpoint of it
exported by `runner export sdxl --vae-dtype fp32|fp16`, and diffusers' own
StableDiffusionXLPipeline on that checkpoint decoding in each precision (the reference,
computed here). Per pair: the largest and mean absolute pixel difference (uint8 levels,
LSB) and how many pixels differ by 0, 1, 2 and more. Writes `vae_precision.json` and
`vae_precision.md` into DIR; `--record` also stores the table as the `vae_precision` record
of docs/measurements.json, which docs/sdxl.md shows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
from measured import add_record_option, emit

from runner.accuracy.diffusers_reference import reference_images, write_tiny_checkpoint
from runner.base.mdtable import md_table
from runner.base.provenance import host_info, iree_provenance
from runner.config.exports import ExportSource
from runner.config.mlperf_data import load_captions
from runner.config.profile import load_profile
from runner.model.compiled_model import compile_model
from runner.model.export.store import ensure_export
from runner.model.pipeline.loader import open_pipeline

PRECISIONS = {"fp32": "float32", "fp16": "float16"}


def iree_images(overrides: dict, ids: list[int]) -> np.ndarray:
    """The tiny profile's images through IREE at batch 1 (the compile cache is shared)."""
    profile = load_profile("tiny", overrides)
    captions = load_captions()
    with open_pipeline(compile_model(profile, 1)) as pipeline:
        return np.concatenate([pipeline.generate([captions[i]]) for i in ids])


def cpu_model() -> str:
    """The CPU's model name (Linux), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def compare(a: np.ndarray, b: np.ndarray) -> dict:
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    n = diff.size
    return {"max_lsb": int(diff.max()), "mean_lsb": float(diff.mean()),
            "pixels": n, "equal": int((diff == 0).sum()), "off_by_1": int((diff == 1).sum()),
            "off_by_2": int((diff == 2).sum()), "off_by_3_or_more": int((diff >= 3).sum()),
            "images_max_lsb": [int(m) for m in diff.reshape(len(a), -1).max(axis=1)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=32)
    add_record_option(parser)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ids = list(range(args.count))
    start = time.perf_counter()
    images: dict[str, np.ndarray] = {}
    checkpoint = out / "checkpoint"
    if not checkpoint.is_dir():
        write_tiny_checkpoint(checkpoint)
    for short, dtype in PRECISIONS.items():
        images[f"iree shipped {short}"] = iree_images({"model.vae_dtype": short}, ids)
        source = ExportSource(checkpoint, None, "float32", vae_dtype=dtype)
        config = ensure_export(source, [1], [1], out / f"export-{short}")
        images[f"iree checkpoint {short}"] = iree_images({"model": str(config)}, ids)
    config = json.loads((out / "export-fp32" / "model.json").read_text())
    refs = reference_images(checkpoint, config, ids, PRECISIONS.values())
    for short, dtype in PRECISIONS.items():
        images[f"diffusers {short}"] = refs[dtype]
    pairs = [("iree shipped fp16", "iree shipped fp32"), ("diffusers fp16", "diffusers fp32"),
             ("iree shipped fp32", "diffusers fp32"), ("iree shipped fp16", "diffusers fp16"),
             ("iree checkpoint fp32", "diffusers fp32"),
             ("iree checkpoint fp16", "diffusers fp16"),
             ("iree checkpoint fp16", "iree shipped fp16")]
    rows = [{"a": a, "b": b, **compare(images[a], images[b])} for a, b in pairs]
    result = {"count": args.count, "image": list(images["diffusers fp32"].shape[1:]),
              "machine": {**host_info(), "cpu": cpu_model(), "cores": os.cpu_count()},
              "iree": iree_provenance(),
              "seconds": round(time.perf_counter() - start, 1), "pairs": rows}
    (out / "vae_precision.json").write_text(json.dumps(result, indent=2) + "\n")
    header = ["images", "against", "max (LSB)", "mean (LSB)", "equal", "off by 1", "off by 2",
              "off by 3+"]
    cells = [[r["a"], r["b"], str(r["max_lsb"]), f"{r['mean_lsb']:.4f}",
              f"{r['equal'] / r['pixels']:.2%}", f"{r['off_by_1'] / r['pixels']:.2%}",
              f"{r['off_by_2'] / r['pixels']:.2%}", f"{r['off_by_3_or_more'] / r['pixels']:.2%}"]
             for r in rows]
    table = "\n".join(md_table(header, cells))
    (out / "vae_precision.md").write_text(
        f"# VAE precision: {args.count} prompts, {result['image'][0]}x{result['image'][1]} "
        f"images\n\n{table}\n")
    print(table)
    emit("vae_precision", {"count": args.count, "image": result["image"],
                           "seconds": result["seconds"],
                           "table": {"header": header, "rows": cells}}, args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
