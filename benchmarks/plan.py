"""Shard planning at corpus scale: time and peak memory of ``pipelines.write.plan_shards``.

    python benchmarks/plan.py [--pages 10000000] [--page-kb 100] [--exclusions 100000]

The planner is the one step of a corpus run that sees the whole corpus at once. It gets per-(split,
plan bucket) sums, never one item per record, so its input is at most ``write.plan_buckets``
(65,536) aggregates per split however many pages there are; dedup's drops reach it the same way,
as rows and bytes summed per (split, plan bucket), never as ids. This builds those sums for a corpus
of ``--pages`` pages of ``--page-kb`` KB spread evenly over the id space (as hashed ids are) with
``--exclusions`` dedup drops at random ids, and prints the shards planned, the seconds and the
planner's peak Python memory (tracemalloc). Spill files are left out: their names and indexes are
one per bundle.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.write import SpillStat, WriteConfig, bucket_of, plan_shards  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10_000_000)
    parser.add_argument("--page-kb", type=int, default=100)
    parser.add_argument("--exclusions", type=int, default=100_000)
    args = parser.parse_args()
    cfg = WriteConfig()
    rng = random.Random(0)
    per_bucket, extra = divmod(args.pages, cfg.plan_buckets)
    rows_in = {bucket: per_bucket + (bucket < extra) for bucket in range(cfg.plan_buckets)}
    page_bytes = args.page_kb * 1000
    stats = [(("train", bucket), SpillStat(rows, rows * page_bytes, (("corpus", rows),)))
             for bucket, rows in rows_in.items() if rows]
    dropped: dict[int, int] = {}
    left = min(args.exclusions, args.pages)
    while left:  # the plan buckets of random ids, never more than a bucket holds
        bucket = bucket_of(f"{rng.getrandbits(128):032x}", cfg.plan_buckets)
        if dropped.get(bucket, 0) < rows_in[bucket]:
            dropped[bucket] = dropped.get(bucket, 0) + 1
            left -= 1
    excluded = [(("train", bucket), SpillStat(n, n * page_bytes, (("corpus", n),))) for bucket, n in dropped.items()]
    tracemalloc.start()
    started = time.perf_counter()
    plans = plan_shards(stats, [], cfg, excluded)
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    sizes = [p.approx_bytes / 2**20 for p in plans[:-1]] or [plans[-1].approx_bytes / 2**20]
    print(f"pages: {args.pages:,} of {args.page_kb} KB   plan buckets: {cfg.plan_buckets:,}   "
          f"dedup exclusions: {args.exclusions:,}")
    print(f"{'shards planned':<40}{len(plans):>12,}")
    print(f"{'shard size, min / max (MiB; target 256)':<40}{min(sizes):>8.0f} / {max(sizes):.0f}")
    print(f"{'planning seconds':<40}{seconds:>12.2f}")
    print(f"{'planner peak memory (MiB)':<40}{peak / 2**20:>12.1f}")


if __name__ == "__main__":
    main()
