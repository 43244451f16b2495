"""Peak RSS of streaming a corpus shard with ``model.records.iter_records`` at 1x, 2x, 4x ... the pages.

    .venv/bin/python benchmarks/records_rss.py [--pages 'out/retrieval-bench-pages/pool/html-*.parquet'] [--n 250]
        [--mults 1,2,4,8]

Each size is one shard of 64-page row groups (``benchmarks/extract.take``) read in its own process, keeping
``id``, ``image`` and ``response`` of every row (as the trainer's sampler reads them); the child prints its
``VmHWM``. A reader whose memory is bounded by the row group shows the same peak at every size.
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.extract import peak_rss_mb, take  # noqa: E402


def child(shard: str) -> dict:
    from model.records import iter_records

    pages = image_bytes = 0
    for row in iter_records(shard, columns=["id", "image", "response"]):
        pages += 1
        image_bytes += len(row["image"])
    return {"pages": pages, "image_mb": image_bytes / 2**20, "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", default="out/retrieval-bench-pages/pool/html-*.parquet")
    ap.add_argument("--n", type=int, default=250)
    ap.add_argument("--mults", default="1,2,4,8")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    paths = sorted(glob.glob(args.pages))
    tmp = Path(tempfile.mkdtemp(prefix="bench-records-"))
    print("| pages | image MB read | peak RSS MB |\n|---|---|---|")
    for mult in (int(m) for m in args.mults.split(",")):
        shard = take(paths, args.n * mult, tmp / f"pages-{args.n * mult}.parquet")
        res = subprocess.run([sys.executable, __file__, "--child", str(shard)], capture_output=True, text=True)
        if res.returncode:
            print(res.stderr[-2000:])
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"| {r['pages']} | {r['image_mb']:.0f} | {r['peak_rss_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
