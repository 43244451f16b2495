"""Sharded Parquet output with Hub naming: the pages (``data/``), the dead letters
(``dead_letter/``, one "split" per stage) and dedup's dropped duplicates (``dropped/dedup-duplicates-*``,
``pipelines.clean.dedup_stage.DUPLICATES``), all through the same two-phase writer, and samples of
dropped records.

Writing is two-phase so that shard contents are a function of the records alone (not of bundle
boundaries or worker count) while memory stays bounded:

1. ``SpillWriter`` (one per bundle) buffers records per id-range bucket and, whenever its buffers
   pass a byte budget, appends the largest bucket's rows as one record batch to the bundle's
   temporary Arrow IPC file (one file per bundle and split). At the end of the bundle it writes the
   file's index beside it (``<file>.buckets.json``: the bucket of each batch). IPC, not Parquet: a
   spill is read once, by ``write_shard``, and IPC is written and memory-mapped back with no
   encoding (spill plus read-back 0.47 ms/page against 1.94 ms with uncompressed Parquet). One file
   per bundle, not per bucket, because on an object store every file costs requests (and, through
   Beam's S3 filesystem, a new boto3 client, ~0.2 s of CPU, per call).
2. ``plan_shards`` cuts each split's id space into shards of about ``shard_bytes`` from small
   aggregates, never from a list of records: the rows and bytes spilled per (split, plan bucket)
   (``plan_buckets``, 65,536 by default, each a 1/65,536 slice of the id space; summed by
   ``merge_spill_stats`` as a Beam combine) and the committed spill files (one name per file,
   emitted when a bundle opens it, so a retried bundle's stray file is never read). It reads each
   file's bucket index once and hands each shard the indexes of its files. ``write_shard`` reads,
   from the spill files of its range, only the batches of the range's buckets (with an id filter),
   sorts the rows by id and writes ``data/<split>-NNNNN-of-MMMMM.parquet`` atomically (write then rename).

Records that a grouping stage (dedup) drops after they were spilled stay in the spill files and are
left out when shards are written, bounded the same way: their ids are spilled too (by the dedup
step, one file per bundle, bucketed by id), the planner gets their rows and bytes summed per
(split, plan bucket) (subtracted from the spill sums, so shards are sized by what they keep) and
the names of those spill files, and each shard reads the dropped ids of its own id range alone
(``excluded_ids``).

So a worker holds at most one shard (~256 MB by default, twice that while sorting it) in memory,
and the one planning step holds at most ``plan_buckets`` aggregates (and as many exclusion sums) per
split plus one name and index per spill file, however many records the corpus has or dedup drops.
Shard boundaries fall on plan-bucket edges, so shard sizes are within one plan bucket (1/65,536 of a
split) of ``shard_bytes``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io as _io
import json
import os
import shutil
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines import io
from schemas.config import option
from schemas.deadletter import DEAD_LETTER_SCHEMA, DeadLetter
from schemas.page import PAGE_SCHEMA, PageRecord


@dataclass(frozen=True)
class ShardedTable:
    """One sharded output: its folder under the run's output, Arrow schema and row order. Rows carry
    a hex ``id`` column, which places them in id-range buckets."""

    folder: str
    schema: pa.Schema
    sort_keys: tuple[str, ...]


PAGES = ShardedTable("data", PAGE_SCHEMA, ("id", "image_sha256"))
# Dead letters are sharded like pages (a run may dead-letter millions); one "split" per stage. Each names
# its input unit (``unit``), by which an incremental refresh carries a reused unit's letters over.
DEAD_LETTERS = ShardedTable("dead_letter", DEAD_LETTER_SCHEMA,
                            ("id", "source", "source_id", "reason", "message", "unit"))
# The full records dedup dropped, one file per page shard that lost any (named like it): what an
# incremental refresh carries over with the kept pages (pipelines/refresh.py).
LOSER_PAGES = ShardedTable("refresh/dedup_losers", PAGE_SCHEMA, ("id", "image_sha256"))


# The codecs Parquet files may use (pyarrow.parquet's names, any case); bz2 is an Arrow codec but not a Parquet one.
PARQUET_CODECS = ("none", "snappy", "gzip", "brotli", "lz4", "lz4_raw", "zstd")


def check_codec(name: str) -> None:
    """ValueError unless ``name`` is a Parquet codec this pyarrow writes: checked with the config, since a
    bad codec fails only when the first shard is written (after every page is rendered, or after a
    release's previous files are gone)."""
    usable = [c for c in PARQUET_CODECS if c == "none" or pa.Codec.is_available(c)]
    if name.lower() not in usable:
        raise ValueError(f"compression: unknown or unavailable Parquet codec {name!r}; known: {', '.join(usable)}")


@dataclass(frozen=True)
class WriteConfig:
    """How the corpus is written: shard and row-group sizes, and the spill files shards are planned from."""

    shard_bytes: int = option(256 * 1024 * 1024, help="most bytes per shard (about: shards of a split are cut to "
                                                      "equal sizes, to a plan bucket)")
    row_group_bytes: int = option(64 * 1024 * 1024, help="most uncompressed bytes per Parquet row group")
    row_group_rows: int = option(1000, help="most rows per Parquet row group")
    compression: str = option("zstd", help="Parquet compression codec")
    buckets: int = option(64, help="spill buckets: the id ranges a spill file's record batches are sorted into")
    spill_buffer_bytes: int = option(64 * 1024 * 1024, help="buffered bytes per worker above which the largest "
                                                            "bucket is flushed to its spill file")
    plan_buckets: int = option(65_536, help="shard boundaries fall on these id ranges (a multiple of buckets)")

    def __post_init__(self):
        check_codec(self.compression)
        if self.plan_buckets % self.buckets or not 0 < self.plan_buckets <= 16**8:
            raise ValueError(f"write.plan_buckets ({self.plan_buckets}) must be a multiple of write.buckets "
                             f"({self.buckets}) and at most 16**8")


@dataclass(frozen=True)
class SpillStat:
    """Rows and bytes spilled into one (split, plan bucket), and rows per source; ``merge_spill_stats``
    sums them. Emitted per record, summed in each bundle before they move (a Beam combine)."""

    rows: int
    bytes: int
    sources: tuple[tuple[str, int], ...]


def merge_spill_stats(stats: Iterable[SpillStat]) -> SpillStat:
    rows = nbytes = 0
    sources: dict[str, int] = {}
    for stat in stats:
        rows += stat.rows
        nbytes += stat.bytes
        for source, n in stat.sources:
            sources[source] = sources.get(source, 0) + n
    return SpillStat(rows, nbytes, tuple(sorted(sources.items())))


@dataclass(frozen=True)
class Spilled:
    """What ``SpillWriter.add`` reports for one record: its (split, plan bucket) and stat, and the
    spill file's (split, path) when this record opened it (valid once the writer is closed). The
    file is named from ``process``, not at bundle end, because Beam's DaskRunner drops
    ``finish_bundle`` outputs; either way it is committed only with its bundle."""

    key: tuple[str, int]
    stat: SpillStat
    new_file: tuple[str, str] | None


@dataclass(frozen=True)
class ShardPlan:
    split: str
    index: int
    count: int
    first_bucket: int  # plan buckets, inclusive
    last_bucket: int
    plan_buckets: int
    files: tuple[tuple[str, tuple[int, ...]], ...]  # (spill file, its index: the bucket of each batch)
    rows: int  # planned: spilled minus excluded
    approx_bytes: int
    # Spill files (with their indexes) of rows whose ids a grouping stage (dedup) drops: the shard
    # reads the ids of its own range from them and leaves those records out.
    exclude_files: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def name(self) -> str:
        split = self.split.replace(":", "_").replace("/", "_")  # dead-letter "splits" are stage names
        return f"{split}-{self.index:05d}-of-{self.count:05d}.parquet"

    def id_bounds(self) -> tuple[str, str | None]:
        """The shard's ids as a range of 8-hex-digit id prefixes: [low, high), high None at the end."""
        return _prefix_at(self.first_bucket, self.plan_buckets), (
            _prefix_at(self.last_bucket + 1, self.plan_buckets) if self.last_bucket + 1 < self.plan_buckets else None)

    def in_range(self, ids: pa.Array) -> pa.Array:
        """A boolean mask: which of ``ids`` (hex ids) fall in the shard's range."""
        low, high = self.id_bounds()  # 8-character prefixes: id >= low iff id[:8] >= low
        prefixes = pc.utf8_slice_codeunits(ids, 0, 8)
        mask = pc.greater_equal(prefixes, low)
        return mask if high is None else pc.and_(mask, pc.less(prefixes, high))

    def spill_buckets(self, cfg: WriteConfig) -> range:
        """The spill buckets (``cfg.buckets``) the shard's range overlaps."""
        per_coarse = self.plan_buckets // cfg.buckets
        return range(self.first_bucket // per_coarse, self.last_bucket // per_coarse + 1)


def _prefix_at(bucket: int, buckets: int) -> str:
    """The smallest 8-hex-digit id prefix in ``bucket`` of ``buckets`` (inverse of ``bucket_of``)."""
    return f"{-(-bucket * 16**8 // buckets):08x}"


def record_bytes(record: PageRecord) -> int:
    return len(record.image) + len(record.response) + len(record.text_layer or "") + 512


def bucket_of(record_id: str, buckets: int) -> int:
    """Range partition on the hex id, so bucket order is id order."""
    return int(record_id[:8], 16) * buckets // 16**8


class SpillWriter:
    """Buffers one bundle's rows per (split, bucket) and spills them to one Arrow IPC file per
    split (a record batch per flush), with the batches' buckets in ``<file>.buckets.json``."""

    def __init__(self, spill_dir: str, cfg: WriteConfig, table: ShardedTable = PAGES):
        self.spill_dir = spill_dir
        self.cfg = cfg
        self.table = table
        self.token = uuid.uuid4().hex[:12]
        self.buffers: dict[tuple[str, int], list[dict]] = {}
        self.buffer_bytes: dict[tuple[str, int], int] = {}
        self.files: dict[str, _SpillFile] = {}

    def add(self, record: PageRecord) -> Spilled:
        """Buffer one page record; a file it names is complete once ``close`` has run."""
        return self.add_row(record.split, record.id, record.to_row(), record_bytes(record), record.source)

    def add_dead_letter(self, letter: DeadLetter) -> Spilled:
        """Buffer one dead letter (``table`` is ``DEAD_LETTERS``): its stage is its split."""
        row = letter.to_row()
        return self.add_row(letter.stage, row["id"], row, sum(len(v) for v in row.values()) + 64, letter.source)

    def add_row(self, split: str, row_id: str, row: dict, size: int, source: str) -> Spilled:
        key = (split, bucket_of(row_id, self.cfg.buckets))
        self.buffers.setdefault(key, []).append(row)
        self.buffer_bytes[key] = self.buffer_bytes.get(key, 0) + size
        new_file = None if split in self.files else (split, self._file(split).path)
        if sum(self.buffer_bytes.values()) > self.cfg.spill_buffer_bytes:
            self._flush(max(self.buffer_bytes, key=self.buffer_bytes.get))
        return Spilled((split, bucket_of(row_id, self.cfg.plan_buckets)), SpillStat(1, size, ((source, 1),)), new_file)

    def _file(self, split: str) -> _SpillFile:
        if split not in self.files:
            name = split.replace(":", "_").replace("/", "_")
            path = io.join(self.spill_dir, f"{name}-{self.token}.arrow")
            handle = io.open_write(path)
            self.files[split] = _SpillFile(path, handle, pa.ipc.new_file(handle, self.table.schema), [])
        return self.files[split]

    def _flush(self, key: tuple[str, int]) -> None:
        rows = self.buffers.pop(key, [])
        self.buffer_bytes.pop(key, None)
        if rows:
            spill = self.files[key[0]]
            spill.writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=self.table.schema))
            spill.buckets.append(key[1])

    def close(self) -> None:
        for key in sorted(self.buffers):
            self._flush(key)
        for spill in self.files.values():
            spill.writer.close()
            spill.handle.close()
            # A plain write: the name is this bundle's own and nothing reads it before close.
            with io.open_write(_index_path(spill.path)) as fh:
                fh.write(json.dumps(spill.buckets).encode())
        self.files.clear()


@dataclass
class _SpillFile:
    path: str
    handle: object
    writer: pa.ipc.RecordBatchFileWriter
    buckets: list[int]  # the bucket of each record batch written, in order


def _index_path(spill_path: str) -> str:
    return spill_path + ".buckets.json"


def _read_index(spill_path: str) -> tuple[int, ...]:
    return tuple(json.loads(io.read_bytes(_index_path(spill_path))))


_Kept = TypeVar("_Kept")


def _spill_batches(path: str, index: tuple[int, ...], buckets: range,
                   keep: Callable[[pa.RecordBatch], _Kept]) -> list[_Kept]:
    """``keep(batch)`` for each record batch of one spill file that holds one of ``buckets``
    (``index``: the file's bucket of each batch, read once by the planner); the others are never
    read (only their footer entries). Local files are memory-mapped. The file is closed on return,
    so a shard over thousands of spill files never holds thousands of descriptors; kept batches
    that point into a map keep just the mapping alive (Arrow unmaps it with the last of them)."""
    wanted = [i for i, bucket in enumerate(index) if bucket in buckets]
    if not wanted:
        return []
    with (pa.memory_map(path) if "://" not in path else io.open_read(path)) as source:
        reader = pa.ipc.open_file(source)
        return [keep(reader.get_batch(i)) for i in wanted]


def plan_shards(stats: Iterable[tuple[tuple[str, int], SpillStat]], files: Iterable[tuple[str, str]],
                cfg: WriteConfig, excluded: Iterable[tuple[tuple[str, int], SpillStat]] = (),
                exclude_files: Iterable[tuple[str, str]] = ()) -> list[ShardPlan]:
    """Cut each split's id space into the fewest shards of at most about ``cfg.shard_bytes``, of equal
    sizes (each within one plan bucket's bytes of the split's bytes over the shard count).

    ``stats``: ((split, plan bucket), SpillStat), one per key (``merge_spill_stats`` already applied);
    ``files``: (split, path) of every committed spill file. Records a grouping stage (dedup) drops
    stay in the spill files: ``excluded`` sums their rows and bytes per (split, plan bucket) like
    ``stats`` (shards are sized by what they will hold), and ``exclude_files`` are the (split, path)
    spill files of their ids (any table with an ``id`` column, spilled with ``cfg.buckets``); each
    plan lists those of its id range's buckets for ``write_shard`` to read. So the planner's input
    is aggregates and file names, never a list of ids.
    """
    minus: dict[tuple[str, int], SpillStat] = dict(excluded)
    by_split: dict[str, list[tuple[int, SpillStat]]] = {}
    for (split, bucket), stat in stats:
        gone = minus.pop((split, bucket), None)
        if gone is not None:
            if gone.rows > stat.rows:
                raise ValueError(f"{gone.rows} rows excluded from ({split!r}, plan bucket {bucket}), "
                                 f"which holds {stat.rows}")
            stat = SpillStat(stat.rows - gone.rows, stat.bytes - gone.bytes, stat.sources)
        by_split.setdefault(split, []).append((bucket, stat))
    if minus:
        key = min(minus)
        raise ValueError(f"rows excluded from ({key[0]!r}, plan bucket {key[1]}), where none were spilled")
    indexes = _spill_indexes(files)
    files_by_bucket: dict[tuple[str, int], list[str]] = {}
    for (split, path), index in indexes.items():
        for bucket in sorted(set(index)):
            files_by_bucket.setdefault((split, bucket), []).append(path)
    exclude_indexes = {path: index for (_, path), index in _spill_indexes(exclude_files).items()}
    exclude_by_bucket: dict[int, list[str]] = {}
    for path, index in sorted(exclude_indexes.items()):
        for bucket in sorted(set(index)):
            exclude_by_bucket.setdefault(bucket, []).append(path)
    per_coarse = cfg.plan_buckets // cfg.buckets
    plans: list[ShardPlan] = []
    for split in sorted(by_split):
        ordered = sorted(by_split[split], key=lambda kv: kv[0])
        total = sum(stat.bytes for _, stat in ordered)
        # As few shards as keep each within shard_bytes, cut to equal sizes (to a plan bucket), not
        # full ones and a small rest: the shards are written in parallel, and the largest sets the pace.
        count = max(1, -(-total // cfg.shard_bytes))
        cuts: list[tuple[int, int, int]] = []  # (last plan bucket, rows, bytes) of each shard
        rows = nbytes = done = 0
        for bucket, stat in ordered:
            rows, nbytes, done = rows + stat.rows, nbytes + stat.bytes, done + stat.bytes
            if rows and len(cuts) < count - 1 and done * count >= total * (len(cuts) + 1):
                cuts.append((bucket, rows, nbytes))
                rows = nbytes = 0
        if rows or not cuts:
            # not cuts: a grouping stage (dedup) dropped every record of the split; its one empty shard
            # still writes the split's losers file, which an incremental refresh carries them from
            cuts.append((bucket, rows, nbytes))
        for index, (_, rows, nbytes) in enumerate(cuts):
            # Shards tile the id space: each runs from the plan bucket after the previous shard's
            # last (empty buckets between hold no record) to its own last, the final one to the end.
            lo = cuts[index - 1][0] + 1 if index else 0
            hi = cfg.plan_buckets - 1 if index == len(cuts) - 1 else cuts[index][0]
            coarse = range(lo // per_coarse, hi // per_coarse + 1)
            touched = sorted({path for c in coarse for path in files_by_bucket.get((split, c), ())})
            gone = sorted({path for c in coarse for path in exclude_by_bucket.get(c, ())})
            plans.append(ShardPlan(split, index, len(cuts), lo, hi, cfg.plan_buckets,
                                   tuple((path, indexes[split, path]) for path in touched), rows, nbytes,
                                   tuple((path, exclude_indexes[path]) for path in gone)))
    return plans


def _spill_indexes(files: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, ...]]:
    """(split, spill file) -> the file's index, read once here and handed to the shards in their
    plans. A few threads read them: on an object store each is a request (~10 ms), and a large run
    has one per bundle."""
    files = sorted(set(files))
    with ThreadPoolExecutor(max_workers=16) as pool:
        return dict(zip(files, pool.map(lambda split_path: _read_index(split_path[1]), files)))


def add_spill_stat(totals: dict[tuple[str, int], SpillStat], key: tuple[str, int], stat: SpillStat) -> None:
    """Sum ``stat`` into ``totals[key]``."""
    totals[key] = merge_spill_stats((totals[key], stat)) if key in totals else stat


def total_spills(spilled: Iterable[Spilled]) -> tuple[dict[tuple[str, int], SpillStat], list[tuple[str, str]]]:
    """What the DAG's planner combine (``PlanInputs``) hands ``plan_shards``, in plain Python (tests,
    benchmarks): the stats summed per key, and the spill files in the order they were opened."""
    stats: dict[tuple[str, int], SpillStat] = {}
    files: list[tuple[str, str]] = []
    for one in spilled:
        add_spill_stat(stats, one.key, one.stat)
        if one.new_file:
            files.append(one.new_file)
    return stats, files


def excluded_ids(plan: ShardPlan, cfg: WriteConfig) -> pa.Array:
    """The ids of the plan's range that a grouping stage dropped, read from ``plan.exclude_files``
    (only the batches of the range's spill buckets): at most as many as the shard's own records."""
    buckets = plan.spill_buckets(cfg)
    return pa.concat_arrays([pa.array([], pa.string())] + [
        ids.filter(plan.in_range(ids)) for path, index in plan.exclude_files
        for ids in _spill_batches(path, index, buckets, lambda batch: batch.column("id"))])


def write_shard(plan: ShardPlan, output: str, cfg: WriteConfig, table: ShardedTable = PAGES) -> dict:
    """Write one shard of ``table`` under ``output``: the rows of its plan buckets, in the table's
    order, as ``<output>/<table.folder>/<plan.name>``; atomic rename.

    Peak memory is about twice the shard's rows (the spilled batches and their contiguous copy, for
    a moment) plus one row group: rows are sorted by index and taken one row group at a time, and
    bytes stream to the destination (a temporary name, then renamed).
    """
    buckets = plan.spill_buckets(cfg)
    excluded = excluded_ids(plan, cfg)

    def in_shard(batch: pa.RecordBatch) -> pa.RecordBatch:
        ids = batch.column("id")
        mask = plan.in_range(ids)
        if len(excluded):
            mask = pc.and_(mask, pc.invert(pc.is_in(ids, value_set=excluded)))
        return batch if pc.all(mask).as_py() else batch.filter(mask)  # wholly in range: no copy

    # flush by flush, keeping only this shard's rows: never a whole spill file in memory
    batches = [kept for path, index in plan.files for kept in _spill_batches(path, index, buckets, in_shard)
               if kept.num_rows]
    # One contiguous copy: take() on many small chunks is ~30x slower per row than on one.
    schema = table.schema
    rows = (pa.Table.from_batches(batches, schema=schema).combine_chunks() if batches else schema.empty_table())
    del batches
    order = pc.sort_indices(rows.select(list(table.sort_keys)), sort_keys=[(k, "ascending") for k in table.sort_keys])
    sizes = row_bytes(rows).take(order)
    final = io.join(output, table.folder, plan.name)
    tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
    digest = hashlib.sha256()
    with io.open_write(tmp) as raw:
        sink = HashingWriter(raw, digest)
        with parquet_writer(sink, schema, cfg.compression) as writer:
            for start, stop in row_groups(sizes, cfg.row_group_bytes, cfg.row_group_rows):
                if stop == start:  # a shard of no rows (its split all dropped): the schema alone
                    continue
                chunk = rows.take(order.slice(start, stop - start))
                writer.write_table(chunk.replace_schema_metadata(schema.metadata), row_group_size=stop - start)
    io.rename(tmp, final)
    result = {
        "file": f"{table.folder}/{plan.name}",
        "split": plan.split,
        "rows": rows.num_rows,
        "bytes": sink.written,
        "sha256": digest.hexdigest(),
    }
    # Page ids must be unique: dedup's exclusions and refresh key records by id. (Dead letters of one
    # record may share an id.) The manifest lists repeats as an imbalance.
    repeated = repeated_ids(rows.column("id").take(order)) if table.folder == PAGES.folder else []
    if repeated:
        result["repeated_ids"] = repeated
    if table.folder == PAGES.folder and len(excluded):  # (compared by name: Beam hands the plan a copy)
        result["losers_file"] = _write_losers(plan, output, cfg, excluded)
    return result


# The corpus run's Parquet folders under its output (``refresh/dedup_losers``: pipelines.refresh.LOSER_PAGES_FOLDER)
SHARD_FOLDERS = ("data", "dead_letter", "dropped", "refresh/dedup_losers")


def half_written(output: str, folders: tuple[str, ...] = SHARD_FOLDERS) -> list[str]:
    """Files a killed run left half-written in ``output``'s ``folders`` (``""``: ``output`` itself), named
    ``<shard>.parquet.tmp-<id>`` or ``<file>.parquet.tmp``: readers of ``data/`` would take them for shards
    (``datasets`` fails on one, ``pq.read_table`` reads its pages twice). Called when this run's own are
    renamed (under the output's lock, for a corpus run)."""
    return [p for folder in folders for pattern in ("*.parquet.tmp-*", "*.parquet.tmp")
            for p in io.match(io.join(output, folder, pattern) if folder else io.join(output, pattern))]


def shard_problems(folder: str, shards: Iterable[dict], hash_remote: bool = False) -> list[str]:
    """How ``folder``'s shards differ from what a manifest lists for them (``file``, ``rows``, ``bytes``,
    ``sha256``): a missing file, another row count (the Parquet footer), size or sha256. Local files are
    hashed (about ``sha256sum``'s time: ~1 s per GB); an object store's are checked by size and row count
    unless ``hash_remote`` (hashing downloads them). What an entry lacks (an older manifest) is not checked."""
    problems = []
    for shard in shards:
        path = io.join(folder, shard["file"])
        if not io.exists(path):
            problems.append(f"{shard['file']} is missing")
            continue
        try:
            with io.open_read(path) as f:
                rows = pq.ParquetFile(f).metadata.num_rows
                size = f.seek(0, 2)
        except (OSError, pa.ArrowException) as exc:
            problems.append(f"{shard['file']} cannot be read: {exc}")
            continue
        if "rows" in shard and rows != int(shard["rows"]):
            problems.append(f"{shard['file']} holds {rows} rows, the manifest says {shard['rows']}")
            continue
        if "bytes" in shard and size != int(shard["bytes"]):
            problems.append(f"{shard['file']} is {size} bytes, the manifest says {shard['bytes']}")
        elif shard.get("sha256") and ("://" not in path or hash_remote) and io.sha256(path) != shard["sha256"]:
            problems.append(f"{shard['file']}'s sha256 is not the manifest's")
    return problems


def repeated_ids(sorted_ids: pa.ChunkedArray | pa.Array, limit: int = 10) -> list[str]:
    """Up to ``limit`` ids that more than one row holds, from the shard's ids in sorted order. Readers
    dead-letter a page read twice from one input unit (``pipelines.accounting.account_rows``); this
    finds ids repeated across units (two input files naming one record)."""
    if len(sorted_ids) < 2:
        return []
    ids = sorted_ids.combine_chunks() if isinstance(sorted_ids, pa.ChunkedArray) else sorted_ids
    same = pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    if not pc.any(same).as_py():
        return []
    return sorted(set(ids.slice(1).filter(same).to_pylist()))[:limit]


def _write_losers(plan: ShardPlan, output: str, cfg: WriteConfig, excluded: pa.Array) -> str:
    """The shard range's records that dedup dropped, in full (``LOSER_PAGES``): at most the shard's size."""
    def lost(batch: pa.RecordBatch) -> pa.RecordBatch:
        ids = batch.column("id")
        return batch.filter(pc.and_(plan.in_range(ids), pc.is_in(ids, value_set=excluded)))

    batches = [kept for path, index in plan.files for kept in _spill_batches(path, index, plan.spill_buckets(cfg), lost)
               if kept.num_rows]
    rows = pa.Table.from_batches(batches, schema=PAGE_SCHEMA) if batches else PAGE_SCHEMA.empty_table()
    rows = rows.take(pc.sort_indices(rows, sort_keys=[(k, "ascending") for k in LOSER_PAGES.sort_keys]))
    buf = _io.BytesIO()
    pq.write_table(rows.replace_schema_metadata(PAGE_SCHEMA.metadata), buf, compression=cfg.compression)
    name = f"{LOSER_PAGES.folder}/{plan.name}"
    io.write_bytes_atomic(io.join(output, name), buf.getvalue())
    return name


def parquet_writer(sink, schema: pa.Schema, compression: str) -> pq.ParquetWriter:
    """The Parquet settings of every shard pagemill writes (corpus and release): a page index
    (readers and the Hub's viewer fetch a page, not a row group) and content-defined chunking
    (unchanged rows make identical pages, which the Hub's Xet storage deduplicates on re-upload)."""
    return pq.ParquetWriter(sink, schema, compression=compression, write_statistics=True, write_page_index=True,
                            use_content_defined_chunking=True)


def row_bytes(table: pa.Table | pa.RecordBatch) -> pa.Array:
    """Each row's uncompressed size: its values' bytes (strings, binaries, list items, fixed-width
    fields) plus offsets, as Arrow holds them; int64."""
    total = np.zeros(table.num_rows, dtype=np.int64)
    for column in table.columns:
        if isinstance(column, pa.ChunkedArray):
            # combine_chunks copies even a single chunk: ~0.3 ms a page for the image column's fresh memory
            column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        total += _value_bytes(column)
    return pa.array(total)


def _value_bytes(arr: pa.Array) -> np.ndarray:
    kind = arr.type
    if pa.types.is_struct(kind):
        return sum((_value_bytes(child) for child in arr.flatten()), np.zeros(len(arr), np.int64))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        inner = _value_bytes(pc.list_flatten(arr))
        return np.bincount(parents, weights=inner, minlength=len(arr)).astype(np.int64) + 4
    if pa.types.is_binary(kind) or pa.types.is_string(kind) or pa.types.is_large_binary(kind) \
            or pa.types.is_large_string(kind):
        return pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) + 4
    return np.full(len(arr), max(1, kind.bit_width // 8), dtype=np.int64)


class RowGroupCuts:
    """Row-group boundaries over rows that arrive in order, maybe in several batches: a group ends
    before the row that would take it past ``max_bytes`` (uncompressed, ``row_bytes``) or
    ``max_rows``; a single row larger than ``max_bytes`` is a group of its own."""

    def __init__(self, max_bytes: int, max_rows: int):
        self.max_bytes, self.max_rows = max_bytes, max_rows
        self.rows = self.bytes = 0  # the open group's

    def feed(self, sizes: list[int]) -> list[int]:
        """The positions in ``sizes`` (the next rows) before which a new group starts."""
        cuts = []
        for i, size in enumerate(sizes):
            if self.rows and (self.rows >= self.max_rows or self.bytes + size > self.max_bytes):
                cuts.append(i)
                self.rows = self.bytes = 0
            self.rows += 1
            self.bytes += size
        return cuts


def row_groups(sizes: pa.Array, max_bytes: int, max_rows: int) -> list[tuple[int, int]]:
    """``(start, stop)`` row ranges of a table's row groups (``RowGroupCuts``); one empty range for no rows."""
    bounds = [0, *RowGroupCuts(max_bytes, max_rows).feed(sizes.to_numpy(zero_copy_only=False).tolist()), len(sizes)]
    return list(zip(bounds, bounds[1:]))


class HashingWriter:
    """A write-only file wrapper that hashes and counts what passes through it."""

    def __init__(self, raw, digest):
        self.raw, self.digest, self.written, self.closed = raw, digest, 0, False

    def write(self, data) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self.written += len(view)
        return self.raw.write(view)

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        self.closed = True  # the caller closes the underlying file

    def tell(self) -> int:
        return self.written


def write_dropped_samples(stage_reason: tuple[str, str], records: list[PageRecord], dropped_dir: str) -> str:
    """The first records (by id) a stage dropped for one reason: ``dropped/<stage>-<reason>.parquet``."""
    stage, reason = stage_reason
    rows = [r.to_row() for r in sorted(records, key=lambda r: r.id)]
    name = f"{stage}-{reason}.parquet".replace(":", "_").replace("/", "_")
    buf = _io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=PAGE_SCHEMA), buf, compression="zstd")
    io.write_bytes_atomic(io.join(dropped_dir, name), buf.getvalue())
    return f"dropped/{name}"


# --- the output folder's lock --------------------------------------------------------------------------------

LOCK_FILE = ".lock"  # in the output folder: held (flock) by the run writing there
_held_locks: list[int] = []


def _close_locks_in_child() -> None:
    # A forked worker shares the launcher's open lock: it drops its copy (only close, never LOCK_UN, which
    # would release the launcher's lock too), so the lock ends with the run, not with a warm worker.
    for fd in _held_locks:
        try:
            os.close(fd)
        except OSError:
            pass
    _held_locks.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_locks_in_child)


class OutputBusy(RuntimeError):
    """Another run is writing into the same output folder."""


@contextlib.contextmanager
def output_lock(output: str) -> Iterator[None]:
    """Hold an exclusive lock on ``<output>/.lock`` (``fcntl.flock``, not blocking) while a run writes
    ``output``: a second run into the same folder is refused (``OutputBusy``) instead of replacing,
    sweeping or deleting the first one's files. The lock ends with the process (even when killed); the
    file stays, empty (removing it would let two runs lock two different files; empty, it is the same file
    after every run). A folder the lock made is removed again when the run left nothing else in it (it
    failed before writing: no output folder, as before the lock). An object-store output has no lock:
    runs into one must not overlap (docs/architecture.md)."""
    if "://" in output:
        yield
        return
    import fcntl

    created = not os.path.isdir(output)
    os.makedirs(output, exist_ok=True)
    path = os.path.join(output, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    locked = True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OutputBusy(f"{output} is being written by another run (it holds {path}): wait for it to end, "
                         f"or write another --output") from None
    except OSError as exc:  # a file system without locks (NFS without lockd: ENOLCK): run, unlocked
        locked = False
        print(f"pipelines: cannot lock {path} ({exc.strerror or exc}): runs into {output} must not overlap",
              file=sys.stderr)
    if locked:
        _held_locks.append(fd)
        # No other run writes here while we hold the lock: what is under _tmp/ was left by killed runs (their
        # spills, ~1.5x the corpus each). Unlocked (no flock), another run may be spilling there: kept.
        shutil.rmtree(os.path.join(output, "_tmp"), ignore_errors=True)
    try:
        yield
    finally:
        if locked:
            _held_locks.remove(fd)
        if created and os.listdir(output) == [LOCK_FILE]:
            with contextlib.suppress(OSError):
                os.remove(path)
                os.rmdir(output)
        os.close(fd)  # releases the lock (forked workers closed their copies)
