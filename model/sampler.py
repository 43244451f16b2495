"""Hierarchical, domain-balanced sampling of corpus records (Jina-OCR-v1 5.1, 5.2): infinite and resumable.

``DomainSampler`` draws records with domain-balanced rates (5.1: "so that no single source
dominates"): a domain by its configured (and upweighted, 5.2) rate, then a source of that domain
uniformly, then the next row of that (domain, source) stream. A stream walks its Parquet row groups
in a seeded order per epoch and its rows within a row group in a seeded order, holding one row
group's matching rows at a time, and restarts forever. Its state is a few integers per stream plus
the RNG, so resuming is exact.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from model.data import DataConfig
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

    def __init__(self, domain: str, source: str, chunks: list[tuple[int, int]], n_rows: int,
                 files: list[str], split: str, eval_fraction: float, seed: int, columns: list[str],
                 factors: dict[str, int] | None = None):
        self.domain, self.source = domain, source
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
        read = [c for c in pf.schema_arrow.names if c in set(self._columns) | set(INDEX_COLUMNS)]
        table = pf.read_row_group(rg, columns=read)
        light = table.select(INDEX_COLUMNS).to_pylist()
        keep = [i for i, r in enumerate(light)
                if r["domain"] == self.domain and r["source"] == self.source
                and assigned_split(r["id"], r["split"] or "train", self._eval_fraction) == self._split]
        rows = [plain_row(r) for r in table.take(keep).to_pylist()] if keep else []
        if self._factors:  # DataConfig.pages: a listed page appears `factor` times in its stream
            rows = [r for r in rows for _ in range(self._factors.get(r["id"], 1))]
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
        return [self.domain, self.source, self.epoch, self.chunk, self.row]

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
                 columns: Iterable[str] = RECORD_COLUMNS, page_factors: dict[str, int] | None = None):
        self.split, self.seed = split, seed
        files = shard_files(path)
        found: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
        for f_idx, uri in enumerate(files):
            pf = open_parquet(uri)
            for rg in range(pf.metadata.num_row_groups):
                for r in pf.read_row_group(rg, columns=INDEX_COLUMNS).to_pylist():
                    if assigned_split(r["id"], r["split"] or "train", eval_fraction) == split:
                        chunks = found.setdefault((r["domain"], r["source"]), {})
                        chunks[(f_idx, rg)] = chunks.get((f_idx, rg), 0) + 1
        if not found:
            raise ValueError(f"data: split {split!r} of {path} has no rows")
        self.streams = {key: _Stream(key[0], key[1], sorted(chunks), sum(chunks.values()), files, split,
                                     eval_fraction, seed, list(columns), page_factors)
                        for key, chunks in sorted(found.items())}
        self.rates = domain_probabilities(sorted({d for d, _ in found}), domain_rates or {}, upweight or {})
        self.domains = list(self.rates)
        self.sources = {d: sorted(s for dd, s in found if dd == d) for d in self.domains}
        self._p = np.array([self.rates[d] for d in self.domains])
        self.rng = np.random.default_rng(key_seed("sampler", seed, split))
        self.fingerprint = key_seed(*[f"{d}/{s}/{st.n_rows}/{st.chunks}" for (d, s), st in self.streams.items()])

    @classmethod
    def from_config(cls, cfg: DataConfig, split: str = "train") -> "DomainSampler":
        from model.data import page_factors

        return cls(cfg.path, split, cfg.domain_rates, cfg.upweight, cfg.seed, cfg.eval_fraction,
                   page_factors=page_factors(cfg))

    def next_record(self) -> dict:
        domain = self.domains[int(self.rng.choice(len(self.domains), p=self._p))]
        sources = self.sources[domain]
        source = sources[int(self.rng.integers(len(sources)))]
        return self.streams[(domain, source)].next()

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
        for domain, source, epoch, chunk, row in d["streams"]:
            self.streams[(domain, source)].load(epoch, chunk, row)


def domain_probabilities(present: list[str], rates: dict[str, float],
                         upweight: dict[str, float]) -> dict[str, float]:
    """Normalized domain rates: configured (or uniform) rate x upweight, over the domains present."""
    for name, given in (("domain_rates", rates), ("upweight", upweight)):
        absent = sorted(set(given) - set(present) - {"*"})
        if absent:
            log.warning("data: %s names domains with no rows in this split: %s", name, absent)
    if rates:
        unlisted = [d for d in present if d not in rates]
        if unlisted:
            log.warning("data: domains without a configured rate get %s: %s", rates.get("*", 0.0), unlisted)
    raw = {d: (rates.get(d, rates.get("*", 0.0)) if rates else 1.0) * upweight.get(d, 1.0) for d in present}
    raw = {d: r for d, r in raw.items() if r > 0}
    total = sum(raw.values())
    if total <= 0:
        raise ValueError(f"data: every domain present ({present}) has rate 0")
    return {d: r / total for d, r in raw.items()}
