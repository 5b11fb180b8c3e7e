"""MLPerf accuracy logs for tests, written from the format itself (a JSON list of
`{"seq_id", "qsl_idx", "data", "size"}` records, `data` the upper-case hex of the raw uint8
bytes, as LoadGen writes it) with Python's own hex: the oracle the runner's `PositionalLog`
is compared against, and logs it would refuse to write (duplicates, mixed sizes)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np


def write_log(path: Path, samples: Iterable[tuple[int, np.ndarray]]) -> None:
    """The log of (qsl_idx, uint8 image) records in the order given."""
    records = [f'{{"seq_id": {seq}, "qsl_idx": {int(qsl_idx)}, "data": '
               f'"{np.asarray(image).tobytes().hex().upper()}", "size": {np.asarray(image).size}}}'
               for seq, (qsl_idx, image) in enumerate(samples)]
    path.write_text("[\n" + ",\n".join(records) + "\n]\n", encoding="ascii")
