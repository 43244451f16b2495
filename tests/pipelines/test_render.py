import io
import random

import pytest
from PIL import Image

from pipelines.render import RenderConfig, decode_image, render_page
from pipelines.sources.base import SourcePage
from samples.make.pdfs import paragraphs, scan_image, text_pdf
from schemas.deadletter import RecordError
from schemas.page import validate
from schemas.pdf_pages import pdf_page_count, rasterize_pdf_page
from tests.helpers import zero_page_pdf


def page(payload: bytes, kind: str = "pdf", **kw) -> SourcePage:
    return SourcePage(source="t", source_id="doc", page_number=1, payload_kind=kind, payload=payload,
                      response="x", domain="d", language="en", license="cc0", instruction="Convert.", **kw)


def reason(fn, *args, **kw) -> str:
    with pytest.raises(RecordError) as info:
        fn(*args, **kw)
    return info.value.reason


def test_pdf_page_renders_at_longest_side_with_text_layer():
    pdf = text_pdf([["Alpha beta gamma."], ["Second page words."]])
    record = render_page(page(pdf, pdf_page_index=1), RenderConfig())
    assert max(record.width, record.height) == 1288
    assert record.height > record.width  # letter portrait
    assert "Second page words." in record.text_layer
    assert validate(record) == []


def test_grey_pages_are_stored_as_grey_png_losslessly():
    pdf = text_pdf([["Black text on white."]])
    record = render_page(page(pdf), RenderConfig())
    stored = Image.open(io.BytesIO(record.image))
    assert stored.mode == "L"
    rendered, _ = rasterize_pdf_page(pdf, 0, 1288)
    assert stored.convert("RGB").tobytes() == rendered.tobytes()
    rgb = render_page(page(pdf), RenderConfig(png_gray_when_achromatic=False))
    assert Image.open(io.BytesIO(rgb.image)).mode == "RGB"


def test_colour_pdf_page_stays_rgb_and_lossless_with_either_png_filter():
    buf = io.BytesIO()
    Image.new("RGB", (200, 100), (200, 30, 30)).save(buf, format="PDF")
    rendered, _ = rasterize_pdf_page(buf.getvalue(), 0, 400, grey_when_achromatic=True)
    assert rendered.mode == "RGB" and rendered.info["achromatic"] is False
    stored = {}
    for png_filter in ("auto", "none", "adaptive"):
        record = render_page(page(buf.getvalue()), RenderConfig(longest_side=400, png_filter=png_filter))
        image = Image.open(io.BytesIO(record.image))
        assert image.mode == "RGB"
        assert image.tobytes() == rendered.tobytes()
        stored[png_filter] = record.image
    assert stored["auto"] == stored["none"] != stored["adaptive"]  # PDF pages: no row filters by default
    with pytest.raises(ValueError, match="png_filter"):
        render_page(page(buf.getvalue()), RenderConfig(png_filter="paeth"))


def test_colour_scan_stays_rgb():
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(buf, format="PNG")
    record = render_page(page(buf.getvalue(), kind="image"), RenderConfig())
    assert Image.open(io.BytesIO(record.image)).mode == "RGB"


def test_rotation_swaps_orientation_and_webp_encoding():
    pdf = text_pdf([["Rotate me."]])
    cfg = RenderConfig(image_format="webp", longest_side=500)
    record = render_page(page(pdf, rotation=90), cfg)
    assert (record.width, record.height) == (500, round(500 * 612 / 792)) or record.width > record.height
    assert record.image[:4] == b"RIFF" and record.image[8:12] == b"WEBP"


@pytest.mark.parametrize(
    "payload,expected",
    [
        (b"%PDF-1.4 this is not really a pdf", "corrupt_pdf"),
        (b"", "empty_pdf"),
        (zero_page_pdf(), "zero_page_pdf"),
        (text_pdf([["secret"]], password="pw"), "encrypted_pdf"),
    ],
)
def test_bad_pdfs_have_reasons(payload, expected):
    assert reason(pdf_page_count, payload) == expected
    assert reason(render_page, page(payload), RenderConfig()) == expected


def test_page_index_out_of_range():
    assert reason(rasterize_pdf_page, text_pdf([["one"]]), 3, 100) == "page_out_of_range"


def test_image_over_pixel_cap_is_refused_before_decoding():
    buf = io.BytesIO()
    Image.new("L", (3000, 3000)).save(buf, format="PNG")
    assert reason(decode_image, buf.getvalue(), RenderConfig(max_pixels=1_000_000)) == "image_too_large"


def test_exif_orientation_and_downscale():
    data = scan_image(random.Random(1), " ".join(paragraphs(random.Random(2), 2)), size=(900, 1200), exif_rotate=True)
    stored = Image.open(io.BytesIO(data))
    assert stored.size == (1200, 900)  # stored landscape, EXIF says rotate to portrait
    image = decode_image(data, RenderConfig(longest_side=600))
    assert image.size == (450, 600)


def test_garbage_image_bytes():
    assert reason(decode_image, b"\x89PNG\r\n\x1a\nbroken", RenderConfig()) == "corrupt_image"


def test_page_buffers_stay_on_the_heap_on_glibc():
    import platform

    from schemas.images import _keep_page_buffers_on_heap

    if platform.libc_ver()[0] == "glibc":  # the machines this runs on; elsewhere it is a no-op
        assert _keep_page_buffers_on_heap() is True
    else:
        assert _keep_page_buffers_on_heap() is False


def test_reused_render_buffer_gives_pypdfium2s_pixels_for_every_size_and_rotation():
    """Pages are rendered into one reused buffer: a small page after a large one, any rotation,
    must come out exactly as pypdfium2's own PdfPage.render (a fresh bitmap) draws it."""
    import numpy as np
    import pypdfium2 as pdfium
    from reportlab.lib.pagesizes import A4, landscape, letter

    from schemas.pdf_pages import render_pdf_pixels

    pdfs = [text_pdf([["Large page " * 40]], pagesize=landscape(A4)), text_pdf([["Small."]], pagesize=(200, 120)),
            text_pdf([["Letter page words."]], pagesize=letter)]
    for data in pdfs + pdfs[::-1]:
        for rotation in (0, 90, 180, 270):
            for longest in (1288, 300):
                pixels, achromatic, _ = render_pdf_pixels(data, 0, longest, rotation)
                doc = pdfium.PdfDocument(data)
                fresh = doc[0].render(scale=longest / max(doc[0].get_size()), rotation=rotation).to_numpy()
                doc.close()
                assert achromatic and pixels.shape == fresh.shape
                assert np.array_equal(pixels, fresh[:, :, ::-1])  # ours is RGB, pdfium's BGR


def test_pages_drawn_as_png_rows_decode_to_pypdfium2s_pixels_grey_and_colour():
    """``render_pdf_png`` has pdfium draw RGB straight into PNG scanlines in the buffer that
    ``render_pdf_pixels`` also uses: alternating the two, over sizes, rotations, a grey and a colour
    page, each PNG must decode to pypdfium2's own rendering, grey or RGB as asked."""
    import numpy as np
    import pypdfium2 as pdfium
    from reportlab.lib.pagesizes import A4, landscape

    from samples.make.pdfs import scan_pdf
    from schemas.pdf_pages import render_pdf_pixels, render_pdf_png
    from schemas.png import decode_png

    grey_pdf = text_pdf([["Large page " * 40]], pagesize=landscape(A4))
    colour_pdf = scan_pdf(random.Random(1), "A tinted scan with words.", dpi=60)
    for data, colour in [(grey_pdf, False), (colour_pdf, True), (grey_pdf, False)]:
        for rotation in (0, 90, 270):
            for longest in (1288, 301):
                doc = pdfium.PdfDocument(data)
                fresh = doc[0].render(scale=longest / max(doc[0].get_size()), rotation=rotation).to_numpy()[:, :, ::-1]
                doc.close()
                for grey_when_achromatic in (True, False):
                    png, width, height, achromatic, _, _ = render_pdf_png(
                        data, 0, longest, rotation, grey_when_achromatic=grey_when_achromatic, level=1)
                    pixels = decode_png(png)
                    assert (height, width) == fresh.shape[:2] and achromatic is not colour
                    if achromatic and grey_when_achromatic:
                        assert pixels.ndim == 2 and np.array_equal(pixels, fresh[:, :, 0])
                    else:
                        assert np.array_equal(pixels, fresh)
                    assert np.array_equal(render_pdf_pixels(data, 0, longest, rotation)[0], fresh)


def test_scanned_page_pdf_renders_in_colour_with_its_invisible_text_layer():
    """A full-page JPEG scan with an OCR text layer (many olmOCR-mix and historical pages)."""
    from samples.make.pdfs import scan_pdf

    record = render_page(page(scan_pdf(random.Random(0), "Invisible layer words here.", dpi=100)), RenderConfig())
    image = Image.open(io.BytesIO(record.image))
    assert image.mode == "RGB" and max(image.size) == 1288  # paper tint: not achromatic
    assert "Invisible layer words here." in record.text_layer
    assert validate(record) == []


def test_pdf_pages_carry_text_layer_line_boxes_and_scans_scale_theirs():
    from schemas.layout import element

    pdf = text_pdf([["Alpha beta gamma.", "Second line here."]])
    record = render_page(page(pdf), RenderConfig(longest_side=800))
    lines = record.elements
    assert [e.cls for e in lines] == ["text_line"] * len(lines) and len(lines) >= 2
    assert lines[0].text == "Alpha beta gamma." and lines[0].y1 <= lines[1].y0 + 1
    assert all(0 <= e.x0 < e.x1 <= record.width and 0 <= e.y0 < e.y1 <= record.height for e in lines)
    assert render_page(page(pdf), RenderConfig(keep_line_boxes=False)).elements == []
    scan = scan_image(random.Random(0), "Some words", size=(1600, 1000))
    boxed = page(scan, kind="image", elements=[element("text", (100, 200, 800, 300), 0, "Some words")])
    scaled = render_page(boxed, RenderConfig(longest_side=800)).elements
    assert scaled[0].box == (50, 100, 400, 150)
