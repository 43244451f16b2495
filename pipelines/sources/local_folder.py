"""Reader for a folder of PDFs and page images, optionally labelled by sidecar text files.

``plan(folder)`` yields one ``FolderFile`` unit per ``.pdf .png .jpg .jpeg .tif .tiff .webp`` file
under the folder (recursive, sorted, hidden files and folders skipped; symlinked folders are not
descended). ``parts(folder)`` lists a local folder's files so that each is planned on its own
(``plan(part)``: the same units), on any worker. ``read(unit)`` yields one ``Row`` per file: a PDF
gives one page per PDF page (or a ``corrupt_pdf`` / ``encrypted_pdf`` / ``zero_page_pdf`` error), an
image one page. The folder may be local or any URI ``pipelines.io`` understands (``gs://``, ``s3://``,
``hf://``).

A local PDF of more than ``pages_per_unit`` pages is planned as page ranges of that many pages,
one unit each (the plan counts its pages): a runner hands units to workers, so a 100-page document
no longer keeps one worker busy while the others wait. The first range's row counts the file; the
later ranges' rows (``Row.continues``) add pages only, and when the file cannot be read they yield
nothing, since the first range reports the same failure. Remote folders are planned per file.

Labels: ``<stem>.md`` (response_format ``markdown``) or else ``<stem>.txt`` (``text``) next to the
file. For a PDF the label holds one part per page separated by form feeds (``\\f``); one trailing
form feed (as ``pdftotext`` writes) is allowed. A part count that differs from the page count is a
``label_page_mismatch`` error; a label that is not UTF-8 is ``invalid_utf8``. Files without a label
get response ``""`` and ``quality["unlabelled"] = True`` (or are dropped as ``unlabelled`` with
option ``require_labels: true``).

``source_id`` is the file's path relative to the folder, POSIX style. A file (or label) that is a
symlink resolving outside the folder is refused with ``unsafe_path``; so is a local one that is not a
regular file (a FIFO, socket or device named ``page.pdf``: opening a FIFO would block the run forever).
Such a file is still planned (one unit, nothing opened) and its row is dead-lettered; a sidecar label
that is not a regular file fails its file's row the same way.

Options: ``require_labels`` (bool, default false), ``pages_per_unit`` (int, default 8; 0: one unit
per file).
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

from pipelines import io
from pipelines.sources.base import (
    Row,
    SourcePage,
    SourceSettings,
    at_least,
    load_options,
    path_under,
    read_file,
)
from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import ProvenanceStep, params_hash
from schemas.pdf_pages import pdf_page_count

VERSION = "2"  # 2: a file or sidecar label that is not a regular file (a FIFO) is unsafe_path, never opened
PDF_EXTENSIONS = (".pdf",)
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")
LABEL_EXTENSIONS = ((".md", "markdown"), (".txt", "text"))


class FolderFile(NamedTuple):
    """A unit: the folder as configured, one file's POSIX path relative to it and, for a PDF, the
    0-based range of pages to read (``end`` None: to the last page)."""

    root: str
    rel: str
    start: int = 0
    end: int | None = None


def _is_local(uri: str) -> bool:
    return "://" not in uri


def _wanted(name: str) -> bool:
    return name.lower().endswith(PDF_EXTENSIONS + IMAGE_EXTENSIONS) and not name.startswith(".")


def _walk_local(root: str) -> Iterator[str]:
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel_folder = os.path.relpath(folder, root)
        for name in filenames:
            if _wanted(name):
                rel = name if rel_folder == "." else os.path.join(rel_folder, name)
                yield rel.replace(os.sep, "/")


class LocalFolderSource:
    """See the module docstring."""

    @dataclass(frozen=True)
    class Options:
        require_labels: bool = option(False, help="drop files without a .md or .txt label (reason unlabelled)")
        pages_per_unit: int = option(8, help="plan a local PDF with more pages as page ranges of this many pages, "
                                             "one unit each, so long documents spread over workers; 0: one unit "
                                             "per file")

        def __post_init__(self) -> None:
            at_least(self, pages_per_unit=0)

    def __init__(self, settings: SourceSettings):
        self.settings = settings
        options = load_options(self.Options, settings)
        self.require_labels, self.pages_per_unit = options.require_labels, options.pages_per_unit
        self._provenance = ProvenanceStep(f"read:{settings.kind}", VERSION, params_hash(dict(settings.options or {})))

    # -- Source protocol ---------------------------------------------------------------------

    def parts(self, uri: str) -> Iterator[str | FolderFile]:
        """A local folder's files, each a whole-file ``FolderFile`` that ``plan`` cuts into its units (the
        corpus DAG plans them on all its workers: planning reads and counts every PDF); any other folder
        as itself, listed by one ``plan`` call."""
        root = uri.rstrip("/") or uri
        if not _is_local(root):
            yield uri
            return
        for rel in sorted(_walk_local(root)):
            yield FolderFile(root, rel)

    def plan(self, uri: str | FolderFile) -> Iterator[FolderFile]:
        if isinstance(uri, FolderFile):  # one file of a local folder (``parts``)
            yield from self._ranges(uri.root, uri.rel)
            return
        root = uri.rstrip("/") or uri
        if _is_local(root):  # listed once, by parts
            for part in self.parts(root):
                yield from self._ranges(part.root, part.rel)
            return
        prefix = root + "/"
        rels = (m[len(prefix):] for m in io.match(io.join(root, "**")) if m.startswith(prefix))
        rels = (r for r in rels if _wanted(posixpath.basename(r)) and not any(p.startswith(".") for p in r.split("/")))
        for rel in sorted(rels):
            yield from self._ranges(root, rel)

    def read(self, unit: FolderFile) -> Iterator[Row]:
        root, rel, start, end = unit
        try:
            yield Row(source_id=rel, pages=self._pages(root, rel, start, end), continues=start > 0)
        except (RecordError, Dropped) as exc:
            if start == 0:  # a later range of the same file fails the same way: the first one reports it
                yield Row(source_id=rel, error=exc)

    # -- internals ---------------------------------------------------------------------------

    def _ranges(self, root: str, rel: str) -> Iterator[FolderFile]:
        """The file's units: page ranges for a long local PDF, else the whole file."""
        n = self.pages_per_unit
        if n <= 0 or not _is_local(root) or not rel.lower().endswith(PDF_EXTENSIONS):
            yield FolderFile(root, rel)
            return
        try:
            pages = pdf_page_count(self._read(root, rel))
        except RecordError:  # read reports it
            pages = 0
        if pages <= n:
            yield FolderFile(root, rel)
            return
        for start in range(0, pages, n):
            yield FolderFile(root, rel, start, start + n if start + n < pages else None)

    def _path(self, root: str, rel: str) -> str:
        """The file's URI, refusing anything that resolves outside ``root``."""
        return path_under(root, rel, "the folder")

    def _read(self, root: str, rel: str) -> bytes:
        return read_file(self._path(root, rel), rel)  # a FIFO named page.pdf: unsafe_path, never opened

    def _label(self, root: str, rel: str) -> tuple[str, str, str] | None:
        """``(label rel path, text, response_format)`` of the file's sidecar, if it has one."""
        stem = posixpath.splitext(rel)[0]
        for ext, response_format in LABEL_EXTENSIONS:
            label_rel = stem + ext
            path = io.join(root, *label_rel.split("/"))
            # a local sidecar that is not a regular file (a FIFO) is read, so _read refuses it: a label
            # must not be ignored silently; a folder of that name is not a label
            if not ((os.path.exists(path) and not os.path.isdir(path)) if _is_local(root) else io.exists(path)):
                continue
            data = self._read(root, label_rel)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError("invalid_utf8", f"label {label_rel} is not valid UTF-8: {exc}") from exc
            return label_rel, text.lstrip("\ufeff").replace("\r\n", "\n"), response_format
        return None

    def _pages(self, root: str, rel: str, start: int = 0, end: int | None = None) -> list[SourcePage]:
        data = self._read(root, rel)
        is_pdf = rel.lower().endswith(PDF_EXTENSIONS)
        n_pages = pdf_page_count(data) if is_pdf else 1
        label = self._label(root, rel)
        metadata: dict[str, Any] = {"path": rel}
        if label is None:
            if self.require_labels:
                raise Dropped("unlabelled")
            texts, response_format, quality = [""] * n_pages, "markdown", {"unlabelled": True}
        else:
            label_rel, text, response_format = label
            parts = text.split("\f")
            if len(parts) == n_pages + 1 and not parts[-1].strip():
                parts.pop()
            if len(parts) != n_pages:
                raise RecordError(
                    "label_page_mismatch",
                    f"{label_rel} has {len(parts)} form-feed separated parts but {rel} has {n_pages} page(s)",
                )
            texts, quality = [p.strip() for p in parts], {}
            metadata["label_path"] = label_rel
        s = self.settings
        return [
            SourcePage(
                source=s.name,
                source_id=rel,
                page_number=i + 1,
                payload_kind="pdf" if is_pdf else "image",
                payload=data,
                pdf_page_index=i if is_pdf else 0,
                response=texts[i],
                response_format=response_format,
                domain=s.domain,
                language=s.language,
                license=s.license,
                instruction=s.instruction,
                task=s.task,
                split=s.split,
                quality=dict(quality),
                metadata=dict(metadata),
                provenance=[self._provenance],
            )
            for i in range(start, n_pages if end is None else min(end, n_pages))
        ]
