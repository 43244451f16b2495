"""Training data for SFT: corpus shards streamed into packed, position-shifted model batches.

Jina-OCR-v1 sections 5.1 (alignment SFT) and 5.2 (robustness SFT). The pieces, in data-flow order:

* ``iter_records`` streams PageRecord rows from Parquet shards with pyarrow, batch by batch (the
  corpus is never held in memory), and assigns the held-out split: a "train" row becomes "eval"
  when a hash of its id falls under ``eval_fraction`` (``assigned_split``), so every run, worker
  and shard layout agrees on it.
* ``DomainSampler`` draws records with hierarchical, domain-balanced rates (5.1: "so that no
  single source dominates"): a domain by its configured (and upweighted, 5.2) rate, then a source
  of that domain uniformly, then the next row of that (domain, source) stream. A stream walks its
  Parquet row groups in a seeded order per epoch and its rows within a row group in a seeded
  order, holding one row group's matching rows at a time, and restarts forever. Its state is a
  few integers per stream plus the RNG, so resuming is exact.
* ``SampleSource`` turns records into ``Sample``s (chat template, image patches, response target)
  and skips bad ones with a reason (``corrupt_image``, ``image_too_large``, ``too_long``): counted
  in ``.skipped`` and logged once per record, never fatal. Robustness SFT degrades page images
  with ``synth.augment.degrade`` at ``degrade_prob``.
* ``pack`` / ``single`` build a ``Batch``: several samples in one row (alignment SFT) with a
  block-diagonal causal mask so attention stays inside each sample, per-sample M-RoPE positions,
  the response position-ID shift of 5.1 (``shift_positions``) and loss labels on response tokens
  only. ``BatchStream`` drives it all and is exactly resumable.

Batches have batch size 1 and no padding: a packed row is as long as its samples (at most
``max_length``). Labels follow the transformers convention (aligned with ``input_ids``; the loss
shifts them by one), so the last token of a sample never predicts the next sample's first token:
that label is a prompt token, -100.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch

from model.processing import Encoded, PageProcessor

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
SPLIT_SALT = "pagemill:eval-split"
# What a Sample needs; the sampler reads only these columns (provenance, text layer etc. stay on disk).
RECORD_COLUMNS = ("id", "source", "domain", "language", "task", "image", "instruction", "response",
                  "unit_tests", "split")
_INDEX_COLUMNS = ["id", "domain", "source", "split"]
_MAX_SKIPS_IN_A_ROW = 10_000


# -- configuration ------------------------------------------------------------------------------

@dataclass(frozen=True)
class DataConfig:
    """Data settings for one SFT stage; defaults in code, overridden from the stage's YAML.

    ``max_length`` is the packed row length L_train; a sample longer than ``max_sample_tokens`` is
    skipped ("too_long"). ``domain_rates``: domain -> relative rate (empty = uniform over the
    domains present; with rates given, a present domain that is not listed gets the rate of key
    ``"*"``, else 0, and is logged). ``upweight``: domain -> factor multiplying its rate.
    ``degrade_prob``: share of training pages degraded by ``synth.augment.degrade``, limited to
    ``degrade_domains`` when that is non-empty (5.2 degrades historical scans). ``shift_prob`` and
    ``position_cap``: the response position shift of 5.1. ``max_pixels``: decoded image cap.
    """

    path: str = "out/corpus"
    eval_fraction: float = 0.1
    max_length: int = 2048
    max_sample_tokens: int = 1536
    pack: bool = True
    domain_rates: dict[str, float] = field(default_factory=dict)
    upweight: dict[str, float] = field(default_factory=dict)
    degrade_prob: float = 0.0
    degrade_domains: tuple[str, ...] = ()
    shift_prob: float = 0.4
    position_cap: int = 32768
    seed: int = 0
    max_pixels: int = 64_000_000

    def __post_init__(self) -> None:
        for name in ("eval_fraction", "degrade_prob", "shift_prob"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"data: {name} must be in [0, 1], got {value}")
        if not 0 < self.max_sample_tokens <= self.max_length:
            raise ValueError(f"data: need 0 < max_sample_tokens ({self.max_sample_tokens}) <= "
                             f"max_length ({self.max_length}), or no sample could fit a row")
        if self.position_cap <= 0:
            raise ValueError(f"data: position_cap must be positive, got {self.position_cap}")
        for name in ("domain_rates", "upweight"):
            bad = {k: v for k, v in getattr(self, name).items() if not float(v) >= 0}
            if bad:
                raise ValueError(f"data: {name} must be >= 0, got {bad}")
        object.__setattr__(self, "degrade_domains", tuple(self.degrade_domains))

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "DataConfig":
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"data: unknown config keys {unknown}; known: {sorted(known)}")
        for name in ("domain_rates", "upweight"):
            if name in d:
                d[name] = {str(k): float(v) for k, v in (d[name] or {}).items()}
        return cls(**d)


# -- streaming records ----------------------------------------------------------------------------

def assigned_split(record_id: str, split: str, eval_fraction: float) -> str:
    """The split a row trains in: "train" rows whose id hashes under ``eval_fraction`` become "eval"."""
    if split != "train":
        return split
    digest = hashlib.sha256(f"{SPLIT_SALT}\x1f{record_id}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction else "train"


def shard_files(path: str | Path) -> list[str]:
    """Parquet files of a corpus folder (``data/*.parquet``), a single file, or a glob; sorted."""
    path = str(path)
    if "://" in path:  # gs://, s3://, hf://: the pipelines' URI layer (imports Beam, so only here)
        from pipelines import io

        pattern = path if path.endswith(".parquet") or any(c in path for c in "*?[") \
            else io.join(path, "data/*.parquet")
        found = io.match(pattern)
    elif Path(path).is_dir():
        found = sorted(glob.glob(str(Path(path) / "data" / "*.parquet"))) or \
            sorted(glob.glob(str(Path(path) / "*.parquet")))
    elif Path(path).is_file():
        found = [path]
    else:
        found = sorted(p for p in glob.glob(path, recursive=True) if Path(p).is_file())
    if not found:
        raise FileNotFoundError(f"data: no parquet shards at {path!r}")
    return found


def _parquet(uri: str) -> pq.ParquetFile:
    if "://" in uri:
        from pipelines import io

        return pq.ParquetFile(io.open_read(uri))
    return pq.ParquetFile(uri)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """Arrow row -> plain dict with the image as bytes (the HF Image struct is {bytes, path})."""
    image = row.get("image")
    if isinstance(image, dict):
        row["image"] = image.get("bytes")
    return row


def iter_records(path: str | Path, split: str | None = None, columns: Iterable[str] | None = None,
                 eval_fraction: float = 0.1, batch_size: int = 32) -> Iterator[dict]:
    """Rows of the corpus in file order, streamed ``batch_size`` rows at a time.

    ``split``: keep only rows whose ``assigned_split`` is this (None: all rows). Each dict's
    ``split`` is the assigned one. ``columns``: the keys to yield (None: every column).
    """
    wanted = list(columns) if columns is not None else None
    for uri in shard_files(path):
        pf = _parquet(uri)
        names = pf.schema_arrow.names
        read = None if wanted is None else [c for c in names if c in set(wanted) | {"id", "split"}]
        for batch in pf.iter_batches(batch_size=batch_size, columns=read):
            for row in batch.to_pylist():
                row["split"] = assigned_split(row["id"], row.get("split") or "train", eval_fraction)
                if split is not None and row["split"] != split:
                    continue
                row = _plain(row)
                yield row if wanted is None else {k: row[k] for k in wanted if k in row}


# -- domain-balanced sampling ------------------------------------------------------------------

def _key_seed(*parts: Any) -> int:
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
                 files: list[str], split: str, eval_fraction: float, seed: int, columns: list[str]):
        self.domain, self.source = domain, source
        self.chunks, self.n_rows = chunks, n_rows
        self._files, self._split, self._eval_fraction = files, split, eval_fraction
        self._seed, self._columns = seed, columns
        self.epoch = self.chunk = self.row = 0
        self._buffer: list[dict] | None = None
        self._cached: tuple[tuple[int, int], list[dict]] | None = None

    def _order(self) -> list[tuple[int, int]]:
        perm = np.random.default_rng(_key_seed(self._seed, self.domain, self.source, self.epoch)) \
            .permutation(len(self.chunks))
        return [self.chunks[i] for i in perm]

    def _load(self) -> list[dict]:
        key = self._order()[self.chunk]
        if self._cached is None or self._cached[0] != key:  # a one-chunk stream is read once, not per epoch
            self._cached = (key, self._read(*key))
        rows = self._cached[1]
        perm = np.random.default_rng(
            _key_seed(self._seed, self.domain, self.source, self.epoch, self.chunk)).permutation(len(rows))
        return [rows[i] for i in perm]

    def _read(self, file_idx: int, rg: int) -> list[dict]:
        pf = _parquet(self._files[file_idx])
        read = [c for c in pf.schema_arrow.names if c in set(self._columns) | set(_INDEX_COLUMNS)]
        table = pf.read_row_group(rg, columns=read)
        light = table.select(_INDEX_COLUMNS).to_pylist()
        keep = [i for i, r in enumerate(light)
                if r["domain"] == self.domain and r["source"] == self.source
                and assigned_split(r["id"], r["split"] or "train", self._eval_fraction) == self._split]
        rows = [_plain(r) for r in table.take(keep).to_pylist()] if keep else []
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
                 columns: Iterable[str] = RECORD_COLUMNS):
        self.split, self.seed = split, seed
        files = shard_files(path)
        found: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
        for f_idx, uri in enumerate(files):
            pf = _parquet(uri)
            for rg in range(pf.metadata.num_row_groups):
                for r in pf.read_row_group(rg, columns=_INDEX_COLUMNS).to_pylist():
                    if assigned_split(r["id"], r["split"] or "train", eval_fraction) == split:
                        chunks = found.setdefault((r["domain"], r["source"]), {})
                        chunks[(f_idx, rg)] = chunks.get((f_idx, rg), 0) + 1
        if not found:
            raise ValueError(f"data: split {split!r} of {path} has no rows")
        self.streams = {key: _Stream(key[0], key[1], sorted(chunks), sum(chunks.values()), files, split,
                                     eval_fraction, seed, list(columns))
                        for key, chunks in sorted(found.items())}
        self.rates = domain_probabilities(sorted({d for d, _ in found}), domain_rates or {}, upweight or {})
        self.domains = list(self.rates)
        self.sources = {d: sorted(s for dd, s in found if dd == d) for d in self.domains}
        self._p = np.array([self.rates[d] for d in self.domains])
        self.rng = np.random.default_rng(_key_seed("sampler", seed, split))
        self.fingerprint = _key_seed(*[f"{d}/{s}/{st.n_rows}/{st.chunks}" for (d, s), st in self.streams.items()])

    @classmethod
    def from_config(cls, cfg: DataConfig, split: str = "train") -> "DomainSampler":
        return cls(cfg.path, split, cfg.domain_rates, cfg.upweight, cfg.seed, cfg.eval_fraction)

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


# -- samples ----------------------------------------------------------------------------------

@dataclass
class Sample:
    """One encoded training sample and the record fields the trainers and rewards need."""

    encoded: Encoded
    id: str
    source: str
    domain: str
    response: str
    unit_tests: list[str]
    instruction: str

    @property
    def length(self) -> int:
        return self.encoded.length


class SampleSource:
    """Records -> Samples for one split; bad records are skipped with a reason, never fatal.

    Iterating yields the split's samples in file order (``records`` overrides where they come
    from); ``encode`` does one record, degrading its image when an RNG is given (training only).
    """

    def __init__(self, processor: PageProcessor, cfg: DataConfig = DataConfig(), split: str = "train",
                 records: Iterable[dict] | None = None):
        self.processor, self.cfg, self.split = processor, cfg, split
        self.records = records
        self.skipped: Counter = Counter()
        self._logged: set[tuple[str, str]] = set()

    def _skip(self, record_id: str, reason: str, detail: str) -> None:
        self.skipped[reason] += 1
        if (record_id, reason) not in self._logged:
            self._logged.add((record_id, reason))
            log.warning("data: skipping record %s: %s (%s)", record_id, reason, detail)

    def _degrade(self, record: dict, rng: np.random.Generator | None) -> bool:
        cfg = self.cfg
        if rng is None or cfg.degrade_prob <= 0:
            return False
        if cfg.degrade_domains and record.get("domain") not in cfg.degrade_domains:
            return False
        return bool(rng.random() < cfg.degrade_prob)

    def encode(self, record: dict, rng: np.random.Generator | None = None) -> Sample | None:
        from schemas.deadletter import RecordError
        from schemas.images import open_image  # the project's one guarded image opener

        rid = str(record.get("id"))
        try:
            image = open_image(record.get("image") or b"", self.cfg.max_pixels)
            try:
                image = image.convert("RGB")  # truncated payloads fail only when pixels are read
            except Exception as exc:
                raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
        except RecordError as exc:
            self._skip(rid, exc.reason, str(exc))
            return None
        if self._degrade(record, rng):
            from synth.augment import AugmentConfig, degrade

            image, _ = degrade(image, rng, AugmentConfig())
        encoded = self.processor.encode(record["instruction"], image, record["response"])
        if encoded.length > self.cfg.max_sample_tokens:
            self._skip(rid, "too_long", f"{encoded.length} tokens > max_sample_tokens {self.cfg.max_sample_tokens}")
            return None
        return Sample(encoded, rid, record.get("source", ""), record.get("domain", ""), record["response"],
                      list(record.get("unit_tests") or []), record["instruction"])

    def __iter__(self) -> Iterator[Sample]:
        records = self.records if self.records is not None else \
            iter_records(self.cfg.path, self.split, RECORD_COLUMNS, self.cfg.eval_fraction)
        for record in records:
            sample = self.encode(record)
            if sample is not None:
                yield sample


def eval_samples(cfg: DataConfig, processor: PageProcessor, limit: int | None = None) -> Iterator[Sample]:
    """The eval split's samples in file order (deterministic, never degraded), at most ``limit``."""
    for i, sample in enumerate(SampleSource(processor, cfg, "eval")):
        if limit is not None and i >= limit:
            return
        yield sample


# -- batches ----------------------------------------------------------------------------------

@dataclass
class Batch:
    """One training row (batch size 1) holding ``n_samples`` samples back to back."""

    input_ids: torch.Tensor  # (1, L) long
    labels: torch.Tensor  # (1, L) long; -100 except response tokens (incl. end-of-turn)
    position_ids: torch.Tensor  # (3, 1, L) M-RoPE positions, response shift applied
    attention_mask: torch.Tensor  # (1, 1, L, L) bool, True = attend; block-diagonal causal
    mm_token_type_ids: torch.Tensor  # (1, L)
    pixel_values: torch.Tensor  # (patches of all images, C*T*P*P)
    image_grid_thw: torch.Tensor  # (n_images, 3)
    n_samples: int
    n_response_tokens: int
    sample_ids: list[str]
    segment_ids: torch.Tensor  # (1, L) long: index of the sample each token belongs to

    def model_kwargs(self, segments: bool = False) -> dict:
        """Everything the model forward needs, without labels.

        ``segments``: the model attends with ``model.attention.SEGMENT_SDPA``, so the row goes in as
        per-sample lengths instead of the (L, L) block mask (same result, a fraction of the work).
        """
        kwargs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                  "position_ids": self.position_ids, "mm_token_type_ids": self.mm_token_type_ids,
                  "pixel_values": self.pixel_values, "image_grid_thw": self.image_grid_thw}
        if segments:
            kwargs["attention_mask"] = None
            kwargs["segment_lengths"] = torch.bincount(self.segment_ids[0]).tolist()
        return kwargs

    def to(self, device: torch.device | str) -> "Batch":
        moved = {f.name: getattr(self, f.name).to(device) if isinstance(getattr(self, f.name), torch.Tensor)
                 else getattr(self, f.name) for f in fields(self)}
        return Batch(**moved)


def shift_positions(positions: torch.Tensor, prompt_len: int, L: int, L_train: int,
                    rng: np.random.Generator, prob: float, cap: int) -> torch.Tensor:
    """Position-ID shift of Jina-OCR-v1 5.1 for one sample; returns a new tensor.

    With probability ``prob`` the response positions (index >= ``prompt_len`` on the last axis,
    every M-RoPE row) move up by one offset drawn uniformly from [1, min(5L, L_train/4)]; prompt
    positions never move. Then all ids are capped at ``cap - 1`` (5.1 caps at 32,768).
    """
    out = positions.clone()
    if rng.random() < prob:
        high = max(1, min(5 * L, L_train // 4))
        out[..., prompt_len:] += int(rng.integers(1, high + 1))
    return out.clamp_(max=cap - 1)


def _block_causal(lengths: list[int]) -> torch.Tensor:
    """(L, L) bool: token i attends to j iff j <= i and both are in the same sample."""
    seg = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    total = int(seg.numel())
    causal = torch.ones(total, total, dtype=torch.bool).tril()
    return causal & (seg[:, None] == seg[None, :])


def pack(samples: list[Sample], rng: np.random.Generator, cfg: DataConfig, model: torch.nn.Module) -> Batch:
    """Samples back to back in one row: own positions (restarting per sample, then shifted), own
    attention block, loss only on their responses. Raises if they exceed ``cfg.max_length``."""
    from model.models import rope_index

    if not samples:
        raise ValueError("data: pack needs at least one sample")
    total = sum(s.length for s in samples)
    if total > cfg.max_length:
        raise ValueError(f"data: {total} tokens do not fit a row of max_length {cfg.max_length}")
    ids, labels, positions, mm, segments = [], [], [], [], []
    for i, s in enumerate(samples):
        e = s.encoded
        pos = rope_index(model, e.input_ids[None], e.mm_token_type_ids[None], e.image_grid_thw)[:, 0]
        positions.append(shift_positions(pos.long(), e.prompt_len, e.length, cfg.max_length, rng,
                                         cfg.shift_prob, cfg.position_cap))
        lab = e.input_ids.clone()
        lab[:e.prompt_len] = IGNORE_INDEX
        ids.append(e.input_ids)
        labels.append(lab)
        mm.append(e.mm_token_type_ids)
        segments.append(torch.full((e.length,), i, dtype=torch.long))
    label_row = torch.cat(labels)[None]
    return Batch(
        input_ids=torch.cat(ids)[None],
        labels=label_row,
        position_ids=torch.cat(positions, dim=-1)[:, None],
        attention_mask=_block_causal([s.length for s in samples])[None, None],
        mm_token_type_ids=torch.cat(mm)[None],
        pixel_values=torch.cat([s.encoded.pixel_values for s in samples], dim=0),
        image_grid_thw=torch.cat([s.encoded.image_grid_thw for s in samples], dim=0),
        n_samples=len(samples),
        n_response_tokens=int((label_row != IGNORE_INDEX).sum()),
        sample_ids=[s.id for s in samples],
        segment_ids=torch.cat(segments)[None],
    )


def single(sample: Sample, rng: np.random.Generator, cfg: DataConfig, model: torch.nn.Module) -> Batch:
    """One sample per row (robustness SFT keeps long pages intact); same shift rule as ``pack``."""
    return pack([sample], rng, cfg, model)


class BatchStream:
    """Endless training batches for one split; ``state_dict`` / ``load_state_dict`` resume exactly.

    Packing is greedy: samples join the current row while they fit ``max_length``; the first one
    that does not is carried over to start the next row. Two RNGs: ``image_rng`` (degradations,
    drawn while encoding) and ``shift_rng`` (position shifts, drawn while packing). The saved state
    describes the stream just before the carried-over sample was drawn (sampler, image RNG, skip
    counts) plus the shift RNG after the last batch, so a resumed stream draws and encodes that
    sample again, bit-identical, instead of storing its tensors.
    """

    def __init__(self, cfg: DataConfig, processor: PageProcessor, model: torch.nn.Module, split: str = "train"):
        self.cfg, self.model = cfg, model
        self.sampler = DomainSampler.from_config(cfg, split)
        self.source = SampleSource(processor, cfg, split)
        self.image_rng = np.random.default_rng(_key_seed("degrade", cfg.seed, split))
        self.shift_rng = np.random.default_rng(_key_seed("shift", cfg.seed, split))
        self._carry: Sample | None = None
        self._carry_state: dict | None = None

    @property
    def skipped(self) -> Counter:
        return self.source.skipped

    def _snapshot(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "image_rng": self.image_rng.bit_generator.state,
                "skipped": dict(self.source.skipped)}

    def _draw(self) -> tuple[Sample, dict]:
        before = self._snapshot()
        for _ in range(_MAX_SKIPS_IN_A_ROW):
            sample = self.source.encode(self.sampler.next_record(), self.image_rng)
            if sample is not None:
                return sample, before
        raise RuntimeError(f"data: {_MAX_SKIPS_IN_A_ROW} records in a row were skipped "
                           f"({dict(self.source.skipped)}); check the corpus and max_sample_tokens")

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if not self.cfg.pack:
            return single(self._draw()[0], self.shift_rng, self.cfg, self.model)
        row: list[Sample] = []
        used = 0
        if self._carry is not None:
            row, used = [self._carry], self._carry.length
            self._carry = self._carry_state = None
        while used < self.cfg.max_length:
            sample, before = self._draw()
            if row and used + sample.length > self.cfg.max_length:
                self._carry, self._carry_state = sample, before
                break
            row.append(sample)
            used += sample.length
        return pack(row, self.shift_rng, self.cfg, self.model)

    def state_dict(self) -> dict:
        base = self._carry_state if self._carry is not None else self._snapshot()
        return {**json.loads(json.dumps(base)), "shift_rng": self.shift_rng.bit_generator.state}

    def load_state_dict(self, d: dict) -> None:
        self.sampler.load_state_dict(d["sampler"])
        self.image_rng.bit_generator.state = d["image_rng"]
        self.shift_rng.bit_generator.state = d["shift_rng"]
        self.source.skipped = Counter(d["skipped"])
        self._carry = self._carry_state = None
