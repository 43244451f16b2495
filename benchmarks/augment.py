"""Degradation speed: milliseconds per op on a page-sized grey image, and stage throughput.

    python benchmarks/augment.py [--width 1000] [--height 1288] [--records 40]

Prints, for each op of ``synth.augment`` forced alone, the mean milliseconds per call on one core
(a synthetic black-on-white text page of the given size), then ``AugmentStage`` records per second
with ``probability=1`` (decode, degrade, PNG re-encode) and with the default ``probability``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import time
from pathlib import Path

from PIL import Image, ImageDraw

# the repository first: benchmarks/synth.py would otherwise shadow the synth package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas.page import PageRecord, ProvenanceStep, page_id  # noqa: E402
from synth.augment import OPS, AugmentConfig, AugmentStage, degrade  # noqa: E402


def page(width: int, height: int) -> Image.Image:
    image = Image.new("L", (width, height), "white")
    draw = ImageDraw.Draw(image)
    for y in range(20, height - 20, 18):
        draw.text((30, y), "Lorem ipsum dolor sit amet, consectetur adipiscing elit 0123456789" * 2, fill="black")
    return image


def record(i: int, data: bytes, size: tuple[int, int]) -> PageRecord:
    return PageRecord(
        id=page_id("bench", str(i), 0), source="bench", source_id=str(i), page_number=0, domain="bench",
        language="en", license="cc0", image=data, image_sha256=hashlib.sha256(data).hexdigest(),
        width=size[0], height=size[1], task="parse_page", instruction="Read.", response="x",
        provenance=[ProvenanceStep("render", "1", "x")],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--height", type=int, default=1288)
    parser.add_argument("--records", type=int, default=40)
    args = parser.parse_args()
    image = page(args.width, args.height)
    cfg = AugmentConfig()
    for op in OPS:
        degrade(image, 0, cfg, ops=[op])
        started = time.perf_counter()
        for seed in range(10):
            degrade(image, seed, cfg, ops=[op])
        print(f"{op:12s} {(time.perf_counter() - started) / 10 * 1000:8.1f} ms")
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    data = buf.getvalue()
    for probability in (1.0, cfg.probability):
        stage = AugmentStage(AugmentConfig(probability=probability))
        started = time.perf_counter()
        for i in range(args.records):
            stage(record(i, data, image.size))
        rate = args.records / (time.perf_counter() - started)
        print(f"stage p={probability:<4} {rate:8.1f} records/s")


if __name__ == "__main__":
    main()
