"""The LaTeX renderer of JinaOCRSynth against real ``pdflatex`` (required: the module runs
``scripts/install_latex.sh`` when it is missing and fails with a clear message if it still is)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from schemas.deadletter import RecordError
from schemas.page import PAGE_SCHEMA, PageRecord, validate
from synth.blocks import (
    Footnote,
    Formula,
    Furniture,
    Heading,
    ListBlock,
    PageSpec,
    Paragraph,
    PlacedBlock,
    Table,
    TableCell,
)
from synth.content import without_optional
from synth.pages import page_spec, synthesize_page, to_page_record
from synth.reference import reference_markdown
from synth.render_latex import (
    LatexRenderer,
    escape_text,
    math_source,
    pdf_text,
    render_latex,
)
from synth.tables import CHECKED, UNCHECKED

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def renderer() -> LatexRenderer:
    if shutil.which("pdflatex") is None:
        subprocess.run(["bash", str(REPO / "scripts" / "install_latex.sh")], check=False)
    if shutil.which("pdflatex") is None:
        pytest.fail("pdflatex is missing and scripts/install_latex.sh could not install it "
                    "(Debian texlive-latex-base, texlive-latex-recommended, texlive-fonts-recommended, lmodern)")
    return LatexRenderer()


def _spec(blocks: list, *, layout: str = "report", columns: int = 1, size: tuple[int, int] = (640, 820),
          id: str = "t-page") -> PageSpec:
    return PageSpec(
        id=id, layout=layout, suite="layout", columns=columns, width_px=size[0], height_px=size[1],
        furniture=Furniture(header="Test Report 2024", footer="Internal", page_number="3"),
        blocks=tuple(PlacedBlock(b, c) for b, c in blocks),
    )


def _image(png: bytes) -> Image.Image:
    return Image.open(io.BytesIO(png))


def test_report_and_paper_pages_render_at_the_spec_size(renderer: LatexRenderer) -> None:
    report = page_spec("report", "layout", 3, "lt-report")
    paper = page_spec("paper", "layout", 4, "lt-paper")
    assert paper.columns == 2
    for spec in (report, paper):
        page = synthesize_page(spec, renderer)
        assert _image(page.png).size == (spec.width_px, spec.height_px)
        assert (page.width, page.height) == (spec.width_px, spec.height_px)
        assert page.html.startswith("\\documentclass")
        assert page.reference == reference_markdown(page.spec)  # the blocks on the page (no filler)
        page.renderer = "latex"
        record = to_page_record(page, spec)
        assert validate(record) == []
    assert "multicols*" in render_latex(paper)[0]


def test_formula_and_table_suites_render(renderer: LatexRenderer) -> None:
    for suite in ("formula", "table"):
        for layout in ("report", "paper"):
            spec = without_optional(page_spec(layout, suite, 11, f"lt-{suite}-{layout}"))  # LaTeX does not trim
            page = renderer.render(spec)
            assert _image(page.png).size == (spec.width_px, spec.height_px)


def test_spans_header_rows_and_footnotes(renderer: LatexRenderer) -> None:
    table = Table(rows=(
        (TableCell("Region", rowspan=2, header=True), TableCell("2023", colspan=2, header=True)),
        (TableCell("Q1", header=True), TableCell("Q2", header=True)),
        (TableCell("North", rowspan=2), TableCell("1,204"), TableCell("98.5%")),
        (TableCell("7"), TableCell("")),
    ), caption="Sales by quarter", style="grid")
    spec = _spec([(Heading("Results", 2), 0), (table, 0), (Paragraph("See the notes[^1]."), 0),
                  (Footnote("1", "A note."), 0)])
    tex, _ = render_latex(spec)
    assert "\\multicolumn{2}{c|}{\\textbf{2023}}" in tex
    assert "\\multirow{2}{*}{\\textbf{Region}}" in tex and "\\multirow{2}{*}{North}" in tex
    assert "\\footnotemark[1]" in tex and "\\footnotetext[1]{A note.}" in tex
    pdf = renderer.compile(tex)
    text = pdf_text(pdf)
    for cell in ("Region", "2023", "Q1", "Q2", "North", "1,204", "98.5%", "Sales by quarter", "A note."):
        assert cell in text
    for furniture in ("Test Report 2024", "Internal"):
        assert furniture in text


def _char_box(pdf: bytes, word: str) -> tuple[float, float]:
    """(vertical centre, left) of ``word``'s first glyph on page 1, in PDF points."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    try:
        tp = doc[0].get_textpage()
        found = tp.search(word).get_next()
        assert found is not None, word
        left, bottom, _, top = tp.get_charbox(found[0])
        return (bottom + top) / 2, left
    finally:
        doc.close()


def test_multirow_cells_sit_between_the_rows_they_span(renderer: LatexRenderer) -> None:
    for style in ("grid", "ruled", "borderless"):
        table = Table(rows=(
            (TableCell("Line", header=True), TableCell("Item", header=True), TableCell("Units", header=True)),
            (TableCell("Hydraulic", rowspan=3), TableCell("Pumps"), TableCell("120")),
            (TableCell("Valves"), TableCell("340")),
            (TableCell("Filters"), TableCell("56")),
            (TableCell("Electrical"), TableCell("Cables"), TableCell("78")),
        ), style=style)
        tex, _ = render_latex(_spec([(table, 0)]))
        assert "\\multirow{3}{*}{Hydraulic}" in tex and "pmspanrows" not in tex
        pdf = renderer.compile(tex)
        span_y, span_x = _char_box(pdf, "Hydraulic")
        pumps, valves, filters = (_char_box(pdf, w)[0] for w in ("Pumps", "Valves", "Filters"))
        assert pumps > span_y > filters, (style, pumps, span_y, filters)  # PDF y grows upwards
        assert abs(span_y - valves) < 4.0, (style, span_y, valves)  # centred on the middle row
        assert abs(span_x - _char_box(pdf, "Electrical")[1]) < 1.0  # in the first column


def test_specials_are_escaped_and_land_in_the_text_layer(renderer: LatexRenderer) -> None:
    assert escape_text("a_b ~ ^ \\") == "a\\_b \\textasciitilde{} \\textasciicircum{} \\textbackslash{}"
    assert math_source("α ≤ 3") == "\\alpha  \\leq  3"
    para = Paragraph("Costs rose 50% & $3 per #item_1 {net} ~x^2 \\ and **bold** *it* \\(x^{2}\\).")
    spec = _spec([(para, 0)])
    page = renderer.render(spec)
    assert _image(page.png).size == (640, 820)
    text = pdf_text(renderer.compile(page.html))
    assert "50% & $3" in text
    assert "#item_1 {net}" in text


def test_text_that_cannot_fit_is_an_overflow(renderer: LatexRenderer) -> None:
    long = Paragraph(" ".join(["Every sentence adds another line of text to this page."] * 400))
    with pytest.raises(RecordError) as err:
        renderer.render(_spec([(long, 0)]))
    assert err.value.reason == "synth_overflow"


def test_broken_macro_is_latex_failed_with_log_excerpt(renderer: LatexRenderer, tmp_path: Path) -> None:
    r = LatexRenderer(tmp_path)
    with pytest.raises(RecordError) as err:
        r.render(_spec([(Formula("\\frac{a}{b} + \\notamacro{x}"), 0)]))
    assert err.value.reason == "synth_latex_failed"
    assert "Undefined control sequence" in str(err.value)
    assert list(tmp_path.iterdir()) == []  # the job's temp dir is removed


def test_timeout_is_reported(tmp_path: Path) -> None:
    r = LatexRenderer(tmp_path, timeout_s=0.5)
    loop = "\\documentclass{article}\\begin{document}\\def\\x{\\x}\\x\\end{document}"
    with pytest.raises(RecordError) as err:
        r.compile(loop)
    assert err.value.reason == "synth_latex_timeout"
    assert list(tmp_path.iterdir()) == []


def test_cli_latex_end_to_end(renderer: LatexRenderer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "synth", "--renderer", "latex", "--pages", "2", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kept"] + sum(summary["rejected"].values()) == 2
    assert summary["kept"] >= 1
    assert len(list((out / "pages").glob("*.png"))) == summary["kept"]
    assert len(list((out / "html").glob("*.tex"))) == summary["kept"]
    table = pq.read_table(out / "records" / "synth-00000.parquet")
    assert table.schema.equals(PAGE_SCHEMA, check_metadata=False)
    for row in table.to_pylist():
        assert row["provenance"][0]["stage"] == "synth:latex"
        assert validate(PageRecord.from_row(row)) == []


def test_non_english_pages_are_refused_up_front(renderer: LatexRenderer) -> None:
    spec = page_spec("report", "layout", 3, "zh-page", language="zh")
    with pytest.raises(RecordError) as info:
        renderer.render(spec)
    assert info.value.reason == "synth_latex_language" and "zh-page" in str(info.value)


def test_latex_pages_carry_text_layer_line_boxes(renderer: LatexRenderer) -> None:
    from schemas.layout import validate_elements

    spec = page_spec("report", "layout", 5, "latex-geo")
    page = synthesize_page(spec, renderer)
    assert page.elements and {e.cls for e in page.elements} == {"text_line"}
    assert validate_elements(page.elements, page.width, page.height) == []
    tops = [e.y0 for e in page.elements[:5]]
    assert tops == sorted(tops)  # the text layer's order starts at the top of the page
    title = next(p.block.text for p in page.spec.blocks if p.block.__class__.__name__ == "Heading")
    assert title.split()[0] in page.elements[0].text + page.elements[1].text


def _drawn_lines(renderer: LatexRenderer, spec: PageSpec) -> list[str]:
    """The lines of the compiled page's text layer (what pdfium reads off the glyphs drawn)."""
    tex, images = render_latex(spec)
    return [line.strip() for line in pdf_text(renderer.compile(tex, images)).splitlines() if line.strip()]


def test_checked_box_is_drawn_with_a_check_mark_not_as_the_crossed_box(renderer: LatexRenderer) -> None:
    table = Table(rows=((TableCell("Feature", header=True), TableCell("Basic", header=True)),
                        (TableCell("Export"), TableCell(CHECKED)), (TableCell("Sync"), TableCell(UNCHECKED)),
                        (TableCell("Audit"), TableCell("☒"))), style="grid")
    spec = _spec([(table, 0)])
    drawn = _drawn_lines(renderer, spec)
    # ☑ is drawn as a box with a check mark in it; ⊠ (☒'s glyph) only where the reference has ☒.
    assert "Export □✓" in drawn and "Sync □" in drawn and "Audit ⊠" in drawn, drawn
    lines = [line[4] for line in renderer.render(spec).geometry["lines"]]
    assert "Export ☑" in lines, lines  # the text lines read the two glyphs back as the reference's ☑


def test_ascii_punctuation_is_drawn_as_ascii_not_t1_quotes_or_ligatures(renderer: LatexRenderer) -> None:
    samples = ["miller's", "pages 10--20 and 1---2", "x << y >> z", "a,,b", "Wow!` ok?`", "`tick`", "''twice''",
               "\"quoted\""]
    spec = _spec([(Paragraph(f"S{i}: {s} :E"), 0) for i, s in enumerate(samples)])
    drawn = _drawn_lines(renderer, spec)
    for i, sample in enumerate(samples):
        assert f"S{i}: {sample} :E" in drawn, (sample, drawn)


def test_leading_brackets_stay_text_in_items_table_rows_and_columns(renderer: LatexRenderer) -> None:
    items = ListBlock(items=("Plan the survey", "[Draft] Review budget"), ordered=False)
    table = Table(rows=((TableCell("Ref", header=True), TableCell("Year", header=True)),
                        (TableCell("[0] Jones"), TableCell("1999")), (TableCell("[1] Smith"), TableCell("2004")),
                        (TableCell("* p < 0.05"), TableCell("2010"))), style="ruled")
    drawn = _drawn_lines(renderer, _spec([(items, 0), (table, 0)]))
    assert "• [Draft] Review budget" in drawn, drawn  # not \item's label: the bullet and brackets stay
    for row in ("[0] Jones 1999", "[1] Smith 2004", "* p < 0.05 2010"):  # not the rules' or \\'s argument
        assert row in drawn, (row, drawn)
    columns = _spec([(Paragraph("[2] Left column."), 0), (Paragraph("[3] Right column."), 1)], columns=2)
    drawn_text = " ".join(_drawn_lines(renderer, columns))  # not multicols*' preface or \columnbreak's priority
    assert "[2] Left column." in drawn_text and "[3] Right column." in drawn_text, drawn_text


def _pdfium_chars(pdf: bytes) -> str:
    """Page 1's characters as pdfium reads them, its marks included (U+FFFE, private-use bracket pieces)."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    try:
        tp = doc[0].get_textpage()
        return str(tp.get_text_range(0, tp.count_chars()))
    finally:
        doc.close()


def test_text_lines_carry_no_pdfium_hyphen_marks_or_bracket_pieces(renderer: LatexRenderer) -> None:
    words = "Characteristically incomprehensible internationalization notwithstanding, "
    spec = _spec([(Paragraph(words * 12), 0), (Paragraph(words * 12), 1),
                  (Formula("\\left( \\begin{matrix} a \\\\ b \\\\ c \\\\ d \\end{matrix} \\right)"), 1)],
                 columns=2)
    raw = _pdfium_chars(renderer.compile(render_latex(spec)[0]))
    assert "\ufffe" in raw and any(0xE000 <= ord(ch) <= 0xF8FF for ch in raw)  # what pdfium reads off the page
    page = synthesize_page(spec, renderer)
    assert page.elements and all(e.text.strip() for e in page.elements)
    for e in page.elements:
        assert "\ufffe" not in e.text and not any(0xE000 <= ord(ch) <= 0xF8FF for ch in e.text), repr(e.text)
    assert any(e.text.endswith("-") for e in page.elements)  # the hyphen drawn at a line break


def test_unicode_phi_and_epsilon_draw_the_glyphs_they_name() -> None:
    """φ and ε are the curly glyphs (\\varphi, \\varepsilon); \\phi and \\epsilon draw ϕ and ϵ."""
    src = math_source("φ(x) + ε")
    assert "\\varphi" in src and "\\varepsilon" in src
    assert "\\phi" not in src.replace("\\varphi", "") and "\\epsilon" not in src.replace("\\varepsilon", "")


@pytest.mark.parametrize("latex", [
    r"\text{\input{/etc/hostname}}",
    r"\text{\include{x}}",
    r"\text{\newread\r\openin\r=/etc/passwd \read\r to\l \l}",
    r"\text{\immediate\write18{touch x}}",
    r"\text{\csname input\endcsname{/etc/hostname}}",
    r"\text{\catcode`\|=0 |input{/etc/hostname}}",
    r"\text{^^5cinput{/etc/hostname}}",
])
def test_math_that_reads_or_writes_files_is_refused(renderer: LatexRenderer, latex: str) -> None:
    for block in (Formula(latex), Paragraph(f"inline \\({latex}\\) math")):
        with pytest.raises(RecordError) as err:
            renderer.render(_spec([(block, 0)]))
        assert err.value.reason == "synth_latex_unsafe"


def test_pdflatex_reads_and_writes_only_inside_its_job(tmp_path: Path) -> None:
    """Whatever TeX reaches pdflatex, kpathsea's openin_any/openout_any=p keep it to the job's folder."""
    secret = tmp_path / "secret.tex"
    secret.write_text("Xylophonesecret", encoding="utf-8")
    r = LatexRenderer(tmp_path / "work")
    head, tail = "\\documentclass{article}\\begin{document}", "\\end{document}"
    for body in (f"\\input{{{secret}}}", f"\\newread\\r\\openin\\r={secret} \\read\\r to\\l \\l"):
        try:
            text = pdf_text(r.compile(head + body + tail))
        except RecordError as err:
            assert err.reason == "synth_latex_failed"
        else:
            assert "Xylophonesecret" not in text
    target = tmp_path / "written.txt"
    with pytest.raises(RecordError):
        r.compile(head + f"\\newwrite\\w\\immediate\\openout\\w={target}\\immediate\\write\\w{{x}}ok" + tail)
    assert not target.exists()
    assert "still works" in pdf_text(r.compile(head + "still works" + tail))
