"""Build-time code: defines and exports the embedded tiny SDXL. Needs the `[export]` extra."""

__all__ = ["bpe", "cli", "export_tiny", "exporter", "oracle", "sdxl_model", "seeded",
           "store", "tiny_model"]
