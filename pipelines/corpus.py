"""The corpus DAG: sources -> render -> validate -> sharded Parquet, manifest and dead letters.

    python -m pipelines.corpus [--config configs/corpus.yaml] [--output DIR] [beam options...]

Any option this module does not know (``--runner=DataflowRunner --project=... --region=...``,
``--runner=FlinkRunner --flink_master=...``, ``--runner=SparkRunner ...``,
``--runner=apache_beam.runners.dask.dask_runner.DaskRunner --dask_client_address=...``) is passed
to Beam unchanged. Outputs under ``--output``: ``data/<split>-NNNNN-of-MMMMM.parquet``,
``dead_letter/<stage>.parquet`` and ``manifest.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import sys
import time
import uuid
from typing import Iterable

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import io
from pipelines.config import CorpusConfig, load_config
from pipelines.render import render_page
from pipelines.transforms import (
    DEAD,
    EVENT,
    SPILL,
    ApplyStage,
    ReadUnits,
    Spill,
    is_kind,
    plan_units,
)
from pipelines.write import plan_shards, write_dead_letters, write_shard
from schemas.deadletter import RecordError
from schemas.manifest import CountEvent, RunManifest
from schemas.page import PageRecord, validate

STAGES = ["read", "render", "validate", "write"]


def validate_record(record: PageRecord) -> list[PageRecord]:
    problems = validate(record)
    if problems:
        raise RecordError("schema_violation", "; ".join(problems))
    return [record]


def _render(cfg, page):
    return [render_page(page, cfg)]


def finalize(items: Iterable, cfg: CorpusConfig, started: float, beam_args: list[str]) -> None:
    """The last step: manifest.json from the count sums, shard and dead-letter results."""
    events, shards, dead_files = [], [], []
    for kind, payload in items:
        if kind == "count":
            key, value = payload
            events.append(CountEvent(*key, value))
        elif kind == "shard":
            shards.append(payload)
        elif kind == "dead_file":
            dead_files.append(payload)
    shards.sort(key=lambda s: s["file"])
    dead_files.sort(key=lambda d: d["file"])
    manifest = RunManifest.from_events(
        events,
        STAGES,
        run={
            "sources": [s.name for s in cfg.sources],
            "config": json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
            "beam_args": beam_args,
            "seconds": round(time.time() - started, 3),
        },
        shards=shards,
        dead_letter_files=[d["file"] for d in dead_files],
    )
    out = cfg.run.output
    keep = {s["file"] for s in shards} | {d["file"] for d in dead_files}
    stale = [p for p in io.match(io.join(out, "data", "*.parquet")) + io.match(io.join(out, "dead_letter", "*.parquet"))
             if "/".join(p.replace("\\", "/").split("/")[-2:]) not in keep]
    io.delete(stale + [io.join(out, "_tmp")])
    io.write_bytes_atomic(io.join(out, "manifest.json"), manifest.to_json().encode("utf-8"))


def build_pipeline(p: beam.Pipeline, cfg: CorpusConfig, beam_args: list[str]) -> None:
    out = cfg.run.output
    spill_dir = io.join(out, "_tmp", uuid.uuid4().hex[:12])
    started = time.time()
    inputs = []
    for settings in cfg.sources:
        uris = sorted({u for pattern in settings.paths for u in io.match(pattern)})
        if not uris:
            raise ValueError(f"source {settings.name!r}: no input matches {list(settings.paths)}")
        inputs.extend((settings, u) for u in uris)

    envelopes = (
        p
        | "Inputs" >> beam.Create(inputs)
        | "SpreadInputs" >> beam.Reshuffle()
        | "PlanUnits" >> beam.FlatMap(plan_units)
        | "SpreadUnits" >> beam.Reshuffle()
        | "Read" >> beam.ParDo(ReadUnits("read"))
        | "Render" >> beam.ParDo(ApplyStage("render", functools.partial(_render, cfg.render), cfg.run.progress_every))
        | "Validate" >> beam.ParDo(ApplyStage("validate", validate_record))
        | "Spill" >> beam.ParDo(Spill(spill_dir, cfg.write))
    )
    counts = (
        envelopes
        | "Events" >> beam.Filter(is_kind(EVENT))
        | "KeyEvents" >> beam.Map(lambda e: ((e[1].stage, e[1].source, e[1].kind, e[1].reason), e[1].value))
        | "SumEvents" >> beam.CombinePerKey(sum)
        | "TagCounts" >> beam.Map(lambda kv: ("count", kv))
    )
    shards = (
        envelopes
        | "Spills" >> beam.Filter(is_kind(SPILL))
        | "OneKeySpills" >> beam.Map(lambda e: (None, e[1]))
        | "GatherSpills" >> beam.GroupByKey()
        | "PlanShards" >> beam.FlatMap(lambda kv: plan_shards(list(kv[1]), cfg.write.shard_bytes, cfg.write.buckets))
        | "SpreadShards" >> beam.Reshuffle()
        | "WriteShards" >> beam.Map(lambda plan: ("shard", write_shard(plan, io.join(out, "data"), cfg.write)))
    )
    dead = (
        envelopes
        | "Dead" >> beam.Filter(is_kind(DEAD))
        | "KeyDead" >> beam.Map(lambda e: (e[1].stage, e[1]))
        | "GroupDead" >> beam.GroupByKey()
        | "WriteDead" >> beam.Map(lambda kv: ("dead_file", write_dead_letters(kv[0], list(kv[1]), io.join(out, "dead_letter"))))
    )
    (
        (counts, shards, dead)
        | "Results" >> beam.Flatten()
        | "OneKeyResults" >> beam.Map(lambda r: (None, r))
        | "GatherResults" >> beam.GroupByKey()
        | "Manifest" >> beam.Map(lambda kv: finalize(kv[1], cfg, started, beam_args))
    )


def run(cfg: CorpusConfig, beam_args: list[str] | None = None) -> RunManifest:
    """Run the DAG and return the manifest it wrote (raises if the run does not balance)."""
    args = list(cfg.run.beam_args) + list(beam_args or [])
    p = beam.Pipeline(options=PipelineOptions(args))
    build_pipeline(p, cfg, args)
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # DaskRunner: release our connection to the cluster
        if client is not None:
            client.close()
    manifest = RunManifest.from_json(io.read_bytes(io.join(cfg.run.output, "manifest.json")).decode())
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML config (default: configs/corpus.yaml)")
    parser.add_argument("--output", help="output folder or gs:// / s3:// URI (overrides run.output)")
    parser.add_argument("--max-dead-letter-rate", type=float,
                        help="fail when dead letters exceed this share of input records")
    parser.add_argument("--verbose", action="store_true", help="show Beam's INFO logs")
    args, beam_args = parser.parse_known_args(argv)
    if not args.verbose:
        logging.getLogger("apache_beam").setLevel(logging.WARNING)
    overrides: dict = {"run": {}}
    if args.output:
        overrides["run"]["output"] = args.output
    if args.max_dead_letter_rate is not None:
        overrides["run"]["max_dead_letter_rate"] = args.max_dead_letter_rate
    cfg = load_config(args.config, overrides)
    manifest = run(cfg, beam_args)
    print(manifest.summary_table())
    print(f"\nwrote {cfg.run.output}: {len(manifest.shards)} shard(s), manifest.json, "
          f"{len(manifest.dead_letter_files)} dead-letter file(s)")
    problems = manifest.imbalances()
    if problems:
        print("manifest does not balance:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    rate = manifest.dead_letter_rate()
    if rate > cfg.run.max_dead_letter_rate:
        print(f"dead-letter rate {rate:.1%} exceeds --max-dead-letter-rate {cfg.run.max_dead_letter_rate:.1%}",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
