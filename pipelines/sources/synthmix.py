"""olmOCR-synthmix (allenai/olmOCR-synthmix-1025): synthetic pages with olmOCR-Bench tests, as published.

Layout (``olmocr/synth/mine_html_templates.py`` writes it; docs/sources.md lists what is confirmed):

* ``bench_data/<name>.jsonl``: one olmOCR-Bench test per line; ``pdf`` is ``<name>/<pdf_id>_page<k>.pdf``
  and ``page`` 1 (the rendered PDFs have one page);
* ``training/<name>/<pdf_id>_page<k>.pdf`` and ``.md`` (olmOCR front matter + the reference Markdown);
* ``bench_data/claude_original/<name>/<pdf_id>_page<k>_pg1_repeat1.md``: the same reference, the
  form olmOCR's GRPO trainer reads; ``bench_data/pdfs/<name>/``: the same PDFs.

The work unit is one ``bench_data/<name>.jsonl`` file, streamed line by line; its tests are grouped by
``(pdf, page)`` in file order (the generator writes a page's tests together). Each group becomes one
``parse_page`` record: the PDF page, its reference Markdown (front matter removed, its language and
rotation used) and, as ``unit_tests``, the tests that pass on that reference under the project's one
checker (``schemas.unit_tests``). Counters under ``quality["read"]["counters"]`` reach the manifest:
``tests_kept``, ``tests_failed_reference`` (dropped: they fail on their own reference) and
``tests_invalid`` (lines that are not valid tests, or repeat an earlier line's id). A page whose tests
come back after another page's is dead-lettered as ``split_test_group`` rather than silently emitted twice.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from typing import Iterator, Literal

from pipelines import io
from pipelines.sources.base import Row, SourcePage, SourceSettings, load_options, path_under, read_file
from pipelines.sources.olmocr_mix import parse_front_matter
from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import ProvenanceStep, params_hash
from schemas.unit_tests import UnitTest, check_all, unit_test_from_dict, unit_test_to_json

VERSION = "4"  # 2: a PDF or reference resolving (through symlinks) outside the dataset root is unsafe_path;
# 3: a PDF or reference that is not a regular file (a folder, a FIFO) is its page's unsafe_path, and any other
# failure of one page its bad_record, never the whole file's letter; 4: a repeated test id is invalid


class OlmOcrSynthmixSource:
    """Kind ``olmocr_synthmix``: ``paths`` are ``bench_data/*.jsonl`` files of a synthmix copy."""

    kind = "olmocr_synthmix"

    @dataclass(frozen=True)
    class Options:
        root: str = option("", help="the dataset root (default: the folder above bench_data/)")
        reference: Literal["training", "claude_original"] = option(
            "training", help="where the reference Markdown is read: training/<pdf stem>.md or "
                             "bench_data/claude_original/<pdf stem>_pg1_repeat1.md")
        pdf_folder: str = option("training", help="folder under root holding <name>/<pdf> (training or "
                                                  "bench_data/pdfs)")

    def __init__(self, settings: SourceSettings):
        self.settings = settings
        self.options = load_options(self.Options, settings)
        self._provenance = ProvenanceStep(f"read:{self.kind}", VERSION, params_hash(dict(settings.options or {})))

    def plan(self, uri: str) -> Iterator[str]:
        yield uri

    def _root(self, jsonl: str) -> str:
        if self.options.root:
            return self.options.root
        path = posixpath if "://" in jsonl else os.path
        return path.dirname(path.dirname(jsonl))

    def read(self, unit: str) -> Iterator[Row]:
        try:
            handle = io.open_read(unit)
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable file is one accounted row
            yield Row(source_id=unit, error=RecordError("unreadable_file", f"{unit}: {type(exc).__name__}: {exc}"))
            return
        root = self._root(unit)
        seen: set[tuple[str, int]] = set()
        key: tuple[str, int] | None = None
        group: list[UnitTest] = []
        ids: set[str] = set()  # a repeated id is invalid, as olmOCR's load_tests and schemas.unit_tests.read_tests say
        invalid = 0
        with handle:
            for number, raw in enumerate(io.iter_lines(handle), start=1):
                if not raw.strip():
                    continue
                where = f"{unit}:{number}"
                try:
                    data = json.loads(raw.decode("utf-8"))
                    test = unit_test_from_dict(data, where)
                except (UnicodeDecodeError, json.JSONDecodeError, ValueError):
                    invalid += 1
                    continue
                if test.id in ids:
                    invalid += 1
                    continue
                ids.add(test.id)
                this = (test.pdf, test.page)
                if this != key:
                    if key is not None:
                        yield self._group(root, key, group, invalid, seen)
                        invalid = 0
                    key, group = this, []
                group.append(test)
        if key is not None:
            yield self._group(root, key, group, invalid, seen)
        elif invalid:
            yield Row(source_id=unit, error=RecordError("no_valid_tests", f"{unit}: {invalid} lines, none a test"))

    def _group(self, root: str, key: tuple[str, int], tests: list[UnitTest], invalid: int,
               seen: set[tuple[str, int]]) -> Row:
        pdf, page = key
        source_id = pdf.removesuffix(".pdf") + (f"/p{page}" if page != 1 else "")
        if key in seen:
            return Row(source_id=source_id, error=RecordError(
                "split_test_group", f"{source_id}: tests resume after another page's; the group is not contiguous"))
        seen.add(key)
        try:
            return Row(source_id=source_id, pages=[self._page(root, pdf, page, source_id, tests, invalid)])
        except (RecordError, Dropped) as exc:
            return Row(source_id=source_id, error=exc)
        except Exception as exc:  # noqa: BLE001 - one bad page must not end the file (the pages after it)
            return Row(source_id=source_id, error=RecordError("bad_record", f"{source_id}: {type(exc).__name__}: "
                                                                            f"{exc}"))

    def _page(self, root: str, pdf: str, page: int, source_id: str, tests: list[UnitTest],
              invalid: int) -> SourcePage:
        # the test's pdf names both files: each must be a plain relative path that stays, through symlinks,
        # under the dataset root (claude_original/ and bench_data/pdfs/ link into training/, inside it)
        where = f"the dataset root {root}"
        if not pdf or pdf.startswith("/") or ".." in pdf.split("/"):
            raise RecordError("unsafe_path", f"{source_id}: test pdf {pdf!r} leaves the dataset")
        stem = pdf.removesuffix(".pdf")
        if self.options.reference == "training":
            md = path_under(root, f"training/{stem}.md", where)
        else:
            md = path_under(root, f"bench_data/claude_original/{stem}_pg{page}_repeat1.md", where)
        pdf_uri = path_under(root, f"{self.options.pdf_folder.strip('/')}/{pdf}", where)
        if not io.exists(md):
            raise RecordError("missing_reference", f"{source_id}: {md} does not exist")
        if not io.exists(pdf_uri):
            raise RecordError("missing_pdf", f"{source_id}: {pdf_uri} does not exist")
        try:
            text = read_file(md, md).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError("invalid_utf8", f"{md}: not UTF-8 at byte {exc.start}") from None
        fields, body = parse_front_matter(text, md)
        if not body.strip():
            raise Dropped("empty_reference")
        results = check_all(tests, body)
        kept = [unit_test_to_json(t) for t, passed, _ in results if passed]
        counters = {"tests_kept": len(kept), "tests_failed_reference": len(results) - len(kept),
                    "tests_invalid": invalid}
        s = self.settings
        return SourcePage(
            source=s.name, source_id=source_id, page_number=page, payload_kind="pdf",
            payload=read_file(pdf_uri, pdf_uri), pdf_page_index=page - 1, response=body, domain=s.domain,
            language=fields["primary_language"] or s.language, license=s.license, instruction=s.instruction,
            task=s.task, split=s.split, rotation=fields["rotation_correction"],
            quality={"olmocr": fields, "read": {"counters": counters}},
            metadata={"pdf": pdf, "subset": pdf.split("/", 1)[0], "reference": md.removeprefix(root).lstrip("/")},
            provenance=[self._provenance], unit_tests=kept,
        )
