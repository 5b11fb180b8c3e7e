"""Small PNGs for the HTML page: a 1024px SDXL sample is ~1.5 MB, and a page that embeds a
dozen of them (plus comparison pairs) as data URIs should still open instantly."""

from __future__ import annotations

import base64

import numpy as np

from runner.model.images import encode_png

MAX_SIDE = 256


def thumbnail_png(image: np.ndarray, max_side: int = MAX_SIDE) -> bytes:
    """Box-filtered by an integer factor (no resampling library needed); metadata dropped."""
    h, w = image.shape[:2]
    factor = max(1, -(-max(h, w) // max_side))
    if factor > 1:
        h2, w2 = h // factor * factor, w // factor * factor
        blocks = image[:h2, :w2].reshape(h2 // factor, factor, w2 // factor, factor, 3)
        image = np.round(blocks.mean(axis=(1, 3))).astype(np.uint8)
    return encode_png(np.ascontiguousarray(image))


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
