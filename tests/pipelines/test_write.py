"""The two-phase writer called directly: spills from several bundles -> id-ordered shards."""

import hashlib
import json
import os
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.clean.dedup_stage import DUPLICATES, Loser, excluded_stat, spill_loser
from pipelines.write import (
    SpillStat,
    SpillWriter,
    WriteConfig,
    _spill_batches,
    bucket_of,
    excluded_ids,
    merge_spill_stats,
    plan_shards,
    record_bytes,
    row_bytes,
    total_spills,
    write_shard,
)
from schemas.page import PageRecord, ProvenanceStep, page_id


def record(i: int, rng: random.Random) -> PageRecord:
    image = b"\x89PNG\r\n\x1a\n" + rng.randbytes(rng.randint(2_000, 9_000))
    return PageRecord(
        id=page_id("src", f"doc-{i}", 1), source="src", source_id=f"doc-{i}", page_number=1,
        domain="documents", language="en", license="cc0", image=image,
        image_sha256=hashlib.sha256(image).hexdigest(), width=10, height=10, task="parse_page",
        instruction="Convert.", response=f"page {i}", response_format="markdown",
        provenance=[ProvenanceStep("read", "1", "x")],
    )


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def spill_bundles(records: list[PageRecord], spill_dir: Path, cfg: WriteConfig, bundles: int):
    """Spill ``records`` round-robin from ``bundles`` writers; (summed stats per key, new files),
    as the DAG's planner combine (``PlanInputs``) leaves them."""
    spilled = []
    for bundle in range(bundles):
        writer = SpillWriter(str(spill_dir), cfg)
        spilled += [writer.add(r) for r in records[bundle::bundles]]
        writer.close()
    return total_spills(spilled)


def spill_losers(records: list[PageRecord], spill_dir: Path, cfg: WriteConfig, bundles: int):
    """Drop ``records`` as dedup does: their duplicates rows spilled from ``bundles`` writers, and
    their rows and bytes summed per (split, plan bucket); (excluded sums, loser spill files)."""
    losers = [Loser(r.id, r.source, "duplicate_image", "kept-id", r.split, record_bytes(r)) for r in records]
    spilled = []
    for bundle in range(bundles):
        writer = SpillWriter(str(spill_dir), cfg, DUPLICATES)
        spilled += [spill_loser(writer, loser) for loser in losers[bundle::bundles]]
        writer.close()
    excluded: dict[tuple[str, int], SpillStat] = {}
    for key, stat in (excluded_stat(loser, cfg.plan_buckets) for loser in losers):
        excluded[key] = merge_spill_stats([excluded[key], stat]) if key in excluded else stat
    return excluded, total_spills(spilled)[1]


def test_shards_hold_every_record_once_in_id_order_across_bundles(tmp_path):
    rng = random.Random(0)
    records = [record(i, rng) for i in range(300)]
    cfg = WriteConfig(shard_bytes=200_000, row_group_bytes=50_000, buckets=8, spill_buffer_bytes=60_000)
    # five bundles, each spilling into all buckets, with mid-bundle flushes
    stats, files = spill_bundles(records, tmp_path / "spill", cfg, 5)
    assert len(files) == 5 and sum(s.rows for s in stats.values()) == 300
    assert dict(merge_spill_stats(stats.values()).sources) == {"src": 300}
    dropped = {records[7].id, records[100].id}
    excluded, loser_files = spill_losers([records[7], records[100]], tmp_path / "losers", cfg, 2)
    plans = plan_shards(stats.items(), files, cfg, excluded.items(), loser_files)
    assert len(plans) > 3
    assert [(p.first_bucket, p.last_bucket) for p in plans][0][0] == 0 and plans[-1].last_bucket == cfg.plan_buckets - 1
    assert all(a.last_bucket + 1 == b.first_bucket for a, b in zip(plans, plans[1:]))  # they tile the id space
    assert sorted(i for p in plans for i in excluded_ids(p, cfg).to_pylist()) == sorted(dropped)
    assert sum(p.rows for p in plans) == 298
    spills = sorted(p.name for p in (tmp_path / "spill").iterdir())
    assert len([n for n in spills if n.endswith(".arrow")]) == 5  # one file per bundle, not per bucket
    assert len([n for n in spills if n.endswith(".arrow.buckets.json")]) == 5
    assert all(len(plan.files) <= 5 for plan in plans)

    before = open_fds()
    results = [write_shard(plan, str(tmp_path), cfg) for plan in plans]
    assert open_fds() == before  # spill files (memory-mapped) are closed again

    ids = []
    for result in results:
        table = pq.read_table(tmp_path / result["file"])
        assert table.num_rows == result["rows"]
        assert hashlib.sha256((tmp_path / result["file"]).read_bytes()).hexdigest() == result["sha256"]
        rows = table.to_pylist()
        ids += [row["id"] for row in rows]
        for row in rows:  # bytes survive the spill and the shard unchanged
            assert hashlib.sha256(row["image"]["bytes"]).hexdigest() == row["image_sha256"]
    expected = sorted(r.id for r in records if r.id not in dropped)
    assert ids == expected


def test_a_shard_reads_only_the_batches_of_its_buckets(tmp_path):
    rng = random.Random(1)
    cfg = WriteConfig(buckets=4, spill_buffer_bytes=30_000)
    writer = SpillWriter(str(tmp_path / "spill"), cfg)
    records = [record(i, rng) for i in range(60)]
    spilled = [writer.add(r) for r in records]
    writer.close()
    assert [s.new_file is not None for s in spilled] == [True] + [False] * 59  # one file per bundle and split
    path = spilled[0].new_file[1]
    index = json.loads(Path(path + ".buckets.json").read_text())
    assert len(index) > 4 and sorted(set(index)) == [0, 1, 2, 3]  # flushes mid-bundle, every bucket
    seen = []
    batches = _spill_batches(path, tuple(index), range(2, 3), lambda b: seen.append(b) or b)
    assert len(seen) == index.count(2)
    assert {bucket_of(i, 4) for b in batches for i in b.column("id").to_pylist()} == {2}
    assert sum(b.num_rows for b in batches) == sum(1 for r in records if bucket_of(r.id, 4) == 2)


def test_shards_are_cut_to_equal_sizes_from_aggregates_alone(tmp_path):
    """The planner sees per-bucket sums, never the records: the fewest shards that keep within the
    target, of equal sizes to within one plan bucket (no small last shard), and a plan bucket is never
    split."""
    rng = random.Random(2)
    records = [record(i, rng) for i in range(400)]
    cfg = WriteConfig(shard_bytes=150_000, buckets=4, plan_buckets=256)
    stats, files = spill_bundles(records, tmp_path / "spill", cfg, 3)
    plans = plan_shards(stats.items(), files, cfg)
    biggest_bucket = max(s.bytes for s in stats.values())
    total = sum(s.bytes for s in stats.values())
    assert len(plans) == -(-total // cfg.shard_bytes) > 2
    for plan in plans:
        assert abs(plan.approx_bytes - total / len(plans)) < biggest_bucket
        assert plan.approx_bytes < cfg.shard_bytes + biggest_bucket
    assert sum(p.rows for p in plans) == 400
    results = [write_shard(plan, str(tmp_path), cfg) for plan in plans]
    assert [r["rows"] for r in results] == [p.rows for p in plans]
    for plan, result in zip(plans, results):
        ids = pq.read_table(tmp_path / result["file"], columns=["id"]).column("id").to_pylist()
        assert {bucket_of(i, cfg.plan_buckets) for i in ids} <= set(range(plan.first_bucket, plan.last_bucket + 1))


def test_a_plan_bucket_count_that_does_not_nest_spill_buckets_is_refused():
    with pytest.raises(ValueError, match="plan_buckets"):
        WriteConfig(buckets=64, plan_buckets=1000)


def test_dead_letters_are_sharded_per_stage_like_pages(tmp_path):
    """Dead letters go through the same two-phase writer (a run may dead-letter millions): per stage,
    id-ordered shards from several bundles, every letter once."""
    from pipelines.write import DEAD_LETTERS
    from schemas.deadletter import DeadLetter

    letters = [DeadLetter("src", f"doc-{i}", stage, "corrupt_pdf", "RecordError", f"cannot open doc-{i}")
               for stage in ("read", "clean:short") for i in range(300)]
    cfg = WriteConfig(shard_bytes=20_000, buckets=4, plan_buckets=1024, spill_buffer_bytes=5_000)
    spilled = []
    for bundle in range(3):
        writer = SpillWriter(str(tmp_path / "spill"), cfg, DEAD_LETTERS)
        spilled += [writer.add_dead_letter(letter) for letter in letters[bundle::3]]
        writer.close()
    stats, files = total_spills(spilled)
    plans = plan_shards(stats.items(), files, cfg)
    results = [write_shard(plan, str(tmp_path), cfg, DEAD_LETTERS) for plan in plans]
    for stage, name in (("read", "read"), ("clean:short", "clean_short")):
        mine = [r for r in results if r["split"] == stage]
        n = len(mine)
        assert n > 1
        assert [r["file"] for r in mine] == [f"dead_letter/{name}-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
        rows = [row for r in mine for row in pq.read_table(tmp_path / r["file"]).to_pylist()]
        assert sorted(r["source_id"] for r in rows) == sorted(f"doc-{i}" for i in range(300))
        assert [r["id"] for r in rows] == sorted(r["id"] for r in rows) and {r["stage"] for r in rows} == {stage}


def test_most_records_dropped_each_shard_reads_only_its_own_dropped_ids(tmp_path):
    """Dedup drops two thirds of the records: the planner gets per-(split, plan bucket) sums of them
    and the losers' spill files (never their ids), sizes shards by what they keep, and each shard
    reads the dropped ids of its own range only."""
    rng = random.Random(3)
    records = [record(i, rng) for i in range(300)]
    cfg = WriteConfig(shard_bytes=100_000, buckets=4, plan_buckets=64, spill_buffer_bytes=40_000)
    stats, files = spill_bundles(records, tmp_path / "spill", cfg, 3)
    gone = [r for i, r in enumerate(records) if i % 3]
    excluded, loser_files = spill_losers(gone, tmp_path / "losers", cfg, 4)
    assert len(loser_files) == 4 and len(excluded) <= cfg.plan_buckets < len(gone)
    assert all(isinstance(stat, SpillStat) for stat in excluded.values())
    plans = plan_shards(stats.items(), files, cfg, excluded.items(), loser_files)
    kept = [r for i, r in enumerate(records) if i % 3 == 0]
    assert sum(p.rows for p in plans) == len(kept)
    assert sum(p.approx_bytes for p in plans) == sum(record_bytes(r) for r in kept)
    # sized by the kept bytes: 100 records of ~6 KB each give ~6 shards, not ~18
    assert len(plans) == -(-sum(p.approx_bytes for p in plans) // cfg.shard_bytes)
    assert 3 <= len(plans) <= 7
    seen = []
    for plan in plans:
        ids = excluded_ids(plan, cfg).to_pylist()
        assert plan.in_range(ids).to_pylist() == [True] * len(ids)
        seen += ids
    assert sorted(seen) == sorted(r.id for r in gone)
    results = [write_shard(plan, str(tmp_path), cfg) for plan in plans]
    assert [r["rows"] for r in results] == [p.rows for p in plans]
    written = [i for r in results for i in pq.read_table(tmp_path / r["file"], columns=["id"]).column("id").to_pylist()]
    assert written == sorted(r.id for r in kept)


def test_a_split_dedup_empties_keeps_its_losers_for_a_refresh(tmp_path):
    """Every record of the eval split is a duplicate: the split gets one empty shard, whose losers file holds
    the dropped records in full (an incremental refresh carries them from there)."""
    from dataclasses import replace

    rng = random.Random(5)
    records = [record(i, rng) for i in range(6)] + [replace(record(i, rng), split="eval") for i in range(6, 9)]
    cfg = WriteConfig(buckets=4, plan_buckets=64)
    stats, files = spill_bundles(records, tmp_path / "spill", cfg, 2)
    gone = [r for r in records if r.split == "eval"]
    excluded, loser_files = spill_losers(gone, tmp_path / "losers", cfg, 1)
    plans = plan_shards(stats.items(), files, cfg, excluded.items(), loser_files)
    (empty,) = [p for p in plans if p.split == "eval"]
    assert empty.rows == 0 and empty.name == "eval-00000-of-00001.parquet"
    result = write_shard(empty, str(tmp_path), cfg)
    assert result["rows"] == 0 and pq.read_table(tmp_path / result["file"]).num_rows == 0
    kept = pq.read_table(tmp_path / result["losers_file"]).column("id").to_pylist()
    assert kept == sorted(r.id for r in gone)


def test_the_planner_refuses_exclusions_that_were_never_spilled(tmp_path):
    rng = random.Random(4)
    records = [record(i, rng) for i in range(5)]
    cfg = WriteConfig(buckets=4, plan_buckets=64)
    stats, files = spill_bundles(records, tmp_path / "spill", cfg, 1)
    key = next(iter(stats))
    with pytest.raises(ValueError, match="rows excluded from"):
        plan_shards(stats.items(), files, cfg, [(key, SpillStat(stats[key].rows + 1, 0, ()))])
    empty = next(b for b in range(cfg.plan_buckets) if ("train", b) not in stats)
    with pytest.raises(ValueError, match=f"plan bucket {empty}.*none were spilled"):
        plan_shards(stats.items(), files, cfg, [(("train", empty), SpillStat(1, 10, ()))])


def test_row_groups_are_capped_by_bytes_and_rows_and_shards_carry_a_page_index(tmp_path):
    rng = random.Random(1)
    records = [record(i, rng) for i in range(60)]
    cfg = WriteConfig(row_group_bytes=20_000, row_group_rows=5, buckets=8)
    stats, files = spill_bundles(records, tmp_path / "spill", cfg, 2)
    [plan] = plan_shards(stats.items(), files, cfg)
    write_shard(plan, str(tmp_path / "out"), cfg)
    shard = pq.ParquetFile(tmp_path / "out" / "data" / plan.name)
    groups = [shard.read_row_group(i) for i in range(shard.num_row_groups)]
    assert sum(g.num_rows for g in groups) == 60
    assert all(g.num_rows <= 5 and sum(row_bytes(g).to_pylist()) <= 20_000 for g in groups)
    assert any(g.num_rows < 5 for g in groups[:-1])  # the byte cap cut some groups short
    meta = shard.metadata
    assert all(meta.row_group(i).column(j).has_offset_index
               for i in range(meta.num_row_groups) for j in range(meta.num_columns))
    assert meta.row_group(0).column(0).has_column_index  # id: min/max per page (large images get none)


def test_the_planner_combine_sums_spills_and_losers_across_bundles(tmp_path):
    """``PlanInputs`` (the DAG's one combine before the planner), fed per-record envelopes in
    several partial accumulators and merged, gives the planner what summing per key and
    gathering gave it: the same shard plans, with dedup's exclusions."""
    from pipelines.accounting import Envelope, Kind, SpillTotal, by_kind
    from pipelines.transforms import PlanInputs

    rng = random.Random(4)
    records = [record(i, rng) for i in range(120)]
    cfg = WriteConfig(shard_bytes=100_000, buckets=4, plan_buckets=64, spill_buffer_bytes=30_000)
    spilled = []
    for bundle in range(3):
        writer = SpillWriter(str(tmp_path / "spill"), cfg)
        spilled += [writer.add(r) for r in records[bundle::3]]
        writer.close()
    gone = [Loser(r.id, r.source, "duplicate_image", "kept-id", r.split, record_bytes(r)) for r in records[::4]]
    excluded: dict[tuple[str, int], SpillStat] = {}
    for key, stat in (excluded_stat(loser, cfg.plan_buckets) for loser in gone):
        excluded[key] = merge_spill_stats([excluded[key], stat]) if key in excluded else stat
    loser_spills = []
    for bundle in range(2):
        writer = SpillWriter(str(tmp_path / "losers"), cfg, DUPLICATES)
        loser_spills += [spill_loser(writer, loser) for loser in gone[bundle::2]]
        writer.close()
    envelopes = ([Envelope(Kind.SPILL, s) for s in spilled]
                 + [Envelope(Kind.EXCLUDED, SpillTotal(k, s)) for k, s in excluded.items()]
                 + [Envelope(Kind.LOSER, s) for s in loser_spills])
    rng.shuffle(envelopes)
    fn = PlanInputs()
    parts = []
    for part in range(3):
        acc = fn.create_accumulator()
        for envelope in envelopes[part::3]:
            acc = fn.add_input(acc, envelope)
        parts.append(acc)
    routed = by_kind(fn.extract_output(fn.merge_accumulators(parts)),
                     Kind.STAT, Kind.FILE, Kind.EXCLUDED, Kind.LOSER_FILE)

    stats, files = total_spills(spilled)
    assert {t.key: t.stat for t in routed[Kind.STAT]} == stats
    assert sorted(routed[Kind.FILE]) == sorted(files)
    assert {t.key: t.stat for t in routed[Kind.EXCLUDED]} == excluded
    assert sorted(routed[Kind.LOSER_FILE]) == sorted(total_spills(loser_spills)[1])
    assert len(routed[Kind.FILE]) == 3 and len(routed[Kind.LOSER_FILE]) == 2
    planned = plan_shards(routed[Kind.STAT], routed[Kind.FILE], cfg, routed[Kind.EXCLUDED], routed[Kind.LOSER_FILE])
    expected = plan_shards(stats.items(), files, cfg, excluded.items(), total_spills(loser_spills)[1])
    assert [(p.first_bucket, p.last_bucket, p.rows, p.approx_bytes) for p in planned] == \
        [(p.first_bucket, p.last_bucket, p.rows, p.approx_bytes) for p in expected]
    assert sum(p.rows for p in planned) == len(records) - len(gone)
    with pytest.raises(ValueError, match="unexpected envelope kind 'dead'"):
        fn.add_input(fn.create_accumulator(), Envelope(Kind.DEAD, None))


def test_an_output_on_a_file_system_without_locks_runs_unlocked(tmp_path, monkeypatch, capsys):
    """flock failing with ENOLCK (NFS without lockd): the run goes on with a warning, the descriptor is
    closed, and a folder the lock made and nothing else used is removed."""
    import errno
    import fcntl
    import os

    from pipelines.write import output_lock

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    fds = len(os.listdir("/proc/self/fd"))
    with output_lock(str(tmp_path / "out")):
        assert (tmp_path / "out").is_dir()
    assert not (tmp_path / "out").exists() and len(os.listdir("/proc/self/fd")) == fds
    assert "cannot lock" in capsys.readouterr().err
