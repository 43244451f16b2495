"""Scans deeper than 8 bits (PIL modes I;16, I, F) are scaled to 8 bits, not clipped to a white page."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageDraw

from pipelines.render import RenderConfig, decode_image, render_page
from pipelines.sources.base import SourcePage
from schemas.deadletter import RecordError
from schemas.images import to_8bit


def _page(payload: bytes) -> SourcePage:
    return SourcePage(source="t", source_id="scan", page_number=1, payload_kind="image", payload=payload,
                      response="Some text", domain="d", language="en", license="cc0", instruction="Convert.")


def _scan8() -> np.ndarray:
    """A light page with dark text blocks and a grey ramp: every 8-bit value occurs."""
    image = Image.new("L", (300, 400), 230)
    draw = ImageDraw.Draw(image)
    draw.rectangle([20, 20, 280, 60], fill=40)
    draw.rectangle([20, 100, 200, 120], fill=0)
    pixels = np.asarray(image).copy()
    pixels[200:216, 22:278] = np.arange(256, dtype=np.uint8)[None, :]
    return pixels


def _encode(image: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


def _stored(payload: bytes, cfg: RenderConfig) -> np.ndarray:
    record = render_page(_page(payload), cfg)
    return np.asarray(Image.open(io.BytesIO(record.image)).convert("L"))


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
@pytest.mark.parametrize("longest_side", [400, 200])  # as is, and downscaled
def test_16bit_scan_renders_as_its_8bit_copy(fmt: str, longest_side: int) -> None:
    pixels = _scan8()
    wide = Image.fromarray(pixels.astype(np.uint16) * 257)  # the same scan at 16 bits
    assert wide.mode == "I;16"
    assert Image.open(io.BytesIO(_encode(wide, fmt))).mode.startswith("I;16")
    cfg = RenderConfig(longest_side=longest_side)
    eight = _stored(_encode(Image.fromarray(pixels), fmt), cfg)
    sixteen = _stored(_encode(wide, fmt), cfg)
    assert sixteen.shape == eight.shape
    assert np.array_equal(sixteen, eight)
    assert sixteen.min() == 0 and (sixteen < 128).mean() > 0.05  # the dark text is there, not a white page


def test_16bit_pgm_decoded_as_mode_i_renders_as_its_8bit_copy() -> None:
    pixels = _scan8()
    payload = _encode(Image.fromarray(pixels.astype(np.uint16) * 257), "PPM")
    assert Image.open(io.BytesIO(payload)).mode == "I"  # Pillow decodes 16-bit PGM as 32-bit I
    cfg = RenderConfig(longest_side=400)
    assert np.array_equal(_stored(payload, cfg), _stored(_encode(Image.fromarray(pixels), "PNG"), cfg))


def test_float_scans_by_unit_range_or_their_own_range() -> None:
    pixels = _scan8()
    cfg = RenderConfig(longest_side=400)
    unit = Image.fromarray(pixels.astype(np.float32) / 255)  # normalised floats: 0..1
    assert np.array_equal(np.asarray(decode_image(_encode(unit, "TIFF"), cfg).convert("L")), pixels)
    # floats outside 0..1 have no fixed range: the image's own min..max becomes 0..255
    raw = Image.fromarray(pixels.astype(np.float32) * 1000.0 - 5000.0)
    stretched = np.asarray(to_8bit(raw))
    assert stretched.min() == 0 and stretched.max() == 255
    assert np.abs(stretched.astype(int) - pixels.astype(int)).max() <= 1


def test_32bit_integer_scan_beyond_16_bits_is_stretched_to_its_range() -> None:
    pixels = _scan8()
    wide = Image.fromarray(pixels.astype(np.int32) * 1_000_000 - 7)
    assert wide.mode == "I"
    out = np.asarray(to_8bit(wide))
    assert out.dtype == np.uint8 and np.abs(out.astype(int) - pixels.astype(int)).max() <= 1


def test_to_8bit_leaves_8bit_modes_alone() -> None:
    for mode in ("L", "RGB", "RGBA", "1", "P"):
        image = Image.new(mode, (4, 4))
        assert to_8bit(image) is image


def test_non_finite_float_scan_is_corrupt_image() -> None:
    pixels = _scan8().astype(np.float32)
    pixels[0, 0] = np.nan
    payload = _encode(Image.fromarray(pixels), "TIFF")
    with pytest.raises(RecordError) as info:
        decode_image(payload, RenderConfig())
    assert info.value.reason == "corrupt_image" and "NaN" in str(info.value)



def test_a_32bit_integer_scan_of_8bit_values_is_read_as_8_bits() -> None:
    pixels = _scan8()
    assert np.array_equal(np.asarray(to_8bit(Image.fromarray(pixels.astype(np.int32), mode="I"))), pixels)


def test_dedup_and_decontam_hash_a_16bit_scan_as_its_8bit_copy() -> None:
    """``pipelines.clean.image_hash.open_page`` (dedup's and decontam's reader) scales as the render stage does."""
    from pipelines.clean.image_hash import open_page

    pixels = _scan8()
    wide = _encode(Image.fromarray(pixels.astype(np.uint16) * 257), "PNG")
    assert np.array_equal(np.asarray(open_page(wide, 10**8).convert("L")), pixels)
