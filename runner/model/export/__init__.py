"""Build-time code: defines and exports the embedded tiny SDXL. Needs the `[export]` extra."""
