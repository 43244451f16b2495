"""MMTab (SpursgoZmy/MMTab, Table-LLaVA): table images -> ``transcribe_table`` records with HTML tables.

MMTab ships JSON files beside zips of table images (docs/sources.md lists what is confirmed):

* ``MMTab-eval_test_data_49K.json``: an array of items ``{item_id, image_id, input, output, task_type,
  dataset_name, original_query, answer_list, original_query_type}``; the table-recognition items have
  ``original_query_type`` ``table recognition with HTML`` / ``... Latex`` / ``... Markdown`` and the
  table in ``output``; the image is ``<image_id>.jpg`` in the images folder (``all_test_image/``);
* the LLaVA-format training files (``MMTab-pre_pretrain_data_llava_format_150K.json``,
  ``MMTab-instruct_sft_data_llava_format_232K.json``): arrays of ``{id, image, conversations:
  [{from: human, value}, {from: gpt, value}]}``; ``image`` is a path under the images folder.
  These items carry no query type, so an item is table recognition when its answer holds an HTML
  ``<table>``, a LaTeX ``tabular``/``\\hline`` table or a Markdown pipe table.

The work unit is one JSON (array) or JSONL file, streamed item by item (``iter_json_items``): a JSONL
line that is not JSON is that line's ``bad_item`` (the lines after it are read), an array that breaks is
one ``unreadable_json`` letter for the file after the items before the break. Items
of other tasks (question answering, fact checking, ...) are dropped as ``not_table_recognition``;
the table is normalised to canonical HTML and parse-checked (``table_labels``): a label that does
not parse is dead-lettered (``unparseable_table``), as are ``empty_label``, ``missing_image`` (the
image is not in the folder) and ``bad_item``.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Iterator

from pipelines import io
from pipelines.sources.base import (
    Row,
    SourcePage,
    SourceSettings,
    load_options,
    path_under,
    read_file,
    require_task,
)
from pipelines.sources.table_labels import to_html
from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import ProvenanceStep, params_hash

VERSION = "4"  # 2: an image path not plain or resolving (through symlinks) outside the images folder is unsafe_path;
# 3: JSONL is read line by line, a bad line its own bad_item; an image that is not a regular file is unsafe_path
# 4: a line over max_item_bytes is bad_item, an array item over it unreadable_json (for the rest of the file)
CHUNK = 1 << 20
# The longest JSON Lines line / array item read, in bytes (characters in an array): MMTab's are a few KB. A longer
# line is that line's bad_item (never held whole); a longer array item ends the file (unreadable_json).
MAX_ITEM_BYTES = 64 << 20
_NOT_SPACE = re.compile(r"[^ \t\r\n]")


_JSON_SPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
# A syntax error this close to the end of the buffer may be an item cut at a chunk boundary (a literal, a
# number, an escape): more input is read before it counts; one further back cannot be mended by more input.
_CUT_TOKEN_CHARS = 16


class _Replay:
    """A binary stream that returns ``head`` first, then the rest of ``handle`` (what was read to tell a
    JSON array from JSON Lines is not read twice, and not kept)."""

    def __init__(self, head: bytes, handle):
        self.head, self.handle = head, handle

    def read(self, size: int = -1) -> bytes:
        if self.head:
            data, self.head = self.head, b""
            return data
        return self.handle.read(size)


def iter_json_items(handle, where: str, max_item: int = MAX_ITEM_BYTES) -> Iterator[Any]:
    """The items of a JSON array, or the lines of a JSON Lines file, from a binary stream, one at a time.

    A file whose first character (after whitespace and a UTF-8 byte-order mark) is ``[`` is a JSON array,
    decoded item by item from a rolling buffer (``raw_decode``), so a 300 MB file is never held whole; a
    syntax error raises ``RecordError("unreadable_json")`` naming the offset (the items after it cannot be
    told apart), as soon as more input cannot mend it. Any other file is JSON Lines, read line by line
    (``pipelines.io.iter_lines``): memory holds one line, and a line that is not JSON is yielded as a
    ``RecordError("bad_item")`` naming the line, in the item's place, the next lines read on (they are
    independent). Blank lines are skipped. A line or item over ``max_item`` bytes is not held: a line is
    its ``bad_item``, an array item ends the file (``unreadable_json``, as a syntax error does).
    """
    skipped_chars = skipped_lines = 0
    first = True
    while True:  # the first chunk with something in it (a file of whitespace has no items)
        chunk = handle.read(CHUNK)
        if not chunk:
            return
        if first and chunk.startswith(_BOM):
            chunk, skipped_chars = chunk[len(_BOM):], 1
        first = False
        body = chunk.lstrip(_JSON_SPACE)
        if body:
            break
        skipped_chars += len(chunk)
        skipped_lines += chunk.count(b"\n")
    stream = _Replay(chunk, handle)
    if body.startswith(b"["):
        yield from _array_items(stream, where, skipped_chars, max_item)
    else:
        yield from _json_lines(stream, where, skipped_lines, max_item)


def _json_lines(handle, where: str, skipped_lines: int, max_item: int = MAX_ITEM_BYTES) -> Iterator[Any]:
    """The items of a JSON Lines stream (see ``iter_json_items``); lines numbered from ``skipped_lines`` + 1."""
    from pipelines import io

    for number, raw in enumerate(io.iter_lines(handle, CHUNK, max_item), start=skipped_lines + 1):
        if isinstance(raw, io.LineTooLong):  # skipped, never held whole
            yield RecordError("bad_item", f"{where}: line {number} has {raw.size} bytes, over "
                                          f"max_item_bytes={max_item}")
            continue
        if not raw.strip(_JSON_SPACE):
            continue
        try:
            yield json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            yield RecordError("bad_item", f"{where}: line {number} is not UTF-8 (at byte {exc.start})")
        except json.JSONDecodeError as exc:
            yield RecordError("bad_item", f"{where}: line {number} is not JSON: {exc.msg} at column {exc.colno}")
        except RecursionError:
            yield RecordError("bad_item", f"{where}: line {number} is nested too deeply")


def _array_items(handle, where: str, offset: int, max_item: int = MAX_ITEM_BYTES) -> Iterator[Any]:
    """The items of a JSON array stream (see ``iter_json_items``); ``offset``: characters before the stream.

    Linear in the stream's length: the buffer is read from a position (not sliced per item), and an item
    cut at the buffer's end is decoded again only once the buffer holds twice as much of it (each retry
    at least doubles what is decoded). An item over ``max_item`` characters is not buffered further: one
    ``unreadable_json`` for the rest of the file (its end, and so the next items, cannot be told without it).
    """
    decoder = json.JSONDecoder()
    reader = codecs.getincrementaldecoder("utf-8")()
    buffer, pos, eof = "", 0, False  # buffer[pos:] is unread; offset counts the characters before buffer[pos]
    pending: list[str] = []  # read after buffer, not joined to it yet
    pending_chars = 0

    def join() -> None:
        """``pending`` appended to the unread part of ``buffer`` (the read part dropped): once per decode
        attempt, not once per chunk."""
        nonlocal buffer, pos, pending_chars
        if pending:
            buffer, pos = buffer[pos:] + "".join(pending), 0
            pending.clear()
            pending_chars = 0

    def fill(joined: bool = True) -> bool:
        """Read one chunk (False at the end); ``joined``: into ``buffer`` now, else left in ``pending``."""
        nonlocal eof, pending_chars
        if eof:
            join()
            return False
        chunk = handle.read(CHUNK)
        try:
            text = reader.decode(chunk, final=not chunk)
        except UnicodeDecodeError:
            raise RecordError("unreadable_json", f"{where}: not UTF-8 after offset "
                                                 f"{offset + len(buffer) - pos + pending_chars}") from None
        eof = not chunk
        if text:
            pending.append(text)
            pending_chars += len(text)
        if joined or eof:
            join()
        return bool(chunk)

    def skip_space() -> None:
        nonlocal pos, offset
        while True:
            found = _NOT_SPACE.search(buffer, pos)
            start, pos = pos, found.start() if found else len(buffer)
            offset += pos - start
            if found or not fill():
                return

    skip_space()
    pos, offset = pos + 1, offset + 1  # the "[" iter_json_items saw
    first = True
    while True:
        skip_space()
        if pos >= len(buffer):
            raise RecordError("unreadable_json", f"{where}: the array is not closed (offset {offset})")
        if buffer[pos] == "]":
            return
        if not first:
            if buffer[pos] != ",":
                raise RecordError("unreadable_json", f"{where}: expected ',' at offset {offset}")
            pos, offset = pos + 1, offset + 1
            skip_space()
        tried = 0  # characters of the item the last failed decode saw
        while True:
            have = len(buffer) - pos + pending_chars
            if tried and have < 2 * tried and not eof:  # not enough new input to be worth decoding again
                if have > max_item:
                    raise _too_large(where, offset, max_item)
                fill(joined=False)
                continue
            join()
            try:
                item, end = decoder.raw_decode(buffer, pos)
                # a number or literal cut at the chunk's end would decode short: make sure more cannot follow
                if end == len(buffer) and not eof and fill():
                    tried = 0
                    continue
                break
            except RecursionError:
                raise RecordError("unreadable_json", f"{where}: an item nested too deeply at offset {offset}"
                                  ) from None
            except json.JSONDecodeError as exc:
                # only an item cut at the buffer's end can be mended by reading on: an error further back
                # is reported now, not after the rest of the file is buffered
                cut = exc.pos >= len(buffer) - _CUT_TOKEN_CHARS or exc.msg.startswith("Unterminated string")
                if cut and len(buffer) - pos > max_item:
                    raise _too_large(where, offset, max_item) from None
                at = offset + exc.pos - pos  # before fill() moves the buffer
                if not cut or not fill():
                    raise RecordError("unreadable_json", f"{where}: {exc.msg} at offset {at}") from None
                tried = max(have, 1)
        if end - pos > max_item:
            raise _too_large(where, offset, max_item)
        yield item
        offset, pos, first = offset + end - pos, end, False


def _too_large(where: str, offset: int, max_item: int) -> RecordError:
    return RecordError("unreadable_json", f"{where}: the item at offset {offset} is over max_item_bytes={max_item} "
                                          "characters; the items after it cannot be told apart")


_FORMAT = re.compile(r"table recognition with (html|latex|markdown)", re.IGNORECASE)


def label_format(answer: str) -> str | None:
    """html, latex or markdown: the table notation ``answer`` uses, or None when it holds no table."""
    if "<table" in answer.lower():
        return "html"
    if "\\begin{tabular" in answer or "\\hline" in answer:
        return "latex"
    lines = [line for line in answer.splitlines() if line.count("|") >= 2]
    return "markdown" if len(lines) >= 2 else None


class MmtabSource:
    """Kind ``mmtab``: MMTab JSON/JSONL files; ``images`` names the folder of the unzipped table images."""

    kind = "mmtab"

    @dataclass(frozen=True)
    class Options:
        images: str = option("", help="folder of the unzipped images (default: the JSON file's folder)")
        image_extension: str = option(".jpg", help="appended to image_id (eval-format items)")

    def __init__(self, settings: SourceSettings):
        require_task(settings, "transcribe_table")
        self.settings = settings
        self.options = load_options(self.Options, settings)
        self._provenance = ProvenanceStep(f"read:{self.kind}", VERSION, params_hash(dict(settings.options or {})))

    def plan(self, uri: str) -> Iterator[str]:
        yield uri

    def unit_digest(self, unit: str) -> str:
        """The unit's content id for incremental refresh (``pipelines/refresh.py``): the JSON file and the
        content id of every image its items name (``missing`` when absent), so a file whose images were
        added, replaced or removed is read again."""
        digest = hashlib.sha256(io.content_id(unit).encode())
        images = self._images(unit)
        try:
            with io.open_read(unit) as handle:
                for item in iter_json_items(handle, unit):
                    image = self._image_of(item) if isinstance(item, dict) else None
                    if isinstance(image, str) and image:
                        try:  # an image leaving the folder is never hashed (the reader dead-letters it)
                            uri = path_under(images, image, "the images folder")
                        except RecordError:
                            digest.update(f"{image}:unsafe\n".encode())
                            continue
                        digest.update(f"{image}:{io.content_id(uri)}\n".encode())
        except (RecordError, OSError):  # the reader reports it; what was seen is hashed
            pass
        return digest.hexdigest()

    def _images(self, unit: str) -> str:
        return self.options.images or (posixpath.dirname(unit) if "://" in unit else os.path.dirname(unit))

    def _image_of(self, item: dict[str, Any]) -> Any:
        """The image an item names, relative to the images folder (LLaVA ``image``, or the eval format's
        ``image_id`` + extension); not checked here."""
        if "conversations" in item:
            return item.get("image")
        return f"{item['image_id']}{self.options.image_extension}" if item.get("image_id") else None

    def read(self, unit: str) -> Iterator[Row]:
        images = self._images(unit)
        index = 0
        try:
            with io.open_read(unit) as handle:
                for item in iter_json_items(handle, unit):
                    yield self._row(unit, index, item, images)
                    index += 1
        except RecordError as exc:  # the array breaks after `index` items: the rest cannot be enumerated
            yield Row(source_id=unit, error=exc)
        except OSError as exc:
            yield Row(source_id=unit, error=RecordError("unreadable_file", f"{unit}: {exc}"))

    def _row(self, unit: str, index: int, item: Any, images: str) -> Row:
        fallback = f"{unit.rstrip('/').rsplit('/', 1)[-1]}#{index}"
        if isinstance(item, RecordError):  # a JSON Lines line that is not JSON (iter_json_items)
            return Row(source_id=fallback, error=item)
        if not isinstance(item, dict):
            return Row(source_id=fallback, error=RecordError("bad_item", f"item {index} is not an object"))
        source_id = str(item.get("item_id") or item.get("id") or fallback)
        try:
            return Row(source_id=source_id, pages=[self._page(source_id, item, images)])
        except (RecordError, Dropped) as exc:
            return Row(source_id=source_id, error=exc)
        except Exception as exc:  # noqa: BLE001 - a malformed item must not end the file
            return Row(source_id=source_id, error=RecordError("bad_item", f"{type(exc).__name__}: {exc}"))

    def _page(self, source_id: str, item: dict[str, Any], images: str) -> SourcePage:
        if "conversations" in item:  # LLaVA format
            answers = [t.get("value") for t in item.get("conversations") or []
                       if isinstance(t, dict) and t.get("from") == "gpt"]
            answer = answers[-1] if answers else None
            if not isinstance(answer, str) or not answer.strip():
                raise RecordError("empty_label", "no gpt answer")
            fmt = label_format(answer)
            image = self._image_of(item)
            query_type = None
        else:  # the eval format
            query_type = str(item.get("original_query_type") or "")
            match = _FORMAT.search(query_type)
            answer = item.get("output")
            fmt = match.group(1).lower() if match else None
            image = self._image_of(item)
            if fmt and (not isinstance(answer, str) or not answer.strip()):
                raise RecordError("empty_label", "output is empty")
        if fmt is None:
            raise Dropped("not_table_recognition")
        html = to_html(answer, fmt)
        if not isinstance(image, str) or not image:
            raise RecordError("missing_image", f"image {image!r} is not a relative path")
        uri = path_under(images, image, f"the images folder {images}")  # unsafe_path: not plain, or leaves it
        if not io.exists(uri):
            raise RecordError("missing_image", f"{uri} does not exist")
        s = self.settings
        return SourcePage(
            source=s.name, source_id=source_id, page_number=1, payload_kind="image", payload=read_file(uri, uri),
            response=html, response_format="html", domain=s.domain, language=s.language, license=s.license,
            instruction=s.instruction, task=s.task, split=s.split,
            quality={"label_format": fmt},
            metadata={k: v for k, v in {"image": image, "query_type": query_type,
                                        "dataset_name": item.get("dataset_name")}.items() if v},
            provenance=[self._provenance],
        )
