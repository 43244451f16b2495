"""Embeddings: layout and features embedders round-trip through code-free files; the vision tower pools a page."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from classifiers.embed import (
    FeatureEmbedder,
    LayoutEmbedder,
    VisionEmbedder,
    layout_thumbnail,
    load_embedder,
    read_embeddings,
    write_embeddings,
)
from classifiers.features import INPUT_FEATURES


def _page(columns: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = np.full((660, 510), 255, np.uint8)
    width = 420 // columns
    for c in range(columns):
        for y in range(40, 620, 18):
            x0 = 40 + c * width
            cv2.rectangle(img, (x0, y), (x0 + int(rng.integers(width // 2, width - 15)), y + 8), 0, -1)
    return img


def test_layout_embedding_separates_layouts_and_round_trips(tmp_path):
    thumbs = np.stack([layout_thumbnail(_page(1 + i % 3, i)) for i in range(30)])
    emb = LayoutEmbedder().fit(thumbs, 8)
    x = emb.transform(thumbs)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    sims = x @ x.T
    same = np.mean([sims[i, j] for i in range(30) for j in range(30) if i != j and i % 3 == j % 3])
    other = np.mean([sims[i, j] for i in range(30) for j in range(30) if i % 3 != j % 3])
    assert same > other + 0.3
    emb.save(tmp_path / "e.npz")
    np.testing.assert_allclose(load_embedder(tmp_path / "e.npz").transform(thumbs), x, atol=1e-6)


def test_feature_embedding_uses_the_text_layer(tmp_path):
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(12, len(INPUT_FEATURES))).astype(np.float32)
    texts = ["invoice total amount due"] * 6 + ["theorem proof lemma integral"] * 6
    emb = FeatureEmbedder().fit(feats, texts)
    x = emb.transform(np.zeros_like(feats), texts)  # identical features: only the text differs
    assert x.shape == (12, emb.dim)
    assert x[0] @ x[1] > x[0] @ x[7]
    emb.save(tmp_path / "f.npz")
    np.testing.assert_allclose(load_embedder(tmp_path / "f.npz").transform(feats, texts),
                               emb.transform(feats, texts), atol=1e-6)


def test_vision_tower_embedding_of_the_tiny_model_and_parquet_round_trip(tmp_path):
    pngs = [cv2.imencode(".png", _page(c, c))[1].tobytes() for c in (1, 3)]
    emb = VisionEmbedder("tiny").embed_images(pngs)
    assert emb.shape[0] == 2 and emb.shape[1] > 8
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert emb[0] @ emb[1] < 1 - 1e-6  # different pages, different vectors
    write_embeddings(tmp_path / "v.parquet", ["a", "b"], emb)
    ((ids, back),) = list(read_embeddings([tmp_path / "v.parquet"]))
    assert ids == ["a", "b"]
    np.testing.assert_array_equal(back, emb)


def test_bad_embedder_file(tmp_path):
    np.savez(tmp_path / "x.npz", kind=np.array("nope"))
    with pytest.raises(ValueError, match="unknown embedder kind"):
        load_embedder(tmp_path / "x.npz")
