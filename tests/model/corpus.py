"""Tiny corpora for model/ tests: PageRecord shards written like the real writer's."""

from __future__ import annotations

import hashlib
import io
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

from schemas.page import PAGE_SCHEMA, PageRecord, ProvenanceStep, page_id

WORDS = "the quick brown fox jumps over a lazy dog table formula page column row".split()


def page_png(seed: str, size: tuple[int, int] = (84, 56)) -> bytes:
    r = random.Random(seed)
    image = Image.new("L", size, "white")
    draw = ImageDraw.Draw(image)
    for y in range(4, size[1] - 8, 10):
        draw.text((r.randint(2, 8), y), " ".join(r.choices(WORDS, k=3)), fill="black")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def make_record(source: str, domain: str, n: int, image: bytes | None = None, response: str | None = None,
                split: str = "train", unit_tests: list[str] | None = None) -> PageRecord:
    data = image if image is not None else page_png(f"{source}/{n}")
    r = random.Random(f"{source}{n}")
    text = response if response is not None else " ".join(r.choices(WORDS, k=r.randint(3, 12)))
    tests = unit_tests if unit_tests is not None else [
        json.dumps({"type": "present", "text": text.split()[0], "pdf": "x.pdf", "page": 1, "id": f"t{n}"})]
    return PageRecord(
        id=page_id(source, str(n), 0), source=source, source_id=str(n), page_number=0, domain=domain,
        language="en", license="cc0", image=data, image_sha256=hashlib.sha256(data).hexdigest(),
        width=84, height=56, task="parse_page", instruction="Convert the page to markdown.",
        response=text, unit_tests=tests, provenance=[ProvenanceStep("test", "1", "x")], split=split)


def write_corpus(root, records: list[PageRecord], files: int = 2, row_group: int = 8) -> str:
    """``data/<split>-NNNNN-of-MMMMM.parquet`` with PAGE_SCHEMA and small row groups."""
    data = root / "data"
    data.mkdir(parents=True)
    for i in range(files):
        part = records[i::files]
        table = pa.Table.from_pylist([r.to_row() for r in part], schema=PAGE_SCHEMA)
        pq.write_table(table, data / f"train-{i:05d}-of-{files:05d}.parquet", row_group_size=row_group)
    return str(root)
