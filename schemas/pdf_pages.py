"""PDF pages as pixels, with pypdfium2: open PDF bytes (failures as dead-letter reasons), count
pages, and rasterise one page at a longest side (rotation applied, optionally grey, text layer), as
pixels (``render_pdf_page``) or straight to the corpus's PNG (``render_pdf_png``).

Shared by ``pipelines.render`` (corpus pages), ``synth.render_latex`` (synthetic pages typeset by
LaTeX) and ``pipelines.clean.decontam`` (benchmark pages). pdfium is not thread-safe, so every call
holds one process-wide lock.

The last document opened stays open (``_LastDocument``): a reader counts a PDF's pages and the
render stage then rasterises them one call each, with the same bytes. Opening a PDF parses its
cross-reference table and every page load walks its page tree and shared resources again; on
olmOCR's real multi-page PDFs re-opening per page cost ~1/3 of the render stage's CPU time.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import logging
import math
import re
import threading
from typing import Iterator

import cv2
import numpy as np
import pypdfium2 as pdfium
from PIL import Image

from schemas.deadletter import RecordError
from schemas.images import grey_if_achromatic
from schemas.png import encode_png, png_from_rows

# pdfium is not thread-safe; Beam's multi-threading mode may call us from several threads.
_PDFIUM_LOCK = threading.Lock()


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


class _LastDocument:
    """The PDF most recently opened, kept open while the next call passes the same bytes.

    Same bytes: the same object (pages of one PDF share their reader's payload in a fused stage) or
    equal content (a copy after pickling). One document at a time, so memory stays one PDF's.
    Callers hold ``_PDFIUM_LOCK``.
    """

    def __init__(self):
        self.data: bytes | None = None
        self.pdf: pdfium.PdfDocument | None = None

    def open(self, data: bytes) -> pdfium.PdfDocument:
        cached = self.data
        if cached is not None and (data is cached or (len(data) == len(cached) and data == cached)):
            return self.pdf
        self.close()
        self.pdf = open_pdf(data)  # raises RecordError for bytes pdfium cannot open: nothing kept
        self.data = data
        return self.pdf

    def close(self) -> None:
        if self.pdf is not None:
            self.pdf.close()
        self.data = self.pdf = None


_last_document = _LastDocument()
# closed before pypdfium2's own exit hook (registered earlier, so run later), which warns on open documents
atexit.register(_last_document.close)


def pdf_page_count(data: bytes) -> int:
    with _PDFIUM_LOCK:
        return len(_last_document.open(data))


class _PageRenderer:
    """Render a pdfium page into one reused, grown buffer (pdfium's C API).

    ``PdfPage.render`` allocates a fresh zeroed ctypes array per page, page-faulted in by pdfium's
    per-pixel 24-bit fill: ~0.7 ms of a ~3.3 ms 1288-px text page on this CPU. Here the buffer
    stays, white is one memset, and the render call is pypdfium2's default (``FPDF_ANNOT``:
    annotations drawn).

    Two layouts: (H, W, 3) BGR pixels (pdfium's own order), or with ``png_rows`` a PNG's raw
    scanlines, (H, 1 + 3W): a zero filter byte, then the row's pixels in RGB order
    (``FPDF_REVERSE_BYTE_ORDER``), so that ``schemas.png.png_from_rows`` deflates a colour page
    straight from the buffer, with no channel swap and no copy (0.1-0.3 ms of a colour page).
    Callers hold ``_PDFIUM_LOCK`` and are done with the pixels (copied out or encoded) before they
    release it, so the buffer is never shared; it keeps the largest page seen (5 MB at 1288 px).
    """

    _ROTATION = {0: 0, 90: 1, 180: 2, 270: 3}  # degrees clockwise -> pdfium's rotate argument

    def __init__(self):
        self.buffer = np.empty(0, dtype=np.uint8)

    def __call__(self, page: pdfium.PdfPage, scale: float, rotation: int, png_rows: bool = False) -> np.ndarray:
        width, height = math.ceil(page.get_width() * scale), math.ceil(page.get_height() * scale)
        if rotation in (90, 270):
            width, height = height, width
        stride = width * 3 + png_rows
        if self.buffer.size < stride * height:
            self.buffer = np.empty(stride * height, dtype=np.uint8)
        rows = self.buffer[: stride * height].reshape(height, stride)
        rows.fill(255)
        flags = pdfium.raw.FPDF_ANNOT
        if png_rows:
            rows[:, 0] = 0  # PNG filter type 0 (none)
            flags |= pdfium.raw.FPDF_REVERSE_BYTE_ORDER
        bitmap = pdfium.raw.FPDFBitmap_CreateEx(width, height, pdfium.raw.FPDFBitmap_BGR,
                                                ctypes.c_void_p(rows.ctypes.data + png_rows), stride)
        if not bitmap:
            raise RecordError("corrupt_pdf", f"pdfium cannot make a {width}x{height} bitmap")
        try:
            pdfium.raw.FPDF_RenderPageBitmap(bitmap, page.raw, 0, 0, width, height, self._ROTATION[rotation], flags)
        finally:
            pdfium.raw.FPDFBitmap_Destroy(bitmap)
        return rows if png_rows else rows.reshape(height, width, 3)


_render_into_buffer = _PageRenderer()


@contextlib.contextmanager
def _loaded_page(data: bytes, index: int) -> Iterator[pdfium.PdfPage]:
    """Page ``index`` of the PDF in ``data``, held under ``_PDFIUM_LOCK`` and closed after; pdfium
    failures become ``RecordError`` (the document is then not reused)."""
    with _PDFIUM_LOCK:
        pdf = _last_document.open(data)
        if not 0 <= index < len(pdf):
            raise RecordError("page_out_of_range", f"page index {index} not in PDF of {len(pdf)} pages")
        try:
            page = pdf[index]
        except pdfium.PdfiumError as exc:
            _last_document.close()
            raise RecordError("corrupt_pdf", f"pdfium failed on page {index}: {exc}") from exc
        try:
            yield page
        except pdfium.PdfiumError as exc:
            _last_document.close()
            raise RecordError("corrupt_pdf", f"pdfium failed on page {index}: {exc}") from exc
        finally:
            page.close()


def _page_scale(page: pdfium.PdfPage, index: int, longest_side: int) -> tuple[float, float]:
    """(the page's height in points, the scale that makes its longest side ``longest_side`` pixels)."""
    width, height = page.get_size()
    if width <= 0 or height <= 0:
        raise RecordError("corrupt_pdf", f"page {index} has size {width}x{height}")
    return height, longest_side / max(width, height)


def _check_rotation(rotation: int) -> None:
    if rotation not in (0, 90, 180, 270):
        raise RecordError("bad_rotation", f"rotation must be 0/90/180/270, got {rotation}")


def _text_and_lines(page: pdfium.PdfPage, height: float, scale: float, with_text: bool,
                    with_lines: bool) -> tuple[str | None, list[tuple[float, float, float, float, str]] | None]:
    """The page's text (``with_text``) and line boxes (``with_lines``) from one text page."""
    text = lines = None
    if with_text or with_lines:
        textpage = page.get_textpage()
        try:
            if with_text:
                text = unmarked_text(textpage.get_text_bounded())
            if with_lines:
                lines = _text_lines(textpage, height, scale)
        finally:
            textpage.close()
    return text, lines


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
    pixels, achromatic, text, _ = render_pdf_page(data, index, longest_side, rotation, with_text, grey_when_achromatic)
    return pixels, achromatic, text


def render_pdf_page(data: bytes, index: int, longest_side: int, rotation: int = 0, with_text: bool = False,
                    grey_when_achromatic: bool = False, with_lines: bool = False) -> tuple[
                        np.ndarray, bool, str | None, list[tuple[float, float, float, float, str]] | None]:
    """``render_pdf_pixels`` plus, when ``with_lines``, the text layer's line boxes (``pdf_line_boxes``,
    in pixels of the unrotated page) from the same page load and text page: loading a page and its
    text page again cost as much as its PNG on olmOCR's real PDFs."""
    _check_rotation(rotation)
    with _loaded_page(data, index) as page:
        height, scale = _page_scale(page, index, longest_side)
        bgr = _render_into_buffer(page, scale, rotation)  # a reused buffer: copied out below, under the lock
        grey = grey_if_achromatic(bgr)
        pixels = grey if grey is not None and grey_when_achromatic else cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        text, lines = _text_and_lines(page, height, scale, with_text, with_lines)
        return pixels, grey is not None, text, lines


def render_pdf_png(data: bytes, index: int, longest_side: int, rotation: int = 0, with_text: bool = False,
                   grey_when_achromatic: bool = False, with_lines: bool = False, level: int = 2) -> tuple[
                       bytes, int, int, bool, str | None, list[tuple[float, float, float, float, str]] | None]:
    """``render_pdf_page`` with the pixels stored as ``schemas.png`` stores them (unfiltered rows,
    ``level``): ``(png, width, height, achromatic, text, lines)``. The PNG decodes to exactly
    ``render_pdf_page``'s pixels; a colour page is deflated where pdfium drew it (``_PageRenderer``)."""
    _check_rotation(rotation)
    with _loaded_page(data, index) as page:
        height, scale = _page_scale(page, index, longest_side)
        rows = _render_into_buffer(page, scale, rotation, png_rows=True)  # the reused buffer: encoded under the lock
        pixel_height, width = rows.shape[0], (rows.shape[1] - 1) // 3
        grey = grey_if_achromatic(rows[:, 1:].reshape(pixel_height, width, 3))
        if grey is not None and grey_when_achromatic:
            png = encode_png(grey, level)
        else:
            png = png_from_rows(rows, 3, level)
        text, lines = _text_and_lines(page, height, scale, with_text, with_lines)
        return png, width, pixel_height, grey is not None, text, lines


_VOIDP = ctypes.c_void_p
_GET_CHAR_BOX = ctypes.CFUNCTYPE(ctypes.c_int, _VOIDP, ctypes.c_int, _VOIDP, _VOIDP, _VOIDP, _VOIDP)(
    ctypes.cast(pdfium.raw.FPDFText_GetCharBox, _VOIDP).value)
_COUNT_RECTS = ctypes.CFUNCTYPE(ctypes.c_int, _VOIDP, ctypes.c_int, ctypes.c_int)(
    ctypes.cast(pdfium.raw.FPDFText_CountRects, _VOIDP).value)
_GET_RECT = ctypes.CFUNCTYPE(ctypes.c_int, _VOIDP, ctypes.c_int, _VOIDP, _VOIDP, _VOIDP, _VOIDP)(
    ctypes.cast(pdfium.raw.FPDFText_GetRect, _VOIDP).value)
_RUN = re.compile(r"[^\r\n]+")  # text between line breaks (pdfium generates \r\n between lines)
# pdfium's text carries U+FFFE where a word is hyphenated at a line end (the page shows a hyphen) and
# private-use code points for glyphs without Unicode (the pieces of tall brackets): 3% of the lines of
# olmOCR's real PDFs held one. Made text index for index, so char boxes still line up with the text.
_MARKERS = re.compile("[\ue000-\uf8ff\ufffe]")
_MARKER_TEXT = {0xFFFE: "-", **{c: " " for c in range(0xE000, 0xF900)}}


def unmarked_text(text: str) -> str:
    """pdfium's text with its markers as text: U+FFFE a hyphen, a private-use code point a space."""
    if text.isascii() or not _MARKERS.search(text):
        return text
    return text.translate(_MARKER_TEXT)


def _text_lines(textpage, height: float, scale: float) -> list[tuple[float, float, float, float, str]]:
    """Lines of a text page: the runs of text between pdfium's generated line breaks, each boxed by
    pdfium's own text rectangles for it (``FPDFText_CountRects`` / ``FPDFText_GetRect``: one per
    text-object run; whitespace at the run's two ends left out).

    A run whose rectangles do not stack on one line (one lies wholly above or below the line so far:
    a superscript set apart, columns that pdfium joined) is split per character instead
    (``_char_lines``), where a character does not overlap the line so far vertically. A rotated label
    is one text object, so one line (per character it would fall apart into one line per glyph).
    Rectangles, not char boxes, because a page has ~10x fewer of them (~220 against ~2,200 chars): on
    olmOCR's real PDFs 0.6 ms a page against 1.5 ms for one pass over the char boxes.
    """
    n = textpage.count_chars()
    if n <= 0:
        return []
    text = unmarked_text(textpage.get_text_range(0, n))
    if len(text) != n:  # chars outside the BMP make the text and char indexes disagree: no boxes
        return []
    count_rects, get_rect = _COUNT_RECTS, _GET_RECT
    tp = ctypes.cast(textpage.raw, ctypes.c_void_p).value
    left, top, right, bottom = (ctypes.c_double() for _ in range(4))
    at_left, at_top, at_right, at_bottom = map(ctypes.addressof, (left, top, right, bottom))
    lines: list[tuple[float, float, float, float, str]] = []
    # Plain locals, not a list per box: this loop runs for every rectangle of every page (~220 a page on
    # olmOCR's real PDFs).
    for run in _RUN.finditer(text):
        chunk = run.group()
        body = chunk.strip()
        if not body:
            continue
        start = run.start()
        rects = count_rects(tp, start + len(chunk) - len(chunk.lstrip()), len(body))
        if rects <= 0:
            continue
        get_rect(tp, 0, at_left, at_top, at_right, at_bottom)
        x0, y0, x1, y1 = left.value, bottom.value, right.value, top.value
        for k in range(1, rects):
            get_rect(tp, k, at_left, at_top, at_right, at_bottom)
            lo, hi = bottom.value, top.value
            if lo > y1 or hi < y0:  # not on the line so far: split per character
                lines.extend(_char_lines(textpage, text, start, run.end(), height, scale))
                break
            x0, y0, x1, y1 = _grown(x0, y0, x1, y1, left.value, lo, right.value, hi)
        else:
            _add_line(lines, body, (x0, y0, x1, y1), height, scale)
    return lines


def _char_lines(textpage, text: str, start: int, end: int, height: float,
                scale: float) -> list[tuple[float, float, float, float, str]]:
    """Lines of ``text[start:end]`` (no line breaks inside) from pdfium's char boxes
    (``FPDFText_GetCharBox``): a line ends where the next char does not overlap it vertically.
    Whitespace joins the line without a box (its box is not asked for)."""
    # ~1 µs a call through an untyped pointer to the same function, addresses as plain ints (pypdfium2's
    # typed binding converts each pointer argument: ~2 µs with byref(), ~1.2 with c_double objects)
    get_box = _GET_CHAR_BOX
    tp = ctypes.cast(textpage.raw, ctypes.c_void_p).value
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    at_left, at_right, at_bottom, at_top = map(ctypes.addressof, (left, right, bottom, top))
    lines: list[tuple[float, float, float, float, str]] = []
    line_start = start  # where the current line's text begins
    has_box = False
    x0 = y0 = x1 = y1 = 0.0
    for i, char in enumerate(text[start:end], start):
        if char.isspace() or not get_box(tp, i, at_left, at_right, at_bottom, at_top):
            continue
        lo, hi = bottom.value, top.value
        if has_box and (lo > y1 or hi < y0):  # no vertical overlap: new line
            _add_line(lines, text[line_start:i], (x0, y0, x1, y1), height, scale)
            line_start, has_box = i, False
        if not has_box:
            x0, y0, x1, y1, has_box = left.value, lo, right.value, hi, True
            continue
        x0, y0, x1, y1 = _grown(x0, y0, x1, y1, left.value, lo, right.value, hi)
    if has_box:
        _add_line(lines, text[line_start:end], (x0, y0, x1, y1), height, scale)
    return lines


def _grown(x0: float, y0: float, x1: float, y1: float, left: float, bottom: float, right: float,
           top: float) -> tuple[float, float, float, float]:
    """The box ``(x0, y0, x1, y1)`` grown to cover ``(left, bottom, right, top)`` (comparisons, not
    min()/max(): it runs for every rectangle and char box a line takes in)."""
    return (left if left < x0 else x0, bottom if bottom < y0 else y0, right if right > x1 else x1,
            top if top > y1 else y1)


def _add_line(lines: list, chars: str, box: tuple[float, float, float, float], height: float, scale: float) -> None:
    """Append the line (``box`` in PDF points, bottom-up) in pixels, unless it is empty or flat."""
    x0, y0, x1, y1 = box
    content = " ".join(chars.split())
    if content and x1 > x0 and y1 > y0:
        lines.append((x0 * scale, (height - y1) * scale, x1 * scale, (height - y0) * scale, content))


def pdf_line_boxes(data: bytes, index: int, longest_side: int) -> list[tuple[float, float, float, float, str]]:
    """The text layer's line boxes of page ``index`` as ``(x0, y0, x1, y1, text)`` in pixels of the page
    rendered with its longest side ``longest_side`` (``render_pdf_pixels``' scale, no rotation), in the
    text layer's order (``_text_lines``). Empty for a page without a text layer."""
    with _loaded_page(data, index) as page:
        width, height = page.get_size()
        return _text_and_lines(page, height, longest_side / max(width, height), False, True)[1]
