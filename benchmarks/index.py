"""faiss index kinds on N synthetic clustered vectors of the page embedding's size: build time, peak memory,
queries/s and recall@10 against exact search.

    .venv/bin/python benchmarks/index.py [--n 1000000] [--dim 64] [--kinds flat,ivf,ivfpq]

Vectors: 1,000 Gaussian centres, each point centre + 0.35 noise, L2-normalised (as in
shared/reference/retrieval.md), inner product. Each kind is built in its own process (peak RSS is that
process's ``ru_maxrss``, the vectors included) the way the pool job builds it: the empty index trained on a
100k sample, four shards added to clones and merged. Queries: 1,000 in one ``search`` call, one thread
(``OMP_NUM_THREADS=1``); wall and CPU seconds both printed, since the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def clustered(n: int, dim: int, seed: int, centres: int = 1000) -> np.ndarray:
    rng = np.random.default_rng(0)
    c = rng.normal(size=(centres, dim)).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), np.float32)
    for a in range(0, n, 100_000):
        b = min(n, a + 100_000)
        x = c[rng.integers(0, centres, b - a)] + 0.35 * rng.normal(size=(b - a, dim)).astype(np.float32)
        out[a:b] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def one(kind: str, n: int, dim: int, nprobe: int, cache: Path) -> dict:
    import faiss

    from classifiers import index as ix

    faiss.omp_set_num_threads(1)
    x = np.load(cache / "x.npy", mmap_mode="r")
    q = np.load(cache / "q.npy")
    truth = np.load(cache / "truth.npy")
    ids = [f"{i:015x}" for i in range(n)]  # faiss_id(id) == i
    cfg = ix.IndexConfig(kind=kind, nlist=4096 if kind != "flat" else None, nprobe=nprobe, pq_m=16)
    t, c = time.perf_counter(), time.process_time()
    rng = np.random.default_rng(0)
    sample = np.asarray(x[np.sort(rng.choice(n, min(n, 100_000), replace=False))]) if kind != "flat" else None
    trained = ix.empty_index(kind, dim, cfg, sample, n)
    shards = []
    for a in range(0, n, n // 4):
        shards.append(ix.add_shard(trained, ids[a:a + n // 4], np.asarray(x[a:a + n // 4])))
    index = ix.merge(shards)
    del shards
    build, build_cpu = time.perf_counter() - t, time.process_time() - c
    if kind != "flat":
        faiss.extract_index_ivf(index).nprobe = nprobe
    t, c = time.perf_counter(), time.process_time()
    k = 100 if kind == "ivfpq" else 10
    _, got = index.search(q, k)
    if kind == "ivfpq":  # exact re-rank of the top 100 from the stored embeddings
        got = np.array([row[np.argsort(-(np.asarray(x[row]) @ qv))][:10] for row, qv in zip(got, q)])
    qs, qs_cpu = time.perf_counter() - t, time.process_time() - c
    recall = float(np.mean([len(set(g[:10]) & set(tr[:10])) / 10 for g, tr in zip(got, truth)]))
    size = len(faiss.serialize_index(index))
    return {"kind": kind, "nprobe": nprobe if kind != "flat" else None, "build_s": round(build, 1),
            "build_cpu_s": round(build_cpu, 1), "qps_1thread": round(len(q) / qs), "qps_cpu": round(len(q) / qs_cpu),
            "recall@10": round(recall, 4), "index_mb": round(size / 2**20), "peak_rss_mb":
            round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--kinds", default="flat,ivf,ivfpq")
    ap.add_argument("--nprobe", default="16")
    ap.add_argument("--cache", default="out/bench-index")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cache = Path(args.cache) / f"{args.n}x{args.dim}"
    if args.one:
        kind, nprobe = args.one.split(":")
        print(json.dumps(one(kind, args.n, args.dim, int(nprobe), cache)))
        return
    if not (cache / "truth.npy").exists():
        import faiss

        cache.mkdir(parents=True, exist_ok=True)
        x = clustered(args.n, args.dim, 1)
        q = clustered(1000, args.dim, 2)
        np.save(cache / "x.npy", x)
        np.save(cache / "q.npy", q)
        flat = faiss.IndexFlatIP(args.dim)
        flat.add(x)
        np.save(cache / "truth.npy", flat.search(q, 10)[1])
        del x, flat
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print("| kind | nprobe | build s (wall / CPU) | peak RSS MB | index MB | queries/s 1 thread (wall / CPU) "
          "| recall@10 |")
    print("|---|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for nprobe in (args.nprobe.split(",") if kind != "flat" else ["1"]):
            res = subprocess.run([sys.executable, __file__, "--n", str(args.n), "--dim", str(args.dim), "--cache",
                                  args.cache, "--one", f"{kind}:{nprobe}"], env=env, capture_output=True, text=True)
            if res.returncode:
                print(f"| {kind} | failed: {res.stderr.strip().splitlines()[-1:]} |")
                continue
            r = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"| {kind} | {r['nprobe'] or '-'} | {r['build_s']} / {r['build_cpu_s']} | {r['peak_rss_mb']} | "
                  f"{r['index_mb']} | {r['qps_1thread']} / {r['qps_cpu']} | {r['recall@10']} |", flush=True)


if __name__ == "__main__":
    main()
