"""Filling JinaOCRSynth pages (issue 23): specs carry optional filler past what a page holds, the HTML
renderer keeps what fits in real Chromium (trimming, moving to the next column, shrinking a
figure) and returns the spec of what it shows; the reference and the tests come from that spec.
Also the density minimums of the formula and table suites, and determinism."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from schemas.browser import new_offline_page, shared_browser
from schemas.deadletter import RecordError
from schemas.unit_tests import unit_test_to_json
from synth.blocks import Figure, Formula, Furniture, Heading, PageSpec, Paragraph, PlacedBlock, Table
from synth.content import make_page_spec, without_optional
from synth.formulas import CATEGORIES as FORMULA_CATEGORIES
from synth.pages import page_spec, synthesize_page
from synth.reference import reading_order, reference_markdown
from synth.render_html import FILL_JS, HtmlRenderer, katex_dist, render_html
from synth.tables import CATEGORIES as TABLE_CATEGORIES

LONG = "The committee reviewed the proposal and approved funding for the next phase of the survey work. " * 5


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory):
    with HtmlRenderer(tmp_path_factory.mktemp("fill")) as r:
        yield r


def _spec(blocks: list[tuple[object, bool]], id: str) -> PageSpec:
    return PageSpec(id=id, layout="report", suite="layout", width_px=640, height_px=820,
                    furniture=Furniture(header="Fill test", page_number="2"),
                    blocks=tuple(PlacedBlock(b, 0, opt) for b, opt in blocks))


# -- specs (no browser) ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["report", "paper", "slides"])
def test_specs_carry_suite_structure_and_optional_filler(layout: str) -> None:
    formula = make_page_spec(layout, "formula", 5)
    shown = [pb.block for pb in formula.blocks]
    assert {b.category for b in shown if isinstance(b, Formula)} == set(FORMULA_CATEGORIES)
    inline = sum(b.text.count("\\(") for b in shown if isinstance(b, Paragraph))
    assert inline >= 2 and sum(isinstance(b, Formula) for b in shown) + inline >= 8
    assert any(pb.optional for pb in formula.blocks) and not all(pb.optional for pb in formula.blocks)
    table = make_page_spec(layout, "table", 5)
    tables = [pb.block for pb in table.blocks if isinstance(pb.block, Table)]
    assert len({t.category for t in tables}) >= 2
    assert not table.blocks[0].optional  # the title
    bare = without_optional(table)
    assert not any(pb.optional for pb in bare.blocks) and len(bare.blocks) < len(table.blocks)
    assert len(make_page_spec(layout, "layout", 5, fill=False).blocks) < len(make_page_spec(layout, "layout", 5).blocks)


def test_footnote_markers_sit_in_required_paragraphs() -> None:
    for layout in ("report", "newspaper", "form", "paper"):
        spec = make_page_spec(layout, "layout", 2)
        notes = [pb.block.marker for pb in spec.blocks if pb.block.__class__.__name__ == "Footnote"]
        for marker in notes:
            holder = [pb for pb in spec.blocks if isinstance(pb.block, Paragraph) and f"[^{marker}]" in pb.block.text]
            assert holder and not any(pb.optional for pb in holder)


# -- filling in Chromium ----------------------------------------------------------------------------

@pytest.mark.parametrize(("layout", "suite", "seed"), [("report", "layout", 1), ("paper", "formula", 2),
                                                       ("newspaper", "table", 3), ("slides", "table", 4)])
def test_page_is_filled_from_what_fits(renderer: HtmlRenderer, layout: str, suite: str, seed: int) -> None:
    spec = page_spec(layout, suite, seed, f"fill-{layout}-{suite}")
    page = synthesize_page(spec, renderer)
    shown = page.spec
    assert shown is not None and shown is not spec
    assert not any(pb.optional for pb in shown.blocks)
    assert len(shown.blocks) < len(spec.blocks)  # trimmed, not rejected
    offered = [pb.block for pb in spec.blocks]
    for pb in shown.blocks:  # every block on the page came from the spec (a figure maybe narrower)
        b = pb.block
        assert b in offered or (isinstance(b, Figure) and b.width_pct < 100)
    assert renderer._page is not None
    assert renderer._page.evaluate(FILL_JS) >= 0.8  # the text area is used (benchmarks/synth.py: median)
    # The reference and every test come from the blocks on the page, and pass on it.
    assert page.reference == reference_markdown(shown)
    assert page.html == render_html(shown)
    assert page.tests and all(t.check(page.reference)[0] for t in page.tests)
    assert shown.sources and set(shown.sources) <= set(spec.sources)  # provenance of what is shown
    # Drawing the spec of what the page shows gives the same page, with nothing left to trim.
    again = renderer.render(shown)
    assert again.spec is None and again.png == page.png


@pytest.mark.parametrize("layout", ["report", "slides", "newspaper"])
def test_density_minimums(renderer: HtmlRenderer, layout: str) -> None:
    # Slides are the tight case: one 16:9 column held three formulas or one table (issue 23's sample).
    formula = synthesize_page(page_spec(layout, "formula", 8, f"dense-formula-{layout}"), renderer)
    math = [t for t in formula.tests if t.type == "math"]
    assert len(math) >= 8
    blocks = reading_order(formula.spec)
    assert {b.category for b in blocks if isinstance(b, Formula)} == set(FORMULA_CATEGORIES)
    assert any("\\(" in b.text for b in blocks if isinstance(b, Paragraph))  # inline ones too
    slide = synthesize_page(page_spec("slides", "table", 8 + len(layout), f"dense-table-slide-{layout}"), renderer)
    tables = [b for b in reading_order(slide.spec) if isinstance(b, Table)]
    assert len(tables) >= 2 or max(t.cell_count for t in tables) >= 30
    if layout != "report":
        return
    cats: set[str] = set()
    for layout, seed in (("report", 9), ("invoice", 10), ("blog", 11)):
        table = synthesize_page(page_spec(layout, "table", seed, f"dense-table-{layout}"), renderer)
        tables = [b for b in reading_order(table.spec) if isinstance(b, Table)]
        assert len(tables) >= 2 or max(t.cell_count for t in tables) >= 30
        assert sum(t.type == "table" for t in table.tests) >= 12
        cats |= {t.category for t in tables}
    assert cats == set(TABLE_CATEGORIES)
    layout = synthesize_page(page_spec("blog", "layout", 12, "dense-layout"), renderer)
    assert any(isinstance(b, (Table, Formula)) for b in reading_order(layout.spec))
    assert {"order", "present"} <= {t.type for t in layout.tests}


def test_optional_blocks_are_trimmed_required_overflow_is_rejected(renderer: HtmlRenderer) -> None:
    spec = _spec([(Heading("Results", 1), False)] + [(Paragraph(LONG), True) for _ in range(12)], "t-trim")
    rendered = renderer.render(spec)
    assert rendered.spec is not None
    kept = [pb.block for pb in rendered.spec.blocks]
    assert kept[0] == Heading("Results", 1) and 2 <= len(kept) < 13
    assert renderer._page.evaluate(FILL_JS) >= 0.75  # big equal blocks: up to one of them left over
    required = _spec([(Paragraph(LONG), False) for _ in range(12)], "t-required")
    with pytest.raises(RecordError) as err:
        renderer.render(required)
    assert err.value.reason == "synth_overflow"


def test_required_block_evicts_filler_and_trailing_heading_goes(renderer: HtmlRenderer) -> None:
    spec = _spec([(Paragraph(LONG), True) for _ in range(12)] + [(Heading("Aside", 2), True),
                                                                   (Paragraph("The last word."), False)],
                 "t-evict")
    rendered = renderer.render(spec)
    assert rendered.spec is not None
    kept = [pb.block for pb in rendered.spec.blocks]
    assert kept[-1] == Paragraph("The last word.")  # required, so filler made room for it
    assert Heading("Aside", 2) not in kept  # an optional heading would have ended a column


def test_figure_shrinks_to_fit(renderer: HtmlRenderer) -> None:
    figure = Figure(caption="Figure 1: Sites by year.", kind="placeholder")
    spec = _spec([(Paragraph(LONG), False) for _ in range(3)] + [(figure, True)], "t-shrink")
    rendered = renderer.render(spec)
    assert rendered.spec is not None
    kept = [pb.block for pb in rendered.spec.blocks]
    shrunk = [b for b in kept if isinstance(b, Figure)]
    assert len(shrunk) == 1 and 40 <= shrunk[0].width_pct < 100
    assert f"width: {shrunk[0].width_pct}%" in rendered.html
    assert renderer.render(rendered.spec).png == rendered.png


def test_same_seed_same_bytes_on_a_fresh_renderer(renderer: HtmlRenderer, tmp_path) -> None:
    spec = page_spec("paper", "formula", 21, "det-paper")
    warm = synthesize_page(spec, renderer)  # a renderer that has drawn other pages already
    with HtmlRenderer(tmp_path) as fresh:
        cold = synthesize_page(page_spec("paper", "formula", 21, "det-paper"), fresh)
    assert cold.png == warm.png and cold.html == warm.html and cold.reference == warm.reference
    assert [unit_test_to_json(t) for t in cold.tests] == [unit_test_to_json(t) for t in warm.tests]


def test_saved_html_of_a_filled_page_is_that_page(renderer: HtmlRenderer, tmp_path) -> None:
    """The saved HTML (the kept blocks only), loaded on its own, passes its checks and looks like the PNG."""
    spec = page_spec("newspaper", "formula", 6, "fill-standalone")
    rendered = renderer.render(spec)
    assert rendered.spec is not None
    path = tmp_path / "page.html"
    path.write_text(rendered.html, encoding="utf-8")
    size = (spec.width_px, spec.height_px)
    page = new_offline_page(shared_browser(), [katex_dist(), tmp_path], viewport=size)
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("window.pmReport !== null", timeout=15_000)
        report = page.evaluate("window.pmReport")
        assert report["errors"] == [] and report["nproblems"] == 0 and report["flow"] is None, report
        shot = page.screenshot(clip={"x": 0, "y": 0, "width": size[0], "height": size[1]}, type="png")
    finally:
        page.context.close()
    standalone = np.asarray(Image.open(io.BytesIO(shot)).convert("RGB"))
    stored = np.asarray(Image.open(io.BytesIO(rendered.png)).convert("RGB"))
    assert standalone.shape == stored.shape
    # A standalone load may rasterise a KaTeX glyph a sub-pixel apart from the renderer's (seen: one
    # superscript of one formula, a 12 x 11 px box); everything else must be the same page.
    differs = np.any(standalone != stored, axis=2)
    assert differs.mean() < 1e-4, f"{int(differs.sum())} pixels differ"
