"""Page images as the corpus stores them: encode (PNG, grey pages as 8-bit grey, or WebP), open
untrusted image bytes under a pixel cap, and tell grey pages from colour ones.

The one place every package that makes or reads page images gets them from: ``pipelines.render``
(PDF pages and scans), ``synth`` (synthetic pages and their augmentation), ``pipelines.clean`` and
``model`` (pages read back). ``encode_image`` takes any settings object with the fields of
``ImageEncoding`` (``pipelines.render.RenderConfig`` has them, with the same defaults).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import warnings
from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np
from PIL import Image

from schemas.deadletter import RecordError
from schemas.png import decode_png, encode_png

# Runners parallelise over processes; OpenCV's own threads would only contend with them.
cv2.setNumThreads(1)


def _keep_page_buffers_on_heap() -> bool:
    """Serve page-sized buffers (1-5 MB bitmaps, grey planes, PNG rows) from glibc's heap.

    By default glibc mmaps each such block and unmaps it on free, so every page's buffers are
    page-faulted and zeroed afresh; in Beam's SDK workers that was a third of their CPU time (2,000
    pages: 16.6 -> 9.9 CPU-seconds per worker with these settings). Freed blocks now stay on the heap
    for the next page, so memory stays bounded by the largest working set. No-op off glibc.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(libc.mallopt(m_trim_threshold, 128 << 20))
    except (OSError, AttributeError):
        return False


_keep_page_buffers_on_heap()


class EncodingSettings(Protocol):
    """What ``encode_image`` reads from its settings (``ImageEncoding``, ``pipelines.render.RenderConfig``)."""

    @property
    def image_format(self) -> str: ...
    @property
    def png_compress_level(self) -> int: ...
    @property
    def png_gray_when_achromatic(self) -> bool: ...
    @property
    def png_filter(self) -> str: ...
    @property
    def webp_quality(self) -> int: ...


@dataclass(frozen=True)
class ImageEncoding:
    """How a page image is encoded; the defaults are ``pipelines.render.RenderConfig``'s."""

    image_format: str = "png"  # png | webp
    png_compress_level: int = 2  # zlib level 0-9 (ISA-L's levels, for unfiltered rows, stop at 3)
    png_gray_when_achromatic: bool = True  # store grey pages as 8-bit grey PNG (lossless)
    png_filter: str = "auto"  # auto (none for rasterised PDF pages, adaptive otherwise) | none | adaptive
    webp_quality: int = 90


def grey_if_achromatic(bgr: np.ndarray) -> np.ndarray | None:
    """The grey plane of an (H, W, 3) page when it has no colour (else None), exactly.

    OpenCV's BGR->grey weights sum to one in fixed point, so a pixel (v, v, v) maps to v; grey->BGR
    therefore reproduces the page iff every pixel is achromatic. The test does not depend on channel
    order, so RGB pages may be passed too. Two SIMD passes, ~4x cheaper than comparing channel views
    in numpy. A colour pixel among every 7th of every 7th row ends it first: most real PDF pages have
    colour, and that look costs ~1/3 of the two passes. Rows may be spaced apart (a PNG scanline
    view, ``schemas.pdf_pages.render_pdf_png``): OpenCV reads them in place.
    """
    if bgr.ndim != 3 or bgr.strides[1:] != (3, 1) or bgr.strides[0] < 3 * bgr.shape[1]:
        bgr = np.ascontiguousarray(bgr)
    sample = bgr[::7, ::7]
    if (sample[..., 0] != sample[..., 1]).any() or (sample[..., 1] != sample[..., 2]).any():
        return None
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    if cv2.norm(bgr, cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR), cv2.NORM_INF) == 0:
        return grey
    return None


def unfiltered_png(cfg: EncodingSettings, flat: bool) -> bool:
    """Whether a page is stored as PNG with unfiltered rows (``schemas.png``): ``png_filter: none``, or
    ``auto`` for a ``flat`` page (a rasterised PDF page)."""
    if cfg.png_filter not in ("auto", "none", "adaptive"):
        raise ValueError(f"unknown png_filter {cfg.png_filter!r}")
    return cfg.image_format == "png" and (cfg.png_filter == "none" or (cfg.png_filter == "auto" and flat))


def encode_image(image: Image.Image | np.ndarray, cfg: EncodingSettings, flat: bool = False) -> bytes:
    """Encode a page image as the corpus stores it (PNG, grey pages as 8-bit grey, or WebP).

    ``image``: a PIL image, or uint8 pixels ((H, W) grey or (H, W, 3) RGB, as
    ``schemas.pdf_pages.render_pdf_pixels`` returns them: PDF pages skip the PIL round trip).
    ``flat``: a rasterised PDF page, where ``png_filter: auto`` skips row filters.
    """
    unfiltered = unfiltered_png(cfg, flat)
    if isinstance(image, np.ndarray):
        if unfiltered:
            return encode_png(image, cfg.png_compress_level)
        image = Image.fromarray(image, mode="L" if image.ndim == 2 else "RGB")
    buf = io.BytesIO()
    if cfg.image_format == "png":
        if image.mode == "RGB" and cfg.png_gray_when_achromatic:
            achromatic = image.info.get("achromatic")
            if achromatic is None:
                achromatic = grey_if_achromatic(np.asarray(image)) is not None
            if achromatic:
                # Lossless: an 8-bit grey PNG decodes to the same RGB values at half the size and
                # ~2.5x less encoding time; readers call .convert("RGB") as for any page.
                image = image.getchannel(0)
        if unfiltered and image.mode in ("L", "RGB"):
            # Pillow always chooses filters adaptively (about half its PNG time on a text page) and
            # deflates with classic zlib; schemas.png writes unfiltered rows with ISA-L (~10x faster).
            return encode_png(np.asarray(image), cfg.png_compress_level)
        image.save(buf, format="PNG", compress_level=cfg.png_compress_level)
    elif cfg.image_format == "webp":
        image.save(buf, format="WEBP", quality=cfg.webp_quality, method=4)
    else:
        raise ValueError(f"unknown image_format {cfg.image_format!r}")
    return buf.getvalue()


def decode_rgb(data: bytes) -> np.ndarray:
    """Trusted PNG bytes (a screenshot our own browser took) -> (H, W, 3) RGB uint8 pixels.

    Chromium's fast screenshots (every row filtered "up") go through ``schemas.png.decode_png``
    (ISA-L: 7 ms for a 1024x1325 page), any other image through OpenCV's libpng (11 ms; Pillow
    takes 16); alpha, if any, is dropped as ``Image.convert("RGB")`` drops it. Untrusted bytes go
    through ``open_image`` (its pixel cap) instead. ``ValueError`` when the bytes do not decode.
    """
    pixels = decode_png(data)
    if pixels is not None and pixels.ndim == 3:
        return pixels
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("decode_rgb: not a decodable image")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


_UNSIGNED_16 = ("I;16", "I;16L", "I;16B", "I;16N")


def _stretch(pixels: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``pixels`` with ``lo..hi`` mapped linearly onto 0..255, as uint8."""
    if hi <= lo:  # one value: keep it where it lies on the 8-bit scale
        return np.full(pixels.shape, int(np.clip(round(float(lo)), 0, 255)), np.uint8)
    out = (pixels.astype(np.float32) - np.float32(lo)) * np.float32(255.0 / (hi - lo)) + np.float32(0.5)
    return np.clip(out, 0, 255).astype(np.uint8)


def to_8bit(image: Image.Image) -> Image.Image:
    """A greyscale scan deeper than 8 bits (PIL modes ``I;16*``, ``I``, ``F``) as 8-bit grey (``L``), scaled;
    other modes unchanged. Pillow's own ``convert`` clips such samples at 255, which turns a 16-bit page white.

    * ``I;16*``: by the mode's range, ``v >> 8``: the exact inverse of the usual 8-to-16-bit widening
      (``v * 257``), so a scan stored at 16 bits renders as its 8-bit copy does.
    * ``I`` (32-bit signed): samples within 0..255 as 8 bits; Pillow decodes some 16-bit grey files as ``I``
      (PPM/PGM), so samples within 0..65535 are read as 16 bits, like ``I;16``; otherwise (negative, or
      wider than 16 bits) by the image's own min..max: 32-bit data has no page-like fixed range (2**31
      would make any page black).
    * ``F`` (32-bit float): samples within 0..1 by that range (the float convention for normalised pixels),
      otherwise by the image's own min..max. NaN or infinite samples are ``corrupt_image``.
    """
    mode = image.mode
    if mode in _UNSIGNED_16:
        pixels = np.asarray(image)  # uint16 in the file's byte order
        return Image.fromarray((pixels >> 8).astype(np.uint8), mode="L")
    if mode == "I":
        pixels = np.asarray(image)
        lo, hi = int(pixels.min()), int(pixels.max())
        if lo >= 0 and hi <= 0xFF:  # 8-bit samples in a 32-bit mode (some TIFFs): as they are
            return Image.fromarray(pixels.astype(np.uint8), mode="L")
        if lo >= 0 and hi <= 0xFFFF:
            return Image.fromarray((pixels >> 8).astype(np.uint8), mode="L")
        return Image.fromarray(_stretch(pixels, lo, hi), mode="L")
    if mode == "F":
        pixels = np.asarray(image)
        if not np.isfinite(pixels).all():
            raise RecordError("corrupt_image", "float image has NaN or infinite samples")
        lo, hi = float(pixels.min()), float(pixels.max())
        if lo >= 0.0 and hi <= 1.0:
            lo, hi = 0.0, 1.0
        return Image.fromarray(_stretch(pixels, lo, hi), mode="L")
    return image


def open_image(data: bytes, max_pixels: int) -> Image.Image:
    """Open untrusted image bytes lazily (header only) and refuse them past the pixel cap, before
    any pixel is decoded. ``RecordError``: ``corrupt_image``, ``image_too_large``."""
    if not data:
        raise RecordError("corrupt_image", "image payload is empty")
    try:
        with warnings.catch_warnings():
            # Image.open reads only the header; our own cap below decides, so PIL's warning is noise.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise RecordError("image_too_large", f"image exceeds PIL's pixel limit: {exc}") from exc
    except Exception as exc:  # PIL raises many types for garbage bytes
        raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
    w, h = image.size
    if w * h > max_pixels:
        raise RecordError("image_too_large", f"{w}x{h} = {w * h} pixels exceeds the cap of {max_pixels}")
    return image
