"""Streaming a source's Parquet file row by row, with file-level failures as one accounted row.

Every parquet-backed reader uses this: it opens through ``pipelines.io`` (local, gs://, s3://,
hf://), checks the schema, and yields row dicts one record batch at a time. A file that cannot be
opened, is truncated or breaks partway becomes one ``Row`` naming the file (``unreadable_parquet``
or ``bad_schema``): the rows after the break cannot be enumerated, so the file is what is accounted.

Memory stays bounded whatever the file's compression ratio: a row group is read only after its footer
says its columns inflate to at most ``max_row_group_bytes`` (``MAX_ROW_GROUP_BYTES``, 1 GiB); a larger one is
never read and each of its rows (the footer counts them) is yielded as a ``WithheldRecord`` that raises
``RecordError("row_group_too_large")`` on any cell read, so the caller dead-letters it in its place. A row
group is read in batches of at most ``batch_size`` rows and of about ``max_batch_bytes`` (``batch_rows``). A
binary cell (embedded image or PDF bytes, also the ``bytes`` of a Hugging Face ``{bytes, path}`` struct) over
``max_cell_bytes`` (``MAX_CELL_BYTES``, 50 MiB as ``images.DEFAULT_MAX_BYTES``) is never copied out: reading
it raises ``RecordError("payload_too_large")``, the row's other cells read as usual.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines import io
from pipelines.sources.base import Row
from schemas.deadletter import RecordError

MAX_ROW_GROUP_BYTES = 1 << 30  # the most a row group's read columns may inflate to (footer sizes)
MAX_BATCH_BYTES = 64 << 20  # a row group is read in batches of about this many inflated bytes
SUSPECT_RATIO = 50  # a dictionary column compressed more than this may repeat one large value (_dictionary_only)
INDEX_BYTES = 8  # data-page bytes a row of a dictionary-encoded column takes at most (an index, RLE-packed)
MAX_CELL_BYTES = 50 << 20  # the largest binary cell handed out (images.DEFAULT_MAX_BYTES)


class WithheldRecord(dict):
    """A row whose cells in ``withheld`` are not handed out: reading one (``[]``, ``get``) raises its
    ``RecordError``; ``items()`` and the like see ``None`` there; with ``every``, reading any cell raises it
    (a row that was never read). A reader treats it as any row and the error dead-letters the row under the
    reader's own id for it."""

    def __init__(self, values: dict[str, Any], withheld: dict[str, RecordError],
                 every: RecordError | None = None):
        super().__init__(values)
        for name in withheld:
            self.setdefault(name, None)
        self.withheld, self.every = withheld, every

    def _refuse(self, key: Any) -> None:
        if self.every is not None:
            raise self.every
        if key in self.withheld:
            raise self.withheld[key]

    def __getitem__(self, key: Any) -> Any:
        self._refuse(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._refuse(key)
        return super().get(key, default)


def row_group_bytes(parquet: pq.ParquetFile, group: int, columns: list[str] | None) -> int:
    """What the footer says row group ``group``'s ``columns`` (None: all) inflate to, in bytes."""
    meta = parquet.metadata.row_group(group)
    wanted = None if columns is None else set(columns)
    total = 0
    for c in range(meta.num_columns):
        chunk = meta.column(c)
        if wanted is None or chunk.path_in_schema.split(".", 1)[0] in wanted:
            total += max(int(chunk.total_uncompressed_size), 0)
    return total


def row_group_problem(parquet: pq.ParquetFile, group: int, columns: list[str] | None, cap: int,
                      where: str = "") -> RecordError | None:
    """``row_group_too_large`` when row group ``group``'s ``columns`` (None: all) inflate, by the footer, past
    ``cap`` bytes (``where`` starts the message); None when it may be read."""
    size = row_group_bytes(parquet, group, columns)
    if size <= cap:
        return None
    rows = parquet.metadata.row_group(group).num_rows
    return RecordError("row_group_too_large", f"{where}row group {group} ({rows} rows) inflates to {size} bytes, "
                                              f"over the cap of {cap}")


def batch_rows(parquet: pq.ParquetFile, group: int, columns: list[str] | None, batch_size: int,
               max_batch_bytes: int) -> int:
    """Rows per batch of row group ``group`` so a batch inflates to about ``max_batch_bytes`` at most (never
    under one row): columns by their mean row size, except one that may repeat a few large values
    (``_dictionary_only``): its row may be as large as its whole dictionary (one value repeated on every row
    decodes to rows x value), so it counts whole."""
    meta = parquet.metadata.row_group(group)
    wanted = None if columns is None else set(columns)
    rows = max(meta.num_rows, 1)
    per_row = 0.0
    for c in range(meta.num_columns):
        chunk = meta.column(c)
        if wanted is not None and chunk.path_in_schema.split(".", 1)[0] not in wanted:
            continue
        size = max(int(chunk.total_uncompressed_size), 0)
        per_row += size if _dictionary_only(chunk, rows) else size / rows
    return max(1, min(batch_size, int(max_batch_bytes // max(per_row, 1))))


def _dictionary_only(chunk: Any, rows: int) -> bool:
    """Whether a column chunk's rows are indices into its dictionary (its data pages hold at most
    ``INDEX_BYTES`` a row), or it compresses more than ``SUSPECT_RATIO`` times: then one row may decode to
    the whole dictionary (one value repeated on every row decodes to rows x value). A chunk whose dictionary
    filled and fell back to plain pages holds its values in the data pages: its rows count by their mean
    (pyarrow writes a dictionary page for every column: counting each whole read files a row at a time)."""
    if not chunk.has_dictionary_page:
        return False
    stored = max(int(chunk.total_compressed_size), 1)
    data = stored - (int(chunk.data_page_offset) - int(chunk.dictionary_page_offset or 0))
    return data <= INDEX_BYTES * rows or int(chunk.total_uncompressed_size) > SUSPECT_RATIO * stored


def _binary_cells(batch: pa.RecordBatch) -> Iterator[tuple[str, pa.Array]]:
    """(column, binary array) of every column holding bytes, a struct's ``bytes`` child too."""
    for name, column in zip(batch.schema.names, batch.columns):
        t = column.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            yield name, column
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                child = t.field(i)
                if pa.types.is_binary(child.type) or pa.types.is_large_binary(child.type):
                    yield name, column.field(i)


def _records(batch: pa.RecordBatch, max_cell_bytes: int, where: str, first: int) -> list[dict[str, Any]]:
    """The batch's rows as dicts, a binary cell over ``max_cell_bytes`` nulled before it is copied and
    withheld (``payload_too_large``)."""
    oversized: dict[int, dict[str, RecordError]] = {}
    for name, cells in _binary_cells(batch):
        lengths = pc.binary_length(cells)
        too_big = pc.fill_null(pc.greater(lengths, max_cell_bytes), False)
        if not pc.any(too_big).as_py():
            continue
        for row in pc.indices_nonzero(too_big).to_pylist():
            size = lengths[row].as_py()
            oversized.setdefault(row, {})[name] = RecordError(
                "payload_too_large", f"{where}: row {first + row}: column {name!r} holds {size} bytes, "
                                     f"over the cap of {max_cell_bytes}")
        column = batch.column(batch.schema.get_field_index(name))
        batch = batch.set_column(batch.schema.get_field_index(name), name,
                                 pc.if_else(too_big, pa.scalar(None, column.type), column))
    records = batch.to_pylist()
    for row, withheld in oversized.items():
        records[row] = WithheldRecord(records[row], withheld)
    return records


def open_parquet(uri: str) -> pq.ParquetFile:
    """A ``ParquetFile`` over ``uri``; ``RecordError('unreadable_parquet')`` when it is not one."""
    try:
        return pq.ParquetFile(io.open_read(uri))
    except Exception as exc:  # missing file, truncated footer, not parquet at all
        raise RecordError("unreadable_parquet", f"{uri}: cannot open as parquet: {type(exc).__name__}: {exc}") from exc


def stream_rows(uri: str, columns: list[str] | None, schema_problem: Callable[[pa.Schema], str],
                batch_size: int = 64, *, max_row_group_bytes: int | None = None,
                max_cell_bytes: int | None = None,
                max_batch_bytes: int | None = None) -> Iterator[dict[str, Any] | Row]:
    """Row dicts of ``uri`` (only ``columns``), or one error ``Row`` for the file, then stop.

    ``schema_problem(schema)`` returns a message naming what is wrong with the file's columns, or
    ``""``. Callers yield any ``Row`` they get unchanged. Rows of an oversized row group, and rows with an
    oversized binary cell, are ``WithheldRecord``s (see the module docstring): one per row, in its place.
    The caps default (None) to ``MAX_ROW_GROUP_BYTES``, ``MAX_CELL_BYTES`` and ``MAX_BATCH_BYTES``.
    """
    max_row_group_bytes = MAX_ROW_GROUP_BYTES if max_row_group_bytes is None else max_row_group_bytes
    max_cell_bytes = MAX_CELL_BYTES if max_cell_bytes is None else max_cell_bytes
    max_batch_bytes = MAX_BATCH_BYTES if max_batch_bytes is None else max_batch_bytes
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
        for group in range(parquet.metadata.num_row_groups):
            error = row_group_problem(parquet, group, wanted, max_row_group_bytes, f"{uri}: ")
            if error is not None:  # never read: each of its rows is accounted by its place
                for _ in range(parquet.metadata.row_group(group).num_rows):
                    yield WithheldRecord({name: None for name in wanted or parquet.schema_arrow.names}, {}, error)
                    index += 1
                continue
            per_batch = batch_rows(parquet, group, wanted, batch_size, max_batch_bytes)
            for batch in parquet.iter_batches(batch_size=per_batch, row_groups=[group], columns=wanted):
                for record in _records(batch, max_cell_bytes, uri, index):
                    yield record
                    index += 1
    except Exception as exc:  # a corrupt page or row group partway through
        yield Row(source_id=uri, error=RecordError(
            "unreadable_parquet", f"{uri}: read failed after {index} rows: {type(exc).__name__}: {exc}"))
