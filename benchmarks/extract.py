"""Feature + embedding extraction in the pool's Beam job: pages/s/core, and peak RSS at 1x and 4x the pages.

    .venv/bin/python benchmarks/extract.py [--pages 'out/retrieval-bench-pages/pool/html-*.parquet'] [--n 100]
        [--mults 1,4]

The pages are the retrieval benchmark's Chromium pages (``python benchmarks/retrieval_pool.py`` renders them once).

Each size runs in its own process with ``OMP_NUM_THREADS=1`` and the DirectRunner in memory (one worker):
the extract + embed step of ``classifiers.job`` over n and 4n pages (a layout embedder fitted on the first
200 pages). Pages/s/core = pages / CPU seconds of that process (on a shared machine wall time is not the
work done). Also, in-process: CPU ms per page to decode a page PNG straight to the small grey page, and to
compute the features and thumbnail from it (what is left when another stage shares the decode).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def take(paths: list[str], n: int, dst: Path) -> Path:
    """The first ``n`` pages of ``paths`` (cycled if fewer; ids repeat, fine for a throughput figure) in one shard
    of 64-page row groups, streamed (this process stays small: its children inherit its memory until exec)."""
    schema = pq.ParquetFile(paths[0]).schema_arrow
    done = 0
    with pq.ParquetWriter(dst, schema) as w:
        while done < n:
            for p in paths:
                for b in pq.ParquetFile(p).iter_batches(batch_size=64):
                    b = b.slice(0, n - done)
                    w.write_table(pa.Table.from_batches([b], schema))
                    done += b.num_rows
                    if done >= n:
                        return dst
    return dst


def peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``). Not ``getrusage``'s ``ru_maxrss``: Linux carries a parent's high-water
    mark into a child across fork + exec, so a child reported its parent's peak when that was higher."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(shard: str, embedder: str, out: str) -> dict:
    from classifiers.index import IndexConfig
    from classifiers.job import run_pool_job

    c, t = time.process_time(), time.perf_counter()
    res = run_pool_job([shard], out, "layout", embedder, IndexConfig(kind="flat"))
    return {"pages": res["out"], "cpu_s": time.process_time() - c, "wall_s": time.perf_counter() - t,
            "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", default="out/retrieval-bench-pages/pool/html-*.parquet")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--mults", default="1,4", help="page counts to run, as multiples of --n")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    os.environ["OMP_NUM_THREADS"] = "1"
    import numpy as np

    from classifiers.embed import LayoutEmbedder, layout_thumbnail
    from classifiers.features import decode_grey, image_features

    paths = sorted(glob.glob(args.pages))
    tmp = Path(tempfile.mkdtemp(prefix="bench-extract-"))
    sample = [r["image"]["bytes"] for b in pq.ParquetFile(paths[0]).iter_batches(batch_size=100, columns=["image"])
              for r in b.to_pylist()][:100]
    c = time.process_time()
    decoded = [decode_grey(d) for d in sample]
    dec = (time.process_time() - c) / len(sample)
    c = time.process_time()
    thumbs = []
    for g in decoded:
        image_features(*g)
        thumbs.append(layout_thumbnail(g[0]))
    feat = (time.process_time() - c) / len(sample)
    emb = LayoutEmbedder().fit(np.array(thumbs), 64)
    emb.save(tmp / "embedder.npz")
    shape = decoded[0][2]
    print(f"page {shape[1]}x{shape[0]} px: decode to {decoded[0][0].shape[1]} px grey {dec * 1000:.1f} ms CPU; "
          f"features + thumbnail {feat * 1000:.1f} ms CPU -> {1 / feat:.0f} pages/s/core with a shared decode, "
          f"{1 / (dec + feat):.0f} with its own decode")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print("| pages | CPU s | wall s | pages/s/core (CPU) | pages/s/core over the previous size | peak RSS MB |\n"
          "|---|---|---|---|---|---|")
    prev = None  # (pages, CPU s) of the previous size: the difference leaves out the job's fixed cost
    for mult in (int(m) for m in args.mults.split(",")):
        n = args.n * mult
        shard = take(paths, n, tmp / f"pages-{n}.parquet")
        res = subprocess.run([sys.executable, __file__, "--child", str(shard), str(tmp / "embedder.npz"),
                              str(tmp / f"out-{n}")], env=env, capture_output=True, text=True)
        if res.returncode:
            print(res.stderr[-2000:])
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        marginal = f"{(r['pages'] - prev[0]) / (r['cpu_s'] - prev[1]):.0f}" \
            if prev and r["cpu_s"] > prev[1] else "-"
        prev = (r["pages"], r["cpu_s"])
        print(f"| {r['pages']} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | {r['pages'] / r['cpu_s']:.0f} | {marginal} | "
              f"{r['peak_rss_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
