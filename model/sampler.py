"""Hierarchical, domain-balanced sampling of corpus records (Jina-OCR-v1 5.1, 5.2): infinite and resumable.

``DomainSampler`` draws records with domain-balanced rates (5.1: "so that no single source
dominates"): a domain by its configured (and upweighted, 5.2) rate, then a task and a response
convention within it (``task_rates``, ``convention_rates``; by rows when not configured; 4.3), then
a source of that cell uniformly (``model.data.Mixture``), then the next row of that stream. A stream
walks its Parquet row groups in a seeded order per epoch and its rows within a row group in a
seeded order, holding one row group's matching rows at a time, and restarts forever. Its state is
a few integers per stream plus the RNG, so resuming is exact.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from model.data import MIX_COLUMNS, DataConfig, Mixture, StreamKey, domain_probabilities, index_streams, stream_key

__all__ = ["DomainSampler", "domain_probabilities", "index_streams", "key_seed", "stream_key"]
from model.records import INDEX_COLUMNS, RECORD_COLUMNS, assigned_split, open_parquet, plain_row, shard_files

log = logging.getLogger(__name__)


def key_seed(*parts: Any) -> int:
    """A stable 64-bit seed from strings and ints (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "little")


class _Stream:
    """The rows of one (domain, source) in one split: an endless, seeded, resumable walk.

    Each epoch visits the stream's row groups in a permutation seeded by (seed, domain, source,
    epoch) and the matching rows of a row group in a permutation seeded by the same plus the
    chunk index; only the current row group's matching rows are held (and kept while the next
    chunk is the same row group, so a stream living in one row group is read once). State: epoch,
    chunk, row.
    """

    def __init__(self, key: StreamKey, chunks: list[tuple[int, int]], n_rows: int,
                 files: list[str], split: str, eval_fraction: float, seed: int, columns: list[str],
                 factors: dict[str, int] | None = None):
        self.key = key
        self.domain, self.task, self.convention, self.source = key
        self._factors = factors or {}
        self.chunks, self.n_rows = chunks, n_rows
        self._files, self._split, self._eval_fraction = files, split, eval_fraction
        self._seed, self._columns = seed, columns
        self.epoch = self.chunk = self.row = 0
        self._buffer: list[dict] | None = None
        self._cached: tuple[tuple[int, int], list[dict]] | None = None

    def _order(self) -> list[tuple[int, int]]:
        perm = np.random.default_rng(key_seed(self._seed, self.domain, self.source, self.epoch)) \
            .permutation(len(self.chunks))
        return [self.chunks[i] for i in perm]

    def _load(self) -> list[dict]:
        key = self._order()[self.chunk]
        if self._cached is None or self._cached[0] != key:  # a one-chunk stream is read once, not per epoch
            self._cached = (key, self._read(*key))
        rows = self._cached[1]
        perm = np.random.default_rng(
            key_seed(self._seed, self.domain, self.source, self.epoch, self.chunk)).permutation(len(rows))
        return [rows[i] for i in perm]

    def _read(self, file_idx: int, rg: int) -> list[dict]:
        pf = open_parquet(self._files[file_idx])
        names = pf.schema_arrow.names
        read = [c for c in names if c in set(self._columns) | set(MIX_COLUMNS)]
        table = pf.read_row_group(rg, columns=read)
        light = table.select([c for c in MIX_COLUMNS if c in names]).to_pylist()
        keep = [i for i, r in enumerate(light) if stream_key(r) == self.key
                and assigned_split(r["id"], r.get("split") or "train", self._eval_fraction) == self._split]
        rows = [plain_row(r) for r in table.take(keep).to_pylist()] if keep else []
        if self._factors:  # DataConfig.pages: a listed page appears `factor` times in its stream
            rows = [r for r in rows for _ in range(self._factors.get(r["id"], 1))]
        drop = set(MIX_COLUMNS) - set(self._columns) - set(INDEX_COLUMNS)
        rows = [{k: v for k, v in r.items() if k not in drop} for r in rows]
        for r in rows:
            r["split"] = self._split
        return rows

    def next(self) -> dict:
        empty_chunks = 0
        while True:
            if self._buffer is None:
                self._buffer = self._load()
            if self.row < len(self._buffer):
                self.row += 1
                return dict(self._buffer[self.row - 1])  # callers may edit it; the cache stays clean
            empty_chunks += 1
            if empty_chunks > len(self.chunks) + 1:
                raise RuntimeError(f"data: stream {self.domain}/{self.source} has no rows left "
                                   "(did the shards change under the sampler?)")
            self.chunk, self.row, self._buffer = self.chunk + 1, 0, None
            if self.chunk == len(self.chunks):
                self.epoch, self.chunk = self.epoch + 1, 0

    def state(self) -> list:
        return [*self.key, self.epoch, self.chunk, self.row]

    def load(self, epoch: int, chunk: int, row: int) -> None:
        if (epoch, chunk) != (self.epoch, self.chunk):
            self._buffer = None
        self.epoch, self.chunk, self.row = int(epoch), int(chunk), int(row)


class DomainSampler:
    """Hierarchical domain-balanced sampling over a corpus split (5.1); infinite and resumable.

    On construction it scans only the id/domain/source/split columns to learn which row groups
    hold which (domain, source) streams; it keeps row-group lists and counts, never records.
    """

    def __init__(self, path: str | Path, split: str = "train", domain_rates: dict[str, float] | None = None,
                 upweight: dict[str, float] | None = None, seed: int = 0, eval_fraction: float = 0.1,
                 columns: Iterable[str] = RECORD_COLUMNS, task_rates: dict[str, float] | None = None,
                 convention_rates: dict[str, float] | None = None, page_factors: dict[str, int] | None = None):
        self.split, self.seed = split, seed
        files = shard_files(path)
        absent = set(page_factors or ())
        found = index_streams(files, split, eval_fraction, listed=absent)
        if not found:
            raise ValueError(f"data: split {split!r} of {path} has no rows")
        if absent:  # e.g. classifiers.retrieve kept a held-out eval page of the training corpus
            log.warning("data: %d of the %d pages listed in `pages` are not in the %s split of %s (held out as "
                        "eval, or not in the corpus): they are never sampled, e.g. %s", len(absent),
                        len(page_factors or ()), split, path, sorted(absent)[:3])
        self.streams = {key: _Stream(key, sorted(chunks), sum(chunks.values()), files, split,
                                     eval_fraction, seed, list(columns), page_factors)
                        for key, chunks in sorted(found.items())}
        self.mixture = Mixture({k: s.n_rows for k, s in self.streams.items()}, domain_rates, upweight,
                               task_rates, convention_rates)
        self.rates = domain_probabilities(sorted({k[0] for k in found}), domain_rates or {}, upweight or {})
        self.domains = list(self.mixture.domains)
        self.rng = np.random.default_rng(key_seed("sampler", seed, split))
        self.fingerprint = key_seed(*[f"{'/'.join(k)}/{st.n_rows}/{st.chunks}" for k, st in self.streams.items()])

    @classmethod
    def from_config(cls, cfg: DataConfig, split: str = "train") -> "DomainSampler":
        from model.data import page_factors

        return cls(cfg.path, split, cfg.domain_rates, cfg.upweight, cfg.seed, cfg.eval_fraction,
                   task_rates=cfg.task_rates, convention_rates=cfg.convention_rates, page_factors=page_factors(cfg))

    def next_record(self) -> dict:
        """A domain, then a task and a response convention within it, then a source (``Mixture``)."""
        return self.streams[self.mixture.draw(self.rng)].next()

    def __iter__(self) -> Iterator[dict]:
        return self

    def __next__(self) -> dict:
        return self.next_record()

    def state_dict(self) -> dict:
        return {"fingerprint": self.fingerprint, "rng": self.rng.bit_generator.state,
                "streams": [s.state() for s in self.streams.values()]}

    def load_state_dict(self, d: dict) -> None:
        if d["fingerprint"] != self.fingerprint:
            raise ValueError("data: sampler state was saved on a different corpus or split; cannot resume")
        self.rng.bit_generator.state = d["rng"]
        for *key, epoch, chunk, row in d["streams"]:
            self.streams[tuple(key)].load(epoch, chunk, row)
