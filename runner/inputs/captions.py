"""MLPerf's captions file (`captions_source.tsv`): tab-separated, a header with a `caption`
column, one row per sample. Read whole and checked here: its size, its encoding (the line
of the first bad byte is named), NUL bytes, and each caption's length, which the tokenizer
would otherwise chew through at any size before truncating it to 77 tokens."""

from __future__ import annotations

import csv
from pathlib import Path

from runner.base.errors import BadInput
from runner.inputs.limits import MiB, read_text

MAX_CAPTIONS_BYTES = 64 * MiB  # MLPerf's 5000 COCO captions are ~1 MiB with every column
MAX_CAPTION_CHARS = 4096  # COCO captions are under 300 characters
MAX_ROWS = 1_000_000
CAPTIONS_FIX = "pass MLPerf's tab-separated captions_source.tsv (id, image_id, caption, ...)"


def read_captions(path: Path) -> tuple[str, ...]:
    """The `caption` column, row i = sample i."""
    where = str(path)
    if not path.is_file():
        raise BadInput("captions file not found", where=where, fix=CAPTIONS_FIX)
    text = read_text(path, where, MAX_CAPTIONS_BYTES, "captions file")
    # The field limit is the row's length bound too; csv's own (128 KiB) raises csv.Error.
    previous = csv.field_size_limit(MAX_CAPTION_CHARS * 4)
    try:
        reader = csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            if reader.fieldnames is None or "caption" not in reader.fieldnames:
                raise BadInput("no `caption` column in the header", where=f"{where}: line 1",
                               fix=CAPTIONS_FIX)
            texts = []
            for row in reader:
                at = f"{where}: line {reader.line_num}"
                caption = row.get("caption")
                if not isinstance(caption, str):
                    raise BadInput("this row has no caption field", where=at, fix=CAPTIONS_FIX)
                if len(caption) > MAX_CAPTION_CHARS:
                    raise BadInput(f"a caption of {len(caption)} characters (at most "
                                   f"{MAX_CAPTION_CHARS})", where=at,
                                   fix="check the file: a COCO caption is one sentence")
                texts.append(caption)
                if len(texts) > MAX_ROWS:
                    raise BadInput(f"more than {MAX_ROWS} captions", where=where, fix=CAPTIONS_FIX)
        except csv.Error:  # a field over the limit: csv says only that
            raise BadInput(f"a field longer than {MAX_CAPTION_CHARS * 4} characters (a "
                           f"caption has at most {MAX_CAPTION_CHARS})",
                           where=f"{where}: line {reader.line_num + 1}", fix=CAPTIONS_FIX) from None
    finally:
        csv.field_size_limit(previous)
    return tuple(texts)
