import json

from schemas.manifest import CountEvent, RunManifest

STAGES = ["read", "render"]


def events(read_in=3, read_out=2, read_dead=1, emitted=2, render_in=2, render_out=2):
    return [
        CountEvent("read", "s", "in", "", read_in),
        CountEvent("read", "s", "out", "", read_out),
        CountEvent("read", "s", "dead", "corrupt_pdf", read_dead),
        CountEvent("read", "s", "emitted", "", emitted),
        CountEvent("render", "s", "in", "", render_in),
        CountEvent("render", "s", "out", "", render_out),
        CountEvent("render", "s", "emitted", "", render_out),
    ]


def test_balanced_manifest():
    m = RunManifest.from_events(events(), STAGES, shards=[{"file": "data/x", "rows": 2}])
    assert m.imbalances() == []
    assert (m.records_in, m.records_written, m.records_dead) == (3, 2, 1)
    assert abs(m.dead_letter_rate() - 1 / 3) < 1e-9


def test_dead_letter_rate_counts_pages_a_document_fanned_out_to():
    """One 3-page PDF read, one page dead at validate: 1 of the 3 records the run held, not 1 of 1 document."""
    m = RunManifest.from_events([
        CountEvent("read", "s", "in", "", 1), CountEvent("read", "s", "out", "", 1),
        CountEvent("read", "s", "emitted", "", 3),
        CountEvent("validate", "s", "in", "", 3), CountEvent("validate", "s", "out", "", 2),
        CountEvent("validate", "s", "dead", "nul_in_text", 1), CountEvent("validate", "s", "emitted", "", 2),
    ], ["read", "validate"], shards=[{"file": "data/x", "rows": 2}])
    assert m.imbalances() == [] and m.records_seen == 3
    assert abs(m.dead_letter_rate() - 1 / 3) < 1e-9


def test_stage_that_loses_a_record_is_reported():
    m = RunManifest.from_events(events(read_in=4), STAGES, shards=[{"file": "data/x", "rows": 2}])
    assert m.imbalances() == ["read/s: in 4 != out 2 + dropped 0 + dead 1"]


def test_chain_and_shard_mismatches_are_reported():
    m = RunManifest.from_events(events(render_in=1, render_out=1), STAGES, shards=[{"file": "data/x", "rows": 5}])
    problems = m.imbalances()
    assert "s: read emitted 2 but render took 1" in problems
    assert "render emitted 1 but shards hold 5" in problems


def test_json_round_trip_and_summary():
    m = RunManifest.from_events(events(), STAGES, shards=[{"file": "data/x", "rows": 2}])
    back = RunManifest.from_json(m.to_json())
    assert back.imbalances() == [] and back.totals("read").dead == {"corrupt_pdf": 1}
    table = back.summary_table()
    assert "corrupt_pdf" in table and "balanced yes" in table


def test_a_file_that_is_not_a_run_manifest_is_an_error_naming_it():
    import pytest

    from schemas.manifest import ManifestError

    with pytest.raises(ManifestError, match="out/x/manifest.json is not JSON"):
        RunManifest.from_json("<html>", where="out/x/manifest.json")
    with pytest.raises(ManifestError, match=r"out/x/manifest.json is not a pagemill run manifest \(KeyError"):
        RunManifest.from_json("{}", where="out/x/manifest.json")
    with pytest.raises(ManifestError, match="is not a pagemill run manifest"):
        RunManifest.from_json('{"stages": {"read": {"a": {"bogus": 1}}}}')


def test_the_json_does_not_depend_on_the_order_events_arrive_in():
    """Runners deliver count events in any order (in-memory, multi-process, Dask): the file is the same."""
    more = [CountEvent("read", "s", "dead", "bad_schema", 1), CountEvent("read", "s", "in", "", 1),
            CountEvent("render", "s", "counter", "zeta", 2), CountEvent("render", "s", "counter", "alpha", 1)]
    a = RunManifest.from_events(events() + more, STAGES, shards=[{"file": "data/x", "rows": 2}])
    b = RunManifest.from_events(list(reversed(events() + more)), STAGES, shards=[{"file": "data/x", "rows": 2}])
    assert a.to_json() == b.to_json()
    body = json.loads(a.to_json())
    assert list(body["stages"]) == STAGES and list(body["stages"]["read"]["s"]["dead"]) == ["bad_schema", "corrupt_pdf"]
