"""Image hashes for dedup and decontamination: exact pixel hashes, pHash, and pHash LSH band keys.

``pixel_hash`` hashes the decoded, EXIF-oriented pixels, so re-encodes of one page collapse.
``perceptual_hash`` is ``imagehash``'s pHash of a box-reduced grey thumbnail; the 256-bit one
(``hash_size=16``) tells document pages of one template apart where the 64-bit one does not, so
near-image keys sample its bits (``phash_sample_keys``); see ``pipelines/clean/dedup.py``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import imagehash
import numpy as np
import xxhash
from PIL import Image, ImageOps

from pipelines.clean.dedup_config import PHASH_BITS
from schemas.deadletter import RecordError

_EXIF_ORIENTATION = 0x0112


def open_page(data: bytes | Image.Image, max_pixels: int) -> Image.Image:
    """Decoded, EXIF-oriented image in mode ``L`` or ``RGB``; ``RecordError`` if it is none.

    Grey images stay ``L``: every use below gives the same result as for their RGB conversion
    (strips are converted while hashing; grey values of equal R, G, B are exact), and skipping
    the full-page conversion halves the time for the corpus's grey PNG pages.
    """
    from schemas.images import open_image, to_8bit

    if isinstance(data, Image.Image):
        image = data
    else:
        image = open_image(data, max_pixels)
    try:
        # exif_transpose copies the image even when there is nothing to do: check first.
        if image.getexif().get(_EXIF_ORIENTATION, 1) not in (1, None):
            image = ImageOps.exif_transpose(image)
        image = to_8bit(image)  # 16-bit, 32-bit and float scans scaled, as the render stage does
        if image.mode == "1":
            image = image.convert("L")  # 0 / 255, as its RGB conversion
        elif image.mode not in ("L", "RGB"):
            image = image.convert("RGB")  # palette, alpha (dropped), CMYK, 16-bit, ...
        else:
            image.load()
    except Exception as exc:  # truncated or corrupt pixel data surfaces only on load
        raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
    return image


_STRIP_ROWS = 256


def pixel_hash_image(image: Image.Image) -> str:
    """sha256 of ``b"WxH" + NUL`` and the RGB bytes, fed in strips: the same digest as hashing
    ``image.convert("RGB").tobytes()`` at once, ~2x faster (no page-sized copies) and with
    less memory."""
    digest = hashlib.sha256(b"%dx%d\x00" % image.size)
    width, height = image.size
    for top in range(0, height, _STRIP_ROWS):
        strip = image.crop((0, top, width, min(height, top + _STRIP_ROWS)))
        digest.update((strip if strip.mode == "RGB" else strip.convert("RGB")).tobytes())
    return digest.hexdigest()


def pixel_hash(data: bytes | Image.Image, max_pixels: int = 64_000_000) -> str:
    """sha256 (hex) over ``WxH`` and the raw RGB bytes of the decoded, EXIF-oriented image.

    Encoded bytes are decoded first, so PNG, lossless WebP and grey or palette PNGs of the same
    pixels give one hash; alpha is dropped. A PIL image skips decoding. Undecodable bytes raise
    ``RecordError("corrupt_image")``, images over ``max_pixels`` ``RecordError("image_too_large")``.
    """
    return pixel_hash_image(open_page(data, max_pixels))


def thumbnail(image: Image.Image) -> Image.Image:
    """Grey image box-reduced to ~128 px on its short side. An RGB image is reduced before its
    grey conversion, so a grey page and its RGB copy give the same thumbnail."""
    factor = max(1, min(image.size) // 128)
    small = image.reduce(factor) if factor > 1 else image
    return small if small.mode == "L" else small.convert("L")


def phash_grey(grey: Image.Image, hash_size: int) -> int:
    bits = imagehash.phash(grey, hash_size=hash_size).hash.ravel()
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def perceptual_hash(data: bytes | Image.Image, hash_size: int = 8, max_pixels: int = 64_000_000) -> int:
    """pHash (``imagehash.phash``) of the decoded, EXIF-oriented page as an int of hash_size**2 bits.

    The default is 64 bits; ``hash_size=16`` gives the 256-bit hash used to verify near-image
    candidates. The first bit is the most significant.
    """
    return phash_grey(thumbnail(open_page(data, max_pixels)), hash_size)


def hamming(a: int, b: int) -> int:
    """Number of differing bits."""
    return (a ^ b).bit_count()


def phash_band_keys(h: int, bands: int = 4, bits: int = 64) -> list[str]:
    """``ph:<band>:<hex bits>`` for each of ``bands`` equal slices of a ``bits``-bit hash.

    Pigeonhole: two hashes within Hamming distance < ``bands`` agree on at least one slice. Fine
    for varied images; not used by ``extract_keys`` because slices of a document page's 64-bit
    pHash are shared by whole templates (module docstring).
    """
    if bits % bands:
        raise ValueError(f"bands ({bands}) must divide bits ({bits})")
    width = bits // bands
    mask = (1 << width) - 1
    digits = (width + 3) // 4
    return [f"ph:{i}:{(h >> (bits - width * (i + 1))) & mask:0{digits}x}" for i in range(bands)]


@lru_cache(maxsize=8)
def _bit_samples(bands: int, band_bits: int, bits: int, seed: int) -> np.ndarray:
    """``bands`` rows of ``band_bits`` bit positions: consecutive slices of seeded permutations of
    range(bits), so bits repeat only once every permutation is used up."""
    rows: list[np.ndarray] = []
    round_ = 0
    pool: list[int] = []
    while len(rows) < bands:
        if len(pool) < band_bits:
            pool = sorted(range(bits), key=lambda i: xxhash.xxh3_64_intdigest(b"%d:%d" % (round_, i), seed))
            round_ += 1
        rows.append(np.array(sorted(pool[:band_bits])))
        pool = pool[band_bits:]
    return np.stack(rows)


def phash_sample_keys(h: int, bands: int = 16, band_bits: int = 32, bits: int = PHASH_BITS, seed: int = 1) -> list[str]:
    """``ph:<band>:<hex>``: for each band, the ``band_bits`` bits of ``h`` at seeded positions.

    Bit-sampling LSH for Hamming distance: hashes at distance d share a band with probability
    1 - (1 - (1 - d/bits)**band_bits)**bands.
    """
    all_bits = np.unpackbits(np.frombuffer(h.to_bytes(bits // 8, "big"), dtype=np.uint8))
    sampled = np.packbits(all_bits[_bit_samples(bands, band_bits, bits, seed)], axis=1)
    return [f"ph:{i}:{row.tobytes().hex()}" for i, row in enumerate(sampled)]
