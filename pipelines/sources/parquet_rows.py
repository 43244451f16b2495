"""Streaming a source's Parquet file row by row, with file-level failures as one accounted row.

Every parquet-backed reader uses this: it opens through ``pipelines.io`` (local, gs://, s3://,
hf://), checks the schema, and yields row dicts one record batch at a time. A file that cannot be
opened, is truncated or breaks partway becomes one ``Row`` naming the file (``unreadable_parquet``
or ``bad_schema``): the rows after the break cannot be enumerated, so the file is what is accounted.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import io
from pipelines.sources.base import Row
from schemas.deadletter import RecordError


def open_parquet(uri: str) -> pq.ParquetFile:
    """A ``ParquetFile`` over ``uri``; ``RecordError('unreadable_parquet')`` when it is not one."""
    try:
        return pq.ParquetFile(io.open_read(uri))
    except Exception as exc:  # missing file, truncated footer, not parquet at all
        raise RecordError("unreadable_parquet", f"{uri}: cannot open as parquet: {type(exc).__name__}: {exc}") from exc


def stream_rows(uri: str, columns: list[str] | None, schema_problem: Callable[[pa.Schema], str],
                batch_size: int = 64) -> Iterator[dict[str, Any] | Row]:
    """Row dicts of ``uri`` (only ``columns``), or one error ``Row`` for the file, then stop.

    ``schema_problem(schema)`` returns a message naming what is wrong with the file's columns, or
    ``""``. Callers yield any ``Row`` they get unchanged.
    """
    try:
        parquet = open_parquet(uri)
    except RecordError as exc:
        yield Row(source_id=uri, error=exc)
        return
    problem = schema_problem(parquet.schema_arrow)
    if problem:
        yield Row(source_id=uri, error=RecordError("bad_schema", f"{uri}: {problem}"))
        return
    index = 0
    try:
        present = set(parquet.schema_arrow.names)
        wanted = [c for c in columns if c in present] if columns is not None else None
        for batch in parquet.iter_batches(batch_size=batch_size, columns=wanted):
            for record in batch.to_pylist():
                yield record
                index += 1
    except Exception as exc:  # a corrupt page or row group partway through
        yield Row(source_id=uri, error=RecordError(
            "unreadable_parquet", f"{uri}: read failed after {index} rows: {type(exc).__name__}: {exc}"))
