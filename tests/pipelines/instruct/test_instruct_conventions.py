"""pipelines/instruct/conventions.py: each convention's rewrite of one hand-built page, the tests
each keeps, and the box streams' grid, classes and reading order."""

from __future__ import annotations

import functools
import hashlib
import json
import re

import pytest

from pipelines.instruct.conventions import (
    CONVENTIONS,
    KEPT_TESTS,
    _tables_as,
    adapt_test,
    applicable,
    checkable,
    kept_tests,
    rewrite,
    table_markdown,
    table_spans,
)
from schemas.layout import element
from schemas.page import PageRecord, ProvenanceStep, validate
from schemas.tables import parse_markdown_tables
from tests.helpers import corpus_png

TABLE = ('<table>\n<tr><th rowspan="2">Item</th><th colspan="2">Cost</th></tr>\n'
         '<tr><th>2023</th><th>2024</th></tr>\n<tr><td>Pumps &amp; valves</td><td>12</td><td>15</td></tr>\n</table>')
RESPONSE = ("# Annual Report\n\n## Costs\n\nThe **budget** rose by \\(x^2\\) units[^1].\n\n"
            f"{TABLE}\n\n\\[ E = mc^2 \\]\n\n- first item\n- second item\n\n[^1]: Audited figures.\n")
ELEMENTS = [element("page_header", (40, 10, 300, 24), 0, "Acme Water Board"),
            element("title", (40, 40, 400, 70), 1, "# Annual Report"),
            element("section_header", (40, 80, 200, 100), 2, "## Costs"),
            element("text", (40, 110, 600, 130), 3, "The **budget** rose by \\(x^2\\) units[^1]."),
            element("table", (40, 140, 600, 240), 4, TABLE),
            element("formula", (200, 250, 420, 280), 5, "\\[ E = mc^2 \\]"),
            element("list_item", (40, 290, 300, 305), 6, "- first item"),
            element("list_item", (40, 306, 300, 321), 7, "- second item"),
            element("footnote", (40, 700, 400, 715), 8, "[^1]: Audited figures."),
            element("page_footer", (40, 760, 80, 775), 9, "3")]
W, H = 800, 800


def t(kind: str, **kw) -> str:
    return json.dumps({"type": kind, "pdf": "p.pdf", "page": 1, "id": f"{kind}-{len(kw)}-{sorted(kw.items())}",
                       **kw})


TESTS = [t("present", text="The budget rose by"), t("absent", text="Acme Water Board"),
         t("order", before="Annual Report", after="second item"),
         t("table", cell="12", up="2023", left="Pumps & valves", ignore_markdown_tables=True),
         t("math", math="E = mc^2")]


@functools.lru_cache(maxsize=1)
def page_png() -> bytes:
    return corpus_png("conv", (W, H))


def record(**kw) -> PageRecord:
    png = page_png()
    values = dict(id="r1", source="s", source_id="1", page_number=1, domain="d", language="en", license="cc0",
                  image=png, image_sha256=hashlib.sha256(png).hexdigest(), width=W, height=H, task="parse_page",
                  instruction="x", response=RESPONSE, unit_tests=list(TESTS),
                  provenance=[ProvenanceStep("t", "1", "x")], elements=list(ELEMENTS))
    return PageRecord(**{**values, **kw})


def test_markdown_is_unchanged_and_every_test_passes() -> None:
    out = rewrite("markdown", RESPONSE, ELEMENTS, W, H)
    assert out.response == RESPONSE and out.response_format == "markdown"
    assert kept_tests("markdown", TESTS, out.response) == TESTS


def test_plain_text_drops_markup_and_keeps_text_tests() -> None:
    out = rewrite("plain", RESPONSE, ELEMENTS, W, H).response
    assert out.startswith("Annual Report\n\nCosts\n\nThe budget rose by x^2 units.")
    assert "Item\tCost\n2023\t2024\nPumps & valves\t12\t15" in out and "E = mc^2" in out
    assert not re.search(r"[#*]|\\\[|<t", out) and "1 Audited figures." in out
    kept = kept_tests("plain", TESTS, out)
    assert [json.loads(k)["type"] for k in kept] == ["present", "absent", "order"]


def test_markdown_tables_read_back_with_spans_in_their_first_cell() -> None:
    out = rewrite("markdown_tables", RESPONSE, ELEMENTS, W, H).response
    assert "<table" not in out and "| Item | Cost |  |\n|---|---|---|\n|  | 2023 | 2024 |" in out
    table = parse_markdown_tables(out)[0]
    assert [c.text for c in table.rows[2]] == ["Pumps & valves", "12", "15"]
    adapted = json.loads(adapt_test("markdown_tables", TESTS[3]))
    assert adapted["ignore_markdown_tables"] is False  # the table test now reads Markdown tables
    assert len(kept_tests("markdown_tables", TESTS, out)) == 5


def test_latex_tables_use_multicolumn_and_multirow() -> None:
    out = rewrite("latex_tables", RESPONSE, ELEMENTS, W, H).response
    assert "\\begin{tabular}{lll}" in out and "\\multirow{2}{*}{Item} & \\multicolumn{2}{c}{Cost} \\\\ \\hline" in out
    assert "Pumps \\& valves & 12 & 15 \\\\" in out and "\\[ E = mc^2 \\]" in out
    assert "table" not in KEPT_TESTS["latex_tables"]
    assert [json.loads(k)["type"] for k in kept_tests("latex_tables", TESTS, out)] == [
        "present", "absent", "order", "math"]


STREAM = re.compile(r"^<x_(\d+)><y_(\d+)>(.*?)<x_(\d+)><y_(\d+)>(<class_[A-Za-z-]+>)?$", re.DOTALL)


def test_nemotron_streams_have_grid_boxes_classes_and_reading_order() -> None:
    md = rewrite("nemotron_md_bbox_cls", RESPONSE, ELEMENTS, W, H).response
    lines = md.strip().split("\n<x_")
    assert len(lines) == len(ELEMENTS)
    first = STREAM.match(md.split("\n")[0])
    assert first and first.groups() == ("51", "16", "Acme Water Board", "384", "38", "<class_Page-Header>")
    assert "<class_Section-Header>" in md and "<class_List-Item>" in md and md.rstrip().endswith("<class_Page-Footer>")
    plain = rewrite("nemotron_plain_bbox", RESPONSE, ELEMENTS, W, H).response
    assert "<class_" not in plain and "The budget rose by x^2 units." in plain
    boxes = rewrite("nemotron_bbox_cls", RESPONSE, ELEMENTS, W, H).response
    assert re.fullmatch(r"(<x_\d+><y_\d+><x_\d+><y_\d+><class_[A-Za-z-]+>\n)+", boxes)
    # the text a unit test reads: the elements' texts in order (so furniture is present: no 'absent' tests)
    text = checkable("nemotron_md_bbox_cls", md)
    assert text.index("Annual Report") < text.index("E = mc^2") < text.index("second item")
    assert [json.loads(k)["type"] for k in kept_tests("nemotron_md_bbox_cls", TESTS, md)] == [
        "present", "order", "table", "math"]


def test_json_layout_round_trips() -> None:
    out = rewrite("json_layout", RESPONSE, ELEMENTS, W, H)
    doc = json.loads(out.response)
    assert out.response_format == "json" and doc["width"] == W and len(doc["elements"]) == len(ELEMENTS)
    assert doc["elements"][4] == {"class": "table", "bbox": [40, 140, 600, 240], "text": TABLE}
    assert checkable("json_layout", out.response).startswith("Acme Water Board\n\n# Annual Report")


def test_applicability_and_records_stay_valid() -> None:
    lines = [element("text_line", (10, 10, 100, 20), 0, "a line")]
    assert applicable("nemotron_plain_bbox", "x", lines) and not applicable("nemotron_md_bbox_cls", "x", lines)
    assert not applicable("json_layout", RESPONSE, []) and not applicable("latex_tables", "no table", ELEMENTS)
    for c in CONVENTIONS:
        out = rewrite(c, RESPONSE, ELEMENTS, W, H)
        assert validate(record(response=out.response, response_format=out.response_format)) == []
    with pytest.raises(ValueError):
        rewrite("json_layout", RESPONSE, [], W, H)


def test_plain_text_keeps_formulas_whole_and_strips_only_html_tags() -> None:
    md = ("We need \\(a < b\\) and \\(c > d\\) for all inputs.\n\nIf x<y and y>z then done.\n\n"
          "Let \\(A^{*}B^{*}\\) be the <b>adjoint</b><br/>.\n")
    assert rewrite("plain", md, [], W, H).response == (
        "We need a < b and c > d for all inputs.\n\nIf x<y and y>z then done.\n\nLet A^{*}B^{*} be the adjoint\n.\n")


def test_plain_text_finds_formulas_and_code_as_the_conventions_stage_does() -> None:
    md = ("Dollar math $a_1 < b$ and a citation \\[12\\], an escaped \\*star\\* and *emphasis*.\n\n"
          "Code `<b>x</b> *y*` stays as it is; \\(x\\) \\[ y \\]\n")
    assert rewrite("plain", md, [], W, H).response == (
        "Dollar math a_1 < b and a citation [12], an escaped *star* and emphasis.\n\n"
        "Code `<b>x</b> *y*` stays as it is; x y\n")


def test_latex_tables_write_every_formula_of_a_cell_as_inline_math() -> None:
    html = "<table><tr><td>$a_1$ and \\(b^2\\) cost 5%</td><td>\\[12\\]</td></tr></table>"
    out = rewrite("latex_tables", html, [], W, H).response
    assert "$a_1$ and $b^2$ cost 5\\% & [12] \\\\" in out  # a Markdown-escaped citation is its brackets


def test_json_layout_keeps_the_tests_that_pass_on_its_element_texts() -> None:
    from model.eval import score_prediction
    from pipelines.instruct.stage import InstructConfig, InstructStage

    stage = InstructStage(InstructConfig(conventions={"json_layout": 1.0}, crops=(), kie=False, vqa_per_page=0))
    out = stage(record())[0]
    # the JSON string escapes the table's and formula's markup, but the tests read the decoded texts
    assert [json.loads(k)["type"] for k in out.unit_tests] == ["present", "order", "table", "math"]
    _, results = score_prediction(out.response, out.response, out.unit_tests, "json_layout")  # as model.eval does
    assert all(r["passed"] for r in results)
    _, as_raw = score_prediction(out.response, out.response, out.unit_tests)  # the raw JSON: markup escaped
    assert [r["type"] for r in as_raw if not r["passed"]] == ["table", "math"]


def test_box_streams_keep_tests_that_read_across_their_boxes() -> None:
    from model.eval import score_prediction

    across = t("present", text="Annual Report Costs")  # two elements: a box's coordinates lie between
    out = rewrite("nemotron_plain_bbox", RESPONSE, ELEMENTS, W, H).response
    kept = kept_tests("nemotron_plain_bbox", [*TESTS, across], out)
    assert across in kept
    _, results = score_prediction(out, out, kept, "nemotron_plain_bbox")
    assert all(r["passed"] for r in results)
    _, as_raw = score_prediction(out, out, kept)
    assert [r["passed"] for r in as_raw].count(False) == 1


@pytest.mark.parametrize("completion", ['{"width": 10, "elements": [{"class": "text", "text": "Acme', "[1, 2]",
                                        '{"elements": [{"text": 3}]}', '{"elements": 5}', "not json"])
def test_checkable_reads_a_malformed_json_layout_completion_as_it_is(completion) -> None:
    assert checkable("json_layout", completion) == completion  # a model's output: scored, never an error


NESTED = ("Before\n\n<table><tr><td>x <table><tr><td>inner</td><td>a&lt;b</td></tr></table> y</td><td>outer B</td>"
          "</tr><tr><td>C</td><td>D</td></tr></table>\n\n<table><tr><td>E</td></tr></table>\n\nAfter\n")


def test_nested_tables_are_found_whole_and_only_plain_text_converts_them() -> None:
    spans = table_spans(NESTED)
    assert [(NESTED[s:s + 7], NESTED[e - 8:e], nested) for s, e, nested in spans] == [
        ("<table>", "</table>", True), ("<table>", "</table>", False)]
    assert NESTED[spans[0][0]:spans[0][1]].count("<table>") == 2
    assert not applicable("markdown_tables", NESTED, []) and not applicable("latex_tables", NESTED, [])
    with pytest.raises(ValueError, match="does not apply"):
        rewrite("markdown_tables", NESTED, [], W, H)
    # the inner table's cells stay in the outer cell as text
    assert rewrite("plain", NESTED, [], W, H).response == "Before\n\nx inner a<b y\touter B\nC\tD\n\nE\n\nAfter\n"
    assert _tables_as(NESTED, table_markdown).startswith("Before\n\n<table><tr><td>x <table>")  # left as HTML
    assert _tables_as(NESTED, table_markdown).endswith("</table>\n\n| E |\n|---|\n\nAfter\n")


def test_latex_tables_escape_backslash_caret_and_tilde_outside_math() -> None:
    spec = ("<table><tr><th>Path</th><th>Growth</th></tr>"
            "<tr><td>C:\\temp\\new</td><td>~5% (x^2) {b} \\(a^{2}_i\\)</td></tr></table>\n")
    assert rewrite("latex_tables", spec, [], W, H).response == (
        "\\begin{tabular}{ll}\nPath & Growth \\\\ \\hline\n"
        "C:\\textbackslash{}temp\\textbackslash{}new & \\~{}5\\% (x\\^{}2) \\{b\\} $a^{2}_i$ \\\\\n\\end{tabular}\n")


def test_plain_text_writes_html_breaks_blocks_scripts_and_entities() -> None:
    def plain(md: str) -> str:
        return rewrite("plain", md, [], W, H).response

    assert plain("Address:<br>10 Main St<br/>Springfield") == "Address:\n10 Main St\nSpringfield\n"
    assert plain("<p>First.</p><p>Second.</p>") == "First.\nSecond.\n"
    assert plain("<ul><li>apples</li>\n<li>pears</li></ul>") == "apples\npears\n"
    assert plain('Intro\n\n<div class="note"><h2>Title</h2>Body</div>\n\nEnd') == "Intro\n\nTitle\nBody\n\nEnd\n"
    assert plain("10<sup>-3</sup> mol, x<sup>2</sup>, CO<sub>2</sub>, v<sub>max</sub>, <sup></sup>") == (
        "10^{-3} mol, x^2, CO_2, v_{max},\n")
    assert plain("AT&amp;T &lt;b&gt; &#8212; &copy; &parameter; R&D") == "AT&T <b> — © &parameter; R&D\n"
    # a table cell's decoded text stays text
    assert plain("<table><tr><td>a&lt;b&gt;c</td><td>x<sup>2</sup></td></tr></table>") == "a<b>c\tx^2\n"


@pytest.mark.parametrize("md", ["If a<b or b>c then the order fails.", "Let 1<p and p>0 hold.",
                                "Keep <s and t> apart.", "Use <london office> and x <= y."])
def test_plain_text_keeps_angle_brackets_that_are_not_tags(md) -> None:
    assert rewrite("plain", md, [], W, H).response == md + "\n"


def test_plain_text_leaves_code_and_math_alone() -> None:
    md = "Code `<br>&amp;<sup>2</sup>` and \\(a<b>c + x^{<p>}\\) and\n\n```\n<p>x</p>\n```\n"
    assert rewrite("plain", md, [], W, H).response == (
        "Code `<br>&amp;<sup>2</sup>` and a<b>c + x^{<p>} and\n\n```\n<p>x</p>\n```\n")


EMPHASIS_TABLE = ("<table><tr><th>Item</th><th><i>Cost</i></th></tr>"
                  "<tr><td><strong>Pumps</strong> &amp; valves</td><td><b> 12 </b></td></tr>"
                  "<tr><td><b>a|b <i>c</i></b> x</td><td><em>50%</em> <b>open</td></tr></table>\n")


def test_table_conventions_keep_bold_and_italic_in_cells() -> None:
    md = rewrite("markdown_tables", EMPHASIS_TABLE, [], W, H).response
    assert md == ("| Item | *Cost* |\n|---|---|\n| **Pumps** & valves | **12** |\n"
                  "| **a\\|b *c*** x | *50%* **open** |\n")
    tex = rewrite("latex_tables", EMPHASIS_TABLE, [], W, H).response
    assert ("Item & \\textit{Cost} \\\\ \\hline\n\\textbf{Pumps} \\& valves & \\textbf{12} \\\\\n"
            "\\textbf{a|b \\textit{c}} x & \\textit{50\\%} \\textbf{open} \\\\\n") in tex
    tests = [t("format", text="Pumps", format="bold"), t("format", text="Cost", format="italic"),
             t("table", cell="12", up="Cost", left="Pumps & valves")]
    assert kept_tests("markdown_tables", tests, md) == tests  # no longer filtered for a dropped emphasis
    assert rewrite("plain", EMPHASIS_TABLE, [], W, H).response == (
        "Item\tCost\nPumps & valves\t12\na|b c x\t50% open\n")


def test_deeply_nested_emphasis_in_a_cell_is_one_span() -> None:
    # untrusted labels: 1,200 nested <b> (or alternating <b><i>) once overflowed the stack and dead-lettered the page
    for cell, md, tex in [("<b>" * 1200 + "x" + "</b>" * 1200 + " y", "**x** y", "\\textbf{x} y"),
                          ("<b><i>" * 600 + "x" + "</i></b>" * 600, "***x***", "\\textbf{\\textit{x}}"),
                          ("<b>a<b>b</b>c</b>d", "**abc**d", "\\textbf{abc}d")]:
        table = f"<table><tr><th>h</th></tr><tr><td>{cell}</td></tr></table>\n"
        assert f"| {md} |" in rewrite("markdown_tables", table, [], W, H).response
        assert tex in rewrite("latex_tables", table, [], W, H).response
