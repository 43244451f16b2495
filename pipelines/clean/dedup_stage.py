"""The Beam-facing half of dedup: what the corpus DAG calls around its GroupByKey steps.

Per record (in the write stage, before spilling): ``dedup_key_members`` gives ``(key, member)``
pairs. Per key group: ``dedup_edges`` gives ``(kind, edge)`` pairs. Per kind (``px`` exact image,
``ph`` near image, ``mh`` near text), over that kind's edges only: ``dedup_losers`` runs connected
components and returns the records to drop. Per dropped record (keyed by id): ``strongest_loser``
keeps one ``Loser`` when several kinds drop it. The decisions themselves live in
``pipelines/clean/dedup.py``; nothing here holds more than one group or one kind's edges.

The losers never meet in one place either. Each is spilled, like a page, to the ``DUPLICATES``
table (``spill_loser``; one Arrow IPC file per bundle, a record batch per id-range bucket) and
summed into its page's (split, plan bucket) (``excluded_stat``): the shard planner gets only those
sums and the spill files' names, each page shard reads the loser ids of its own id range from the
spill files, and ``dropped/dedup-duplicates-NNNNN-of-MMMMM.parquet`` is written from the same
spill files by the sharded writer (``pipelines.write``).

Each member carries its record's input unit (``Member.unit``: the page's
``metadata["refresh_unit"]``), so each duplicates row names the loser's unit and the kept page's
(``unit``, ``kept_unit``): an incremental refresh decides which reused units lost a page to a unit
that is gone from those two columns alone (``pipelines.refresh._lost_to``), never by joining ids.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Mapping, NamedTuple

import pyarrow as pa

from pipelines.accounting import unit_of
from pipelines.clean.dedup import (
    Edge,
    Member,
    connected_components,
    extract_keys,
    group_edges,
    key_kind,
    merge_reason,
    resolve,
)
from pipelines.clean.dedup_config import DedupConfig
from pipelines.write import ShardedTable, Spilled, SpillStat, SpillWriter, bucket_of, record_bytes
from schemas.config import load
from schemas.page import PageRecord

# ``unit``/``kept_unit``: the refresh keys of the dropped page's input unit and of the kept page's
DUPLICATES_SCHEMA = pa.schema([(n, pa.string()) for n in ("id", "source", "reason", "kept", "unit", "kept_unit")])
# Every dropped duplicate with the record it duplicates, sharded by id under dropped/.
DUPLICATES = ShardedTable("dropped", DUPLICATES_SCHEMA, ("id",))
DUPLICATES_SPLIT = "dedup-duplicates"  # the table's one "split": its shards' file-name prefix


def dedup_config(options: DedupConfig | Mapping[str, Any]) -> DedupConfig:
    """The ``clean.dedup`` block as a ``DedupConfig`` (``load_config`` already gives one; a mapping is loaded)."""
    return load(DedupConfig, options, "clean.dedup")


class Loser(NamedTuple):
    """A record dedup drops: why, the id its component keeps, and where the record was written
    (its split and spilled bytes, ``pipelines.write.record_bytes``), so the planner can take it out
    of its shard's size; ``unit`` and ``kept_unit``: the input units of the dropped and the kept record."""

    id: str
    source: str
    reason: str
    kept: str  # the id of the record its component keeps
    split: str = "train"
    size: int = 0
    unit: str = ""
    kept_unit: str = ""


def dedup_key_members(cfg: DedupConfig, record: PageRecord) -> list[tuple[str, Member]]:
    """The record's grouping keys, each paired with its (small) member, which names the record's input
    unit; fills ``quality["dedup"]``."""
    keys = extract_keys(record, cfg)
    member = dataclasses.replace(keys.member, split=record.split, size=record_bytes(record), unit=unit_of(record))
    return keys._replace(member=member).pairs()


def dedup_edges(cfg: DedupConfig, key: str, members: list[Member]) -> list[tuple[str, Edge]]:
    if len(members) < 2:
        return []
    return [(key_kind(key), edge) for edge in group_edges(key, members, cfg)]


def dedup_losers(cfg: DedupConfig, kind: str, edges: Iterable[Edge]) -> list[Loser]:
    components = connected_components(edges)
    kept = {m.id: min(c, key=lambda x: (-x.rank, x.id)) for c in components for m in c}
    return [Loser(m.id, m.source, reason, kept[m.id].id, m.split, m.size, m.unit, kept[m.id].unit)
            for m, reason in resolve(components, kind)]


def _stronger(a: Loser, b: Loser) -> Loser:
    """Of two losers of one record, the one with the stronger reason (``merge_reason``); ties go to
    the smaller kept id, so the choice does not depend on arrival order."""
    if a.reason != b.reason:
        return a if merge_reason(a.reason, b.reason) == a.reason else b
    return min(a, b, key=lambda x: x.kept)


def strongest_loser(losers: Iterable[Loser]) -> Loser:
    """One record's losers (from several kinds) -> one: a Beam combine, associative and commutative."""
    return functools.reduce(_stronger, losers)


def merge_losers(losers: Iterable[Loser]) -> dict[str, Loser]:
    """One loser per record id, in memory (tests, small runs): what the DAG's per-id combine gives."""
    merged: dict[str, Loser] = {}
    for loser in losers:
        merged[loser.id] = _stronger(merged[loser.id], loser) if loser.id in merged else loser
    return merged


def spill_loser(writer: SpillWriter, loser: Loser) -> Spilled:
    """Buffer one loser's ``DUPLICATES`` row (``writer.table`` is ``DUPLICATES``)."""
    row = {"id": loser.id, "source": loser.source, "reason": loser.reason, "kept": loser.kept, "unit": loser.unit,
           "kept_unit": loser.kept_unit}
    return writer.add_row(DUPLICATES_SPLIT, loser.id, row, sum(map(len, row.values())) + 64, loser.source)


def excluded_stat(loser: Loser, plan_buckets: int) -> tuple[tuple[str, int], SpillStat]:
    """The page rows and bytes the loser takes out of its (split, plan bucket), for the planner."""
    return (loser.split, bucket_of(loser.id, plan_buckets)), SpillStat(1, loser.size, ((loser.source, 1),))
