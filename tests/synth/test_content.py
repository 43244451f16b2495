"""Content generators of JinaOCRSynth: formulas render in KaTeX, tables are rectangular, page specs
and reference Markdown are deterministic and carry each suite's structure."""

from __future__ import annotations

import random

import pytest

from schemas.tables import parse_html_tables
from synth.blocks import Footnote, Formula, Table
from synth.content import LAYOUT_BUILDERS, LAYOUTS, SUITES, load_snippets, make_page_spec
from synth.formulas import CATEGORIES as FORMULA_CATEGORIES
from synth.formulas import generate_formula, generate_formulas
from synth.reference import reference_markdown
from synth.tables import CATEGORIES as TABLE_CATEGORIES
from synth.tables import generate_table, table_html, verify_table


def test_snippets_have_title_and_licence() -> None:
    snippets = load_snippets()
    assert len(snippets) >= 40
    assert all(s.title and s.text and s.license for s in snippets)


def test_formulas_cover_categories_and_are_seeded() -> None:
    rng = random.Random(0)
    for category in FORMULA_CATEGORIES:
        f = generate_formula(rng, category)
        assert f.category == category and f.display and f.latex
    assert generate_formulas(5, 10) == generate_formulas(5, 10)
    assert generate_formulas(5, 10) != generate_formulas(6, 10)


def test_formulas_render_in_katex(tmp_path) -> None:
    import os

    from schemas.browser import chromium_path
    from schemas.math_render import KATEX_DIR, KatexRenderer
    if not (os.access(chromium_path(), os.X_OK) and (KATEX_DIR / "dist" / "katex.min.js").is_file()):
        pytest.skip("Chromium or KaTeX not installed (scripts/install_browser_assets.sh)")
    rng = random.Random(11)
    latexes = [generate_formula(rng, FORMULA_CATEGORIES[i % len(FORMULA_CATEGORIES)]).latex for i in range(40)]
    latexes += ["\\mathscr{L} + \\widehat{xy}", "\\boldsymbol{\\alpha} \\ne \\mathbf{a}"]
    with KatexRenderer(tmp_path / "katex") as renderer:
        results = renderer.render_many(latexes)
    bad = [(r.latex, r.error) for r in results if not r.ok]
    assert not bad


@pytest.mark.parametrize("category", TABLE_CATEGORIES)
def test_tables_are_rectangular(category: str) -> None:
    rng = random.Random(category)
    for _ in range(25):
        max_cols = rng.choice([4, 7, 9])
        table = generate_table(rng, category, max_cols=max_cols)
        assert table.category == category
        parsed = parse_html_tables(table_html(table))
        assert len(parsed) == 1 and parsed[0].is_rectangular and not parsed[0].problems
        # spanned tables are at least 5 wide (generate_table's docstring says why)
        assert len(parsed[0].grid()[0]) <= (max(max_cols, 5) if category == "spanned" else max_cols)
    spanned = generate_table(random.Random(1), "spanned")
    assert any(c.colspan > 1 for row in spanned.rows for c in row)


def test_verify_table_rejects_ragged() -> None:
    from synth.blocks import TableCell
    ragged = Table(rows=((TableCell("a"), TableCell("b")), (TableCell("c"),), (TableCell("d", colspan=3),)))
    with pytest.raises(ValueError, match="rectangular"):
        verify_table(ragged)


def test_every_layout_has_one_builder_and_unknown_ones_are_refused() -> None:
    assert sorted(LAYOUT_BUILDERS) == sorted(LAYOUTS)
    with pytest.raises(ValueError, match="unknown layout 'poster'"):
        make_page_spec("poster", "layout", 0)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("suite", SUITES)
def test_page_spec_deterministic_and_structured(layout: str, suite: str) -> None:
    a = make_page_spec(layout, suite, 3, "p1")
    b = make_page_spec(layout, suite, 3, "p1")
    assert a == b
    assert reference_markdown(a) == reference_markdown(b)
    assert a.layout == layout and a.suite == suite and a.id == "p1"
    assert a.furniture.page_number
    assert a.sources or layout == "invoice"  # invoices are all generated values
    columns = [p.column for p in a.blocks]
    assert columns == sorted(columns) and max(columns) < a.columns
    if layout == "newspaper":
        assert a.columns in (2, 3) and len(set(columns)) > 1
    blocks = [p.block for p in a.blocks]
    if suite == "formula":
        assert sum(isinstance(x, Formula) and x.display for x in blocks) >= 2
        assert "\\(" in reference_markdown(a)
    if suite == "table":
        assert any(isinstance(x, Table) for x in blocks)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_form_shows_each_field_label_once_so_each_field_has_one_answer(language: str) -> None:
    import re

    from synth.blocks import ListBlock
    from synth.fields import FORM_KEYS, page_fields

    for seed in range(40):
        spec = make_page_spec("form", SUITES[seed % len(SUITES)], seed, f"f{seed}", language=language)
        labels = [re.split(r": |：", item, maxsplit=1)[0] for p in spec.blocks if isinstance(p.block, ListBlock)
                  for item in p.block.items]
        shown = [label for label in labels if label in FORM_KEYS]
        assert len(shown) == len(set(shown)) and len(shown) >= 4, (seed, shown)
        fields = page_fields(spec)
        assert sorted(fields) == sorted(FORM_KEYS[label] for label in shown)


def test_reference_markdown_conventions() -> None:
    spec = make_page_spec("report", "formula", 1)
    md = reference_markdown(spec)
    f = spec.furniture
    assert f.page_number not in md and (not f.header or f.header not in md)
    assert md.startswith("# ")
    for p in spec.blocks:
        if isinstance(p.block, Formula) and p.block.display:
            assert f"\\[ {p.block.latex} \\]" in md
        if isinstance(p.block, Footnote):
            assert f"[^{p.block.marker}]: {p.block.text}" in md
            assert f"[^{p.block.marker}]" in md.split(f"[^{p.block.marker}]:")[0]
    table_md = reference_markdown(make_page_spec("invoice", "table", 2))
    assert "<table>" in table_md and "<th" in table_md


def test_max_blocks_caps_optional_blocks() -> None:
    full = make_page_spec("report", "layout", 4)
    small = make_page_spec("report", "layout", 4, max_blocks=4)
    assert len(small.blocks) < len(full.blocks)
