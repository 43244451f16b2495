"""Source ids no shard can hold (a lone surrogate: a file name that is not UTF-8, JSON's ``"\\udc80"``) are one
dead letter naming the record, escaped, and the run goes on: the letter itself must be writable."""

from __future__ import annotations

import glob
import hashlib
import os

import pyarrow as pa
import pytest

from pipelines.accounting import Kind, account_rows
from pipelines.sources import SourceSettings, build_source
from pipelines.sources.base import Row, SourcePage
from pipelines.transforms import SpillDeadLetters
from pipelines.write import WriteConfig
from samples.make.pdfs import text_pdf
from schemas.deadletter import DEAD_LETTER_SCHEMA, DeadLetter
from schemas.page import stable_id, validate
from tests.helpers import page_record

LATIN1_NAME = "caf\udce9.pdf"  # os.fsdecode(b"caf\xe9.pdf"): how Python names a Latin-1 file on a UTF-8 system


def _page(source_id: str, page: int) -> SourcePage:
    return SourcePage(source="s", source_id=source_id, page_number=page, payload_kind="pdf", payload=b"%PDF",
                      response="r", domain="d", language="en", license="cc0", instruction="i")


def _spill(letters: list[DeadLetter], folder) -> list[dict]:
    """The letters through the corpus DAG's dead-letter spill writer, read back."""
    spill = SpillDeadLetters(str(folder), WriteConfig())
    spill.start_bundle()
    for letter in letters:
        list(spill.process(letter))
    spill.finish_bundle()
    paths = sorted(glob.glob(f"{folder}/**/*.arrow", recursive=True))
    assert paths
    return [row for path in paths for row in pa.ipc.open_file(path).read_all().to_pylist()]


def test_a_lone_surrogate_in_a_source_id_is_one_writable_dead_letter(tmp_path):
    rows = [Row(LATIN1_NAME, [_page(LATIN1_NAME, 1)]),
            Row(LATIN1_NAME, [_page(LATIN1_NAME, 2)], continues=True),  # its later pages: reported by the first
            Row("ok.pdf", [_page("ok.pdf", 1)])]
    out = list(account_rows("read", "local", rows, unit="u"))
    letters = [p for k, p in out if k == Kind.DEAD]
    assert [(d.source_id, d.reason) for d in letters] == [("caf\\udce9.pdf", "invalid_source_id")]
    assert "caf\\udce9.pdf" in letters[0].message and "not valid Unicode" in letters[0].message
    assert [(p.source_id, p.page_number) for k, p in out if k == Kind.ITEM] == [("ok.pdf", 1)]
    (written,) = _spill(letters, tmp_path / "dead")
    assert (written["source_id"], written["reason"]) == ("caf\\udce9.pdf", "invalid_source_id")


def test_a_dead_letter_with_lone_surrogates_has_an_id_and_a_writable_row():
    letter = DeadLetter("mm", "bad\udc80id", "read", "missing_image", "RecordError", "nope \ud800.jpg", "\udcff")
    assert (letter.source_id, letter.message, letter.unit) == ("bad\\udc80id", "nope \\ud800.jpg", "\\udcff")
    table = pa.Table.from_pylist([letter.to_row()], schema=DEAD_LETTER_SCHEMA)
    assert table.column("source_id").to_pylist() == ["bad\\udc80id"]
    plain = DeadLetter("mm", "caf\u00e9", "read", "missing_image", "RecordError", "m")  # valid Unicode: kept as is
    assert plain.source_id == "caf\u00e9" and plain.id == stable_id("read", "mm", "caf\u00e9", "missing_image")


def test_stable_id_hashes_a_lone_surrogate_instead_of_raising():
    assert stable_id("a", "\u00e9") == hashlib.sha256("a\x1f\u00e9".encode()).hexdigest()[:32]  # ids kept as they were
    ids = {stable_id("caf\udce9.pdf"), stable_id("caf\udce8.pdf"), stable_id("caf\\udce9.pdf")}
    assert len(ids) == 3 and all(len(i) == 32 for i in ids)


def test_validate_names_a_source_id_that_is_not_valid_unicode():
    assert validate(page_record()) == []
    problems = validate(page_record(source_id="caf\udce9"))
    assert "source_id is not valid Unicode (surrogates not allowed at 3)" in problems


def test_a_local_file_named_in_latin1_is_one_dead_letter_and_the_folder_is_read(tmp_path):
    try:
        with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.pdf"), "wb") as fh:
            fh.write(text_pdf([["one"]]))
    except OSError:  # a file system that refuses names that are not UTF-8
        pytest.skip("this file system refuses a Latin-1 file name")
    (tmp_path / "ok.pdf").write_bytes(text_pdf([["two"]]))
    src = build_source(SourceSettings(name="local", kind="local_folder", paths=(str(tmp_path),), license="cc0-1.0"))
    out = [e for part in src.parts(str(tmp_path)) for unit in src.plan(part)
           for e in account_rows("read", "local", src.read(unit), label=repr(unit))]
    letters = [p for k, p in out if k == Kind.DEAD]
    assert [(d.source_id, d.reason) for d in letters] == [("caf\\udce9.pdf", "invalid_source_id")]
    assert [p.source_id for k, p in out if k == Kind.ITEM] == ["ok.pdf"]
    assert [row["source_id"] for row in _spill(letters, tmp_path / "dead")] == ["caf\\udce9.pdf"]
