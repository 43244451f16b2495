"""The pool job (Beam): page shards -> feature shards + embedding shards + one faiss index, built per shard and merged.

``python -m classifiers.retrieve`` runs it over the pool before retrieving, as two pipelines. First, per
input shard, one DoFn call (``ExtractShard``) streams the pages: features and thumbnail from one decode
(``classifiers.extract``) and the embedding of the fitted embedder the classifiers were trained with.
The driver then trains the empty index (IVF kinds: on a sample of the embeddings). Second, per embedding
shard, ``IndexShard`` adds its vectors to a clone of the trained index; a global combine merges the shard
indexes (``classifiers.index.merge``) and one step writes the result. Outputs, under
``out/pool/``: ``features/<shard>.parquet``, ``embeddings/<shard>.parquet`` (``id``, ``embedding``),
``shards/<shard>.json`` (counts and dead letters: every page is a feature row or a dead letter) and
``index.faiss``. Workers run with ``OMP_NUM_THREADS=1`` (OpenCV, faiss and BLAS single-threaded), as
Beam's multi-process DirectRunner gives each process its own core.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq

from classifiers import index as ix
from classifiers.embed import load_embedder, read_embeddings, write_embeddings
from classifiers.errors import InputError
from classifiers.extract import INPUT_FEATURES, extract_shard, matrix, read_feature_rows
from pipelines.local_runner import new_pipeline
from pipelines.quiet import QUIET_BEAM_ARGS

DEFAULT_BEAM_ARGS = ("--runner=DirectRunner", "--direct_running_mode=in_memory", "--direct_num_workers=1")


def single_thread() -> None:
    """One thread per worker process for OpenCV, faiss and BLAS (``OMP_NUM_THREADS=1``)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import cv2
    import faiss

    cv2.setNumThreads(1)
    faiss.omp_set_num_threads(1)


def shard_name(path: str) -> str:
    """``<file stem>-<8 hex of the path>``: shards of the same name in different folders stay apart."""
    return f"{Path(path).name.removesuffix('.parquet')}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"


def embed_table(table, embedder: Any, kind: str) -> np.ndarray:
    """The embedding of each feature row: ``layout`` / ``features`` from a fitted embedder, ``vision`` as stored."""
    if kind == "layout":
        return embedder.transform(matrix(table, "thumb"))
    if kind == "features":
        return embedder.transform(matrix(table, "features")[:, :len(INPUT_FEATURES)],
                                  table.column("text_layer").to_pylist())
    if kind == "vision":
        v = matrix(table, "vision")
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    raise ValueError(f"unknown embedding kind {kind!r}")


class ExtractShard(beam.DoFn):
    """One page shard -> its feature and embedding shards (and a sidecar with its counts and dead letters)."""

    def __init__(self, out: str, kind: str, embedder_path: str | None, checkpoint: str | None = None):
        self.out, self.kind, self.embedder_path, self.checkpoint = out, kind, embedder_path, checkpoint

    def setup(self) -> None:
        single_thread()
        self.embedder = load_embedder(self.embedder_path) if self.kind in ("layout", "features") else None
        self.vision = None
        if self.kind == "vision":
            from classifiers.embed import VisionEmbedder

            self.vision = VisionEmbedder(self.checkpoint)

    def process(self, path: str) -> Iterator[str]:
        yield extract_and_embed(path, self.out, self.kind, self.embedder, self.vision)


def extract_and_embed(path: str, out: str, kind: str, embedder: Any, vision: Any = None) -> str:
    """Stage logic of ``ExtractShard``: returns the embedding shard's path."""
    name = shard_name(path)
    result = extract_shard(path, f"{out}/features/{name}.parquet", vision=vision)
    ids: list[str] = []
    vecs: list[np.ndarray] = []
    for table in read_feature_rows([result["path"]]):
        ids += table.column("id").to_pylist()
        vecs.append(embed_table(table, embedder, kind))
    vectors = np.vstack(vecs) if vecs else np.zeros((0, 1), np.float32)
    emb_path = write_embeddings(f"{out}/embeddings/{name}.parquet", ids, vectors)
    Path(f"{out}/shards").mkdir(parents=True, exist_ok=True)
    Path(f"{out}/shards/{name}.json").write_text(json.dumps({**result, "source": path}, indent=1))
    return str(emb_path)


class IndexShard(beam.DoFn):
    """One embedding shard -> a clone of the trained empty index holding its vectors (serialised)."""

    def __init__(self, trained_path: str):
        self.trained_path = trained_path

    def setup(self) -> None:
        single_thread()
        self.trained = ix.read_index(self.trained_path)

    def process(self, path: str) -> Iterator[tuple[str, bytes]]:
        ids: list[str] = []
        vecs: list[np.ndarray] = []
        for chunk_ids, chunk in read_embeddings([path]):
            ids += chunk_ids
            vecs.append(chunk)
        if ids:
            yield Path(path).name, ix.serialize(ix.add_shard(self.trained, ids, np.vstack(vecs)))


class MergeIndexes(beam.CombineFn):
    """Shard indexes -> one (``merge_from``), in shard-name order so the merged index is deterministic."""

    def create_accumulator(self):
        return []

    def add_input(self, acc, item):
        acc.append(item)
        return acc

    def merge_accumulators(self, accs):
        return [x for a in accs for x in a]

    def extract_output(self, acc):
        if not acc:
            return None
        return ix.serialize(ix.merge(ix.deserialize(blob) for _, blob in sorted(acc)))


def write_merged(blob: bytes | None, path: str) -> str:
    if blob is None:
        raise ValueError("the pool has no shards to index")
    ix.write_index(ix.deserialize(blob), path)
    return path


def _pipeline(beam_args: list[str] | None) -> beam.Pipeline:
    args = list(beam_args if beam_args is not None else DEFAULT_BEAM_ARGS) + list(QUIET_BEAM_ARGS)
    return new_pipeline(args)


def sample_embeddings(paths: list[str], limit: int, seed: int = 0) -> np.ndarray:
    """Up to ``limit`` embeddings for training an IVF quantizer: a seeded share of every shard's rows."""
    total = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    share = min(1.0, limit / max(total, 1))
    rng = np.random.default_rng(seed)
    picked = []
    for _, chunk in read_embeddings(paths):
        picked.append(chunk[rng.random(len(chunk)) < share])
    return np.vstack(picked)[:limit] if picked else np.zeros((0, 0), np.float32)


def run_pool_job(shards: list[str], out: str, kind: str, embedder_path: str | None, index_cfg: ix.IndexConfig,
                 checkpoint: str | None = None, beam_args: list[str] | None = None) -> dict[str, Any]:
    """Two Beam pipelines over the pool: extract + embed per shard; then index per shard, merged. Between
    them the driver trains the empty index (IVF kinds: on a sample of the embeddings). Returns
    ``{pages, out, dead: [...], index, kind, dim}`` summed over the shards' sidecars."""
    single_thread()  # inherited by multi-processing workers
    emb_paths = [f"{out}/embeddings/{shard_name(s)}.parquet" for s in sorted(shards)]
    with _pipeline(beam_args) as p:
        _ = (p | "page shards" >> beam.Create(sorted(shards))
             | "extract + embed" >> beam.ParDo(ExtractShard(out, kind, embedder_path, checkpoint)))
    totals: dict[str, Any] = {"pages": 0, "out": 0, "dead": []}
    for s in sorted(shards):
        side = json.loads(Path(f"{out}/shards/{shard_name(s)}.json").read_text())
        totals["pages"] += side["input"]
        totals["out"] += side["out"]
        totals["dead"] += side["dead"]
    if totals["out"] == 0:
        raise InputError(f"the pool ({len(shards)} shards) has no readable pages")
    dim = next(chunk.shape[1] for _, chunk in read_embeddings(emb_paths) if len(chunk))
    index_kind = ix.resolve_kind(index_cfg, totals["out"])
    sample = sample_embeddings(emb_paths, index_cfg.train_size) if index_kind != "flat" else None
    trained_path = str(ix.write_index(ix.empty_index(index_kind, dim, index_cfg, sample, totals["out"]),
                                      f"{out}/trained-empty.faiss"))
    index_path = f"{out}/index.faiss"
    with _pipeline(beam_args) as p:
        _ = (p | "embedding shards" >> beam.Create(emb_paths)
             | "add per shard" >> beam.ParDo(IndexShard(trained_path))
             | "merge" >> beam.CombineGlobally(MergeIndexes())
             | "write index" >> beam.Map(write_merged, index_path))
    totals.update({"index": index_path, "kind": index_kind, "dim": int(dim), "embeddings": emb_paths,
                   "features": [f"{out}/features/{shard_name(s)}.parquet" for s in sorted(shards)]})
    return totals
