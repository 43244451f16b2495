"""A small corpus and pool of cheap PIL pages (benchmarks/retrieval_pool.py), with a table failure mode."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.retrieval_pool import plain_page
from schemas.page import PAGE_SCHEMA


def write_pages(path: Path, n: int, seed: int, table_share: float) -> dict[str, bool]:
    """``n`` pages -> one PAGE_SCHEMA shard at ``path``; returns id -> has_table."""
    recs = [plain_page(i, seed, table_share, width=612, height=792) for i in range(n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([r.to_row() for r, _ in recs], PAGE_SCHEMA), path)
    return {r.id: t for r, t in recs}


@pytest.fixture(scope="session")
def small_world(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("retrieval")
    corpus = write_pages(root / "corpus/data/train-00000-of-00001.parquet", 40, seed=1, table_share=0.3)
    pool = write_pages(root / "pool/a.parquet", 30, seed=2, table_share=0.2)
    pool.update(write_pages(root / "pool/b.parquet", 30, seed=3, table_share=0.2))
    failing = [i for i, t in corpus.items() if t][:5]
    errors = {"failure_modes": [{"name": "table@benchpool", "test_type": "table", "domain": "benchpool",
                                 "example_ids": failing}]}
    (root / "errors.json").write_text(json.dumps(errors))
    return {"root": root, "corpus": corpus, "pool": pool, "failing": failing}
