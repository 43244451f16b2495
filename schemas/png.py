"""Fast lossless PNG for rasterised PDF pages: unfiltered rows deflated with ISA-L.

Pillow and libpng (through OpenCV) deflate with classic zlib, which on a 1288-px text page costs
about as much as rasterising it (3-4 ms each on this CPU), and Pillow always spends as long again
choosing row filters. Intel's ISA-L (the ``isal`` package) writes the same zlib stream format with
SIMD: on a grey 1288-px text page 0.72 ms for 77 KB at its level 2, against 5.9 ms / 79 KB for
classic zlib level 2 (``benchmarks/png.py``) and, measured before this module switched, 2.0 ms /
73 KB for zlib-ng level 2. No maintained
Python library pairs a PNG writer with a fast deflate, so this module writes the container itself:
a PNG is the signature plus IHDR, IDAT and IEND chunks, each ``length | type | data | CRC-32(type +
data)`` (ISO/IEC 15948), with every row prefixed by filter type 0 (none), the filter that pays off
on flat rendered pages. Any PNG decoder reads the result; tests decode it with Pillow and OpenCV.
"""

from __future__ import annotations

import struct
from typing import Callable

import numpy as np
from isal import isal_zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOR_TYPE = {1: 0, 3: 2}  # channels -> PNG colour type: 0 greyscale, 2 truecolour (RGB)
MAX_LEVEL = isal_zlib.ISAL_BEST_COMPRESSION  # 3; ISA-L has levels 0-3 (0 is still compressed)


def _chunk(kind: bytes, data: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """A chunk's four parts (length, type, data, CRC-32), for one ``b"".join``: the data is copied once."""
    return struct.pack(">I", len(data)), kind, data, struct.pack(">I", isal_zlib.crc32(data, isal_zlib.crc32(kind)))


def encode_png(pixels: np.ndarray, level: int = 2, deflate: Callable[[bytes, int], bytes] | None = None) -> bytes:
    """8-bit grey (H, W) or RGB (H, W, 3) pixels -> PNG bytes (unfiltered rows, ISA-L deflate).

    ``level`` is a zlib level (0-9, as the ``png_compress_level`` key); ISA-L has 0-3, so 3-9 all
    mean its 3 (slowest and ~2% smaller than 2: rarely worth it). ``deflate(rows, level)``: another
    zlib-stream compressor instead of ISA-L (``benchmarks/png.py`` compares them).
    """
    if pixels.dtype != np.uint8:
        raise ValueError(f"encode_png: need uint8 pixels, got {pixels.dtype}")
    if not 0 <= level <= 9:
        raise ValueError(f"encode_png: level must be 0-9, got {level}")
    channels = 1 if pixels.ndim == 2 else (pixels.shape[2] if pixels.ndim == 3 else 0)
    if channels not in _COLOR_TYPE or pixels.shape[0] == 0 or pixels.shape[1] == 0:
        raise ValueError(f"encode_png: need (H, W) grey or (H, W, 3) RGB pixels, got shape {pixels.shape}")
    height, width = pixels.shape[:2]
    rows = np.empty((height, width * channels + 1), dtype=np.uint8)
    rows[:, 0] = 0  # filter type 0 (none) on every row
    rows[:, 1:] = pixels.reshape(height, width * channels)
    return png_from_rows(rows, channels, level, deflate)


def png_from_rows(rows: np.ndarray, channels: int, level: int = 2,
                  deflate: Callable[[bytes, int], bytes] | None = None) -> bytes:
    """PNG bytes from its raw scanlines: a C-contiguous uint8 (H, W * channels + 1) array whose first
    column is each row's filter type (0, none) and the rest its 8-bit grey or RGB pixels.

    ``encode_png`` builds them from pixels; ``schemas.pdf_pages.render_pdf_png`` has pdfium render into
    this layout, so a colour page goes to the deflate with no copy. ``level`` and ``deflate`` as there.
    """
    if rows.dtype != np.uint8 or rows.ndim != 2 or not rows.flags.c_contiguous:
        raise ValueError(f"png_from_rows: need C-contiguous 2-D uint8 rows, got {rows.dtype} {rows.shape}")
    if channels not in _COLOR_TYPE or rows.shape[0] == 0 or (rows.shape[1] - 1) % channels or rows.shape[1] < 2:
        raise ValueError(f"png_from_rows: rows of {rows.shape[1]} bytes are not 1 + width * {channels}")
    if not 0 <= level <= 9:
        raise ValueError(f"png_from_rows: level must be 0-9, got {level}")
    height, width = rows.shape[0], (rows.shape[1] - 1) // channels
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPE[channels], 0, 0, 0)
    data = isal_zlib.compress(rows, min(level, MAX_LEVEL)) if deflate is None else deflate(rows, level)
    return b"".join((SIGNATURE, *_chunk(b"IHDR", header), *_chunk(b"IDAT", data), *_chunk(b"IEND", b"")))


def decode_png(data: bytes | memoryview, writable: bool = True) -> np.ndarray | None:
    """PNG bytes -> (H, W) grey or (H, W, 3) RGB uint8 pixels, for the PNGs this fast path covers.

    Covers 8-bit grey, RGB and RGBA (alpha dropped, as ``Image.convert("RGB")`` drops it),
    non-interlaced, whose rows all use filter 0 (none) or 2 (up): what this module writes and what
    Chromium's fast screenshot encoder writes (every row "up"). Inflated with ISA-L, ~1.6x faster
    than libpng through OpenCV on a 1024x1325 screenshot (7 vs 11 ms). Returns None for any other
    PNG (palette, 16-bit, interlaced, other row filters), and for bytes that are not a whole PNG,
    so that the caller can fall back to a general decoder.

    ``data`` may be any bytes-like object (a ``memoryview`` of a Parquet buffer is read without a copy).
    ``writable=False``: a PNG whose rows are all unfiltered comes back as a read-only view of the inflated
    rows (no copy of the page), for callers that only read the pixels.
    """
    data = memoryview(data).cast("B")
    if data[:len(SIGNATURE)] != SIGNATURE:
        return None
    pos, header, idat = len(SIGNATURE), None, []
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        kind, body = bytes(data[pos + 4:pos + 8]), data[pos + 8:pos + 8 + length]
        if len(body) != length:
            return None
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None or len(header) != 13 or not idat:
        return None
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", bytes(header))
    channels = {0: 1, 2: 3, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace != 0 or width == 0 or height == 0:
        return None
    try:
        raw = isal_zlib.decompress(idat[0] if len(idat) == 1 else b"".join(idat))
    except isal_zlib.error:
        return None
    stride = width * channels + 1
    if len(raw) < height * stride:
        return None
    rows = np.frombuffer(raw, np.uint8, count=height * stride).reshape(height, stride)
    filters = rows[:, 0]
    if ((filters != 0) & (filters != 2)).any():
        return None
    up = filters == 2
    out = rows[:, 1:] if not writable and not up.any() else rows[:, 1:].copy()
    # One vectorised add per "up" row (uint8 wraps mod 256, as the filter defines): ~1.4 ms for a 1024x1325
    # RGBA screenshot, where np.add.accumulate(axis=0) over the same rows takes ~95 ms (it walks the columns).
    for y in np.flatnonzero(up[1:]) + 1:
        np.add(out[y], out[y - 1], out=out[y])
    pixels = out.reshape(height, width, channels)
    if channels == 1:
        return pixels[:, :, 0]
    return pixels[:, :, :3] if channels == 4 else pixels
