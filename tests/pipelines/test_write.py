"""The two-phase writer called directly: spills from several bundles -> id-ordered shards."""

import hashlib
import json
import os
import random
from pathlib import Path

import pyarrow.parquet as pq

from pipelines.write import SpillWriter, WriteConfig, _spill_batches, bucket_of, plan_shards, write_shard
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


def test_shards_hold_every_record_once_in_id_order_across_bundles(tmp_path):
    rng = random.Random(0)
    records = [record(i, rng) for i in range(300)]
    cfg = WriteConfig(shard_bytes=200_000, row_group_bytes=50_000, buckets=8, spill_buffer_bytes=60_000)
    entries = []
    for bundle in range(5):  # five bundles, each spilling into all buckets, with mid-bundle flushes
        writer = SpillWriter(str(tmp_path / "spill"), cfg)
        entries += [writer.add(r) for r in records[bundle::5]]
        writer.close()
    dropped = {records[7].id, records[100].id}
    plans = plan_shards(entries, cfg.shard_bytes, cfg.buckets, exclude=dropped)
    assert len(plans) > 3
    spills = sorted(p.name for p in (tmp_path / "spill").iterdir())
    assert len([n for n in spills if n.endswith(".arrow")]) == 5  # one file per bundle, not per bucket
    assert len([n for n in spills if n.endswith(".arrow.buckets.json")]) == 5
    assert all(len(plan.files) <= 5 for plan in plans)

    before = open_fds()
    results = [write_shard(plan, str(tmp_path / "data"), cfg) for plan in plans]
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
    entries = [writer.add(record(i, rng)) for i in range(60)]
    writer.close()
    path = entries[0].path
    index = json.loads(Path(path + ".buckets.json").read_text())
    assert len(index) > 4 and sorted(set(index)) == [0, 1, 2, 3]  # flushes mid-bundle, every bucket
    seen = []
    batches = _spill_batches(path, range(2, 3), lambda b: seen.append(b) or b)
    assert len(seen) == index.count(2)
    assert {bucket_of(i, 4) for b in batches for i in b.column("id").to_pylist()} == {2}
    assert sum(b.num_rows for b in batches) == sum(1 for e in entries if e.bucket == 2)
