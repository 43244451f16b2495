"""The two-phase writer called directly: spills from several bundles -> id-ordered shards."""

import hashlib
import os
import random

import pyarrow.parquet as pq

from pipelines.write import SpillWriter, WriteConfig, plan_shards, write_shard
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
    assert len(plans) > 3 and len({p for plan in plans for p in plan.files}) > 8

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
