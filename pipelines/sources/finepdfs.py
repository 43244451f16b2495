"""FinePDFs reader: one ``Row`` per parquet row, PDF bytes fetched from the Common Crawl WARC record.

FinePDFs (``HuggingFaceFW/finepdfs``) ships text only: ``data/<lang_Script>/train/*.parquet`` with
17 columns. The PDF a row was extracted from lives in the Common Crawl WARC file ``file_path`` at
byte ``offset`` (one gzip member; there is no length column). ``page_ends`` holds cumulative page
lengths into ``text``:

* ``docling`` pages are concatenated without separators: page *i* is
  ``text[page_ends[i-1]:page_ends[i]]``.
* ``rolmOCR`` pages are joined with ``"\\n"`` but ``page_ends`` counts no separators, so page *i*
  starts at ``page_ends[i-1] + i``.

Source options:

* ``warc_root`` (required): folder or URL prefix joined with ``file_path`` (a local folder,
  ``s3://commoncrawl``, ``gs://...``, ``hf://...`` or ``https://data.commoncrawl.org``).
* ``batch_size`` (default 32): parquet rows per record batch.
* ``http_timeout_s`` (default 60) and ``http_retries`` (default 3): for ``http(s)`` roots only.
* ``max_pdf_bytes`` (default 256 MiB, as ``olmocr_mix.MAX_MEMBER_BYTES``): the largest PDF read from a
  WARC record. A record is a gzip member, so a few MB on disk can inflate to GBs; the payload is read
  only up to the cap, and a larger one is ``pdf_too_large``.

Outcomes per row: pages, or ``RecordError`` (``missing_text``, ``bad_page_ends``,
``unknown_extractor``, ``missing_warc_pointer``, ``warc_unreadable``, ``warc_not_pdf``,
``pdf_too_large``, ``page_count_mismatch`` and the PDF reasons from ``schemas.pdf_pages``), or ``Dropped``
(``no_usable_pages``: every page is a rolmOCR failure marker; ``truncated_pdf``: an
``is_truncated`` row whose Common Crawl payload is not a complete PDF). A file that cannot be
opened or read gives one ``Row(source_id=<file uri>)`` with ``unreadable_parquet``, or
``bad_schema`` when columns are missing or of the wrong type.
"""

from __future__ import annotations

import io as _io
import math
import re
import time
import zlib
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator, Sequence

import pyarrow as pa

from pipelines import io as pio
from pipelines.sources.base import Row, SourcePage, SourceSettings, at_least, load_options, path_under, positive
from pipelines.sources.parquet_rows import stream_rows
from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import ProvenanceStep, params_hash
from schemas.pdf_pages import pdf_page_count

VERSION = "6"  # 2: a file_path outside warc_root is unsafe_path; 3: a PDF over max_pdf_bytes is pdf_too_large;
# 4: languages as BCP 47 tags with ISO 639-1 codes (``eng_Latn`` -> ``en``, ``cmn_Hani`` -> ``zh-Hani``), as the
# other sources write them, not FinePDFs' raw ``<ISO 639-3>_<Script>`` labels (``bcp47_language``); 5: a language
# column that is not strings is bad_schema, and any failure of one row is that row's dead letter (bad_record); 6: a
# row of an oversized row group is its own row_group_too_large letter, a header line without end warc_unreadable

# ISO 639-3 (and 639-2/T) -> ISO 639-1, for every language that has a 639-1 code; the individual languages
# that FinePDFs' GlotLID labels use for a macrolanguage's standard variety map to the macrolanguage's code
# (cmn -> zh, arb -> ar, pes -> fa, swh -> sw, ...), as CLDR's aliases do. No maintained library for this
# (langcodes, pycountry) is a dependency, hence the table.
_ISO639_1 = dict(pair.split(":") for pair in """
aar:aa abk:ab afr:af aka:ak amh:am ara:ar arg:an asm:as ava:av ave:ae aym:ay aze:az bak:ba bam:bm bel:be ben:bn
bis:bi bod:bo bos:bs bre:br bul:bg cat:ca ces:cs cha:ch che:ce chu:cu chv:cv cor:kw cos:co cre:cr cym:cy dan:da
deu:de div:dv dzo:dz ell:el eng:en epo:eo est:et eus:eu ewe:ee fao:fo fas:fa fij:fj fin:fi fra:fr fry:fy ful:ff
gla:gd gle:ga glg:gl glv:gv grn:gn guj:gu hat:ht hau:ha heb:he her:hz hin:hi hmo:ho hrv:hr hun:hu hye:hy ibo:ig
ido:io iii:ii iku:iu ile:ie ina:ia ind:id ipk:ik isl:is ita:it jav:jv jpn:ja kal:kl kan:kn kas:ks kat:ka kau:kr
kaz:kk khm:km kik:ki kin:rw kir:ky kom:kv kon:kg kor:ko kua:kj kur:ku lao:lo lat:la lav:lv lim:li lin:ln lit:lt
ltz:lb lub:lu lug:lg mah:mh mal:ml mar:mr mkd:mk mlg:mg mlt:mt mon:mn mri:mi msa:ms mya:my nau:na nav:nv nbl:nr
nde:nd ndo:ng nep:ne nld:nl nno:nn nob:nb nor:no nya:ny oci:oc oji:oj ori:or orm:om oss:os pan:pa pli:pi pol:pl
por:pt pus:ps que:qu roh:rm ron:ro run:rn rus:ru sag:sg san:sa sin:si slk:sk slv:sl sme:se smo:sm sna:sn snd:sd
som:so sot:st spa:es sqi:sq srd:sc srp:sr ssw:ss sun:su swa:sw swe:sv tah:ty tam:ta tat:tt tel:te tgk:tg tgl:tl
tha:th tir:ti ton:to tsn:tn tso:ts tuk:tk tur:tr twi:tw uig:ug ukr:uk urd:ur uzb:uz ven:ve vie:vi vol:vo wln:wa
wol:wo xho:xh yid:yi yor:yo zha:za zho:zh zul:zu
cmn:zh arb:ar pes:fa swh:sw ekk:et lvs:lv zsm:ms npi:ne ory:or khk:mn uzn:uz azj:az plt:mg gaz:om als:sq ydd:yi
pbt:ps kmr:ku
""".split())
# A language's usual script (ISO 15924), where it is not Latin; a label in that script needs no script subtag.
# Chinese (``-``) has none: Simplified, Traditional and undistinguished Han (Hans, Hant, Hani) are all written
# out, as the IANA registry gives zh no Suppress-Script. Korean: GlotLID writes Hangul (Hang) where CLDR's
# default is Kore (Hangul + Han); both are the default here.
_SCRIPTS = dict(pair.split(":") for pair in """
ab:Cyrl ae:Avst am:Ethi ar:Arab as:Beng av:Cyrl ba:Cyrl be:Cyrl bg:Cyrl bn:Beng bo:Tibt ce:Cyrl cu:Cyrl cv:Cyrl
dv:Thaa dz:Tibt el:Grek fa:Arab gu:Gujr he:Hebr hi:Deva hy:Armn ii:Yiii iu:Cans ja:Jpan ka:Geor kk:Cyrl km:Khmr
kn:Knda ko:Kore ks:Arab kv:Cyrl ky:Cyrl lo:Laoo mk:Cyrl ml:Mlym mn:Cyrl mr:Deva my:Mymr ne:Deva or:Orya os:Cyrl
pa:Guru ps:Arab ru:Cyrl sa:Deva sd:Arab si:Sinh sr:Cyrl ta:Taml te:Telu tg:Cyrl th:Thai ti:Ethi tt:Cyrl ug:Arab
uk:Cyrl ur:Arab yi:Hebr zh:-
yue:Hant ckb:Arab azb:Arab pnb:Arab skr:Arab prs:Arab glk:Arab mzn:Arab bal:Arab sdh:Arab ary:Arab arz:Arab
apc:Arab ajp:Arab acm:Arab aeb:Arab ars:Arab acq:Arab bho:Deva mai:Deva mag:Deva awa:Deva hne:Deva new:Deva
sat:Olck mni:Beng syr:Syrc shn:Mymr sah:Cyrl tyv:Cyrl udm:Cyrl mhr:Cyrl myv:Cyrl mdf:Cyrl bxr:Cyrl xal:Cyrl
krc:Cyrl kbd:Cyrl lez:Cyrl ady:Cyrl alt:Cyrl
""".split())
_DEFAULT_ALSO = {"ko": ("Hang",)}
_GLOT_LABEL = re.compile(r"([a-z]{3})_([A-Z][a-z]{3})")


def bcp47_language(label: str) -> str:
    """A FinePDFs language label (``<ISO 639-3>_<ISO 15924 script>``, GlotLID's) as the BCP 47 tag the other
    sources write: the ISO 639-1 code where the language has one, else the 639-3 code, plus the script as a
    subtag only where it is not the language's usual one (``eng_Latn`` -> ``en``, ``cmn_Hani`` -> ``zh-Hani``,
    ``zho_Hans`` -> ``zh-Hans``, ``srp_Latn`` -> ``sr-Latn``, ``rus_Cyrl`` -> ``ru``, ``ceb_Latn`` -> ``ceb``).
    A language missing from ``_SCRIPTS`` is taken to be written in Latin script by default. Any other label
    (already a tag, ``und``) is returned as it is."""
    m = _GLOT_LABEL.fullmatch(label or "")
    if not m:
        return label
    code = _ISO639_1.get(m.group(1), m.group(1))
    script = m.group(2)
    default = _SCRIPTS.get(code, "Latn")
    return code if script == default or script in _DEFAULT_ALSO.get(code, ()) else f"{code}-{script}"

COLUMNS: tuple[str, ...] = (
    "text", "id", "dump", "url", "date", "file_path", "offset", "token_count", "language",
    "page_average_lid", "page_average_lid_score", "full_doc_lid", "full_doc_lid_score",
    "per_page_languages", "is_truncated", "extractor", "page_ends",
)
EXTRACTORS: tuple[str, ...] = ("docling", "rolmOCR")

# Upstream (finepdfs CoallesceFailedPages) treats a page as failed when either marker occurs in it.
FAILED_PAGE = re.compile(r"<--- failed_to_process_page --->|<--- stop_reason_.*? --->", re.DOTALL)
# PDF readers accept the header anywhere in the first 1 KiB (servers sometimes prepend whitespace).
_PDF_MAGIC = b"%PDF-"
_PDF_MAGIC_WINDOW = 1024
# Reasons from schemas.pdf_pages that, for an is_truncated row, mean "the CC copy is cut short".
_TRUNCATION_REASONS = frozenset({"corrupt_pdf", "zero_page_pdf", "empty_pdf"})
# The default cap on one record's PDF payload: the tarball member cap of olmocr_mix (MAX_MEMBER_BYTES).
DEFAULT_MAX_PDF_BYTES = 256 * 1024 * 1024


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_int_list(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)


def _is_string_list(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_string(t.value_type)


# Columns whose type the reader relies on; the others are passed through as metadata/quality.
_TYPE_CHECKS: dict[str, Callable[[pa.DataType], bool]] = {
    "text": _is_string,
    "id": _is_string,
    "file_path": _is_string,
    "extractor": _is_string,
    "language": _is_string,
    "per_page_languages": _is_string_list,
    "offset": pa.types.is_integer,
    "is_truncated": pa.types.is_boolean,
    "page_ends": _is_int_list,
}


def schema_problem(schema: pa.Schema) -> str | None:
    """Why a parquet schema is not the FinePDFs layout (missing or mistyped columns), or None."""
    missing = [c for c in COLUMNS if c not in schema.names]
    wrong = [
        f"{name} is {schema.field(name).type}"
        for name, check in _TYPE_CHECKS.items()
        if name in schema.names and not check(schema.field(name).type)
    ]
    parts = []
    if missing:
        parts.append(f"missing columns: {', '.join(missing)}")
    if wrong:
        parts.append(f"wrong column types: {'; '.join(wrong)}")
    return "; ".join(parts) or None


def split_pages(text: str, page_ends: Sequence[int] | None, extractor: str) -> list[str]:
    """Cut a FinePDFs ``text`` into its pages using ``page_ends`` (see the module docstring).

    Equal consecutive ends (an empty page) are allowed; decreasing ends, ends past the text, or a
    rolmOCR separator that is not ``"\\n"`` raise ``RecordError("bad_page_ends")``.
    """
    if extractor not in EXTRACTORS:
        raise RecordError("unknown_extractor", f"extractor {extractor!r} not in {EXTRACTORS}")
    if not page_ends:
        raise RecordError("bad_page_ends", f"page_ends is {'null' if page_ends is None else 'empty'}")
    sep = 1 if extractor == "rolmOCR" else 0
    pages: list[str] = []
    prev = 0
    for i, end in enumerate(page_ends):
        if end is None or end < prev:
            raise RecordError(
                "bad_page_ends", f"page_ends[{i}]={end} is not >= the previous end {prev}: {list(page_ends)[:20]}"
            )
        start, stop = prev + i * sep, end + i * sep
        if stop > len(text):
            raise RecordError(
                "bad_page_ends",
                f"page {i} ends at {stop} (page_ends[{i}]={end}, {extractor}) beyond the text length {len(text)}",
            )
        if sep and i > 0 and text[start - 1] != "\n":
            raise RecordError(
                "bad_page_ends",
                f"rolmOCR page {i} is not preceded by a newline separator at {start - 1}",
            )
        pages.append(text[start:stop])
        prev = end
    return pages


def _jsonable(value: Any) -> Any:
    """Plain JSON values for quality/metadata (dates may be timestamps; scores may be NaN)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


class WarcFetcher:
    """Reads the payload of one WARC record by (``file_path``, ``offset``) under a root.

    Local, ``gs://``, ``s3://`` and ``hf://`` WARC files are opened through ``pipelines.io``, the
    ``OPEN_HANDLES`` most recently used kept open until ``close``; ``http(s)`` roots use one
    ``requests`` session and a ranged GET per record, closed as soon as the record is read so the rest
    of the (~1 GB) file is not fetched.
    """

    def __init__(self, root: str, http_timeout_s: float = 60.0, http_retries: int = 3,
                 max_pdf_bytes: int = DEFAULT_MAX_PDF_BYTES):
        self.root = root.rstrip("/") if "://" in root else root
        self.http_timeout_s = http_timeout_s
        self.http_retries = http_retries
        self.max_pdf_bytes = max_pdf_bytes
        self._handles: dict[str, IO[bytes]] = {}  # in order of use, least recent first
        self._failed: dict[str, RecordError] = {}
        self._session: Any = None

    def uri(self, file_path: str) -> str:
        """The WARC file of a row's ``file_path``, which must lie under the root: a relative POSIX path
        without ``..`` (Common Crawl's ``crawl-data/...``), or a URI that starts with the root itself.
        Anything else is ``unsafe_path``: a row is untrusted input, and must not point the reader at
        other files or hosts."""
        if "://" in file_path:
            if "://" in self.root and file_path.startswith(self.root + "/") and ".." not in file_path.split("/"):
                return file_path
            raise RecordError("unsafe_path", f"file_path {file_path!r} is a URI outside warc_root {self.root}")
        return path_under(self.root, file_path, f"warc_root {self.root}")

    def fetch(self, file_path: str, offset: int, row: str | None = None) -> bytes:
        """The HTTP payload (or resource block) of the record; raises ``RecordError`` (``row``: the
        row's id, named in the messages)."""
        where = f"{file_path} at offset {offset}"
        if row is not None:
            where = f"row {row}: {where}"
        uri = self.uri(file_path)
        close: Callable[[], None] | None = None
        deadline = None
        if uri.startswith(("http://", "https://")):
            stream, close = self._http_stream(uri, offset, where)
            deadline = time.monotonic() + self.http_timeout_s  # the whole body, not each read of it
        else:
            stream = self._handle(uri)
            try:
                stream.seek(offset)
            except Exception as exc:  # object-store readers raise their own types
                raise RecordError("warc_unreadable", f"cannot seek {where}: {exc}") from exc
        try:
            return _read_one_record(stream, where, self.max_pdf_bytes, deadline)
        finally:
            if close is not None:
                close()

    def _handle(self, uri: str) -> IO[bytes]:
        """An open handle on ``uri``: the ``OPEN_HANDLES`` most recently used stay open (rows point into
        many WARC files: one handle each exhausted the process's file descriptors, and on object stores
        each holds a read buffer); the last ``FAILED_FILES`` that failed to open are remembered."""
        failed = self._failed.get(uri)
        if failed is not None:
            # A missing WARC file would otherwise be retried for every row that points into it.
            raise RecordError(failed.reason, str(failed))
        cached = self._handles.pop(uri, None)
        if cached is None:
            try:
                cached = pio.open_read(uri)
            except Exception as exc:
                err = RecordError("warc_unreadable", f"cannot open WARC file {uri}: {exc}")
                self._failed[uri] = err
                if len(self._failed) > FAILED_FILES:
                    self._failed.pop(next(iter(self._failed)))
                raise RecordError(err.reason, str(err)) from exc
            if len(self._handles) >= OPEN_HANDLES:
                _close_quietly(self._handles.pop(next(iter(self._handles))))  # the least recently used
        self._handles[uri] = cached  # (re)inserted last: most recently used
        return cached

    def _http_stream(self, uri: str, offset: int, where: str) -> tuple[IO[bytes], Callable[[], None]]:
        import requests

        if self._session is None:
            self._session = requests.Session()
        last = ""
        for attempt in range(self.http_retries + 1):
            if attempt:
                time.sleep(min(30.0, 2.0 ** attempt))
            try:
                resp = self._session.get(
                    uri, headers={"Range": f"bytes={offset}-"}, stream=True, timeout=self.http_timeout_s
                )
            except requests.RequestException as exc:
                last = str(exc)
                continue
            if resp.status_code == 206:
                resp.raw.decode_content = False  # the gzip member must reach warcio untouched
                return resp.raw, resp.close
            resp.close()
            last = f"HTTP {resp.status_code}"
            if resp.status_code not in (429, 500, 502, 503, 504):
                break
        raise RecordError("warc_unreadable", f"ranged GET of {uri} for {where} failed: {last}")

    def close(self) -> None:
        for handle in self._handles.values():
            _close_quietly(handle)
        self._handles.clear()
        self._failed.clear()
        if self._session is not None:
            self._session.close()
            self._session = None


def _close_quietly(handle: IO[bytes]) -> None:
    try:
        handle.close()
    except Exception:  # noqa: BLE001 - a handle that fails to close has nothing more to give
        pass


OPEN_HANDLES = 16  # WARC files a reader keeps open at once
FAILED_FILES = 1024  # WARC files that failed to open, remembered so their rows fail without a retry
_HEADER_BYTES = 1 << 20  # a record's WARC and HTTP headers, on top of its payload cap (real ones: a few KB)


class _RecordStream(_io.RawIOBase):
    """At most ``limit`` bytes of the WARC record at the head of ``stream``: its gzip member inflated as
    it is read (a .warc.gz holds one member per record), or the raw bytes of an uncompressed WARC.

    warcio reads header lines with an unbounded ``readline``, so without a bound on the inflated bytes a
    header line that never ends (1 KB of gzip per MB) filled memory before the payload cap applied."""

    def __init__(self, stream: IO[bytes], limit: int, deadline: float | None = None):
        self._stream, self._left, self._deadline = stream, limit, deadline
        # read1: at most one read of the socket, so the deadline is checked while a server drips (read()
        # of an HTTP body waits for the whole amount)
        self._read = getattr(stream, "read1", stream.read)
        self._pending = stream.read(2)  # compressed input not yet inflated, or raw bytes not yet handed on
        self._inflate = zlib.decompressobj(31) if self._pending == b"\x1f\x8b" else None

    def readable(self) -> bool:
        return True

    def _check_deadline(self) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:  # a server dripping the record
            raise TimeoutError("the record was not read within http_timeout_s")

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self._left)
        if want <= 0:
            return 0
        if self._inflate is None:
            self._check_deadline()
            data, self._pending = self._pending[:want], self._pending[want:]
            data = data or self._read(want)
        else:
            data = b""
            while not data and not self._inflate.eof:
                if not self._pending:
                    self._check_deadline()  # each read: a member may inflate to nothing for as long as it drips
                    self._pending = self._read(1 << 14)  # as warcio reads: 16 KiB of input at a time
                    if not self._pending:
                        break  # a truncated member: warcio judges what there is
                data = self._inflate.decompress(self._pending, want)
                self._pending = self._inflate.unconsumed_tail
        buffer[:len(data)] = data
        self._left -= len(data)
        return len(data)


def _read_one_record(stream: IO[bytes], where: str, max_bytes: int = DEFAULT_MAX_PDF_BYTES,
                     deadline: float | None = None) -> bytes:
    from warcio.archiveiterator import ArchiveIterator

    records = ArchiveIterator(_io.BufferedReader(_RecordStream(stream, max_bytes + _HEADER_BYTES, deadline)))
    try:
        record = next(records, None)
        if record is None:
            raise RecordError("warc_unreadable", f"no WARC record at {where}")
        if record.rec_type not in ("response", "resource"):
            raise RecordError("warc_not_pdf", f"{where} is a {record.rec_type!r} record, not a response")
        payload = pio.read_before(record.content_stream(), max_bytes)  # one byte over: too large
        content_type = (
            record.http_headers.get_header("Content-Type") if record.http_headers else None
        ) or record.rec_headers.get_header("Content-Type")
    except RecordError:
        raise
    except Exception as exc:  # warcio raises many types on garbage bytes
        raise RecordError("warc_unreadable", f"cannot read the WARC record at {where}: {exc}") from exc
    finally:
        records.close()  # does not read (inflate) the rest of the record
    if len(payload) > max_bytes:
        raise RecordError(
            "pdf_too_large",
            f"{where}: the record's payload is larger than max_pdf_bytes={max_bytes}",
        )
    if _PDF_MAGIC not in payload[:_PDF_MAGIC_WINDOW]:
        raise RecordError(
            "warc_not_pdf",
            f"{where}: payload ({content_type or 'no content type'}, {len(payload)} bytes) is not a PDF",
        )
    return payload


class FinePdfsSource:
    """Reads FinePDFs parquet files; see the module docstring for options and outcomes."""

    @dataclass(frozen=True)
    class Options:
        warc_root: str = option(help="folder or URL prefix joined with file_path: a local folder, s3://commoncrawl, "
                                     "gs://..., hf://... or https://data.commoncrawl.org")
        batch_size: int = option(32, help="parquet rows per record batch")
        http_timeout_s: float = option(60.0, help="seconds per WARC request (http(s) roots only)")
        http_retries: int = option(3, help="retries of a failed WARC request (http(s) roots only)")
        max_pdf_bytes: int = option(DEFAULT_MAX_PDF_BYTES, help="largest PDF read from a WARC record, in bytes "
                                                                "(inflated); a larger one is pdf_too_large")

        def __post_init__(self) -> None:
            if not self.warc_root:
                raise ValueError("finepdfs needs options.warc_root")
            at_least(self, batch_size=1, http_retries=0, max_pdf_bytes=1)
            positive(self, "http_timeout_s")

    def __init__(self, settings: SourceSettings):
        self.settings = settings
        options = load_options(self.Options, settings)
        self.warc_root = options.warc_root
        self.batch_size = options.batch_size
        self.http_timeout_s = options.http_timeout_s
        self.http_retries = options.http_retries
        self.max_pdf_bytes = options.max_pdf_bytes
        self._provenance = ProvenanceStep("read:finepdfs", VERSION, params_hash(dict(settings.options or {})))

    def plan(self, uri: str) -> Iterator[str]:
        yield uri

    def read(self, unit: str) -> Iterator[Row]:
        warcs = WarcFetcher(self.warc_root, self.http_timeout_s, self.http_retries, self.max_pdf_bytes)
        try:
            yield from self._read_file(unit, warcs)
        finally:
            warcs.close()

    def _read_file(self, uri: str, warcs: WarcFetcher) -> Iterator[Row]:
        index = 0
        for item in stream_rows(uri, list(COLUMNS), schema_problem, self.batch_size):
            if isinstance(item, Row):
                yield item
                continue
            yield self._row(item, uri, index, warcs)
            index += 1

    def _row(self, record: dict[str, Any], uri: str, index: int, warcs: WarcFetcher) -> Row:
        source_id = f"{uri}#{index}"
        try:
            source_id = record.get("id") or source_id  # a withheld row (row_group_too_large) raises here
            pages = self._pages(record, source_id, warcs)
        except (RecordError, Dropped) as exc:
            return Row(source_id=source_id, error=exc)
        except Exception as exc:  # noqa: BLE001 - a malformed cell must not end the file (the rows after it)
            return Row(source_id=source_id, error=RecordError("bad_record", f"{type(exc).__name__}: {exc}"))
        return Row(source_id=source_id, pages=pages)

    def _pages(self, record: dict[str, Any], source_id: str, warcs: WarcFetcher) -> list[SourcePage]:
        text = record["text"]
        if not text:
            raise RecordError("missing_text", f"row {source_id} has {'null' if text is None else 'empty'} text")
        extractor = record["extractor"]
        texts = split_pages(text, record["page_ends"], extractor)
        failed = [FAILED_PAGE.search(t) is not None for t in texts]
        if all(failed):
            raise Dropped("no_usable_pages")

        file_path, offset = record["file_path"], record["offset"]
        if not file_path or offset is None or offset < 0:
            raise RecordError("missing_warc_pointer", f"row {source_id}: file_path={file_path!r} offset={offset!r}")
        pdf = warcs.fetch(file_path, offset, row=source_id)
        truncated = bool(record["is_truncated"])
        try:
            n_pdf = pdf_page_count(pdf)
        except RecordError as exc:
            if truncated and exc.reason in _TRUNCATION_REASONS:
                raise Dropped("truncated_pdf") from exc
            raise
        if n_pdf != len(texts):
            if truncated:
                raise Dropped("truncated_pdf")
            raise RecordError(
                "page_count_mismatch",
                f"row {source_id}: page_ends gives {len(texts)} pages but the PDF at {file_path} "
                f"offset {offset} has {n_pdf}",
            )

        s = self.settings
        language = bcp47_language(record["language"]) if record["language"] else s.language
        per_page = [bcp47_language(x) if isinstance(x, str) else x for x in record["per_page_languages"] or []]
        metadata = {
            "url": record["url"],
            "dump": record["dump"],
            "date": _jsonable(record["date"]),
            "file_path": file_path,
            "offset": offset,
            "extractor": extractor,
        }
        quality = {
            "token_count": record["token_count"],
            "full_doc_lid": record["full_doc_lid"],
            "full_doc_lid_score": _jsonable(record["full_doc_lid_score"]),
            "page_average_lid": record["page_average_lid"],
            "page_average_lid_score": _jsonable(record["page_average_lid_score"]),
            "is_truncated": truncated,
            "finepdfs_failed_pages": sum(failed),
        }
        pages: list[SourcePage] = []
        for i, (page_text, is_failed) in enumerate(zip(texts, failed)):
            if is_failed:
                continue
            page_metadata = dict(metadata)
            if len(per_page) == len(texts):
                page_metadata["page_language"] = per_page[i]
            pages.append(
                SourcePage(
                    source=s.name,
                    source_id=source_id,
                    page_number=i + 1,
                    payload_kind="pdf",
                    payload=pdf,
                    response=page_text,
                    domain=s.domain,
                    language=language,
                    license=s.license,
                    instruction=s.instruction,
                    task=s.task,
                    response_format="markdown",
                    split=s.split,
                    pdf_page_index=i,
                    quality=dict(quality),
                    metadata=page_metadata,
                    provenance=[self._provenance],
                )
            )
        return pages
