"""Table labels -> canonical HTML: OTSL spans, LaTeX rows, Markdown fences, and the parse check."""

from __future__ import annotations

import pytest

from pipelines.sources.table_labels import to_html
from schemas.deadletter import RecordError
from schemas.tables import parse_html_tables


def test_otsl_spans_from_merge_tokens():
    otsl = "<ched>A<lcel><ched>B<nl><fcel>1<fcel>2<ucel><nl><ucel><xcel><ucel><nl>"
    html = to_html("<fcel>x<lcel><fcel>y<nl><fcel>1<fcel>2<fcel>3<nl>", "otsl")
    assert html == '<table><tr><td colspan="2">x</td><td>y</td></tr><tr><td>1</td><td>2</td><td>3</td></tr></table>'
    html = to_html("<fcel>a<fcel>b<nl><ucel><fcel>c<nl>", "otsl")
    assert html == '<table><tr><td rowspan="2">a</td><td>b</td></tr><tr><td>c</td></tr></table>'
    html = to_html("<fcel>a<lcel><nl><ucel><xcel><nl><fcel>b<fcel>c<nl>", "otsl")
    assert html.startswith('<table><tr><td rowspan="2" colspan="2">a</td></tr><tr></tr>')
    with pytest.raises(RecordError, match="different numbers"):
        to_html(otsl.replace("<ucel><xcel><ucel><nl>", "<ucel><nl>"), "otsl")


def test_latex_rows_rules_and_multicolumn():
    latex = "\\hline a & b \\\\ \\hline \\multicolumn{2}{c}{ab} \\\\ \\hline"
    assert to_html(latex, "latex") == '<table><tr><td>a</td><td>b</td></tr><tr><td colspan="2">ab</td></tr></table>'
    with pytest.raises(RecordError) as err:
        to_html("a & b \\\\ c \\\\", "latex")
    assert err.value.reason == "unparseable_table"


def test_markdown_fence_and_html_checks():
    html = to_html("```markdown\n| h | i |\n|---|---|\n| 1 | 2 |\n```", "markdown")
    assert html == "<table><tr><th>h</th><th>i</th></tr><tr><td>1</td><td>2</td></tr></table>"
    assert len(parse_html_tables(html)) == 1
    for text, fmt, reason in [("<table><tr><td>1</td></tr></table><table><tr><td>2</td></tr></table>", "html",
                               "unparseable_table"), ("   ", "html", "empty_label"),
                              ("no table here", "markdown", "unparseable_table")]:
        with pytest.raises(RecordError) as err:
            to_html(text, fmt)
        assert err.value.reason == reason
