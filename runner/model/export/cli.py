"""`runner export tiny|sdxl`: the embedded model's assets, or SDXL from a local checkpoint."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from runner.base import shellscript
from runner.base.errors import BadInput
from runner.base.outdir import RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import DISK_FULL, Exits, add_batch_sizes, add_dry_run, add_out, document
from runner.inputs.cliargs import COUNT, count_list
from runner.inputs.paths import resolved


def cmd_export(ctx: CommandContext) -> int:
    args = ctx.args
    if args.model == "weights":
        return _weights(args)
    if args.model == "tiny":
        from runner.model.export.export_tiny import BATCH_SIZES, TINY_DIR, export_tiny

        tiny_out = Path(args.out) if args.out else TINY_DIR
        if args.dry_run:
            print(shellscript.join(["runner", "export", "tiny", "--out", str(tiny_out)]))
            print(f"# in this process (torch): the tiny SDXL's weights, model config and MLIR "
                  f"for batch sizes {','.join(map(str, BATCH_SIZES))} -> "
                  f"{shellscript.sanitize(str(tiny_out))}")
            return 0
        for path in export_tiny(tiny_out):
            print(path)
        return 0
    from runner.config.exports import DTYPES, ExportSource, export_command
    from runner.model.export.store import ensure_export, open_sources

    if bool(args.source) == args.seeded:
        raise BadInput("give exactly one of --from DIR and --seeded", where="runner export sdxl",
                       fix="--from a local diffusers-format SDXL checkpoint, or --seeded for "
                       "SDXL's architecture with seeded random weights")
    dtype, vae_dtype = DTYPES[args.dtype], DTYPES[args.vae_dtype]
    vae_from = resolved(Path(args.vae_from), "--vae-from") if args.vae_from else None
    source = (ExportSource(None, "sdxl", dtype, args.max_length, vae_dtype, vae_from)
              if args.seeded
              else ExportSource(resolved(Path(args.source), "--from"), None, dtype,
                                args.max_length, vae_dtype, vae_from))
    batches = args.batch_sizes
    vae_batches = args.vae_batch_sizes or batches
    out = resolved(Path(args.out), "--out") if args.out else None
    if args.dry_run:
        open_sources(source)  # refused as the export itself refuses them
        print(shellscript.join(export_command(source, batches, vae_batches, out)))
        return 0
    start = time.perf_counter()
    config = ensure_export(source, batches, vae_batches, out)
    print(f"exported in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    print(config)
    return 0


def _weights(args: argparse.Namespace) -> int:
    """`runner export weights --from DIR`: a seeded export's missing `.irpa` files from its
    spec (runs and benches do it themselves before they load the model)."""
    from runner.config.model_config import ModelConfig
    from runner.model.seeded_weights import ensure_weights

    if not args.source:
        raise BadInput("give the export directory with --from DIR",
                       where="runner export weights",
                       fix="--from the directory holding model.json and weights.spec.json "
                       "(e.g. under $RUNNER_CACHE_DIR/exports)")
    path = resolved(Path(args.source), "--from")
    config = ModelConfig.load(path if path.suffix == ".json" else path / "model.json")
    if not config.weights_spec:
        raise BadInput("this model has no weights spec: only a seeded export's weights "
                       "are written from one", where=str(config.path),
                       fix="export a seeded model (`runner export sdxl --seeded`), or carry "
                       "the weights themselves")
    done = ensure_weights(config, dry_run=args.dry_run,
                          say=lambda m: print(m, file=sys.stdout if args.dry_run else sys.stderr))
    if not done:
        print(f"every weights file {config.path.name} names is there: nothing to write",
              file=sys.stderr)
    for m in done if not args.dry_run else ():
        print(m.path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export the tiny SDXL, or SDXL from a local checkpoint "
                       "(needs the [export] extra); write a seeded export's weights from its "
                       "spec")
    p.add_argument("model", choices=["tiny", "sdxl", "weights"],
                   help="weights: the .irpa files a seeded export's model.json names but "
                   "lacks, written from its weights.spec.json (torch not needed)")
    p.add_argument("--from", dest="source", metavar="DIR",
                   help="sdxl: a local diffusers-format SDXL base 1.0 checkpoint; weights: "
                   "the export directory (holding model.json and weights.spec.json) "
                   "(default: none; sdxl needs one of --from and --seeded)")
    p.add_argument("--seeded", action="store_true",
                   help="sdxl: SDXL's architecture with seeded random weights (no download)")
    add_batch_sizes(p, "1; sdxl only", [1])
    p.add_argument("--vae-batch-sizes", type=count_list, metavar="N,N",
                   help="sdxl: comma list (default: --batch-sizes)")
    p.add_argument("--dtype", choices=["fp16", "fp32"], default="fp16",
                   help="sdxl: text encoders and UNet (default fp16)")
    p.add_argument("--vae-dtype", choices=["fp32", "fp16"], default="fp32",
                   help="sdxl: what the VAE decodes in (default fp32, MLPerf's reference; "
                   "fp16 is IREE CI's and AMD's, and needs an fp16-safe VAE: SDXL base's "
                   "overflows)")
    p.add_argument("--vae-from", metavar="DIR",
                   help="sdxl: a diffusers-format VAE directory to decode with instead of the "
                   "model's own, e.g. one adapted to decode in fp16 (default: the model's)")
    p.add_argument("--max-length", type=COUNT, metavar="TOKENS",
                   help="sdxl: prompt tokens (default: what the checkpoint's tokenizers pad "
                   "to, as diffusers does: 77 for SDXL base; --seeded: 64; 64 gives IREE "
                   "CI's and AMD's artifact shapes)")
    add_out(p, "the export's directory",
            Rerun(RESUMES, "the files of a verified export, and each file the interrupted "
                  "export finished writing; other batch sizes are added to the export",
                  ("model.json",), free=("--batch-sizes", "--vae-batch-sizes")),
            required=False, default="tiny: the shipped assets; sdxl: the export cache, "
            "$RUNNER_CACHE_DIR/exports")
    add_dry_run(p, "what it would export or write, and where")
    p.set_defaults(func=cmd_export)
    document(p, "runner export tiny", "runner export tiny --out /tmp/tiny --dry-run",
             "runner export sdxl --seeded --dry-run",
             "runner export sdxl --from /path/to/sdxl-base-1.0 --batch-sizes 1,8",
             "runner export sdxl --from /path/to/sdxl-base-1.0 --vae-dtype fp16 "
             "--vae-from /path/to/sdxl-vae-fp16-fix",
             "runner export weights --from carry/exports/sdxl-seeded-sdxl-float16-<key>",
             exits=Exits(incomplete=DISK_FULL))
