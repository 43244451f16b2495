"""What every corpus reader produces: ``SourcePage`` drafts, accounted per input row.

A source turns configured input URIs into *units* (a parquet file, a parquet file joined with one
PDF tarball, a folder) and reads each unit into ``Row`` results, one per input record. A row carries
either the pages it yielded (a FinePDFs document yields several) or the reason it was dropped or
dead-lettered, so the manifest accounts for every input record.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator, Protocol, TypeVar

from schemas.config import load, option
from schemas.deadletter import Dropped, RecordError
from schemas.page import ProvenanceStep
from schemas.prompts import default_instruction

T = TypeVar("T")


@dataclass
class SourcePage:
    """A page before rendering: the PDF or image payload plus everything the record will carry.

    ``pdf_page_index`` is 0-based into ``payload`` when ``payload_kind == "pdf"``; ``rotation`` is
    the clockwise correction in degrees that makes the page upright.
    """

    source: str
    source_id: str
    page_number: int
    payload_kind: str  # "pdf" | "image"
    payload: bytes
    response: str
    domain: str
    language: str
    license: str
    instruction: str
    task: str = "parse_page"
    response_format: str = "markdown"
    split: str = "train"
    pdf_page_index: int = 0
    rotation: int = 0
    quality: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    provenance: list[ProvenanceStep] = field(default_factory=list)
    unit_tests: list[str] = field(default_factory=list)  # olmOCR-Bench JSON lines (synthetic pages)
    elements: list = field(default_factory=list)  # schemas.layout.Element boxes in payload pixels, reading order


@dataclass
class Row:
    """The outcome of reading one input record (or one unreadable input file).

    ``continues``: more pages of a record an earlier row already counted (a long PDF read as page
    ranges, one unit each, so its pages spread over workers); only its pages are counted.
    """

    source_id: str
    pages: list[SourcePage] = field(default_factory=list)
    error: Dropped | RecordError | None = None
    continues: bool = False


def unit_label(unit: Any, limit: int = 300) -> str:
    """A unit as a dead letter names it: its repr (a reader's dataclass or tuple of paths), capped."""
    text = repr(unit)
    return text if len(text) <= limit else f"{text[:limit]}..."


@dataclass(frozen=True)
class PlanFailure:
    """A unit standing for an input (or the rest of one) whose planning raised: read as one dead letter
    naming the input (``pipelines.transforms.plan_units``), so one bad file does not stop the run."""

    uri: str
    reason: str
    message: str

    @classmethod
    def of(cls, what: Any, exc: BaseException) -> PlanFailure:
        """The failure to plan ``what`` (an input URI, or a part of one such as a folder's file)."""
        uri = what if isinstance(what, str) else \
            posixpath.join(what.root, what.rel) if hasattr(what, "root") and hasattr(what, "rel") else unit_label(what)
        if isinstance(exc, RecordError):
            return cls(uri, exc.reason, str(exc)[:1000])
        return cls(uri, "unplannable_input", f"{uri}: planning failed: {type(exc).__name__}: {str(exc)[:1000]}")

    def row(self) -> Row:
        return Row(source_id=self.uri, error=RecordError(self.reason, self.message))


@dataclass(frozen=True)
class SourceSettings:
    """Per-source settings common to every reader (from the ``sources:`` list of the config).

    ``options`` stays the user's mapping (paths resolved), as provenance hashes it; each reader
    loads it into its kind's ``Options`` dataclass (``pipelines.sources.source_options_type``).
    """

    name: str = option(help="the source's name in records, manifests and provenance (unique in a run)")
    kind: str = option(help="the reader (pipelines.sources.SOURCE_KINDS)")
    paths: tuple[str, ...] = option(help="input URIs or globs (local, gs://, s3://, hf://; synth://[latex-]<suite>)")
    instruction: str = option("", help="the prompt every record carries (default: the task's prompt in "
                                       "instruction_language, schemas/prompts.py)")
    domain: str = option("documents", help="the records' domain (documents, books, historical-newspaper, ...)")
    license: str = option("unknown", help="the records' license (an SPDX-style id, or unknown)")
    language: str = option("und", help="the records' language when the input does not say")
    task: str = option("parse_page", help="the records' task (parse_page, transcribe_table, ...)")
    split: str = option("train", help="the records' split when the input does not say")
    instruction_language: str = option("en", help="language of the default instruction (en or zh)")
    options: dict[str, Any] = option({}, help="the kind's options (its reader's Options dataclass)")

    def __post_init__(self) -> None:
        if not self.instruction:
            object.__setattr__(self, "instruction", default_instruction(self.task, self.instruction_language))


def require_task(settings: SourceSettings, task: str) -> None:
    """A reader whose records have one task refuses an entry that names another (a config error, before any work)."""
    if settings.task != task:
        raise ValueError(f"source {settings.name!r}: kind {settings.kind} makes {task!r} records; set task: {task}")


def at_least(options: Any, **minimums: float) -> None:
    """An ``Options.__post_init__`` range check: a ValueError naming the first option below its minimum, so a
    value no record could be read with fails at start-up (``load`` prefixes the options' path:
    ``sources[0].options: batch_size must be >= 1, got 0``) instead of dead-lettering every record."""
    for name, low in minimums.items():
        value = getattr(options, name)
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value!r}")


def positive(options: Any, *names: str) -> None:
    """``at_least``'s check for a float that must be above 0 (a timeout)."""
    for name in names:
        value = getattr(options, name)
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")


def load_options(options_type: type[T], settings: SourceSettings) -> T:
    """``settings.options`` loaded into the reader's ``Options`` (errors name ``sources[<name>].options``)."""
    return load(options_type, settings.options, f"sources[{settings.name}].options")


class Source(Protocol):
    """A corpus reader. ``plan`` and ``read`` run on workers; both must stream. ``Options`` is the frozen
    dataclass of the kind's ``options:`` keys."""

    Options: ClassVar[type]
    settings: SourceSettings

    def plan(self, uri: str) -> Iterator[Any]:
        """Split one matched input URI (or one of its ``parts``) into independently readable units."""

    # Optional: ``parts(uri) -> Iterator[Any]``, the pieces of one input that ``plan`` takes one by one
    # (a local folder's files). The corpus DAG spreads them over its workers before planning, so one big
    # input is not planned by one worker while the others wait (``pipelines.transforms.input_parts``).
    # Optional: ``scratch(folder)``, a local folder inside the run (removed when the run ends) for the files
    # the source writes while it reads (a renderer's documents); the corpus DAG hands it over before the
    # first ``read`` when the run's output is local. Optional: ``close()``, what the source holds released.

    def read(self, unit: Any) -> Iterator[Row]:
        """Read one unit; yield one ``Row`` per input record, never raise for bad records."""


def input_bases(paths: Iterable[str]) -> list[str]:
    """The folders a source's ``paths`` start from (the part before any wildcard). Patterns starting
    from different folders share one base, the folders' common parent, so that names relative to it
    stay apart (``a/*.parquet`` and ``b/*.parquet`` holding one file name each)."""
    bases = []
    for pattern in paths:
        head = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        bases.append((head if head.endswith("/") or "*" not in pattern else posixpath.dirname(head)).rstrip("/"))
    if len(set(bases)) > 1:
        parts = [b.split("/") for b in bases]
        common = []
        for segments in zip(*parts):
            if len(set(segments)) > 1:
                break
            common.append(segments[0])
        parent = "/".join(common)
        if parent == "" and all(b.startswith("/") for b in bases):
            return ["/"]  # local folders apart from the top (/data/a, /srv/b): names keep their whole path
        # a URI keeps its scheme and host ("s3:", "", "bucket"); "s3:/" alone is no folder
        return [parent if parent and not parent.endswith(":/") and not parent.endswith(":") else ""]
    return bases


def relative_to_inputs(uri: str, bases: list[str]) -> str:
    """``uri`` relative to the first of ``bases`` holding it, local or on a store (a location-free name:
    two subset folders' ``train-00000-of-00001.parquet`` stay apart, and an input tree moved or copied
    to a bucket keeps its names); else a relative or object-store URI as it is, a local path relative to
    the first base, or its file name."""
    for base in bases:
        if base == "/" and uri.startswith("/"):
            return uri[1:]
        if base and (uri == base or uri.startswith(base + "/")):
            return uri[len(base) + 1:] if uri != base else "."
    if "://" in uri or not os.path.isabs(uri):
        return uri
    return posixpath.relpath(uri, bases[0]) if bases and os.path.isabs(bases[0]) else os.path.basename(uri)


def path_under(root: str, rel: str, what: str) -> str:
    """``root`` joined with ``rel``, an untrusted relative POSIX path read from the input (a sidecar name,
    a row's file path): ``RecordError("unsafe_path")`` for an absolute path, an empty, ``.`` or ``..``
    segment or a NUL, and, under a local root, for a path that resolves (through symlinks) outside it.
    ``what`` names the root in the message."""
    from pipelines import io

    parts = rel.split("/")
    if rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise RecordError("unsafe_path", f"{rel!r} is not a plain relative path inside {what}")
    if root.startswith(("http://", "https://")):
        return f"{root.rstrip('/')}/{rel}"
    path = io.join(root, *parts)
    if "://" not in root:
        real_root, real = os.path.realpath(root), os.path.realpath(path)
        if os.path.commonpath([real_root, real]) != real_root:
            raise RecordError("unsafe_path", f"{rel!r} resolves outside {what} (to {real})")
    return path


def read_file(uri: str, name: str) -> bytes:
    """The bytes of one input file a record names (an image, a PDF, a label), as a record's error when it
    cannot be read: ``RecordError("unsafe_path")`` for a local path that is not a regular file (a folder, a
    FIFO named ``page.png``: never opened, ``pipelines.io.NotARegularFile``), ``unreadable_file`` for any
    other ``OSError``. ``name`` names the file in the message. The reader dead-letters only that record."""
    from pipelines import io

    try:
        return io.read_bytes(uri)
    except io.NotARegularFile as exc:
        raise RecordError("unsafe_path", f"{name} is not a regular file (a {exc.kind}): not read") from None
    except OSError as exc:
        raise RecordError("unreadable_file", f"{name}: {exc}") from None
