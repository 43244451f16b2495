"""Every input record gets exactly one outcome of its own: a bad record is its own dead letter and the records
after it are still read (readers on inputs hand-built under tmp_path; nothing reaches a network)."""

from __future__ import annotations

import io as _io
import json
import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.sources import SourceSettings, build_source
from pipelines.sources import mmtab as mmtab_module
from pipelines.sources.finepdfs import FinePdfsSource
from pipelines.sources.mmtab import iter_json_items
from samples.make import finepdfs as finepdfs_sample
from samples.make.olmocr import write_tar
from schemas.deadletter import RecordError
from schemas.page import INT32_MAX
from tests.helpers import blank_png

GOOD_RESPONSE = ('{"primary_language": "en", "is_rotation_valid": true, "rotation_correction": 0, "is_table": false, '
                 '"is_diagram": false, "natural_text": "hello"}')


def source(kind: str, task: str = "parse_page", **options):
    return build_source(SourceSettings(name=kind, kind=kind, paths=(), task=task, instruction="Convert.",
                                       license="test", options=options))


def read_all(src, uri) -> list:
    return [row for unit in src.plan(str(uri)) for row in src.read(unit)]


def outcomes(rows) -> dict:
    """source id -> "ok" or the error reason; fails when a record has more than one outcome."""
    rows = list(rows)
    counts = Counter(r.source_id for r in rows)
    assert all(n == 1 for n in counts.values()), counts
    return {r.source_id: r.error.reason if r.error else "ok" for r in rows}


def mix_row(doc_id: str, relpath: str, page_number: int = 1) -> dict:
    return {"id": doc_id, "url": "u", "page_number": page_number, "pdf_relpath": relpath,
            "primary_language": "en", "is_rotation_valid": True, "rotation_correction": 0, "is_table": False,
            "is_diagram": False, "natural_text": f"text {doc_id}", "extras": None}


# --- page numbers past int32 (PAGE_SCHEMA's page_number) ------------------------------------------------------


def test_olmocr_mix_page_number_past_int32_is_its_rows_bad_page_number(tmp_path):
    write_tar(tmp_path / "pdf_tarballs" / "t.tar.gz", [(f"{d}.pdf", b"%PDF-1.4") for d in "abc"])
    rows = [mix_row("a", "pdf_tarballs/t.tar.gz:a.pdf", INT32_MAX), mix_row("b", "pdf_tarballs/t.tar.gz:b.pdf", 2**31),
            mix_row("c", "pdf_tarballs/t.tar.gz:c.pdf", 3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x_train.parquet")
    got = read_all(source("olmocr_mix"), tmp_path / "x_train.parquet")
    assert outcomes(got) == {"a": "ok", "b": "bad_page_number", "c": "ok"}
    assert "2147483648" in str(next(r.error for r in got if r.error))
    assert {r.source_id: r.pages[0].page_number for r in got if not r.error} == {"a": INT32_MAX, "c": 3}


def test_historical_page_number_past_int32_is_its_rows_bad_page_number(tmp_path):
    image = blank_png()
    pq.write_table(pa.Table.from_pylist([{"id": "a", "text": "hi", "image": image, "page": 1},
                                         {"id": "b", "text": "hi", "image": image, "page": 2**31},
                                         {"id": "c", "text": "hi", "image": image, "page": INT32_MAX}]),
                   tmp_path / "x.parquet")
    src = source("historical", columns={"id": "id", "text": "text", "image_bytes": "image", "page": "page"})
    got = outcomes(read_all(src, tmp_path / "x.parquet"))
    assert got == {"a/p1": "ok", f"{tmp_path / 'x.parquet'}#1": "bad_page_number", f"c/p{INT32_MAX}": "ok"}


# --- olmocr_mix: a row's tarball is the one its pdf_relpath names, by path -----------------------------------


def test_tarballs_of_one_name_in_two_folders_each_serve_their_own_rows(tmp_path):
    write_tar(tmp_path / "a" / "t.tar.gz", [("p.pdf", b"%PDF-1.4 A's page"), ("only_a.pdf", b"%PDF-1.4 only a")])
    write_tar(tmp_path / "b" / "t.tar.gz", [("p.pdf", b"%PDF-1.4 B's page")])
    rows = [mix_row("x", "a/t.tar.gz:p.pdf"), mix_row("y", "b/t.tar.gz:p.pdf"), mix_row("z", "a/t.tar.gz:only_a.pdf")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x_train.parquet")
    got = read_all(source("olmocr_mix"), tmp_path / "x_train.parquet")
    assert outcomes(got) == {"x": "ok", "y": "ok", "z": "ok"}
    assert {r.source_id: r.pages[0].payload for r in got} == {
        "x": b"%PDF-1.4 A's page", "y": b"%PDF-1.4 B's page", "z": b"%PDF-1.4 only a"}


def test_a_member_missing_from_one_of_two_same_named_tarballs_is_missing_there_only(tmp_path):
    write_tar(tmp_path / "a" / "t.tar.gz", [("pa.pdf", b"%PDF-1.4 a")])
    write_tar(tmp_path / "b" / "t.tar.gz", [("pb.pdf", b"%PDF-1.4 b")])
    rows = [mix_row("x", "a/t.tar.gz:pa.pdf"), mix_row("y", "b/t.tar.gz:pb.pdf"), mix_row("z", "b/t.tar.gz:pa.pdf")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x_train.parquet")
    got = read_all(source("olmocr_mix"), tmp_path / "x_train.parquet")
    assert outcomes(got) == {"x": "ok", "y": "ok", "z": "missing_tar_member"}
    message = str(next(r.error for r in got if r.error))
    assert "not found in b/t.tar.gz" in message and str(tmp_path) not in message  # named as the row names it


def test_one_tarball_spelled_three_ways_is_one_unit_reading_each_row_once(tmp_path):
    write_tar(tmp_path / "pdf_tarballs" / "t.tar.gz", [(f"d{i}.pdf", f"%PDF-1.4 {i}".encode()) for i in range(3)])
    rows = [mix_row("d0", "pdf_tarballs/t.tar.gz:d0.pdf"), mix_row("d1", "./pdf_tarballs/t.tar.gz:d1.pdf"),
            mix_row("d2", "pdf_tarballs//t.tar.gz:d2.pdf")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x_train.parquet")
    src = source("olmocr_mix")
    units = list(src.plan(str(tmp_path / "x_train.parquet")))
    assert [u.tarballs for u in units] == [None, (os.path.join(str(tmp_path), "pdf_tarballs/t.tar.gz"),)]
    got = read_all(src, tmp_path / "x_train.parquet")
    assert outcomes(got) == {"d0": "ok", "d1": "ok", "d2": "ok"}
    assert {r.source_id: r.pages[0].payload for r in got} == {f"d{i}": f"%PDF-1.4 {i}".encode() for i in range(3)}


def test_0225_row_in_no_readable_tarball_names_the_corrupt_one(tmp_path):
    write_tar(tmp_path / "pdf_tarballs" / "a.tar.gz", [("i0.pdf", b"%PDF-1.4 0")])
    write_tar(tmp_path / "pdf_tarballs" / "b.tar.gz", [("i1.pdf", b"%PDF-1.4 1")])
    cut = tmp_path / "pdf_tarballs" / "b.tar.gz"
    cut.write_bytes(cut.read_bytes()[:40])  # i1.pdf cannot be read
    pq.write_table(pa.Table.from_pylist([{"id": f"i{i}", "url": "u", "page_number": 1, "response": GOOD_RESPONSE}
                                         for i in range(2)]), tmp_path / "train-x.parquet")
    got = read_all(source("olmocr_mix_0225"), tmp_path / "train-x.parquet")
    assert outcomes(got) == {"i0": "ok", "i1": "corrupt_tarball"}
    assert str(cut) in str(next(r.error for r in got if r.error))


# --- finepdfs: a bad cell costs its own row, never the rest of the file --------------------------------------


@pytest.fixture(scope="module")
def finepdfs_root(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("finepdfs")
    finepdfs_sample.build(root)
    return root


def _finepdfs(root) -> FinePdfsSource:
    return FinePdfsSource(SourceSettings(name="finepdfs", kind="finepdfs", paths=(), license="odc-by",
                                         options={"warc_root": str(root / "finepdfs" / "warc")}))


@pytest.mark.parametrize("column,array", [
    ("language", lambda n: pa.array([None, None, 5] + [None] * (n - 3), pa.int64())),
    ("per_page_languages", lambda n: pa.array([[1]] * n, pa.list_(pa.int64()))),
])
def test_finepdfs_language_column_that_is_not_strings_is_bad_schema(finepdfs_root, tmp_path, column, array):
    table = pq.read_table(finepdfs_root / "finepdfs/data/eng_Latn/train/000_00000.parquet")
    table = table.set_column(table.schema.get_field_index(column), column, array(table.num_rows))
    pq.write_table(table, tmp_path / "x.parquet")
    (row,) = _finepdfs(finepdfs_root).read(str(tmp_path / "x.parquet"))
    assert row.error.reason == "bad_schema" and f"{column} is" in str(row.error)


def test_finepdfs_row_that_raises_is_its_own_bad_record(finepdfs_root, monkeypatch):
    path = str(finepdfs_root / "finepdfs/data/eng_Latn/train/000_00000.parquet")
    before = outcomes(_finepdfs(finepdfs_root).read(path))
    victim = list(before)[2]
    pages = FinePdfsSource._pages

    def pages_or_crash(self, record, source_id, warcs):
        if source_id == victim:
            raise TypeError("expected string or bytes-like object, got 'int'")
        return pages(self, record, source_id, warcs)

    monkeypatch.setattr(FinePdfsSource, "_pages", pages_or_crash)
    rows = list(_finepdfs(finepdfs_root).read(path))
    assert outcomes(rows) == {**before, victim: "bad_record"}
    assert "TypeError" in str(next(r.error for r in rows if r.source_id == victim))


# --- formula_lines, olmocr_synthmix: an input that is not a regular file is its record's letter ---------------


def _not_a_file(path, kind: str) -> None:
    os.mkdir(path) if kind == "folder" else os.mkfifo(path)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_formula_image_that_is_not_a_file_dead_letters_only_its_line(tmp_path, kind):
    (tmp_path / "spe").mkdir()
    (tmp_path / "spe.txt").write_text("x^2\ny^2\nz^2\n")
    for i in (0, 2):
        (tmp_path / "spe" / f"{i:07d}.png").write_bytes(blank_png())
    _not_a_file(tmp_path / "spe" / "0000001.png", kind)
    got = read_all(source("formula_lines", task="transcribe_formula"), tmp_path / "spe.txt")
    assert outcomes(got) == {"spe/0000000.png": "ok", "spe/0000001.png": "unsafe_path", "spe/0000002.png": "ok"}
    assert "is not a regular file" in str(got[1].error)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_synthmix_pdf_or_reference_that_is_not_a_file_dead_letters_only_its_page(tmp_path, kind):
    ds = tmp_path / "ds"
    (ds / "training" / "general").mkdir(parents=True)
    (ds / "bench_data").mkdir()
    reference = ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
                 "is_diagram: False\n---\nBay of Fundy\n")
    for name in "abc":
        if name != "b":
            (ds / "training" / "general" / f"{name}.md").write_text(reference)
        if name != "a":
            (ds / "training" / "general" / f"{name}.pdf").write_bytes(b"%PDF-1.4")
    _not_a_file(ds / "training" / "general" / "a.pdf", kind)  # the first page's PDF
    _not_a_file(ds / "training" / "general" / "b.md", kind)  # the second page's reference
    tests = [{"pdf": f"general/{n}.pdf", "page": 1, "id": n, "type": "present", "max_diffs": 0,
              "text": "Bay of Fundy", "case_sensitive": True} for n in "abc"]
    (ds / "bench_data" / "general.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests))
    got = outcomes(read_all(source("olmocr_synthmix"), ds / "bench_data" / "general.jsonl"))
    assert got == {"general/a": "unsafe_path", "general/b": "unsafe_path", "general/c": "ok"}


# --- mmtab: JSON Lines are independent lines, read one at a time ---------------------------------------------


def _table_item(i: int) -> str:
    answer = f"<table><tr><td>{i}</td></tr></table>"
    return json.dumps({"id": f"t{i}", "image": "t.png", "conversations": [
        {"from": "human", "value": "<image>\nRender"}, {"from": "gpt", "value": answer}]})


def test_mmtab_jsonl_bad_line_is_its_own_bad_item_and_the_rest_are_read(tmp_path):
    (tmp_path / "t.png").write_bytes(blank_png())
    lines = [_table_item(0), "{this is not json", _table_item(2), "", _table_item(3)]  # line 4 is blank
    (tmp_path / "x.jsonl").write_bytes("\n".join(lines).encode() + b"\n\xff\xfe\n" + _table_item(4).encode())
    got = read_all(source("mmtab", task="transcribe_table", images=str(tmp_path)), tmp_path / "x.jsonl")
    assert outcomes(got) == {"t0": "ok", "x.jsonl#1": "bad_item", "t2": "ok", "t3": "ok", "x.jsonl#4": "bad_item",
                             "t4": "ok"}
    errors = [str(r.error) for r in got if r.error]
    assert "line 2 is not JSON" in errors[0] and "line 6 is not UTF-8" in errors[1]


class _CountingStream:
    def __init__(self, data: bytes):
        self.stream, self.read_bytes = _io.BytesIO(data), 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.read_bytes += len(data)
        return data


def test_jsonl_is_streamed_past_a_bad_line_without_buffering_the_file(monkeypatch):
    monkeypatch.setattr(mmtab_module, "CHUNK", 256)
    good = json.dumps({"id": "x", "v": "a" * 100}).encode() + b"\n"
    stream = _CountingStream(good + b"{bad line\n" + good * 2000)  # ~240 KB after the bad line
    items = iter_json_items(stream, "x.jsonl")
    assert next(items) == {"id": "x", "v": "a" * 100}
    bad = next(items)
    assert isinstance(bad, RecordError) and bad.reason == "bad_item" and "line 2" in str(bad)
    assert stream.read_bytes <= 2 * 256  # the bad line is reported from the chunk it is in
    rest = list(items)
    assert len(rest) == 2000 and all(item == {"id": "x", "v": "a" * 100} for item in rest)


def test_json_array_syntax_error_is_reported_without_reading_the_rest(monkeypatch):
    monkeypatch.setattr(mmtab_module, "CHUNK", 256)
    stream = _CountingStream(b'[{"id": "x"}, {bad item}, ' + b'{"id": "y"}, ' * 20000 + b'{"id": "z"}]')
    items = iter_json_items(stream, "x.json")
    assert next(items) == {"id": "x"}
    with pytest.raises(RecordError, match="offset 15") as caught:
        next(items)
    assert caught.value.reason == "unreadable_json" and stream.read_bytes <= 2 * 256
