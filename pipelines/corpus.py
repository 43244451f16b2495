"""The corpus DAG: sources -> render -> validate -> clean -> write, dedup -> sharded Parquet, dead
letters, dropped samples and manifest.

    python -m pipelines.corpus [--config configs/corpus.yaml] [--output DIR] [--previous RUN] [beam options...]
    python -m pipelines.corpus --releases out/releases [--version V] [beam options...]

``--previous`` (a run folder, or a releases root whose ``LATEST`` names one) makes the run
incremental: units whose content and stage configs are unchanged are carried over from it, the
rest are read (``pipelines/refresh.py``; docs/refresh.md). ``--releases ROOT`` writes to
``ROOT/<version>``, refreshes from ``ROOT``'s latest version when there is one, and points
``ROOT/LATEST`` at the new version once the run balances.

Any option this module does not know (``--runner=DataflowRunner --project=... --region=...``,
``--runner=FlinkRunner --flink_master=...``, ``--runner=SparkRunner ...``,
``--runner=apache_beam.runners.dask.dask_runner.DaskRunner --dask_client_address=...``) is passed
to Beam unchanged. Outputs under ``--output``: ``data/<split>-NNNNN-of-MMMMM.parquet``,
``dead_letter/<stage>-NNNNN-of-MMMMM.parquet`` and ``manifest.json``.

Reading order: ``build_pipeline`` at the bottom is the DAG, one named step a line; each step is a
composite PTransform above it whose ``expand`` wires Beam around the plain functions at the top.
Every step takes and gives one collection of ``pipelines.accounting.Envelope``s (why one: see
``pipelines.transforms``).
"""

from __future__ import annotations

if __name__ == "__main__":
    from pipelines import startup

    startup.begin_imports()  # GC off and pandas kept out of Beam's import until end_imports() below

import argparse
import atexit
import dataclasses
import functools
import json
import logging
import operator
import os
import sys
import time
import uuid
from typing import Any, Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import io
from pipelines.accounting import DroppedSample, Envelope, Kind, SpillTotal, by_kind
from pipelines.clean.dedup import DedupConfig, Edge, Member
from pipelines.clean.dedup_stage import (
    DUPLICATES,
    Loser,
    dedup_config,
    dedup_edges,
    dedup_key_members,
    dedup_losers,
    excluded_stat,
    strongest_loser,
)
from pipelines.clean.registry import build_stage
from pipelines.config import CleanConfig, CorpusConfig, SourceSettings, load_config
from pipelines.local_runner import (
    LocalRunner,
    RunnerUnavailable,
    check_runner,
    discard,
    ignores_unknown_options,
    new_pipeline,
    unknown_options,
)
from pipelines.quiet import quiet_beam_args, quiet_stderr
from pipelines.refresh import (
    FAST_PATH_MAX_INPUTS,
    LATEST,
    READ_STAGE,
    UNITS_FILE,
    PreviousRun,
    PreviousRunError,
    _same_folder,
    carried_events,
    carried_letters,
    carried_rows,
    carry_whole,
    check_previous,
    decide,
    describe_unit,
    describing,
    forget_files,
    legacy_carried_letters,
    resolve_previous,
    reused_keys,
    stage_fingerprints,
    units_table,
    verify_run,
    version_name,
    write_fingerprint,
)
from pipelines.render import render_page
from pipelines.transforms import (
    ApplyBatchStage,
    ApplyStage,
    Batches,
    GatherAll,
    PlanInputs,
    ReadUnits,
    Spill,
    SpillDeadLetters,
    SpillLosers,
    input_parts,
    payloads,
    plan_units,
    tagged,
)
from pipelines.validate_stage import validate_record
from pipelines.write import (
    DEAD_LETTERS,
    PAGES,
    SHARD_FOLDERS,
    OutputBusy,
    ShardedTable,
    ShardPlan,
    SpillStat,
    WriteConfig,
    half_written,
    merge_spill_stats,
    output_lock,
    plan_shards,
    write_dropped_samples,
    write_shard,
)
from schemas.manifest import CountEvent, RunManifest
from schemas.page import PageRecord

if __name__ == "__main__":
    startup.end_imports()  # what the imports made frozen for the GC, here and in the forked SDK workers

BASE_STAGES = ["read", "render", "validate"]


def stage_order(cfg: CorpusConfig) -> list[str]:
    """The chain every record passes: base stages, cleaning stages in config order, write, dedup."""
    order = BASE_STAGES + [s["name"] for s in cfg.clean.stages] + ["write"]
    return order + (["dedup"] if cfg.clean.dedup.enabled else [])


# --- plain functions: what the steps below wire together ---------------------------------------


def source_inputs(sources: Iterable[SourceSettings]) -> list[tuple[SourceSettings, str]]:
    """``(settings, uri)`` for every input a source's paths match; a source that matches none is an error
    (``io.NoInput``: reported before any work, the CLI exits 2)."""
    inputs = []
    for settings in sources:
        uris = sorted({u for pattern in settings.paths for u in io.match(pattern)})
        if not uris:
            raise io.NoInput(f"source {settings.name!r}: no input matches {list(settings.paths)}")
        inputs.extend((settings, u) for u in uris)
    return inputs


def _render(cfg, page):
    return [render_page(page, cfg)]


def keyed_count(event: CountEvent) -> tuple[tuple[str, str, str, str], float]:
    return (event.stage, event.source, event.kind, event.reason), event.value


def summed_count(key: tuple[str, str, str, str], total: float) -> Envelope:
    return Envelope(Kind.COUNT, CountEvent(*key, total))


def keyed_event(event: CountEvent) -> tuple[tuple[str, str, str, str, str], float]:
    return (event.stage, event.source, event.kind, event.reason, event.unit), event.value


def summed_event(key: tuple[str, str, str, str, str], total: float) -> Envelope:
    stage, source, kind, reason, unit = key
    return Envelope(Kind.EVENT, CountEvent(stage, source, kind, reason, total, unit))


def is_not_event(envelope: Envelope) -> bool:
    return envelope.kind != Kind.EVENT


def is_plan_input(envelope: Envelope, dedup_on: bool) -> bool:
    """What the shard planner is given (``PlanInputs``): spills, and with dedup what it drops."""
    return envelope.kind == Kind.SPILL or dedup_on and envelope.kind in (Kind.EXCLUDED, Kind.LOSER)


def key_edges(group: tuple[str, Iterable[Member]], cfg: DedupConfig) -> list[tuple[str, Edge]]:
    key, members = group
    return dedup_edges(cfg, key, list(members))


def kind_losers(group: tuple[str, Iterable[Edge]], cfg: DedupConfig) -> list[Loser]:
    kind, edges = group
    return dedup_losers(cfg, kind, edges)


def keyed_loser(loser: Loser) -> tuple[str, Loser]:
    return loser.id, loser


def excluded_total(key: tuple[str, int], stat: SpillStat) -> Envelope:
    return Envelope(Kind.EXCLUDED, SpillTotal(key, stat))


def dropped_event(loser: Loser) -> Envelope:
    return Envelope(Kind.EVENT, CountEvent("dedup", loser.source, "dropped", loser.reason, 1))


def plan_and_count(items: Iterable[Envelope], cfg: CorpusConfig, dedup_on: bool) -> Iterator[Envelope]:
    """Shard plans from the run's spill totals and files, less what dedup drops (summed per
    (split, plan bucket), and the names of the spill files holding the dropped ids); with dedup,
    the dedup stage's in/out counts. Every input is an aggregate or a file name: none is per record."""
    routed = by_kind(items, Kind.STAT, Kind.FILE, Kind.EXCLUDED, Kind.LOSER_FILE)
    excluded = routed[Kind.EXCLUDED]
    for plan in plan_shards(routed[Kind.STAT], routed[Kind.FILE], cfg.write, excluded, routed[Kind.LOSER_FILE]):
        yield Envelope(Kind.PLAN, plan)
    if dedup_on:
        yield from dedup_counts(routed[Kind.STAT], excluded)


def dedup_counts(totals: list[SpillTotal], excluded: list[SpillTotal]) -> Iterator[Envelope]:
    """The dedup stage's counts per source: what was written in, and what its losers leave out.
    (Its ``dropped`` counts by reason are summed from one event per loser, like any stage's.)"""
    per_source = dict(merge_spill_stats(total.stat for total in totals).sources)
    gone = dict(merge_spill_stats(total.stat for total in excluded).sources)
    for source, n in per_source.items():
        for count, value in (("in", n), ("out", n - gone.get(source, 0)), ("emitted", n - gone.get(source, 0))):
            yield Envelope(Kind.COUNT, CountEvent("dedup", source, count, "", value))


def is_planner_result(envelope: Envelope) -> bool:
    """What the planner yields besides shard plans: the dedup stage's counts."""
    return envelope.kind != Kind.PLAN


def write_planned_shard(plan: ShardPlan, result: Kind, table: ShardedTable, cfg: CorpusConfig) -> Envelope:
    return Envelope(result, write_shard(plan, cfg.run.output, cfg.write, table))


def keyed_sample(sample: DroppedSample) -> tuple[tuple[str, str], Any]:
    return (sample.stage, sample.reason), sample.record


def write_samples(group: tuple[tuple[str, str], list[PageRecord]], dropped_dir: str) -> Envelope:
    stage_reason, records = group
    return Envelope(Kind.SAMPLE_FILE, write_dropped_samples(stage_reason, records, dropped_dir))


def described_units(element, fingerprints: dict[str, dict[str, str]], plan: str = "") -> Iterator[tuple]:
    """``(settings, uri)`` -> ``(settings, unit, UnitInfo)`` for each unit the source plans. ``plan``: the
    run's planning id; the first element of a run a process describes drops what it cached of the
    input files for an earlier one (``refresh.describing``)."""
    if plan:
        describing(plan)
    for settings, unit in plan_units(element):
        yield settings, unit, describe_unit(settings, unit, fingerprints[settings.name])


def decide_reuse(planned: Iterable[tuple], previous_uri: str | None, spill_dir: str,
                 output: str = "") -> Iterator[Envelope]:
    """The reuse decision over every planned unit: units to read (``UNIT``), the reused units'
    counts as their previous run recorded them, the previous files to carry pages, dead letters and
    dropped samples from (``CARRY``, each naming the file of reused keys written under
    ``spill_dir``: a file, not a side input, which Beam's DaskRunner computes inside each task),
    every unit's info and a summary. Nothing per record: the carried rows are read on the carry
    branch, a row group at a time.

    First it removes ``output``'s ``manifest.json`` (a finished earlier run's): every step that writes
    into the output folder comes after this one, so until the run writes its own manifest (last) the
    folder reads as an unfinished run, never as the old run over new shards; and a runner that never
    starts the run (a Dask scheduler that does not answer) leaves the finished run as it was."""
    if output:
        remove_manifest(output)
    planned = list(planned)
    previous = PreviousRun.load(previous_uri)
    decision = decide([info for _, _, info in planned], previous)
    todo = dict(decision.process)
    for settings, unit, info in planned:
        yield Envelope(Kind.UNIT_INFO, info)
        if info.key in todo:
            yield Envelope(Kind.UNIT, (settings, unit, info.key))
    for key, row in sorted(decision.reused.items()):
        for event in carried_events(row):
            yield Envelope(Kind.EVENT, CountEvent(*event, key))
    yield Envelope(Kind.REFRESH, decision.summary(previous.folder if previous else None))
    if previous is not None and decision.reused:
        keys = io.join(spill_dir, "reused_units.json")
        io.write_bytes_atomic(keys, json.dumps(sorted(decision.reused)).encode())
        for path in previous.files("data/*.parquet") + previous.files("refresh/dedup_losers/*.parquet"):
            yield Envelope(Kind.CARRY, ("pages", path, "", "", keys))
        if previous.legacy_letters:  # a run from before dead letters named their unit: its units table holds them
            yield Envelope(Kind.CARRY, ("legacy_letters", io.join(previous.folder, UNITS_FILE), "", "", keys))
        else:
            for name in previous.manifest.dead_letter_files:
                yield Envelope(Kind.CARRY, ("letters", io.join(previous.folder, name), "", "", keys))
        names = {"dropped/" + f"{stage}-{reason}.parquet".replace(":", "_").replace("/", "_"): (stage, reason)
                 for stage, per in _previous_drops(previous.manifest) for reason in per}
        for name in previous.manifest.dropped_sample_files:
            if name in names:
                yield Envelope(Kind.CARRY, ("sample", io.join(previous.folder, name), *names[name], keys))


def remove_manifest(output: str) -> None:
    """``output/manifest.json`` removed, if there is one: the commit phase of a run into ``output`` starts."""
    old = io.join(output, "manifest.json")
    if io.exists(old):
        io.delete([old])


def _previous_drops(manifest: RunManifest) -> Iterator[tuple[str, set[str]]]:
    for stage in manifest.stage_order:
        yield stage, set(manifest.totals(stage).dropped)


def read_carried(task: tuple[str, str, str, str, str]) -> Iterator[Envelope]:
    """A previous run's file -> the reused units' pages (``ITEM``), dropped samples (``SAMPLE``) or dead
    letters (``DEAD``: from a dead-letter shard, or an older run's units table)."""
    table, path, stage, reason, keys = task
    if table in ("letters", "legacy_letters"):
        letters = carried_letters if table == "letters" else legacy_carried_letters
        for letter in letters(path, reused_keys(keys)):
            yield Envelope(Kind.DEAD, letter)
        return
    for row in carried_rows(path, reused_keys(keys)):
        record = PageRecord.from_row(row)
        yield Envelope(Kind.ITEM, record) if table == "pages" else Envelope(Kind.SAMPLE,
                                                                           DroppedSample(stage, reason, record))


def is_accounted(envelope: Envelope) -> bool:
    """What the reuse decision passes on to the rest of the DAG (not its internal routing)."""
    return envelope.kind not in (Kind.UNIT, Kind.CARRY)


def is_unit_result(envelope: Envelope) -> bool:
    return envelope.kind in (Kind.UNIT_INFO, Kind.REFRESH)


def keyed_unit_count(event: CountEvent) -> tuple[tuple[str, str, str, str], float]:
    return (event.unit, event.stage, event.kind, event.reason), event.value


def summed_unit_count(key: tuple[str, str, str, str], total: float) -> Envelope:
    return Envelope(Kind.UNIT_COUNT, (*key, total))


def is_unit_event(event: CountEvent, stages: frozenset[str]) -> bool:
    """A count a unit's records make up to writing (at ``write`` only a dead letter names its unit: the
    pages written are counted again when carried): what a later run carries over with the unit."""
    return bool(event.unit) and event.stage in stages and event.kind != "seconds"


def run_metadata(cfg: CorpusConfig, beam_args: list[str]) -> dict[str, Any]:
    """What the manifest's ``run`` block says of the run's inputs: sources, the whole config, Beam options."""
    return {"sources": [s.name for s in cfg.sources],
            "config": json.loads(json.dumps(dataclasses.asdict(cfg), default=str)), "beam_args": beam_args}


def unit_accounting(infos: list, counts: list[tuple]) -> dict[str, Any]:
    """Planned units against those the reader finished (read now or carried from a previous run):
    ``missing`` names the units a runner lost (sorted; the first 100)."""
    planned = {info.key for info in infos}
    finished = {unit for unit, stage, kind, _, value in counts if stage == READ_STAGE and kind == "units" and value}
    missing = sorted(planned - finished)
    return {"planned": len(planned), "finished": len(planned & finished), "missing": missing[:100]}


def finalize(items: Iterable[Envelope], cfg: CorpusConfig, started: float, beam_args: list[str],
             spill_dir: str | None = None) -> None:
    """The last step: manifest.json from the summed counts, shard and dead-letter results; the units
    table an incremental refresh reads (``refresh/units.parquet``). Removes this run's temporary folder
    (``spill_dir``, ``_tmp/<run>/``: never another run's) and ``_tmp`` when that leaves it empty."""
    routed = by_kind(items, Kind.COUNT, Kind.SHARD, Kind.DEAD_FILE, Kind.SAMPLE_FILE, Kind.DEDUP_FILE,
                     Kind.UNIT_INFO, Kind.UNIT_COUNT, Kind.REFRESH)
    shards = sorted(routed[Kind.SHARD], key=lambda s: s["file"])
    dead_files = sorted(routed[Kind.DEAD_FILE], key=lambda d: d["file"])
    sample_files = routed[Kind.SAMPLE_FILE] + [d["file"] for d in routed[Kind.DEDUP_FILE]]
    manifest = RunManifest.from_events(
        routed[Kind.COUNT],
        stage_order(cfg),
        run={
            **run_metadata(cfg, beam_args),
            "seconds": round(time.time() - started, 3),
            "units": unit_accounting(routed[Kind.UNIT_INFO], routed[Kind.UNIT_COUNT]),
            **({"refresh": {**routed[Kind.REFRESH][0], "write_fingerprint": write_fingerprint(cfg, stage_order(cfg))}}
               if routed[Kind.REFRESH] else {}),
        },
        shards=shards,
        dead_letter_files=[d["file"] for d in dead_files],
        dropped_sample_files=sorted(sample_files),
    )
    out = cfg.run.output
    losers = {s["losers_file"] for s in shards if "losers_file" in s}
    keep = {s["file"] for s in shards} | {d["file"] for d in dead_files} | set(sample_files) | losers
    stale = [p for folder in SHARD_FOLDERS for p in io.match(io.join(out, folder, "*.parquet"))
             if "/".join(p.replace("\\", "/").split("/")[-2:]) not in keep
             and "/".join(p.replace("\\", "/").split("/")[-3:]) not in keep]
    io.delete(stale + half_written(out))
    if spill_dir:
        io.delete_tree(spill_dir)
    remove_empty_tmp(out)
    if routed[Kind.UNIT_INFO]:
        io.write_bytes_atomic(io.join(out, UNITS_FILE),
                              units_table(routed[Kind.UNIT_INFO], routed[Kind.UNIT_COUNT]))
    io.write_bytes_atomic(io.join(out, "manifest.json"), manifest.to_json().encode("utf-8"))


def remove_empty_tmp(output: str) -> None:
    """``<output>/_tmp`` when no run keeps anything there any more (a local output; an object store has
    no empty folders)."""
    if "://" not in output:
        try:
            os.rmdir(os.path.join(output, "_tmp"))
        except OSError:  # absent, or another run's folder is in it
            pass


# --- the steps: named composite transforms over the one envelope collection ---------------------
# Payload types live in pipelines.accounting, not here: run as ``python -m pipelines.corpus`` this
# module is ``__main__``, and Beam pickles elements by class reference, which a worker cannot resolve.


class PlanUnits(beam.PTransform):
    """Every input of every source -> its units, each described for reuse: ``(settings, unit, UnitInfo)``.
    ``planned``: those triples already made in the launcher (``plan_in_process``), not made again."""

    def __init__(self, cfg: CorpusConfig, planned: list[tuple] | None = None):
        super().__init__()
        self.planned = planned
        self.inputs = source_inputs(cfg.sources) if planned is None else []  # fails before any work
        self.fingerprints = stage_fingerprints(cfg)
        self.plan = uuid.uuid4().hex  # the workers describe this run's inputs as they are now (``describing``)

    def expand(self, pbegin):
        if self.planned is not None:
            return pbegin | "Planned" >> beam.Create(self.planned) | "SpreadPlanned" >> beam.Reshuffle()
        return (
            pbegin
            | "Inputs" >> beam.Create(self.inputs)
            | "Parts" >> beam.FlatMap(input_parts)  # a local folder -> its files: planned on every worker
            | "SpreadInputs" >> beam.Reshuffle()
            | "PlanAndDescribe" >> beam.FlatMap(described_units, self.fingerprints, self.plan)
        )


class ReuseUnchanged(beam.PTransform):
    """Incremental refresh (``pipelines/refresh.py``): the planned units -> ``{"read": the units to
    read as (settings, unit, key), "carried": the reused units' pages, dead letters and dropped samples
    from the files of ``previous``, "accounted": their counts (from its units table), every unit's
    info and a summary for the manifest step}``. Without ``previous`` every unit is read and
    "carried" is None (no steps are built for it)."""

    def __init__(self, previous: str | None, spill_dir: str, output: str = ""):
        super().__init__()
        self.previous, self.spill_dir, self.output = previous, spill_dir, output

    def expand(self, planned):
        # "Decide" removes the output's old manifest: every step that writes into the output comes after it
        decided = (planned | "GatherUnits" >> GatherAll()
                   | "Decide" >> beam.FlatMap(decide_reuse, self.previous, self.spill_dir, self.output))
        pages = None  # nothing to carry without a previous run: no branch (each step is a round trip)
        if self.previous is not None:
            pages = (
                decided
                | "CarryFiles" >> payloads(Kind.CARRY)
                | "SpreadCarryFiles" >> beam.Reshuffle()
                | "ReadCarried" >> beam.FlatMap(read_carried)
            )
        return {
            "read": decided | "ToRead" >> payloads(Kind.UNIT),
            "carried": pages,
            "accounted": decided | "Accounted" >> beam.Filter(is_accounted),
        }


class ReadRenderValidate(beam.PTransform):
    """Units to read -> records, rendered and checked against the schema. ``scratch_dir``: a folder of the
    run for files sources write while reading (``Source.scratch``), when the run's output is local."""

    def __init__(self, cfg: CorpusConfig, scratch_dir: str = ""):
        super().__init__()
        self.cfg, self.scratch_dir = cfg, scratch_dir

    def expand(self, units):
        render = functools.partial(_render, self.cfg.render)
        return (
            units
            | "SpreadUnits" >> beam.Reshuffle()
            | "Read" >> beam.ParDo(ReadUnits("read", self.scratch_dir))
            | "Render" >> beam.ParDo(ApplyStage("render", render, self.cfg.run.progress_every))
            | "Validate" >> beam.ParDo(ApplyStage("validate", validate_record))
        )


class Clean(beam.PTransform):
    """The per-record cleaning stages, in config order."""

    def __init__(self, cfg: CleanConfig, output: str = ""):
        super().__init__()
        self.stages = [(spec["name"], build_stage(spec)) for spec in cfg.stages]
        self.keep_dropped = cfg.save_dropped > 0
        for _, stage in self.stages:
            if hasattr(stage, "bind_output"):  # caches (relabel answers, KaTeX renders) under the run's output
                stage.bind_output(output)

    def expand(self, envelopes):
        for name, stage in self.stages:
            if hasattr(stage, "run_batch"):  # relabel stages: many requests in flight, a bounded batch held
                # a fixed size (2 x the requests in flight): an adaptive sizer would time batches that are
                # mostly waiting on the server, and warn on the degenerate fits it gets from them
                size = 2 * stage.client_cfg.concurrency
                envelopes = (envelopes
                             | f"{name}Batches" >> Batches(size)
                             | name >> beam.ParDo(ApplyBatchStage(name, stage, keep_dropped=self.keep_dropped)))
            else:
                envelopes = envelopes | name >> beam.ParDo(ApplyStage(name, stage, keep_dropped=self.keep_dropped))
        return envelopes


class SpillPages(beam.PTransform):
    """The write stage's first half: records -> per-bundle spill files (``SPILL``), and with dedup
    each record's small grouping keys (``DEDUP_KEY``).

    The branch's count events leave it summed per (stage, source, kind, reason, unit): the branches meet
    in a Flatten, a fusion break where every element is encoded, buffered and decoded again, and each
    page brings ~13 events (3 per stage it passed). A combiner sums them within the fused step first
    (Beam lifts it there), so about one element a page crosses: its ``SPILL``. Returns the two
    collections (the spilled envelopes but events; the summed events) for the caller's Flatten."""

    def __init__(self, spill_dir: str, cfg: WriteConfig, dedup: DedupConfig | None):
        super().__init__()
        self.spill_dir, self.cfg, self.dedup = spill_dir, cfg, dedup

    def expand(self, envelopes):
        key_fn = functools.partial(dedup_key_members, self.dedup) if self.dedup is not None else None
        spilled = envelopes | "Spill" >> beam.ParDo(Spill(self.spill_dir, self.cfg, key_fn))
        events = (
            spilled
            | "Events" >> payloads(Kind.EVENT)
            | "KeyEvents" >> beam.Map(keyed_event)
            | "SumEvents" >> beam.CombinePerKey(sum)
            | "TagEvents" >> beam.MapTuple(summed_event)
        )
        # Two collections, not their Flatten: each Flatten is a step of its own on Beam's portable runners, and
        # the caller flattens these with the other branches anyway.
        return spilled | "NotEvents" >> beam.Filter(is_not_event), events


class Dedup(beam.PTransform):
    """Finds the duplicates to drop (nothing when ``cfg`` is None) on small keys, never by moving
    records: group members by key, edges from each group, components over the edges alone, one
    keeper per component, one loser per dropped record. Each loser is spilled like a page (a
    ``LOSER`` envelope: its ``Spilled``), summed into its page's (split, plan bucket) (``EXCLUDED``)
    and counted (an ``EVENT``), so no later step needs the losers in one place."""

    def __init__(self, cfg: DedupConfig | None, spill_dir: str = "", write: WriteConfig = WriteConfig()):
        super().__init__()
        self.cfg, self.spill_dir, self.write = cfg, spill_dir, write

    def expand(self, envelopes):
        if self.cfg is None:
            return envelopes
        losers = (
            envelopes
            | "KeyMembers" >> payloads(Kind.DEDUP_KEY)
            | "GroupByDedupKey" >> beam.GroupByKey()
            | "Edges" >> beam.FlatMap(key_edges, self.cfg)
            | "EdgesByKind" >> beam.GroupByKey()
            | "Components" >> beam.FlatMap(kind_losers, self.cfg)
            | "KeyLosers" >> beam.Map(keyed_loser)
            | "OnePerRecord" >> beam.CombinePerKey(strongest_loser)
            | "Losers" >> beam.Values()
        )
        spilled = (
            losers
            | "SpillLosers" >> beam.ParDo(SpillLosers(io.join(self.spill_dir, "losers"), self.write))
            | "TagSpilled" >> tagged(Kind.LOSER)
        )
        excluded = (
            losers
            | "KeyExcluded" >> beam.Map(excluded_stat, self.write.plan_buckets)
            | "SumExcluded" >> beam.CombinePerKey(merge_spill_stats)
            | "TagExcluded" >> beam.MapTuple(excluded_total)
        )
        dropped = losers | "DroppedEvents" >> beam.Map(dropped_event)
        return (envelopes, spilled, excluded, dropped) | "WithLosers" >> beam.Flatten()


class SumCounts(beam.PTransform):
    """Per-record count events -> one ``COUNT`` per (stage, source, kind, reason)."""

    def expand(self, envelopes):
        return (
            envelopes
            | "Events" >> payloads(Kind.EVENT)
            | "KeyEvents" >> beam.Map(keyed_count)
            | "SumEvents" >> beam.CombinePerKey(sum)
            | "TagCounts" >> beam.MapTuple(summed_count)
        )


class WriteShards(beam.PTransform):
    """``SPILL`` envelopes (and with ``dedup_on`` the ``EXCLUDED`` sums and ``LOSER`` spills) ->
    ``table``'s shards, one ``result`` envelope each, plus the dedup stage's in/out counts.

    What is planned from is never a list of records or of ids: the spill stats summed per (split,
    plan bucket), the same sums of what dedup drops, and one entry per spill file (the pages' and
    the losers'); one step plans, the shards are written in parallel, each reading the dropped ids
    of its own id range. Returns two collections (the shards' results; the planner's counts) for the
    manifest step's Flatten."""

    def __init__(self, table: ShardedTable, result: Kind, cfg: CorpusConfig, dedup_on: bool = False):
        super().__init__()
        self.table, self.result, self.cfg, self.dedup_on = table, result, cfg, dedup_on

    def expand(self, envelopes):
        planned = (
            envelopes
            | "ToPlan" >> beam.Filter(is_plan_input, self.dedup_on)
            | "GatherToPlan" >> beam.CombineGlobally(PlanInputs()).without_defaults()
            | "Plan" >> beam.FlatMap(plan_and_count, self.cfg, self.dedup_on)
        )
        written = (
            planned
            | "Plans" >> payloads(Kind.PLAN)
            | "SpreadPlans" >> beam.Reshuffle()
            | "Write" >> beam.Map(write_planned_shard, self.result, self.table, self.cfg)
        )
        return written, planned | "PlannerResults" >> beam.Filter(is_planner_result)


class WriteDeadLetters(beam.PTransform):
    """Dead letters, sharded like pages with one "split" per stage (a run may dead-letter millions)."""

    def __init__(self, spill_dir: str, cfg: CorpusConfig):
        super().__init__()
        self.spill_dir, self.cfg = spill_dir, cfg

    def expand(self, envelopes):
        return (
            envelopes
            | "Letters" >> payloads(Kind.DEAD)
            | "Spill" >> beam.ParDo(SpillDeadLetters(io.join(self.spill_dir, "dead"), self.cfg.write))
            | "TagSpilled" >> tagged(Kind.SPILL)
            | "WriteShards" >> WriteShards(DEAD_LETTERS, Kind.DEAD_FILE, self.cfg)
        )


class WriteDuplicates(beam.PTransform):
    """Every record dedup dropped, with the id it kept: ``dropped/dedup-duplicates-NNNNN-of-MMMMM.parquet``,
    written from the losers' spill files by the sharded writer (a run may drop millions)."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, envelopes):
        return (
            envelopes
            | "Losers" >> payloads(Kind.LOSER)
            | "TagSpilled" >> tagged(Kind.SPILL)
            | "WriteShards" >> WriteShards(DUPLICATES, Kind.DEDUP_FILE, self.cfg)
        )


class WriteDroppedSamples(beam.PTransform):
    """The first ``save_dropped`` records (by id) each stage dropped per reason, one file each."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self.n = max(1, cfg.clean.save_dropped)
        self.dropped_dir = io.join(cfg.run.output, "dropped")

    def expand(self, envelopes):
        return (
            envelopes
            | "Samples" >> payloads(Kind.SAMPLE)
            | "KeySamples" >> beam.Map(keyed_sample)
            | "FirstPerReason" >> beam.combiners.Top.PerKey(self.n, key=operator.attrgetter("id"), reverse=True)
            | "WriteSamples" >> beam.Map(write_samples, self.dropped_dir)
        )


class UnitTable(beam.PTransform):
    """What the units table needs: each unit's counts before writing (summed per unit, stage, kind
    and reason: its dead letters are counted there, and written with its name in the dead-letter
    shards), every unit's info and the reuse summary: two collections (the summed counts; the rest)
    for the manifest step's Flatten."""

    def __init__(self, stages: list[str]):
        super().__init__()
        self.stages = frozenset(stages)

    def expand(self, envelopes):
        counts = (
            envelopes
            | "Events" >> payloads(Kind.EVENT)
            | "UnitEvents" >> beam.Filter(is_unit_event, self.stages)
            | "KeyUnitEvents" >> beam.Map(keyed_unit_count)
            | "SumUnitEvents" >> beam.CombinePerKey(sum)
            | "TagUnitCounts" >> beam.MapTuple(summed_unit_count)
        )
        infos = envelopes | "UnitInfos" >> beam.Filter(is_unit_result)
        return counts, infos


class WriteManifest(beam.PTransform):
    """Every step's results, gathered -> ``manifest.json`` (and stale files removed). The one last
    step that depends on everything: Beam's DaskRunner computes only the last transform's graph."""

    def __init__(self, cfg: CorpusConfig, started: float, beam_args: list[str], spill_dir: str | None = None):
        super().__init__()
        self.cfg, self.started, self.beam_args, self.spill_dir = cfg, started, beam_args, spill_dir

    def expand(self, results):
        return (
            results
            | "Results" >> beam.Flatten()
            | "GatherResults" >> GatherAll()
            | "Manifest" >> beam.Map(finalize, self.cfg, self.started, self.beam_args, self.spill_dir)
        )


def build_pipeline(p: beam.Pipeline, cfg: CorpusConfig, beam_args: list[str], previous: str | None = None,
                   planned: list[tuple] | None = None) -> None:
    """The DAG, one step a line; everything travels as envelopes in one collection (``Kind``).
    ``previous``: a run to refresh from (``ReuseUnchanged``), else every unit is read; ``planned``: the
    units already planned and described in the launcher."""
    started = time.time()
    spill_dir = io.join(cfg.run.output, "_tmp", uuid.uuid4().hex[:12])
    dedup = dedup_config(cfg.clean.dedup) if "dedup" in stage_order(cfg) else None
    units = (
        p
        | "PlanUnits" >> PlanUnits(cfg, planned)
        | "ReuseUnchanged" >> ReuseUnchanged(previous, spill_dir, cfg.run.output)
    )
    # Pages are spilled on each branch before the branches meet: a Flatten of two producers is a fusion
    # break, where a runner would move and buffer every page (Beam's FnApiRunner holds them in memory).
    read = (
        units["read"]
        | "ReadRenderValidate" >> ReadRenderValidate(cfg, scratch_dir(spill_dir))
        | "Clean" >> Clean(cfg.clean, cfg.run.output)
        | "SpillPages" >> SpillPages(spill_dir, cfg.write, dedup)
    )
    branches = [*read, units["accounted"]]
    if units["carried"] is not None:
        branches[2:2] = units["carried"] | "SpillCarried" >> SpillPages(spill_dir, cfg.write, dedup)
    envelopes = (
        tuple(branches)
        | "WithCarried" >> beam.Flatten()
        | "Dedup" >> Dedup(dedup, spill_dir, cfg.write)
    )
    results = [
        envelopes | "SumCounts" >> SumCounts(),
        *envelopes | "UnitTable" >> UnitTable(stage_order(cfg)[:stage_order(cfg).index("write") + 1]),
        *envelopes | "WritePages" >> WriteShards(PAGES, Kind.SHARD, cfg, dedup_on=dedup is not None),
        *envelopes | "WriteDeadLetters" >> WriteDeadLetters(spill_dir, cfg),
    ]
    if dedup is not None:  # only dedup makes losers
        results.extend(envelopes | "WriteDuplicates" >> WriteDuplicates(cfg))
    results.append(envelopes | "WriteDroppedSamples" >> WriteDroppedSamples(cfg))
    # Branches that could carry nothing are not built, and composites hand their collections to the one
    # Flatten that needs them, not through a Flatten of their own: on Beam's portable runners each Flatten
    # and each unused step is a round trip (~20-25 ms in the local runner).
    tuple(results) | "WriteManifest" >> WriteManifest(cfg, started, beam_args, spill_dir)


def scratch_dir(spill_dir: str) -> str:
    """Where sources keep the files they write while reading: in the run's temporary folder, which the
    manifest step removes, when it is local (a renderer needs a local folder); else "" (the system's)."""
    return os.path.join(spill_dir, "scratch") if "://" not in spill_dir else ""


def plan_in_process(cfg: CorpusConfig) -> list[tuple] | None:
    """``(settings, unit, UnitInfo)`` for every unit, planned and described here, by the functions the
    ``PlanUnits`` step maps (None when there are more than ``FAST_PATH_MAX_INPUTS`` inputs: the Beam
    step spreads those over its workers). What this process cached of the input files for an earlier
    run is forgotten first (``refresh.forget_files``)."""
    forget_files()
    inputs = source_inputs(cfg.sources)
    if len(inputs) > FAST_PATH_MAX_INPUTS:
        return None
    fingerprints = stage_fingerprints(cfg)
    return [described for element in inputs for described in described_units(element, fingerprints)]


def fast_path(cfg: CorpusConfig, args: list[str], previous: str, started: float) -> tuple[RunManifest | None, list]:
    """An unchanged rerun without Beam: plan in the launcher and, when every unit is the previous run's
    and nothing else that shapes the output changed, carry its files over whole (``refresh.carry_whole``).
    Returns (the manifest, or None, and the plan for the DAG to reuse when there is one)."""
    FileSystems.set_options(PipelineOptions(args))  # what beam.Pipeline does: object-store options (--s3_*)
    try:
        planned = plan_in_process(cfg)
    except Exception:  # noqa: BLE001 - a planning error is the DAG's to report, as in any run
        return None, None
    if planned is None:
        return None, None
    manifest = carry_whole([info for _, _, info in planned], previous, cfg.run.output,
                           write_fingerprint(cfg, stage_order(cfg)), run_metadata(cfg, args), started, verified=True)
    return manifest, planned


def run(cfg: CorpusConfig, beam_args: list[str] | None = None, previous: str | None = None,
        fast: bool = True) -> RunManifest:
    """Run the DAG and return the manifest it wrote, balanced or not: ``manifest.imbalances()`` lists what
    does not add up (the CLI exits 2 on any), ``manifest.dead_letter_rate()`` says how much was
    dead-lettered (the CLI exits 3 past ``run.max_dead_letter_rate``); neither raises here.
    ``previous``: refresh incrementally from that run (a run folder or a releases root); with ``fast``
    an unchanged rerun copies the previous run's files without starting Beam (``fast_path``).

    The run holds ``output_lock`` on its output folder throughout (``OutputBusy`` when another run holds
    it). A previous run must be a finished one whose shards are those its manifest lists
    (``refresh.verify_run``; ``PreviousRunError``); the output folder itself makes a full run
    (``previous_unless_output``). Before anything in the output is replaced, its ``manifest.json`` is
    removed (by the DAG's ``Decide`` step, which every writing step follows): until the new one is written
    (last), the folder reads as an unfinished run, never as the old run over new shards. A runner that
    cannot start the run (``RunnerUnavailable``, a ``ConnectionError``) leaves the folder as it was. An
    input pattern that matches nothing raises ``io.NoInput`` (a ``ValueError``) before any work."""
    started = time.time()
    args = list(cfg.run.beam_args) + list(beam_args or [])
    with output_lock(cfg.run.output):
        previous = previous_unless_output(previous, cfg.run.output)
        if previous is not None:
            verify_run(check_previous(previous))
        return _run_locked(cfg, args, previous, fast, started)


def previous_unless_output(previous: str | None, output: str) -> str | None:
    """``previous``, or None (a full run) when it is the output folder itself: a rerun of the same
    ``--releases ROOT --version V`` once ``LATEST`` names ``V`` (an Airflow retry or "Clear"). A run cannot
    carry from the folder it replaces: its manifest goes first, and a run stopped midway would leave none."""
    if previous is not None and _same_folder(resolve_previous(previous), output):
        print(f"pipelines.corpus: the previous run {resolve_previous(previous)} is the output folder: a full run",
              file=sys.stderr)
        return None
    return previous


def _run_locked(cfg: CorpusConfig, args: list[str], previous: str | None, fast: bool, started: float) -> RunManifest:
    planned = None
    if previous is not None and fast:
        manifest, planned = fast_path(cfg, args, previous, started)
        if manifest is not None:
            return manifest
    # multi-processing workers start now and import this module (every stage's code) while the graph is built
    p = new_pipeline(args, worker_modules=("pipelines.corpus",))
    try:
        build_pipeline(p, cfg, args, previous, planned)
    except BaseException:  # e.g. no relabel endpoint: its workers and temporary folder go with it
        discard(p)
        raise
    # The commit phase starts in the DAG's "Decide" step, which removes the old manifest.json before any step
    # writes into the output folder: a runner that fails to start leaves a finished run as it was.
    try:
        result = p.run()
    except OSError as exc:  # ConnectionError, TimeoutError: on the local runner p.run() runs the DAG (its error)
        if isinstance(p.runner, LocalRunner):
            raise
        raise RunnerUnavailable(f"the runner did not start the run ({type(exc).__name__}: {exc}); "
                                f"nothing ran, and {cfg.run.output} is as it was") from exc
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # DaskRunner: release our connection to the cluster
        if client is not None:
            client.close()
    manifest = io.read_run_manifest(cfg.run.output)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML config (default: configs/corpus.yaml)")
    parser.add_argument("--output", help="output folder or gs:// / s3:// URI (overrides run.output)")
    parser.add_argument("--max-dead-letter-rate", type=float,
                        help="fail when dead letters exceed this share of input records")
    parser.add_argument("--verbose", action="store_true",
                        help="show Beam's own log lines (INFO and up, workers included); by default a run prints "
                             "progress lines and the summary only")
    parser.add_argument("--previous", help="refresh incrementally from this run: its folder (manifest.json, "
                                             "refresh/units.parquet) or a releases root (follows its LATEST); "
                                             "unchanged input units are carried over, the rest are read")
    parser.add_argument("--releases", help="versions side by side: write ROOT/<version>, refresh from ROOT's LATEST "
                                           "version (unless --previous is given), then point ROOT/LATEST at it")
    parser.add_argument("--version", help="with --releases: the version folder's name (default: UTC time)")
    parser.add_argument("--no-fast-path", action="store_true",
                        help="an unchanged refresh runs the DAG too (by default it copies the previous run's files)")
    args, beam_args = parser.parse_known_args(argv)
    overrides: dict = {"run": {}}
    previous = args.previous
    if args.releases and args.output:  # LATEST would name a folder that is not under the releases root
        print("pipelines.corpus: --releases writes ROOT/<version>: it does not take --output (use --version to "
              "name the folder, or --output with --previous without --releases)", file=sys.stderr)
        return 2
    if args.releases:
        try:
            version = version_name(args.version or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        except ValueError as exc:  # "..": the releases root's parent
            print(f"pipelines.corpus: --version: {exc}", file=sys.stderr)
            return 2
        overrides["run"]["output"] = io.join(args.releases, version)
        if previous is None and io.exists(io.join(args.releases, LATEST)):
            previous = args.releases
    if args.output:
        overrides["run"]["output"] = args.output
    if args.max_dead_letter_rate is not None:
        overrides["run"]["max_dead_letter_rate"] = args.max_dead_letter_rate
    try:
        cfg = load_config(args.config, overrides)
        previous = previous_unless_output(previous, cfg.run.output)
        if previous:
            check_previous(previous)
    except (ValueError, FileNotFoundError) as exc:  # a config typo (ConfigError), no such file, no run at --previous
        print(f"pipelines.corpus: {exc}", file=sys.stderr)
        return 2
    given = list(cfg.run.beam_args) + beam_args
    try:
        check_runner(given)
    except (ValueError, ImportError) as exc:  # a --runner Beam cannot make; nothing started
        print(f"pipelines.corpus: --runner: {exc}", file=sys.stderr)
        return 2
    unknown = unknown_options(given, [flag for action in parser._actions for flag in action.option_strings])
    if unknown and ignores_unknown_options(given):  # a typo there would run on other settings than meant
        print(f"pipelines.corpus: unknown option(s): {', '.join(unknown)}; neither this command nor Beam's "
              f"options (the runner's included) define them", file=sys.stderr)
        return 2
    if unknown:  # Dataflow (and Flink/Spark with an uber jar, Prism) pass options they do not know to the service
        print(f"pipelines.corpus: warning: Beam does not define {', '.join(unknown)}: passed on to the runner as "
              f"given", file=sys.stderr)
    unpointed, manifest_before = None, None
    if args.releases:
        latest = io.join(args.releases, LATEST)
        if io.exists(latest) and io.read_bytes(latest).decode("utf-8", "replace").strip() == version:
            # a rerun of the version LATEST names (an Airflow retry): LATEST must never name a folder that is
            # being replaced (a killed rerun would leave it naming a run without a manifest, and every later
            # version would be refused); it is written again once this run balances
            manifest_before = _manifest_bytes(cfg.run.output)
            io.delete([latest])
            unpointed = latest
            print(f"pipelines.corpus: {latest} named {version}, which this run replaces: removed until it balances",
                  file=sys.stderr)
    code = 1
    try:
        code = _main_run(args, cfg, beam_args, previous)
        return code
    finally:
        # a run that never started (no scheduler, no endpoint, another run writing) left the version whole: its
        # manifest is the one LATEST named. A run that finished and failed (imbalance, dead-letter rate) wrote its own.
        untouched = manifest_before is not None and _manifest_bytes(cfg.run.output) == manifest_before
        if unpointed and code != 0 and untouched:
            io.write_bytes_atomic(unpointed, version.encode())


def _manifest_bytes(output: str) -> bytes | None:
    """The run folder's manifest.json as it is now, or None."""
    path = io.join(output, "manifest.json")
    return io.read_bytes(path) if io.exists(path) else None


def _main_run(args: argparse.Namespace, cfg: CorpusConfig, beam_args: list[str], previous: str | None) -> int:
    """``main`` from the run on: run, print the summary, check the balance and rate, point LATEST."""
    try:
        if args.verbose:
            logging.basicConfig()  # a no-op when Beam's import already configured the root logger
            logging.getLogger().setLevel(logging.INFO)
            manifest = run(cfg, beam_args, previous, not args.no_fast_path)
        else:
            with quiet_stderr():
                manifest = run(cfg, quiet_beam_args(beam_args), previous, not args.no_fast_path)
    except (ConnectionError, OutputBusy, PreviousRunError, io.NoInput) as exc:
        # relabel.client.ServerUnavailable: no endpoint, checked before any record; RunnerUnavailable: a runner
        # that could not start the run (a Dask scheduler that does not answer); another run writing the output;
        # a previous run that did not finish or whose shards are not its manifest's; a source matching nothing
        print(f"pipelines.corpus: {exc}", file=sys.stderr)
        return 2
    print(manifest.summary_table())
    print(f"\nwrote {cfg.run.output}: {len(manifest.shards)} shard(s), manifest.json, "
          f"{len(manifest.dead_letter_files)} dead-letter file(s)")
    refresh = manifest.run.get("refresh") or {}
    if refresh.get("previous"):
        reasons = ", ".join(f"{n} {reason}" for reason, n in refresh["processed_by_reason"].items()) or "none"
        print(f"refresh from {refresh['previous']}: {refresh['units_reused']} unit(s) reused "
              f"({refresh['pages_carried']} pages carried), read: {reasons}, removed: {refresh['units_removed']}")
    problems = manifest.imbalances()
    if problems:
        print("manifest does not balance:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    rate = manifest.dead_letter_rate()
    if rate > cfg.run.max_dead_letter_rate:
        print(f"dead-letter rate {rate:.1%} exceeds --max-dead-letter-rate {cfg.run.max_dead_letter_rate:.1%}",
              file=sys.stderr)
        return 3
    if args.releases:
        io.write_bytes_atomic(io.join(args.releases, LATEST), cfg.run.output.rstrip("/").rsplit("/", 1)[-1].encode())
        print(f"{io.join(args.releases, LATEST)} -> {cfg.run.output}")
    return 0


if __name__ == "__main__":
    code = main()
    # Every file of the run is written and closed. Run the exit handlers (temporary folders, logging), then
    # end without the interpreter's teardown of every module Beam and the stages imported: ~0.3 s of each run.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
