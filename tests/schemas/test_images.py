"""schemas.images: the corpus's page-image encoding, shared by pipelines.render and synth."""

from __future__ import annotations

import io
from dataclasses import asdict, fields

import numpy as np
import pytest
from PIL import Image

from pipelines.render import RenderConfig
from schemas.deadletter import RecordError
from schemas.images import ImageEncoding, decode_rgb, encode_image, grey_if_achromatic, open_image
from schemas.png import encode_png


def test_image_encoding_defaults_are_render_configs():
    render = asdict(RenderConfig())
    assert {f.name: render[f.name] for f in fields(ImageEncoding)} == asdict(ImageEncoding())


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("colour", [False, True])
def test_synth_settings_encode_like_the_corpus(level: int, colour: bool):
    rng = np.random.default_rng(level)
    pixels = np.repeat(rng.integers(0, 256, (40, 30, 1), dtype=np.uint8), 3, axis=2)
    if colour:
        pixels[0, 0] = (255, 0, 0)
    image = Image.fromarray(pixels, mode="RGB")
    encoded = encode_image(image, ImageEncoding(png_compress_level=level))
    assert encoded == encode_image(image, RenderConfig(png_compress_level=level))
    decoded = Image.open(io.BytesIO(encoded))
    assert decoded.mode == ("RGB" if colour else "L")  # grey pages are stored as 8-bit grey
    assert np.array_equal(np.asarray(decoded.convert("RGB")), pixels)


def test_open_image_refuses_past_the_pixel_cap_before_decoding():
    buf = io.BytesIO()
    Image.new("RGB", (100, 100), "white").save(buf, format="PNG")
    assert open_image(buf.getvalue(), 10_000).size == (100, 100)
    with pytest.raises(RecordError) as err:
        open_image(buf.getvalue(), 9_999)
    assert err.value.reason == "image_too_large"


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_decode_rgb_gives_pillows_rgb_pixels(mode: str):
    rng = np.random.default_rng(len(mode))
    image = Image.fromarray(rng.integers(0, 256, (23, 17, len(mode)), dtype=np.uint8).squeeze(), mode=mode)
    expected = np.asarray(image.convert("RGB"))
    pillow = io.BytesIO()
    image.save(pillow, format="PNG")  # adaptive filters: OpenCV's path
    assert np.array_equal(decode_rgb(pillow.getvalue()), expected)
    if mode == "RGB":  # unfiltered rows: the ISA-L path (schemas.png.decode_png)
        assert np.array_equal(decode_rgb(encode_png(expected)), expected)
    with pytest.raises(ValueError, match="decode_rgb"):
        decode_rgb(b"not an image")


@pytest.mark.parametrize("where", [(0, 0), (3, 5), (699, 499)])  # on the 7-px sample grid, off it, the last pixel
def test_one_colour_pixel_anywhere_makes_a_page_colour(where):
    rng = np.random.default_rng(7)
    page = np.repeat(rng.integers(0, 256, (700, 500, 1), dtype=np.uint8), 3, axis=2)  # grey, not flat
    grey = grey_if_achromatic(page)
    assert grey is not None and np.array_equal(grey, page[..., 0])
    page[where] = (page[where][0], page[where][0], page[where][0] ^ 1)  # one channel off by one
    assert grey_if_achromatic(page) is None
