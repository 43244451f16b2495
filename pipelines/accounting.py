"""Plain-Python stage execution with accounting: every input becomes out, dropped or dead.

Stage logic is a function ``item -> list[outputs]`` that raises ``Dropped`` (a filter decision)
or ``RecordError`` (bad input); anything else it raises is a bug in the input's handling and is
dead-lettered as ``unexpected_<ExceptionClass>`` so the run goes on. The helpers here turn those
outcomes into a stream of envelopes: ``(Kind.ITEM, output)``, ``(Kind.EVENT, CountEvent)`` and
``(Kind.DEAD, DeadLetter)``. ``Kind`` names every envelope the corpus DAG passes, here and in
``pipelines.transforms``/``pipelines.corpus``; ``by_kind`` routes them and refuses a kind it was not
told to expect. The Beam layer only routes envelopes; tests call these directly.
"""

from __future__ import annotations

import enum
import re
import time
import traceback
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from pipelines.sources.base import Row
from pipelines.write import SpillStat
from schemas.deadletter import DeadLetter, Dropped, RecordError
from schemas.manifest import CountEvent
from schemas.page import unicode_problem


class Kind(str, enum.Enum):
    """What an envelope carries. str-valued, so a kind equals (and pickles as) its old string."""

    ITEM = "item"  # a record (SourcePage, then PageRecord) on its way to the next stage
    EVENT = "event"  # one CountEvent of one record
    DEAD = "dead"  # a DeadLetter
    SAMPLE = "sample"  # a DroppedSample, kept with ``keep_dropped``
    SPILL = "spill"  # a pipelines.write.Spilled: where the write stage spilled one record
    DEDUP_KEY = "dedup_key"  # (key, member): one of a record's small dedup grouping keys
    LOSER = "loser"  # a pipelines.write.Spilled: where dedup spilled one dropped record's duplicates row
    STAT = "stat"  # a SpillTotal, summed over the run
    FILE = "file"  # (split, path) of a committed spill file
    EXCLUDED = "excluded"  # a SpillTotal: the page rows and bytes dedup drops from one (split, plan bucket)
    LOSER_FILE = "loser_file"  # (split, path) of a committed spill file of dedup losers (ids to leave out)
    PLAN = "plan"  # a pipelines.write.ShardPlan
    COUNT = "count"  # a CountEvent summed over the run (or the dedup stage's own count)
    SHARD = "shard"  # write_shard's result for a page shard
    DEAD_FILE = "dead_file"  # write_shard's result for a dead-letter shard
    SAMPLE_FILE = "sample_file"  # dropped/<stage>-<reason>.parquet, relative to the output
    DEDUP_FILE = "dedup_file"  # write_shard's result for a shard of dropped/dedup-duplicates-*.parquet
    # incremental refresh (pipelines/refresh.py, the ReuseUnchanged step)
    UNIT = "unit"  # (settings, unit, UnitInfo): a planned input unit
    UNIT_COUNT = "unit_count"  # (unit key, stage, kind, reason, value) summed over the run
    UNIT_INFO = "unit_info"  # a pipelines.refresh.UnitInfo of this run (processed or reused)
    CARRY = "carry"  # (table, path, stage, reason, reused keys file): a previous run's file to carry rows from
    REFRESH = "refresh"  # the reuse decision's summary, for the manifest

    def __str__(self) -> str:
        return self.value


class Envelope(NamedTuple):
    kind: Kind
    payload: Any


class DroppedSample(NamedTuple):
    """A record a stage dropped, kept so the run can save the first few per (stage, reason)."""

    stage: str
    reason: str
    record: Any


class SpillTotal(NamedTuple):
    """Rows and bytes spilled into (or, as ``EXCLUDED``, dropped from) one (split, plan bucket) over
    the whole run."""

    key: tuple[str, int]
    stat: SpillStat


def by_kind(envelopes: Iterable[tuple[str, Any]], *kinds: Kind) -> dict[Kind, list]:
    """Payloads grouped by kind, in arrival order. A kind outside ``kinds`` is a wiring bug, not
    something to skip: it raises rather than leave a count or a file out of the manifest."""
    routed: dict[Kind, list] = {kind: [] for kind in kinds}
    for kind, payload in envelopes:
        if kind not in routed:
            expected = ", ".join(str(k) for k in kinds)
            raise ValueError(f"unexpected envelope kind {str(kind)!r} here; expected one of: {expected}")
        routed[kind].append(payload)
    return routed


MAX_MESSAGE_CHARS = 2000  # of a dead letter's message: an error may quote a hostile input's value
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _dead(stage: str, source: str, source_id: str, exc: BaseException, unit: str = "") -> DeadLetter:
    if isinstance(exc, RecordError):
        reason = exc.reason
        message = str(exc)
    else:
        reason = f"unexpected_{type(exc).__name__}"
        tb = traceback.format_exception(exc)
        message = f"{exc!r}; at {tb[-2].strip() if len(tb) > 1 else ''}"
    message = _ADDRESS.sub("", message)  # "<_io.BytesIO object at 0x7f..>": a run's letters must not vary
    if len(message) > MAX_MESSAGE_CHARS:
        message = f"{message[:MAX_MESSAGE_CHARS]}... ({len(message)} characters)"
    return DeadLetter(source, source_id, stage, reason, type(exc).__name__, message, unit)


def unit_of(item: Any) -> str:
    """The input unit a record came from (``pipelines.refresh.UNIT_FIELD`` in its metadata), or ""."""
    metadata = getattr(item, "metadata", None)
    return metadata.get("refresh_unit", "") if isinstance(metadata, dict) else ""


def _outcome(stage: str, source: str, source_id: str, outputs: list | None,
             error: BaseException | None, unit: str = "") -> Iterator[Envelope]:
    yield Envelope(Kind.EVENT, CountEvent(stage, source, "in", "", 1, unit))
    if error is None:
        yield Envelope(Kind.EVENT, CountEvent(stage, source, "out", "", 1, unit))
        yield Envelope(Kind.EVENT, CountEvent(stage, source, "emitted", "", len(outputs or []), unit))
        for output in outputs or []:
            yield Envelope(Kind.ITEM, output)
    elif isinstance(error, Dropped):
        yield Envelope(Kind.EVENT, CountEvent(stage, source, "dropped", error.reason, 1, unit))
    else:
        # the letter names its unit (a column of the dead-letter shards): a later refresh carries a reused
        # unit's letters over from those shards, so no step gathers them per unit
        letter = _dead(stage, source, source_id, error, unit)
        yield Envelope(Kind.EVENT, CountEvent(stage, source, "dead", letter.reason, 1, unit))
        yield Envelope(Kind.DEAD, letter)


def _repeated_page(row: Row, seen: set[tuple[str, int]]) -> RecordError | None:
    """``duplicate_id`` when one of the row's pages has a (source id, page) already read in this unit:
    both would get one page id (``schemas.page.page_id``), which the writer and dedup key records by."""
    for page in row.pages:
        key = (page.source_id, page.page_number)
        if key in seen:
            return RecordError("duplicate_id", f"{key[0]} page {key[1]} was read twice from this input "
                                               "(a repeated row?): the later copy is dead-lettered")
        seen.add(key)
    return None


def _unstorable_id(row: Row) -> RecordError | None:
    """``invalid_source_id`` when the row's id or one of its pages' is not valid Unicode (a lone surrogate:
    a file name that is not UTF-8, an id from JSON's ``"\\udc80"``): no shard can hold the page, and its
    page id would differ from the one a fixed name gets. The letter names it escaped (``DeadLetter``)."""
    for source_id in (row.source_id, *(page.source_id for page in row.pages)):
        problem = unicode_problem(source_id) if isinstance(source_id, str) else None
        if problem:
            return RecordError("invalid_source_id", f"source id {source_id!r} is not valid Unicode ({problem}): "
                                                    "a file name or id that is not UTF-8 cannot be stored")
    return None


def account_rows(stage: str, source: str, rows: Iterable[Row], unit: str = "", label: str = "") -> Iterator[Envelope]:
    """Envelopes for a source's rows; a crash of the reader itself is one dead letter for the unit
    (named by ``label``, the unit as the reader planned it: the rows after the crash are not read).
    ``unit``: the unit's refresh key, put on its count events and dead letters (``pipelines.refresh``).
    A record whose page the unit already yielded is dead-lettered ``duplicate_id`` (the set of pages
    seen is the unit's, so bounded by it; repeats across units are reported by the shard writer); one whose id
    is not valid Unicode ``invalid_source_id`` (``_unstorable_id``)."""
    started = time.perf_counter()
    iterator = iter(rows)
    seen: set[tuple[str, int]] = set()
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            break
        except Exception as exc:  # the reader failed outside any row: account for the unit
            yield from _outcome(stage, source, f"<unit {label}>" if label else "<unit>", None, exc, unit)
            break
        if row.continues and row.error is None:  # more pages of a record counted in an earlier row
            error = None
            if _unstorable_id(row) is not None:  # the record's first row was dead-lettered for it
                continue
            seen.update((page.source_id, page.page_number) for page in row.pages)
            yield Envelope(Kind.EVENT, CountEvent(stage, source, "emitted", "", len(row.pages), unit))
            yield from (Envelope(Kind.ITEM, page) for page in row.pages)
        else:
            error = row.error or _unstorable_id(row) or _repeated_page(row, seen)
            yield from _outcome(stage, source, row.source_id, None if error else row.pages, error, unit)
        # a reader's counters (e.g. unit tests dropped for failing on their own reference) reach the manifest
        for page in row.pages if error is None else ():
            found = (getattr(page, "quality", None) or {}).get(stage)
            for name, value in (found.get("counters") or {}).items() if isinstance(found, dict) else ():
                if value:
                    yield Envelope(Kind.EVENT, CountEvent(stage, source, "counter", name, value, unit))
    # the unit is done: the manifest compares finished units with planned ones (a runner that drops
    # a unit under load would otherwise leave a balanced manifest with its pages missing)
    yield Envelope(Kind.EVENT, CountEvent(stage, source, "units", "", 1, unit))
    yield Envelope(Kind.EVENT, CountEvent(stage, source, "seconds", "", time.perf_counter() - started))


def apply_stage(stage: str, fn: Callable[[Any], list], item: Any,
                keep_dropped: bool = False) -> Iterator[Envelope]:
    """Run one stage function on one record (``item`` has ``source`` and ``source_id``).

    Integer counters the stage left in ``quality[stage]["counters"]`` become manifest counters, and
    so do those of a ``Dropped`` or ``RecordError`` raised with ``counters`` (what a record that did
    not survive the stage still cost: relabel's requests and tokens); with ``keep_dropped`` a dropped
    record is also emitted as ``(Kind.SAMPLE, DroppedSample)`` so the run can keep the first few per
    reason for inspection.
    """
    started = time.perf_counter()
    try:
        outputs, error = fn(item), None
    except Exception as exc:
        outputs, error = None, exc
    unit = unit_of(item)
    yield from _outcome(stage, item.source, item.source_id, outputs, error, unit)
    found = [(getattr(output, "quality", None) or {}).get(stage, {}) for output in outputs or []]
    found += [{"counters": getattr(error, "counters", None)}] if isinstance(error, (Dropped, RecordError)) else []
    for counters in found:
        for name, value in (counters.get("counters") or {}).items() if isinstance(counters, dict) else ():
            if value:
                yield Envelope(Kind.EVENT, CountEvent(stage, item.source, "counter", name, value, unit))
    if keep_dropped and isinstance(error, Dropped):
        yield Envelope(Kind.SAMPLE, DroppedSample(stage, error.reason, item))
    yield Envelope(Kind.EVENT, CountEvent(stage, item.source, "seconds", "", time.perf_counter() - started))
