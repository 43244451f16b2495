"""A miniature FinePDFs: parquet files in the published 17-column layout plus the CC WARC they cite.

``build(root)`` writes::

    root/finepdfs/data/eng_Latn/train/000_00000.parquet   14 rows
    root/finepdfs/data/fra_Latn/train/000_00000.parquet    3 rows
    root/finepdfs/warc/crawl-data/CC-MAIN-2024-10/segments/.../CC-MAIN-...-00000.warc.gz

Read it with the ``finepdfs`` source and ``options: {warc_root: <root>/finepdfs/warc}``. The WARC is
gzip-per-record like Common Crawl's: a ``warcinfo`` record, PDF ``response`` records and two
``text/html`` responses; each row's ``offset`` is its record's byte offset in the ``.warc.gz``.
Page ``i`` of each PDF shows exactly the paragraphs of that row's page ``i`` (``text_pdf``).

The English file also carries the rows that exercise the drop and dead-letter paths: a rolmOCR
document with one failed page (kept, ``finepdfs_failed_pages == 1``), one whose pages all failed
(``no_usable_pages``), an ``is_truncated`` row whose PDF is complete (kept), one whose PDF is cut
(``truncated_pdf``), one whose offset points at an HTML record (``warc_not_pdf``) and one whose
``page_ends`` has one page more than its PDF (``page_count_mismatch``).

Everything is seeded: two builds give byte-identical files. The helpers (``WarcBuilder``,
``finepdfs_row``, ``write_parquet``) are reused by the tests to craft other bad inputs.
"""

from __future__ import annotations

import itertools
import pathlib
import random
import sys
import uuid
from dataclasses import dataclass
from io import BytesIO
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from samples.make.pdfs import paragraphs, text_pdf

SEED = 20240223
DUMP = "CC-MAIN-2024-10"
WARC_FILE_PATH = (
    "crawl-data/CC-MAIN-2024-10/segments/1707947474523.8/warc/"
    "CC-MAIN-20240223000000-20240223030000-00000.warc.gz"
)
WARC_DATE = "2024-02-23T01:23:45Z"
FAILED_MARKER = "<--- failed_to_process_page --->"
STOP_MARKER = "<--- stop_reason_repetition --->"

# Arrow types as in the published dataset_info (see datasets.md section 1).
SCHEMA = pa.schema(
    [
        ("text", pa.string()),
        ("id", pa.string()),
        ("dump", pa.string()),
        ("url", pa.string()),
        ("date", pa.string()),
        ("file_path", pa.string()),
        ("offset", pa.int64()),
        ("token_count", pa.int64()),
        ("language", pa.string()),
        ("page_average_lid", pa.string()),
        ("page_average_lid_score", pa.float64()),
        ("full_doc_lid", pa.string()),
        ("full_doc_lid_score", pa.float64()),
        ("per_page_languages", pa.list_(pa.string())),
        ("is_truncated", pa.bool_()),
        ("extractor", pa.string()),
        ("page_ends", pa.list_(pa.int64())),
    ]
)

FRENCH = (
    "le la les de des du et un une est dans pour avec sur par que qui rapport page tableau "
    "document mesure commune tribunal lettre analyse résultat données été où année même élève"
).split()


class WarcBuilder:
    """Writes gzip-per-record WARC records with a fixed date and seeded record ids."""

    def __init__(self, fh: BinaryIO, seed: int = SEED):
        self.fh = fh
        self.writer = WARCWriter(fh, gzip=True)
        self.rng = random.Random(seed)

    def record_id(self) -> str:
        return f"<urn:uuid:{uuid.UUID(int=self.rng.getrandbits(128), version=4)}>"

    def warcinfo(self, filename: str) -> int:
        offset = self.fh.tell()
        fields = (
            "software: pagemill samples/make/finepdfs.py\r\n"
            "format: WARC File Format 1.1\r\n"
            "isPartOf: CC-MAIN-2024-10\r\n"
        ).encode()
        record = self.writer.create_warc_record(
            filename,
            "warcinfo",
            payload=BytesIO(fields),
            length=len(fields),
            warc_content_type="application/warc-fields",
            warc_headers_dict={"WARC-Record-ID": self.record_id(), "WARC-Date": WARC_DATE,
                               "WARC-Filename": filename},
        )
        self.writer.write_record(record)
        return offset

    def response(self, url: str, payload: bytes, content_type: str = "application/pdf",
                 truncated: bool = False) -> tuple[int, str]:
        """Write one HTTP response record; returns (byte offset in the file, WARC-Record-ID)."""
        offset = self.fh.tell()
        record_id = self.record_id()
        headers = {"WARC-Record-ID": record_id, "WARC-Date": WARC_DATE,
                   "WARC-Identified-Payload-Type": content_type}
        if truncated:
            headers["WARC-Truncated"] = "length"
        http = StatusAndHeaders(
            "200 OK",
            [("Content-Type", content_type), ("Content-Length", str(len(payload)))],
            protocol="HTTP/1.1",
        )
        record = self.writer.create_warc_record(
            url, "response", payload=BytesIO(payload), length=len(payload),
            warc_headers_dict=headers, http_headers=http,
        )
        self.writer.write_record(record)
        return offset, record_id


def finepdfs_row(*, doc_id: str, pages: list[str], extractor: str, url: str, offset: int,
                 file_path: str = WARC_FILE_PATH, language: str = "eng_Latn",
                 is_truncated: bool = False, page_ends: list[int] | None = None,
                 score: float = 0.99) -> dict[str, Any]:
    """One parquet row: ``text`` and ``page_ends`` built the way each extractor builds them."""
    text = "".join(pages) if extractor == "docling" else "\n".join(pages)
    if page_ends is None:
        page_ends = list(itertools.accumulate(len(p) for p in pages))
    return {
        "text": text,
        "id": doc_id,
        "dump": DUMP,
        "url": url,
        "date": WARC_DATE,
        "file_path": file_path,
        "offset": offset,
        "token_count": len(text.split()),  # stand-in for the Llama-3.2 tokenizer count
        "language": language,
        "page_average_lid": language,
        "page_average_lid_score": round(score - 0.02, 4),
        "full_doc_lid": language,
        "full_doc_lid_score": score,
        "per_page_languages": [language] * len(page_ends),
        "is_truncated": is_truncated,
        "extractor": extractor,
        "page_ends": page_ends,
    }


def write_parquet(path: pathlib.Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(table, path, row_group_size=8)


@dataclass
class _Doc:
    """A sample document: its per-page labels and how its row and WARC record are distorted."""

    pages: list[list[str]]  # paragraphs per page, as drawn in the PDF
    extractor: str
    language: str = "eng_Latn"
    kind: str = "ok"  # ok | failed_page | all_failed | truncated_ok | truncated_cut | not_pdf | mismatch


def _labels(doc: _Doc) -> list[str]:
    labels = ["\n\n".join(paras) for paras in doc.pages]
    if doc.kind == "failed_page":
        labels[1] = FAILED_MARKER
    elif doc.kind == "all_failed":
        labels = [FAILED_MARKER if i % 2 == 0 else STOP_MARKER for i in range(len(labels))]
    elif doc.kind == "mismatch":
        labels.append("A page the PDF does not have.")
    return labels


def _french(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = [rng.choice(FRENCH) for _ in range(rng.randint(15, 35))]
        out.append(" ".join(words).capitalize() + ".")
    return out


def _docs(rng: random.Random) -> list[_Doc]:
    def pages(n: int, french: bool = False) -> list[list[str]]:
        return [_french(rng, rng.randint(1, 3)) if french else paragraphs(rng, rng.randint(1, 3), (15, 40))
                for _ in range(n)]

    eng = [
        _Doc(pages(2 + i % 3), "docling" if i % 2 == 0 else "rolmOCR") for i in range(8)
    ] + [
        _Doc(pages(3), "rolmOCR", kind="failed_page"),
        _Doc(pages(2), "rolmOCR", kind="all_failed"),
        _Doc(pages(2), "docling", kind="truncated_ok"),
        _Doc(pages(4), "docling", kind="truncated_cut"),
        _Doc(pages(2), "docling", kind="not_pdf"),
        _Doc(pages(2), "rolmOCR", kind="mismatch"),
    ]
    fra = [_Doc(pages(n, french=True), ex, language="fra_Latn")
           for n, ex in ((2, "docling"), (3, "rolmOCR"), (2, "docling"))]
    return eng + fra


def build(root: pathlib.Path) -> None:
    """Write the sample under ``root/finepdfs`` (see the module docstring)."""
    rng = random.Random(SEED)
    base = pathlib.Path(root) / "finepdfs"
    warc_path = base / "warc" / WARC_FILE_PATH
    warc_path.parent.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {}
    with open(warc_path, "wb") as fh:
        warc = WarcBuilder(fh)
        warc.warcinfo(warc_path.name)
        html_offsets = []
        for n, doc in enumerate(_docs(rng)):
            if n % 6 == 2:  # interleave HTML pages, as a real crawl segment would have
                html = f"<html><body><p>Landing page {n}</p></body></html>".encode()
                html_offsets.append(warc.response(f"https://www.example.org/landing/{n}.html", html,
                                                  "text/html; charset=utf-8")[0])
            url = f"https://www.example.{'fr' if doc.language == 'fra_Latn' else 'com'}/docs/{n:03d}.pdf"
            if doc.kind == "not_pdf":  # the row points at the last HTML record instead
                offset, record_id = html_offsets[-1], warc.record_id()
            else:
                pdf = text_pdf(doc.pages, title=f"finepdfs sample {n}")
                if doc.kind == "truncated_cut":
                    pdf = pdf[: len(pdf) // 2]  # CC's copy stops at its size cap
                offset, record_id = warc.response(url, pdf, truncated=doc.kind == "truncated_cut")
            rows.setdefault(doc.language, []).append(
                finepdfs_row(
                    doc_id=record_id, pages=_labels(doc), extractor=doc.extractor, url=url,
                    offset=offset, language=doc.language,
                    is_truncated=doc.kind in ("truncated_ok", "truncated_cut"),
                    score=round(0.9 + rng.random() * 0.09, 4),
                )
            )
    for language, language_rows in rows.items():
        write_parquet(base / "data" / language / "train" / "000_00000.parquet", language_rows)


if __name__ == "__main__":
    build(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "samples/out"))
