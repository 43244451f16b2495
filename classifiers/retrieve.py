"""Classifier-driven retrieval (Jina-OCR-v1 4.1): more pages like the current model's failures, from a pool.

``python -m classifiers.retrieve --corpus POOL --classifiers out/classifiers --k 1000 --out out/retrieval``

1. The pool job (``classifiers.job``, Beam) extracts features and embeddings of every pool page and
   builds a faiss index, per shard and merged.
2. Per failure mode, candidates come from the index only (the VLM is never run, and not every page is
   scored): the ``nn_per_seed`` nearest neighbours of each seed failure, unioned with the ``head_k``
   pages nearest the mode's linear head (a linear model on the embedding, searched as a query vector).
3. Candidates are re-ranked by the mode's calibrated classifier (image and text-layer features plus the
   embedding), deduplicated against the training mix (page id or image hash already in the corpus the
   classifiers were trained on) and among themselves (image hash), and the top ``k`` are written.

Outputs under ``OUT/``: ``<mode>.jsonl`` (``id``, ``score``, ``rank``, ``why``, ``domain``, ``source``;
``why`` lists ``seed:<id>:<similarity>`` and/or ``head:<rank>``), ``mixture.yaml`` (a ``data`` block for a
training phase: ``upweight`` of the retrieved pages' domains and ``pages``, the id lists, for
``model.data.DataConfig``), ``<mode>.ids`` (one id a line), ``summary.json``; ``pool/`` holds the job's
shards and index. ``exhaustive: true`` also scores every pool page (``<mode>.exhaustive.jsonl``), the
reference the benchmark compares retrieval with.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from classifiers import index as ix
from classifiers.embed import read_embeddings
from classifiers.errors import InputError
from classifiers.extract import matrix, read_feature_rows
from classifiers.features import INPUT_FEATURES
from classifiers.job import run_pool_job
from classifiers.store import load_model
from schemas.config import ConfigError, describe, load, option

log = logging.getLogger("classifiers.retrieve")


@dataclass(frozen=True)
class RetrieveConfig:
    """What ``python -m classifiers.retrieve`` runs; every key also a ``--set key=value``."""

    corpus: str = option("out/corpus", help="the pool: a corpus folder, shard or glob of PageRecord Parquet")
    classifiers: str = option("out/classifiers", help="folder written by classifiers.train")
    out: str = option("out/retrieval", help="folder for the retrieval files, the mixture block and the pool index")
    k: int = option(1000, help="pages kept per failure mode")
    nn_per_seed: int = option(100, help="nearest neighbours taken per seed failure")
    head_k: int | None = option(None, help="pages taken nearest each mode's linear head (unset: 2 * k)")
    min_score: float = option(0.0, help="drop candidates whose calibrated score is below this")
    exhaustive: bool = option(False, help="also score every pool page (the benchmark's reference)")
    weight: float = option(2.0, help="mixture block: sampling factor of the retrieved pages and their domains")
    index: ix.IndexConfig = option(default_factory=ix.IndexConfig, help="faiss index (classifiers.index)")

    def __post_init__(self) -> None:
        if self.k < 1 or self.nn_per_seed < 0:
            raise ValueError("k must be >= 1 and nn_per_seed >= 0")


@dataclass
class Mode:
    name: str
    folder: Path
    model: Any
    head: np.ndarray
    seeds: tuple[list[str], np.ndarray]


def load_modes(folder: Path, manifest: dict) -> list[Mode]:
    modes = []
    for m in manifest["modes"]:
        if "skipped" in m:
            log.warning("retrieve: no classifier for %s (%s)", m["name"], m["skipped"])
            continue
        d = folder / m["folder"]
        with np.load(d / "head.npz", allow_pickle=False) as z:
            head = z["weight"].astype(np.float32)
        seeds = [(ids, vecs) for ids, vecs in read_embeddings([d / "seeds.parquet"])]
        sid = [i for ids, _ in seeds for i in ids]
        svec = np.vstack([v for _, v in seeds]) if sid else np.zeros((0, len(head)), np.float32)
        modes.append(Mode(m["name"], d, load_model(d / "model.skops"), head, (sid, svec)))
    return modes


def candidates(index, mode: Mode, cfg: RetrieveConfig, fid_to_id: dict[int, str]) -> dict[str, list[str]]:
    """Page id -> reasons, from the seeds' neighbours and the head's nearest pages."""
    why: dict[str, list[str]] = defaultdict(list)
    sid, svec = mode.seeds
    if len(sid) and cfg.nn_per_seed:
        scores, fids = ix.search(index, svec, cfg.nn_per_seed)
        for seed, srow, frow in zip(sid, scores, fids):
            for s, f in zip(srow, frow):
                if f >= 0:
                    why[fid_to_id[int(f)]].append(f"seed:{seed}:{s:.3f}")
    head_k = cfg.head_k if cfg.head_k is not None else 2 * cfg.k
    if head_k:
        q = mode.head / max(float(np.linalg.norm(mode.head)), 1e-12)
        _, fids = ix.search(index, q[None, :], head_k)
        for r, f in enumerate(fids[0]):
            if f >= 0:
                why[fid_to_id[int(f)]].append(f"head:{r}")
    return why


def page_table(feature_paths: list[str], embedding_paths: list[str], wanted: set[str] | None):
    """(ids, X = input features | embedding, domains, sources, image hashes) of the wanted pages (None: all)."""
    emb: dict[str, np.ndarray] = {}
    for ids, vecs in read_embeddings(embedding_paths):
        for i, v in zip(ids, vecs):
            if wanted is None or i in wanted:
                emb[i] = v
    ids, xs, doms, srcs, shas = [], [], [], [], []
    n_in = len(INPUT_FEATURES)
    for t in read_feature_rows(feature_paths, ["id", "domain", "source", "image_sha256", "features"]):
        tid = t.column("id").to_pylist()
        keep = [k for k, i in enumerate(tid) if (wanted is None or i in wanted) and i in emb]
        if not keep:
            continue
        t = t.take(keep)
        f = matrix(t, "features")[:, :n_in]
        kid = t.column("id").to_pylist()
        xs.append(np.hstack([f, np.stack([emb[i] for i in kid])]))
        ids += kid
        doms += t.column("domain").to_pylist()
        srcs += t.column("source").to_pylist()
        shas += t.column("image_sha256").to_pylist()
    x = np.vstack(xs) if xs else np.zeros((0, 0), np.float32)
    return ids, x, doms, srcs, shas


def rank(mode: Mode, ids, x, doms, srcs, shas, why: dict[str, list[str]] | None, cfg: RetrieveConfig,
         mix_ids: set[str], mix_sha: set[str]) -> tuple[list[dict], Counter]:
    """Candidates scored by the classifier, deduplicated, best first, at most ``k``; and the drop counts."""
    dropped: Counter = Counter()
    if not ids:
        return [], dropped
    scores = mode.model.predict_proba(x)[:, 1]
    order = np.argsort(-scores, kind="stable")
    seen_sha: set[str] = set()
    rows = []
    for j in order:
        pid, sha = ids[j], shas[j]
        if pid in mix_ids:
            dropped["in_training_mix"] += 1
            continue
        if sha and sha in mix_sha:
            dropped["image_in_training_mix"] += 1
            continue
        if sha and sha in seen_sha:
            dropped["duplicate_image"] += 1
            continue
        if scores[j] < cfg.min_score:
            dropped["below_min_score"] += 1
            continue
        seen_sha.add(sha)
        rows.append({"id": pid, "score": round(float(scores[j]), 6), "rank": len(rows),
                     "why": (why or {}).get(pid, ["classifier"]), "domain": doms[j], "source": srcs[j]})
        if len(rows) >= cfg.k:
            break
    return rows, dropped


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def mixture_block(results: dict[str, list[dict]], out: Path, weight: float) -> str:
    """The ``data`` block a training phase can take (YAML): upweighted domains and the page-id lists."""
    import yaml

    domains = Counter(r["domain"] for rows in results.values() for r in rows)
    block = {"upweight": {d: float(weight) for d in sorted(domains)},
             "pages": {str(out / f"{name}.ids"): float(weight) for name in sorted(results) if results[name]}}
    return ("# classifiers.retrieve: merge under a training phase's `data` block (model.data.DataConfig)\n"
            + yaml.safe_dump(block, sort_keys=True))


def retrieve(cfg: RetrieveConfig, beam_args: list[str] | None = None) -> dict[str, Any]:
    from classifiers.train import mode_slug
    from model.records import open_parquet, shard_files

    t0 = time.perf_counter()
    folder, out = Path(cfg.classifiers), Path(cfg.out)
    if not (folder / "manifest.json").is_file():
        raise FileNotFoundError(f"--classifiers {folder}: no trained classifiers there (no manifest.json); "
                                f"python -m classifiers.train writes them")
    pool = shard_files(cfg.corpus)  # inputs checked before the output folder is made
    if not any(open_parquet(f).metadata.num_rows for f in pool):
        raise InputError(f"the pool {cfg.corpus} ({len(pool)} shards) has no pages")
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((folder / "manifest.json").read_text())
    modes = load_modes(folder, manifest)
    embedder = str(folder / manifest["embedder"]) if manifest.get("embedder") else None
    job = run_pool_job(pool, str(out / "pool"), manifest["embedding"], embedder, cfg.index,
                       manifest.get("checkpoint"), beam_args)
    t_job = time.perf_counter() - t0
    index = ix.read_index(job["index"], cfg.index.nprobe)
    fid_to_id = {ix.faiss_id(i): i for ids, _ in read_embeddings(job["embeddings"]) for i in ids}
    mix = pq.read_table(folder / "training_mix.parquet")
    mix_ids, mix_sha = set(mix.column("id").to_pylist()), set(mix.column("image_sha256").to_pylist()) - {""}

    whys = {m.name: candidates(index, m, cfg, fid_to_id) for m in modes}
    wanted = set().union(*[set(w) for w in whys.values()]) if whys else set()
    table = page_table(job["features"], job["embeddings"], wanted)
    pos = {i: k for k, i in enumerate(table[0])}
    results, summary = {}, {"pool_pages": job["pages"], "indexed": job["out"], "dead": len(job["dead"]),
                            "index_kind": job["kind"], "dim": job["dim"], "modes": {}}
    everything = page_table(job["features"], job["embeddings"], None) if cfg.exhaustive else None
    for m in modes:
        why = whys[m.name]
        sel = [pos[i] for i in why if i in pos]
        sub = (list(np.array(table[0], object)[sel]), table[1][sel], [table[2][k] for k in sel],
               [table[3][k] for k in sel], [table[4][k] for k in sel]) if sel else ([], None, [], [], [])
        rows, dropped = rank(m, *sub, why, cfg, mix_ids, mix_sha)
        slug = mode_slug(m.name)
        write_jsonl(out / f"{slug}.jsonl", rows)
        (out / f"{slug}.ids").write_text("".join(r["id"] + "\n" for r in rows))
        results[slug] = rows
        summary["modes"][m.name] = {"candidates": len(why), "kept": len(rows), "dropped": dict(dropped),
                                    "from_seeds": sum(any(w.startswith("seed:") for w in r["why"]) for r in rows),
                                    "from_head": sum(any(w.startswith("head:") for w in r["why"]) for r in rows)}
        if everything is not None:
            ex_rows, _ = rank(m, *everything, None, cfg, mix_ids, mix_sha)
            write_jsonl(out / f"{slug}.exhaustive.jsonl", ex_rows)
        print(f"{m.name}: {len(why)} candidates from {len(m.seeds[0])} seeds + head -> {len(rows)} kept "
              f"(dropped {dict(dropped)})", flush=True)
    (out / "mixture.yaml").write_text(mixture_block(results, out, cfg.weight))
    summary.update({"seconds_pool_job": round(t_job, 1), "seconds": round(time.perf_counter() - t0, 1),
                    "config": asdict(cfg)})
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def main(argv: list[str] | None = None) -> None:
    from schemas.config import parse_sets

    ap = argparse.ArgumentParser(
        prog="python -m classifiers.retrieve", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Retrieve pool pages like each failure mode's failures; writes retrieval files and a mixture "
                    "block. Arguments after -- go to Beam (default: DirectRunner, one in-memory worker).",
        epilog="config keys (--set KEY=VALUE):\n  " + "\n  ".join(describe(RetrieveConfig)))
    ap.add_argument("--corpus", help="the pool")
    ap.add_argument("--classifiers")
    ap.add_argument("--out")
    ap.add_argument("--k", type=int)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    argv = sys.argv[1:] if argv is None else list(argv)
    beam_args: list[str] = []
    if "--" in argv:  # only what follows -- goes to Beam; anything unknown before it is an argparse error
        cut = argv.index("--")
        argv, beam_args = argv[:cut], argv[cut + 1:]
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    given = {k: v for k in ("corpus", "classifiers", "out", "k") if (v := getattr(args, k)) is not None}
    try:
        raw = parse_sets(args.set)  # (a bad --set: one line, exit 2)
        raw.update(given)
        cfg = load(RetrieveConfig, raw, "retrieve")
        summary = retrieve(cfg, beam_args or None)
    except (ConfigError, FileNotFoundError, InputError) as exc:  # a bad key, a missing or unusable input
        print(f"classifiers.retrieve: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"{len(summary['modes'])} modes, {summary['indexed']} pool pages indexed ({summary['index_kind']}) "
          f"-> {cfg.out}")


if __name__ == "__main__":
    main()
