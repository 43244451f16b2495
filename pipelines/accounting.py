"""Plain-Python stage execution with accounting: every input becomes out, dropped or dead.

Stage logic is a function ``item -> list[outputs]`` that raises ``Dropped`` (a filter decision)
or ``RecordError`` (bad input); anything else it raises is a bug in the input's handling and is
dead-lettered as ``unexpected_<ExceptionClass>`` so the run goes on. The helpers here turn those
outcomes into a stream of envelopes: ``(ITEM, output)``, ``(EVENT, CountEvent)`` and
``(DEAD, DeadLetter)``. The Beam layer only routes envelopes; tests call these directly.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Iterable, Iterator

from pipelines.sources.base import Row
from schemas.deadletter import DeadLetter, Dropped, RecordError
from schemas.manifest import CountEvent

ITEM, EVENT, DEAD, SAMPLE = "item", "event", "dead", "sample"
Envelope = tuple[str, Any]


def _dead(stage: str, source: str, source_id: str, exc: BaseException) -> DeadLetter:
    if isinstance(exc, RecordError):
        reason = exc.reason
        message = str(exc)
    else:
        reason = f"unexpected_{type(exc).__name__}"
        tb = traceback.format_exception(exc)
        message = f"{exc!r}; at {tb[-2].strip() if len(tb) > 1 else ''}"
    return DeadLetter(source, source_id, stage, reason, type(exc).__name__, message)


def _outcome(stage: str, source: str, source_id: str, outputs: list | None,
             error: BaseException | None) -> Iterator[Envelope]:
    yield EVENT, CountEvent(stage, source, "in", "", 1)
    if error is None:
        yield EVENT, CountEvent(stage, source, "out", "", 1)
        yield EVENT, CountEvent(stage, source, "emitted", "", len(outputs or []))
        for output in outputs or []:
            yield ITEM, output
    elif isinstance(error, Dropped):
        yield EVENT, CountEvent(stage, source, "dropped", error.reason, 1)
    else:
        letter = _dead(stage, source, source_id, error)
        yield EVENT, CountEvent(stage, source, "dead", letter.reason, 1)
        yield DEAD, letter


def account_rows(stage: str, source: str, rows: Iterable[Row]) -> Iterator[Envelope]:
    """Envelopes for a source's rows; a crash of the reader itself is one dead letter for the unit."""
    started = time.perf_counter()
    iterator = iter(rows)
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            break
        except Exception as exc:  # the reader failed outside any row: account for the unit
            yield from _outcome(stage, source, "<unit>", None, exc)
            break
        yield from _outcome(stage, source, row.source_id, row.pages, row.error)
    yield EVENT, CountEvent(stage, source, "seconds", "", time.perf_counter() - started)


def apply_stage(stage: str, fn: Callable[[Any], list], item: Any, keep_dropped: bool = False) -> Iterator[Envelope]:
    """Run one stage function on one record (``item`` has ``source`` and ``source_id``).

    Integer counters the stage left in ``quality[stage]["counters"]`` become manifest counters;
    with ``keep_dropped`` a dropped record is also emitted as ``(SAMPLE, (stage, reason, item))``
    so the run can keep the first few per reason for inspection.
    """
    started = time.perf_counter()
    try:
        outputs, error = fn(item), None
    except Exception as exc:
        outputs, error = None, exc
    yield from _outcome(stage, item.source, item.source_id, outputs, error)
    for output in outputs or []:
        counters = (getattr(output, "quality", None) or {}).get(stage, {})
        for name, value in (counters.get("counters") or {}).items() if isinstance(counters, dict) else ():
            if value:
                yield EVENT, CountEvent(stage, item.source, "counter", name, value)
    if keep_dropped and isinstance(error, Dropped):
        yield SAMPLE, (stage, error.reason, item)
    yield EVENT, CountEvent(stage, item.source, "seconds", "", time.perf_counter() - started)
