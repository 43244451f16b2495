"""Relabel throughput against the local server: plain client vs the Beam stage, a rerun, peak RSS 1x vs 4x.

    python benchmarks/relabel.py [--requests 1000] [--concurrency 32] [--max-tokens 1] [--rss-pages 100]

Starts ``python -m relabel.serve``'s server (``LocalServer``) over the tiny checkpoint (exported to a
temporary folder when ``out/relabel/tiny-checkpoint`` is missing) behind a counting proxy on 127.0.0.1,
then prints:

1. ``client``: ``--requests`` chat requests (each its own text, a 200x280 PNG page) through
   ``ChatClient`` at ``--concurrency``: lost (failed) requests, p50/p99 latency, requests/s, client CPU
   seconds per request (this process's CPU time; the server runs in its own process);
2. ``beam``: the same number of records through the ``relabel`` stage in a Beam pipeline
   (DirectRunner, ``BatchElements`` + ``ApplyBatchStage``, the DAG's wiring) with a fresh cache:
   records/s and its ratio to the plain client's requests/s;
3. ``rerun``: the same pipeline again: requests the proxy saw (should be 0) and seconds;
4. ``rss``: peak RSS of a child process running the Beam stage over ``--rss-pages`` and 4x as many
   records (records are made inside the pipeline, never listed), and the ratio.

``--beam-via runinference`` runs step 2 through Beam's ``RunInference`` with a ``RemoteModelHandler``
instead (the alternative the stage design was chosen against), ``both`` runs the two (each with a fresh
cache; the rerun uses the last one's). Latency counts from the moment a request may go (one of the
``--concurrency`` slots is free), not from when the benchmark queued it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from PIL import Image  # noqa: E402

from relabel.client import ChatClient, ChatRequest, ClientConfig  # noqa: E402
from schemas.page import PageRecord, ProvenanceStep  # noqa: E402

DEFAULT_CHECKPOINT = REPO / "out" / "relabel" / "tiny-checkpoint"


def page_png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (200, 280), "white").save(buf, format="PNG")
    return buf.getvalue()


PNG = page_png()


def make_record(i: int) -> PageRecord:
    return PageRecord(id=f"bench-{i}", source="bench", source_id=str(i), page_number=0, domain="documents",
                      language="en", license="cc0-1.0", image=PNG, image_sha256=hashlib.sha256(PNG).hexdigest(),
                      width=200, height=280, task="parse_page", instruction=f"Transcribe page {i}.",
                      response="label", provenance=[ProvenanceStep("bench", "1", "0")])


def plain_client(base_url: str, n: int, concurrency: int, max_tokens: int) -> dict:
    client = ChatClient(ClientConfig(base_url=base_url, concurrency=concurrency, timeout_s=300))
    latencies: list[float] = []
    lost = 0

    gate = asyncio.Semaphore(concurrency)  # latency counts from the moment a request may go, not from queueing

    async def one(i: int):
        nonlocal lost
        async with gate:
            started = time.perf_counter()
            try:
                await client.complete(ChatRequest(f"Transcribe page {i}.", PNG, max_tokens, 0.0, 0, f"bench-{i}"))
                latencies.append(time.perf_counter() - started)
            except Exception:
                lost += 1

    async def run():
        await client.check()
        await asyncio.gather(*(one(i) for i in range(n)))
        await client.close()

    cpu0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(run())
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    latencies.sort()
    return {"requests": n, "lost": lost, "p50_s": round(statistics.median(latencies), 3),
            "p99_s": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3),
            "req_per_s": round(n / wall, 2), "client_cpu_ms_per_request": round(1000 * cpu / n, 2),
            "wall_s": round(wall, 1)}


def beam_stage(base_url: str, n: int, concurrency: int, max_tokens: int, cache: str, via: str) -> dict:
    import apache_beam as beam

    from pipelines.local_runner import LocalRunner
    from pipelines.relabel_stages import RelabelStage
    from pipelines.transforms import ApplyBatchStage
    from relabel.stages import RelabelConfig

    stage = RelabelStage(RelabelConfig(client=ClientConfig(base_url=base_url, concurrency=concurrency, timeout_s=300),
                                       cache_path=cache, max_tokens=max_tokens, tasks=()))
    t0 = time.perf_counter()
    with beam.Pipeline(runner=LocalRunner(), argv=["--direct_running_mode=in_memory"]) as p:
        records = p | beam.Create(range(n)) | beam.Map(make_record)
        if via == "runinference":
            from apache_beam.ml.inference.base import RemoteModelHandler, RunInference

            class Handler(RemoteModelHandler):
                def __init__(self):
                    super().__init__(namespace="relabel", num_retries=0)

                def batch_elements_kwargs(self):
                    return {"min_batch_size": 2 * concurrency, "max_batch_size": 2 * concurrency}

                def create_client(self):
                    return stage

                def request(self, batch, model, inference_args=None):
                    return model.run_batch(list(batch))

            _ = records | RunInference(Handler())
        else:
            from pipelines.accounting import Envelope, Kind

            _ = (records | beam.Map(lambda r: Envelope(Kind.ITEM, r))
                 | beam.BatchElements(min_batch_size=2 * concurrency, max_batch_size=2 * concurrency)
                 | beam.ParDo(ApplyBatchStage("relabel", stage)))
    wall = time.perf_counter() - t0
    return {"records": n, "records_per_s": round(n / wall, 2), "wall_s": round(wall, 1)}


def rss_child(args) -> None:
    """In a child process: the Beam stage over ``args.child_pages`` records; prints peak RSS (MB)."""
    with tempfile.TemporaryDirectory() as tmp:
        beam_stage(args.base_url, args.child_pages, args.concurrency, args.max_tokens, f"{tmp}/c.sqlite", "dofn")
    print(json.dumps({"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=1, help="tokens per answer (1: measure the plumbing)")
    ap.add_argument("--rss-pages", type=int, default=100)
    ap.add_argument("--beam-via", choices=("dofn", "runinference", "both"), default="dofn")
    ap.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    ap.add_argument("--child-pages", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--base-url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_pages:
        rss_child(args)
        return 0
    from relabel.serve import LocalServer
    from tests.relabel.fault_proxy import FaultProxy

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint
        if not Path(checkpoint, "config.json").is_file():
            from model.checkpoint import export_tiny

            checkpoint = str(export_tiny(Path(tmp) / "tiny-checkpoint"))
        with LocalServer(checkpoint) as server:
            proxy = FaultProxy(server.port)
            print(f"server ready; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", flush=True)
            client = plain_client(proxy.base_url, args.requests, args.concurrency, args.max_tokens)
            print("client", json.dumps(client), flush=True)
            vias = ("dofn", "runinference") if args.beam_via == "both" else (args.beam_via,)
            for via in vias:
                cache = f"{tmp}/cache-{via}.sqlite"
                beam = beam_stage(proxy.base_url, args.requests, args.concurrency, args.max_tokens, cache, via)
                beam["ratio_to_client"] = round(beam["records_per_s"] / client["req_per_s"], 3)
                print("beam", via, json.dumps(beam), flush=True)
            before = proxy.chat_requests
            rerun = beam_stage(proxy.base_url, args.requests, args.concurrency, args.max_tokens, cache, "dofn")
            print("rerun", json.dumps({"requests_sent": proxy.chat_requests - before, "wall_s": rerun["wall_s"]}),
                  flush=True)
            peaks = []
            for pages in (args.rss_pages, 4 * args.rss_pages):
                out = subprocess.run([sys.executable, __file__, "--child-pages", str(pages), "--base-url",
                                      proxy.base_url, "--concurrency", str(args.concurrency), "--max-tokens",
                                      str(args.max_tokens)], capture_output=True, text=True, check=True)
                peaks.append(json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"])
            print("rss", json.dumps({"pages": [args.rss_pages, 4 * args.rss_pages], "peak_rss_mb": peaks,
                                     "ratio": round(peaks[1] / peaks[0], 3)}), flush=True)
            proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
