"""Sharded Parquet output with Hub naming, dead-letter files and the manifest file.

Writing is two-phase so that shard contents are a function of the records alone (not of bundle
boundaries or worker count) while memory stays bounded:

1. ``SpillWriter`` (one per bundle) appends records to small temporary Parquet files, one per
   id-range bucket, flushing whenever its buffers pass a byte budget.
2. ``plan_shards`` orders all record ids of a split and cuts them into id ranges of about
   ``shard_bytes``; ``write_shard`` reads the spill files of a range (with an id filter), sorts the
   rows by id and writes ``data/<split>-NNNNN-of-MMMMM.parquet`` atomically (write then rename).

So a worker holds at most one shard (~256 MB by default) in memory, however large the corpus.
"""

from __future__ import annotations

import hashlib
import io as _io
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import io
from schemas.deadletter import DEAD_LETTER_SCHEMA, DeadLetter
from schemas.page import PAGE_SCHEMA, PageRecord


@dataclass(frozen=True)
class WriteConfig:
    shard_bytes: int = 256 * 1024 * 1024
    row_group_bytes: int = 64 * 1024 * 1024
    compression: str = "zstd"
    buckets: int = 64
    spill_buffer_bytes: int = 64 * 1024 * 1024


@dataclass
class SpillFile:
    split: str
    bucket: int
    path: str
    ids: list[tuple[str, int]] = field(default_factory=list)  # (record id, approximate bytes)


@dataclass(frozen=True)
class ShardPlan:
    split: str
    index: int
    count: int
    first_id: str
    last_id: str
    files: tuple[str, ...]
    rows: int
    approx_bytes: int

    @property
    def name(self) -> str:
        return f"{self.split}-{self.index:05d}-of-{self.count:05d}.parquet"


def record_bytes(record: PageRecord) -> int:
    return len(record.image) + len(record.response) + len(record.text_layer or "") + 512


def bucket_of(record_id: str, buckets: int) -> int:
    """Range partition on the hex id, so bucket order is id order."""
    return int(record_id[:8], 16) * buckets // 16**8


class SpillWriter:
    """Buffers records per (split, bucket) and spills them to temporary Parquet files."""

    def __init__(self, spill_dir: str, cfg: WriteConfig):
        self.spill_dir = spill_dir
        self.cfg = cfg
        self.token = uuid.uuid4().hex[:12]
        self.buffers: dict[tuple[str, int], list[dict]] = {}
        self.buffer_bytes: dict[tuple[str, int], int] = {}
        self.writers: dict[tuple[str, int], tuple[pq.ParquetWriter, object, SpillFile]] = {}

    def add(self, record: PageRecord) -> None:
        key = (record.split, bucket_of(record.id, self.cfg.buckets))
        size = record_bytes(record)
        self.buffers.setdefault(key, []).append(record.to_row())
        self.buffer_bytes[key] = self.buffer_bytes.get(key, 0) + size
        spill = self._spill_file(key)
        spill.ids.append((record.id, size))
        if sum(self.buffer_bytes.values()) > self.cfg.spill_buffer_bytes:
            self._flush(max(self.buffer_bytes, key=self.buffer_bytes.get))

    def _spill_file(self, key: tuple[str, int]) -> SpillFile:
        if key not in self.writers:
            split, bucket = key
            path = io.join(self.spill_dir, f"{split}-{bucket:05d}-{self.token}.parquet")
            handle = io.open_write(path)
            writer = pq.ParquetWriter(handle, PAGE_SCHEMA, compression="none")
            self.writers[key] = (writer, handle, SpillFile(split, bucket, path))
        return self.writers[key][2]

    def _flush(self, key: tuple[str, int]) -> None:
        rows = self.buffers.pop(key, [])
        self.buffer_bytes.pop(key, None)
        if rows:
            self.writers[key][0].write_table(pa.Table.from_pylist(rows, schema=PAGE_SCHEMA))

    def close(self) -> list[SpillFile]:
        for key in list(self.buffers):
            self._flush(key)
        files = []
        for writer, handle, spill in self.writers.values():
            writer.close()
            handle.close()
            files.append(spill)
        self.writers.clear()
        return files


def plan_shards(spills: list[SpillFile], shard_bytes: int, buckets: int) -> list[ShardPlan]:
    """Cut each split's id-ordered records into shards of about ``shard_bytes``."""
    plans: list[ShardPlan] = []
    for split in sorted({s.split for s in spills}):
        files = [s for s in spills if s.split == split]
        ids = sorted(pair for s in files for pair in s.ids)
        cuts: list[tuple[int, int, int]] = []  # (start, end, bytes)
        start, acc = 0, 0
        for i, (_, size) in enumerate(ids):
            acc += size
            if acc >= shard_bytes:
                cuts.append((start, i + 1, acc))
                start, acc = i + 1, 0
        if start < len(ids):
            cuts.append((start, len(ids), acc))
        for index, (lo, hi, nbytes) in enumerate(cuts):
            first, last = ids[lo][0], ids[hi - 1][0]
            b_lo, b_hi = bucket_of(first, buckets), bucket_of(last, buckets)
            touched = sorted(s.path for s in files if b_lo <= s.bucket <= b_hi)
            plans.append(ShardPlan(split, index, len(cuts), first, last, tuple(touched), hi - lo, nbytes))
    return plans


def write_shard(plan: ShardPlan, data_dir: str, cfg: WriteConfig) -> dict:
    """Write one shard: rows with ids in [first_id, last_id], sorted by id; atomic rename."""
    tables = []
    for path in plan.files:
        with io.open_read(path) as fh:
            table = pq.read_table(fh, schema=PAGE_SCHEMA,
                                  filters=[("id", ">=", plan.first_id), ("id", "<=", plan.last_id)])
        if table.num_rows:
            tables.append(table)
    table = pa.concat_tables(tables) if tables else PAGE_SCHEMA.empty_table()
    table = table.sort_by([("id", "ascending"), ("image_sha256", "ascending")])
    table = table.replace_schema_metadata(PAGE_SCHEMA.metadata)
    avg = max(1, plan.approx_bytes // max(1, plan.rows))
    rows_per_group = max(1, cfg.row_group_bytes // avg)
    buf = _io.BytesIO()
    pq.write_table(table, buf, compression=cfg.compression, row_group_size=rows_per_group,
                   write_statistics=True)
    data = buf.getvalue()
    final = io.join(data_dir, plan.name)
    io.write_bytes_atomic(final, data)
    return {
        "file": f"data/{plan.name}",
        "split": plan.split,
        "rows": table.num_rows,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def write_dead_letters(stage: str, letters: list[DeadLetter], dead_dir: str) -> dict:
    """All dead letters of one stage, sorted, as ``dead_letter/<stage>.parquet``."""
    rows = sorted((d.to_row() for d in letters), key=lambda r: (r["source"], r["source_id"], r["reason"]))
    buf = _io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=DEAD_LETTER_SCHEMA), buf, compression="zstd")
    name = f"{stage.replace(':', '_')}.parquet"
    io.write_bytes_atomic(io.join(dead_dir, name), buf.getvalue())
    return {"file": f"dead_letter/{name}", "stage": stage, "rows": len(rows)}
