"""Small PDF and image makers shared by the sample builders (reportlab, Pillow)."""

from __future__ import annotations

import io
import random

from PIL import Image, ImageDraw, ImageFont
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

WORDS = (
    "the of and to in is that for with as on by this be are from at or an which it data model page "
    "table method results section figure value analysis report court pension letter county state "
    "measurement sample corpus training document ocr vision language layout column header footer"
).split()


def lorem(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n_words)]
    words[0] = words[0].capitalize()
    return " ".join(words) + "."


def paragraphs(rng: random.Random, n: int, words: tuple[int, int] = (25, 60)) -> list[str]:
    return [lorem(rng, rng.randint(*words)) for _ in range(n)]


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    if line:
        lines.append(line)
    return lines


def text_pdf(pages: list[list[str]], title: str = "", password: str | None = None,
             pagesize=letter) -> bytes:
    """A PDF whose page i shows the paragraphs ``pages[i]`` (with a real text layer)."""
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=pagesize, encrypt=password, invariant=1)
    c.setTitle(title)
    width, height = pagesize
    for paras in pages:
        y = height - 72
        c.setFont("Helvetica", 10)
        for para in paras:
            for line in _wrap(para, 95):
                if y < 72:
                    break
                c.drawString(72, y, line)
                y -= 13
            y -= 8
        c.showPage()
    c.save()
    return buf.getvalue()


def scan_pdf(rng: random.Random, text: str, dpi: int = 200, pagesize=letter) -> bytes:
    """A one-page PDF that is a full-page JPEG 'scan' at ``dpi`` with an invisible text layer, the
    form of many olmOCR-mix and historical pages (rasterising it decodes and resamples the JPEG)."""
    width, height = pagesize
    size = (round(width / 72 * dpi), round(height / 72 * dpi))
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=pagesize, invariant=1)
    c.drawImage(ImageReader(io.BytesIO(scan_image(rng, text, size))), 0, 0, width, height)
    text_object = c.beginText(72, height - 72)
    text_object.setTextRenderMode(3)  # invisible, as OCR layers are
    text_object.setFont("Helvetica", 10)
    for line in _wrap(text, 95)[:50]:
        text_object.textLine(line)
    c.drawText(text_object)
    c.showPage()
    c.save()
    return buf.getvalue()


def scan_image(rng: random.Random, text: str, size: tuple[int, int] = (900, 1200),
               fmt: str = "JPEG", exif_rotate: bool = False) -> bytes:
    """A greyish 'scan' with the text drawn on it; optionally stored rotated with an EXIF tag."""
    image = Image.new("RGB", size, (236, 230, 214))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    y = 40
    for line in _wrap(text, 70):
        draw.text((40, y), line, fill=(40, 35, 30), font=font)
        y += 16
        if y > size[1] - 40:
            break
    for _ in range(400):  # speckle noise
        x, yy = rng.randrange(size[0]), rng.randrange(size[1])
        draw.point((x, yy), fill=(90, 80, 70))
    buf = io.BytesIO()
    if exif_rotate:
        image = image.rotate(90, expand=True)
        exif = Image.Exif()
        exif[0x0112] = 6  # orientation: rotate 90 CW to display
        image.save(buf, format=fmt, exif=exif.tobytes(), quality=85)
    else:
        image.save(buf, format=fmt, quality=85) if fmt == "JPEG" else image.save(buf, format=fmt)
    return buf.getvalue()
