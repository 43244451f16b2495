"""The ``validate`` stage: ``schemas.page.validate`` as a per-record stage.

A record that breaks the PageRecord contract is dead-lettered with reason ``schema_violation``
(every problem listed in the message); a valid one passes unchanged. The corpus DAG runs it after
rendering and ``python -m pipelines.stage validate`` runs it over a shard; it lives apart from the
DAG so the CLI does not import Beam.
"""

from __future__ import annotations

from schemas.deadletter import RecordError
from schemas.page import PageRecord, validate


def validate_record(record: PageRecord) -> list[PageRecord]:
    """Dead-letters records that break the PageRecord contract (reason ``schema_violation``)."""
    problems = validate(record)
    if problems:
        raise RecordError("schema_violation", "; ".join(problems))
    return [record]
