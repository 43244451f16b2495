"""PNG encoders on rasterised pages: time and size per page for what pipelines/render.py could use.

    python benchmarks/png.py [--pages 40]

Renders ``--pages`` samples-style text pages at 1288 px (grey, as the corpus stores achromatic
pages) and encodes each with: ``schemas.png`` (unfiltered rows, ISA-L deflate, levels 0-3),
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
from schemas.pdf_pages import render_pdf_pixels  # noqa: E402
from schemas.png import encode_png  # noqa: E402


def pillow_png(pixels: np.ndarray, level: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buf, format="PNG", compress_level=level)
    return buf.getvalue()


def opencv_png(pixels: np.ndarray, level: int) -> bytes:
    return cv2.imencode(".png", pixels, [cv2.IMWRITE_PNG_COMPRESSION, level])[1].tobytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5, help="timing passes; the median is printed")
    args = parser.parse_args()
    cv2.setNumThreads(1)
    rng = random.Random(0)
    pages = []
    for _ in range(args.pages):
        pdf = text_pdf([paragraphs(rng, rng.randint(4, 9), (40, 90))])
        pixels, achromatic, _ = render_pdf_pixels(pdf, 0, 1288, grey_when_achromatic=True)
        assert achromatic and pixels.ndim == 2
        pages.append(pixels)
    encoders = [(f"schemas.png, ISA-L level {lvl}", lambda p, lvl=lvl: encode_png(p, lvl)) for lvl in range(4)]
    encoders += [(f"unfiltered rows, zlib level {lvl}", lambda p, lvl=lvl: encode_png(p, lvl, deflate=zlib.compress))
                 for lvl in (1, 2)]
    encoders += [("Pillow, adaptive filters, level 2", lambda p: pillow_png(p, 2)),
                 ("OpenCV (libpng), level 2", lambda p: opencv_png(p, 2))]
    print(f"{args.pages} grey text pages, {pages[0].shape[1]}x{pages[0].shape[0]} px")
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
