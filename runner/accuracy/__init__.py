"""MLPerf SDXL accuracy: FID and CLIP computed as MLPerf computes them, judged exactly.

Modules, in data-flow order: `samples` (where a run's images are), `backbones` (the FID
InceptionV3 and CLIP ViT-B-32, pretrained or seeded), `inception`, `clip_score`, `frechet`,
`frechet_cache` (each distance computed once per machine), `score` (streaming scorer),
`verdict` (ranges, accuracy.json/.txt), `evaluate` (`runner score`), `calibrate`, `compare`,
`oracle_runs`, `cli`. Importing this package imports no torch; the heavy modules load it
when used.
"""

__all__ = ["backbones", "calibrate", "cli", "clip_score", "compare", "diffusers_reference",
           "evaluate", "frechet", "frechet_cache", "inception", "oracle_runs", "samples",
           "score", "settings", "verdict"]
