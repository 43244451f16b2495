import io

import cv2
import numpy as np
import pytest
from PIL import Image

from schemas.png import encode_png


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
