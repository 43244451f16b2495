"""Page embeddings for neighbour search (Jina-OCR-v1 4.1): two CPU ones that need no downloaded weights, and
the pooled vision tower of a ``model/`` checkpoint; each stored by page id in Parquet.

* ``layout``: the page's ink as a fixed 24 x 32 thumbnail (rows x columns of the page downscaled by
  area, so each cell is its ink share) -> PCA to ``dim`` -> L2-normalised.
* ``features``: the handcrafted ``INPUT_FEATURES`` (``classifiers.features``) standardised, plus a
  character n-gram TF-IDF of the PDF text layer reduced by SVD to ``TEXT_DIMS`` (zeros on pages without
  one), concatenated and L2-normalised.
* ``vision``: the mean over image tokens of a checkpoint's vision tower (``model.models.load``: a tiny
  model here, a Qwen2.5-VL folder in production), L2-normalised.

The fitted parts (PCA, scaling, IDF, SVD) are plain arrays saved with ``np.savez`` (no pickle, nothing
executed on load). Which CPU embedding retrieves better is measured by ``benchmarks/retrieval.py``
(docs/classifiers.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from classifiers.features import INPUT_FEATURES, halve

THUMB_SHAPE = (32, 24)  # rows, columns
TEXT_DIMS = 16
KINDS = ("layout", "features", "vision")
EMBED_SCHEMA_FIELDS = ("id", "embedding")


def layout_thumbnail(grey: np.ndarray) -> np.ndarray:
    """The page's ink share per cell of a ``THUMB_SHAPE`` grid, flattened (float32 in [0, 1]). The page is halved
    (2 x 2 means) while at least twice the grid, then area-averaged: ~5x cheaper than one ``INTER_AREA`` pass."""
    rows, cols = THUMB_SHAPE
    while grey.shape[1] >= 2 * cols and grey.shape[0] >= 2 * rows:
        grey = halve(grey)
    small = cv2.resize(grey, (cols, rows), interpolation=cv2.INTER_AREA)
    return 1.0 - small.reshape(-1).astype(np.float32) / 255.0


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _pca(x: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, components dim x d) of ``x`` by SVD (deterministic: signs fixed by the largest loading)."""
    mean = x.mean(axis=0)
    _, sv, vt = np.linalg.svd(x - mean, full_matrices=False)
    keep = max(1, int((sv > 1e-4 * max(float(sv[0]), 1e-12)).sum())) if len(sv) else 1
    comps = vt[:min(dim, keep)]  # directions the sample does not vary along carry only noise
    signs = np.sign(comps[np.arange(len(comps)), np.abs(comps).argmax(axis=1)])
    return mean.astype(np.float32), (comps * signs[:, None]).astype(np.float32)


@dataclass
class LayoutEmbedder:
    """Thumbnail -> PCA -> unit vector. ``fit`` on a sample of thumbnails, then ``transform``."""

    mean: np.ndarray | None = None
    components: np.ndarray | None = None
    kind: str = "layout"

    def fit(self, thumbs: np.ndarray, dim: int = 64) -> "LayoutEmbedder":
        dim = min(dim, thumbs.shape[0], thumbs.shape[1])
        self.mean, self.components = _pca(np.asarray(thumbs, np.float32), dim)
        return self

    def transform(self, thumbs: np.ndarray) -> np.ndarray:
        return _normalise((np.asarray(thumbs, np.float32) - self.mean) @ self.components.T)

    @property
    def dim(self) -> int:
        return int(self.components.shape[0])

    def save(self, path: str | Path) -> None:
        np.savez(path, kind=np.array(self.kind), mean=self.mean, components=self.components)


@dataclass
class FeatureEmbedder:
    """Standardised features (+ text-layer TF-IDF SVD) -> unit vector."""

    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    idf: np.ndarray | None = None
    text_components: np.ndarray | None = None
    kind: str = "features"
    n_features: int = 2**14

    def _tfidf(self, texts: list[str | None]) -> np.ndarray:
        from sklearn.feature_extraction.text import HashingVectorizer

        vec = HashingVectorizer(analyzer="char_wb", ngram_range=(2, 4), n_features=self.n_features,
                                alternate_sign=False, norm=None, lowercase=True)
        counts = vec.transform([t or "" for t in texts]).tocsr()
        counts.data = np.log1p(counts.data)
        return counts

    def fit(self, features: np.ndarray, texts: list[str | None]) -> "FeatureEmbedder":
        x = np.asarray(features, np.float32)
        self.mean = x.mean(axis=0)
        self.scale = np.maximum(x.std(axis=0), 1e-6)
        counts = self._tfidf(texts)
        df = np.bincount(counts.indices, minlength=self.n_features)
        self.idf = np.log((1 + counts.shape[0]) / (1 + df)).astype(np.float32) + 1.0
        weighted = counts.multiply(self.idf).tocsr()
        if weighted.nnz:
            from sklearn.decomposition import TruncatedSVD

            k = min(TEXT_DIMS, max(1, weighted.shape[0] - 1))
            svd = TruncatedSVD(n_components=k, random_state=0).fit(weighted)
            comps = np.zeros((TEXT_DIMS, self.n_features), np.float32)
            comps[:k] = svd.components_
            self.text_components = comps
        else:
            self.text_components = np.zeros((TEXT_DIMS, self.n_features), np.float32)
        return self

    def transform(self, features: np.ndarray, texts: list[str | None]) -> np.ndarray:
        x = (np.asarray(features, np.float32) - self.mean) / self.scale
        x = np.clip(x, -6, 6) / np.sqrt(x.shape[1])
        weighted = self._tfidf(texts).multiply(self.idf).tocsr()
        t = np.asarray(weighted @ self.text_components.T, np.float32)
        t = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12) * 0.5  # text: a third of the weight
        return _normalise(np.hstack([x, t]))

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0] + TEXT_DIMS)

    def save(self, path: str | Path) -> None:
        np.savez(path, kind=np.array(self.kind), mean=self.mean, scale=self.scale, idf=self.idf,
                 text_components=self.text_components, feature_names=np.array(INPUT_FEATURES))


def load_embedder(path: str | Path) -> LayoutEmbedder | FeatureEmbedder:
    """A fitted CPU embedder saved by ``save`` (``allow_pickle=False``: arrays only)."""
    with np.load(path, allow_pickle=False) as z:
        kind = str(z["kind"])
        if kind == "layout":
            return LayoutEmbedder(z["mean"], z["components"])
        if kind == "features":
            if tuple(z["feature_names"]) != INPUT_FEATURES:
                raise ValueError(f"{path}: fitted on other features than classifiers.features.INPUT_FEATURES")
            return FeatureEmbedder(z["mean"], z["scale"], z["idf"], z["text_components"])
    raise ValueError(f"{path}: unknown embedder kind {kind!r}")


class VisionEmbedder:
    """Mean-pooled vision-tower output of a ``model/`` checkpoint (folder, or ``tiny`` for fresh weights)."""

    kind = "vision"

    def __init__(self, checkpoint: str):
        import torch

        from model.models import load

        torch.set_num_threads(1)
        self.loaded = load(checkpoint)
        self.loaded.model.eval()

    def embed_images(self, images: Iterable[bytes]) -> np.ndarray:
        import torch

        from model.processing import to_pil

        out = []
        for data in images:
            pixel_values, grid = self.loaded.processor.image_inputs(to_pil(data))
            with torch.no_grad():
                pooled = self.loaded.model.model.get_image_features(pixel_values=pixel_values, image_grid_thw=grid)
            tokens = pooled.pooler_output[0] if hasattr(pooled, "pooler_output") else pooled[0]
            out.append(tokens.float().mean(dim=0).numpy())
        return _normalise(np.stack(out)) if out else np.zeros((0, 0), np.float32)


def embedding_table(ids: list[str], matrix: np.ndarray) -> pa.Table:
    """``(id, embedding)`` rows, the embedding a fixed-size float32 list."""
    matrix = np.ascontiguousarray(matrix, np.float32)
    flat = pa.array(matrix.reshape(-1), pa.float32())
    return pa.table({"id": pa.array(ids, pa.string()),
                     "embedding": pa.FixedSizeListArray.from_arrays(flat, matrix.shape[1])})


def write_embeddings(path: str | Path, ids: list[str], matrix: np.ndarray) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(embedding_table(ids, matrix), path)
    return path


def read_embeddings(paths: Iterable[str | Path]) -> Iterator[tuple[list[str], np.ndarray]]:
    """(ids, matrix) per row group of each Parquet embedding file, streamed."""
    for p in paths:
        pf = pq.ParquetFile(p)
        for rg in range(pf.metadata.num_row_groups):
            t = pf.read_row_group(rg, columns=list(EMBED_SCHEMA_FIELDS))
            emb = t.column("embedding").combine_chunks()
            dim = emb.type.list_size
            yield t.column("id").to_pylist(), emb.values.to_numpy().reshape(-1, dim).astype(np.float32)
