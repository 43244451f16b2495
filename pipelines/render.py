"""Page images: PDF page -> RGB image with pypdfium2, and checks on images from scans.

``render_page`` turns a ``SourcePage`` into a ``PageRecord``: rasterise (PDF) or decode (image),
apply the rotation correction, scale to the configured longest side, encode PNG or WebP, and keep
the PDF text layer for later checks. Bad payloads raise ``RecordError`` with a reason slug.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import io
import logging
import math
import threading
import warnings
from dataclasses import asdict, dataclass
from typing import Literal

import cv2
import numpy as np
import pypdfium2 as pdfium
from PIL import Image, ImageOps

from pipelines.png import encode_png
from pipelines.sources.base import SourcePage
from schemas.config import option
from schemas.deadletter import RecordError
from schemas.page import PageRecord, ProvenanceStep, page_id, params_hash

VERSION = "1"
# pdfium is not thread-safe; Beam's multi-threading mode may call us from several threads.
_PDFIUM_LOCK = threading.Lock()
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


@dataclass(frozen=True)
class RenderConfig:
    """How source pages become the stored page images."""

    longest_side: int = option(1288, help="pages are rasterised (PDFs) or downscaled (scans) to this longest side")
    image_format: Literal["png", "webp"] = option("png", help="stored image format: png or webp")
    # PDF pages go through pipelines.png (ISA-L, whose levels stop at 3): 2 is 0.74 ms and 77 KB for a grey
    # 1288-px text page; with Pillow (scans) 2 is close to 1 in speed, ~1.4x faster than 6.
    png_compress_level: int = option(2, help="PNG zlib level")
    png_gray_when_achromatic: bool = option(True, help="store grey pages as 8-bit grey PNG (lossless)")
    # Pillow's adaptive filters save ~10% of bytes on text pages for ~5x the time of ISA-L without filters.
    png_filter: Literal["auto", "none", "adaptive"] = option(
        "auto", help="PNG row filters: auto = none for rasterised PDF pages, adaptive (Pillow) for scans and "
                     "synthetic pages; none or adaptive forces one everywhere")
    webp_quality: int = option(90, help="WebP quality (image_format: webp)")
    max_pixels: int = option(64_000_000, help="decoded image cap (decompression bombs)")
    resize_images: bool = option(True, help="downscale scans larger than longest_side")
    keep_text_layer: bool = option(True, help="store a PDF page's embedded text in the record's text_layer")


def grey_if_achromatic(bgr: np.ndarray) -> np.ndarray | None:
    """The grey plane of an (H, W, 3) page when it has no colour (else None), exactly.

    OpenCV's BGR->grey weights sum to one in fixed point, so a pixel (v, v, v) maps to v; grey->BGR
    therefore reproduces the page iff every pixel is achromatic. The test does not depend on channel
    order, so RGB pages may be passed too. Two SIMD passes, ~4x cheaper than comparing channel views
    in numpy.
    """
    bgr = np.ascontiguousarray(bgr)
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    if cv2.norm(bgr, cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR), cv2.NORM_INF) == 0:
        return grey
    return None


def encode_image(image: Image.Image | np.ndarray, cfg: RenderConfig, flat: bool = False) -> bytes:
    """Encode a page image as the corpus stores it (PNG, grey pages as 8-bit grey, or WebP).

    ``image``: a PIL image, or uint8 pixels ((H, W) grey or (H, W, 3) RGB, as ``render_pdf_pixels``
    returns them: PDF pages skip the PIL round trip). ``flat``: a rasterised PDF page, where
    ``png_filter: auto`` skips row filters.
    """
    if cfg.png_filter not in ("auto", "none", "adaptive"):
        raise ValueError(f"unknown png_filter {cfg.png_filter!r}")
    unfiltered = cfg.png_filter == "none" or (cfg.png_filter == "auto" and flat)
    if isinstance(image, np.ndarray):
        if cfg.image_format == "png" and unfiltered:
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
            # deflates with classic zlib; pipelines.png writes unfiltered rows with ISA-L (~10x faster).
            return encode_png(np.asarray(image), cfg.png_compress_level)
        image.save(buf, format="PNG", compress_level=cfg.png_compress_level)
    elif cfg.image_format == "webp":
        image.save(buf, format="WEBP", quality=cfg.webp_quality, method=4)
    else:
        raise ValueError(f"unknown image_format {cfg.image_format!r}")
    return buf.getvalue()


def open_pdf(data: bytes) -> pdfium.PdfDocument:
    """Open PDF bytes, mapping pdfium failures to dead-letter reasons."""
    if not data:
        raise RecordError("empty_pdf", "PDF payload is empty")
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        # pdfium's error text is a process-global "last error" and can be stale, so classify the
        # failure with a second, pure-Python parser instead of trusting the message.
        raise RecordError(*_classify_unopenable(data, exc)) from exc
    if len(pdf) == 0:
        pdf.close()
        raise RecordError("zero_page_pdf", "PDF has no pages")
    return pdf


def _classify_unopenable(data: bytes, exc: Exception) -> tuple[str, str]:
    import pypdf

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its repair warnings are noise here
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            return "encrypted_pdf", f"PDF is encrypted: {exc}"
        if len(reader.pages) == 0:
            return "zero_page_pdf", "PDF has no pages"
    except Exception:  # pypdf cannot read it either: corrupt
        pass
    return "corrupt_pdf", f"pdfium cannot open the PDF: {exc}"


def pdf_page_count(data: bytes) -> int:
    with _PDFIUM_LOCK:
        pdf = open_pdf(data)
        try:
            return len(pdf)
        finally:
            pdf.close()


class _PageRenderer:
    """Render a pdfium page as BGR pixels into one reused, grown buffer (pdfium's C API).

    ``PdfPage.render`` allocates a fresh zeroed ctypes array per page, page-faulted in by pdfium's
    per-pixel 24-bit fill: ~0.7 ms of a ~3.3 ms 1288-px text page on this CPU. Here the buffer
    stays, white is one memset, and the render call is pypdfium2's default (``FPDF_ANNOT``:
    annotations drawn, BGR).
    Callers hold ``_PDFIUM_LOCK`` and copy the pixels out (grey plane or RGB conversion) before they
    release it, so the buffer is never shared; it keeps the largest page seen (5 MB at 1288 px).
    """

    _ROTATION = {0: 0, 90: 1, 180: 2, 270: 3}  # degrees clockwise -> pdfium's rotate argument

    def __init__(self):
        self.buffer = np.empty(0, dtype=np.uint8)

    def __call__(self, page: pdfium.PdfPage, scale: float, rotation: int) -> np.ndarray:
        width, height = math.ceil(page.get_width() * scale), math.ceil(page.get_height() * scale)
        if rotation in (90, 270):
            width, height = height, width
        if self.buffer.size < width * height * 3:
            self.buffer = np.empty(width * height * 3, dtype=np.uint8)
        pixels = self.buffer[: width * height * 3].reshape(height, width, 3)
        pixels.fill(255)
        bitmap = pdfium.raw.FPDFBitmap_CreateEx(width, height, pdfium.raw.FPDFBitmap_BGR,
                                                pixels.ctypes.data_as(ctypes.c_void_p), width * 3)
        if not bitmap:
            raise RecordError("corrupt_pdf", f"pdfium cannot make a {width}x{height} bitmap")
        try:
            pdfium.raw.FPDF_RenderPageBitmap(bitmap, page.raw, 0, 0, width, height, self._ROTATION[rotation],
                                             pdfium.raw.FPDF_ANNOT)
        finally:
            pdfium.raw.FPDFBitmap_Destroy(bitmap)
        return pixels


_render_bgr = _PageRenderer()


def rasterize_pdf_page(data: bytes, index: int, longest_side: int, rotation: int = 0,
                       with_text: bool = False, grey_when_achromatic: bool = False) -> tuple[Image.Image, str | None]:
    """Render page ``index`` so its longest side is ``longest_side`` pixels; RGB PIL image
    (8-bit grey "L" for a page without colour when ``grey_when_achromatic``: the same pixels).
    ``image.info["achromatic"]`` says whether the page has no colour."""
    pixels, achromatic, text = render_pdf_pixels(data, index, longest_side, rotation, with_text, grey_when_achromatic)
    image = Image.fromarray(pixels, mode="L" if pixels.ndim == 2 else "RGB")
    image.info["achromatic"] = achromatic
    return image, text


def render_pdf_pixels(data: bytes, index: int, longest_side: int, rotation: int = 0, with_text: bool = False,
                      grey_when_achromatic: bool = False) -> tuple[np.ndarray, bool, str | None]:
    """``rasterize_pdf_page`` as uint8 pixels: ((H, W, 3) RGB or (H, W) grey, achromatic, text)."""
    if rotation not in (0, 90, 180, 270):
        raise RecordError("bad_rotation", f"rotation must be 0/90/180/270, got {rotation}")
    with _PDFIUM_LOCK:
        pdf = open_pdf(data)
        try:
            if not 0 <= index < len(pdf):
                raise RecordError("page_out_of_range", f"page index {index} not in PDF of {len(pdf)} pages")
            page = pdf[index]
            width, height = page.get_size()
            if width <= 0 or height <= 0:
                raise RecordError("corrupt_pdf", f"page {index} has size {width}x{height}")
            scale = longest_side / max(width, height)
            bgr = _render_bgr(page, scale, rotation)  # a reused buffer: copied out below, under the lock
            grey = grey_if_achromatic(bgr)
            if grey is not None and grey_when_achromatic:
                pixels = grey
            else:
                pixels = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            text = None
            if with_text:
                textpage = page.get_textpage()
                text = textpage.get_text_bounded()
                textpage.close()
            page.close()
            return pixels, grey is not None, text
        except pdfium.PdfiumError as exc:
            raise RecordError("corrupt_pdf", f"pdfium failed on page {index}: {exc}") from exc
        finally:
            pdf.close()


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


def decode_image(data: bytes, cfg: RenderConfig, rotation: int = 0) -> Image.Image:
    """Decode a scan: check the pixel cap before decoding, EXIF-orient, RGB, optional downscale."""
    image = open_image(data, cfg.max_pixels)
    try:
        image = ImageOps.exif_transpose(image)
        image = image.convert("RGB")
    except Exception as exc:
        raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
    if rotation:
        image = image.rotate(-rotation, expand=True)
    if cfg.resize_images and max(image.size) > cfg.longest_side:
        scale = cfg.longest_side / max(image.size)
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.LANCZOS)
    return image


@functools.lru_cache(maxsize=16)
def _config_hash(cfg: RenderConfig) -> str:
    return params_hash(asdict(cfg))


def render_page(page: SourcePage, cfg: RenderConfig) -> PageRecord:
    """Rasterise or decode one ``SourcePage`` into a ``PageRecord``."""
    text_layer = None
    if page.payload_kind == "pdf":
        image, _, text_layer = render_pdf_pixels(
            page.payload, page.pdf_page_index, cfg.longest_side, page.rotation, cfg.keep_text_layer,
            grey_when_achromatic=cfg.image_format == "png" and cfg.png_gray_when_achromatic,
        )
        height, width = image.shape[:2]
    elif page.payload_kind == "image":
        image = decode_image(page.payload, cfg, page.rotation)
        width, height = image.size
    else:
        raise RecordError("bad_payload", f"unknown payload kind {page.payload_kind!r}")
    encoded = encode_image(image, cfg, flat=page.payload_kind == "pdf")
    provenance = list(page.provenance) + [
        ProvenanceStep("render", VERSION, _config_hash(cfg))
    ]
    return PageRecord(
        id=page_id(page.source, page.source_id, page.page_number),
        source=page.source,
        source_id=page.source_id,
        page_number=page.page_number,
        domain=page.domain,
        language=page.language,
        license=page.license,
        image=encoded,
        image_sha256=hashlib.sha256(encoded).hexdigest(),
        width=width,
        height=height,
        task=page.task,
        instruction=page.instruction,
        response=page.response,
        response_format=page.response_format,
        unit_tests=list(page.unit_tests),
        quality=dict(page.quality),
        provenance=provenance,
        split=page.split,
        text_layer=text_layer,
        metadata=dict(page.metadata),
    )
