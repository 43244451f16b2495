"""FinePDFs reader: page splitting, the built sample, and every bad-input path (all local, tmp_path)."""

from __future__ import annotations

import collections
import http.server
import json
import pathlib
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pypdfium2 as pdfium
import pytest

from pipelines.sources import build_source
from pipelines.sources.base import Row, SourceSettings
from pipelines.sources.finepdfs import FinePdfsSource, split_pages
from samples.make import finepdfs as sample
from samples.make.pdfs import text_pdf
from schemas.deadletter import Dropped, RecordError
from schemas.page import params_hash
from tests.helpers import loopback_server

ENG = "finepdfs/data/eng_Latn/train/000_00000.parquet"
FRA = "finepdfs/data/fra_Latn/train/000_00000.parquet"


def _settings(warc_root: pathlib.Path | str, **options) -> SourceSettings:
    return SourceSettings(
        name="finepdfs", kind="finepdfs", paths=(), instruction="Transcribe the page.",
        domain="web_pdf", license="odc-by", language="und",
        options={"warc_root": str(warc_root), **options},
    )


def _read(root: pathlib.Path, relpath: str, **options) -> list[Row]:
    source = FinePdfsSource(_settings(root / "finepdfs" / "warc", **options))
    return list(source.read(str(root / relpath)))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("sample")
    sample.build(root)
    return root


def _reason(row: Row) -> tuple[str, str] | None:
    return None if row.error is None else (type(row.error).__name__, row.error.reason)


def _words(s: str) -> list[str]:
    return s.split()


# --- split_pages -------------------------------------------------------------------------------


def test_split_pages_docling_has_no_separators() -> None:
    text = "# Title\n\nFirst page.Second page.\n\nThird"
    assert split_pages(text, [20, 34, 39], "docling") == ["# Title\n\nFirst page.", "Second page.\n\n", "Third"]


def test_split_pages_rolmocr_skips_newline_separators() -> None:
    pages = ["Alpha one", "", "Gamma\nthree", "<--- failed_to_process_page --->"]
    text = "\n".join(pages)
    ends = [9, 9, 20, 52]  # cumulative lengths without the separators
    assert split_pages(text, ends, "rolmOCR") == pages
    # Read as docling, the same offsets would cut mid-word: the extractor matters.
    assert split_pages(text, ends, "docling")[2] == "\n\nGamma\nthr"


@pytest.mark.parametrize(
    "text, ends, extractor, reason",
    [
        ("abcdef", [4, 2], "docling", "bad_page_ends"),  # decreasing
        ("abcdef", [3, 7], "docling", "bad_page_ends"),  # past the end
        ("abc\ndef", [3, 7], "rolmOCR", "bad_page_ends"),  # 3 + 1 separator + 4 > 7 chars
        ("abcXdef", [3, 6], "rolmOCR", "bad_page_ends"),  # separator is not a newline
        ("abcdef", [], "docling", "bad_page_ends"),
        ("abcdef", None, "docling", "bad_page_ends"),
        ("abcdef", [6], "marker", "unknown_extractor"),
    ],
)
def test_split_pages_rejects_bad_offsets(text, ends, extractor, reason) -> None:
    with pytest.raises(RecordError) as err:
        split_pages(text, ends, extractor)
    assert err.value.reason == reason


# --- the built sample ----------------------------------------------------------------------------


def test_build_is_deterministic_and_small(tmp_path: pathlib.Path, built: pathlib.Path) -> None:
    sample.build(tmp_path)
    files = sorted(p.relative_to(built) for p in built.rglob("*") if p.is_file())
    assert [str(p) for p in files] == [
        ENG, FRA, f"finepdfs/warc/{sample.WARC_FILE_PATH}",
    ]
    for rel in files:
        assert (built / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel
    assert sum((built / rel).stat().st_size for rel in files) < 1_000_000
    table = pq.read_table(built / ENG)
    assert table.schema.names == list(sample.SCHEMA.names)
    assert set(table.column("extractor").to_pylist()) == {"docling", "rolmOCR"}


def test_registry_builds_the_reader(built: pathlib.Path) -> None:
    source = build_source(_settings(built / "finepdfs" / "warc"))
    assert isinstance(source, FinePdfsSource)
    assert list(source.plan(str(built / ENG))) == [str(built / ENG)]


def test_missing_warc_root_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="warc_root"):
        FinePdfsSource(SourceSettings(name="f", kind="finepdfs", paths=(), instruction="i",
                                      domain="d", license="l"))


def test_read_sample_rows_pages_and_texts(built: pathlib.Path) -> None:
    eng = _read(built, ENG)
    fra = _read(built, FRA)
    assert (len(eng), sum(len(r.pages) for r in eng)) == (14, 27)
    assert (len(fra), sum(len(r.pages) for r in fra)) == (3, 7)
    assert collections.Counter(_reason(r) for r in eng) == {
        None: 10,
        ("Dropped", "no_usable_pages"): 1,
        ("Dropped", "truncated_pdf"): 1,
        ("RecordError", "warc_not_pdf"): 1,
        ("RecordError", "page_count_mismatch"): 1,
    }
    assert all(r.error is None for r in fra)

    table = pq.read_table(built / ENG).to_pylist()
    assert [r.source_id for r in eng] == [t["id"] for t in table]

    first = eng[0]
    assert [p.page_number for p in first.pages] == [1, 2]
    assert first.pages[0].response.startswith("Method state ocr model which are report with court")
    # docling: the pages concatenate back to the text exactly.
    assert "".join(p.response for p in first.pages) == table[0]["text"]
    second = eng[1]
    assert second.pages[0].metadata["extractor"] == "rolmOCR"
    assert "\n".join(p.response for p in second.pages) == table[1]["text"]

    page = first.pages[0]
    assert (page.source, page.payload_kind, page.pdf_page_index, page.language) == (
        "finepdfs", "pdf", 0, "en")
    assert (page.domain, page.license, page.instruction, page.task, page.split, page.response_format) == (
        "web_pdf", "odc-by", "Transcribe the page.", "parse_page", "train", "markdown")
    assert page.metadata == {
        "url": "https://www.example.com/docs/000.pdf", "dump": "CC-MAIN-2024-10",
        "date": sample.WARC_DATE, "file_path": sample.WARC_FILE_PATH, "offset": table[0]["offset"],
        "extractor": "docling", "page_language": "en",
    }
    assert page.quality["token_count"] == table[0]["token_count"]
    assert page.quality["full_doc_lid_score"] == table[0]["full_doc_lid_score"]
    assert page.quality["is_truncated"] is False and page.quality["finepdfs_failed_pages"] == 0
    assert json.loads(json.dumps([page.quality, page.metadata])) == [page.quality, page.metadata]
    from pipelines.sources.finepdfs import VERSION

    assert [(s.stage, s.version) for s in page.provenance] == [("read:finepdfs", VERSION)]
    assert page.provenance[0].params_hash == params_hash({"warc_root": str(built / "finepdfs" / "warc")})
    assert fra[0].pages[0].language == "fr"

    # Every emitted page's label is what that page of the PDF actually shows.
    for row in eng + fra:
        for p in row.pages:
            assert p.payload.startswith(b"%PDF-")
            pdf = pdfium.PdfDocument(p.payload)
            try:
                shown = pdf[p.pdf_page_index].get_textpage().get_text_bounded()
            finally:
                pdf.close()
            assert _words(shown) == _words(p.response), (row.source_id, p.page_number)


def test_failed_rolmocr_page_is_skipped_and_counted(built: pathlib.Path) -> None:
    row = _read(built, ENG)[8]
    assert row.error is None
    assert [p.page_number for p in row.pages] == [1, 3]
    assert [p.pdf_page_index for p in row.pages] == [0, 2]
    assert all(p.quality["finepdfs_failed_pages"] == 1 for p in row.pages)
    assert all("<---" not in p.response for p in row.pages)


def test_truncated_flag_with_complete_pdf_is_kept(built: pathlib.Path) -> None:
    row = _read(built, ENG)[10]
    assert row.error is None and len(row.pages) == 2
    assert row.pages[0].quality["is_truncated"] is True


def test_truncated_pdf_is_dropped_not_dead_lettered(built: pathlib.Path) -> None:
    row = _read(built, ENG)[11]
    assert isinstance(row.error, Dropped) and row.error.reason == "truncated_pdf"
    assert row.pages == []


def test_offset_at_html_record_is_warc_not_pdf(built: pathlib.Path) -> None:
    row = _read(built, ENG)[12]
    offset = pq.read_table(built / ENG).column("offset")[12].as_py()
    assert isinstance(row.error, RecordError) and row.error.reason == "warc_not_pdf"
    assert sample.WARC_FILE_PATH in str(row.error) and f"offset {offset}" in str(row.error)
    assert "text/html" in str(row.error)


def test_page_count_mismatch(built: pathlib.Path) -> None:
    row = _read(built, ENG)[13]
    assert isinstance(row.error, RecordError) and row.error.reason == "page_count_mismatch"
    assert "3 pages" in str(row.error) and "has 2" in str(row.error)


def test_all_failed_pages_is_dropped(built: pathlib.Path) -> None:
    row = _read(built, ENG)[9]
    assert isinstance(row.error, Dropped) and row.error.reason == "no_usable_pages"


def test_small_batches_give_the_same_rows(built: pathlib.Path) -> None:
    a = [(r.source_id, _reason(r), [p.response for p in r.pages]) for r in _read(built, ENG)]
    b = [(r.source_id, _reason(r), [p.response for p in r.pages]) for r in _read(built, ENG, batch_size=3)]
    assert a == b


# --- unreadable files ----------------------------------------------------------------------------


def test_truncated_parquet_is_one_unreadable_row(built: pathlib.Path, tmp_path: pathlib.Path) -> None:
    data = (built / ENG).read_bytes()
    cut = tmp_path / "000_00000.parquet"
    cut.write_bytes(data[: len(data) // 2])
    source = FinePdfsSource(_settings(built / "finepdfs" / "warc"))
    rows = list(source.read(str(cut)))
    assert len(rows) == 1
    assert rows[0].source_id == str(cut)
    assert isinstance(rows[0].error, RecordError) and rows[0].error.reason == "unreadable_parquet"
    assert str(cut) in str(rows[0].error)


def test_failure_mid_stream_stops_with_one_unreadable_row(built: pathlib.Path, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broken.parquet"
    path.write_bytes((built / ENG).read_bytes())
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 2 and meta.row_group(0).num_rows == 8
    start = meta.row_group(1).column(0).data_page_offset  # the footer stays intact
    data = bytearray(path.read_bytes())
    data[start:start + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    source = FinePdfsSource(_settings(built / "finepdfs" / "warc", batch_size=4))
    rows = list(source.read(str(path)))
    assert len(rows) == 9
    assert all(r.error is None for r in rows[:8])
    assert rows[8].source_id == str(path) and rows[8].error.reason == "unreadable_parquet"
    assert "after 8 rows" in str(rows[8].error)


def test_missing_file_is_unreadable(tmp_path: pathlib.Path) -> None:
    source = FinePdfsSource(_settings(tmp_path))
    rows = list(source.read(str(tmp_path / "nope.parquet")))
    assert [(r.source_id, _reason(r)) for r in rows] == [
        (str(tmp_path / "nope.parquet"), ("RecordError", "unreadable_parquet"))]


def test_missing_and_mistyped_columns_are_bad_schema(built: pathlib.Path, tmp_path: pathlib.Path) -> None:
    table = pq.read_table(built / ENG)
    table = table.drop_columns(["page_ends", "dump"])
    table = table.set_column(table.schema.get_field_index("offset"), "offset",
                             pa.array([str(v) for v in table.column("offset").to_pylist()]))
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    rows = list(FinePdfsSource(_settings(built / "finepdfs" / "warc")).read(str(path)))
    assert len(rows) == 1 and rows[0].error.reason == "bad_schema"
    message = str(rows[0].error)
    assert "missing columns: dump, page_ends" in message and "offset is string" in message


# --- bad rows crafted against their own WARC --------------------------------------------------------


def _craft(tmp_path: pathlib.Path, payloads: list[tuple[bytes, list[str], dict]], **options) -> list[Row]:
    """One WARC record and one parquet row per (pdf bytes, page labels, row overrides), read with the
    reader's ``options`` (besides ``warc_root``)."""
    warc_root = tmp_path / "warc"
    warc_file = warc_root / sample.WARC_FILE_PATH
    warc_file.parent.mkdir(parents=True)
    rows = []
    with open(warc_file, "wb") as fh:
        warc = sample.WarcBuilder(fh, seed=7)
        warc.warcinfo(warc_file.name)
        for n, (pdf, labels, overrides) in enumerate(payloads):
            offset, record_id = warc.response(f"https://www.example.com/{n}.pdf", pdf)
            row = sample.finepdfs_row(doc_id=record_id, pages=labels, extractor="docling",
                                      url=f"https://www.example.com/{n}.pdf", offset=offset)
            row.update(overrides)
            rows.append(row)
    parquet = tmp_path / "data" / "eng_Latn" / "train" / "000_00000.parquet"
    sample.write_parquet(parquet, rows)
    return list(FinePdfsSource(_settings(warc_root, **options)).read(str(parquet)))


def test_corrupt_and_encrypted_pdfs(tmp_path: pathlib.Path) -> None:
    good = text_pdf([["Page one."], ["Page two."]])
    corrupt = b"%PDF-1.4\n" + bytes(range(256)) * 8
    encrypted = text_pdf([["Secret page."]], password="x")
    rows = _craft(tmp_path, [
        (corrupt, ["x"], {}),
        (encrypted, ["Secret page."], {}),
        (good, ["Page one.", "Page two."], {}),
        # A truncated-flagged row whose payload is garbage is a drop, not a dead letter.
        (corrupt, ["x"], {"is_truncated": True}),
        # Encryption is not truncation, even on an is_truncated row.
        (encrypted, ["Secret page."], {"is_truncated": True}),
    ])
    assert [_reason(r) for r in rows] == [
        ("RecordError", "corrupt_pdf"),
        ("RecordError", "encrypted_pdf"),
        None,
        ("Dropped", "truncated_pdf"),
        ("RecordError", "encrypted_pdf"),
    ]
    assert [p.response for p in rows[2].pages] == ["Page one.", "Page two."]


def test_bad_text_and_page_ends_rows(tmp_path: pathlib.Path) -> None:
    pdf = text_pdf([["One."], ["Two."]])
    rows = _craft(tmp_path, [
        (pdf, ["One.", "Two."], {"text": None}),
        (pdf, ["One.", "Two."], {"text": ""}),
        (pdf, ["One.", "Two."], {"page_ends": [4, 99]}),
        (pdf, ["One.", "Two."], {"page_ends": [6, 4]}),
        (pdf, ["One.", "Two."], {"extractor": "pymupdf"}),
        (pdf, ["One.", "Two."], {"offset": None}),
        (pdf, ["One.", "Two."], {"offset": 5}),  # inside the warcinfo gzip member
        (pdf, ["One.", "Two."], {"file_path": "crawl-data/missing.warc.gz"}),
        (pdf, ["One.", "Two."], {"file_path": "crawl-data/missing.warc.gz"}),
        (pdf, ["One.", "Two."], {}),
    ])
    assert [_reason(r) for r in rows] == [
        ("RecordError", "missing_text"),
        ("RecordError", "missing_text"),
        ("RecordError", "bad_page_ends"),
        ("RecordError", "bad_page_ends"),
        ("RecordError", "unknown_extractor"),
        ("RecordError", "missing_warc_pointer"),
        ("RecordError", "warc_unreadable"),
        ("RecordError", "warc_unreadable"),
        ("RecordError", "warc_unreadable"),
        None,
    ]
    assert "missing.warc.gz" in str(rows[8].error)
    assert [p.response for p in rows[-1].pages] == ["One.", "Two."]


# --- http(s) WARC roots (a loopback server; nothing leaves the machine) ----------------------------


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    root: pathlib.Path
    honour_range = True

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        data = (self.root / self.path.lstrip("/")).read_bytes()
        start = int(self.headers["Range"].split("=")[1].rstrip("-"))
        status, body = (206, data[start:]) if self.honour_range else (200, data)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("honour_range", [True, False])
def test_http_root_uses_ranged_gets(built: pathlib.Path, honour_range: bool) -> None:
    handler = type("Handler", (_RangeHandler,), {"root": built / "finepdfs" / "warc",
                                                  "honour_range": honour_range})
    server = loopback_server(handler)
    try:
        root = f"http://127.0.0.1:{server.server_address[1]}"
        rows = list(FinePdfsSource(_settings(root, http_retries=0)).read(str(built / FRA)))
    finally:
        server.shutdown()
        server.server_close()
    if honour_range:
        assert [len(r.pages) for r in rows] == [2, 3, 2]
        assert rows[0].pages[0].payload.startswith(b"%PDF-")
    else:  # a server that ignores Range would hand back the wrong record
        assert [_reason(r) for r in rows] == [("RecordError", "warc_unreadable")] * 3
        assert "HTTP 200" in str(rows[0].error)


def test_a_rows_file_path_cannot_leave_warc_root(built: pathlib.Path, tmp_path: pathlib.Path) -> None:
    from pipelines.sources.finepdfs import WarcFetcher

    hits: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = loopback_server(Recorder)
    root = tmp_path / "warc"
    root.mkdir()
    outside = built / "finepdfs" / "warc"  # real WARCs, but not under this root
    warc = next(p for p in outside.rglob("*.warc.gz"))
    (root / "link.warc.gz").symlink_to(warc)
    fetcher = WarcFetcher(str(root), http_timeout_s=5, http_retries=0)
    try:
        for file_path in (str(warc), "../x.warc.gz", "crawl-data/../../x.warc.gz", "a//b.warc.gz", "link.warc.gz",
                          "x\0.warc.gz",
                          f"http://127.0.0.1:{server.server_address[1]}/exfil"):
            with pytest.raises(RecordError) as err:
                fetcher.fetch(file_path, 0)
            assert err.value.reason == "unsafe_path" and repr(file_path) in str(err.value), file_path
    finally:
        server.shutdown()
        server.server_close()
    assert hits == []  # no request left the reader
    # what Common Crawl rows hold: a relative path under the root, or a URI under a URI root
    assert fetcher.uri("crawl-data/CC-MAIN-2024-10/x.warc.gz") == str(root / "crawl-data/CC-MAIN-2024-10/x.warc.gz")
    remote = WarcFetcher("s3://commoncrawl")
    assert remote.uri("s3://commoncrawl/crawl-data/x.warc.gz") == "s3://commoncrawl/crawl-data/x.warc.gz"
    assert remote.uri("crawl-data/x.warc.gz") == "s3://commoncrawl/crawl-data/x.warc.gz"


def test_finepdfs_language_labels_become_iso_639_1_tags():
    from pipelines.sources.finepdfs import bcp47_language

    cases = {"eng_Latn": "en", "fra_Latn": "fr", "rus_Cyrl": "ru", "jpn_Jpan": "ja", "kor_Hang": "ko",
             "arb_Arab": "ar", "cmn_Hani": "zh-Hani", "zho_Hans": "zh-Hans", "zho_Hant": "zh-Hant",
             "srp_Latn": "sr-Latn", "srp_Cyrl": "sr", "hin_Latn": "hi-Latn", "ceb_Latn": "ceb", "yue_Hant": "yue",
             "ckb_Arab": "ckb", "und": "und", "en": "en"}
    assert {k: bcp47_language(k) for k in cases} == cases
    assert all(bcp47_language(k).split("-")[0] == "zh" for k in ("cmn_Hani", "zho_Hans", "zho_Hant"))


GZIP_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
EMPTY_BLOCK = b"\x00\x00\x00\xff\xff"  # an empty stored deflate block: zlib takes it and gives nothing


@pytest.mark.parametrize("head,drop", [(b"", b"W"), (GZIP_HEAD, EMPTY_BLOCK)], ids=["raw", "gzip"])
def test_a_server_dripping_a_record_is_cut_off_at_http_timeout_s(head: bytes, drop: bytes) -> None:
    """http_timeout_s bounded each socket read, so a server sending a byte every 0.1 s held the row as long
    as it dripped; it now bounds the record's whole body (the reads are checked against a deadline)."""
    from pipelines.sources.finepdfs import WarcFetcher

    class Drip(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            self.send_response(206)
            self.end_headers()
            try:
                self.wfile.write(head)
                for _ in range(12):
                    for byte in drop:
                        time.sleep(0.1 / len(drop))
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
            except OSError:
                return

        def log_message(self, *args) -> None:
            pass

    server = loopback_server(Drip)
    try:
        fetcher = WarcFetcher(f"http://127.0.0.1:{server.server_address[1]}", http_timeout_s=0.5, http_retries=0)
        with pytest.raises(RecordError) as info:
            fetcher.fetch("crawl-data/x.warc.gz", 0, row="r1")
    finally:
        server.shutdown()
        server.server_close()
    assert info.value.reason == "warc_unreadable" and "within http_timeout_s" in str(info.value)
