"""Historical-corpus samples: NARA pension files, LoC Chronicling America, Europeana newspapers.

``build(root)`` writes, with the published column names and Arrow types:

* ``root/nara/nara_revolutionary_war_pension_files.parquet`` (8 rows) and
  ``root/nara/mirror/s3.amazonaws.com/NARAprodstorage/...`` page JPEGs (mirror for
  ``pageImageURL``).
* ``root/loc/loc_chronicling_america_1770-1810.parquet`` (7 rows) and
  ``root/loc/mirror/chroniclingamerica.loc.gov/lccn/...`` single-page PDFs and thumbnail JPEGs.
* ``root/europeana/data/fr/europeana_newspapers_fr-1850.parquet`` (6 rows) with the page image
  embedded as a Hugging Face ``Image`` struct ``{bytes, path}``.

Expected outcomes (reader, then render stage with its default 64,000,000-pixel cap):

NARA (kind ``nara``; options ``mirror: <root>/nara/mirror``):
  rows 1-3 (NAID 54640001, pages 1-3): pages, human transcriptions.
  row 4 (54640002-4163201): transcription null, ``extractedText`` set: ``empty_transcription``
  (dropped) by default; a page with ``quality.text_origin == "machine_ocr"`` under
  ``use_extracted_text: true``.
  row 5 (54640002-4163202): no text at all: ``empty_transcription``.
  row 6 (54640003-4163301): image absent from the mirror: ``image_unavailable``.
  row 7 (54640003-4163302): 12000x12000 PNG: read fine, ``image_too_large`` at render.
  row 8 (54640004-4163401): ``ftp://`` image URL: ``bad_image_url``.

LoC (kind ``loc``; options ``mirror: <root>/loc/mirror``, ``image_column`` ``pdf_url`` default or
``thumbnail_url``):
  rows 1-4: pages (PDF payloads; JPEG with ``thumbnail_url``).
  row 5 (sn84026472/1790-06-09/ed-1/seq-1): empty ``ocr_text``: ``empty_transcription``.
  row 6 (sn84026472/1790-06-09/ed-1/seq-2): neither PDF nor thumbnail mirrored: ``image_unavailable``.
  row 7 (sn83021183/1789-04-22/ed-1/seq-1): the PDF is corrupt: read fine, ``corrupt_pdf`` at
  render (its thumbnail is fine, so it renders under ``image_column: thumbnail_url``).

Europeana (kind ``historical``), config mapping::

    kind: historical
    language: fr
    options:
      columns:
        id: id
        text: text
        image_bytes: image
        language: language
        title: title
        date: date
      quality_columns: [mean_ocr, std_ocr]
      metadata_columns: [iiif_url]

  rows 1-4: pages (row 3 language ``de`` overrides the configured ``fr``; row 4 language
  ``multi_language`` keeps ``fr``). row 5: empty text: ``empty_transcription``. row 6: image
  struct with no bytes: ``missing_image``.

Seeded and byte-identical across reruns (``python -m samples.make.historical <root>``).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from samples.make.pdfs import paragraphs, scan_image, text_pdf

SEED = 1776
NARA_FILE = "nara/nara_revolutionary_war_pension_files.parquet"
LOC_FILE = "loc/loc_chronicling_america_1770-1810.parquet"
EUROPEANA_FILE = "europeana/data/fr/europeana_newspapers_fr-1850.parquet"

EUROPEANA_OPTIONS = {
    "columns": {"id": "id", "text": "text", "image_bytes": "image", "language": "language",
                "title": "title", "date": "date"},
    "quality_columns": ["mean_ocr", "std_ocr"],
    "metadata_columns": ["iiif_url"],
}

NARA_SCHEMA = pa.schema(
    [(name, pa.string()) for name in (
        "NAID", "naraURL", "title", "logicalDate", "variantControlNumbers", "levelOfDescription",
        "pdfObjectId", "pdfURL", "pageObjectId")]
    + [("pageNumber", pa.int64())]
    + [(name, pa.string()) for name in (
        "pageLink", "pageImageURL", "pageImageType", "extractedNames", "extractedTextID",
        "extractedText", "extractedTextDate", "extractedTextContributor")]
    + [("transcriptionIngestDate", pa.timestamp("ns")), ("transcriptionID", pa.string()),
       ("transcriptionText", pa.string())]
)
LOC_SCHEMA = pa.schema(
    [(name, pa.string()) for name in ("Web_URL", "newspaper_title", "place_of_publication", "lccn")]
    + [("issue_date", pa.timestamp("ns")), ("edition_order", pa.int64()), ("Page", pa.int64())]
    + [(name, pa.string()) for name in ("thumbnail_url", "jpeg2000_url", "pdf_url", "ocr_url", "ocr_text")]
    + [("source_record_creation_date", pa.timestamp("ns"))]
)
EUROPEANA_SCHEMA = pa.schema(
    [("id", pa.string()), ("title", pa.string()), ("date", pa.string()), ("language", pa.string()),
     ("text", pa.string()), ("mean_ocr", pa.float64()), ("std_ocr", pa.float64()),
     ("iiif_url", pa.string()),
     ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())]))]
)


def _write_parquet(path: Path, rows: list[dict], schema: pa.Schema) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, row_group_size=4)


def _mirror_write(mirror: Path, url: str, data: bytes) -> None:
    """Store ``data`` where ``ImageResolver`` looks for ``url``: ``<mirror>/<host>/<path>``."""
    rest = url.split("://", 1)[1]
    target = mirror / rest
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def huge_png(size: int = 12000) -> bytes:
    """A ``size`` x ``size`` bilevel PNG: ~30 KB on disk, far over the render pixel cap."""
    buf = io.BytesIO()
    Image.new("1", (size, size), 1).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def build_nara(root: Path, rng: random.Random) -> None:
    mirror = root / "nara" / "mirror"
    base = "https://s3.amazonaws.com/NARAprodstorage/lz/microfilm-publications/M804"
    rows: list[dict] = []
    # (NAID, pageObjectId, page, transcription, extracted, image: "scan" | "missing" | "huge" | "ftp")
    plan = [
        ("54640001", "4163101", 1, "text", None, "scan"),
        ("54640001", "4163102", 2, "text", None, "scan"),
        ("54640001", "4163103", 3, "text", None, "scan"),
        ("54640002", "4163201", 1, None, "text", "scan"),
        ("54640002", "4163202", 2, "", None, "scan"),
        ("54640003", "4163301", 1, "text", None, "missing"),
        ("54640003", "4163302", 2, "text", None, "huge"),
        ("54640004", "4163401", 1, "text", None, "ftp"),
    ]
    for naid, page_object, page, transcription, extracted, image in plan:
        first = rng.choice(["John", "William", "Samuel", "Ebenezer"])
        last = rng.choice(["Smith", "Hale", "Putnam", "Ward"])
        soldier = f"{first} {last}"
        body = f"Pension application of {soldier}. " + " ".join(paragraphs(rng, 2, (15, 30)))
        ext = "png" if image == "huge" else "jpg"
        path = f"{naid[-4:]}/images/{page_object}/{page:05d}.{ext}"
        url = f"{base}/{path}"
        if image == "ftp":
            url = f"ftp://ftp.archives.gov/M804/{path}"
        if image == "scan":
            _mirror_write(mirror, url, scan_image(rng, body, size=(600, 800)))
        elif image == "huge":
            _mirror_write(mirror, url, huge_png())
        ingest = dt.datetime(2023, 3, 1 + len(rows), 9, 30)
        rows.append({
            "NAID": naid,
            "naraURL": f"https://catalog.archives.gov/id/{naid}",
            "title": f"Pension File {soldier}, S.{naid[-5:]}",
            "logicalDate": "1832",
            "variantControlNumbers": json.dumps([{"number": f"S.{naid[-5:]}", "type": "Pension File Number"}]),
            "levelOfDescription": "fileUnit",
            "pdfObjectId": str(int(page_object) // 100 * 100),
            "pdfURL": f"{base}/{naid[-4:]}/pdf/{naid}.pdf",
            "pageObjectId": page_object,
            "pageNumber": page,
            "pageLink": f"https://catalog.archives.gov/id/{naid}?objectPanel=transcription&objectPage={page}",
            "pageImageURL": url,
            "pageImageType": "image/png" if ext == "png" else "image/jpeg",
            "extractedNames": soldier,
            "extractedTextID": f"et-{page_object}" if extracted else None,
            "extractedText": body if extracted else None,
            "extractedTextDate": "2022-11-05" if extracted else None,
            "extractedTextContributor": "NARA OCR" if extracted else None,
            "transcriptionIngestDate": ingest if transcription is not None else None,
            "transcriptionID": f"tr-{page_object}" if transcription is not None else None,
            "transcriptionText": body if transcription == "text" else transcription,
        })
    _write_parquet(root / NARA_FILE, rows, NARA_SCHEMA)


def build_loc(root: Path, rng: random.Random) -> None:
    mirror = root / "loc" / "mirror"
    host = "https://chroniclingamerica.loc.gov"
    titles = {"sn83021183": ("Gazette of the United States", "New York, N.Y."),
              "sn84026472": ("Pennsylvania Packet", "Philadelphia, Pa.")}
    # (lccn, issue date, edition, page, ocr: "text" | "", payload: "ok" | "missing" | "corrupt")
    plan = [
        ("sn83021183", dt.date(1789, 4, 15), 1, 1, "text", "ok"),
        ("sn83021183", dt.date(1789, 4, 15), 1, 2, "text", "ok"),
        ("sn84026472", dt.date(1790, 6, 2), 1, 1, "text", "ok"),
        ("sn84026472", dt.date(1790, 6, 2), 2, 1, "text", "ok"),
        ("sn84026472", dt.date(1790, 6, 9), 1, 1, "", "ok"),
        ("sn84026472", dt.date(1790, 6, 9), 1, 2, "text", "missing"),
        ("sn83021183", dt.date(1789, 4, 22), 1, 1, "text", "corrupt"),
    ]
    rows: list[dict] = []
    for lccn, date, edition, page, ocr, payload in plan:
        seq = f"{host}/lccn/{lccn}/{date:%Y-%m-%d}/ed-{edition}/seq-{page}"
        paras = paragraphs(rng, 3, (20, 40))
        text = "\n".join(paras) if ocr else ""
        if payload != "missing":
            pdf = text_pdf([paras], title=f"{lccn} {date}")
            if payload == "corrupt":
                pdf = b"%PDF-1.4\n" + bytes(rng.randrange(256) for _ in range(512))
            _mirror_write(mirror, f"{seq}.pdf", pdf)
            _mirror_write(mirror, f"{seq}/thumbnail.jpg", scan_image(rng, " ".join(paras), size=(300, 400)))
        title, place = titles[lccn]
        rows.append({
            "Web_URL": f"{seq}/",
            "newspaper_title": title,
            "place_of_publication": place,
            "lccn": lccn,
            "issue_date": dt.datetime(date.year, date.month, date.day),
            "edition_order": edition,
            "Page": page,
            "thumbnail_url": f"{seq}/thumbnail.jpg",
            "jpeg2000_url": f"{seq}.jp2",
            "pdf_url": f"{seq}.pdf",
            "ocr_url": f"{seq}/ocr.txt",
            "ocr_text": text,
            "source_record_creation_date": dt.datetime(2024, 1, 10, 8, 0, 0),
        })
    _write_parquet(root / LOC_FILE, rows, LOC_SCHEMA)


def build_europeana(root: Path, rng: random.Random) -> None:
    # (language, text?, image?)
    plan = [("fr", True, True), ("fr", True, True), ("de", True, True),
            ("multi_language", True, True), ("fr", False, True), ("fr", True, False)]
    rows: list[dict] = []
    for i, (language, has_text, has_image) in enumerate(plan, start=1):
        record_id = f"9200300/BibliographicResource_3000113{i:05d}"
        paras = paragraphs(rng, 2, (20, 35))
        text = "\n".join(paras) if has_text else ""
        image = scan_image(rng, " ".join(paras), size=(500, 700)) if has_image else None
        rows.append({
            "id": record_id,
            "title": f"Le Journal des débats - 1850-03-{i:02d}",
            "date": f"1850-03-{i:02d}",
            "language": language,
            "text": text,
            "mean_ocr": round(rng.uniform(0.6, 0.95), 4),
            "std_ocr": round(rng.uniform(0.05, 0.2), 4),
            "iiif_url": f"https://iiif.europeana.eu/image/{record_id.replace('/', '_')}/full/full/0/default.jpg",
            "image": {"bytes": image, "path": f"page_{i}.jpg"},
        })
    _write_parquet(root / EUROPEANA_FILE, rows, EUROPEANA_SCHEMA)


NCSE_FILE = "ncse/ncse_pages.parquet"
# NCSE's published column names are unconfirmed: this layout is a guess, and the mapping below is
# what a config must state for the real one.
NCSE_OPTIONS = {
    "columns": {"id": "page_id", "text": "ocr_text", "image_url": "image_url", "page": "page_number",
                "title": "periodical", "date": "issue_date"},
    "metadata_columns": ["issue_id"],
}
NCSE_SCHEMA = pa.schema([("page_id", pa.string()), ("issue_id", pa.string()), ("periodical", pa.string()),
                         ("issue_date", pa.string()), ("page_number", pa.int64()), ("ocr_text", pa.string()),
                         ("image_url", pa.string())])


def build_ncse(root: Path, rng: random.Random) -> None:
    """NCSE-style pages (19th-century serials) whose images resolve through a local mirror."""
    rows = []
    for i in range(1, 5):
        paras = paragraphs(rng, 2, (20, 35))
        url = f"https://ncse.example.ac.uk/images/english-womans-journal/1858-{i:02d}/page-{i}.jpg"
        rows.append({"page_id": f"EWJ-1858-{i:02d}-p{i}", "issue_id": f"EWJ-1858-{i:02d}",
                     "periodical": "English Woman's Journal", "issue_date": f"1858-{i:02d}-01",
                     "page_number": i, "ocr_text": "\n".join(paras), "image_url": url})
        if i != 4:  # page 4's image is missing from the mirror on purpose: image_unavailable
            _mirror_write(root / "ncse" / "mirror", url, scan_image(rng, " ".join(paras), size=(500, 700)))
    _write_parquet(root / NCSE_FILE, rows, NCSE_SCHEMA)


def build(root: Path) -> None:
    """Write all three historical samples under ``root`` (see the module docstring)."""
    root = Path(root)
    build_nara(root, random.Random(SEED))
    build_loc(root, random.Random(SEED + 1))
    build_europeana(root, random.Random(SEED + 2))
    build_ncse(root, random.Random(SEED + 3))


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else "samples/data"))
