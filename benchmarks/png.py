"""PNG encoders on rasterised pages: time and size per page for what pipelines/render.py could use.

    python benchmarks/png.py [--pages 40] [--pdfs DIR]

Renders ``--pages`` samples-style text pages at 1288 px (grey, as the corpus stores achromatic
pages), or with ``--pdfs DIR`` every k-th page of the PDFs under DIR (grey when achromatic, else RGB,
as the render stage stores them), and encodes each with: ``schemas.png`` (unfiltered rows, ISA-L deflate, levels 0-3),
the same rows with the standard library's zlib (levels 1-2), Pillow (adaptive filters, level 2)
and OpenCV's libpng (level 2). Prints ms per page and KB per page; every output is decoded back
and compared with the pixels, so a figure is only printed for a lossless encoder.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
import zlib
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from samples.make.pdfs import paragraphs, text_pdf  # noqa: E402
from schemas.pdf_pages import pdf_page_count, render_pdf_pixels  # noqa: E402
from schemas.png import encode_png  # noqa: E402


def pillow_png(pixels: np.ndarray, level: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels, mode="L" if pixels.ndim == 2 else "RGB").save(buf, format="PNG", compress_level=level)
    return buf.getvalue()


def opencv_png(pixels: np.ndarray, level: int) -> bytes:
    bgr = pixels if pixels.ndim == 2 else cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR)  # OpenCV writes BGR input
    return cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, level])[1].tobytes()


def synthetic_pages(n: int) -> list[np.ndarray]:
    rng = random.Random(0)
    pages = []
    for _ in range(n):
        pdf = text_pdf([paragraphs(rng, rng.randint(4, 9), (40, 90))])
        pixels, achromatic, _ = render_pdf_pixels(pdf, 0, 1288, grey_when_achromatic=True)
        assert achromatic and pixels.ndim == 2
        pages.append(pixels)
    return pages


def real_pages(folder: Path, n: int) -> list[np.ndarray]:
    """Every k-th page of the PDFs under ``folder``, about ``n`` in all, as the render stage stores them."""
    files = sorted(p for p in folder.rglob("*.pdf") if p.is_file())
    counted = [(f.read_bytes(), pdf_page_count(f.read_bytes())) for f in files]
    step = max(1, -(-sum(c for _, c in counted) // n))
    pages, k = [], 0
    for data, count in counted:
        for index in range(count):
            if (k + index) % step == 0:
                pages.append(render_pdf_pixels(data, index, 1288, grey_when_achromatic=True)[0].copy())
        k += count
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5, help="timing passes; the median is printed")
    parser.add_argument("--pdfs", type=Path, help="a folder of real PDFs to take the pages from")
    args = parser.parse_args()
    cv2.setNumThreads(1)
    pages = real_pages(args.pdfs, args.pages) if args.pdfs else synthetic_pages(args.pages)
    encoders = [(f"schemas.png, ISA-L level {lvl}", lambda p, lvl=lvl: encode_png(p, lvl)) for lvl in range(4)]
    encoders += [(f"unfiltered rows, zlib level {lvl}", lambda p, lvl=lvl: encode_png(p, lvl, deflate=zlib.compress))
                 for lvl in (1, 2)]
    encoders += [("Pillow, adaptive filters, level 2", lambda p: pillow_png(p, 2)),
                 ("OpenCV (libpng), level 2", lambda p: opencv_png(p, 2))]
    grey = sum(p.ndim == 2 for p in pages)
    what = f"pages of {args.pdfs}" if args.pdfs else "text pages"
    print(f"{len(pages)} {what} at 1288 px: {grey} grey, {len(pages) - grey} RGB")
    print(f"{'encoder':<38}{'ms/page':>10}{'KB/page':>10}")
    for name, encode in encoders:
        outputs = [encode(p) for p in pages]
        for p, out in zip(pages, outputs):
            back = np.asarray(Image.open(io.BytesIO(out)))
            if not np.array_equal(back, p):
                raise SystemExit(f"{name}: decoded pixels differ")
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            for p in pages:
                encode(p)
            times.append((time.perf_counter() - started) / len(pages) * 1000)
        size = sum(len(o) for o in outputs) / len(outputs) / 1024
        print(f"{name:<38}{statistics.median(times):>10.2f}{size:>10.1f}")


if __name__ == "__main__":
    main()
