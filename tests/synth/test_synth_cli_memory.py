"""``python -m synth`` (synth/__main__.py) holds one page and one row group of records at a time, whatever
``--pages`` is, and writes the files that one write of everything at the end would."""

from __future__ import annotations

import io
import weakref
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import synth.__main__ as cli
from schemas.page import PAGE_SCHEMA
from schemas.unit_tests import unit_test_to_json


def test_records_reach_the_parquet_file_a_row_group_at_a_time(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(cli, "RECORDS_PER_ROW_GROUP", 3, raising=False)
    written: list[int] = []  # rows of each write_table call, on the real writer
    real = pq.ParquetWriter.write_table

    def spy(self, table, *args, **kwargs):
        written.append(table.num_rows)
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", spy)
    summary = cli.run(7, 5, tmp_path, log=False)
    kept = summary["kept"]
    assert kept >= 4  # more than one group
    assert written and max(written) <= 3 and sum(written) == kept
    parquet = pq.ParquetFile(tmp_path / "records" / "synth-00000.parquet")
    assert parquet.metadata.num_row_groups == len(written) == -(-kept // 3)
    rows = parquet.read(columns=["id", "source_id"])
    ids = rows.column("id").to_pylist()
    assert ids == sorted(ids) and len(set(ids)) == kept  # sorted by id across the row groups
    assert sorted(rows.column("source_id").to_pylist()) == sorted(p.stem for p in (tmp_path / "pages").glob("*.png"))


def test_a_page_its_tests_and_its_record_are_let_go_before_the_next_page(tmp_path: Path, monkeypatch) -> None:
    alive = {"records": 0, "tests": 0}
    per_page: list[int] = []  # tests of each kept page
    held: list[dict[str, int]] = []  # what was alive as each page started

    def gone(kind: str) -> None:
        alive[kind] -= 1

    def track(kind: str, obj: object) -> None:
        alive[kind] += 1
        weakref.finalize(obj, gone, kind)

    real_synthesize, real_record = cli.synthesize_page, cli.to_page_record

    def synthesize(spec, renderer):
        held.append(dict(alive))
        page = real_synthesize(spec, renderer)
        per_page.append(len(page.tests))
        for test in page.tests:
            track("tests", test)
        return page

    def to_record(page, spec):
        record = real_record(page, spec)
        track("records", record)
        return record

    monkeypatch.setattr(cli, "synthesize_page", synthesize)
    monkeypatch.setattr(cli, "to_page_record", to_record)
    summary = cli.run(8, 2, tmp_path, log=False)
    assert summary["kept"] == len(per_page) >= 6 and sum(per_page) > 0
    # at most the page before's (a loop variable not yet rebound), never the run's
    assert max(h["records"] for h in held) <= 1
    assert max(h["tests"] for h in held) <= max(per_page)
    assert pq.read_metadata(tmp_path / "records" / "synth-00000.parquet").num_rows == summary["kept"]


@pytest.mark.parametrize("renderer,language,pages", [("html", "mixed", 7), ("latex", "mixed", 8), ("latex", "zh", 2)])
def test_outputs_equal_one_write_of_every_record_at_the_end(tmp_path: Path, monkeypatch, renderer: str,
                                                           language: str, pages: int) -> None:
    """Under one row group: the bytes ``pq.write_table`` of all the records sorted by id makes (the schema alone
    when none is kept), and per suite the tests of its kept pages in plan order (LaTeX refuses Chinese pages)."""
    records, tests_by_suite = [], {}
    real_synthesize, real_record = cli.synthesize_page, cli.to_page_record

    def synthesize(spec, r):
        page = real_synthesize(spec, r)
        tests_by_suite.setdefault(spec.suite, []).extend(page.tests)
        return page

    def to_record(page, spec):
        records.append(real_record(page, spec))
        return records[-1]

    monkeypatch.setattr(cli, "synthesize_page", synthesize)
    monkeypatch.setattr(cli, "to_page_record", to_record)
    out = tmp_path / "run"
    summary = cli.run(pages, 0, out, renderer_name=renderer, log=False, language=language)
    assert summary["kept"] == len(records) and summary["kept"] + sum(summary["rejected"].values()) == pages
    if renderer == "latex":
        assert summary["rejected"] == {"synth_latex_language": pages // 4 if language == "mixed" else pages}
    expected = io.BytesIO()
    rows = [r.to_row() for r in sorted(records, key=lambda r: r.id)]
    pq.write_table(pa.Table.from_pylist(rows, schema=PAGE_SCHEMA), expected, compression="zstd")
    assert (out / "records" / "synth-00000.parquet").read_bytes() == expected.getvalue()
    assert sorted(p.name for p in (out / "bench_data").iterdir()) == sorted(f"{s}.jsonl" for s in tests_by_suite)
    for suite, tests in tests_by_suite.items():
        lines = (out / "bench_data" / f"{suite}.jsonl").read_text(encoding="utf-8").splitlines()
        assert lines == [unit_test_to_json(t) for t in tests]
    # the spill (under .work) is gone with the renderer's folder
    assert sorted(p.name for p in out.iterdir()) == ["bench_data", "html", "pages", "records", "reference",
                                                     "summary.json"]
    assert [p.name for p in (out / "records").iterdir()] == ["synth-00000.parquet"]
