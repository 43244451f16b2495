"""The Beam-facing half of dedup: what the corpus DAG calls around its GroupByKey steps.

Per record (in the write stage, before spilling): ``dedup_key_members`` gives ``(key, member)``
pairs. Per key group: ``dedup_edges`` gives ``(kind, edge)`` pairs. Per kind (``px`` exact image,
``ph`` near image, ``mh`` near text), over that kind's edges only: ``dedup_losers`` runs connected
components and returns the records to drop. The decisions themselves live in
``pipelines/clean/dedup.py``; nothing here holds more than one group or one kind's edges.
"""

from __future__ import annotations

import io as _io
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import io
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
from schemas.config import load
from schemas.page import PageRecord


def dedup_config(options: DedupConfig | Mapping[str, Any]) -> DedupConfig:
    """The ``clean.dedup`` block as a ``DedupConfig`` (``load_config`` already gives one; a mapping is loaded)."""
    return load(DedupConfig, options, "clean.dedup")


@dataclass(frozen=True)
class Loser:
    id: str
    source: str
    reason: str
    kept: str  # the id of the record its component keeps


def dedup_key_members(cfg: DedupConfig, record: PageRecord) -> list[tuple[str, Member]]:
    """The record's grouping keys, each paired with its (small) member; fills ``quality["dedup"]``."""
    return extract_keys(record, cfg).pairs()


def dedup_edges(cfg: DedupConfig, key: str, members: list[Member]) -> list[tuple[str, Edge]]:
    if len(members) < 2:
        return []
    return [(key_kind(key), edge) for edge in group_edges(key, members, cfg)]


def dedup_losers(cfg: DedupConfig, kind: str, edges: Iterable[Edge]) -> list[Loser]:
    components = connected_components(edges)
    kept = {m.id: min(c, key=lambda x: (-x.rank, x.id)).id for c in components for m in c}
    return [Loser(m.id, m.source, reason, kept[m.id]) for m, reason in resolve(components, kind)]


def merge_losers(losers: Iterable[Loser]) -> dict[str, Loser]:
    """One loser per record id; a record dropped by several kinds keeps the strongest reason."""
    merged: dict[str, Loser] = {}
    for loser in losers:
        if loser.id in merged:
            reason = merge_reason(merged[loser.id].reason, loser.reason)
            if reason != merged[loser.id].reason:
                merged[loser.id] = loser
        else:
            merged[loser.id] = loser
    return merged


def write_duplicates(losers: list[Loser], dropped_dir: str) -> str:
    """Every dropped duplicate with the record it duplicates: ``dropped/dedup-duplicates.parquet``."""
    rows = [asdict(x) for x in sorted(losers, key=lambda x: x.id)]
    schema = pa.schema([(n, pa.string()) for n in ("id", "source", "reason", "kept")])
    buf = _io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf, compression="zstd")
    io.write_bytes_atomic(io.join(dropped_dir, "dedup-duplicates.parquet"), buf.getvalue())
    return "dropped/dedup-duplicates.parquet"
