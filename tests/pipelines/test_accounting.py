"""Stage accounting: counters, dropped samples and dead letters from plain stage functions;
envelope kinds and their routing."""

import hashlib
import pickle

import pytest

from pipelines.accounting import DroppedSample, Envelope, Kind, apply_stage, by_kind
from pipelines.clean.dedup import DedupConfig
from pipelines.clean.dedup_stage import dedup_key_members
from pipelines.transforms import Spill
from pipelines.write import WriteConfig
from schemas.deadletter import Dropped
from tests.helpers import page_record


def counting_stage(record):
    record.quality["fmt"] = {"counters": {"bold": 2, "italic": 0}}
    return [record]


def dropping_stage(record):
    raise Dropped("too_short")


def events(envelopes, kind):
    return [(e.kind, e.reason, e.value) for k, e in envelopes if k == Kind.EVENT and e.kind == kind]


def test_counters_become_manifest_events():
    out = list(apply_stage("fmt", counting_stage, page_record()))
    assert events(out, "counter") == [("counter", "bold", 2)]  # zero counters are not emitted
    assert [k for k, _ in out].count(Kind.ITEM) == 1


def test_dropped_record_is_sampled_only_when_asked():
    record = page_record()
    assert not [e for e in apply_stage("short", dropping_stage, record) if e[0] == Kind.SAMPLE]
    samples = [p for k, p in apply_stage("short", dropping_stage, record, keep_dropped=True) if k == Kind.SAMPLE]
    assert samples == [("short", "too_short", record)]
    assert samples[0] == DroppedSample(stage="short", reason="too_short", record=record)


def test_unexpected_exception_is_a_dead_letter_naming_the_record():
    def broken(record):
        raise KeyError("boom")

    out = list(apply_stage("x", broken, page_record()))
    letter = next(p for k, p in out if k == Kind.DEAD)
    assert letter.reason == "unexpected_KeyError" and letter.source_id == "doc-1" and letter.stage == "x"


def test_spill_dead_letters_a_record_whose_image_no_longer_decodes(tmp_path):
    data = b"\x89PNG\r\n\x1a\n" + b"garbage"
    record = page_record(image=data, image_sha256=hashlib.sha256(data).hexdigest())
    spill = Spill(str(tmp_path), WriteConfig(), key_fn=lambda r: dedup_key_members(DedupConfig(), r))
    spill.start_bundle()
    out = list(spill.process(Envelope(Kind.ITEM, record)))
    spill.finish_bundle()
    assert not [e for e in out if e[0] == Kind.SPILL]
    letter = next(p for k, p in out if k == Kind.DEAD)
    assert letter.stage == "write" and letter.reason == "corrupt_image"
    assert events(out, "in") == [("in", "", 1)] and events(out, "dead") == [("dead", "corrupt_image", 1)]


def test_envelope_kinds_keep_their_string_values():
    assert [Kind(v) for v in ("item", "event", "dead", "sample", "spill", "dedup_key")] == [
        Kind.ITEM, Kind.EVENT, Kind.DEAD, Kind.SAMPLE, Kind.SPILL, Kind.DEDUP_KEY]
    assert Kind.COUNT == "count" and str(Kind.DEAD_FILE) == "dead_file"
    assert pickle.loads(pickle.dumps(Envelope(Kind.LOSER, "x"))) == (Kind.LOSER, "x")


def test_routing_groups_payloads_by_kind_in_order():
    routed = by_kind([Envelope(Kind.COUNT, 1), ("shard", 2), Envelope(Kind.COUNT, 3)], Kind.COUNT, Kind.SHARD,
                     Kind.DEAD_FILE)
    assert routed == {Kind.COUNT: [1, 3], Kind.SHARD: [2], Kind.DEAD_FILE: []}


@pytest.mark.parametrize("kind", [Kind.ITEM, "shard_result"])
def test_routing_refuses_a_kind_it_does_not_expect(kind):
    with pytest.raises(ValueError, match="unexpected envelope kind .*expected one of: count, shard"):
        by_kind([Envelope(Kind.COUNT, 1), (kind, 2)], Kind.COUNT, Kind.SHARD)


def _page(source_id: str, page: int, counters: int = 0):
    from pipelines.sources.base import SourcePage

    quality = {"read": {"counters": {"tests_kept": counters}}} if counters else {}
    return SourcePage(source="s", source_id=source_id, page_number=page, payload_kind="pdf", payload=b"%PDF",
                      response="r", domain="d", language="en", license="cc0", instruction="i", quality=quality)


def test_a_page_read_twice_from_one_unit_is_dead_lettered_once_and_named():
    from pipelines.accounting import account_rows
    from pipelines.sources.base import Row

    rows = [Row("a", [_page("a", 1)]), Row("b", [_page("b", 1), _page("b", 2)]),
            Row("b", [_page("b", 2, counters=3)]),  # a repeated input row
            Row("b", [_page("b", 3)], continues=True),  # more pages of b: not a repeat
            Row("c", [_page("c", 1), _page("c", 1)])]  # one record holding one page twice
    out = list(account_rows("read", "s", rows, unit="u"))
    letters = [p for k, p in out if k == Kind.DEAD]
    assert [(d.source_id, d.reason) for d in letters] == [("b", "duplicate_id"), ("c", "duplicate_id")]
    assert "b page 2 was read twice" in letters[0].message
    assert [(p.source_id, p.page_number) for k, p in out if k == Kind.ITEM] == [("a", 1), ("b", 1), ("b", 2), ("b", 3)]
    assert events(out, "counter") == []  # the dead-lettered copy's counters are not counted
    assert sum(v for _, _, v in events(out, "in")) == 4 and sum(v for _, _, v in events(out, "dead")) == 2


def test_a_reader_that_stops_mid_unit_is_one_dead_letter_naming_the_unit_with_a_bounded_message():
    from pipelines.accounting import MAX_MESSAGE_CHARS, account_rows
    from pipelines.sources.base import Row
    from pipelines.transforms import unit_label

    def rows():
        yield Row("a", [_page("a", 1)])
        raise TypeError("x" * 100_000)  # a hostile value quoted in the error

    out = list(account_rows("read", "s", rows(), unit="k", label=unit_label(("f.parquet", 3))))
    [letter] = [p for k, p in out if k == Kind.DEAD]
    assert letter.source_id == "<unit ('f.parquet', 3)>" and letter.reason == "unexpected_TypeError"
    assert len(letter.message) < MAX_MESSAGE_CHARS + 40 and letter.message.endswith("characters)")
    assert [p.source_id for k, p in out if k == Kind.ITEM] == ["a"]


def test_a_dead_letters_message_holds_no_memory_address():
    """PIL names the stream it could not read ("<_io.BytesIO object at 0x7f..>"): every run's letter differed."""
    def broken(record):
        raise ValueError("cannot identify image file <_io.BytesIO object at 0x7f9c14d18ae0>")

    letter = next(p for k, p in apply_stage("x", broken, page_record()) if k == Kind.DEAD)
    assert "0x" not in letter.message and "<_io.BytesIO object>" in letter.message
