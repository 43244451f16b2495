"""The corpus DAG writing to object stores: ``s3://`` and ``gs://`` on API servers on 127.0.0.1.

    python benchmarks/object_store.py [--pages 2000] [--workers 2]

Builds the ingest benchmark's olmOCR-mix input (``--pages`` text pages, local disk) and runs the
corpus DAG (DirectRunner, multi-processing) on it three times: output to a local folder, to
``s3://`` on moto's S3 server and to ``gs://`` on gcp-storage-emulator (``tests/object_stores.py``),
which stand in for S3 and GCS here. Prints the wall times and the objects each run left. What it
shows is the cost per file operation, which it also prints on its own (``pipelines.io`` ``exists``
and ``open`` + read of a 50 KB object, as a remote image mirror does per page): Beam's S3 filesystem
builds a boto3 client for each call (~0.2 s of CPU), so ``pipelines.io`` keeps one per process, and
spills are one file per bundle. It says nothing of a real store's bandwidth or latency.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from ingest import build_input, write_config  # noqa: E402

from tests.object_stores import SERVERS  # noqa: E402


def run(config: Path, output: str, workers: int, extra: list[str], env: dict[str, str] | None = None) -> float:
    raw = json.loads(config.read_text())
    raw["run"]["output"] = output
    config.write_text(json.dumps(raw))
    cmd = [sys.executable, "-m", "pipelines.corpus", "--config", str(config), "--direct_running_mode=multi_processing",
           f"--direct_num_workers={workers}", *extra]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"pipeline failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def per_operation(store, root: Path, n: int = 20) -> dict[str, float]:
    """CPU milliseconds per ``pipelines.io`` call on ``n`` 50 KB objects, in this process."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import io

    os.environ.update(store.env)
    FileSystems.set_options(PipelineOptions(store.options))  # as Beam does in its workers
    blob = root / "blob.bin"
    blob.write_bytes(os.urandom(50_000))
    for i in range(n):
        store.put(blob, f"ops/{i}.bin")
    costs = {}
    for name, call in (("exists", io.exists), ("open + read", io.read_bytes)):
        started = time.process_time()
        for i in range(n):
            call(store.uri(f"ops/{i}.bin"))
        costs[name] = (time.process_time() - started) / n * 1000
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_input(root, args.pages)
        config = write_config(root, shard_mb=256)  # the ingest benchmark's, at the default shard size
        results, operations = [("local folder", run(config, str(root / "out"), args.workers, []), [])], {}
        for scheme, server in SERVERS.items():
            with server(root / f"{scheme}.log") as store:
                seconds = run(config, store.uri("out"), args.workers, store.options, store.env)
                results.append((f"{scheme}:// (API server on 127.0.0.1)", seconds, store.keys("out/")))
                operations[scheme] = per_operation(store, root)
    print(f"text pages: {args.pages}   workers: {args.workers}")
    print(f"{'output':<40}{'seconds':>10}{'pages/s':>10}")
    for name, seconds, _ in results:
        print(f"{name:<40}{seconds:>10.1f}{args.pages / seconds:>10.1f}")
    for name, _, left in results[1:]:
        print(f"objects left, {name.split()[0]} {len(left)} ({', '.join(k.split('/', 1)[1] for k in left)})")
    print(f"{'pipelines.io call, CPU ms per 50 KB object':<40}{'exists':>10}{'open+read':>10}")
    for scheme, costs in operations.items():
        print(f"{scheme + '://':<40}{costs['exists']:>10.1f}{costs['open + read']:>10.1f}")


if __name__ == "__main__":
    main()
