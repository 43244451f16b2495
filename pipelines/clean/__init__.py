"""Cleaning stages over ``PageRecord``s (Jina-OCR-v1 section 4.1 and 5.2).

Per-record stages are callables ``stage(record) -> list[PageRecord]`` that raise
``schemas.deadletter.Dropped(reason)`` to drop a record on purpose and ``RecordError`` for bad
input. They write their findings into ``record.quality[<stage name>]`` (scores survive for
analysis even when the threshold changes) and may put integer counters in
``record.quality[<stage name>]["counters"]``, which the manifest sums per stage and source.
Grouping stages (exact and near duplicates) work on small keys emitted per record and decide in
Beam groups; see ``pipelines/clean/dedup.py``.
"""
