"""One command line for every per-record stage: run it over PageRecord Parquet with the DAG's accounting.

    python -m pipelines.stage --help                  # the stages, one line each
    python -m pipelines.stage NAME --help             # NAME's options: type, default, help
    python -m pipelines.stage NAME --input shard.parquet --output out/ [--set key=value ...] [--config opts.yaml]
    python -m pipelines.stage repeats --input-format jsonl [--input in.jsonl] [--output out.jsonl]

NAME is a per-record stage of ``pipelines.clean.registry.STAGES`` or ``validate``. Options come
from ``--config`` (a YAML mapping of the stage's options; a ``clean.stages`` entry with its
``name`` works too) with ``--set key=value`` applied on top (values read as YAML); they are
checked by ``schemas.config.load`` before any record is read, so a typo exits with code 2 naming
the key and the known keys.

``--input`` is a Parquet file, a folder (its ``**/*.parquet``) or a glob, local or ``gs://``,
``s3://``, ``hf://``; it is streamed in record batches. Every record goes through
``pipelines.accounting.apply_stage``, as in the corpus DAG, and ends in exactly one of:

- ``data/<split>-00000-of-00001.parquet``: the records the stage passed on, in input order, with
  ``PAGE_SCHEMA`` (``datasets.load_dataset("parquet", data_dir=".../data")`` reads them);
- ``dropped.parquet``: the records it dropped, as they were when dropped (findings in
  ``quality``), with ``stage`` and ``reason`` columns;
- ``dead_letter.parquet``: dead letters (``DEAD_LETTER_SCHEMA``);

and ``manifest.json`` is the run's ``RunManifest`` for the one stage: per source, in, out,
dropped and dead by reason, counters, with ``in == out + dropped + dead``.

A stage whose module also defines ``scan_lines(lines, cfg)`` has a text form (today: ``repeats``):
with ``--input-format jsonl`` it reads JSON lines ``{id, text}`` (default stdin) and writes one
JSON line of findings per input line (default stdout), as ``python -m pipelines.clean.repeats``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import inspect
import json
import os
import sys
import time
import uuid
from typing import IO, Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.accounting import Kind, apply_stage
from pipelines.clean.registry import STAGES, build_stage, stage_class, stage_config_type
from pipelines.validate_stage import validate_record
from schemas.config import ConfigError, describe, load, merge, parse_sets, read_yaml, to_dict
from schemas.deadletter import DEAD_LETTER_SCHEMA, RecordError
from schemas.manifest import CountEvent, RunManifest
from schemas.page import PAGE_SCHEMA, PageRecord

# pipelines.io and pipelines.write import Beam (~1.4 s): they are imported where records are read or
# written, so --help and option errors answer at once.
PROG = "python -m pipelines.stage"
VALIDATE = "validate"
BATCH_ROWS = 64  # rows per input record batch: pages carry their images, so keep batches small
_HF = json.loads(PAGE_SCHEMA.metadata[b"huggingface"])
_HF["info"]["features"].update({k: {"dtype": "string", "_type": "Value"} for k in ("stage", "reason")})
DROPPED_SCHEMA = pa.schema(list(PAGE_SCHEMA) + [pa.field("stage", pa.string()), pa.field("reason", pa.string())],
                           metadata={"huggingface": json.dumps(_HF)})
# the fields a PageRecord cannot be built without
REQUIRED = tuple(f.name for f in dataclasses.fields(PageRecord)
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def stage_names() -> list[str]:
    return list(STAGES) + [VALIDATE]


def _stage_object(name: str) -> Any:
    return validate_record if name == VALIDATE else stage_class(name)


def summary(name: str) -> str:
    """The first line of the stage's docstring."""
    return (inspect.getdoc(_stage_object(name)) or "").split("\n")[0]


def options_help(name: str) -> list[str]:
    config_type = None if name == VALIDATE else stage_config_type(name)
    return describe(config_type) if config_type is not None else ["(no options)"]


def build(name: str, options: dict[str, Any]) -> Callable[[PageRecord], list[PageRecord]]:
    """Stage ``name`` configured by ``options``: ``ConfigError`` for unknown keys or bad values,
    ``ValueError`` for values the stage itself rejects (a missing benchmark folder)."""
    if name == VALIDATE:
        if options:
            raise ConfigError(f"{name}: takes no options, got {', '.join(sorted(options))}")
        return validate_record
    if "name" in options:  # the registry reads "name" as the stage to build
        config_type = stage_config_type(name)
        known = sorted(f.name for f in dataclasses.fields(config_type)) if config_type else []
        raise ConfigError(f"{name}.name: unknown key; known keys: {', '.join(known)}")
    return build_stage({"name": name, **options}, name)


def text_form(name: str) -> Callable | None:
    """``scan_lines(lines, cfg)`` of the stage's module, when the stage has a text form."""
    if name == VALIDATE:
        return None
    return getattr(importlib.import_module(stage_class(name).__module__), "scan_lines", None)


# --------------------------------------------------------------------------- command line


def _top_parser() -> argparse.ArgumentParser:
    width = max(map(len, stage_names()))
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} NAME [--input IN] [--output OUT] [--set KEY=VALUE ...] | {PROG} NAME --help",
        description=__doc__.split("\n\n")[0],
        epilog="stages:\n" + "\n".join(f"  {n:<{width}}  {summary(n)}" for n in stage_names())
               + f"\n\n{PROG} NAME --help lists a stage's options.",
    )
    parser.add_argument("name", metavar="NAME", help="the stage to run (listed below)")
    return parser


def _stage_parser(name: str) -> argparse.ArgumentParser:
    doc = inspect.getdoc(_stage_object(name)) or ""
    parser = argparse.ArgumentParser(
        prog=f"{PROG} {name}", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=doc, epilog="options (--set KEY=VALUE, or keys of --config):\n"
                                + "\n".join(f"  {line}" for line in options_help(name)).replace("%", "%%"),
    )
    parser.add_argument("--input", help="PageRecord Parquet file, folder or glob (jsonl: file, default stdin)")
    parser.add_argument("--output", help="output folder (jsonl: file, default stdout)")
    parser.add_argument("--input-format", choices=("parquet", "jsonl"), default="parquet",
                        help="jsonl: JSON lines {id, text} for stages with a text form (default parquet)")
    parser.add_argument("--config", metavar="FILE.yaml", help="the stage's options as a YAML mapping")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="set one option (repeatable; the value is read as YAML)")
    parser.add_argument("--batch-rows", type=int, default=BATCH_ROWS, help=f"rows per read batch ({BATCH_ROWS})")
    return parser


def _options(name: str, config: str | None, sets: list[str]) -> dict[str, Any]:
    base: Any = {}
    if config:
        base = read_yaml(config) or {}
        if not isinstance(base, dict):
            raise ConfigError(f"{config}: expected a mapping of {name} options, got {type(base).__name__}")
        if base.get("name", name) != name:
            raise ConfigError(f"{config}: configures stage {base['name']!r}, not {name!r}")
        base = {k: v for k, v in base.items() if k != "name"}
    return merge(base, parse_sets(sets))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0].startswith("-"):
        _top_parser().parse_args(argv)  # prints the stage list for --help; exits 2 otherwise
        return 2
    name = argv[0]
    if name not in stage_names():
        print(f"{PROG}: unknown stage {name!r}; known: {', '.join(stage_names())}", file=sys.stderr)
        return 2
    parser = _stage_parser(name)
    args = parser.parse_args(argv[1:])
    if args.batch_rows < 1:
        parser.error("--batch-rows must be at least 1")
    try:
        options = _options(name, args.config, args.sets)
        if args.input_format == "jsonl":
            scan = text_form(name)
            if scan is None:
                raise ConfigError(f"{name}: no text form (its module defines no scan_lines); "
                                  "use --input-format parquet")
            cfg = load(stage_config_type(name), options, name)
        else:
            if not (args.input and args.output):
                parser.error("--input and --output are required for Parquet input")
            stage = build(name, options)
            if hasattr(stage, "bind_output"):  # caches (relabel answers, KaTeX renders) under --output
                stage.bind_output(args.output)
            files = checked_inputs(args.input)
    except (ValueError, OSError) as exc:  # ConfigError is a ValueError; so are the stages' own checks
        print(str(exc), file=sys.stderr)
        return 2
    if args.input_format == "jsonl":
        return run_text(scan, cfg, args.input, args.output)
    manifest = run(name, stage, files, args.output, options, args.batch_rows)
    print(manifest.summary_table())
    problems = manifest.imbalances()
    if problems:
        print("manifest does not balance:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 3
    return 0


# --------------------------------------------------------------------------- text form


def run_text(scan: Callable, cfg: Any, source_path: str | None, target_path: str | None) -> int:
    """``scan(lines, cfg)`` over JSON lines, one JSON line out per result (ASCII escapes keep ids
    with lone surrogates writable)."""
    source: IO[bytes] = open(source_path, "rb") if source_path else sys.stdin.buffer
    sink: IO[str] = open(target_path, "w", encoding="utf-8") if target_path else sys.stdout
    try:
        for result in scan(source, cfg):
            sink.write(json.dumps(result, ensure_ascii=True) + "\n")
    finally:
        if source_path:
            source.close()
        if target_path:
            sink.close()
        else:
            sink.flush()
    return 0


# --------------------------------------------------------------------------- Parquet


def input_files(pattern: str) -> list[str]:
    """The Parquet files ``pattern`` names: a file, a folder (its ``**/*.parquet``) or a glob."""
    from pipelines import io

    files: list[str] = []
    for match in io.match(pattern):
        folder = os.path.isdir(match) if "://" not in match else not match.endswith(".parquet")
        files.extend(io.match(io.join(match, "**/*.parquet")) if folder else [match])
    if not files:
        raise ConfigError(f"--input {pattern}: no Parquet file matches")
    return files


def checked_inputs(pattern: str) -> list[str]:
    """``input_files(pattern)``, each checked (from its footer) to hold PageRecord columns."""
    from pipelines import io

    files = input_files(pattern)
    for path in files:
        with io.open_read(path) as fh:
            try:
                names = pq.read_schema(fh).names
            except pa.ArrowInvalid as exc:  # not Parquet at all (pyarrow's message does not name the file)
                raise ConfigError(f"--input {path}: not a Parquet file: {exc}") from exc
        missing = [n for n in REQUIRED if n not in names]
        if missing:
            raise ConfigError(f"--input {path}: not PageRecord Parquet, missing columns {', '.join(missing)}")
    return files


@dataclasses.dataclass(frozen=True)
class BadRow:
    """What ``read_rows`` gives in place of a row it cannot give: the row's names, when known, and why."""

    source: str | None
    source_id: str
    error: RecordError


def read_rows(files: list[str], batch_rows: int) -> Iterator[tuple[str, int, dict[str, Any] | BadRow]]:
    """(file, row number, Arrow row) for every row, one record batch in memory at a time. A row whose
    values do not fit the page schema (a page number past int32) comes as a ``BadRow`` in its place
    (``unreadable_row``), and a file that breaks partway as one ``unreadable_parquet`` ``BadRow`` after
    its last good row: the caller dead-letters them and goes on."""
    from pipelines import io

    for path in files:
        number = 0
        try:
            with io.open_read(path) as fh:
                parquet = pq.ParquetFile(fh)
                columns = [n for n in parquet.schema_arrow.names if n in PAGE_SCHEMA.names]
                target = pa.schema([PAGE_SCHEMA.field(n) for n in columns])
                for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns):
                    for row in _conforming_rows(batch, target):
                        yield path, number, row
                        number += 1
        except Exception as exc:  # a corrupt page or row group partway through
            yield path, number, BadRow(None, path, RecordError(
                "unreadable_parquet", f"{path}: read failed after {number} rows: {type(exc).__name__}: {exc}"))


def _conforming_rows(batch: pa.RecordBatch, target: pa.Schema) -> Iterator[dict[str, Any] | BadRow]:
    """The batch's rows as the page schema types them; a row that cannot be (a value out of range)
    as a ``BadRow`` naming the columns. Row by row only when the batch as a whole fails."""
    table = pa.Table.from_batches([batch])
    try:
        yield from table.cast(target).to_pylist()
        return
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    for i in range(table.num_rows):
        one = table.slice(i, 1)
        try:
            yield one.cast(target).to_pylist()[0]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            bad = [name for name in target.names if not _casts(one.column(name), target.field(name).type)]
            names = {k: one.column(k)[0].as_py() for k in ("source", "source_id") if k in one.column_names}
            yield BadRow(str(names.get("source")), str(names.get("source_id")), RecordError(
                "unreadable_row", f"does not fit the page schema ({', '.join(bad) or exc})"))


def _casts(column: pa.ChunkedArray, type_: pa.DataType) -> bool:
    try:
        column.cast(type_)
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


class _Unreadable:
    """A row that is not a PageRecord: named for its dead letter, failing with ``unreadable_row`` (or the
    reader's own error: ``unreadable_parquet``)."""

    def __init__(self, row: dict[str, Any], where: str, exc: Exception):
        self.source, self.source_id = str(row.get("source")), str(row.get("source_id"))
        self.error = exc if isinstance(exc, RecordError) else RecordError("unreadable_row", f"{where}: {exc!r}")

    def fail(self, _item: Any) -> list:
        raise self.error


class TableSink:
    """Streams rows into one Parquet file: buffered up to a row group (``row_group_bytes`` by the rows'
    estimated sizes, or ``row_group_rows``, whichever comes first: the estimates leave out a row's
    Python overhead, ~3 KB for a small page), written under a temporary name and renamed at
    ``close``, which returns the manifest's entry for the file."""

    def __init__(self, output: str, file: str, schema: pa.Schema, split: str | None = None):
        from pipelines import io
        from pipelines.write import HashingWriter, WriteConfig  # the corpus writer's pieces

        self.cfg = WriteConfig()
        self.file, self.split, self.schema = file, split, schema
        self.final = io.join(output, *file.split("/"))
        self.tmp = f"{self.final}.tmp-{uuid.uuid4().hex[:8]}"
        self.raw = io.open_write(self.tmp)
        self.digest = hashlib.sha256()
        self.sink = HashingWriter(self.raw, self.digest)
        self.writer = pq.ParquetWriter(self.sink, schema, compression=self.cfg.compression, write_statistics=True)
        self.rows: list[dict] = []
        self.buffered = 0
        self.count = 0

    def add(self, row: dict[str, Any], size: int) -> None:
        self.rows.append(row)
        self.buffered += size
        self.count += 1
        if self.buffered >= self.cfg.row_group_bytes or len(self.rows) >= self.cfg.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=self.schema))
        self.rows, self.buffered = [], 0

    def close(self) -> dict[str, Any]:
        from pipelines import io

        self._flush()
        self.writer.close()
        self.raw.close()
        io.rename(self.tmp, self.final)
        entry: dict[str, Any] = {"file": self.file} if self.split is None else {"file": self.file, "split": self.split}
        return {**entry, "rows": self.count, "bytes": self.sink.written, "sha256": self.digest.hexdigest()}


def _pages_sink(output: str, split: str) -> TableSink:
    """One file per split with Hub naming, so ``datasets`` sees the splits."""
    name = split.replace(":", "_").replace("/", "_")
    return TableSink(output, f"data/{name}-00000-of-00001.parquet", PAGE_SCHEMA, split)


def run(name: str, stage: Callable, files: list[str], output: str, options: dict[str, Any],
        batch_rows: int = BATCH_ROWS) -> RunManifest:
    """Run ``stage`` over the records of ``files`` (``checked_inputs``) into ``output``; returns the
    manifest it wrote."""
    from pipelines import io
    from pipelines.write import half_written, record_bytes

    started = time.time()
    # a previous run's manifest goes first: an interrupted rerun must not pass for a finished run
    io.delete(io.match(io.join(output, "manifest.json")))
    counts: dict[tuple[str, str, str, str], float] = {}
    pages: dict[str, TableSink] = {}
    dead = TableSink(output, "dead_letter.parquet", DEAD_LETTER_SCHEMA)
    dropped = TableSink(output, "dropped.parquet", DROPPED_SCHEMA)
    for path, number, row in read_rows(files, batch_rows):
        try:
            if isinstance(row, BadRow):
                error = row.error if row.source is None else RecordError(row.error.reason,
                                                                         f"{path} row {number}: {row.error}")
                item = _Unreadable({"source": row.source, "source_id": row.source_id}, "", error)
                fn = item.fail
            else:
                item, fn = PageRecord.from_row(row), stage
        except Exception as exc:  # a row no PageRecord writer produced: dead-lettered, the run goes on
            unreadable = _Unreadable(row, f"{path} row {number}", exc)
            item, fn = unreadable, unreadable.fail
        for kind, payload in apply_stage(name, fn, item, keep_dropped=True):
            if kind == Kind.ITEM:
                split = payload.split
                if split not in pages:
                    pages[split] = _pages_sink(output, split)
                pages[split].add(payload.to_row(), record_bytes(payload))
            elif kind == Kind.EVENT:
                key = (payload.stage, payload.source, payload.kind, payload.reason)
                counts[key] = counts.get(key, 0) + payload.value
            elif kind == Kind.DEAD:
                letter = payload.to_row()
                dead.add(letter, sum(len(v) for v in letter.values()) + 64)
            elif kind == Kind.SAMPLE:
                stage_name, reason, record = payload.stage, payload.reason, payload.record
                dropped.add({**record.to_row(), "stage": stage_name, "reason": reason}, record_bytes(record))
    if not pages:  # an empty dataset still reads back
        pages["train"] = _pages_sink(output, "train")
    shards = [sink.close() for _, sink in sorted(pages.items())]
    dead_file, dropped_file = dead.close()["file"], dropped.close()["file"]
    written = {s["file"] for s in shards}
    io.delete([p for p in io.match(io.join(output, "data", "*.parquet"))
               if "data/" + p.replace("\\", "/").rsplit("/", 1)[-1] not in written])  # a previous run's splits
    # what killed runs left half-written (ours are renamed by now): readers of data/ would take them for shards
    io.delete(half_written(output, ("", "data")))
    config = getattr(stage, "cfg", None)
    manifest = RunManifest.from_events(
        (CountEvent(*key, value) for key, value in counts.items()), [name],
        run={"stage": name, "input_files": files, "options": options,
             "config": to_dict(config) if dataclasses.is_dataclass(config) else None,
             "seconds": round(time.time() - started, 3)},
        shards=shards,
        dead_letter_files=[dead_file],
        dropped_sample_files=[dropped_file],
    )
    io.write_bytes_atomic(io.join(output, "manifest.json"), manifest.to_json().encode("utf-8"))
    return manifest


if __name__ == "__main__":
    sys.exit(main())
