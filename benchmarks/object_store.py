"""The corpus DAG writing to an object store: ``s3://`` on an S3 API server on 127.0.0.1.

    python benchmarks/object_store.py [--pages 2000] [--workers 2]

Builds the ingest benchmark's olmOCR-mix input (``--pages`` text pages, local disk) and runs the
corpus DAG (DirectRunner, multi-processing) twice on it: output to a local folder and output to
``s3://`` on moto's S3 server (``tests/pipelines/test_object_store.py``), which stands in for S3
here. Prints both wall times and the objects the run made and left. What it shows is the cost per
file operation (Beam's S3 filesystem builds a boto3 client for each, ~0.2 s of CPU), which is why
spills are one file per bundle; it says nothing of a real store's bandwidth or latency.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from ingest import build_input  # noqa: E402
from tests.pipelines.test_object_store import BUCKET, keys, s3_server  # noqa: E402


def run(config: Path, output: str, workers: int, extra: list[str]) -> float:
    raw = json.loads(config.read_text())
    raw["run"]["output"] = output
    config.write_text(json.dumps(raw))
    cmd = [sys.executable, "-m", "pipelines.corpus", "--config", str(config), "--direct_running_mode=multi_processing",
           f"--direct_num_workers={workers}", *extra]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"pipeline failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_input(root, args.pages)
        config = root / "bench.yaml"
        config.write_text(json.dumps({
            "run": {"output": "", "progress_every": 0},
            "clean": {"stages": [], "dedup": {"enabled": False}},
            "sources": [{"name": "bench", "kind": "olmocr_mix", "paths": [str(root / "mix" / "*.parquet")],
                         "license": "odc-by"}],
        }))
        local = run(config, str(root / "out"), args.workers, [])
        with s3_server(root / "s3.log") as (client, options):
            remote = run(config, f"s3://{BUCKET}/out", args.workers, options)
            left = keys(client, "out/")
    print(f"text pages: {args.pages}   workers: {args.workers}")
    print(f"{'output':<40}{'seconds':>10}{'pages/s':>10}")
    print(f"{'local folder':<40}{local:>10.1f}{args.pages / local:>10.1f}")
    print(f"{'s3:// (S3 API server on 127.0.0.1)':<40}{remote:>10.1f}{args.pages / remote:>10.1f}")
    print(f"objects left in the bucket: {len(left)} ({', '.join(k.split('/', 1)[1] for k in left)})")


if __name__ == "__main__":
    main()
