"""Formula crops as the im2latex family publishes them: a text file of formulas and a folder of images.

UniMER (``wanderkid/UniMER_Dataset``: ``UniMER-1M.zip``, ``UniMER-test.zip``) and LaTeX-OCR's own
release (``formulae.zip`` + ``math.txt``) share one layout, read by their loaders
(``unimernet/datasets/datasets/formula.py``, ``pix2tex/dataset/dataset.py``): line ``i`` (0-based,
the file split at ``\\n``) of the label file is the LaTeX of image ``<i>.png`` in the image folder,
the stem read as an integer (so ``0000012.png`` is line 12). UniMER-Test pairs ``cpe.txt`` with
``cpe/`` (also ``hwe``, ``sce``, ``spe``); UniMER-1M ``train.txt`` with ``images/``.

Kind ``formula_lines``: ``paths`` are label files; the work unit is one label file, streamed line by
line. Each line becomes one ``transcribe_formula`` record (``response_format: latex``) whose image is
``<images>/<line index, zero-padded to name_width>.png``. Options: ``images`` (the folder; default:
the label file's stem beside it, as UniMER-Test), ``name_width`` (7, UniMER's
``0000000.png``; 0 for unpadded names). Bad lines are dead letters: ``empty_label`` (a blank line
with an image: its formula is missing), ``missing_image``, ``unsafe_path`` (an image that resolves,
through symlinks, outside the image folder, or that is not a regular file: never read) and
``unreadable_file``; a blank line without an image (the
file's trailing newline) is not a record. Formulas are kept as published here; the
``conventions`` stage normalises them and the ``formula_render`` stage drops those KaTeX cannot
render.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass
from typing import Iterator

from pipelines import io
from pipelines.sources.base import (
    Row,
    SourcePage,
    SourceSettings,
    at_least,
    load_options,
    path_under,
    read_file,
    require_task,
)
from schemas.config import option
from schemas.deadletter import RecordError
from schemas.page import ProvenanceStep, params_hash

VERSION = "4"  # 2: a byte-order mark is not part of the first formula; 3: an image resolving (through
# symlinks) outside the image folder is unsafe_path, never read; 4: an image that is not a regular file (a
# folder, a FIFO) is that line's unsafe_path, and one that cannot be read its unreadable_file (not the file's)


class FormulaLinesSource:
    kind = "formula_lines"

    @dataclass(frozen=True)
    class Options:
        images: str = option("", help="the image folder (a relative path resolves like paths; default: the "
                                      "label file's stem beside it)")
        name_width: int = option(7, help="digits of the zero-padded image names (0: unpadded)")
        image_extension: str = option(".png", help="image file extension")

        def __post_init__(self) -> None:
            at_least(self, name_width=0)

    def __init__(self, settings: SourceSettings):
        require_task(settings, "transcribe_formula")
        self.settings = settings
        self.options = load_options(self.Options, settings)
        self._provenance = ProvenanceStep(f"read:{self.kind}", VERSION, params_hash(dict(settings.options or {})))

    def plan(self, uri: str) -> Iterator[str]:
        yield uri

    def _folder(self, unit: str) -> str:
        path = posixpath if "://" in unit else os.path
        folder, name = path.split(unit)
        return self.options.images or io.join(folder, path.splitext(name)[0])

    def unit_digest(self, unit: str) -> str:
        """The unit's content id for incremental refresh (``pipelines/refresh.py``): the label file and, for
        each of its lines, the image it pairs with (its content id, or ``missing``), so a label file whose
        images were added, replaced or removed is read again."""
        digest = hashlib.sha256(io.content_id(unit).encode())
        folder = self._folder(unit)
        try:
            handle = io.open_read(unit)
        except Exception:  # noqa: BLE001 - the reader reports it
            return digest.hexdigest()
        with handle:
            for index, _ in enumerate(io.iter_lines(handle)):
                try:  # an image leaving the folder is never hashed (the reader dead-letters it)
                    image = path_under(folder, self._image_name(index), "the image folder")
                except RecordError:
                    digest.update(f"{index}:unsafe\n".encode())
                    continue
                digest.update(f"{index}:{io.content_id(image)}\n".encode())
        return digest.hexdigest()

    def _image_name(self, index: int) -> str:
        return f"{index:0{self.options.name_width}d}{self.options.image_extension}"

    def read(self, unit: str) -> Iterator[Row]:
        folder = self._folder(unit)
        label_name = unit.rstrip("/").rsplit("/", 1)[-1]
        try:
            handle = io.open_read(unit)
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable file is one accounted row
            yield Row(source_id=unit, error=RecordError("unreadable_file", f"{unit}: {type(exc).__name__}: {exc}"))
            return
        with handle:
            for index, raw in enumerate(io.iter_lines(handle)):
                name = self._image_name(index)
                source_id = f"{label_name.rsplit('.', 1)[0]}/{name}"
                try:  # a symlink out of the image folder is unsafe_path: never read
                    image = path_under(folder, name, f"the image folder {folder}")
                except RecordError as exc:
                    yield Row(source_id=source_id, error=exc)
                    continue
                try:  # utf-8-sig on the first line: a byte-order mark is not part of the formula
                    text = raw.decode("utf-8-sig" if index == 0 else "utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    yield Row(source_id=source_id, error=RecordError("invalid_utf8", f"{unit}: line {index + 1}"))
                    continue
                present = io.exists(image)
                if not text.strip():
                    if present:
                        yield Row(source_id=source_id, error=RecordError("empty_label", f"{unit}: line {index + 1} "
                                                                                        "is blank"))
                    continue
                if not present:
                    yield Row(source_id=source_id, error=RecordError("missing_image", f"{image} does not exist"))
                    continue
                try:  # a folder or FIFO named 0000001.png: unsafe_path, never opened
                    payload = read_file(image, image)
                except RecordError as exc:
                    yield Row(source_id=source_id, error=exc)
                    continue
                yield Row(source_id=source_id, pages=[self._page(source_id, text.strip(), payload, label_name, index)])

    def _page(self, source_id: str, latex: str, payload: bytes, label_name: str, index: int) -> SourcePage:
        s = self.settings
        return SourcePage(
            source=s.name, source_id=source_id, page_number=1, payload_kind="image", payload=payload,
            response=latex, response_format="latex", domain=s.domain, language=s.language, license=s.license,
            instruction=s.instruction, task=s.task, split=s.split,
            metadata={"label_file": label_name, "line": index + 1}, provenance=[self._provenance],
        )
