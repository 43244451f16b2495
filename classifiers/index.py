"""faiss indexes over page embeddings (inner product on unit vectors = cosine): kinds, sharded build, merge, search.

Kinds (``IndexConfig.kind``), chosen by measurement (``benchmarks/index.py``, table in docs/classifiers.md):

* ``flat``: exact ``IndexFlatIP`` in an ``IndexIDMap2``; no training; the default below ``auto_ivf_above``
  pages: a retrieval round asks ~20 seeds x ~10 modes, which exact search answers in seconds at 1M pages.
* ``ivf``: ``IndexIVFFlat`` (``nlist`` lists, ``nprobe`` probed); the coarse quantizer is trained once on a
  sample, each shard adds its vectors to a clone of the trained empty index, and shards merge with
  ``merge_from`` (the same index a single build gives).
* ``ivfpq``: ``IndexIVFPQ`` (``pq_m`` bytes per vector) for when memory forces it; its neighbours are
  approximate in order, and retrieval re-scores every candidate with the classifier anyway
  (``benchmarks/index.py`` re-ranks its top 100 exactly from the stored embeddings for recall@10).
* ``auto``: ``flat`` up to ``auto_ivf_above`` vectors, ``ivf`` above.

HNSW is not offered: it cannot merge shards (``merge_from`` is not implemented) and plateaued at recall@10
0.93 in the measurements of ``shared/reference/retrieval.md``.

Page ids are 32-hex strings; faiss stores the int64 ``faiss_id`` (their first 15 hex digits), and the
retrieval maps back through the embedding table.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import faiss
import numpy as np

from classifiers.errors import InputError
from schemas.config import option

INDEX_KINDS = ("auto", "flat", "ivf", "ivfpq")


@dataclass(frozen=True)
class IndexConfig:
    """The ``index`` block of ``python -m classifiers.retrieve``."""

    kind: str = option("auto", help="flat (exact), ivf, ivfpq, or auto (flat up to auto_ivf_above vectors, else ivf)")
    nlist: int | None = option(None, help="IVF lists (unset: 4 * sqrt(n), at least 16)")
    nprobe: int = option(16, help="IVF lists probed per query")
    pq_m: int = option(16, help="IVFPQ sub-quantizers (bytes per vector); must divide the dimension")
    train_size: int = option(100_000, help="vectors sampled to train the IVF quantizer")
    auto_ivf_above: int = option(2_000_000, help="auto: the size from which ivf replaces flat")

    def __post_init__(self) -> None:
        if self.kind not in INDEX_KINDS:
            raise ValueError(f"kind must be one of {INDEX_KINDS}, got {self.kind!r}")
        if self.nprobe < 1 or self.pq_m < 1 or self.train_size < 1:
            raise ValueError("nprobe, pq_m and train_size must be positive")


def faiss_id(page_id: str) -> int:
    """The int64 id faiss stores for a page: the first 15 hex digits of a hex id, else of its sha256."""
    try:
        int(page_id[:15], 16)
        hexed = page_id if len(page_id) >= 15 else hashlib.sha256(page_id.encode()).hexdigest()
    except ValueError:
        hexed = hashlib.sha256(page_id.encode()).hexdigest()
    return int(hexed[:15], 16)


def resolve_kind(cfg: IndexConfig, n: int) -> str:
    if cfg.kind == "auto":
        return "ivf" if n > cfg.auto_ivf_above else "flat"
    return cfg.kind


def nlist_for(cfg: IndexConfig, n: int) -> int:
    return cfg.nlist or max(16, int(4 * math.sqrt(max(n, 1))))


def empty_index(kind: str, dim: int, cfg: IndexConfig, sample: np.ndarray | None = None, n: int = 0) -> faiss.Index:
    """An empty index of ``kind`` ready for ``add_with_ids``; IVF kinds are trained on ``sample``."""
    if kind == "flat":
        return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
    if kind not in ("ivf", "ivfpq"):
        raise ValueError(f"unknown index kind {kind!r}")
    if sample is None or len(sample) == 0:
        raise ValueError(f"a {kind} index needs a training sample")
    nlist = min(nlist_for(cfg, n or len(sample)), len(sample))
    quantizer = faiss.IndexFlatIP(dim)
    if kind == "ivf":
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    else:
        if dim % cfg.pq_m:
            raise InputError(f"index.pq_m {cfg.pq_m} must divide the embeddings' dimension {dim}")
        index = faiss.IndexIVFPQ(quantizer, dim, nlist, cfg.pq_m, 8, faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(sample, np.float32))
    index.nprobe = cfg.nprobe
    return index


def add_shard(trained: faiss.Index, ids: Iterable[str], vectors: np.ndarray) -> faiss.Index:
    """A clone of the trained empty index holding one shard's vectors."""
    shard = faiss.clone_index(trained)
    shard.add_with_ids(np.ascontiguousarray(vectors, np.float32),
                       np.array([faiss_id(i) for i in ids], np.int64))
    return shard


def merge(indexes: Iterable[faiss.Index]) -> faiss.Index:
    """One index holding every shard's vectors (``merge_from``: IVF lists are concatenated)."""
    merged = None
    for idx in indexes:
        if merged is None:
            merged = faiss.clone_index(idx)
        else:
            merged.merge_from(idx, 0)
    if merged is None:
        raise ValueError("no shard indexes to merge")
    return merged


def serialize(index: faiss.Index) -> bytes:
    return faiss.serialize_index(index).tobytes()


def deserialize(blob: bytes) -> faiss.Index:
    return faiss.deserialize_index(np.frombuffer(blob, np.uint8))


def write_index(index: faiss.Index, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index, str(path))
    return path


def read_index(path: str | Path, nprobe: int | None = None) -> faiss.Index:
    index = faiss.read_index(str(path))
    if nprobe is not None and hasattr(faiss.extract_index_ivf(index) if _is_ivf(index) else None, "nprobe"):
        faiss.extract_index_ivf(index).nprobe = nprobe
    return index


def _is_ivf(index: faiss.Index) -> bool:
    try:
        faiss.extract_index_ivf(index)
        return True
    except RuntimeError:
        return False


def search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, faiss ids) of the ``k`` nearest stored vectors per query (-1 ids pad short answers)."""
    k = max(1, min(k, index.ntotal))
    return index.search(np.ascontiguousarray(queries, np.float32), k)
