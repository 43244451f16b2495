"""Thin Beam wrappers over the plain stage logic. Elements are ``Envelope(kind, payload)``s
(``pipelines.accounting.Kind``); ``payloads``/``tagged`` take them apart and make them.

The whole DAG passes one PCollection of envelopes from stage to stage (records, count events and
dead letters travel together) instead of tagged outputs, and ends in a single manifest step that
depends on everything: that keeps it runnable on Beam's DaskRunner, which computes only the last
transform's graph, as well as on the DirectRunner, Dataflow, Flink and Spark.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any, Callable, Iterable, Iterator

import apache_beam as beam

from pipelines.accounting import Envelope, Kind, SpillTotal, account_rows, apply_stage
from pipelines.clean.dedup_stage import DUPLICATES, Loser, spill_loser
from pipelines.sources.base import PlanFailure, unit_label
from pipelines.write import DEAD_LETTERS, SpillWriter, WriteConfig, add_spill_stat
from schemas.deadletter import DeadLetter
from schemas.manifest import CountEvent


class ReadUnits(beam.DoFn):
    """``(source settings, unit[, refresh key])`` -> envelopes of ``SourcePage`` rows for the ``read``
    stage. With a key (``pipelines.refresh``), each page carries it in ``metadata["refresh_unit"]``
    and the unit's count events and dead letters name it."""

    def __init__(self, stage: str = "read", scratch_dir: str = ""):
        self.stage = stage
        self.scratch_dir = scratch_dir  # local, inside the run: for sources that write files while reading
        self._sources: dict = {}

    def process(self, element) -> Iterator:
        settings, unit, *key = element
        rows = [unit.row()] if isinstance(unit, PlanFailure) else self._source(settings).read(unit)
        if key:
            rows = _stamped(rows, key[0])
        yield from account_rows(self.stage, settings.name, rows, key[0] if key else "", unit_label(unit))

    def _source(self, settings):
        from pipelines.sources import build_source

        if settings.name not in self._sources:
            source = build_source(settings)
            if self.scratch_dir and hasattr(source, "scratch"):
                source.scratch(os.path.join(self.scratch_dir, settings.name))
            self._sources[settings.name] = source
        return self._sources[settings.name]

    def teardown(self):
        """Sources released (a renderer's browser pages and folder), where the runner tears DoFns down;
        files in the run's scratch folder go with the run's temporary folder in any case."""
        while self._sources:
            _, source = self._sources.popitem()
            close = getattr(source, "close", None)
            if close is not None:
                close()


def _stamped(rows, key: str) -> Iterator:
    for row in rows:
        for page in row.pages:
            page.metadata["refresh_unit"] = key
        yield row


def input_parts(element) -> Iterator:
    """``(settings, uri)`` -> ``(settings, part)`` for each part its source plans on its own
    (``parts``: a local folder's files), or the input itself when the source has no parts."""
    from pipelines.sources import build_source

    settings, uri = element
    parts = getattr(build_source(settings), "parts", None)
    if parts is None:
        yield element
        return
    for part in _guarded(uri, lambda: parts(uri)):  # a PlanFailure is passed on by plan_units
        yield settings, part


def plan_units(element) -> Iterator:
    """``(settings, uri or part)`` -> ``(settings, unit)`` for each independently readable unit. A
    reader whose ``plan`` raises (a file it cannot make sense of) gives a ``PlanFailure`` unit for the
    input instead, after the units it planned before the error: read as one dead letter naming it."""
    from pipelines.sources import build_source

    settings, uri = element
    if isinstance(uri, PlanFailure):  # input_parts could not list the input's parts
        yield element
        return
    for unit in _guarded(uri, lambda: build_source(settings).plan(uri)):
        yield settings, unit


def _guarded(uri: Any, make: Callable[[], Iterable]) -> Iterator:
    """What ``make()`` yields; if it raises, a ``PlanFailure`` for ``uri`` after what it yielded."""
    try:
        yield from make()
    except Exception as exc:
        yield PlanFailure.of(uri, exc)


class ApplyStage(beam.DoFn):
    """Apply a plain ``record -> list[record]`` function to item envelopes; pass others through."""

    def __init__(self, stage: str, fn: Callable[[Any], list], progress_every: int = 0,
                 keep_dropped: bool = False):
        self.stage = stage
        self.fn = fn
        self.progress_every = progress_every
        self.keep_dropped = keep_dropped

    def setup(self):
        self._seen = 0
        self._started = time.perf_counter()

    def process(self, envelope) -> Iterator:
        kind, payload = envelope
        if kind != Kind.ITEM:
            yield envelope
            return
        yield from apply_stage(self.stage, self.fn, payload, self.keep_dropped)
        self._seen += 1
        if self.progress_every and self._seen % self.progress_every == 0:
            rate = self._seen / (time.perf_counter() - self._started)
            # One write per line: workers share the launcher's stderr, and print() writes the text and its
            # newline apart, so two workers' lines could interleave (an unbuffered stderr, as Beam's
            # multi-process workers have, passes each write straight through; a short one is atomic).
            sys.stderr.write(f"[{self.stage} pid {os.getpid()}] {self._seen} records, {rate:.1f}/s\n")
            sys.stderr.flush()


class Batches(beam.PTransform):
    """Envelopes -> lists of envelopes holding at most ``size`` records (``ITEM``s) each, for
    ``ApplyBatchStage``; other envelopes ride along in the batch of the records around them and count
    for nothing, so a batch has ``size`` records whatever number of count events come with them.

    On most runners this is ``beam.BatchElements``, fused with the steps around it: a batch per
    ``size`` records of a bundle, the last one emitted from ``finish_bundle``. Beam's DaskRunner drops
    what a DoFn emits from ``finish_bundle`` (it collects a ParDo's outputs before calling it), so on
    Dask each record is keyed by its bundle and its batch number in that bundle, and a GroupByKey makes
    the batches: the same batches, no output from ``finish_bundle``, at most ``size`` records to a
    group (on Dask every step's partition is held in memory anyway). Elsewhere that group would be a
    fusion break that moves and buffers every record (Beam's FnApiRunner holds them all in memory),
    hence the two ways."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def expand(self, envelopes):
        if on_dask(envelopes.pipeline):
            return (envelopes
                    | "KeyByBatch" >> beam.ParDo(KeyByBatch(self.size))
                    | "GroupBatches" >> beam.GroupByKey()
                    | "Batch" >> beam.MapTuple(_batch))
        return envelopes | "Batch" >> beam.BatchElements(min_batch_size=self.size, max_batch_size=self.size,
                                                         element_size_fn=_record_weight)


def on_dask(pipeline: beam.Pipeline) -> bool:
    """Whether ``pipeline`` runs on Beam's DaskRunner (or a subclass of it)."""
    return any(cls.__name__ == "DaskRunner" and cls.__module__.startswith("apache_beam.runners.dask")
               for cls in type(pipeline.runner).__mro__)


def _record_weight(envelope: Envelope) -> int:
    return 1 if envelope.kind == Kind.ITEM else 0


class KeyByBatch(beam.DoFn):
    """Envelope -> ``((bundle, batch number), envelope)``: a new batch number after every ``size``
    records of the bundle (``Batches`` on Dask). Emits from ``process`` only."""

    def __init__(self, size: int):
        self.size = size

    def start_bundle(self):
        self._bundle = uuid.uuid4().hex  # a retried bundle's keys are new ones: only one attempt is kept
        self._batch = self._records = 0

    def process(self, envelope: Envelope) -> Iterator:
        if envelope.kind == Kind.ITEM:
            if self._records == self.size:
                self._batch, self._records = self._batch + 1, 0
            self._records += 1
        yield (self._bundle, self._batch), envelope


def _batch(_key, envelopes: Iterable[Envelope]) -> list[Envelope]:
    return list(envelopes)


class ApplyBatchStage(beam.DoFn):
    """``ApplyStage`` for stages that work on many records at once (``stage.run_batch(records)``: per
    record its outputs or its exception), fed by ``Batches``: the relabel stages keep many requests in
    flight while at most one batch of records is held per worker. Accounting is ``apply_stage``'s,
    record by record."""

    def __init__(self, stage: str, batch_stage: Any, keep_dropped: bool = False):
        self.stage = stage
        self.batch_stage = batch_stage
        self.keep_dropped = keep_dropped

    def process(self, batch) -> Iterator:
        items = []
        for envelope in batch:
            if envelope.kind == Kind.ITEM:
                items.append(envelope.payload)
            else:
                yield envelope
        if not items:
            return
        for item, result in zip(items, self.batch_stage.run_batch(items)):
            yield from apply_stage(self.stage, _settled(result), item, self.keep_dropped)


def _settled(result: Any) -> Callable[[Any], list]:
    def outcome(_record):
        if isinstance(result, BaseException):
            raise result
        return result

    return outcome


class Spill(beam.DoFn):
    """The ``write`` stage's first half: records -> per-bundle spill files (see ``pipelines.write``).

    With ``key_fn`` (dedup), each record's small grouping keys are emitted as
    ``(Kind.DEDUP_KEY, (key, member))`` envelopes, so duplicates are found without moving records;
    without it, a record's ``quality["dedup"]`` (a page carried from a run with dedup on) goes.
    """

    def __init__(self, spill_dir: str, cfg: WriteConfig, key_fn: Callable[[Any], list] | None = None):
        self.spill_dir = spill_dir
        self.cfg = cfg
        self.key_fn = key_fn

    def start_bundle(self):
        self.writer = SpillWriter(self.spill_dir, self.cfg)

    def process(self, envelope) -> Iterator:
        kind, record = envelope
        if kind != Kind.ITEM:
            yield envelope
            return
        if self.key_fn is not None:
            try:
                pairs = self.key_fn(record)
            except Exception as exc:  # e.g. an image that no longer decodes: dead-letter, don't write
                yield from apply_stage("write", _raise(exc), record)
                return
            for key_member in pairs:
                yield Envelope(Kind.DEDUP_KEY, key_member)
        elif "dedup" in record.quality:
            # a page carried from a run with dedup on: without dedup, its keys are not this run's findings
            del record.quality["dedup"]
        yield Envelope(Kind.SPILL, self.writer.add(record))
        for event_kind in ("in", "out", "emitted"):
            yield Envelope(Kind.EVENT, CountEvent("write", record.source, event_kind, "", 1))

    def finish_bundle(self):
        self.writer.close()


class SpillDeadLetters(beam.DoFn):
    """Dead letters -> per-bundle spill files, sharded like pages (``pipelines.write.DEAD_LETTERS``).
    Yields a ``Spilled`` per letter."""

    def __init__(self, spill_dir: str, cfg: WriteConfig):
        self.spill_dir = spill_dir
        self.cfg = cfg

    def start_bundle(self):
        self.writer = SpillWriter(self.spill_dir, self.cfg, DEAD_LETTERS)

    def process(self, letter: DeadLetter) -> Iterator:
        yield self.writer.add_dead_letter(letter)

    def finish_bundle(self):
        self.writer.close()


class SpillLosers(beam.DoFn):
    """Dedup losers -> per-bundle spill files of the duplicates table
    (``pipelines.clean.dedup_stage.DUPLICATES``), bucketed by id like pages, so that no step holds
    every loser. Yields a ``Spilled`` per loser."""

    def __init__(self, spill_dir: str, cfg: WriteConfig):
        self.spill_dir = spill_dir
        self.cfg = cfg

    def start_bundle(self):
        self.writer = SpillWriter(self.spill_dir, self.cfg, DUPLICATES)

    def process(self, loser: Loser) -> Iterator:
        yield spill_loser(self.writer, loser)

    def finish_bundle(self):
        self.writer.close()


def _raise(exc: Exception) -> Callable[[Any], list]:
    def fail(_record):
        raise exc

    return fail


def payloads(kind: Kind) -> beam.PTransform:
    """Envelopes -> the payloads of those of ``kind``."""
    return beam.FlatMap(_payloads_of, kind)


def tagged(kind: Kind) -> beam.PTransform:
    """Payloads -> ``Envelope(kind, payload)``."""
    return beam.Map(_tag, kind)


class PlanInputs(beam.CombineFn):
    """What the shard planner needs, summed as the spills arrive: ``SPILL`` envelopes -> their stats
    per (split, plan bucket) and the spill files they opened; with dedup, ``EXCLUDED`` sums -> summed
    per key again, and ``LOSER`` spills -> the losers' spill files. The output is the planner's input
    (``STAT``, ``FILE``, ``EXCLUDED`` and ``LOSER_FILE`` envelopes).

    One combine instead of summing per key, flattening with the file names and gathering: Beam lifts
    it into the steps that spill, and a local run saves two round trips per table. Its accumulator
    is as large as the planner's input (one entry per plan bucket and per spill file)."""

    def create_accumulator(self) -> tuple[dict, list, dict, list]:
        return {}, [], {}, []

    def add_input(self, acc, envelope: Envelope):
        stats, files, excluded, loser_files = acc
        kind, payload = envelope
        if kind == Kind.SPILL:
            add_spill_stat(stats, payload.key, payload.stat)
            if payload.new_file:
                files.append(payload.new_file)
        elif kind == Kind.EXCLUDED:
            add_spill_stat(excluded, payload.key, payload.stat)
        elif kind == Kind.LOSER:  # only its file: the EXCLUDED sums say what it leaves out
            if payload.new_file:
                loser_files.append(payload.new_file)
        else:
            raise ValueError(f"PlanInputs: unexpected envelope kind {str(kind)!r}")
        return acc

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        stats, files, excluded, loser_files = next(accumulators)
        for more_stats, more_files, more_excluded, more_loser_files in accumulators:
            for key, stat in more_stats.items():
                add_spill_stat(stats, key, stat)
            for key, stat in more_excluded.items():
                add_spill_stat(excluded, key, stat)
            files += more_files
            loser_files += more_loser_files
        return stats, files, excluded, loser_files

    def extract_output(self, acc) -> list[Envelope]:
        stats, files, excluded, loser_files = acc
        return ([Envelope(Kind.STAT, SpillTotal(key, stat)) for key, stat in stats.items()]
                + [Envelope(Kind.FILE, file) for file in files]
                + [Envelope(Kind.EXCLUDED, SpillTotal(key, stat)) for key, stat in excluded.items()]
                + [Envelope(Kind.LOSER_FILE, file) for file in loser_files])


class GatherAll(beam.PTransform):
    """Every element into one list, on one worker: for the few steps that need the whole run's
    (small) aggregates at once, the shard planner and the manifest. One list also when there is
    nothing (a source that plans no units): the steps after it still run, and the run ends with its
    manifest (``CombineGlobally``'s default)."""

    def expand(self, pcoll):
        return pcoll | "ToList" >> beam.combiners.ToList()


def _payloads_of(envelope: Envelope, kind: Kind) -> Iterator:
    if envelope.kind == kind:
        yield envelope.payload


def _tag(payload: Any, kind: Kind) -> Envelope:
    return Envelope(kind, payload)


__all__ = ["ReadUnits", "input_parts", "plan_units", "PlanInputs", "ApplyStage", "ApplyBatchStage", "Batches",
           "KeyByBatch", "on_dask", "Spill", "SpillDeadLetters", "SpillLosers", "payloads", "tagged", "GatherAll"]
