"""Page images: PDF page -> RGB image with pypdfium2, and checks on images from scans.

``render_page`` turns a ``SourcePage`` into a ``PageRecord``: rasterise (PDF) or decode (image),
apply the rotation correction, scale to the configured longest side, encode PNG or WebP, and keep
the PDF text layer for later checks. Bad payloads raise ``RecordError`` with a reason slug.
Rasterising (``schemas.pdf_pages``) and encoding (``schemas.images``) are shared with ``synth``;
this module applies them to a corpus ``SourcePage`` with its ``RenderConfig``.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Literal

from PIL import Image, ImageOps

from pipelines.sources.base import SourcePage
from schemas.config import option
from schemas.deadletter import RecordError
from schemas.images import encode_image, open_image, to_8bit, unfiltered_png
from schemas.layout import element, scale_elements
from schemas.page import PageRecord, ProvenanceStep, image_sha256, page_id, params_hash
from schemas.pdf_pages import render_pdf_page, render_pdf_png

# 2: pdfium's U+FFFE and private-use markers made text (schemas.pdf_pages.unmarked_text)
# 3: 16-bit, 32-bit integer and float scans are scaled to 8 bits (to_8bit), no longer clipped to a white page
VERSION = "3"


@dataclass(frozen=True)
class RenderConfig:
    """How source pages become the stored page images."""

    longest_side: int = option(1288, help="pages are rasterised (PDFs) or downscaled (scans) to this longest side")
    image_format: Literal["png", "webp"] = option("png", help="stored image format: png or webp")
    # PDF pages go through schemas.png (ISA-L, whose levels stop at 3): 2 is 0.74 ms and 77 KB for a grey
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
    keep_line_boxes: bool = option(True, help="store a PDF page's text-layer line boxes as text_line elements")


def decode_image(data: bytes, cfg: RenderConfig, rotation: int = 0) -> Image.Image:
    """Decode a scan: check the pixel cap before decoding, EXIF-orient, 8 bits (``to_8bit``), RGB, optional
    downscale."""
    image = open_image(data, cfg.max_pixels)
    try:
        image = ImageOps.exif_transpose(image)
        image = to_8bit(image).convert("RGB")
    except RecordError:
        raise
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
        elements = list(page.elements)
        want_lines = cfg.keep_line_boxes and not elements and page.rotation == 0
        as_grey = cfg.image_format == "png" and cfg.png_gray_when_achromatic
        if unfiltered_png(cfg, flat=True):  # drawn by pdfium straight into PNG rows
            encoded, width, height, _, text_layer, boxes = render_pdf_png(
                page.payload, page.pdf_page_index, cfg.longest_side, page.rotation, cfg.keep_text_layer,
                grey_when_achromatic=as_grey, with_lines=want_lines, level=cfg.png_compress_level)
        else:
            pixels, _, text_layer, boxes = render_pdf_page(
                page.payload, page.pdf_page_index, cfg.longest_side, page.rotation, cfg.keep_text_layer,
                grey_when_achromatic=as_grey, with_lines=want_lines)
            height, width = pixels.shape[:2]
            encoded = encode_image(pixels, cfg, flat=True)
        if boxes is not None:
            clipped = [(max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1), text)
                       for x0, y0, x1, y1, text in boxes]
            elements = [element("text_line", (x0, y0, x1, y1), i, text)
                        for i, (x0, y0, x1, y1, text) in enumerate(b for b in clipped if b[2] > b[0] and b[3] > b[1])]
    elif page.payload_kind == "image":
        image = decode_image(page.payload, cfg, page.rotation)
        width, height = image.size
        elements = []
        if page.elements and page.rotation == 0:  # boxes of a rotated scan are not carried over
            source_w, source_h = open_image(page.payload, cfg.max_pixels).size
            elements = scale_elements(page.elements, width / source_w, height / source_h)
        encoded = encode_image(image, cfg)
    else:
        raise RecordError("bad_payload", f"unknown payload kind {page.payload_kind!r}")
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
        image_sha256=image_sha256(encoded),
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
        elements=elements,
    )
