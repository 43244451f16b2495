"""Readers for allenai/olmOCR-mix in its three published forms.

* ``olmocr_mix`` (olmOCR-mix-1025): ``<subset>_<split>.parquet`` with columns ``url, page_number,
  pdf_relpath, primary_language, is_rotation_valid, rotation_correction, is_table, is_diagram,
  natural_text, extras`` and index ``id``; single-page PDFs live in ``pdf_tarballs/*.tar.gz`` and
  ``pdf_relpath`` is ``"pdf_tarballs/<tar>:<doc_id>.pdf"``.
* ``olmocr_mix_0225``: ``train-s2pdf.parquet`` etc. with a JSON ``response`` column; PDFs are
  ``{id}.pdf`` members of the tarballs given by the ``tarballs`` option.
* ``olmocr_train_dir``: the on-disk training form, ``X.pdf`` next to ``X.md`` whose YAML front
  matter holds the six PageResponse fields.

Tarballs are streamed (``tarfile`` ``r|gz``) and members are read into memory only when a row asks
for them: nothing is ever extracted to disk, so member names such as ``../x`` or ``/etc/x`` cannot
escape the run's folders (they are refused and the row is dead-lettered). One unit is one parquet
file joined with one tarball, so work spreads across tarballs and memory holds only the id map of
one tarball's rows plus one row group.

Every parquet row gets exactly one outcome: a cell of the wrong type (id, page number, extras, text, url)
dead-letters only its row, a tarball that breaks mid-stream dead-letters only the rows it had not yet
delivered, and a file whose ``pdf_relpath`` column is missing or not strings is one ``bad_schema`` letter.
Error messages quote input values through ``_short`` (at most ``MESSAGE_VALUE_CHARS``), and front matter
may not use YAML aliases.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import reprlib
import tarfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipelines import io
from pipelines.sources.base import (
    Row,
    SourcePage,
    SourceSettings,
    input_bases,
    load_options,
    path_under,
    read_file,
)
from pipelines.sources.parquet_rows import MAX_ROW_GROUP_BYTES, open_parquet, row_group_problem
from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import INT32_MAX, ProvenanceStep, params_hash

# 2: cells of the wrong type (page number, extras, text, url, id) are dead letters
# 3: olmocr_train_dir lists folders without following symlinked folders, and an .md or .pdf that resolves
#    (through symlinks) outside the root is unsafe_path, never read (one version for the module's readers:
#    refresh keys units by it)
# 4: rows are routed to a tarball by its normalised path relative to the root, not its name (two t.tar.gz in
#    different folders, or one spelled two ways, made rows read twice); page_number over int32 is bad_page_number;
#    0225 rows no tarball held are corrupt_tarball/missing_tarball, naming it, when a tarball could not be read
# 5: a tarball path resolving (through symlinks) outside the root is unsafe_path, never opened; a row group whose
#    footer says it inflates past MAX_ROW_GROUP_BYTES is never read, its rows row_group_too_large
# 6: an olmOCR-mix-0225 tarball the glob matches but that resolves outside the glob's folder is never opened
VERSION = "6"
PAGE_RESPONSE_FIELDS = (
    "primary_language",
    "is_rotation_valid",
    "rotation_correction",
    "is_table",
    "is_diagram",
)
MIX_1025_COLUMNS = ("url", "page_number", "pdf_relpath", "natural_text", "extras") + PAGE_RESPONSE_FIELDS
MAX_MEMBER_BYTES = 256 * 1024 * 1024
# A tar member's long name or pax header is read whole into memory by ``tarfile``: real ones are a few hundred
# bytes, a hostile one may claim gigabytes (and a gzip stream can supply them from a few megabytes).
MAX_TAR_HEADER_BYTES = 1024 * 1024
MAX_ID_CHARS = 1024  # a row id longer than this names no real page (olmOCR's are ~20-60 characters)
MAX_FRONT_MATTER_CHARS = 64 * 1024  # six short fields; PyYAML is pure Python and slow on big documents
MESSAGE_VALUE_CHARS = 200  # the most characters of one input value an error message quotes


class _ShortRepr(reprlib.Repr):
    """``repr`` that looks at a bounded part of a value, however big or deeply shared it is."""

    def __init__(self):
        super().__init__()
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxarray = self.maxdict = 6
        self.maxset = self.maxfrozenset = self.maxdeque = 6
        self.maxstring = self.maxother = 80
        self.maxlong = 40

    def repr_bytes(self, x: bytes, level: int) -> str:
        return repr(x[: self.maxstring]) + ("..." if len(x) > self.maxstring else "")

    def repr_bytearray(self, x: bytearray, level: int) -> str:
        return self.repr_bytes(bytes(x[: self.maxstring + 1]), level)


_SHORT_REPR = _ShortRepr()


def _short(value: Any) -> str:
    """A ``repr`` of an input value for an error message: at most ``MESSAGE_VALUE_CHARS`` characters, computed
    without expanding the whole value (a YAML alias bomb or a 100 MB cell must not become a huge message)."""
    try:
        text = _SHORT_REPR.repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int past Python's digit limit for str()
        text = f"<{type(value).__name__}>"
    return _cap(text)


def _cap(text: str, limit: int = MESSAGE_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _doc_id(value: Any) -> str:
    """A row's id as its ``source_id``; ``RecordError`` (``missing_id``/``bad_id``) when it cannot name it."""
    if value is None or value == "":
        raise RecordError("missing_id", "the row's id is empty")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RecordError("bad_id", f"id {_short(value)} is of type {type(value).__name__}, not a string or integer")
    doc_id = str(value)
    if len(doc_id) > MAX_ID_CHARS:
        raise RecordError("bad_id", f"id of {len(doc_id)} characters (over {MAX_ID_CHARS}): {_short(doc_id)}")
    return doc_id


def _page_number(value: Any, doc_id: str) -> int:
    """The ``page_number`` cell as an int in 1..``INT32_MAX`` (1 when null); ``RecordError('bad_page_number')``
    otherwise."""
    if value is None:
        return 1
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value) <= 20:
        number = int(value.strip())
    if number is None:
        raise RecordError("bad_page_number",
                          f"{doc_id}: page_number {_short(value)} ({type(value).__name__}) is not an integer")
    if not 1 <= number <= INT32_MAX:  # the record's page_number is an int32 column
        raise RecordError("bad_page_number", f"{doc_id}: page_number {number} is not in 1..{INT32_MAX}")
    return number


def _is_string_type(t: pa.DataType) -> bool:
    """A column type whose cells read as ``str`` or None (what ``pdf_relpath`` must be)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    is_view = getattr(pa.types, "is_string_view", lambda _: False)
    return pa.types.is_string(t) or pa.types.is_large_string(t) or is_view(t) or pa.types.is_null(t)


class _CappedTarInfo(tarfile.TarInfo):
    """``TarInfo`` refusing a long-name or pax header over ``MAX_TAR_HEADER_BYTES`` before ``tarfile`` reads
    it into memory (a ``HeaderError``: the stream is reported ``corrupt_tarball``)."""

    _EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                 tarfile.SOLARIS_XHDTYPE)

    def _proc_member(self, tar):
        if self.type in self._EXTENDED and self.size > MAX_TAR_HEADER_BYTES:
            raise tarfile.HeaderError(f"extended header of {self.size} bytes (over {MAX_TAR_HEADER_BYTES})")
        return super()._proc_member(tar)


@dataclass(frozen=True)
class JoinUnit:
    """One parquet file joined with the tarballs that hold its PDFs (``None``: rows with no PDF)."""

    parquet: str
    tarballs: tuple[str, ...] | None


def safe_member_name(name: str) -> bool:
    """True when a tar member name cannot point outside the archive root."""
    if not name or name.startswith(("/", "\\")) or "\x00" in name:
        return False
    normalized = posixpath.normpath(name.replace("\\", "/"))
    return not (normalized == ".." or normalized.startswith("../") or os.path.isabs(normalized))


def page_response(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate the PageResponse fields (olmOCR's strict schema): raise ``RecordError`` on a bad one."""
    missing = [f for f in PAGE_RESPONSE_FIELDS if f not in values]
    if missing:
        raise RecordError("invalid_page_response", f"{where}: missing fields {missing}")
    language = values["primary_language"]
    if language in ("None", "null", ""):
        language = None  # olmOCR's prepare script writes Python reprs: None became "None"
    rotation = values["rotation_correction"]
    if isinstance(rotation, bool) or not isinstance(rotation, int) or rotation not in (0, 90, 180, 270):
        raise RecordError("invalid_page_response",
                          f"{where}: rotation_correction {_short(rotation)} not in 0/90/180/270")
    for flag in ("is_rotation_valid", "is_table", "is_diagram"):
        if not isinstance(values[flag], bool):
            raise RecordError("invalid_page_response", f"{where}: {flag} must be a bool, got {_short(values[flag])}")
    if language is not None and not isinstance(language, str):
        raise RecordError("invalid_page_response", f"{where}: primary_language must be a string")
    return {
        "primary_language": language,
        "is_rotation_valid": values["is_rotation_valid"],
        "rotation_correction": rotation,
        "is_table": values["is_table"],
        "is_diagram": values["is_diagram"],
    }


def _subset_split(parquet_uri: str) -> tuple[str, str]:
    stem = posixpath.basename(parquet_uri).removesuffix(".parquet")
    for split in ("train", "eval", "test"):
        if stem.endswith("_" + split):
            return stem[: -len(split) - 1], split
        if stem.startswith(split + "-"):  # 0225: train-s2pdf
            return stem[len(split) + 1 :], split
    return stem, "train"


class _MixBase:
    """Shared join of parquet rows with PDF tarball members."""

    kind = "olmocr_mix"

    @dataclass(frozen=True)
    class Options:
        root: str | None = option(None, help="folder the tarballs are found under (default: the parquet file's "
                                             "folder)")
        domains: dict[str, str] = option({}, help="subset (from the file name) -> record domain; other subsets get "
                                                 "the source's domain")
        split_from_filename: bool = option(True, help="take the split from the file name (<subset>_<split>.parquet, "
                                                      "train-<subset>.parquet); false: the source's split")

    def __init__(self, settings: SourceSettings):
        self.settings = settings
        self.options = load_options(self.Options, settings)
        self.provenance = [ProvenanceStep(f"read:{self.kind}", VERSION, params_hash(settings.options))]

    # --- hooks for the two parquet variants -------------------------------------------------
    def member_key(self, row: dict[str, Any]) -> tuple[str, str]:
        """(tarball, member name) holding the row's PDF: the tarball as its normalised path relative to the
        root (``_tar_uri`` makes it the URI its unit reads), or ``"*"`` for any of the unit's; raise
        ``RecordError`` if none."""
        raise NotImplementedError

    def response_fields(self, row: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
        raise NotImplementedError

    key_columns: tuple[str, ...] = ()

    # --- shared machinery -------------------------------------------------------------------
    def _root(self, parquet_uri: str) -> str:
        return self.options.root or posixpath.dirname(parquet_uri) or "."

    def _tar_uri(self, parquet_uri: str, tar_path: str) -> str:
        """The URI of a tarball a row names by its normalised path relative to the root (``member_key``):
        the one rule that plans a tarball's unit and routes rows to it, so two tarballs of one name in
        different folders stay apart and one spelled two ways is one unit. ``RecordError("unsafe_path")``
        when it resolves (a symlinked tarball or folder) outside the root: the no-tarball unit reports the row."""
        return _tar_uri_under(self._root(parquet_uri), tar_path)

    def _open(self, parquet_uri: str) -> pq.ParquetFile:
        return open_parquet(parquet_uri)

    def _iter_rows(self, pf: pq.ParquetFile, columns: list[str]) -> Iterator[tuple[int, int, int, dict]]:
        """(row group, index in group, index in file, row) for every row, one row group in memory at a time.
        A row group whose ``columns`` inflate past ``MAX_ROW_GROUP_BYTES`` (by the footer) is not read: each
        of its rows is that ``RecordError`` (``row_group_too_large``) in the row's place."""
        n = 0
        for rg in range(pf.num_row_groups):
            problem = _row_group_problem(pf, rg, columns)
            if problem is not None:
                for i in range(pf.metadata.row_group(rg).num_rows):
                    yield rg, i, n, problem
                    n += 1
                continue
            table = pf.read_row_group(rg, columns=columns)
            for i, row in enumerate(table.to_pylist()):
                yield rg, i, n, row
                n += 1

    def _id_column(self, pf: pq.ParquetFile) -> str:
        names = pf.schema_arrow.names
        if "id" in names:
            return "id"
        if "__index_level_0__" in names:
            return "__index_level_0__"
        raise RecordError("bad_schema", "no 'id' column or index")

    def _schema_problem(self, schema: pa.Schema) -> str:
        """What is wrong with a parquet file's columns for this reader, or ``""``."""
        missing = [c for c in self.required_columns if c not in schema.names]
        return f"missing columns {missing}" if missing else ""

    def plan(self, uri: str) -> Iterator[JoinUnit]:
        raise NotImplementedError

    def read(self, unit: JoinUnit) -> Iterator[Row]:
        try:
            pf = self._open(unit.parquet)
            id_col = self._id_column(pf)
            problem = self._schema_problem(pf.schema_arrow)
            if problem:
                raise RecordError("bad_schema", f"{unit.parquet}: {problem}")
        except RecordError as exc:
            if unit.tarballs is None:
                yield Row(source_id=unit.parquet, error=exc)
            return  # the tarball units of an unreadable file report nothing: its None unit does
        if unit.tarballs is None:
            yield from self._rows_without_tarball(unit, pf, id_col)
        else:
            yield from self._join(unit, pf, id_col)

    required_columns: tuple[str, ...] = ()

    def _tar_names(self, unit: JoinUnit) -> set[str]:
        """The tarball keys of the rows this unit resolves (``_tar_uri`` of ``member_key``)."""
        return set(unit.tarballs or ())

    def _rows_without_tarball(self, unit: JoinUnit, pf: pq.ParquetFile, id_col: str) -> Iterator[Row]:
        """Rows whose PDF is in no known tarball (bad or missing ``pdf_relpath``, or, for 0225, a bad id)."""
        tar_uri = _tar_resolver(self._root(unit.parquet))  # as _tar_uri, once per tarball path
        try:
            for _, _, n, row in self._iter_rows(pf, [id_col, *self.key_columns]):
                if isinstance(row, RecordError):  # a row group too large to read: the row's place names it
                    yield Row(source_id=f"{unit.parquet}#row{n}", error=row)
                    continue
                try:
                    tar_path, _ = self.member_key(row)
                    if tar_path != "*":
                        tar_uri(tar_path)  # unsafe_path: reported here, never opened
                except RecordError as exc:
                    try:
                        doc_id = _doc_id(row[id_col])
                    except RecordError:
                        doc_id = f"{unit.parquet}#row{n}"  # no usable id: the row's place names it
                    yield Row(source_id=doc_id, error=exc)
        except Exception as exc:
            yield Row(source_id=unit.parquet, error=RecordError(
                "unreadable_parquet", f"{unit.parquet}: {type(exc).__name__}: {_cap(str(exc), 500)}"))

    def _tarball_uris(self, parquet_uri: str) -> list[str]:
        raise NotImplementedError

    def _join(self, unit: JoinUnit, pf: pq.ParquetFile, id_col: str) -> Iterator[Row]:
        tar_names = self._tar_names(unit)
        # (tarball URI or "*", member) -> [(row group, index, doc id)] for rows this unit must resolve
        wanted: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
        # tarball URI -> its path as the rows name it (normalised): messages name it so, free of the input's
        # location (a refresh carries a unit's letters over to a run elsewhere)
        tar_paths: dict[str, str] = {}
        bad_ids: list[Row] = []  # rows routed here whose id cannot name them: reported by their place
        tar_uri = _tar_resolver(self._root(unit.parquet))  # as _tar_uri, once per tarball path
        try:
            for rg, i, n, row in self._iter_rows(pf, [id_col, *self.key_columns]):
                if isinstance(row, RecordError):
                    continue  # reported by the tarball-less unit
                try:
                    tar_path, member = self.member_key(row)
                    key = (tar_path if tar_path == "*" else tar_uri(tar_path), member)
                except RecordError:
                    continue  # reported by the tarball-less unit
                if key[0] not in tar_names:
                    continue
                tar_paths[key[0]] = tar_path
                try:
                    wanted.setdefault(key, []).append((rg, i, _doc_id(row[id_col])))
                except RecordError as exc:
                    bad_ids.append(Row(source_id=f"{unit.parquet}#row{n}", error=exc))
        except Exception:
            return  # reported by the tarball-less unit as unreadable_parquet
        yield from bad_ids
        cache: dict[int, list[dict] | Exception] = {}

        def row_at(rg: int, i: int) -> dict:
            if rg not in cache:
                cache.clear()  # tarballs are written in row order: one row group is enough
                try:
                    problem = _row_group_problem(pf, rg, None)
                    if problem is not None:
                        raise problem
                    cache[rg] = pf.read_row_group(rg).to_pylist()
                except RecordError as exc:
                    cache[rg] = exc
                except Exception as exc:  # noqa: BLE001 - kept, so a bad group is read once, not once a row
                    cache[rg] = exc
            group = cache[rg]
            if isinstance(group, RecordError):
                raise group
            if isinstance(group, Exception):
                raise RecordError("unreadable_parquet", f"{unit.parquet}: row group {rg} unreadable: "
                                                        f"{type(group).__name__}: {_cap(str(group), 500)}")
            return group[i]

        failures: dict[str, tuple[str, str]] = {}
        for tar_uri in unit.tarballs or ():
            # Each row leaves ``wanted`` once, in _tar_members, and gets its one outcome here: processing a
            # row (whatever it raises) stays outside the code that classifies tarball read errors.
            for rows, found, member in self._tar_members(tar_uri, wanted, failures):
                for rg, i, doc_id in rows:
                    if isinstance(found, RecordError):
                        yield Row(source_id=doc_id, error=found)
                    else:
                        yield self._row_result(unit, row_at, rg, i, doc_id, found, tar_uri, member)
        for (tar_name, member), rows in wanted.items():
            for _, _, doc_id in rows:
                if tar_name in failures:
                    reason, why = failures[tar_name]
                    error = RecordError(reason, f"{doc_id}: {why}")
                elif tar_name == "*" and failures:  # any tarball may hold it: maybe one that could not be read
                    reason, why = next(iter(failures.values()))
                    others = f" (and {len(failures) - 1} more unreadable tarballs)" if len(failures) > 1 else ""
                    error = RecordError(reason, f"{doc_id}: member {_short(member)} not found in the tarballs "
                                                f"read; {why}{others}")
                else:
                    error = RecordError("missing_tar_member", f"{doc_id}: member {_short(member)} not found in "
                                                              f"{_cap(tar_paths.get(tar_name, tar_name))}")
                yield Row(source_id=doc_id, error=error)

    def _tar_members(self, tar_uri: str, wanted: dict, failures: dict
                     ) -> Iterator[tuple[list[tuple[int, int, str]], bytes | RecordError, str]]:
        """Stream one tarball: (rows, PDF bytes or the refusal, member name) for each member some rows want,
        those rows removed from ``wanted``. When the stream breaks, ``failures`` gets the tarball's reason and
        the rows of a member being read go back to ``wanted``; rows already handed out are not touched."""
        tar_name = tar_uri  # the key rows are routed by (``_join``)
        try:
            stream = io.open_read(tar_uri)
        except Exception as exc:
            failures[tar_name] = ("missing_tarball", f"cannot open {tar_uri}: {_cap(str(exc), 500)}")
            return
        reading: tuple[tuple[str, str], list] | None = None  # popped, not handed out yet
        with stream:
            try:
                with tarfile.open(fileobj=stream, mode="r|*", tarinfo=_CappedTarInfo) as tar:
                    for member in tar:
                        key = (tar_name, member.name)
                        if key not in wanted:
                            key = ("*", member.name)
                            if key not in wanted:
                                continue
                        rows = wanted.pop(key)
                        if not member.isfile():
                            err = RecordError("unsafe_tar_member",
                                              f"member {_short(member.name)} of {tar_uri} is not a regular file")
                            yield rows, err, member.name
                            continue
                        if member.size > MAX_MEMBER_BYTES:
                            err = RecordError("tar_member_too_large",
                                              f"member {_short(member.name)} has {member.size} bytes")
                            yield rows, err, member.name
                            continue
                        reading = (key, rows)
                        data = tar.extractfile(member).read()
                        reading = None
                        yield rows, data, member.name
            except Exception as exc:  # noqa: BLE001 - only tar reading is in this try, never a row's processing
                failures[tar_name] = ("corrupt_tarball",
                                      f"{tar_uri} unreadable: {type(exc).__name__}: {_cap(str(exc), 500)}")
                if reading is not None:  # the member being read when the stream broke
                    wanted[reading[0]] = reading[1]

    def _row_result(self, unit: JoinUnit, row_at: Callable[[int, int], dict], rg: int, i: int, doc_id: str,
                    pdf: bytes, tar_uri: str, member: str) -> Row:
        """The row's page, or its dead letter: whatever a malformed cell raises stays with this row."""
        try:
            return Row(source_id=doc_id, pages=[self._page(unit, row_at(rg, i), doc_id, pdf, tar_uri, member)])
        except (RecordError, Dropped) as exc:
            return Row(source_id=doc_id, error=exc)
        except Exception as exc:  # noqa: BLE001 - an unforeseen bad cell must not take other rows with it
            return Row(source_id=doc_id, error=RecordError(
                "bad_record", f"{doc_id}: {type(exc).__name__}: {_cap(str(exc), 500)}"))

    def _page(self, unit: JoinUnit, row: dict, doc_id: str, pdf: bytes, tar_uri: str, member: str) -> SourcePage:
        response, text = self.response_fields(row, doc_id)
        if text is not None and not isinstance(text, str):
            raise RecordError("bad_natural_text",
                              f"{doc_id}: natural_text is of type {type(text).__name__}, not a string")
        subset, split = _subset_split(unit.parquet)
        page_number = _page_number(row.get("page_number"), doc_id)
        url = row.get("url")
        if url is not None and not isinstance(url, str):
            raise RecordError("bad_url", f"{doc_id}: url {_short(url)} is of type {type(url).__name__}, not a string")
        domains = self.options.domains
        metadata = {"url": url, "pdf": f"{posixpath.basename(tar_uri)}:{member}", "subset": subset}
        extras = row.get("extras")
        if extras is not None and not isinstance(extras, (str, bytes, bytearray)):
            raise RecordError("invalid_extras", f"{doc_id}: extras {_short(extras)} is of type "
                                                f"{type(extras).__name__}, not a JSON string")
        if extras:
            try:
                metadata["extras"] = json.loads(extras)
            except (ValueError, RecursionError):
                raise RecordError("invalid_extras", f"{doc_id}: extras is not JSON") from None
        return SourcePage(
            source=self.settings.name,
            source_id=doc_id,
            page_number=page_number,
            payload_kind="pdf",
            payload=pdf,
            response=text or "",
            domain=domains.get(subset, self.settings.domain),
            language=response["primary_language"] or self.settings.language,
            license=self.settings.license,
            instruction=self.settings.instruction,
            task=self.settings.task,
            split=split if self.options.split_from_filename else self.settings.split,
            pdf_page_index=0,
            rotation=response["rotation_correction"],
            quality={"olmocr": response, "blank_page": not text},
            metadata=metadata,
            provenance=list(self.provenance),
        )


class OlmOcrMixSource(_MixBase):
    """olmOCR-mix-1025 (``<subset>_<split>.parquet`` + ``pdf_tarballs/*.tar.gz``)."""

    kind = "olmocr_mix"
    key_columns = ("pdf_relpath",)
    required_columns = MIX_1025_COLUMNS

    def _schema_problem(self, schema: pa.Schema) -> str:
        problem = super()._schema_problem(schema)
        for column in self.key_columns:  # pdf_relpath (0225 has none)
            if not problem and column in schema.names and not _is_string_type(schema.field(column).type):
                problem = f"{column} is {schema.field(column).type}, not a string column"
        return problem

    def _tarball_uris(self, parquet_uri: str) -> list[str]:
        """The tarballs the file's rows point into; ``RecordError`` when the file or its ``pdf_relpath``
        column cannot be read (its tarball-less unit reports that, as ``read`` finds the same)."""
        pf = self._open(parquet_uri)
        if "pdf_relpath" not in pf.schema_arrow.names:
            raise RecordError("bad_schema", f"{parquet_uri}: no pdf_relpath column")
        problem = self._schema_problem(pf.schema_arrow)
        if problem:
            raise RecordError("bad_schema", f"{parquet_uri}: {problem}")
        names = set()
        try:
            for rg in range(pf.num_row_groups):
                if _row_group_problem(pf, rg, ["pdf_relpath"]) is not None:
                    continue  # never read: the tarball-less unit reports its rows
                for rel in pf.read_row_group(rg, columns=["pdf_relpath"]).column(0).to_pylist():
                    try:
                        names.add(_split_relpath(rel)[0])
                    except RecordError:
                        continue  # the tarball-less unit reports the row
        except Exception as exc:  # a corrupt page of the column
            raise RecordError("unreadable_parquet", f"{parquet_uri}: {type(exc).__name__}: {_cap(str(exc), 500)}"
                              ) from exc
        uris = set()
        for name in names:
            try:
                uris.add(self._tar_uri(parquet_uri, name))
            except RecordError:
                continue  # unsafe_path: the tarball-less unit reports its rows
        return sorted(uris)

    def plan(self, uri: str) -> Iterator[JoinUnit]:
        yield JoinUnit(uri, None)
        try:
            tarballs = self._tarball_uris(uri)
        except RecordError:
            return  # the None unit reads the same file and dead-letters it
        for tar in tarballs:
            yield JoinUnit(uri, (tar,))

    def unit_digest(self, unit: JoinUnit) -> str:
        """The unit's content id for incremental refresh (``pipelines/refresh.py``): the parquet rows it
        reads (those pointing into its tarball; for the no-tarball unit, those pointing nowhere valid)
        and its tarball's bytes, so adding a tarball and its rows leaves the other units unchanged."""
        rows = _rows_by_tarball(unit.parquet, io.content_id(unit.parquet), self._root(unit.parquet))
        tarball = unit.tarballs[0] if unit.tarballs else None
        own = f"{rows.get(tarball, '')}:{io.content_id(tarball) if tarball else ''}"
        return hashlib.sha256(own.encode()).hexdigest()

    def member_key(self, row: dict[str, Any]) -> tuple[str, str]:
        return _split_relpath(row.get("pdf_relpath"))

    def response_fields(self, row: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
        return page_response(row, where), row.get("natural_text")


def _tar_uri_under(root: str, tar_path: str) -> str:
    """``root`` joined with a row's normalised tarball path (``_split_relpath``), by ``path_under``:
    ``RecordError("unsafe_path")`` when it (a symlinked tarball or folder) resolves outside ``root``."""
    return path_under(root, tar_path, f"the dataset root {root}")


def _tar_resolver(root: str) -> Callable[[str], str]:
    """``_tar_uri_under`` for one root, each tarball path resolved once: a file's rows name a few tarballs
    many times, and two ``realpath`` calls a row made reading 8x slower."""
    memo: dict[str, str | RecordError] = {}

    def resolve(tar_path: str) -> str:
        found = memo.get(tar_path)
        if found is None:
            try:
                found = _tar_uri_under(root, tar_path)
            except RecordError as exc:
                found = exc
            memo[tar_path] = found
        if isinstance(found, RecordError):
            raise RecordError(found.reason, str(found))
        return found

    return resolve


def _row_group_problem(pf: pq.ParquetFile, rg: int, columns: list[str] | None) -> RecordError | None:
    """``parquet_rows.row_group_problem`` under this module's ``MAX_ROW_GROUP_BYTES``."""
    return row_group_problem(pf, rg, columns, MAX_ROW_GROUP_BYTES)


def _split_relpath(rel: Any) -> tuple[str, str]:
    """(tarball path, member) of a ``pdf_relpath``, the path normalised (``./pdf_tarballs/t.tar.gz`` and
    ``pdf_tarballs//t.tar.gz`` are ``pdf_tarballs/t.tar.gz``); ``RecordError`` when it names none or either
    part is unsafe. The one rule for which unit reports a row: its tarball's (``_MixBase._tar_uri``), or the
    no-tarball unit when this raises."""
    if not isinstance(rel, str) or ":" not in rel:
        raise RecordError("missing_pdf_relpath", f"pdf_relpath {_short(rel)} is not '<tarball>:<member>'")
    tar_path, member = rel.split(":", 1)
    if not safe_member_name(tar_path) or not safe_member_name(member):
        raise RecordError("unsafe_tar_member", f"pdf_relpath {_short(rel)} points outside the archive")
    return posixpath.normpath(tar_path), member


@functools.lru_cache(maxsize=64)
def _rows_by_tarball(parquet_uri: str, digest: str, root: str) -> dict[str | None, str]:
    """Tarball URI (None: the no-tarball unit, which reports rows without a valid ``pdf_relpath``) -> sha256
    of the parquet rows the unit reports, by ``_split_relpath`` as ``read`` routes them (``digest``, the
    file's, keys the cache: a changed file is read again)."""
    hashes: dict[str | None, Any] = {}
    tar_uri = _tar_resolver(root)
    pf = open_parquet(parquet_uri)
    for rg in range(pf.num_row_groups):
        problem = _row_group_problem(pf, rg, None)
        if problem is not None:  # never read: the no-tarball unit reports its rows
            hashes.setdefault(None, hashlib.sha256()).update(f"{problem}".encode())
            continue
        for row in pf.read_row_group(rg).to_pylist():
            try:  # the URI ``_MixBase._tar_uri`` gives the row's tarball (its unit's)
                key: str | None = tar_uri(_split_relpath(row.get("pdf_relpath"))[0])
            except RecordError:
                key = None
            hashes.setdefault(key, hashlib.sha256()).update(json.dumps(row, sort_keys=True, default=str).encode())
    return {key: h.hexdigest() for key, h in hashes.items()}


class OlmOcrMix0225Source(OlmOcrMixSource):
    """olmOCR-mix-0225: JSON ``response`` column; PDFs ``{id}.pdf`` in the ``tarballs`` option's glob."""

    kind = "olmocr_mix_0225"
    key_columns = ()
    required_columns = ("url", "page_number", "response")
    unit_digest = None  # one unit reads every tarball: its content is all of its files (pipelines/refresh.py)

    @dataclass(frozen=True)
    class Options(OlmOcrMixSource.Options):
        tarballs: str | None = option(None, help="glob of the PDF tarballs (default: <root>/pdf_tarballs/*.tar.gz)")

    def _tarball_uris(self, parquet_uri: str) -> list[str]:
        """The tarballs the glob matches; a local one that resolves (a symlink) outside the folder the glob
        starts from is left out, never opened: the rows whose PDF only it holds are ``missing_tar_member``."""
        pattern = self.options.tarballs or io.join(self._root(parquet_uri), "pdf_tarballs", "*.tar.gz")
        matched = io.match(pattern)
        if "://" in pattern:
            return matched
        base = input_bases([pattern])[0] or "."

        def inside(uri: str) -> bool:
            try:
                path_under(base, os.path.relpath(uri, base), f"the tarballs' folder {base}")
                return True
            except RecordError:
                return False

        return [uri for uri in matched if inside(uri)]

    def plan(self, uri: str) -> Iterator[JoinUnit]:
        # Which tarball holds which id is unknown, so one unit streams every tarball.
        yield JoinUnit(uri, None)
        yield JoinUnit(uri, tuple(self._tarball_uris(uri)))

    def member_key(self, row: dict[str, Any]) -> tuple[str, str]:
        doc_id = _doc_id(row.get("id", row.get("__index_level_0__")))
        if not safe_member_name(f"{doc_id}.pdf"):
            raise RecordError("unsafe_tar_member", f"id {_short(doc_id)} cannot name a tar member")
        return "*", f"{doc_id}.pdf"  # any tarball may hold it

    def _tar_names(self, unit: JoinUnit) -> set[str]:
        return {"*"}

    def response_fields(self, row: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
        try:
            parsed = json.loads(row["response"])
        except (TypeError, ValueError, RecursionError) as exc:
            raise RecordError("bad_response_json",
                              f"{where}: response is not JSON: {_cap(str(exc))}") from None
        if not isinstance(parsed, dict):
            raise RecordError("bad_response_json", f"{where}: response is not a JSON object")
        return page_response(parsed, where), parsed.get("natural_text")


FRONT_MATTER_FIELDS = set(PAGE_RESPONSE_FIELDS)


class _FrontMatterLoader(yaml.SafeLoader):
    """``SafeLoader`` refusing aliases (``*name``): olmOCR never writes them, and a few hundred bytes of nested
    aliases ("billion laughs") stand for billions of values to anything that walks the result."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not allowed in front matter",
                                              event.start_mark)
        return super().compose_node(parent, index)


def parse_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """Split olmOCR's ``---`` YAML front matter from the Markdown body, strictly (no missing/extra keys,
    no YAML aliases, at most ``MAX_FRONT_MATTER_CHARS``)."""
    if not text.startswith("---\n"):
        raise RecordError("invalid_front_matter", f"{where}: does not start with '---'")
    end = text.find("\n---", 4)
    if end < 0:
        raise RecordError("invalid_front_matter", f"{where}: front matter is not closed")
    if end - 4 > MAX_FRONT_MATTER_CHARS:
        raise RecordError("invalid_front_matter",
                          f"{where}: front matter of {end - 4} characters (over {MAX_FRONT_MATTER_CHARS})")
    try:
        values = yaml.load(text[4:end], Loader=_FrontMatterLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise RecordError("invalid_front_matter", f"{where}: YAML error: {_cap(str(exc), 500)}") from None
    except Exception as exc:  # noqa: BLE001 - e.g. an int past Python's digit limit, nesting past recursion's
        raise RecordError("invalid_front_matter",
                          f"{where}: YAML error: {type(exc).__name__}: {_cap(str(exc), 500)}") from None
    if not isinstance(values, dict):
        raise RecordError("invalid_front_matter", f"{where}: front matter is not a mapping")
    extra = sorted(_short(k) for k in set(values) - FRONT_MATTER_FIELDS)
    if extra:
        shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
        raise RecordError("invalid_front_matter", f"{where}: unexpected fields [{shown}]")
    try:
        fields = page_response(values, where)
    except RecordError as exc:
        raise RecordError("invalid_front_matter", str(exc)) from None
    body = text[end + 4 :]
    return fields, body[1:] if body.startswith("\n") else body


class OlmOcrTrainDirSource:
    """olmOCR's training form: ``X.pdf`` + ``X.md`` (front matter + Markdown) under a folder."""

    kind = "olmocr_train_dir"

    @dataclass(frozen=True)
    class Options:
        """The training form takes no options."""

    def __init__(self, settings: SourceSettings):
        self.settings = settings
        load_options(self.Options, settings)  # rejects any key
        self.provenance = [ProvenanceStep(f"read:{self.kind}", VERSION, params_hash(settings.options))]

    def plan(self, uri: str) -> Iterator[tuple[str, str]]:
        if "://" in uri:  # an object store has no symlinks: every key under the prefix
            for md in io.match(io.join(uri, "**", "*.md")):
                yield uri, md
            return
        for md in _local_md_files(uri):
            yield uri, md

    def read(self, unit: tuple[str, str]) -> Iterator[Row]:
        root, md = unit
        source_id = posixpath.relpath(md, root).removesuffix(".md")
        try:
            yield self._read_pair(root, md, source_id)
        except (RecordError, Dropped) as exc:
            yield Row(source_id=source_id, error=exc)
        except Exception as exc:  # noqa: BLE001 - one bad pair must not stop the others
            yield Row(source_id=source_id, error=RecordError(
                "bad_record", f"{source_id}: {type(exc).__name__}: {_cap(str(exc), 500)}"))

    def _read_pair(self, root: str, md: str, source_id: str) -> Row:
        # The label and the PDF go through path_under: 0225's prepare step symlinks the PDFs, so links are
        # followed, but only within the dataset root; anything else is unsafe_path and never read.
        rel = posixpath.relpath(md, root) if "://" in root else os.path.relpath(md, root).replace(os.sep, "/")
        where = f"the dataset root {root}"
        md = path_under(root, rel, where)
        pdf_path = path_under(root, rel[: -len(".md")] + ".pdf", where)
        raw = read_file(md, md)  # a folder or FIFO named X.md: unsafe_path, never opened
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError("invalid_utf8", f"{md}: not UTF-8 at byte {exc.start}") from None
        fields, body = parse_front_matter(text, md)
        if not io.exists(pdf_path):
            raise RecordError("missing_pdf", f"{source_id}: {pdf_path} does not exist")
        page = SourcePage(
            source=self.settings.name,
            source_id=source_id,
            page_number=1,
            payload_kind="pdf",
            payload=read_file(pdf_path, pdf_path),
            response=body,
            domain=self.settings.domain,
            language=fields["primary_language"] or self.settings.language,
            license=self.settings.license,
            instruction=self.settings.instruction,
            task=self.settings.task,
            split=self.settings.split,
            rotation=fields["rotation_correction"],
            quality={"olmocr": fields, "blank_page": not body.strip()},
            metadata={"md": posixpath.relpath(md, root)},
            provenance=list(self.provenance),
        )
        return Row(source_id=source_id, pages=[page])


def _local_md_files(root: str) -> list[str]:
    """The ``.md`` files under a local ``root``, sorted, as the ``**/*.md`` glob named them (hidden files and
    folders skipped) but without following symlinked folders: a link to a folder elsewhere is not the
    dataset. A symlinked file is listed; reading it checks where it resolves."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".md") and not name.startswith(".") and os.path.isfile(path):
                found.append(path)
    return sorted(found)
