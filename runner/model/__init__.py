"""The model: compiled (`compile`, `compiled_model`), run (`pipeline/`, `generate`), and
its parts (`tokenizer`, `tensors`, `images`); `export/` makes the IREE inputs from a
checkpoint or seeded weights."""

__all__ = ["carry", "cli", "compile", "compiled_model", "export", "generate", "gpu_targets",
           "images", "pipeline", "seeded_weights", "tensors", "tokenizer"]
