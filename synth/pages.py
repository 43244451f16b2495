"""One synthetic page end to end: spec -> rendered PNG + HTML + reference Markdown + unit tests,
and its ``PageRecord`` (source ``jinaocrsynth``).

The reference Markdown and the tests come from ``synth.reference.reference_markdown`` and
``synth.tests_from_blocks.tests_for_page``, imported lazily. Specs come from
``synth.content.make_page_spec``; until that module exists, ``page_spec`` falls back to
``demo_spec`` (a small built-in generator) and the reference to ``_fallback_reference`` (no tests).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipelines.instruct import default_instruction
from schemas.page import PageRecord, ProvenanceStep, page_id, params_hash
from schemas.unit_tests import UnitTest, test_to_json
from synth.blocks import (
    Figure,
    Footnote,
    Formula,
    Furniture,
    Heading,
    ListBlock,
    PageSpec,
    Paragraph,
    PlacedBlock,
    Table,
)

SOURCE = "jinaocrsynth"
VERSION = "1"


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
    fallback: bool = False  # reference/tests from the built-in fallback, not synth.reference


def pdf_name(spec: PageSpec) -> str:
    """The olmOCR-Bench ``pdf`` field: ``<id>.pdf`` (candidates are ``<id>_pg1_repeat<K>.md``)."""
    return f"{spec.id}.pdf"


def _fallback_reference(spec: PageSpec) -> str:
    parts: list[str] = []
    for pb in spec.blocks:
        b = pb.block
        if isinstance(b, Heading):
            parts.append("#" * b.level + " " + b.text)
        elif isinstance(b, Paragraph):
            parts.append(b.text)
        elif isinstance(b, Formula):
            parts.append(f"\\[{b.latex}\\]" if b.display else f"\\({b.latex}\\)")
        elif isinstance(b, ListBlock):
            parts.append("\n".join((f"{i}. " if b.ordered else "- ") + t for i, t in enumerate(b.items, 1)))
        elif isinstance(b, Table):
            from synth.tables import table_html
            parts.append(table_html(b))
        elif isinstance(b, Figure):
            if b.caption:
                parts.append(b.caption)
        elif isinstance(b, Footnote):
            parts.append(f"{b.marker} {b.text}")
    return "\n\n".join(parts) + "\n"


def synthesize_page(spec: PageSpec, renderer: Renderer) -> SynthPage:
    """Render ``spec`` and derive its reference and tests (raises ``RecordError`` on a rejected page)."""
    rendered = renderer.render(spec)
    try:
        from synth.reference import reference_markdown
        from synth.tests_from_blocks import tests_for_page
    except ModuleNotFoundError as exc:
        if exc.name not in ("synth.reference", "synth.tests_from_blocks"):
            raise
        return SynthPage(spec.id, rendered.png, rendered.html, _fallback_reference(spec), [], {},
                         rendered.width, rendered.height, fallback=True)
    reference = reference_markdown(spec)
    kept, dropped = tests_for_page(spec, reference, pdf_name(spec), page=1)
    return SynthPage(spec.id, rendered.png, rendered.html, reference, list(kept), dict(dropped),
                     rendered.width, rendered.height)


def to_page_record(page: SynthPage, spec: PageSpec) -> PageRecord:
    """The corpus row for a synthetic page (``parse_page`` with its reference as the response)."""
    params = {"layout": spec.layout, "suite": spec.suite, "seed": spec.seed, "columns": spec.columns,
              "size": [spec.width_px, spec.height_px], "renderer": page.renderer}
    return PageRecord(
        id=page_id(SOURCE, spec.id, 1),
        source=SOURCE,
        source_id=spec.id,
        page_number=1,
        domain=f"synthetic-{spec.suite}",
        language=spec.language,
        license=spec.license,
        image=page.png,
        image_sha256=hashlib.sha256(page.png).hexdigest(),
        width=page.width or spec.width_px,
        height=page.height or spec.height_px,
        task="parse_page",
        instruction=default_instruction("parse_page", spec.language),
        response=page.reference,
        response_format="markdown",
        unit_tests=[test_to_json(t) for t in page.tests],
        quality={"synth": {"tests_kept": len(page.tests), "tests_dropped": sum(page.dropped.values()),
                           "fallback_reference": page.fallback}},
        provenance=[ProvenanceStep(stage=f"synth:{page.renderer}", version=VERSION, params_hash=params_hash(params))],
        split="train",
        text_layer=None,
        metadata={"layout": spec.layout, "suite": spec.suite, "seed": spec.seed, "sources": list(spec.sources)},
    )


# --- specs -----------------------------------------------------------------------------------

_WORDS = ["annual", "revenue", "growth", "remained", "steady", "across", "regional", "markets", "while", "operating", "costs", "declined", "the", "committee", "reviewed", "the", "proposal", "and", "approved", "funding", "for", "the", "second", "phase", "of", "the", "programme", "measurements", "were", "taken", "at", "three", "sites", "during", "the", "spring", "season", "and", "compared", "with", "earlier", "surveys", "results", "indicate", "a", "consistent", "relationship", "between", "sample", "size", "and", "estimated", "variance", "in", "each", "group", "residents", "attended", "the", "public", "meeting", "to", "discuss", "the", "new", "transit", "plan", "and", "its", "expected", "schedule"]
_TITLES = ("Quarterly Operations Review", "Methods and Results", "Regional Transit Update", "Project Summary",
           "Survey of Field Measurements", "Budget Overview", "Notes on Estimation", "Community Report")
_SIZES = {"slides": (1280, 720), "infographic": (1024, 1536)}
_COLUMNS = {"paper": 2, "newspaper": 3, "infographic": 2}


def _sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng, rng.randint(9, 16)) for _ in range(sentences))


def demo_spec(layout: str, suite: str, seed: int, id: str) -> PageSpec:
    """A small seeded page for ``layout``/``suite`` (stand-in until ``synth.content`` exists)."""
    from synth.formulas import generate_formula
    from synth.tables import generate_table

    rng = random.Random(f"{layout}/{suite}/{seed}")
    width, height = _SIZES.get(layout, (1024, 1325))
    ncols = _COLUMNS.get(layout, 1)
    slides = layout == "slides"
    blocks: list[PlacedBlock] = [PlacedBlock(Heading(rng.choice(_TITLES), 1 if not slides else 2), 0)]
    budget = {1: 9, 2: 8, 3: 9}[ncols] if not slides else 3
    for c in range(ncols):
        for k in range(budget if c else budget - 1):
            r = rng.random()
            if suite == "formula" and r < 0.35:
                blk: Any = generate_formula(rng)
            elif suite == "table" and r < 0.3 and k % 3 == 0:
                blk = generate_table(rng, max_cols=3 if ncols > 1 else 6)
            elif slides:
                blk = ListBlock(tuple(_sentence(rng, rng.randint(4, 7)) for _ in range(3)))
            elif r < 0.12:
                blk = Heading(rng.choice(_TITLES), 2)
            elif r < 0.18 and ncols < 3:
                blk = Figure(f"Figure {k + 1}: {_sentence(rng, 6)}", rng.choice(("chart", "placeholder")))
            elif r < 0.24:
                blk = ListBlock(tuple(_sentence(rng, rng.randint(4, 8)) for _ in range(3)), rng.random() < 0.5)
            else:
                blk = Paragraph(_paragraph(rng, rng.randint(1, 3 if ncols > 1 else 4)))
            blocks.append(PlacedBlock(blk, c))
    return PageSpec(
        id=id, layout=layout, suite=suite, columns=ncols, width_px=width, height_px=height,
        furniture=Furniture(header=rng.choice(_TITLES), footer=f"Issue {rng.randint(1, 40)} · 2024",
                            page_number=str(rng.randint(2, 60))),
        blocks=tuple(blocks), seed=seed, sources=("procedural",),
    )


def page_spec(layout: str, suite: str, seed: int, id: str) -> PageSpec:
    """``synth.content.make_page_spec`` when present, else ``demo_spec``."""
    try:
        from synth.content import make_page_spec
    except ModuleNotFoundError as exc:
        if exc.name != "synth.content":
            raise
        return demo_spec(layout, suite, seed, id)
    return make_page_spec(layout, suite, seed, id)
