"""The small shared base every layer above uses: errors and exit codes (`errors`), where
things live (`paths`), atomic writes (`fileio`), progress lines (`progress`), Markdown
tables (`mdtable`), scripts from argv lists (`shellscript`), the IREE tools in use
(`iree_tools`), what a result was made with (`provenance`) and `with` over a `close()`
(`closing`). Imports nothing above it."""
