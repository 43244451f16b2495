import io
import struct
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image

from schemas.png import SIGNATURE, decode_png, encode_png, png_from_rows


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (64, 129), (5, 3, 3), (40, 33, 3)])
def test_decoders_read_back_the_exact_pixels(shape):
    pixels = np.random.default_rng(sum(shape)).integers(0, 256, size=shape, dtype=np.uint8)
    data = encode_png(pixels)
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode == ("L" if len(shape) == 2 else "RGB")
        assert np.array_equal(np.asarray(image), pixels)
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if len(shape) == 3:
        decoded = cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    assert np.array_equal(decoded, pixels)


def test_flat_page_compresses_and_higher_levels_are_not_larger():
    page = np.full((600, 400), 255, dtype=np.uint8)
    page[100:110, 50:350] = 0  # a "text line"
    fast, small = encode_png(page, 1), encode_png(page, 6)
    assert len(fast) < page.size // 20 and len(small) <= len(fast)
    for data in (fast, small):
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), page)


@pytest.mark.parametrize("pixels", [np.zeros((4, 4), np.uint16), np.zeros((4, 4, 4), np.uint8),
                                    np.zeros((0, 4), np.uint8), np.zeros(4, np.uint8)])
def test_refuses_what_it_does_not_write(pixels):
    with pytest.raises(ValueError, match="encode_png"):
        encode_png(pixels)


def _png(pixels: np.ndarray, filters: list[int], color: int) -> bytes:
    """A PNG whose rows use the given filter types (0 none, 1 sub, 2 up), written by hand."""
    rows = pixels.reshape(pixels.shape[0], -1).astype(np.int16)
    bpp = {0: 1, 2: 3, 6: 4}[color]
    out = []
    for y, f in enumerate(filters):
        prev = rows[y - 1] if y else np.zeros_like(rows[0])
        left = np.concatenate([np.zeros(bpp, np.int16), rows[y][:-bpp]])
        line = {0: rows[y], 1: rows[y] - left, 2: rows[y] - prev}[f] % 256
        out.append(bytes([f]) + line.astype(np.uint8).tobytes())
    header = struct.pack(">IIBBBBB", pixels.shape[1], pixels.shape[0], 8, color, 0, 0, 0)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(out), 1)) + chunk(b"IEND", b"")


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (40, 33, 3)])
def test_decode_png_reads_back_what_encode_png_writes(shape):
    pixels = np.random.default_rng(sum(shape)).integers(0, 256, size=shape, dtype=np.uint8)
    assert np.array_equal(decode_png(encode_png(pixels)), pixels)


@pytest.mark.parametrize("color", [0, 2, 6])
def test_decode_png_undoes_up_filters_like_pillow(color):
    # Chromium's fast screenshots filter every row "up"; mixed with unfiltered rows here.
    channels = {0: 1, 2: 3, 6: 4}[color]
    pixels = np.random.default_rng(color).integers(0, 256, size=(9, 11, channels), dtype=np.uint8)
    data = _png(pixels, [2, 2, 0, 2, 2, 2, 0, 0, 2], color)
    mode = {0: "L", 2: "RGB", 6: "RGB"}[color]
    with Image.open(io.BytesIO(data)) as image:
        expected = np.asarray(image.convert(mode))
    assert np.array_equal(decode_png(data), expected)


def test_decode_png_declines_what_it_does_not_cover():
    pixels = np.random.default_rng(3).integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    assert decode_png(_png(pixels, [2, 1, 2, 2, 2, 2], 2)) is None  # a "sub" row
    buf = io.BytesIO()
    Image.fromarray(pixels).convert("P").save(buf, format="PNG")  # palette
    assert decode_png(buf.getvalue()) is None
    buf = io.BytesIO()
    Image.fromarray(pixels[:, :, 0].astype(np.uint16) * 257).save(buf, format="PNG")  # 16-bit grey
    assert decode_png(buf.getvalue()) is None
    whole = encode_png(pixels)
    assert decode_png(whole[: len(whole) // 2]) is None and decode_png(b"not a png") is None


def test_decode_png_reads_a_memoryview_and_returns_a_view_when_asked():
    pixels = np.random.default_rng(5).integers(0, 256, size=(17, 9, 3), dtype=np.uint8)
    data = encode_png(pixels)
    view = decode_png(memoryview(data), writable=False)
    assert np.array_equal(view, pixels) and not view.flags.writeable  # unfiltered rows: no copy
    copied = decode_png(memoryview(data))
    assert np.array_equal(copied, pixels) and copied.flags.writeable
    up = _png(pixels, [2] * 17, 2)
    assert np.array_equal(decode_png(up, writable=False), pixels)  # "up" rows are always summed in a copy


def test_png_from_rows_is_encode_png_from_scanlines_and_checks_their_layout():
    pixels = np.random.default_rng(3).integers(0, 256, size=(9, 5, 3), dtype=np.uint8)
    rows = np.zeros((9, 16), np.uint8)
    rows[:, 1:] = pixels.reshape(9, 15)
    assert png_from_rows(rows, 3) == encode_png(pixels)
    assert np.array_equal(decode_png(png_from_rows(rows[:, :6].copy(), 1)), pixels.reshape(9, 15)[:, :5])
    bad_layouts = [(rows[:, :15], 3), (rows[:, 1:], 3), (rows.astype(np.uint16), 3), (rows, 2), (rows[:, :1], 1)]
    for bad, channels in bad_layouts:
        with pytest.raises(ValueError, match="png_from_rows"):
            png_from_rows(bad, channels)
