"""Pipeline output -> MLPerf's uint8 HWC bytes, and a dependency-free PNG writer/reader."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from runner.base.fileio import atomic_write_bytes


def to_uint8_hwc(images_nchw: np.ndarray) -> np.ndarray:
    """MLPerf's conversion: CHW float in [0,1] -> HWC, x255, clip, round (half to even), uint8."""
    if images_nchw.ndim != 4 or images_nchw.shape[1] != 3:
        raise ValueError(f"expected N x 3 x H x W images, got shape {images_nchw.shape}")
    scaled = np.clip(images_nchw.astype(np.float32).transpose(0, 2, 3, 1) * 255.0, 0.0, 255.0)
    return np.round(scaled).astype(np.uint8)


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode_png(image_hwc: np.ndarray, text: dict[str, str] | None = None,
               level: int = 6) -> bytes:
    """8-bit RGB PNG; lossless, so the pixels round-trip exactly. `text` goes into tEXt
    chunks, which lets one atomically written file carry its sample's metadata. `level` is
    zlib's (0: stored blocks, fastest to write and read back)."""
    h, w, c = image_hwc.shape
    if c != 3 or image_hwc.dtype != np.uint8:
        raise ValueError(f"expected H x W x 3 uint8, got {image_hwc.shape} {image_hwc.dtype}")
    rows = np.concatenate([np.zeros((h, 1), np.uint8), image_hwc.reshape(h, w * 3)], axis=1)
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + b"".join(_chunk(b"tEXt", k.encode("latin-1") + b"\0" + v.encode("latin-1"))
                   for k, v in (text or {}).items())
        + _chunk(b"IDAT", zlib.compress(rows, level))  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
        + _chunk(b"IEND", b"")
    )


def write_png(path: Path, image_hwc: np.ndarray, text: dict[str, str] | None = None) -> None:
    atomic_write_bytes(path, encode_png(image_hwc, text))


def png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG, without decoding its pixels."""
    out, pos = {}, 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"tEXt":
            key, _, value = data[pos + 8 : pos + 8 + length].partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"IDAT":
            break
        pos += 12 + length
    return out


def decode_png(data: bytes, checksum: bool = True) -> np.ndarray:
    """Reads back what `encode_png` writes (8-bit RGB, filter type 0 on every row).
    `checksum=False` skips the adler32 of stored (level-0) image data, a fifth of the
    decode time, for a caller that verifies the pixels by a stronger hash right after."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("not a PNG file")
    view = memoryview(data)  # chunk bodies as views: a 1024x1024 IDAT is not copied
    pos, idat, w, h = 8, [], 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], view[pos + 8 : pos + 8 + length]
        if pos + 12 + length > len(data):  # zlib no longer catches a cut-off stream's end
            raise ValueError(f"truncated PNG: its {kind!r} chunk ends past the file")
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            if (depth, color) != (8, 2):
                raise ValueError("only 8-bit RGB PNGs written by this tool are supported")
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    stream = idat[0] if len(idat) == 1 else memoryview(b"".join(idat))
    stride = 1 + w * 3
    rows = np.frombuffer(_inflate(stream, h * stride, checksum), np.uint8).reshape(h, stride)
    if rows[:, 0].any():
        raise ValueError("PNG uses row filters; only this tool's unfiltered PNGs are supported")
    return rows[:, 1:].reshape(h, w, 3).copy()


def _inflate(stream: memoryview, size: int, checksum: bool) -> bytes:
    """zlib.decompress, but a stream of stored deflate blocks (level 0, what the sample store
    writes) is unwrapped by slicing instead of an inflate pass. Checked as zlib checks it:
    every block's LEN/NLEN pair, the adler32 unless `checksum` is off (a stream failing it
    goes through zlib, which names the error), and the total size. Any other stream
    (compressed blocks, a preset dictionary, odd padding bits) goes through zlib."""
    if len(stream) < 2 or stream[0] & 0x0F != 8 or stream[1] & 0x20 \
            or (stream[0] << 8 | stream[1]) % 31:
        return zlib.decompress(stream)
    blocks, pos, final = [], 2, False
    while not final:
        header = stream[pos] if pos < len(stream) else -1
        if header not in (0, 1):  # a compressed block (or a truncated stream): zlib's job
            return zlib.decompress(stream)
        final = header == 1
        length, inverse = struct.unpack_from("<HH", stream, pos + 1)
        if length ^ inverse != 0xFFFF or pos + 5 + length > len(stream):
            raise ValueError(f"broken stored deflate block at byte {pos} of the image data")
        blocks.append(stream[pos + 5 : pos + 5 + length])
        pos += 5 + length
    data = b"".join(blocks)
    if len(stream) < pos + 4:
        raise ValueError("truncated image data: its checksum is cut off")
    if checksum and struct.unpack_from(">I", stream, pos) != (zlib.adler32(data),):
        return zlib.decompress(stream)  # which names the broken checksum
    if len(data) != size:
        raise ValueError(f"image data holds {len(data)} bytes, the header says {size}")
    return data
