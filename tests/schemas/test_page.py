import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.page import (
    PAGE_SCHEMA,
    PageRecord,
    features,
    image_sha256,
    page_id,
    validate,
)
from tests.helpers import page_record


def test_valid_record_has_no_violations():
    assert validate(page_record()) == []


def test_validate_reports_every_violation():
    record = page_record(source="", language="English!", task="dance", split="dev", width=0,
                         image_sha256="0" * 64, unit_tests=["{not json", json.dumps({"type": "present", "id": "t"})],
                         provenance=[])
    problems = validate(record)
    joined = "\n".join(problems)
    for expected in ("source must be", "language must be", "task 'dance'", "split 'dev'", "width must be",
                     "image_sha256 does not match", "unit_tests[0]: malformed JSON", "unit_tests[1]:",
                     "provenance is empty"):
        assert expected in joined
    assert len(problems) == 9


def test_validate_rejects_text_no_shard_can_hold():
    """A lone surrogate (from JSON's "\\ud800") passes as a str but fails when the shard is written."""
    problems = validate(page_record(response="Some text \ud800 more", text_layer="layer \udfff"))
    assert [p.split(" (")[0] for p in problems] == ["response is not valid Unicode", "text_layer is not valid Unicode"]
    assert validate(page_record(response="Grüße, 世界 ✓")) == []


def test_validate_rejects_non_image_bytes():
    data = b"GIF89a not allowed"
    problems = validate(page_record(image=data, image_sha256=hashlib.sha256(data).hexdigest()))
    assert problems == ["image bytes are not PNG, WebP or JPEG"]


def test_validate_checks_width_and_height_against_the_image_header():
    import io

    from PIL import Image

    from tests.helpers import blank_png

    assert validate(page_record(width=64, height=48)) == []
    png = blank_png((64, 48))
    problems = validate(page_record(image=png, image_sha256=hashlib.sha256(png).hexdigest(), width=48, height=64))
    assert problems == ["width x height 48x64 differ from the image's 64x48"]
    for fmt in ("WEBP", "JPEG"):
        buf = io.BytesIO()
        Image.new("RGB", (33, 21), "white").save(buf, format=fmt)
        data = buf.getvalue()
        record = page_record(image=data, image_sha256=hashlib.sha256(data).hexdigest(), width=33, height=21)
        assert validate(record) == []
        assert validate(page_record(image=data, image_sha256=hashlib.sha256(data).hexdigest(), width=33, height=22))
    cut = png[:20]  # a PNG signature and no complete header
    assert validate(page_record(image=cut, image_sha256=hashlib.sha256(cut).hexdigest())) == [
        "image header is unreadable (no width and height)"]


def test_image_sha256_remembers_only_the_same_object():
    """The digest is remembered for the last bytes object: an equal copy and different bytes are hashed,
    and a record whose image was just hashed still fails validation with a wrong digest."""
    record = page_record()
    data = record.image
    assert image_sha256(data) == hashlib.sha256(data).hexdigest()
    assert image_sha256(data) == hashlib.sha256(data).hexdigest()  # remembered
    copy = bytes(bytearray(data))
    assert copy is not data and image_sha256(copy) == hashlib.sha256(data).hexdigest()
    other = data + b"\x00"
    assert image_sha256(other) == hashlib.sha256(other).hexdigest() != image_sha256(data)
    image_sha256(record.image)
    wrong = page_record(image=record.image, image_sha256=hashlib.sha256(other).hexdigest())
    assert validate(wrong) == ["image_sha256 does not match the image bytes"]
    assert validate(record) == []


def test_page_id_is_stable_and_distinguishes_inputs():
    assert page_id("a", "b", 1) == page_id("a", "b", 1)
    assert len({page_id("a", "b", 1), page_id("a", "b", 2), page_id("a", "c", 1), page_id("a", "b", 1, "rot90")}) == 4
    assert page_id("ab", "c", 1) != page_id("a", "bc", 1)  # fields are separated, not concatenated


def test_row_round_trip_through_parquet(tmp_path):
    unit_test = {"pdf": "d.pdf", "page": 1, "id": "t1", "type": "present", "text": "Hello"}
    record = page_record(quality={"loop": None, "score": 0.5}, metadata={"url": "u"},
                         unit_tests=[json.dumps(unit_test)])
    path = tmp_path / "x.parquet"
    pq.write_table(pa.Table.from_pylist([record.to_row()], schema=PAGE_SCHEMA), path)
    back = PageRecord.from_row(pq.read_table(path).to_pylist()[0])
    assert back == record


def test_schema_carries_hf_image_feature():
    meta = json.loads(PAGE_SCHEMA.metadata[b"huggingface"])
    assert meta["info"]["features"]["image"] == {"_type": "Image"}
    assert PAGE_SCHEMA.field("image").type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    assert set(features()) == {f.name for f in PAGE_SCHEMA}


def test_schema_is_what_datasets_derives_from_the_features():
    """PAGE_SCHEMA is built without importing datasets; it must equal datasets' own derivation."""
    import datasets

    hf = features()
    assert isinstance(hf["image"], datasets.Image)
    assert isinstance(hf["provenance"], datasets.List)
    assert hf.arrow_schema.equals(PAGE_SCHEMA, check_metadata=True)
    assert hf.arrow_schema.metadata == PAGE_SCHEMA.metadata
