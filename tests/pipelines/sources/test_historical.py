"""Historical readers (NARA, LoC, mapped) on the built samples, and the HTTP image resolver.

HTTP cases run against a real ``ThreadingHTTPServer`` on 127.0.0.1; nothing leaves the machine.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import pickle
import random
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.render import RenderConfig, render_page
from pipelines.sources import build_source, historical
from pipelines.sources.base import Row, SourceSettings, input_bases, relative_to_inputs
from pipelines.sources.historical import LocSource, MappedHistoricalSource, NaraSource
from pipelines.sources.images import ImageResolver
from samples.make import historical as sample
from samples.make.pdfs import scan_image
from schemas.deadletter import Dropped, RecordError

JPEG = b"\xff\xd8\xff"
PNG = b"\x89PNG\r\n\x1a\n"


# -- helpers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("historical")
    sample.build(path)
    return path


def settings(kind: str, name: str = "src", language: str = "en", **options) -> SourceSettings:
    return SourceSettings(
        name=name, kind=kind, paths=(), instruction="Transcribe the page.", domain="historical",
        license="public-domain", language=language, options=options,
    )


def read_all(source, uri: str | Path) -> list[Row]:
    rows: list[Row] = []
    for unit in source.plan(str(uri)):
        rows.extend(source.read(unit))
    return rows


def by_id(rows: list[Row]) -> dict[str, Row]:
    out = {r.source_id: r for r in rows}
    assert len(out) == len(rows), "source ids must be unique"
    return out


def reason(row: Row) -> str | None:
    return None if row.error is None else row.error.reason


def nara(root: Path, **options) -> NaraSource:
    return NaraSource(settings("nara", name="nara", mirror=str(root / "nara" / "mirror"), **options))


def loc(root: Path, **options) -> LocSource:
    return LocSource(settings("loc", name="loc", mirror=str(root / "loc" / "mirror"), **options))


def europeana(**extra) -> MappedHistoricalSource:
    return MappedHistoricalSource(settings("historical", name="europeana", language="fr",
                                           **{**sample.EUROPEANA_OPTIONS, **extra}))


# -- NARA ----------------------------------------------------------------------------------------


def test_nara_rows_pages_and_reasons(root):
    rows = by_id(read_all(nara(root), root / sample.NARA_FILE))
    assert list(rows) == [
        "54640001-4163101", "54640001-4163102", "54640001-4163103", "54640002-4163201",
        "54640002-4163202", "54640003-4163301", "54640003-4163302", "54640004-4163401",
    ]
    assert {k: reason(r) for k, r in rows.items()} == {
        "54640001-4163101": None, "54640001-4163102": None, "54640001-4163103": None,
        "54640002-4163201": "empty_transcription", "54640002-4163202": "empty_transcription",
        "54640003-4163301": "image_unavailable", "54640003-4163302": None,
        "54640004-4163401": "bad_image_url",
    }
    assert isinstance(rows["54640002-4163201"].error, Dropped)
    assert isinstance(rows["54640003-4163301"].error, RecordError)
    assert "https://s3.amazonaws.com/" in str(rows["54640003-4163301"].error)
    assert "ftp" in str(rows["54640004-4163401"].error)

    table = pq.read_table(root / sample.NARA_FILE).to_pylist()
    source = {f"{r['NAID']}-{r['pageObjectId']}": r for r in table}
    for sid in ("54640001-4163101", "54640001-4163102", "54640001-4163103"):
        (page,) = rows[sid].pages
        assert page.source == "nara" and page.source_id == sid
        assert page.payload_kind == "image" and page.payload.startswith(JPEG)
        assert page.page_number == source[sid]["pageNumber"]
        assert page.response == source[sid]["transcriptionText"].strip()
        assert page.response.startswith("Pension application of ")
        assert page.response_format == "text"
        assert (page.domain, page.language, page.license, page.task, page.split) == (
            "historical", "en", "public-domain", "parse_page", "train")
        assert page.quality == {"text_origin": "human_transcription"}
        assert page.metadata["naraURL"] == f"https://catalog.archives.gov/id/{sid.split('-')[0]}"
        assert page.metadata["pageImageURL"] == source[sid]["pageImageURL"]
        assert page.metadata["transcriptionIngestDate"].startswith("2023-03-")
        assert page.provenance[0].stage == "read:nara" and page.provenance[0].version == historical.VERSION
    assert [rows[s].pages[0].page_number for s in ("54640001-4163101", "54640001-4163102")] == [1, 2]
    huge = rows["54640003-4163302"].pages[0]
    assert huge.payload.startswith(PNG) and len(huge.payload) < 200_000


def test_nara_extracted_text_fallback(root):
    default = by_id(read_all(nara(root), root / sample.NARA_FILE))
    rows = by_id(read_all(nara(root, use_extracted_text=True), root / sample.NARA_FILE))
    (page,) = rows["54640002-4163201"].pages
    assert page.quality == {"text_origin": "machine_ocr"}
    assert page.response.startswith("Pension application of ")
    assert reason(rows["54640002-4163202"]) == "empty_transcription"  # no text of either kind
    assert page.provenance[0].params_hash != default["54640001-4163101"].pages[0].provenance[0].params_hash


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_nara_pages_render_and_pixel_cap(root):
    rows = by_id(read_all(nara(root), root / sample.NARA_FILE))
    record = render_page(rows["54640001-4163101"].pages[0], RenderConfig(longest_side=400))
    assert (record.width, record.height) == (300, 400)
    assert record.response == rows["54640001-4163101"].pages[0].response
    with pytest.raises(RecordError) as exc:
        render_page(rows["54640003-4163302"].pages[0], RenderConfig())
    assert exc.value.reason == "image_too_large"


def test_streams_in_small_batches(root):
    whole = read_all(nara(root), root / sample.NARA_FILE)
    batched = read_all(nara(root, batch_size=3), root / sample.NARA_FILE)
    assert [(r.source_id, reason(r), [p.response for p in r.pages]) for r in batched] == [
        (r.source_id, reason(r), [p.response for p in r.pages]) for r in whole
    ]
    gen = nara(root).read(str(root / sample.NARA_FILE))
    assert next(gen).source_id == "54640001-4163101"  # lazy: one row without draining the file
    gen.close()


def test_nara_bad_schema(root, tmp_path):
    table = pq.read_table(root / sample.NARA_FILE).drop_columns(["transcriptionText", "pageImageURL"])
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    (row,) = read_all(nara(root), path)
    assert row.source_id == str(path) and reason(row) == "bad_schema"
    assert "transcriptionText" in str(row.error) and "pageImageURL" in str(row.error)
    # extractedText becomes required only with the fallback on.
    table = pq.read_table(root / sample.NARA_FILE).drop_columns(["extractedText"])
    pq.write_table(table, path)
    assert reason(read_all(nara(root), path)[0]) is None
    (row,) = read_all(nara(root, use_extracted_text=True), path)
    assert reason(row) == "bad_schema" and "extractedText" in str(row.error)


def test_nara_missing_id_uses_file_position(root, tmp_path):
    table = pq.read_table(root / sample.NARA_FILE).slice(0, 2)
    naids = table.column("NAID").to_pylist()
    naids[1] = None
    table = table.set_column(table.schema.get_field_index("NAID"), "NAID", pa.array(naids, pa.string()))
    path = tmp_path / "noid.parquet"
    pq.write_table(table, path)
    rows = read_all(nara(root), path)
    assert reason(rows[0]) is None
    assert rows[1].source_id == f"{path}#1" and reason(rows[1]) == "missing_id"


def test_files_of_one_name_under_two_path_patterns_keep_apart_ids(tmp_path):
    """Ids of rows without one are ``<file>#<row>`` with the file relative to the source's paths: with
    ``a/*.parquet`` and ``b/*.parquet`` each file was relative to its own folder, and the ids collided."""
    table = pa.table({"text": ["x^2"], "image": [scan_image(random.Random(0), "x", size=(64, 32), fmt="PNG")]})
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        pq.write_table(table, tmp_path / folder / "train.parquet")
    source = MappedHistoricalSource(SourceSettings(
        name="formulas", kind="historical", paths=(f"{tmp_path}/a/*.parquet", f"{tmp_path}/b/*.parquet"),
        instruction="Transcribe the formula.", domain="formula", license="apache-2.0", language="en",
        options={"columns": {"text": "text", "image_bytes": "image"}, "response_format": "latex"}))
    ids = [row.source_id for folder in ("a", "b") for row in read_all(source, tmp_path / folder / "train.parquet")]
    assert ids == ["a/train.parquet#0", "b/train.parquet#0"]
    bases = input_bases(["/srv/a/*.parquet", "/data/b/*.parquet"])  # apart from the top: the whole path
    assert [relative_to_inputs(p, bases) for p in ("/srv/a/t.parquet", "/data/b/t.parquet")] == [
        "srv/a/t.parquet", "data/b/t.parquet"]
    bases = input_bases(["s3://bk/a/*.parquet", "s3://bk/b/*.parquet"])
    assert relative_to_inputs("s3://bk/a/t.parquet", bases) == "a/t.parquet"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing"])
def test_unreadable_parquet(root, tmp_path, damage):
    path = tmp_path / "broken.parquet"
    data = (root / sample.NARA_FILE).read_bytes()
    if damage == "garbage":
        path.write_bytes(b"this is not parquet at all" * 10)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    (row,) = read_all(nara(root), path)
    assert row.source_id == str(path) and reason(row) == "unreadable_parquet" and not row.pages


def test_corrupt_row_group_mid_file(root, tmp_path):
    table = pq.read_table(root / sample.NARA_FILE)
    path = tmp_path / "midfile.parquet"
    pq.write_table(table, path, row_group_size=2, compression="none")
    offset = pq.ParquetFile(path).metadata.row_group(2).column(0).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + 24] = b"\xff" * 24
    path.write_bytes(bytes(data))
    rows = read_all(nara(root, batch_size=2), path)
    assert [r.source_id for r in rows[:4]] == [
        "54640001-4163101", "54640001-4163102", "54640001-4163103", "54640002-4163201"]
    assert rows[-1].source_id == str(path) and reason(rows[-1]) == "unreadable_parquet"
    assert "after 4 rows" in str(rows[-1].error)


# -- LoC -----------------------------------------------------------------------------------------


LOC_IDS = [
    "sn83021183/1789-04-15/ed-1/seq-1", "sn83021183/1789-04-15/ed-1/seq-2",
    "sn84026472/1790-06-02/ed-1/seq-1", "sn84026472/1790-06-02/ed-2/seq-1",
    "sn84026472/1790-06-09/ed-1/seq-1", "sn84026472/1790-06-09/ed-1/seq-2",
    "sn83021183/1789-04-22/ed-1/seq-1",
]


def test_loc_pdf_pages(root):
    rows = by_id(read_all(loc(root), root / sample.LOC_FILE))
    assert list(rows) == LOC_IDS
    assert [reason(rows[i]) for i in LOC_IDS] == [
        None, None, None, None, "empty_transcription", "image_unavailable", None]
    table = {r["Web_URL"]: r for r in pq.read_table(root / sample.LOC_FILE).to_pylist()}
    page = rows["sn84026472/1790-06-02/ed-2/seq-1"].pages[0]
    src = table["https://chroniclingamerica.loc.gov/lccn/sn84026472/1790-06-02/ed-2/seq-1/"]
    assert page.payload_kind == "pdf" and page.payload.startswith(b"%PDF")
    assert page.pdf_page_index == 0 and page.page_number == 1
    assert page.response == src["ocr_text"].strip() and page.response_format == "text"
    assert page.quality == {"text_origin": "machine_ocr"}
    assert page.metadata["newspaper_title"] == "Pennsylvania Packet"
    assert page.metadata["issue_date"] == "1790-06-02T00:00:00"
    assert page.metadata["pdf_url"].endswith("/ed-2/seq-1.pdf")
    assert page.provenance[0].stage == "read:loc"
    assert rows["sn83021183/1789-04-15/ed-1/seq-2"].pages[0].page_number == 2

    # The page's PDF has a text layer matching the OCR; the corrupt one fails at render.
    record = render_page(page, RenderConfig(longest_side=300))
    assert record.text_layer and src["ocr_text"].split()[0] in record.text_layer
    with pytest.raises(RecordError) as exc:
        render_page(rows["sn83021183/1789-04-22/ed-1/seq-1"].pages[0], RenderConfig(longest_side=300))
    assert exc.value.reason == "corrupt_pdf"


def test_loc_thumbnail_column(root):
    rows = by_id(read_all(loc(root, image_column="thumbnail_url"), root / sample.LOC_FILE))
    assert [reason(rows[i]) for i in LOC_IDS] == [
        None, None, None, None, "empty_transcription", "image_unavailable", None]
    page = rows["sn83021183/1789-04-22/ed-1/seq-1"].pages[0]
    assert page.payload_kind == "image" and page.payload.startswith(JPEG)
    assert render_page(page, RenderConfig(longest_side=200)).height == 200


def test_loc_config_and_schema_errors(root, tmp_path):
    with pytest.raises(ValueError, match="image_column"):
        loc(root, image_column="ocr_url")
    path = tmp_path / "loc.parquet"
    pq.write_table(pq.read_table(root / sample.LOC_FILE).drop_columns(["lccn"]), path)
    (row,) = read_all(loc(root), path)
    assert reason(row) == "bad_schema" and "lccn" in str(row.error)
    # Only the configured image column is required.
    pq.write_table(pq.read_table(root / sample.LOC_FILE).drop_columns(["pdf_url"]), path)
    assert reason(read_all(loc(root), path)[0]) == "bad_schema"
    assert reason(read_all(loc(root, image_column="thumbnail_url"), path)[0]) is None


# -- mapped (Europeana, NCSE) -------------------------------------------------------------------


def test_europeana_embedded_images(root):
    rows = read_all(europeana(), root / sample.EUROPEANA_FILE)
    assert [reason(r) for r in rows] == [None, None, None, None, "empty_transcription", "missing_image"]
    assert rows[0].source_id == "9200300/BibliographicResource_300011300001"
    table = pq.read_table(root / sample.EUROPEANA_FILE).to_pylist()
    page = rows[0].pages[0]
    assert page.payload == table[0]["image"]["bytes"] and page.payload_kind == "image"
    assert page.response == table[0]["text"] and page.page_number == 1
    assert page.language == "fr" and page.source == "europeana"
    assert page.quality == {"text_origin": "machine_ocr", "mean_ocr": table[0]["mean_ocr"],
                            "std_ocr": table[0]["std_ocr"]}
    assert page.metadata["title"].startswith("Le Journal des débats")
    assert page.metadata["date"] == "1850-03-01"
    assert page.metadata["iiif_url"].startswith("https://iiif.europeana.eu/")
    assert page.provenance[0].stage == "read:historical"
    assert rows[2].pages[0].language == "de"  # per-row language overrides the configured one
    assert rows[3].pages[0].language == "fr"  # "multi_language" is not a tag
    assert rows[3].pages[0].metadata["source_language"] == "multi_language"


def test_mapped_image_url_raw_bytes_and_page(tmp_path):
    mirror = tmp_path / "mirror"
    img = scan_image(__import__("random").Random(1), "hello", size=(100, 120))
    (mirror / "example.org" / "ncse").mkdir(parents=True)
    (mirror / "example.org" / "ncse" / "p1.jpg").write_bytes(img)
    path = tmp_path / "ncse.parquet"
    pq.write_table(pa.table({
        "doc": ["ncse-001", "ncse-001", "ncse-002"],
        "page_no": [1, 2, 1],
        "ocr": ["First page", "Second page", "  "],
        "url": ["https://example.org/ncse/p1.jpg", "https://example.org/ncse/p2.jpg", None],
        "raw": [img, img, None],
    }), path)
    by_url = MappedHistoricalSource(settings(
        "historical", mirror=str(mirror),
        columns={"id": "doc", "text": "ocr", "image_url": "url", "page": "page_no"}))
    rows = read_all(by_url, path)
    assert [r.source_id for r in rows] == ["ncse-001/p1", "ncse-001/p2", "ncse-002/p1"]
    assert [reason(r) for r in rows] == [None, "image_unavailable", "empty_transcription"]
    assert rows[0].pages[0].payload == img and rows[0].pages[0].metadata["image_url"].endswith("p1.jpg")
    raw = MappedHistoricalSource(settings("historical", columns={"id": "doc", "text": "ocr", "image_bytes": "raw"}))
    rows = read_all(raw, path)
    assert [reason(r) for r in rows] == [None, None, "empty_transcription"]
    assert rows[1].pages[0].response == "Second page" and rows[1].pages[0].payload == img
    assert rows[0].source_id == "ncse-001"  # without a page column the id is used as is


def test_mapped_bad_schema_names_key_and_column(root):
    source = europeana(columns={**sample.EUROPEANA_OPTIONS["columns"], "text": "ocr_text"},
                       quality_columns=["mean_ocr", "ocr_confidence"])
    (row,) = read_all(source, root / sample.EUROPEANA_FILE)
    assert reason(row) == "bad_schema"
    assert "columns.text -> 'ocr_text'" in str(row.error)
    assert "quality_columns -> 'ocr_confidence'" in str(row.error)


@pytest.mark.parametrize("columns, match", [
    ({"id": "i", "image_url": "u"}, "text"),
    ({"id": "i", "text": "t"}, "exactly one"),
    ({"id": "i", "text": "t", "image_url": "u", "image_bytes": "b"}, "exactly one"),
    ({"id": "i", "text": "t", "image_url": "u", "caption": "c"}, "unknown"),
])
def test_mapped_config_errors(columns, match):
    with pytest.raises(ValueError, match=match):
        MappedHistoricalSource(settings("historical", columns=columns))


def test_registry_and_pickling(root):
    for kind, cls in (("nara", NaraSource), ("loc", LocSource)):
        assert isinstance(build_source(settings(kind)), cls)
    source = build_source(settings("historical", **sample.EUROPEANA_OPTIONS))
    clone = pickle.loads(pickle.dumps(source))
    assert [r.source_id for r in read_all(clone, root / sample.EUROPEANA_FILE)][:1] == [
        "9200300/BibliographicResource_300011300001"]


# -- image resolver over real HTTP ---------------------------------------------------------------


LOOPBACK = ("127.0.0.1",)  # the test server's address: not public, so opted in


class _Server:
    """A 127.0.0.1 file server over ``docroot`` that counts requests per path."""

    def __init__(self, docroot: Path):
        self.docroot = docroot
        self.hits: dict[str, int] = {}
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(docroot), **kwargs)

            def do_GET(self):  # noqa: N802
                server.hits[self.path] = server.hits.get(self.path, 0) + 1
                if self.path == "/nolength":  # body without Content-Length (HTTP/1.0 close)
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"x" * 5000)
                    return
                if self.path.startswith("/redirect?to="):  # a 302 to wherever the query says
                    self.send_response(302)
                    self.send_header("Location", self.path.split("=", 1)[1])
                    self.end_headers()
                    return
                if self.path == "/flaky.jpg" and server.hits[self.path] == 1:
                    self.send_error(503, "try again")
                    return
                super().do_GET()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        self.closed = False

    def close(self):
        if not self.closed:
            self.closed = True
            self.httpd.shutdown()
            self.httpd.server_close()


@pytest.fixture
def server(tmp_path, monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    docroot = tmp_path / "www"
    docroot.mkdir()
    (docroot / "page.jpg").write_bytes(JPEG + b"page-bytes")
    (docroot / "flaky.jpg").write_bytes(JPEG + b"flaky")
    (docroot / "big.jpg").write_bytes(JPEG + b"b" * 5000)
    srv = _Server(docroot)
    yield srv
    srv.close()


def test_http_fetch_then_cache(server, tmp_path):
    cache = tmp_path / "cache"
    resolver = ImageResolver(cache_dir=str(cache), allow_http=True, timeout_s=5, allow_hosts=LOOPBACK)
    url = f"{server.url}/page.jpg"
    assert resolver.fetch(url) == JPEG + b"page-bytes"
    assert server.hits == {"/page.jpg": 1}
    key = hashlib.sha256(url.encode()).hexdigest()
    assert (cache / key[:2] / key).read_bytes() == JPEG + b"page-bytes"
    assert resolver.fetch(url) == JPEG + b"page-bytes"
    # Another worker (a fresh, unpickled resolver) shares the cache too.
    assert pickle.loads(pickle.dumps(resolver)).fetch(url) == JPEG + b"page-bytes"
    assert server.hits == {"/page.jpg": 1}
    assert [p.name for p in (cache / key[:2]).iterdir()] == [key]  # no temp files left behind


def test_http_failures(server, tmp_path):
    resolver = ImageResolver(cache_dir=str(tmp_path / "cache"), allow_http=True, timeout_s=5, max_bytes=1000,
                             allow_hosts=LOOPBACK)
    with pytest.raises(RecordError) as exc:
        resolver.fetch(f"{server.url}/missing.jpg")
    assert exc.value.reason == "image_unavailable" and "404" in str(exc.value)
    assert f"{server.url}/missing.jpg" in str(exc.value)
    assert server.hits["/missing.jpg"] == 1  # a 404 is not retried
    for path in ("/big.jpg", "/nolength"):
        with pytest.raises(RecordError) as exc:
            resolver.fetch(server.url + path)
        assert exc.value.reason == "image_unavailable" and "max_bytes=1000" in str(exc.value)
    assert not list((tmp_path / "cache").rglob("*"))  # failures are not cached


def test_http_retries_transient_errors(server):
    resolver = ImageResolver(allow_http=True, timeout_s=5, retries=1, allow_hosts=LOOPBACK)
    assert resolver.fetch(f"{server.url}/flaky.jpg") == JPEG + b"flaky"
    assert server.hits["/flaky.jpg"] == 2
    with pytest.raises(RecordError) as exc:  # nothing listens on this port any more
        port = server.url.rsplit(":", 1)[1]
        server.close()
        ImageResolver(allow_http=True, timeout_s=2, retries=0, allow_hosts=LOOPBACK).fetch(f"http://127.0.0.1:{port}/page.jpg")
    assert exc.value.reason == "image_unavailable"


def test_http_refuses_hosts_that_are_not_public(server, tmp_path):
    """A row's URL must not point the fetch at loopback, the LAN or link-local (cloud metadata) hosts, in any
    spelling, directly or through a redirect; allow_hosts opts a host or network in."""
    port = server.url.rsplit(":", 1)[1]
    resolver = ImageResolver(allow_http=True, timeout_s=5, retries=0, cache_dir=str(tmp_path / "cache"))
    for url in (f"{server.url}/page.jpg", f"http://2130706433:{port}/page.jpg", f"http://localhost:{port}/page.jpg",
                f"http://0x7f.1:{port}/page.jpg", f"http://[::1]:{port}/page.jpg", "http://169.254.169.254/latest",
                "http://10.1.2.3/a.jpg", "http://192.168.0.1/a.jpg"):
        with pytest.raises(RecordError) as exc:
            resolver.fetch(url)
        assert exc.value.reason == "bad_image_url" and "not a public address" in str(exc.value), url
    assert server.hits == {}
    opted_in = ImageResolver(allow_http=True, timeout_s=5, retries=0, allow_hosts=("127.0.0.0/8",))
    assert opted_in.fetch(f"http://localhost:{port}/page.jpg") == JPEG + b"page-bytes"
    for target in ("http://169.254.169.254/latest/meta-data", f"http://[::1]:{port}/page.jpg"):
        with pytest.raises(RecordError) as exc:  # every redirect hop is checked too
            opted_in.fetch(f"{server.url}/redirect?to={target}")
        assert exc.value.reason == "bad_image_url" and "not a public address" in str(exc.value), target
    assert ImageResolver.from_options({"allow_hosts": ["127.0.0.1"]}).allow_hosts == ("127.0.0.1",)


def test_http_connects_to_the_address_it_checked(server, tmp_path, monkeypatch):
    """DNS rebinding: a name that resolves to a public address when checked and to loopback a moment later must
    not reach loopback. The connection is made to the checked address (no connection really leaves: it is
    recorded and refused here, so the test reaches no network)."""
    import socket

    port = int(server.url.rsplit(":", 1)[1])
    answers = iter(["93.184.216.34"] + ["127.0.0.1"] * 10)
    real_getaddrinfo, dialled = socket.getaddrinfo, []

    def getaddrinfo(host, *args, **kwargs):
        if host == "rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]
        return real_getaddrinfo(host, *args, **kwargs)

    def create_connection(address, *args, **kwargs):
        dialled.append(address[0])
        raise ConnectionRefusedError("no network in tests")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    with pytest.raises(RecordError) as exc:
        ImageResolver(allow_http=True, timeout_s=5, retries=0).fetch(f"http://rebind.test:{port}/page.jpg")
    assert exc.value.reason == "image_unavailable" and dialled == ["93.184.216.34"] and server.hits == {}


def test_a_name_that_does_not_resolve_for_a_moment_is_retried(server, tmp_path, monkeypatch):
    import socket

    port = int(server.url.rsplit(":", 1)[1])
    real_getaddrinfo, failures = socket.getaddrinfo, [socket.gaierror(socket.EAI_AGAIN, "Temporary failure")]

    def getaddrinfo(host, *args, **kwargs):
        if host == "flaky.test":
            if failures:
                raise failures.pop()
            return real_getaddrinfo("127.0.0.1", *args, **kwargs)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    resolver = ImageResolver(allow_http=True, timeout_s=5, retries=2, allow_hosts=("127.0.0.1",))
    assert resolver.fetch(f"http://flaky.test:{port}/page.jpg") == JPEG + b"page-bytes" and not failures


def test_http_tries_each_checked_address_in_turn(server, tmp_path, monkeypatch):
    """A name whose first address refuses (127.0.0.2: nothing listens there) is fetched from its second, as a
    plain connection to the name would be."""
    import socket

    port = int(server.url.rsplit(":", 1)[1])
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host == "two.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in ("127.0.0.2", "127.0.0.1")]
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    resolver = ImageResolver(allow_http=True, timeout_s=5, retries=0, allow_hosts=("127.0.0.0/8",))
    assert resolver.fetch(f"http://two.test:{port}/page.jpg") == JPEG + b"page-bytes"


def test_only_a_proxy_for_the_urls_scheme_turns_the_pinning_off(monkeypatch):
    """urllib sends a URL to the proxy of its scheme; ALL_PROXY alone is no proxy for it (it connects itself),
    so the connection stays pinned."""
    from pipelines.sources import images

    checked = []
    monkeypatch.setenv("all_proxy", "socks5://127.0.0.1:9")
    monkeypatch.setattr(images, "check_public_host", lambda url, allow=(): checked.append(url))
    with pytest.raises(RecordError) as exc:  # pinned: the check at connect time refuses loopback
        ImageResolver(allow_http=True, retries=0).fetch("http://127.0.0.1:9/a.jpg")
    assert exc.value.reason == "bad_image_url" and checked == []
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # a proxy on loopback that refuses: nothing leaves
    monkeypatch.setenv("no_proxy", "")
    with pytest.raises(RecordError):  # proxied: the name is checked once, before the request
        ImageResolver(allow_http=True, retries=0, timeout_s=1).fetch("http://198.51.100.7/a.jpg")
    assert checked == ["http://198.51.100.7/a.jpg"]


def test_http_disabled_and_mirror_first(server, tmp_path):
    url = f"{server.url}/page.jpg"
    with pytest.raises(RecordError) as exc:
        ImageResolver(mirror=str(tmp_path / "mirror")).fetch(url)
    assert exc.value.reason == "image_unavailable" and "allow_http is false" in str(exc.value)
    mirrored = tmp_path / "mirror" / "127.0.0.1" / "page.jpg"
    mirrored.parent.mkdir(parents=True)
    mirrored.write_bytes(b"from-mirror")
    assert ImageResolver(mirror=str(tmp_path / "mirror"), allow_http=True).fetch(url) == b"from-mirror"
    assert server.hits == {}


@pytest.mark.parametrize("url", [
    "file:///etc/passwd", "ftp://example.org/a.jpg", "s3://bucket/a.jpg", "data:image/png;base64,AAAA",
    "example.org/a.jpg", "", "https:///nohost.jpg",
])
def test_non_http_urls_refused(server, tmp_path, url):
    resolver = ImageResolver(mirror=str(tmp_path), allow_http=True)
    with pytest.raises(RecordError) as exc:
        resolver.fetch(url)
    assert exc.value.reason == "bad_image_url"
    assert server.hits == {}


@pytest.mark.parametrize("path", [
    "/../secret.jpg", "/a/../../secret.jpg", "/%2e%2e/secret.jpg", "/a/%2E%2E/%2e%2e/secret.jpg",
    "/..%2fsecret.jpg", "/a/..%5c..%5csecret.jpg",
])
def test_mirror_escape_refused(server, tmp_path, path):
    (tmp_path / "secret.jpg").write_bytes(b"SECRET")
    mirror = tmp_path / "mirror"
    (mirror / "example.org" / "a").mkdir(parents=True)
    resolver = ImageResolver(mirror=str(mirror), allow_http=True)
    with pytest.raises(RecordError) as exc:
        resolver.fetch(f"http://example.org{path}")
    assert exc.value.reason == "bad_image_url"


def test_mirror_symlink_escape_refused(tmp_path):
    (tmp_path / "secret.jpg").write_bytes(b"SECRET")
    mirror = tmp_path / "mirror" / "example.org"
    mirror.mkdir(parents=True)
    os.symlink(tmp_path / "secret.jpg", mirror / "link.jpg")
    with pytest.raises(RecordError) as exc:
        ImageResolver(mirror=str(tmp_path / "mirror")).fetch("https://example.org/link.jpg")
    assert exc.value.reason == "bad_image_url"


def test_mirror_max_bytes(tmp_path):
    target = tmp_path / "m" / "example.org" / "x.jpg"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"y" * 100)
    resolver = ImageResolver(mirror=str(tmp_path / "m"), max_bytes=50)
    with pytest.raises(RecordError) as exc:
        resolver.fetch("https://example.org/x.jpg?size=full")  # the query is ignored in the mirror
    assert exc.value.reason == "image_unavailable" and "max_bytes" in str(exc.value)


def test_from_options_defaults():
    r = ImageResolver.from_options({"mirror": "/m", "allow_http": True, "timeout_s": 3, "max_bytes": 10})
    assert (r.mirror, r.cache_dir, r.allow_http, r.timeout_s, r.max_bytes) == ("/m", None, True, 3.0, 10)
    assert ImageResolver.from_options({}).allow_http is False



def test_http_timeout_bounds_the_whole_response_not_each_read(monkeypatch):
    """A server dripping a byte every 0.2 s never lets one read wait timeout_s=1, but the body takes 4 s:
    timeout_s bounds the request, so the fetch fails (image_unavailable) instead of being held."""
    import socket

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    body = JPEG + b"d" * 16
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()

    def drip():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.recv(65536)
                    head = b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n"
                    conn.sendall(head % len(body))
                    for byte in body:
                        if stop.wait(0.2):
                            break
                        conn.sendall(bytes([byte]))
                except OSError:
                    pass

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    try:
        resolver = ImageResolver(allow_http=True, timeout_s=1.0, retries=0, allow_hosts=LOOPBACK)
        with pytest.raises(RecordError) as err:
            resolver.fetch(f"http://127.0.0.1:{listener.getsockname()[1]}/drip.jpg")
        assert err.value.reason == "image_unavailable" and "Timeout" in str(err.value)
    finally:
        stop.set()
        thread.join(5)
        listener.close()
