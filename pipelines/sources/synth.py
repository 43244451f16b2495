"""JinaOCRSynth as a corpus source: synthetic pages rendered inside the DAG (kind ``jinaocrsynth``).

A synth source has no input files: its ``paths`` entry is a ``synth://<suite>`` URI (``all``,
``layout``, ``formula`` or ``table``) and its options say how many pages and which seed:

    options: {pages: 12, seed: 0, pages_per_unit: 4}

Pages are planned exactly as ``python -m synth`` plans them, split into units of
``pages_per_unit`` so workers share the rendering, and each becomes a ``SourcePage`` carrying
the PNG, the reference Markdown as the response and the verified unit tests. A page the renderer
rejects (content overflows the page, KaTeX error, timeout) is dropped with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from pipelines.sources.base import Row, SourcePage, SourceSettings, load_options
from schemas.config import option
from schemas.deadletter import Dropped, RecordError

SCHEME = "synth://"


class SynthSource:
    kind = "jinaocrsynth"

    @dataclass(frozen=True)
    class Options:
        pages: int = option(12, help="synthetic pages the source yields")
        seed: int = option(0, help="seed of the page plan (layouts, contents)")
        pages_per_unit: int = option(4, help="pages one worker renders per unit (at least 1)")

    def __init__(self, settings: SourceSettings):
        self.settings = settings
        options = load_options(self.Options, settings)
        self.pages = options.pages
        self.seed = options.seed
        self.pages_per_unit = max(1, options.pages_per_unit)
        self._renderer = None

    def plan(self, uri: str) -> Iterator[tuple[str, int, int]]:
        if not uri.startswith(SCHEME):
            raise ValueError(f"source {self.settings.name!r}: synth paths are synth://<suite>, got {uri!r}")
        suite = uri[len(SCHEME):] or "all"
        for start in range(0, self.pages, self.pages_per_unit):
            yield suite, start, min(self.pages, start + self.pages_per_unit)

    def read(self, unit: tuple[str, int, int]) -> Iterator[Row]:
        from synth.pages import page_spec, synthesize_page, to_page_record
        from synth.plan import plan

        suite, start, end = unit
        renderer = self._get_renderer()
        for layout, page_suite, page_seed, pid in plan(self.pages, self.seed, suite)[start:end]:
            try:
                spec = page_spec(layout, page_suite, page_seed, pid)
                record = to_page_record(synthesize_page(spec, renderer), spec)
            except RecordError as exc:
                # a rejected synthetic page is a synthesis decision, not bad input
                yield Row(source_id=pid, error=Dropped(exc.reason))
                continue
            yield Row(source_id=pid, pages=[SourcePage(
                source=self.settings.name,
                source_id=pid,
                page_number=1,
                payload_kind="image",
                payload=record.image,
                response=record.response,
                domain=record.domain,
                language=record.language,
                license=record.license,
                instruction=self.settings.instruction,
                task=self.settings.task,
                response_format="markdown",
                split=self.settings.split,
                quality=record.quality,
                metadata=record.metadata,
                provenance=list(record.provenance),
                unit_tests=list(record.unit_tests),
            )])

    def _get_renderer(self):
        if self._renderer is None:
            from synth.render_html import HtmlRenderer

            self._renderer = HtmlRenderer()  # pages are written to its own temporary folder
        return self._renderer
