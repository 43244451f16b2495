"""What every corpus reader produces: ``SourcePage`` drafts, accounted per input row.

A source turns configured input URIs into *units* (a parquet file, a parquet file joined with one
PDF tarball, a folder) and reads each unit into ``Row`` results, one per input record. A row carries
either the pages it yielded (a FinePDFs document yields several) or the reason it was dropped or
dead-lettered, so the manifest accounts for every input record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

from schemas.deadletter import Dropped, RecordError
from schemas.page import ProvenanceStep


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


@dataclass
class Row:
    """The outcome of reading one input record (or one unreadable input file)."""

    source_id: str
    pages: list[SourcePage] = field(default_factory=list)
    error: Dropped | RecordError | None = None


@dataclass(frozen=True)
class SourceSettings:
    """Per-source settings common to every reader (from the ``sources:`` list of the config)."""

    name: str
    kind: str
    paths: tuple[str, ...]
    instruction: str
    domain: str
    license: str
    language: str = "und"
    task: str = "parse_page"
    split: str = "train"
    options: dict[str, Any] = field(default_factory=dict)


class Source(Protocol):
    """A corpus reader. ``plan`` and ``read`` run on workers; both must stream."""

    settings: SourceSettings

    def plan(self, uri: str) -> Iterator[Any]:
        """Split one matched input URI into independently readable units."""

    def read(self, unit: Any) -> Iterator[Row]:
        """Read one unit; yield one ``Row`` per input record, never raise for bad records."""
