"""Stage accounting: counters, dropped samples and dead letters from plain stage functions."""

import hashlib

from pipelines.clean.dedup import DedupConfig
from pipelines.clean.dedup_stage import dedup_key_members
from pipelines.accounting import DEAD, EVENT, ITEM, SAMPLE, apply_stage
from pipelines.transforms import SPILL, Spill
from pipelines.write import WriteConfig
from schemas.deadletter import Dropped
from tests.helpers import page_record


def counting_stage(record):
    record.quality["fmt"] = {"counters": {"bold": 2, "italic": 0}}
    return [record]


def dropping_stage(record):
    raise Dropped("too_short")


def events(envelopes, kind):
    return [(e.kind, e.reason, e.value) for k, e in envelopes if k == EVENT and e.kind == kind]


def test_counters_become_manifest_events():
    out = list(apply_stage("fmt", counting_stage, page_record()))
    assert events(out, "counter") == [("counter", "bold", 2)]  # zero counters are not emitted
    assert [k for k, _ in out].count(ITEM) == 1


def test_dropped_record_is_sampled_only_when_asked():
    record = page_record()
    assert not [e for e in apply_stage("short", dropping_stage, record) if e[0] == SAMPLE]
    samples = [p for k, p in apply_stage("short", dropping_stage, record, keep_dropped=True) if k == SAMPLE]
    assert samples == [("short", "too_short", record)]


def test_unexpected_exception_is_a_dead_letter_naming_the_record():
    def broken(record):
        raise KeyError("boom")

    out = list(apply_stage("x", broken, page_record()))
    letter = next(p for k, p in out if k == DEAD)
    assert letter.reason == "unexpected_KeyError" and letter.source_id == "doc-1" and letter.stage == "x"


def test_spill_dead_letters_a_record_whose_image_no_longer_decodes(tmp_path):
    data = b"\x89PNG\r\n\x1a\n" + b"garbage"
    record = page_record(image=data, image_sha256=hashlib.sha256(data).hexdigest())
    spill = Spill(str(tmp_path), WriteConfig(), key_fn=lambda r: dedup_key_members(DedupConfig(), r))
    spill.start_bundle()
    out = list(spill.process((ITEM, record)))
    spill.finish_bundle()
    assert not [e for e in out if e[0] == SPILL]
    letter = next(p for k, p in out if k == DEAD)
    assert letter.stage == "write" and letter.reason == "corrupt_image"
    assert events(out, "in") == [("in", "", 1)] and events(out, "dead") == [("dead", "corrupt_image", 1)]
