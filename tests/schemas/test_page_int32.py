"""``validate`` keeps page_number, width and height inside PAGE_SCHEMA's int32 columns: a record past them
would pass every stage and then fail the shard writer, taking the run with it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from schemas.page import INT32_MAX, PAGE_SCHEMA, validate
from tests.helpers import page_record


def test_page_number_up_to_int32_max_is_valid_and_past_it_is_not():
    record = page_record(page_number=INT32_MAX)
    assert validate(record) == []
    assert pa.Table.from_pylist([record.to_row()], schema=PAGE_SCHEMA).column("page_number")[0].as_py() == INT32_MAX
    past = page_record(page_number=INT32_MAX + 1)
    with pytest.raises(pa.ArrowInvalid):  # what the shard writer would have met
        pa.Table.from_pylist([past.to_row()], schema=PAGE_SCHEMA)
    assert validate(past) == [f"page_number must be an int in 0..{INT32_MAX}, got {INT32_MAX + 1}"]
    assert validate(page_record(page_number=True))  # a bool is no page number


@pytest.mark.parametrize("name", ["width", "height"])
def test_width_and_height_past_int32_are_problems(name):
    assert PAGE_SCHEMA.field(name).type == pa.int32()
    record = page_record()
    setattr(record, name, 2**31)
    problems = validate(record)
    assert f"{name} must be an int in 1..{INT32_MAX}, got {2**31}" in problems
    assert not any("differ from the image" in p for p in problems)  # the size check is not run on it
