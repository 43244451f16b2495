"""JinaOCRSynth as a corpus source: synthetic pages rendered inside the DAG (kind ``jinaocrsynth``).

A synth source has no input files: each ``paths`` entry is a ``synth://<suite>`` URI (``all``,
``layout``, ``formula`` or ``table``) for HTML pages rendered in Chromium, or
``synth://latex-<suite>`` for LaTeX pages rendered by pdflatex; its options say how many pages per
path and which seed:

    options: {pages: 12, seed: 0, pages_per_unit: 4}

Pages are planned exactly as ``python -m synth [--renderer latex]`` plans them (LaTeX pages have ids
``synth-latex-...``), split into units of ``pages_per_unit`` so workers share the rendering, and each
becomes a ``SourcePage`` carrying the PNG, the reference Markdown as the response and the verified
unit tests. A page the renderer rejects (content overflows the page, KaTeX error, pdflatex failure,
timeout) is dropped with that reason. Give HTML and LaTeX paths different seeds (or sources) when
both are read: the same seed plans the same content for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from pipelines.sources.base import Row, SourcePage, SourceSettings, at_least, load_options
from schemas.config import option
from schemas.deadletter import Dropped, RecordError

SCHEME = "synth://"
LATEX_PREFIX = "latex-"


class SynthSource:
    kind = "jinaocrsynth"

    @dataclass(frozen=True)
    class Options:
        pages: int = option(12, help="synthetic pages the source yields (at least 1)")
        seed: int = option(0, help="seed of the page plan (layouts, contents)")
        pages_per_unit: int = option(4, help="pages one worker renders per unit (at least 1)")

        def __post_init__(self) -> None:
            at_least(self, pages=1, pages_per_unit=1)

    def __init__(self, settings: SourceSettings):
        self.settings = settings
        options = load_options(self.Options, settings)
        self.pages = options.pages
        self.seed = options.seed
        self.pages_per_unit = options.pages_per_unit
        self._renderers: dict[str, object] = {}
        self._scratch: str | None = None  # the renderers' folders go here (else the system's temporary folder)

    def scratch(self, folder: str) -> None:
        """Renderers made from now on keep their files (the HTML shell, LaTeX jobs) under ``folder``."""
        self._scratch = folder

    def close(self) -> None:
        """Close the renderers: their browser pages and folders."""
        while self._renderers:
            _, renderer = self._renderers.popitem()
            renderer.close()

    def plan(self, uri: str) -> Iterator[tuple[str, str, int, int]]:
        """Units ``(renderer, suite, first page, end)`` of one ``synth://[latex-]<suite>`` path."""
        from synth.plan import SUITES

        target = uri[len(SCHEME):] if uri.startswith(SCHEME) else None
        renderer = "html"
        if target is not None and target.startswith(LATEX_PREFIX):
            renderer, target = "latex", target[len(LATEX_PREFIX):]
        suite = (target or "all") if target is not None else None
        if suite is None or suite not in ("all", *SUITES):
            raise ValueError(f"source {self.settings.name!r}: synth paths are synth://<suite> or "
                             f"synth://latex-<suite> with suite all|{'|'.join(SUITES)}, got {uri!r}")
        for start in range(0, self.pages, self.pages_per_unit):
            yield renderer, suite, start, min(self.pages, start + self.pages_per_unit)

    def read(self, unit: tuple[str, str, int, int]) -> Iterator[Row]:
        from synth.pages import page_spec, synthesize_page, to_page_record
        from synth.plan import plan

        renderer_name, suite, start, end = unit
        renderer = self._get_renderer(renderer_name)
        for layout, page_suite, page_seed, pid in plan(self.pages, self.seed, suite, renderer=renderer_name)[start:end]:
            try:
                spec = page_spec(layout, page_suite, page_seed, pid)
                page = synthesize_page(spec, renderer)
                page.renderer = renderer_name
                record = to_page_record(page, spec)
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
                elements=list(record.elements),
            )])

    def _get_renderer(self, name: str):
        if name not in self._renderers:
            if name == "latex":
                from synth.render_latex import LatexRenderer

                self._renderers[name] = LatexRenderer(self._scratch)  # one fresh folder per page, in it
            else:
                from synth.render_html import HtmlRenderer

                self._renderers[name] = HtmlRenderer(self._scratch)  # its shell document, in a folder of its own
        return self._renderers[name]
