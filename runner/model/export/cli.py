"""`runner export tiny|sdxl`: the embedded model's assets, or SDXL from a local checkpoint."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from runner.base.errors import RunnerError
from runner.base.outdir import RESUMES, Rerun
from runner.clihelp import add_out, document
from runner.inputs.cliargs import COUNT, count_list
from runner.inputs.paths import resolved


def cmd_export(args: argparse.Namespace) -> int:
    if args.model == "tiny":
        from runner.model.export.export_tiny import TINY_DIR, export_tiny

        for path in export_tiny(Path(args.out) if args.out else TINY_DIR):
            print(path)
        return 0
    from runner.config.exports import DTYPES, ExportSource, export_command
    from runner.model.export.store import ensure_export

    if bool(args.source) == args.seeded:
        raise RunnerError("give exactly one of --from DIR and --seeded", where="runner export sdxl",
                          fix="--from a local diffusers-format SDXL checkpoint, or --seeded for "
                          "SDXL's architecture with seeded random weights")
    dtype = DTYPES[args.dtype]
    source = (ExportSource(None, "sdxl", dtype, args.max_length) if args.seeded
              else ExportSource(resolved(Path(args.source), "--from"), None, dtype,
                                args.max_length))
    batches = args.batch_sizes
    vae_batches = args.vae_batch_sizes or batches
    out = resolved(Path(args.out), "--out") if args.out else None
    if args.dry_run:
        print(shlex.join(export_command(source, batches, vae_batches, out)))
        return 0
    start = time.perf_counter()
    config = ensure_export(source, batches, vae_batches, out)
    print(f"exported in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    print(config)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export the tiny SDXL, or SDXL from a local checkpoint "
                       "(needs the [export] extra)")
    p.add_argument("model", choices=["tiny", "sdxl"])
    p.add_argument("--from", dest="source", metavar="DIR",
                   help="sdxl: a local diffusers-format SDXL base 1.0 checkpoint")
    p.add_argument("--seeded", action="store_true",
                   help="sdxl: SDXL's architecture with seeded random weights (no download)")
    p.add_argument("--batch-sizes", type=count_list, default=[1],
                   help="sdxl: comma list (default 1)")
    p.add_argument("--vae-batch-sizes", type=count_list,
                   help="sdxl: comma list (default: --batch-sizes)")
    p.add_argument("--dtype", choices=["fp16", "fp32"], default="fp16",
                   help="sdxl: text encoders and UNet (default fp16; the VAE decodes in fp32)")
    p.add_argument("--max-length", type=COUNT, metavar="TOKENS",
                   help="sdxl: prompt tokens (default: what the checkpoint's tokenizers pad "
                   "to, as diffusers does: 77 for SDXL base; --seeded: 64; 64 gives IREE "
                   "CI's and AMD's artifact shapes)")
    add_out(p, "directory (tiny: default the shipped assets; sdxl: default the export cache, "
            "$RUNNER_CACHE_DIR/exports)",
            Rerun(RESUMES, "the files of a verified export, and each file the interrupted "
                  "export finished writing; other batch sizes are added to the export",
                  ("model.json",), free=("--batch-sizes", "--vae-batch-sizes")),
            required=False)
    p.add_argument("--dry-run", action="store_true", help="sdxl: print the command only")
    p.set_defaults(func=cmd_export)
    document(p, "runner export tiny", "runner export sdxl --seeded --dry-run",
             "runner export sdxl --from /path/to/sdxl-base-1.0 --batch-sizes 1,8")
