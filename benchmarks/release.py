"""The Hub release of a 10,000-page corpus, and its upload to the local Hub server.

    python benchmarks/release.py [--source out/corpus] [--pages 10000] [--keep DIR]

Builds a corpus of ``--pages`` pages by replicating the pages of ``--source`` (a corpus run's
output; without one, the sample corpus is built first, as ``make corpus`` does): copy k of a page
gets a new id and source id, its image and labels stay, so the page mix and image sizes are the
samples'. (Parquet compresses each data page on its own, and
the ids scatter the copies, so repeated images barely shrink the shards.) Then, each a subprocess:

1. ``python -m pipelines.release --corpus C --out R``: wall time, peak RSS (the child's
   ``ru_maxrss``), shards (rows, bytes, row groups, largest row group) from ``release.json``;
2. ``--skip-build --repo-id ORG/NAME --push`` to ``tests/hub_server.py`` on 127.0.0.1
   (``HF_ENDPOINT``): wall time, the requests the server logged by route, and the commits;
3. the same push again (nothing changed): the same figures.

The server takes every file inline ("regular", base64 in the commit body) instead of through Xet
storage as the Hub does, so upload times are a local CPU figure, not a network one; the requests and
commits are the client's own (huggingface_hub's pipelined upload). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from schemas.manifest import CountEvent, RunManifest  # noqa: E402
from schemas.page import PAGE_SCHEMA, stable_id  # noqa: E402
from tests.hub_server import hub_server  # noqa: E402
from tests.object_stores import free_port  # noqa: E402

REPO_ID = "pagemill/bench"


def replicate(source: Path, out: Path, pages: int) -> dict:
    """A corpus of ``pages`` pages copied round-robin from ``source``'s shards, with a balanced manifest."""
    manifest = RunManifest.from_json((source / "manifest.json").read_text())
    rows = [row for shard in manifest.shards for row in pq.read_table(source / shard["file"]).to_pylist()]
    if not rows:
        raise SystemExit(f"{source} holds no pages")
    copies = []
    for k in range(pages):
        row = dict(rows[k % len(rows)])
        copy = k // len(rows)
        row["id"] = stable_id(row["id"], str(copy)) if copy else row["id"]
        row["source_id"] = f"{row['source_id']}#{copy}" if copy else row["source_id"]
        row["split"] = "train"
        copies.append(row)
    copies.sort(key=lambda r: r["id"])
    (out / "data").mkdir(parents=True)
    per_shard = 2000
    shards = []
    count = -(-pages // per_shard)
    for i in range(count):
        name = f"data/train-{i:05d}-of-{count:05d}.parquet"
        part = copies[i * per_shard:(i + 1) * per_shard]
        pq.write_table(pa.Table.from_pylist(part, schema=PAGE_SCHEMA), out / name, row_group_size=100)
        shards.append({"file": name, "split": "train", "rows": len(part)})
    per_source = collections.Counter(r["source"] for r in copies)
    events = [CountEvent("write", s, kind, "", n) for s, n in per_source.items() for kind in ("in", "out", "emitted")]
    bench = RunManifest.from_events(events, ["write"], run={"config": manifest.run.get("config", {})}, shards=shards)
    (out / "manifest.json").write_text(bench.to_json())
    return {"pages": pages, "distinct_pages": len(rows), "corpus_bytes": sum(p.stat().st_size
                                                                             for p in (out / "data").iterdir())}


def timed(command: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (MB) of this child alone (``wait4``'s rusage), and its output."""
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if child.returncode != 0:
        raise SystemExit(f"{command[2:4]} failed:\n{text[-5000:]}")
    return wall, usage.ru_maxrss // 1024, text


def server_figures(log: str) -> dict:
    routes = collections.Counter()
    for method, path in re.findall(r'"(GET|POST) (\S+)" \d{3} ', log):
        route = re.sub(r"^/api/datasets/[^/]+/[^/]+/(\w[\w-]*).*", r"\1", path.split("?")[0])
        routes[f"{method} {route}"] += 1
    commits = [int(n) for n in re.findall(r"\] commit [0-9a-f]{40} files=(\d+)", log)]
    return {"requests": dict(routes), "commits": len(commits), "files_per_commit": commits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=REPO / "out" / "corpus", help="a corpus to replicate")
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary folder, removed)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="release-bench-"))
    try:
        if not (args.source / "manifest.json").exists():  # the sample corpus, as `make corpus` builds it
            args.source = work / "source"
            subprocess.run([sys.executable, "-m", "pipelines.corpus", "--output", str(args.source)], cwd=REPO,
                           check=True, capture_output=True)
        result = {"load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
        started = time.perf_counter()
        result["corpus"] = replicate(args.source, work / "corpus", args.pages)
        result["corpus"]["build_s"] = round(time.perf_counter() - started, 1)

        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        release = work / "release"
        wall, rss, _ = timed([sys.executable, "-m", "pipelines.release", "--corpus", str(work / "corpus"),
                              "--out", str(release), "--repo-id", REPO_ID], env)
        summary = json.loads((release / "release.json").read_text())
        result["release"] = {"wall_s": round(wall, 1), "peak_rss_mb": rss, "shards": [
            {k: s[k] for k in ("file", "rows", "bytes", "uncompressed_bytes", "row_groups", "largest_row_group_bytes")}
            for s in summary["shards"]]}

        log = work / "hub.log"
        with hub_server(work / "hub", REPO_ID, free_port(), log) as endpoint:
            push_env = env | {"HF_ENDPOINT": endpoint, "HF_HOME": str(work / "hf"), "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                              "HF_HUB_DISABLE_TELEMETRY": "1"}
            push = [sys.executable, "-m", "pipelines.release", "--out", str(release), "--skip-build", "--repo-id",
                    REPO_ID, "--push"]
            for name in ("push", "rerun"):
                offset = log.stat().st_size
                wall, rss, _ = timed(push, push_env)
                result[name] = {"wall_s": round(wall, 1), "client_peak_rss_mb": rss,
                                **server_figures(log.read_text()[offset:])}
        result["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(result, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
