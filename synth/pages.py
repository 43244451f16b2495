"""One synthetic page end to end: spec -> rendered PNG + HTML + reference Markdown + unit tests,
and its ``PageRecord`` (source ``jinaocrsynth``).

The reference Markdown and the tests come from ``synth.reference.reference_markdown`` and
``synth.tests_from_blocks.unit_tests_for_page``; specs from ``synth.content.make_page_spec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from schemas.layout import Element
from schemas.page import PageRecord, ProvenanceStep, image_sha256, page_id, params_hash
from schemas.prompts import default_instruction
from schemas.unit_tests import UnitTest, unit_test_to_json
from synth.blocks import Figure, PageSpec
from synth.content import make_page_spec, sources_shown, without_optional
from synth.fields import page_fields
from synth.geometry import rendered_elements
from synth.reference import reading_order, reference_markdown
from synth.tests_from_blocks import unit_tests_for_page

SOURCE = "jinaocrsynth"
VERSION = "3"  # 2: a form shows each field label once; 3: order tests pair sentences of different blocks only


class Renderer(Protocol):
    def render(self, spec: PageSpec) -> Any: ...  # returns an object with png, html, width, height


@dataclass
class SynthPage:
    id: str
    png: bytes
    html: str
    reference: str
    tests: list[UnitTest]
    dropped: dict[str, int] = field(default_factory=dict)  # candidate tests dropped, by reason
    width: int = 0
    height: int = 0
    renderer: str = "html"
    spec: PageSpec | None = None  # the blocks on the page (after filling and trimming)
    elements: list[Element] = field(default_factory=list)  # geometry in reading order (synth.geometry)


def pdf_name(spec: PageSpec) -> str:
    """The olmOCR-Bench ``pdf`` field: ``<id>.pdf`` (candidates are ``<id>_pg1_repeat<K>.md``)."""
    return f"{spec.id}.pdf"


def synthesize_page(spec: PageSpec, renderer: Renderer) -> SynthPage:
    """Render ``spec`` and derive its reference and tests (raises ``RecordError`` on a rejected page).

    A renderer that fills pages (``fills_pages``, the HTML one) gets the spec with its optional
    filler and returns the spec of what it kept (``RenderedPage.spec``); any other gets the spec
    without it. The reference and the tests come from the blocks actually on the page."""
    if not getattr(renderer, "fills_pages", False):
        spec = without_optional(spec)
    rendered = renderer.render(spec)
    shown = getattr(rendered, "spec", None) or spec
    shown = replace(shown, sources=sources_shown(shown))
    order = reading_order(shown)  # once per page: the reference and the tests both walk it
    reference = reference_markdown(shown, order)
    kept, dropped = unit_tests_for_page(shown, reference, pdf_name(shown), page=1, order=order)
    elements = rendered_elements(shown, getattr(rendered, "geometry", None), rendered.width, rendered.height)
    return SynthPage(spec.id, rendered.png, rendered.html, reference, list(kept), dict(dropped),
                     rendered.width, rendered.height, spec=shown, elements=elements)


def to_page_record(page: SynthPage, spec: PageSpec) -> PageRecord:
    """The corpus row for a synthetic page (``parse_page`` with its reference as the response)."""
    params = {"layout": spec.layout, "suite": spec.suite, "seed": spec.seed, "columns": spec.columns,
              **({"language": spec.language} if spec.language != "en" else {}),
              "size": [spec.width_px, spec.height_px], "renderer": page.renderer,
              **({"theme": spec.theme.as_dict()} if spec.theme is not None else {})}
    return PageRecord(
        id=page_id(SOURCE, spec.id, 1),
        source=SOURCE,
        source_id=spec.id,
        page_number=1,
        domain=f"synthetic-{spec.suite}",
        language=spec.language,
        license=spec.license,
        image=page.png,
        image_sha256=image_sha256(page.png),
        width=page.width or spec.width_px,
        height=page.height or spec.height_px,
        task="parse_page",
        instruction=default_instruction("parse_page", spec.language),
        response=page.reference,
        response_format="markdown",
        unit_tests=[unit_test_to_json(t) for t in page.tests],
        quality={"synth": {"tests_kept": len(page.tests), "tests_dropped": sum(page.dropped.values()),
                           }},
        provenance=[ProvenanceStep(stage=f"synth:{page.renderer}", version=VERSION, params_hash=params_hash(params))],
        split="train",
        text_layer=None,
        elements=list(page.elements),
        metadata={"layout": spec.layout, "suite": spec.suite, "seed": spec.seed,
                  **({"fields": fields} if (fields := page_fields(page.spec or spec)) else {}),
                  **({"charts": charts} if (charts := page_charts(page.spec or spec)) else {}),
                  "sources": list((page.spec or spec).sources), "renderer": page.renderer,
                  **({"theme": spec.theme.as_dict()} if spec.theme is not None else {})},
    )


def page_charts(spec: PageSpec) -> list[dict[str, object]]:
    """The charts a page shows, in block order: kind, palette name and colours (``Chart.as_dict``)."""
    return [pb.block.chart.as_dict() for pb in spec.blocks if isinstance(pb.block, Figure) and pb.block.chart]


# --- specs -----------------------------------------------------------------------------------


def page_spec(layout: str, suite: str, seed: int, id: str, language: str = "en") -> PageSpec:
    """The page a (layout, suite, seed, language) names: ``synth.content.make_page_spec``."""
    return make_page_spec(layout, suite, seed, id, language=language)
