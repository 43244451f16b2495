"""Page images: PDF page -> RGB image with pypdfium2, and checks on images from scans.

``render_page`` turns a ``SourcePage`` into a ``PageRecord``: rasterise (PDF) or decode (image),
apply the rotation correction, scale to the configured longest side, encode PNG or WebP, and keep
the PDF text layer for later checks. Bad payloads raise ``RecordError`` with a reason slug.
"""

from __future__ import annotations

import hashlib
import io
import logging
import threading
import warnings
from dataclasses import asdict, dataclass

import cv2
import numpy as np
import pypdfium2 as pdfium
from PIL import Image, ImageOps

from pipelines.sources.base import SourcePage
from schemas.deadletter import RecordError
from schemas.page import PageRecord, ProvenanceStep, page_id, params_hash

VERSION = "1"
# pdfium is not thread-safe; Beam's multi-threading mode may call us from several threads.
_PDFIUM_LOCK = threading.Lock()


@dataclass(frozen=True)
class RenderConfig:
    longest_side: int = 1288
    image_format: str = "png"  # png | webp
    png_compress_level: int = 1  # zlib level: 1 is ~1.4x faster than 6 for ~15% larger files
    png_gray_when_achromatic: bool = True  # store grey pages as 8-bit grey PNG (lossless)
    # PNG row filters: "auto" = none for rasterised PDF pages (flat text pages gain ~10% from
    # adaptive filtering at twice the encoding time), adaptive for scans and synthetic pages;
    # "none" or "adaptive" forces one everywhere.
    png_filter: str = "auto"
    webp_quality: int = 90
    max_pixels: int = 64_000_000  # decoded image cap (decompression bombs)
    resize_images: bool = True  # downscale scans larger than longest_side
    keep_text_layer: bool = True


def _achromatic(pixels: np.ndarray) -> bool:
    """True when every pixel has R == G == B (typical of text pages)."""
    return bool(np.array_equal(pixels[:, :, 0], pixels[:, :, 1]) and np.array_equal(pixels[:, :, 1], pixels[:, :, 2]))


def grey_if_achromatic(bgr: np.ndarray) -> np.ndarray | None:
    """The grey plane of a BGR page when it has no colour (else None), exactly.

    OpenCV's BGR->grey weights sum to one in fixed point, so a pixel (v, v, v) maps to v; grey->BGR
    therefore reproduces the page iff every pixel is achromatic. Two SIMD passes, ~4x cheaper than
    comparing channel views in numpy.
    """
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    if cv2.norm(bgr, cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR), cv2.NORM_INF) == 0:
        return grey
    return None


def encode_image(image: Image.Image, cfg: RenderConfig, flat: bool = False) -> bytes:
    """Encode a page image as the corpus stores it (PNG, grey pages as 8-bit grey, or WebP).

    ``flat``: the image is a rasterised PDF page, where ``png_filter: auto`` skips row filters.
    """
    buf = io.BytesIO()
    if cfg.image_format == "png":
        if image.mode == "RGB" and cfg.png_gray_when_achromatic:
            achromatic = image.info.get("achromatic")
            if achromatic is None:
                achromatic = _achromatic(np.asarray(image))
            if achromatic:
                # Lossless: an 8-bit grey PNG decodes to the same RGB values at half the size and
                # ~2.5x less encoding time; readers call .convert("RGB") as for any page.
                image = image.getchannel(0)
        if cfg.png_filter not in ("auto", "none", "adaptive"):
            raise ValueError(f"unknown png_filter {cfg.png_filter!r}")
        unfiltered = cfg.png_filter == "none" or (cfg.png_filter == "auto" and flat)
        if unfiltered and image.mode in ("L", "RGB"):
            # Pillow always chooses filters adaptively (about half its PNG time on a text page);
            # libpng through OpenCV takes a fixed filter.
            pixels = np.asarray(image)
            if image.mode == "RGB":
                pixels = cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR)
            ok, encoded = cv2.imencode(".png", pixels, [cv2.IMWRITE_PNG_COMPRESSION, cfg.png_compress_level,
                                                        cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_NONE])
            if not ok:
                raise RecordError("encode_failed", f"OpenCV could not encode a {image.mode} {image.size} PNG")
            return encoded.tobytes()
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


def rasterize_pdf_page(data: bytes, index: int, longest_side: int, rotation: int = 0,
                       with_text: bool = False, grey_when_achromatic: bool = False) -> tuple[Image.Image, str | None]:
    """Render page ``index`` so its longest side is ``longest_side`` pixels; RGB PIL image
    (8-bit grey "L" for a page without colour when ``grey_when_achromatic``: the same pixels).
    ``image.info["achromatic"]`` says whether the page has no colour."""
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
            bitmap = page.render(scale=scale, rotation=rotation)  # BGR, pdfium's native order
            bgr = bitmap.to_numpy()  # a view of pdfium's buffer
            grey = grey_if_achromatic(bgr)
            if grey is not None and grey_when_achromatic:
                image = Image.fromarray(grey, mode="L")
            else:
                image = Image.fromarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), mode="RGB")
            image.info["achromatic"] = grey is not None
            text = None
            if with_text:
                textpage = page.get_textpage()
                text = textpage.get_text_bounded()
                textpage.close()
            page.close()
            return image, text
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


def render_page(page: SourcePage, cfg: RenderConfig) -> PageRecord:
    """Rasterise or decode one ``SourcePage`` into a ``PageRecord``."""
    text_layer = None
    if page.payload_kind == "pdf":
        image, text_layer = rasterize_pdf_page(
            page.payload, page.pdf_page_index, cfg.longest_side, page.rotation, cfg.keep_text_layer,
            grey_when_achromatic=cfg.image_format == "png" and cfg.png_gray_when_achromatic,
        )
    elif page.payload_kind == "image":
        image = decode_image(page.payload, cfg, page.rotation)
    else:
        raise RecordError("bad_payload", f"unknown payload kind {page.payload_kind!r}")
    encoded = encode_image(image, cfg, flat=page.payload_kind == "pdf")
    provenance = list(page.provenance) + [
        ProvenanceStep("render", VERSION, params_hash(asdict(cfg)))
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
        width=image.width,
        height=image.height,
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
