"""What a run is asked to do, read and checked before any work (each file through
runner.inputs.fields): profiles (`profile`), device layouts and the worker plan (`layout`),
the model a profile names (`model_config`; for an export, `exports` with `architecture` and
`checkpoint`), artifact sources and their cache (`sources`) and the MLPerf data
(`mlperf_data`: captions, the fixed latent)."""

__all__ = ["architecture", "checkpoint", "exports", "layout", "mlperf_data", "model_config",
           "overrides", "profile", "sources"]
