"""Readers for historical corpora published as Parquet: one row per scanned page with its text.

* ``NaraSource`` (kind ``nara``): ``RevolutionCrossroads/nara_revolutionary_war_pension_files``.
  Page images are referenced by ``pageImageURL`` and fetched with ``ImageResolver``.
* ``LocSource`` (kind ``loc``): ``RevolutionCrossroads/loc_chronicling_america_1770-1810``. The page
  comes from the single-page PDF (``pdf_url``, default) or the JPEG thumbnail.
* ``MappedHistoricalSource`` (kind ``historical``): any corpus whose column names are given in the
  config (Europeana newspapers, NCSE, ...), with the image either embedded or referenced by URL.

Every reader streams its Parquet file by record batches and yields one ``Row`` per input row:
pages for good rows, ``Dropped("empty_transcription")`` for rows without text and ``RecordError``
for rows whose image cannot be had. A file that cannot be opened or read yields one
``unreadable_parquet`` row; a file without the needed columns one ``bad_schema`` row.

Options (``SourceSettings.options``), besides the ``ImageResolver`` keys (``mirror``,
``cache_dir``, ``allow_http``, ``timeout_s``, ``max_bytes``, ``retries``, ``user_agent``):

* all: ``batch_size`` (rows per Parquet batch, default 64).
* ``nara``: ``use_extracted_text`` (bool, default false): fall back to ``extractedText`` (machine
  OCR) when ``transcriptionText`` is empty.
* ``loc``: ``image_column``: ``pdf_url`` (default), ``thumbnail_url`` or ``jpeg2000_url``.
* ``historical``: ``columns`` (mapping, see ``MappedHistoricalSource``), ``quality_columns`` and
  ``metadata_columns`` (lists of column names copied into ``quality`` / ``metadata``),
  ``text_origin`` (default ``machine_ocr``), ``response_format`` (default ``text``).

Texts are kept as published except that ``\\r\\n`` becomes ``\\n`` and surrounding whitespace is
stripped. ``quality["text_origin"]`` says whether the text is a human transcription or machine OCR,
so cleaning stages can treat the two differently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Literal

from pipelines.sources.base import (
    Row,
    SourcePage,
    SourceSettings,
    at_least,
    input_bases,
    load_options,
    relative_to_inputs,
)
from pipelines.sources.images import ImageOptions, ImageResolver
from pipelines.sources.parquet_rows import stream_rows
from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import INT32_MAX, RESPONSE_FORMATS, ProvenanceStep, params_hash

VERSION = "3"  # 2: ids without an id column name the file relative to the paths; 3: an oversized row group or
# embedded cell is row_group_too_large / payload_too_large per row, and files of one name under two path patterns
# keep apart fallback ids
_LANGUAGE = re.compile(r"^(und|[a-z]{2,3}([-_][A-Za-z0-9]{2,8})*)$")
# Placeholder values seen in corpora's language columns (Europeana's file split names among them)
# that happen to look like tags.
_NOT_LANGUAGES = {"no_language_found", "multi_language", "unknown", "none", "null", "nan"}

NARA_COLUMNS = (
    "NAID", "naraURL", "title", "logicalDate", "variantControlNumbers", "levelOfDescription",
    "pdfObjectId", "pdfURL", "pageObjectId", "pageNumber", "pageLink", "pageImageURL",
    "pageImageType", "extractedNames", "extractedTextID", "extractedText", "extractedTextDate",
    "extractedTextContributor", "transcriptionIngestDate", "transcriptionID", "transcriptionText",
)
LOC_COLUMNS = (
    "Web_URL", "newspaper_title", "place_of_publication", "lccn", "issue_date", "edition_order",
    "Page", "thumbnail_url", "jpeg2000_url", "pdf_url", "ocr_url", "ocr_text",
    "source_record_creation_date",
)
LOC_IMAGE_COLUMNS = ("pdf_url", "thumbnail_url", "jpeg2000_url")


def _is_blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _clean_text(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return value.replace("\r\n", "\n").replace("\r", "\n").strip()


def _json_value(value: Any) -> Any:
    """Make a Parquet cell JSON-serialisable for ``metadata`` / ``quality``."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


def _payload_kind(data: bytes) -> str:
    return "pdf" if data[:1024].lstrip().startswith(b"%PDF") else "image"


def _date(value: Any) -> str:
    """``YYYY-MM-DD`` of a timestamp cell (or of an ISO string)."""
    if value is None:
        raise RecordError("missing_id", "issue date is null")
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d")
    text = str(value).strip()
    if not re.match(r"^\d{4}-\d{2}-\d{2}", text):
        raise RecordError("missing_id", f"issue date {text!r} is not a date")
    return text[:10]


class _ParquetHistoricalSource:
    """Shared Parquet streaming and per-row accounting; subclasses turn a dict row into a page."""

    #: every column the reader may use (present ones are read, absent ones skipped).
    COLUMNS: tuple[str, ...] = ()

    @dataclass(frozen=True)
    class Options(ImageOptions):
        batch_size: int = option(64, help="rows per Parquet batch (>= 1)")

        def __post_init__(self) -> None:
            super().__post_init__()
            at_least(self, batch_size=1)

    def __init__(self, settings: SourceSettings):
        self.settings = settings
        self.options = load_options(self.Options, settings)
        self.resolver = ImageResolver.from_options(self.options)
        self.batch_size = self.options.batch_size
        #: columns a file must have (subclasses set them from their settings).
        self.required: tuple[str, ...] = ()
        #: the prompt every record carries (a subclass may give a better default than the task's)
        self.instruction = settings.instruction
        self._provenance = ProvenanceStep(f"read:{settings.kind}", VERSION, params_hash(dict(settings.options or {})))

    # -- Source protocol ---------------------------------------------------------------------

    def plan(self, uri: str) -> Iterator[str]:
        yield uri

    def read(self, unit: str) -> Iterator[Row]:
        index = 0
        problem = lambda schema: self._missing_columns(set(schema.names))  # noqa: E731
        # fallback ids name the file relative to the source's paths (subset folders reuse file names)
        name = relative_to_inputs(unit, input_bases(self.settings.paths))
        # embedded image bytes are capped as fetched ones are (max_bytes): a larger cell is payload_too_large
        for item in stream_rows(unit, self._wanted_columns(), problem, self.batch_size,
                                max_cell_bytes=self.options.max_bytes):
            if isinstance(item, Row):
                yield item
                continue
            yield self._read_record(unit, name, index, item)
            index += 1

    # -- hooks -------------------------------------------------------------------------------

    def _missing_columns(self, present: set[str]) -> str:
        """A message naming the missing required columns, or ``""``."""
        missing = [c for c in self.required if c not in present]
        return f"missing required columns {missing}" if missing else ""

    def _wanted_columns(self) -> list[str]:
        return list(self.COLUMNS)

    def _source_id(self, record: dict[str, Any], fallback_id: str) -> str:
        """The record's id; ``fallback_id`` (``<file name>#<row>``) serves layouts without an id column."""
        raise NotImplementedError

    def _page(self, source_id: str, record: dict[str, Any]) -> SourcePage:
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------------

    def _read_record(self, uri: str, name: str, index: int, record: dict[str, Any]) -> Row:
        fallback_id = f"{uri}#{index}"
        try:
            source_id = self._source_id(record, f"{name}#{index}")
        except RecordError as exc:
            return Row(source_id=fallback_id, error=exc)
        except Exception as exc:  # noqa: BLE001
            return Row(source_id=fallback_id, error=RecordError("missing_id", f"row {index}: {exc}"))
        try:
            return Row(source_id=source_id, pages=[self._page(source_id, record)])
        except (RecordError, Dropped) as exc:
            return Row(source_id=source_id, error=exc)
        except Exception as exc:  # noqa: BLE001 - malformed cell values must not kill the bundle
            return Row(source_id=source_id, error=RecordError("bad_record", f"{type(exc).__name__}: {exc}"))

    def _make_page(self, *, source_id: str, page_number: int, payload: bytes, response: str,
                   language: str | None = None, response_format: str = "text",
                   quality: dict[str, Any] | None = None,
                   metadata: dict[str, Any] | None = None) -> SourcePage:
        s = self.settings
        return SourcePage(
            source=s.name,
            source_id=source_id,
            page_number=page_number,
            payload_kind=_payload_kind(payload),
            payload=payload,
            response=response,
            response_format=response_format,
            domain=s.domain,
            language=language or s.language,
            license=s.license,
            instruction=self.instruction,
            task=s.task,
            split=s.split,
            quality=quality or {},
            metadata={k: _json_value(v) for k, v in (metadata or {}).items() if v is not None},
            provenance=[self._provenance],
        )

    def _fetch(self, url: Any) -> bytes:
        if _is_blank(url):
            raise RecordError("missing_image_url", "row has no image URL")
        return self.resolver.fetch(str(url))


def _page_number(value: Any) -> int:
    """The page cell as an int in 1..``INT32_MAX`` (1 when null; the record's page_number is an int32 column)."""
    if value is None:
        return 1
    number = int(value)
    if not 1 <= number <= INT32_MAX:
        raise RecordError("bad_page_number", f"page number {number} is not in 1..{INT32_MAX}")
    return number


class NaraSource(_ParquetHistoricalSource):
    """NARA Revolutionary War pension files: one row per page, crowd transcription + image URL.

    ``source_id`` is ``"{NAID}-{pageObjectId}"``; the response is ``transcriptionText`` (or, with
    ``use_extracted_text: true``, ``extractedText`` when the transcription is empty).
    """

    COLUMNS = NARA_COLUMNS
    METADATA = (
        "naraURL", "title", "logicalDate", "levelOfDescription", "variantControlNumbers",
        "pdfObjectId", "pdfURL", "pageLink", "pageImageURL", "pageImageType", "extractedNames",
        "transcriptionID", "transcriptionIngestDate", "extractedTextID", "extractedTextDate",
        "extractedTextContributor",
    )

    @dataclass(frozen=True)
    class Options(_ParquetHistoricalSource.Options):
        use_extracted_text: bool = option(False, help="fall back to extractedText (machine OCR) when "
                                                      "transcriptionText is empty")

    def __init__(self, settings: SourceSettings):
        super().__init__(settings)
        self.use_extracted_text = self.options.use_extracted_text
        required = ["NAID", "pageObjectId", "pageNumber", "pageImageURL", "transcriptionText"]
        if self.use_extracted_text:
            required.append("extractedText")
        self.required = tuple(required)

    def _source_id(self, record: dict[str, Any], fallback_id: str) -> str:
        naid, page_object = record.get("NAID"), record.get("pageObjectId")
        if _is_blank(naid) or _is_blank(page_object):
            raise RecordError("missing_id", f"NAID={naid!r} pageObjectId={page_object!r}")
        return f"{str(naid).strip()}-{str(page_object).strip()}"

    def _page(self, source_id: str, record: dict[str, Any]) -> SourcePage:
        text, origin = _clean_text(record.get("transcriptionText")), "human_transcription"
        if not text and self.use_extracted_text:
            text, origin = _clean_text(record.get("extractedText")), "machine_ocr"
        if not text:
            raise Dropped("empty_transcription")
        page_number = _page_number(record.get("pageNumber"))
        payload = self._fetch(record.get("pageImageURL"))
        return self._make_page(
            source_id=source_id,
            page_number=page_number,
            payload=payload,
            response=text,
            quality={"text_origin": origin},
            metadata={"NAID": record.get("NAID"), **{k: record.get(k) for k in self.METADATA}},
        )


class LocSource(_ParquetHistoricalSource):
    """Library of Congress Chronicling America pages (1770-1810) with their machine OCR.

    ``source_id`` is ``"{lccn}/{issue_date:%Y-%m-%d}/ed-{edition_order}/seq-{Page}"``; the page
    image comes from ``options["image_column"]`` (``pdf_url`` by default: a single-page PDF).
    """

    COLUMNS = LOC_COLUMNS
    METADATA = (
        "Web_URL", "newspaper_title", "place_of_publication", "lccn", "issue_date", "edition_order",
        "thumbnail_url", "jpeg2000_url", "pdf_url", "ocr_url", "source_record_creation_date",
    )

    @dataclass(frozen=True)
    class Options(_ParquetHistoricalSource.Options):
        image_column: Literal["pdf_url", "thumbnail_url", "jpeg2000_url"] = option(
            "pdf_url", help="where the page comes from: pdf_url (a single-page PDF), thumbnail_url or jpeg2000_url")

    def __init__(self, settings: SourceSettings):
        super().__init__(settings)
        self.image_column = self.options.image_column
        self.required = ("lccn", "issue_date", "edition_order", "Page", "ocr_text", self.image_column)

    def _source_id(self, record: dict[str, Any], fallback_id: str) -> str:
        lccn = record.get("lccn")
        if _is_blank(lccn) or record.get("edition_order") is None or record.get("Page") is None:
            raise RecordError(
                "missing_id",
                f"lccn={lccn!r} edition_order={record.get('edition_order')!r} Page={record.get('Page')!r}",
            )
        date = _date(record.get("issue_date"))
        return f"{str(lccn).strip()}/{date}/ed-{int(record['edition_order'])}/seq-{int(record['Page'])}"

    def _page(self, source_id: str, record: dict[str, Any]) -> SourcePage:
        text = _clean_text(record.get("ocr_text"))
        if not text:
            raise Dropped("empty_transcription")
        payload = self._fetch(record.get(self.image_column))
        return self._make_page(
            source_id=source_id,
            page_number=_page_number(record.get("Page")),
            payload=payload,
            response=text,
            quality={"text_origin": "machine_ocr"},
            metadata={k: record.get(k) for k in self.METADATA},
        )


@dataclass(frozen=True)
class MappedColumns:
    """Roles -> column names of a ``historical`` source: ``text`` and exactly one image column (``id`` optional)."""

    text: str = option(help="the transcription")
    id: str | None = option(None, help="the record id (the document id when page is mapped); unmapped: "
                                        "<file name>#<row>, for layouts without an id column")
    image_url: str | None = option(None, help="image URLs, fetched with the resolver")
    image_bytes: str | None = option(None, help="image bytes, or Hugging Face Image structs {bytes, path}")
    page: str | None = option(None, help="page numbers (source_id becomes {id}/p{page})")
    language: str | None = option(None, help="language tags; a valid tag overrides the source's language")
    title: str | None = option(None, help="copied into metadata")
    date: str | None = option(None, help="copied into metadata")

    def __post_init__(self) -> None:
        if not self.text:
            raise ValueError("columns.text is required")
        if bool(self.image_url) == bool(self.image_bytes):
            raise ValueError("set exactly one of columns.image_url / image_bytes")


class MappedHistoricalSource(_ParquetHistoricalSource):
    """A historical corpus whose columns come from the config (Europeana newspapers, NCSE, ...).

    ``options["columns"]`` maps roles to column names: ``id`` and ``text`` (required), exactly one
    of ``image_url`` (fetched with the resolver) or ``image_bytes`` (raw bytes, or a Hugging Face
    ``Image`` struct ``{bytes, path}``), and optionally ``page``, ``language``, ``title``, ``date``.
    ``source_id`` is the id value, or ``"{id}/p{page}"`` when ``page`` is mapped (the id then names
    the document). A ``language`` cell that is a valid language tag overrides the configured one.
    """

    @dataclass(frozen=True, kw_only=True)
    class Options(_ParquetHistoricalSource.Options):
        columns: MappedColumns = option(help="role -> column name (MappedColumns)")
        quality_columns: tuple[str, ...] = option((), help="columns copied into quality")
        metadata_columns: tuple[str, ...] = option((), help="columns copied into metadata")
        text_origin: Literal["machine_ocr", "human_transcription"] = option(
            "machine_ocr", help="quality.text_origin: machine_ocr or human_transcription")
        response_format: Literal[RESPONSE_FORMATS] = option(  # type: ignore[valid-type]
            "text", help="the records' response_format (schemas.page.RESPONSE_FORMATS)")

    def __init__(self, settings: SourceSettings):
        super().__init__(settings)
        columns = self.options.columns
        # in the configured order, which the bad_schema message lists columns in
        self.columns: dict[str, str] = {k: getattr(columns, k) for k in settings.options["columns"]
                                        if getattr(columns, k)}
        self.quality_columns = list(self.options.quality_columns)
        self.metadata_columns = list(self.options.metadata_columns)
        self.text_origin = self.options.text_origin
        self.response_format = self.options.response_format

    def _missing_columns(self, present: set[str]) -> str:
        missing = [f"columns.{k} -> {c!r}" for k, c in self.columns.items() if c not in present]
        missing += [f"quality_columns -> {c!r}" for c in self.quality_columns if c not in present]
        missing += [f"metadata_columns -> {c!r}" for c in self.metadata_columns if c not in present]
        if not missing:
            return ""
        return f"mapped columns not in file: {', '.join(missing)} (file has {sorted(present)})"

    def _wanted_columns(self) -> list[str]:
        wanted = list(self.columns.values()) + self.quality_columns + self.metadata_columns
        return list(dict.fromkeys(wanted))

    def _source_id(self, record: dict[str, Any], fallback_id: str) -> str:
        if "id" not in self.columns:
            return fallback_id
        value = record.get(self.columns["id"])
        if _is_blank(value):
            raise RecordError("missing_id", f"column {self.columns['id']!r} is empty")
        source_id = str(value).strip()
        if "page" in self.columns:
            source_id = f"{source_id}/p{_page_number(record.get(self.columns['page']))}"
        return source_id

    def _image(self, record: dict[str, Any]) -> bytes:
        if "image_url" in self.columns:
            return self._fetch(record.get(self.columns["image_url"]))
        column = self.columns["image_bytes"]
        value = record.get(column)
        path = None
        if isinstance(value, dict):  # Hugging Face Image struct
            value, path = value.get("bytes"), value.get("path")
        if isinstance(value, (bytes, bytearray)) and value:
            return bytes(value)
        if isinstance(path, str) and path.startswith(("http://", "https://")):
            return self.resolver.fetch(path)
        raise RecordError("missing_image", f"column {column!r} holds no image bytes (path={path!r})")

    def _page(self, source_id: str, record: dict[str, Any]) -> SourcePage:
        text = _clean_text(record.get(self.columns["text"]))
        if not text:
            raise Dropped("empty_transcription")
        page_number = _page_number(record.get(self.columns["page"])) if "page" in self.columns else 1
        metadata: dict[str, Any] = {"id": record.get(self.columns["id"])} if "id" in self.columns else {}
        language = None
        if "language" in self.columns:
            raw = record.get(self.columns["language"])
            metadata["source_language"] = raw
            tag = str(raw).strip().lower() if raw is not None else ""
            if tag and tag not in _NOT_LANGUAGES and _LANGUAGE.match(tag):
                language = tag
        for key in ("title", "date", "image_url"):
            if key in self.columns:
                metadata[key] = record.get(self.columns[key])
        metadata.update({c: record.get(c) for c in self.metadata_columns})
        quality: dict[str, Any] = {"text_origin": self.text_origin}
        quality.update({c: _json_value(record.get(c)) for c in self.quality_columns})
        payload = self._image(record)
        return self._make_page(
            source_id=source_id,
            page_number=page_number,
            payload=payload,
            response=text,
            language=language,
            response_format=self.response_format,
            quality=quality,
            metadata=metadata,
        )
