"""faiss index kinds: sharded IVF build merged equals a single build; flat is exact; ids map back."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from classifiers import index as ix


def _hid(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()[:32]  # page ids are hashes


def _clustered(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, d))
    x = centres[rng.integers(0, 20, n)] + 0.35 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_ivf_shards_merge_into_the_single_build():
    x = _clustered(3000, 32, 0)
    ids = [_hid(i) for i in range(3000)]
    cfg = ix.IndexConfig(kind="ivf", nlist=32, nprobe=8)
    trained = ix.empty_index("ivf", 32, cfg, x[:1000])
    single = ix.add_shard(trained, ids, x)
    merged = ix.merge(ix.deserialize(ix.serialize(ix.add_shard(trained, ids[a:a + 1000], x[a:a + 1000])))
                      for a in (0, 1000, 2000))
    q = _clustered(50, 32, 1)
    assert merged.ntotal == 3000
    np.testing.assert_array_equal(ix.search(single, q, 10)[1], ix.search(merged, q, 10)[1])


def test_flat_is_exact_and_ids_map_back():
    x = _clustered(500, 16, 2)
    ids = [_hid(i) for i in range(500)]
    flat = ix.add_shard(ix.empty_index("flat", 16, ix.IndexConfig(kind="flat")), ids, x)
    scores, fids = ix.search(flat, x[:5], 1)
    back = {ix.faiss_id(i): i for i in ids}
    assert [back[int(f)] for f in fids[:, 0]] == ids[:5]
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)


def test_kind_choice_and_bad_settings():
    assert ix.resolve_kind(ix.IndexConfig(), 1000) == "flat"
    assert ix.resolve_kind(ix.IndexConfig(auto_ivf_above=100), 1000) == "ivf"
    with pytest.raises(ValueError, match="kind"):
        ix.IndexConfig(kind="hnsw")
    with pytest.raises(ValueError, match="training sample"):
        ix.empty_index("ivf", 8, ix.IndexConfig())
    assert ix.faiss_id("not-hex-id") == ix.faiss_id("not-hex-id") >= 0
