"""schemas.images: the corpus's page-image encoding, shared by pipelines.render and synth."""

from __future__ import annotations

import io
from dataclasses import asdict, fields

import numpy as np
import pytest
from PIL import Image

from pipelines.render import RenderConfig
from schemas.deadletter import RecordError
from schemas.images import ImageEncoding, encode_image, open_image


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
