"""Incremental refresh gathers no per-record data in one place (pipelines/refresh.py, pipelines/corpus.py):
dead letters name their input unit in the dead-letter shards (the units table keeps counts only) and a
reused unit's letters are carried from those shards; dedup's duplicates name the loser's and the kept
page's units, and the reuse decision reads those two columns alone. Older runs (letters in the units
table, duplicates without unit columns) still refresh correctly."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import corpus, refresh
from pipelines.accounting import Kind, apply_stage
from pipelines.clean.dedup import DedupConfig
from pipelines.clean.dedup_stage import DUPLICATES, dedup_edges, dedup_key_members, dedup_losers, spill_loser
from pipelines.config import load_config
from pipelines.write import DEAD_LETTERS, SpillWriter, WriteConfig
from schemas.deadletter import DEAD_LETTER_SCHEMA, DeadLetter, RecordError
from schemas.page import page_id
from tests.helpers import IN_MEMORY, page_record, small_corpus_config


def digests(out: Path, folder: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / folder).glob("*.parquet"))}


def letter_rows(out: Path) -> list[dict]:
    return sorted(pq.read_table(out / "dead_letter").to_pylist(), key=lambda r: json.dumps(r, sort_keys=True))


def all_reused(out: Path) -> list[tuple]:
    """The previous run's units as planned again, unchanged: (settings, unit, UnitInfo) for decide_reuse."""
    previous = refresh.PreviousRun.load(str(out))
    return [(None, None, refresh.UnitInfo(**{k: row[k] for k in refresh.UnitInfo._fields}))
            for row in previous.units.values()]


def carried(envelopes: list, tables: tuple[str, ...]) -> list:
    """What the carry branch reads (``read_carried``) from the decision's CARRY tasks of ``tables``."""
    return [e for kind, task in envelopes if kind == Kind.CARRY and task[0] in tables
            for e in corpus.read_carried(task)]


def make_legacy(out: Path, legacy: Path) -> None:
    """``out`` as a run from before this change wrote it: every unit's dead letters as JSON in the units
    table, no ``unit`` column in the dead-letter shards, no unit columns in the duplicates shards."""
    shutil.copytree(out, legacy)
    per_unit: dict[str, list] = {}
    for path in sorted((legacy / "dead_letter").glob("*.parquet")):
        table = pq.read_table(path)
        for row in table.to_pylist():
            if row["unit"]:
                per_unit.setdefault(row["unit"], []).append({k: row[k] for k in (
                    "source", "source_id", "stage", "reason", "error_class", "message")})
        pq.write_table(table.drop_columns(["unit"]), path)
    for path in sorted((legacy / "dropped").glob("dedup-duplicates-*.parquet")):
        pq.write_table(pq.read_table(path).drop_columns(["unit", "kept_unit"]), path)
    units = pq.read_table(legacy / refresh.UNITS_FILE).to_pylist()
    for row in units:
        row["dead_letters"] = json.dumps(per_unit.get(row["key"], []))
    schema = pa.schema([*refresh.UNITS_SCHEMA, (refresh.LEGACY_LETTERS, pa.string())])
    pq.write_table(pa.Table.from_pylist(units, schema=schema), legacy / refresh.UNITS_FILE)


# --- dead letters -------------------------------------------------------------------------------


def test_a_dead_letter_names_its_unit_and_no_unit_envelope_gathers_it():
    def broken(record):
        raise RecordError("corrupt_pdf", "cannot open")

    record = page_record(metadata={"refresh_unit": "ab12"})
    out = list(apply_stage("render", broken, record))
    [letter] = [p for k, p in out if k == Kind.DEAD]
    assert letter.unit == "ab12" and letter.to_row()["unit"] == "ab12"
    assert {k for k, _ in out} == {Kind.EVENT, Kind.DEAD}
    assert not hasattr(Kind, "UNIT_DEAD")
    assert DEAD_LETTER_SCHEMA.names[-1] == "unit"
    # the unit travels into the sharded dead-letter table
    assert "unit" in DEAD_LETTERS.schema.names and "unit" in DEAD_LETTERS.sort_keys


def test_the_units_table_keeps_counts_and_the_dead_letter_shards_name_units(subset_run):
    manifest, out = subset_run
    assert pq.read_schema(out / refresh.UNITS_FILE).names == refresh.UNITS_SCHEMA.names
    assert refresh.LEGACY_LETTERS not in refresh.UNITS_SCHEMA.names
    rows = letter_rows(out)
    assert len(rows) == manifest.records_dead > 0
    keys = {u["key"] for u in pq.read_table(out / refresh.UNITS_FILE).to_pylist()}
    named = [r for r in rows if r["unit"]]
    assert named and {r["unit"] for r in named} <= keys
    # each unit's dead counts (by stage and reason) in the units table match its letters
    per_unit: dict[tuple, float] = {}
    for row in pq.read_table(out / refresh.UNITS_FILE).to_pylist():
        for stage, kind, reason, value in json.loads(row["counts"]):
            if kind == "dead":
                per_unit[(row["key"], stage, reason)] = per_unit.get((row["key"], stage, reason), 0) + value
    letters: dict[tuple, float] = {}
    for r in named:
        letters[(r["unit"], r["stage"], r["reason"])] = letters.get((r["unit"], r["stage"], r["reason"]), 0) + 1
    assert per_unit == letters


def test_a_reused_units_dead_letters_are_carried_from_the_dead_letter_shards(subset_run, tmp_path):
    _, out = subset_run
    envelopes = list(corpus.decide_reuse(all_reused(out), str(out), str(tmp_path)))
    # the decision itself emits no dead letter: they are read on the carry branch, file by file
    assert not [e for e in envelopes if e.kind == Kind.DEAD]
    tasks = [task for kind, task in envelopes if kind == Kind.CARRY and task[0] == "letters"]
    assert sorted(Path(t[1]).name for t in tasks) == sorted(Path(f).name for f in
                                                           json.loads((out / "manifest.json").read_text())
                                                           ["dead_letter_files"])
    letters = carried(envelopes, ("letters",))
    assert all(kind == Kind.DEAD for kind, _ in letters)
    expected = [r for r in letter_rows(out) if r["unit"]]
    assert sorted((p.to_row() for _, p in letters), key=lambda r: json.dumps(r, sort_keys=True)) == expected
    # only the reused units' letters: with one unit read again, its letters are not carried
    gone = expected[0]["unit"]
    keys = Path(tmp_path / "keys.json")
    keys.write_text(json.dumps(sorted({r["unit"] for r in expected} - {gone})))
    some = [p for task in tasks for _, p in corpus.read_carried((*task[:4], str(keys)))]
    assert sorted((p.to_row() for p in some), key=lambda r: json.dumps(r, sort_keys=True)) == [
        r for r in expected if r["unit"] != gone]


def test_a_run_from_before_units_named_in_letters_still_refreshes(subset_run, subset_samples, tmp_path):
    """An older previous run: its letters come from its units table's column, once (the new run writes
    them with their unit), and its duplicates are joined by id; the result is what the new format gives."""
    manifest, out = subset_run
    legacy = tmp_path / "legacy"
    make_legacy(out, legacy)
    previous = refresh.PreviousRun.load(str(legacy))
    assert previous.legacy_letters and not refresh.PreviousRun.load(str(out)).legacy_letters
    assert all(refresh.LEGACY_LETTERS not in row for row in previous.units.values())  # not read into the rows
    assert refresh._lost_to(previous) == refresh._lost_to(refresh.PreviousRun.load(str(out)))
    envelopes = list(corpus.decide_reuse(all_reused(legacy), str(legacy), str(tmp_path)))
    assert not [t for k, t in envelopes if k == Kind.CARRY and t[0] == "letters"]
    letters = carried(envelopes, ("legacy_letters",))
    assert sorted((p.to_row() for _, p in letters), key=lambda r: json.dumps(r, sort_keys=True)) == [
        r for r in letter_rows(out) if r["unit"]]
    # end to end through the DAG: the same shards, letters (with their units) and counts as the new format
    cfg = load_config(small_corpus_config(subset_samples, tmp_path / "run"))
    # a real older run has another write fingerprint, so its refresh runs the DAG; this copy has this run's
    again = corpus.run(cfg, IN_MEMORY, previous=str(legacy), fast=False)
    assert again.imbalances() == [] and again.run["refresh"]["units_processed"] == 0
    out2 = Path(cfg.run.output)
    for folder in ("data", "dead_letter", "dropped", refresh.LOSER_PAGES_FOLDER, "refresh"):
        assert digests(out2, folder) == digests(out, folder), folder
    assert again.summary_table() == manifest.summary_table()


# --- dedup's unit pairs -----------------------------------------------------------------------


def test_dedup_losers_name_their_unit_and_the_kept_pages(tmp_path):
    records = [page_record(id=page_id("src", f"doc-{u}", 1), source_id=f"doc-{u}", metadata={"refresh_unit": u})
               for u in ("u1", "u2", "u3")]
    cfg = DedupConfig()
    groups: dict[str, list] = {}
    for r in records:
        for key, member in dedup_key_members(cfg, r):
            assert member.unit == r.metadata["refresh_unit"]
            groups.setdefault(key, []).append(member)
    edges: dict[str, list] = {}
    for key, members in groups.items():
        for kind, edge in dedup_edges(cfg, key, members):
            edges.setdefault(kind, []).append(edge)
    losers = [x for kind, e in edges.items() for x in dedup_losers(cfg, kind, e) if x.reason == "duplicate_image"]
    keeper = min(records, key=lambda r: r.id)
    units = {r.id: r.metadata["refresh_unit"] for r in records}
    assert sorted(x.id for x in losers) == sorted(r.id for r in records if r is not keeper)
    assert all((x.kept, x.unit, x.kept_unit) == (keeper.id, units[x.id], units[keeper.id]) for x in losers)
    writer = SpillWriter(str(tmp_path), WriteConfig(), DUPLICATES)
    spill_loser(writer, losers[0])
    [row] = [r for rows in writer.buffers.values() for r in rows]
    writer.close()
    assert (row["unit"], row["kept_unit"]) == (losers[0].unit, losers[0].kept_unit)
    assert DUPLICATES.schema.names[-2:] == ["unit", "kept_unit"]


class _Spy:
    """Records the files ``refresh`` opens and the columns it reads from them."""

    def __init__(self, monkeypatch):
        self.opened: list[str] = []
        self.columns: list = []
        open_read = refresh.io.open_read
        spy = self

        def recording_open(path, *args, **kwargs):
            spy.opened.append(str(path))
            return open_read(path, *args, **kwargs)

        class File(pq.ParquetFile):
            def read_row_group(self, i, columns=None, **kwargs):
                spy.columns.append(columns)
                return super().read_row_group(i, columns=columns, **kwargs)

            def iter_batches(self, *args, columns=None, **kwargs):
                spy.columns.append(columns)
                return super().iter_batches(*args, columns=columns, **kwargs)

            def read(self, columns=None, **kwargs):
                spy.columns.append(columns)
                return super().read(columns=columns, **kwargs)

        monkeypatch.setattr(refresh.io, "open_read", recording_open)
        monkeypatch.setattr(refresh.pq, "ParquetFile", File)


def test_lost_to_reads_only_the_unit_columns_of_the_duplicates(subset_run, monkeypatch):
    _, out = subset_run
    previous = refresh.PreviousRun.load(str(out))
    expected = refresh._legacy_lost_to(previous)  # the old answer: ids joined over data/ and the losers
    assert any(kept - {unit} for unit, kept in expected.items())  # a loser that lost to another unit's page
    spy = _Spy(monkeypatch)
    assert refresh._lost_to(previous) == expected
    assert spy.opened and all("/dropped/dedup-duplicates-" in p for p in spy.opened)
    assert spy.columns and all(sorted(c) == ["kept_unit", "unit"] for c in spy.columns)


def test_lost_to_falls_back_to_joining_ids_for_duplicates_without_unit_columns(subset_run, tmp_path):
    _, out = subset_run
    legacy = tmp_path / "legacy"
    shutil.copytree(out, legacy)
    for path in sorted((legacy / "dropped").glob("dedup-duplicates-*.parquet")):
        pq.write_table(pq.read_table(path).drop_columns(["unit", "kept_unit"]), path)
    assert refresh._lost_to(refresh.PreviousRun.load(str(legacy))) == refresh._lost_to(
        refresh.PreviousRun.load(str(out))) != {}


def test_a_dead_letter_without_unit_column_beside_a_new_units_table_is_an_error(tmp_path):
    path = tmp_path / "read-00000-of-00001.parquet"
    row = DeadLetter("s", "x", "read", "bad", "RecordError", "m", "u").to_row()
    del row["unit"]
    pq.write_table(pa.Table.from_pylist([row]), path)
    with pytest.raises(ValueError, match="without a unit column"):
        list(refresh.carried_letters(str(path), {"u"}))
