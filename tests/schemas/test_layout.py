"""schemas/layout.py and PageRecord.elements: the class enum, box and order validation, the
Nemotron grid, and the field through Parquet and ``datasets``."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.layout import Element, element, grid_box, nemotron_class, scale_elements, validate_elements
from schemas.page import PAGE_SCHEMA, PageRecord, validate
from tests.helpers import page_record

ELEMENTS = [element("title", (10, 5, 200.123, 30), 0, "# Title"), element("table", (10, 40, 300, 90), 1, "<table>")]


def test_elements_round_trip_through_parquet_and_datasets(tmp_path) -> None:
    import datasets

    record = page_record(elements=list(ELEMENTS), width=400, height=100)
    assert record.elements[0].x1 == 200.12 and validate(record) == []
    path = tmp_path / "x.parquet"
    pq.write_table(pa.Table.from_pylist([record.to_row()], schema=PAGE_SCHEMA), path)
    assert PageRecord.from_row(pq.read_table(path).to_pylist()[0]) == record
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert ds[0]["elements"][1] == {"cls": "table", "x0": 10.0, "y0": 40.0, "x1": 300.0, "y1": 90.0, "order": 1,
                                    "text": "<table>"}
    assert PageRecord.from_row({**record.to_row(), "elements": None}).elements == []  # older shards


def test_validation_names_each_bad_element() -> None:
    bad = [Element("titel", 0, 0, 10, 10, 0), Element("text", 5, 5, 5, 9, 1), Element("text", 0, 0, 10, 10, 5),
           Element("text", -9, 0, 10, 10, 3)]
    problems = validate_elements(bad, 84, 56)
    assert len(problems) == 4 and "titel" in problems[0] and "empty or inverted" in problems[1]
    assert any("expected 2" in p for p in problems) and any("outside" in p for p in problems)
    assert validate(page_record(elements=bad[:1]))  # the record is invalid too


def test_grid_and_class_names() -> None:
    el = element("section_header", (256, 331.25, 512, 662.5), 0)
    assert grid_box(el, 1024, 1325) == (256, 320, 512, 640)
    assert nemotron_class("section_header") == "Section-Header" and nemotron_class("page_footer") == "Page-Footer"
    assert scale_elements([el], 0.5, 2)[0].box == (128, 662.5, 256, 1325)
