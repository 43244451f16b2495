"""The corpus DAG: sources -> render -> validate -> sharded Parquet, manifest and dead letters.

    python -m pipelines.corpus [--config configs/corpus.yaml] [--output DIR] [beam options...]

Any option this module does not know (``--runner=DataflowRunner --project=... --region=...``,
``--runner=FlinkRunner --flink_master=...``, ``--runner=SparkRunner ...``,
``--runner=apache_beam.runners.dask.dask_runner.DaskRunner --dask_client_address=...``) is passed
to Beam unchanged. Outputs under ``--output``: ``data/<split>-NNNNN-of-MMMMM.parquet``,
``dead_letter/<stage>-NNNNN-of-MMMMM.parquet`` and ``manifest.json``.
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
from pipelines.clean.dedup_stage import (
    dedup_config,
    dedup_edges,
    dedup_key_members,
    dedup_losers,
    merge_losers,
    write_duplicates,
)
from pipelines.clean.registry import build_stage
from pipelines.config import CorpusConfig, load_config
from pipelines.render import render_page
from pipelines.transforms import (
    DEAD,
    DEDUP_KEY,
    EVENT,
    SAMPLE,
    SPILL,
    ApplyStage,
    ReadUnits,
    Spill,
    SpillDeadLetters,
    is_kind,
    plan_units,
)
from pipelines.write import (
    DEAD_LETTERS,
    PAGES,
    ShardedTable,
    merge_spill_stats,
    plan_shards,
    write_dropped_samples,
    write_shard,
)
from schemas.deadletter import RecordError
from schemas.manifest import CountEvent, RunManifest
from schemas.page import PageRecord, validate

BASE_STAGES = ["read", "render", "validate"]


def stage_order(cfg: CorpusConfig) -> list[str]:
    """The chain every record passes: base stages, cleaning stages in config order, write, dedup."""
    order = BASE_STAGES + [s["name"] for s in cfg.clean.stages] + ["write"]
    return order + (["dedup"] if cfg.clean.dedup.enabled else [])


def validate_record(record: PageRecord) -> list[PageRecord]:
    problems = validate(record)
    if problems:
        raise RecordError("schema_violation", "; ".join(problems))
    return [record]


def _render(cfg, page):
    return [render_page(page, cfg)]


def finalize(items: Iterable, cfg: CorpusConfig, started: float, beam_args: list[str]) -> None:
    """The last step: manifest.json from the count sums, shard and dead-letter results."""
    events, shards, dead_files, sample_files = [], [], [], []
    for kind, payload in items:
        if kind == "count":
            key, value = payload
            events.append(CountEvent(*key, value))
        elif kind == "shard":
            shards.append(payload)
        elif kind == "dead_file":
            dead_files.append(payload)
        elif kind in ("sample_file", "dedup_file"):
            sample_files.append(payload)
    shards.sort(key=lambda s: s["file"])
    dead_files.sort(key=lambda d: d["file"])
    manifest = RunManifest.from_events(
        events,
        stage_order(cfg),
        run={
            "sources": [s.name for s in cfg.sources],
            "config": json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
            "beam_args": beam_args,
            "seconds": round(time.time() - started, 3),
        },
        shards=shards,
        dead_letter_files=[d["file"] for d in dead_files],
        dropped_sample_files=sorted(sample_files),
    )
    out = cfg.run.output
    keep = {s["file"] for s in shards} | {d["file"] for d in dead_files} | set(sample_files)
    stale = [p for folder in ("data", "dead_letter", "dropped") for p in io.match(io.join(out, folder, "*.parquet"))
             if "/".join(p.replace("\\", "/").split("/")[-2:]) not in keep]
    io.delete(stale)
    io.delete_tree(io.join(out, "_tmp"))
    io.write_bytes_atomic(io.join(out, "manifest.json"), manifest.to_json().encode("utf-8"))


def plan_and_count(items: Iterable, cfg: CorpusConfig, dedup_on: bool) -> Iterable:
    """Shard plans from the spill aggregates minus dedup losers; the dedup stage's counts."""
    stats, files, found = [], [], []
    for kind, payload in items:
        if kind == "stat":
            stats.append(payload)
        elif kind == "file":
            files.append(payload)
        else:
            found.append(payload)
    losers = merge_losers(found)
    for plan in plan_shards(stats, files, cfg.write, exclude=losers):
        yield "plan", plan
    if dedup_on:
        per_source = dict(merge_spill_stats(stat for _, stat in stats).sources)
        dropped: dict[tuple[str, str], int] = {}
        for loser in losers.values():
            dropped[(loser.source, loser.reason)] = dropped.get((loser.source, loser.reason), 0) + 1
        for source, n in per_source.items():
            gone = sum(v for (src, _), v in dropped.items() if src == source)
            yield "count", (("dedup", source, "in", ""), n)
            yield "count", (("dedup", source, "out", ""), n - gone)
            yield "count", (("dedup", source, "emitted", ""), n - gone)
        for (source, reason), n in dropped.items():
            yield "count", (("dedup", source, "dropped", reason), n)
        if losers:
            yield "dedup_file", write_duplicates(sorted(losers.values(), key=lambda x: x.id),
                                                 io.join(cfg.run.output, "dropped"))


def spill_aggregates(spilled: beam.PCollection, label: str) -> beam.PCollection:
    """What shards are planned from (``pipelines.write.plan_shards``), never a list of every record:
    ("stat", ((split, plan bucket), SpillStat)) summed per key, and ("file", (split, path)) per
    spill file."""
    stats = (
        spilled
        | f"Key{label}SpillStats" >> beam.Map(lambda s: (s.key, s.stat))
        | f"Sum{label}SpillStats" >> beam.CombinePerKey(merge_spill_stats)
        | f"Tag{label}Stats" >> beam.Map(lambda kv: ("stat", kv))
    )
    files = spilled | f"{label}SpillFiles" >> beam.FlatMap(lambda s: [("file", s.new_file)] if s.new_file else [])
    return (stats, files) | f"{label}SpillAggregates" >> beam.Flatten()


def write_sharded(gathered: beam.PCollection, label: str, table: ShardedTable, tag: str, cfg: CorpusConfig,
                  dedup_on: bool = False) -> tuple[beam.PCollection, beam.PCollection]:
    """Plan ``table``'s shards in one step from ``spill_aggregates`` (and dedup losers), write them
    in parallel. Returns ``(tag, shard result)`` per shard, and the planner's other output (the
    dedup stage's counts and duplicates file)."""
    planned = (
        gathered
        | f"OneKey{label}Spills" >> beam.Map(lambda e: (None, e))
        | f"Gather{label}Spills" >> beam.GroupByKey()
        | f"Plan{label}Shards" >> beam.FlatMap(lambda kv: plan_and_count(kv[1], cfg, dedup_on))
    )
    written = (
        planned
        | f"{label}Plans" >> beam.Filter(is_kind("plan"))
        | f"Spread{label}Shards" >> beam.Reshuffle()
        | f"Write{label}Shards" >> beam.Map(lambda e: (tag, write_shard(e[1], cfg.run.output, cfg.write, table)))
    )
    return written, planned | f"{label}PlannerCounts" >> beam.Filter(lambda e: e[0] != "plan")


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

    clean_stages = [(spec["name"], build_stage(spec)) for spec in cfg.clean.stages]
    dedup_on = cfg.clean.dedup.enabled
    dedup_cfg = dedup_config(cfg.clean.dedup) if dedup_on else None
    keep_dropped = cfg.clean.save_dropped > 0

    envelopes = (
        p
        | "Inputs" >> beam.Create(inputs)
        | "SpreadInputs" >> beam.Reshuffle()
        | "PlanUnits" >> beam.FlatMap(plan_units)
        | "SpreadUnits" >> beam.Reshuffle()
        | "Read" >> beam.ParDo(ReadUnits("read"))
        | "Render" >> beam.ParDo(ApplyStage("render", functools.partial(_render, cfg.render), cfg.run.progress_every))
        | "Validate" >> beam.ParDo(ApplyStage("validate", validate_record))
    )
    for name, stage in clean_stages:
        envelopes = envelopes | f"Clean {name}" >> beam.ParDo(ApplyStage(name, stage, keep_dropped=keep_dropped))
    key_fn = functools.partial(dedup_key_members, dedup_cfg) if dedup_on else None
    envelopes = envelopes | "Spill" >> beam.ParDo(Spill(spill_dir, cfg.write, key_fn))

    counts = (
        envelopes
        | "Events" >> beam.Filter(is_kind(EVENT))
        | "KeyEvents" >> beam.Map(lambda e: ((e[1].stage, e[1].source, e[1].kind, e[1].reason), e[1].value))
        | "SumEvents" >> beam.CombinePerKey(sum)
        | "TagCounts" >> beam.Map(lambda kv: ("count", kv))
    )
    spilled = envelopes | "Spills" >> beam.Filter(is_kind(SPILL)) | "Spilled" >> beam.Map(lambda e: e[1])
    aggregates = spill_aggregates(spilled, "")
    if dedup_on:
        # Duplicates are found on small keys, never by moving records: group members by key,
        # edges from each group, components over the edges alone, one keeper per component.
        losers = (
            envelopes
            | "DedupKeys" >> beam.Filter(is_kind(DEDUP_KEY))
            | "KeyMembers" >> beam.Map(lambda e: e[1])
            | "GroupByDedupKey" >> beam.GroupByKey()
            | "Edges" >> beam.FlatMap(lambda kv: dedup_edges(dedup_cfg, kv[0], list(kv[1])))
            | "EdgesByKind" >> beam.GroupByKey()
            | "Components" >> beam.FlatMap(lambda kv: dedup_losers(dedup_cfg, kv[0], kv[1]))
            | "TagLosers" >> beam.Map(lambda loser: ("loser", loser))
        )
        gathered = (aggregates, losers) | "AggregatesAndLosers" >> beam.Flatten()
    else:
        gathered = aggregates
    shards, dedup_counts = write_sharded(gathered, "", PAGES, "shard", cfg, dedup_on)
    samples = (
        envelopes
        | "Samples" >> beam.Filter(is_kind(SAMPLE))
        | "KeySamples" >> beam.Map(lambda e: ((e[1][0], e[1][1]), e[1][2]))
        | "FirstPerReason" >> beam.combiners.Top.PerKey(max(1, cfg.clean.save_dropped), key=lambda r: r.id, reverse=True)
        | "WriteSamples" >> beam.Map(lambda kv: ("sample_file", write_dropped_samples(kv[0], kv[1], io.join(out, "dropped"))))
    )
    # Dead letters are sharded like pages, one "split" per stage: a run may dead-letter millions.
    dead_spilled = envelopes | "Dead" >> beam.Filter(is_kind(DEAD)) | "SpillDead" >> beam.ParDo(
        SpillDeadLetters(io.join(spill_dir, "dead"), cfg.write))
    dead, _ = write_sharded(spill_aggregates(dead_spilled, "Dead"), "Dead", DEAD_LETTERS, "dead_file", cfg)
    (
        (counts, shards, dead, dedup_counts, samples)
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
