"""The small shared base every layer above uses: errors and exit codes (`errors`), where
things live (`paths`), atomic writes (`fileio`), progress lines (`progress`), Markdown
tables (`mdtable`), scripts from argv lists (`shellscript`), the IREE tools in use
(`iree_tools`), what a result was made with (`provenance`), `with` over a `close()`
(`closing`) and a package's entry points imported on first use (`lazy`). Imports nothing
above it."""

__all__ = ["closing", "dirlock", "errors", "fileio", "gpu_holders", "gpu_info", "gpu_sensors",
           "iree_flags", "iree_range", "iree_tools", "lazy", "mdtable", "outcome", "outdir",
           "paths", "procs", "progress", "provenance", "shellscript", "signals", "steps"]
