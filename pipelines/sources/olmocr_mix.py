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
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import tarfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pyarrow.parquet as pq
import yaml

from pipelines import io
from pipelines.sources.base import Row, SourcePage, SourceSettings, load_options
from pipelines.sources.parquet_rows import open_parquet
from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import ProvenanceStep, params_hash

VERSION = "1"
PAGE_RESPONSE_FIELDS = (
    "primary_language",
    "is_rotation_valid",
    "rotation_correction",
    "is_table",
    "is_diagram",
)
MIX_1025_COLUMNS = ("url", "page_number", "pdf_relpath", "natural_text", "extras") + PAGE_RESPONSE_FIELDS
MAX_MEMBER_BYTES = 256 * 1024 * 1024


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
    if not isinstance(rotation, int) or rotation not in (0, 90, 180, 270):
        raise RecordError("invalid_page_response", f"{where}: rotation_correction {rotation!r} not in 0/90/180/270")
    for flag in ("is_rotation_valid", "is_table", "is_diagram"):
        if not isinstance(values[flag], bool):
            raise RecordError("invalid_page_response", f"{where}: {flag} must be a bool, got {values[flag]!r}")
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
    def member_key(self, row: dict[str, Any], tar_names: set[str]) -> tuple[str, str]:
        """(tarball basename, member name) holding the row's PDF; raise ``RecordError`` if none."""
        raise NotImplementedError

    def response_fields(self, row: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
        raise NotImplementedError

    key_columns: tuple[str, ...] = ()

    # --- shared machinery -------------------------------------------------------------------
    def _root(self, parquet_uri: str) -> str:
        return self.options.root or posixpath.dirname(parquet_uri) or "."

    def _open(self, parquet_uri: str) -> pq.ParquetFile:
        return open_parquet(parquet_uri)

    def _iter_rows(self, pf: pq.ParquetFile, columns: list[str]) -> Iterator[tuple[int, int, dict]]:
        """(row group, index in group, row) for every row, one row group in memory at a time."""
        for rg in range(pf.num_row_groups):
            table = pf.read_row_group(rg, columns=columns)
            for i, row in enumerate(table.to_pylist()):
                yield rg, i, row

    def _id_column(self, pf: pq.ParquetFile) -> str:
        names = pf.schema_arrow.names
        if "id" in names:
            return "id"
        if "__index_level_0__" in names:
            return "__index_level_0__"
        raise RecordError("bad_schema", "no 'id' column or index")

    def plan(self, uri: str) -> Iterator[JoinUnit]:
        raise NotImplementedError

    def read(self, unit: JoinUnit) -> Iterator[Row]:
        try:
            pf = self._open(unit.parquet)
            id_col = self._id_column(pf)
            missing = [c for c in self.required_columns if c not in pf.schema_arrow.names]
            if missing:
                raise RecordError("bad_schema", f"{unit.parquet}: missing columns {missing}")
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
        return {posixpath.basename(t) for t in unit.tarballs or ()}

    def _rows_without_tarball(self, unit: JoinUnit, pf: pq.ParquetFile, id_col: str) -> Iterator[Row]:
        """Rows whose PDF is in no known tarball (bad or missing ``pdf_relpath``)."""
        try:
            for _, _, row in self._iter_rows(pf, [id_col, *self.key_columns]):
                doc_id = str(row[id_col])
                try:
                    self.member_key(row, set())
                except RecordError as exc:
                    yield Row(source_id=doc_id, error=exc)
        except Exception as exc:
            yield Row(source_id=unit.parquet, error=RecordError("unreadable_parquet", f"{unit.parquet}: {exc}"))

    def _all_tar_names(self, parquet_uri: str) -> set[str]:
        return {posixpath.basename(t) for t in self._tarball_uris(parquet_uri)}

    def _tarball_uris(self, parquet_uri: str) -> list[str]:
        raise NotImplementedError

    def _join(self, unit: JoinUnit, pf: pq.ParquetFile, id_col: str) -> Iterator[Row]:
        tar_names = self._tar_names(unit)
        all_tars = self._all_tar_names(unit.parquet)
        # (tarball or "*", member) -> [(row group, index, doc id)] for rows this unit must resolve
        wanted: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
        try:
            for rg, i, row in self._iter_rows(pf, [id_col, *self.key_columns]):
                try:
                    key = self.member_key(row, all_tars)
                except RecordError:
                    continue  # reported by the tarball-less unit
                if key[0] in tar_names:
                    wanted.setdefault(key, []).append((rg, i, str(row[id_col])))
        except Exception:
            return  # reported by the tarball-less unit as unreadable_parquet
        cache: dict[int, list[dict]] = {}

        def row_at(rg: int, i: int) -> dict:
            if rg not in cache:
                cache.clear()  # tarballs are written in row order: one row group is enough
                cache[rg] = pf.read_row_group(rg).to_pylist()
            return cache[rg][i]

        failures: dict[str, str] = {}
        for tar_uri in unit.tarballs or ():
            yield from self._stream_tar(tar_uri, wanted, row_at, id_col, failures)
        for (tar_name, member), rows in wanted.items():
            for _, _, doc_id in rows:
                if tar_name in failures:
                    reason, why = failures[tar_name]
                    error = RecordError(reason, f"{doc_id}: {why}")
                else:
                    error = RecordError(
                        "missing_tar_member", f"{doc_id}: member {member!r} not found in {tar_name}")
                yield Row(source_id=doc_id, error=error)

    def _stream_tar(self, tar_uri: str, wanted: dict, row_at: Callable[[int, int], dict],
                    id_col: str, failures: dict) -> Iterator[Row]:
        """Stream one tarball, resolving (and removing from ``wanted``) the rows whose member it has."""
        tar_name = posixpath.basename(tar_uri)
        try:
            stream = io.open_read(tar_uri)
        except Exception as exc:
            failures[tar_name] = ("missing_tarball", f"cannot open {tar_uri}: {exc}")
            return
        current: list = []
        key = ("", "")
        with stream:
            try:
                with tarfile.open(fileobj=stream, mode="r|*") as tar:
                    for member in tar:
                        key = (tar_name, member.name)
                        if key not in wanted:
                            key = ("*", member.name)
                            if key not in wanted:
                                continue
                        rows = current = wanted.pop(key)
                        if not member.isfile():
                            err = RecordError("unsafe_tar_member",
                                              f"member {member.name!r} of {tar_uri} is not a regular file")
                            yield from (Row(source_id=d, error=err) for _, _, d in rows)
                            continue
                        if member.size > MAX_MEMBER_BYTES:
                            err = RecordError("tar_member_too_large", f"member {member.name!r} has {member.size} bytes")
                            yield from (Row(source_id=d, error=err) for _, _, d in rows)
                            continue
                        data = tar.extractfile(member).read()
                        current = []
                        for rg, i, _ in rows:
                            yield self._row_result(row_at(rg, i), id_col, data, tar_uri, member.name)
            except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
                failures[tar_name] = ("corrupt_tarball", f"{tar_uri} unreadable: {type(exc).__name__}: {exc}")
                if current:  # the member being read when the stream broke
                    wanted[key] = current

    def _row_result(self, row: dict, id_col: str, pdf: bytes, tar_uri: str, member: str) -> Row:
        doc_id = str(row[id_col])
        try:
            response, text = self.response_fields(row, doc_id)
            subset, split = row.get("_subset_split") or ("", "train")
            page = row.get("page_number")
            page_number = int(page) if page is not None else 1
            domains = self.options.domains
            metadata = {"url": row.get("url"), "pdf": f"{posixpath.basename(tar_uri)}:{member}", "subset": subset}
            extras = row.get("extras")
            if extras:
                try:
                    metadata["extras"] = json.loads(extras)
                except ValueError:
                    raise RecordError("invalid_extras", f"{doc_id}: extras is not JSON") from None
            page_obj = SourcePage(
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
            return Row(source_id=doc_id, pages=[page_obj])
        except (RecordError, Dropped) as exc:
            return Row(source_id=doc_id, error=exc)


class OlmOcrMixSource(_MixBase):
    """olmOCR-mix-1025 (``<subset>_<split>.parquet`` + ``pdf_tarballs/*.tar.gz``)."""

    kind = "olmocr_mix"
    key_columns = ("pdf_relpath",)
    required_columns = MIX_1025_COLUMNS

    def _tarball_uris(self, parquet_uri: str) -> list[str]:
        root = self._root(parquet_uri)
        pf = self._open(parquet_uri)
        names = set()
        for batch in pf.iter_batches(columns=["pdf_relpath"]):
            for rel in batch.column(0).to_pylist():
                if rel and ":" in rel:
                    names.add(rel.split(":", 1)[0])
        return sorted(io.join(root, n) for n in names if safe_member_name(n))

    def plan(self, uri: str) -> Iterator[JoinUnit]:
        yield JoinUnit(uri, None)
        try:
            tarballs = self._tarball_uris(uri)
        except RecordError:
            return
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

    def member_key(self, row: dict[str, Any], tar_names: set[str]) -> tuple[str, str]:
        tar_path, member = _split_relpath(row.get("pdf_relpath"))
        return posixpath.basename(tar_path), member

    def response_fields(self, row: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
        return page_response(row, where), row.get("natural_text")

    def _row_result(self, row, id_col, pdf, tar_uri, member):
        row["_subset_split"] = self._subset_split
        return super()._row_result(row, id_col, pdf, tar_uri, member)

    def read(self, unit: JoinUnit) -> Iterator[Row]:
        self._subset_split = _subset_split(unit.parquet)
        yield from super().read(unit)


def _split_relpath(rel: Any) -> tuple[str, str]:
    """(tarball path, member) of a ``pdf_relpath``; ``RecordError`` when it names none or either part is
    unsafe. The one rule for which unit reports a row: the tarball's, or the no-tarball unit when this raises."""
    if not rel or ":" not in rel:
        raise RecordError("missing_pdf_relpath", f"pdf_relpath {rel!r} is not '<tarball>:<member>'")
    tar_path, member = rel.split(":", 1)
    if not safe_member_name(tar_path) or not safe_member_name(member):
        raise RecordError("unsafe_tar_member", f"pdf_relpath {rel!r} points outside the archive")
    return tar_path, member


@functools.lru_cache(maxsize=64)
def _rows_by_tarball(parquet_uri: str, digest: str, root: str) -> dict[str | None, str]:
    """Tarball URI (None: the no-tarball unit, which reports rows without a valid ``pdf_relpath``) -> sha256
    of the parquet rows the unit reports, by ``_split_relpath`` as ``read`` routes them (``digest``, the
    file's, keys the cache: a changed file is read again)."""
    hashes: dict[str | None, Any] = {}
    for batch in open_parquet(parquet_uri).iter_batches():
        for row in batch.to_pylist():
            try:
                key: str | None = io.join(root, _split_relpath(row.get("pdf_relpath"))[0])
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
        pattern = self.options.tarballs or io.join(self._root(parquet_uri), "pdf_tarballs", "*.tar.gz")
        return io.match(pattern)

    def plan(self, uri: str) -> Iterator[JoinUnit]:
        # Which tarball holds which id is unknown, so one unit streams every tarball.
        yield JoinUnit(uri, None)
        yield JoinUnit(uri, tuple(self._tarball_uris(uri)))

    def member_key(self, row: dict[str, Any], tar_names: set[str]) -> tuple[str, str]:
        doc_id = row.get("id", row.get("__index_level_0__"))
        if not doc_id or not safe_member_name(f"{doc_id}.pdf"):
            raise RecordError("unsafe_tar_member", f"id {doc_id!r} cannot name a tar member")
        return "*", f"{doc_id}.pdf"  # any tarball may hold it

    def _tar_names(self, unit: JoinUnit) -> set[str]:
        return {"*"}

    def response_fields(self, row: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
        try:
            parsed = json.loads(row["response"])
        except (TypeError, ValueError) as exc:
            raise RecordError("bad_response_json", f"{where}: response is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise RecordError("bad_response_json", f"{where}: response is not a JSON object")
        return page_response(parsed, where), parsed.get("natural_text")


FRONT_MATTER_FIELDS = set(PAGE_RESPONSE_FIELDS)


def parse_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """Split olmOCR's ``---`` YAML front matter from the Markdown body, strictly (no missing/extra keys)."""
    if not text.startswith("---\n"):
        raise RecordError("invalid_front_matter", f"{where}: does not start with '---'")
    end = text.find("\n---", 4)
    if end < 0:
        raise RecordError("invalid_front_matter", f"{where}: front matter is not closed")
    try:
        values = yaml.safe_load(text[4:end])
    except yaml.YAMLError as exc:
        raise RecordError("invalid_front_matter", f"{where}: YAML error: {exc}") from None
    if not isinstance(values, dict):
        raise RecordError("invalid_front_matter", f"{where}: front matter is not a mapping")
    extra = sorted(set(values) - FRONT_MATTER_FIELDS)
    if extra:
        raise RecordError("invalid_front_matter", f"{where}: unexpected fields {extra}")
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
        for md in io.match(io.join(uri, "**", "*.md")):
            yield uri, md

    def read(self, unit: tuple[str, str]) -> Iterator[Row]:
        root, md = unit
        source_id = posixpath.relpath(md, root).removesuffix(".md")
        try:
            yield self._read_pair(root, md, source_id)
        except (RecordError, Dropped) as exc:
            yield Row(source_id=source_id, error=exc)

    def _read_pair(self, root: str, md: str, source_id: str) -> Row:
        raw = io.read_bytes(md)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError("invalid_utf8", f"{md}: not UTF-8 at byte {exc.start}") from None
        fields, body = parse_front_matter(text, md)
        pdf_path = md[: -len(".md")] + ".pdf"
        if "://" not in pdf_path:
            # 0225's prepare step symlinks the PDFs: follow links, but only within the dataset root.
            real_root = os.path.realpath(root)
            real = os.path.realpath(pdf_path)
            if not os.path.exists(real):
                raise RecordError("missing_pdf", f"{source_id}: {pdf_path} does not exist")
            if os.path.commonpath([real_root, real]) != real_root:
                raise RecordError("unsafe_path", f"{source_id}: {pdf_path} resolves outside {root}")
        elif not io.exists(pdf_path):
            raise RecordError("missing_pdf", f"{source_id}: {pdf_path} does not exist")
        page = SourcePage(
            source=self.settings.name,
            source_id=source_id,
            page_number=1,
            payload_kind="pdf",
            payload=io.read_bytes(pdf_path),
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
