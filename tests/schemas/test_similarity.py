import math
import random
import re

import numpy as np
import pytest

from schemas.similarity import (
    METRICS,
    brace_balance,
    extract_formulas,
    find_math,
    formula_exact,
    formula_exact_match,
    formula_match,
    formula_similarity,
    html_conformance,
    normalize_formula,
    normalized_edit_distance,
    score_all,
    table_edit_similarity,
    table_integrity,
    table_ted,
    table_to_html,
    tag_closure,
    teds,
    teds_details,
    text_similarity,
)
from schemas.tables import parse_tables
from schemas.tree_edit import Node, table_tree_distance, zhang_shasha

REF_2X2 = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"


def html_table(rows: list[list[str]]) -> str:
    return "<table>" + "".join("<tr>" + "".join(rows_) + "</tr>" for rows_ in rows) + "</table>"


# --------------------------------------------------------------------------- edit distance


@pytest.mark.parametrize("a, b, expected", [
    ("kitten", "sitting", 3 / 7),  # k->s, e->i, +g over max length 7
    ("", "", 0.0),
    ("", "abc", 1.0),
    ("abc", "abc", 0.0),
    ("abcd", "abd", 1 / 4),
    (["<td>", "x"], ["<td>", "y"], 1 / 2),  # token sequences too
    # items compare by ==, not by rapidfuzz's hash of them (which made these 0.0)
    ([""], ["\x00"], 1.0),
    (["a", "b"], [97, 98], 1.0),
    (["a", "b"], "ab", 0.0),  # a string is the sequence of its characters
])
def test_normalized_edit_distance(a, b, expected):
    assert normalized_edit_distance(a, b) == pytest.approx(expected, abs=1e-6)
    assert text_similarity(a, b) == pytest.approx(1 - expected, abs=1e-6)


# --------------------------------------------------------------------------- TEDS


def test_teds_identical_tables_score_one():
    assert teds(REF_2X2, REF_2X2) == 1.0
    assert teds(REF_2X2, REF_2X2, structure_only=True) == 1.0


def test_teds_hand_computed_content_edits():
    # Reference tree: table -> 2 tr -> 4 td: 6 nodes below the root.
    # One cell d -> x: rename cost NED("d", "x") = 1, TED = 1, TEDS = 1 - 1/6 = 5/6.
    pred = html_table([["<td>a</td>", "<td>b</td>"], ["<td>c</td>", "<td>x</td>"]])
    assert teds(pred, REF_2X2) == pytest.approx(5 / 6, abs=1e-6)
    # Structure is unchanged, so TEDS-S = 1 - 0/6 = 1.
    assert teds(pred, REF_2X2, structure_only=True) == 1.0
    # "cat" -> "cut": NED = 1/3, TED = 1/3, TEDS = 1 - (1/3)/6 = 17/18.
    ref = html_table([["<td>a</td>", "<td>b</td>"], ["<td>cat</td>", "<td>d</td>"]])
    pred = html_table([["<td>a</td>", "<td>b</td>"], ["<td>cut</td>", "<td>d</td>"]])
    assert teds(pred, ref) == pytest.approx(17 / 18, abs=1e-6)


def test_teds_hand_computed_structure_edits():
    # Row dropped: delete 1 tr + 2 td = 3; n = max(6, 3) = 6; TEDS = 1 - 3/6 = 1/2.
    assert teds(html_table([["<td>a</td>", "<td>b</td>"]]), REF_2X2) == pytest.approx(0.5, abs=1e-6)
    # Second row becomes one <td colspan=2>c</td>: rename c(colspan 2)->c costs 1 (spans differ),
    # insert d costs 1: TED = 2, n = max(5, 6) = 6, TEDS = TEDS-S = 1 - 2/6 = 2/3.
    pred = html_table([["<td>a</td>", "<td>b</td>"], ['<td colspan="2">c</td>']])
    assert teds(pred, REF_2X2) == pytest.approx(2 / 3, abs=1e-6)
    assert teds(pred, REF_2X2, structure_only=True) == pytest.approx(2 / 3, abs=1e-6)
    # Header cells th vs td: OmniDocBench renames every th to td before scoring
    # (data_preprocess.normalized_html_table), so they are the same cells: TEDS = TEDS-S = 1.
    # (Before this matched OmniDocBench, th/td were two renames of cost 1: 1 - 2/6 = 2/3.)
    pred = html_table([["<th>a</th>", "<th>b</th>"], ["<td>c</td>", "<td>d</td>"]])
    assert teds(pred, REF_2X2, structure_only=True) == 1.0
    assert teds(pred, REF_2X2) == 1.0


def test_teds_is_clamped_at_zero():
    # One row of 10 <td> against 10 rows of one <td> with other text: n = max(11, 20) = 20.
    # Cheapest script: delete the row (1), insert 10 rows (10), rename 10 cells "0"->"a" ... (10):
    # TED = 21 > 20, so the raw 1 - 21/20 is negative and TEDS is 0.
    a = "<table><tr>" + "".join(f"<td>{i}</td>" for i in range(10)) + "</tr></table>"
    b = "<table>" + "".join(f"<tr><td>{chr(97 + i)}</td></tr>" for i in range(10)) + "</table>"
    assert table_ted(parse_tables(a)[0], parse_tables(b)[0]) == pytest.approx(21.0)
    assert teds(a, b) == 0.0


def test_teds_markdown_and_html_tables_compare_alike():
    html = "<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td><td>2</td></tr></tbody></table>"
    assert teds("| a | b |\n|---|---|\n| 1 | 2 |", html) == 1.0


def test_teds_without_tables_and_bad_input():
    score, details = teds_details("no table here", REF_2X2)
    assert score == 0.0 and details["reason"] == "candidate has no table"
    score, details = teds_details(REF_2X2, "plain text")
    assert score is None and "reference has no table" in details["reason"]
    assert teds(REF_2X2, "plain text") == 0.0
    assert teds(None, REF_2X2) == 0.0
    assert teds("<table", REF_2X2) == 0.0  # a tag that never finishes: nothing to recover
    # Broken HTML is scored on what the parser recovers, with the problems reported.
    score, details = teds_details("<table><tr><td>a<td>b", html_table([["<td>a</td>", "<td>b</td>"]]))
    assert score == 1.0 and details["problems"] == ["candidate table 1: unclosed <table>"]


def test_teds_pairs_tables_in_order_and_counts_missing_ones_zero():
    second = html_table([["<td>x</td>"]])
    score, details = teds_details(REF_2X2, REF_2X2 + second)
    assert score == pytest.approx(0.5) and details["per_table"] == [1.0]
    assert teds(REF_2X2 + second + second, REF_2X2 + second) == pytest.approx(2 / 3)


@pytest.mark.parametrize("convention", ["omnidocbench", "pubtabnet"])
def test_tables_pair_in_document_order_across_html_and_markdown(convention):
    # Reference: table A in Markdown, then table B in HTML; candidate: both in HTML, same order.
    # Paired by start offset: A with A, B with B. (Before, all HTML tables came first, so the
    # candidate's A met the reference's B and the page scored 0.02 under omnidocbench.)
    a_md = "| Name | Qty |\n|---|---|\n| apple | 3 |\n| pear | 5 |\n"
    a_html = ("<table><tr><td>Name</td><td>Qty</td></tr><tr><td>apple</td><td>3</td></tr>"
              "<tr><td>pear</td><td>5</td></tr></table>")
    b_html = "<table><tr><td>Total</td><td>8</td><td>units</td></tr></table>"
    reference = f"Intro\n\n{a_md}\nMiddle\n\n{b_html}\n"
    candidate = f"Intro\n\n{a_html}\nMiddle\n\n{b_html}\n"
    score, details = teds_details(candidate, reference, convention=convention)
    assert details["per_table"][1] == 1.0
    assert score == pytest.approx((teds(a_html, a_md, convention=convention) + 1.0) / 2)
    assert score > 0.8
    # Markdown after HTML on the page stays after it
    score, details = teds_details(f"{b_html}\n\n{a_html}", f"{b_html}\n\n{a_md}", convention=convention)
    assert details["per_table"][0] == 1.0 and score > 0.8
    assert table_edit_similarity(reference, candidate)[1]["per_table"][1] == 1.0


def test_table_edit_similarity_uses_canonical_html():
    spaced = "<table>\n <tbody><tr> <td>a</td>\n<td>b</td></tr>\n<tr><td>c</td><td>d</td></tr></tbody></table>"
    assert table_edit_similarity(REF_2X2, spaced) == (1.0, {"reference_tables": 1, "candidate_tables": 1,
                                                           "per_table": [1.0]})
    pred = html_table([["<td>a</td>", "<td>b</td>"], ["<td>c</td>", "<td>x</td>"]])
    expected = 1 - 1 / len(table_to_html(parse_tables(REF_2X2)[0]))  # one substituted character
    assert table_edit_similarity(REF_2X2, pred)[0] == pytest.approx(expected, abs=1e-6)
    assert table_edit_similarity("no table", pred)[0] is None


# --------------------------------------------------------------------------- tree edit distance


def _table_node(sizes: list[int]) -> Node:
    cells = iter(range(sum(sizes)))
    return Node(("table",), [Node(("tr",), [Node(("cell", next(cells))) for _ in range(s)]) for s in sizes])


def test_zhang_shasha_classic_example():
    # Zhang & Shasha's example: f(d(a, c(b)), e) -> f(c(d(a, b)), e) costs 2 with unit costs.
    a = Node("f", [Node("d", [Node("a"), Node("c", [Node("b")])]), Node("e")])
    b = Node("f", [Node("c", [Node("d", [Node("a"), Node("b")])]), Node("e")])
    assert zhang_shasha(a, b, lambda x, y: 0.0 if x == y else 1.0) == 2.0


def test_table_tree_distance_equals_zhang_shasha():
    rng = random.Random(11)
    for _ in range(300):
        pa = [rng.randint(0, 4) for _ in range(rng.randint(0, 4))]  # empty rows and tables included
        pb = [rng.randint(0, 4) for _ in range(rng.randint(0, 4))]
        cost = np.array([[rng.choice((0.0, 0.2, 0.5, 1.0)) for _ in range(sum(pb))] for _ in range(sum(pa))])
        cost = cost.reshape(sum(pa), sum(pb))

        def rename(x, y, cost=cost):
            if x[0] == "cell" and y[0] == "cell":
                return float(cost[x[1], y[1]])
            return 0.0 if x[0] == y[0] else 1.0

        expected = zhang_shasha(_table_node(pa), _table_node(pb), rename)
        assert table_tree_distance(pa, pb, cost) == pytest.approx(expected, abs=1e-9), (pa, pb)


# --------------------------------------------------------------------------- formulas


@pytest.mark.parametrize("a, b", [
    (r"$x^2$", r"\(x^{2}\)"),
    (r"$$\frac{1}{2}$$", r"\[\dfrac12\]"),
    (r"\left( a \le b \right)", r"(a\leq b)"),
    (r"a \ge b \ne c", r"a\geq b\neq c"),
    (r"{\bf x} \to y", r"\mathbf{x}\rightarrow y"),
    (r"\lbrace x \rbrace", r"\{x\}"),
    (r"\tfrac{a}{b}\,\quad .", r"\frac{a}{b}"),
    (r"\begin{equation} E = mc^2 \tag{3} \end{equation}", r"E=mc^{2}"),
    (r"\left. f \right|_{0}^{1}", r"f|_0^1"),
    (r"\vert x \vert", r"|x|"),
])
def test_formula_normalisation_equates(a, b):
    assert normalize_formula(a) == normalize_formula(b)
    assert formula_exact_match(a, b)
    assert formula_similarity(a, b) == 1.0


@pytest.mark.parametrize("a, b", [
    (r"x^2", r"x_2"),
    (r"\alpha b", r"\alphab"),
    (r"a+b", r"a-b"),
    (r"\mathbf{x}", r"\mathrm{x}"),
])
def test_formula_normalisation_keeps_differences(a, b):
    assert not formula_exact_match(a, b)


def test_formula_similarity_value():
    # "a+b" vs "a+c": one substitution over 3 characters.
    assert formula_similarity("$a+b$", "$a + c$") == pytest.approx(2 / 3, abs=1e-6)


def test_formula_match_over_a_page():
    ref = r"Let $a+b$ and $$\frac{1}{2}$$ hold."
    assert extract_formulas(ref) == ["a+b", r"\frac{1}{2}"]
    score, details = formula_match(ref, r"Let $a + b$ and \[\tfrac12\] hold, and $c$.")
    # Both reference formulas match exactly; the extra $c$ counts 0: 2 / max(2, 3).
    assert score == pytest.approx(2 / 3) and details["exact"] == 2
    assert formula_exact(ref, r"$a+c$ $\frac{1}{2}$")[0] == pytest.approx(1 / 2)
    assert formula_match("no maths", "$x$") == (None, {"reason": "reference has no formula"})
    assert formula_match(ref, "nothing")[0] == 0.0


# The regular expression find_math used to be (leftmost-first, lazy): the linear scanner must find
# exactly its matches.
_MATH_REGEX = re.compile(
    r"\$\$(?P<display>.+?)\$\$"
    r"|\\\[(?P<bracket>.+?)\\\]"
    r"|\\\((?P<paren>.+?)\\\)"
    r"|(?P<env>\\begin\{(?P<envname>equation|align|gather|multline|eqnarray|displaymath)\*?\}"
    r".+?\\end\{(?P=envname)\*?\})"
    r"|(?<![\\$])\$(?P<inline>(?:[^$\\\n]|\\.)+?)\$",
    re.DOTALL,
)


def _regex_find_math(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), next(g for g in m.group("display", "bracket", "paren", "env", "inline")
                                      if g is not None))
            for m in _MATH_REGEX.finditer(text)]


def test_find_math_equals_the_lazy_regex_and_is_linear(monkeypatch):
    from schemas import formula_metrics

    pieces = ["$", "$$", "\\", "\\[", "\\]", "\\(", "\\)", "\\begin{align}", "\\end{align}", "\\begin{align*}",
              "\\end{align*}", "\\begin{equation}", "\\end{equation*}", "\\begin{foo}", "\\end{", "x", "a b", "\n",
              "{", "}", "\\$", "\\\\"]
    rng = random.Random(3)
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert find_math(text) == _regex_find_math(text), text
    # unclosed openers (22.9 s for 50k characters of "\(" with the regex): each closer is searched for until
    # it is found missing, then never again, so the characters scanned stay a few times the text's length
    scanned = []
    real_find = formula_metrics._find

    def counting_find(text, closer, start, dead):
        searched = closer not in dead
        found = real_find(text, closer, start, dead)
        if searched:  # str.find reads up to the match, or to the end when there is none
            scanned.append((found + len(closer) if found >= 0 else len(text)) - start)
        return found

    monkeypatch.setattr(formula_metrics, "_find", counting_find)
    for text in ("\\(" * 25_000, "\\[" * 25_000, "$" * 50_000, "\\begin{align}" * 4_000, "\\$x" * 20_000):
        scanned.clear()
        find_math(text)
        assert sum(scanned) <= 4 * len(text), text[:20]


# --------------------------------------------------------------------------- structural validity


def test_brace_balance():
    assert brace_balance(r"$\frac{a}{b}$")[0] == 1.0
    assert brace_balance("no braces")[0] == 1.0
    score, details = brace_balance(r"$\frac{a}{b$")  # 3 braces, 1 never closed: 1 - 1/3
    assert score == pytest.approx(2 / 3) and details["unmatched"] == 1
    assert brace_balance(r"$\{ x$ and \} escaped")[0] == 1.0
    assert brace_balance(r"$a \\ {b}$")[0] == 1.0  # \\ is a line break, the { after it is real
    # 4 braces + \begin + \end = 6 delimiters; \end{aligned} unmatched, \begin{align} unended: 1 - 2/6.
    assert brace_balance(r"$\begin{align} a \end{aligned}$")[0] == pytest.approx(2 / 3)
    # Braces are balanced per formula: a { opened in one formula is not closed by the next.
    assert brace_balance("${a$ and $b}$")[0] == 0.0


def test_tag_closure():
    assert tag_closure("<b>x</b> <br> <img src='a.png'> <td/>")[0] == 1.0
    assert tag_closure("plain $a<b$ text")[0] == 1.0  # inside a formula, < is not a tag
    # <b>, <i> opened; </b> closes <i> out of order (1 error); </i> is then stray (1 error):
    # 1 - 2 / (2 opened + 1 stray).
    score, details = tag_closure("<b><i>x</b></i>")
    assert score == pytest.approx(1 / 3) and details["errors"] == 2
    assert tag_closure("<table><tr><td>a")[0] == 0.0


def test_table_integrity():
    assert table_integrity(REF_2X2) == (1.0, {"tables": 1, "per_table": [1.0]})
    assert table_integrity("no table")[0] == 1.0
    ragged = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>"
    score, details = table_integrity(ragged)  # 3 of 4 grid positions filled
    assert score == pytest.approx(0.75) and "1 of 4 grid positions empty" in details["problems"][0]
    assert table_integrity("<table><tr><td>a</td></tr>")[0] == pytest.approx(0.5)  # unclosed <table>


def test_html_conformance():
    assert html_conformance('<table><tr><td colspan="2">a<sup>1</sup></td></tr></table>')[0] == 1.0
    assert html_conformance("no tags")[0] == 1.0
    text = '<table><tr><td style="x">1</td><td rowspan="zero">2</td></tr></table><font>x</font>'
    score, details = html_conformance(text)  # 5 opening tags, 3 violate
    assert score == pytest.approx(2 / 5) and details["violations"] == 3
    assert html_conformance("<div>x</div>", allowed={"div": ()})[0] == 1.0


# --------------------------------------------------------------------------- registry


def test_span_blowup_is_bounded():
    # colspan/rowspan 1000 (HTML's limits) on a 260-character table: the occupancy grid is capped at
    # MAX_GRID_AREA positions instead of millions (9.5 s to parse and 98 s to score before).
    from schemas.tables import MAX_GRID_AREA

    big = "<table>" + '<tr><td colspan="1000" rowspan="1000">x</td></tr>' * 5 + "</table>"
    results = score_all("<table><tr><td>x</td></tr></table>", big)
    (table,) = parse_tables(big)
    filled, total = table.occupancy()
    # the box stays within the bound but for the 1x1 footprints of cells placed outside it
    assert MAX_GRID_AREA <= total <= MAX_GRID_AREA + 5 * 100 and filled < total and not table.is_rectangular
    assert table.rows[0][0].colspan == 1000  # the cells keep their spans: TEDS labels use them
    assert results["teds"][0] == pytest.approx(0.1) and 0 < results["table_integrity"][0] < 1


def test_formula_metrics_score_a_too_deep_formula_zero_instead_of_raising():
    ref = "$a+b$"
    deep = "$" + "{" * 1000 + "x" + "}" * 1000 + "$"
    score, details = formula_match(ref, f"{ref} {deep}")
    assert score == pytest.approx(0.5) and details["too_deep"] == 1
    assert formula_exact(ref, f"{ref} {deep}")[0] == pytest.approx(0.5)
    score, details = formula_match(f"{ref} {deep}", deep)
    assert score == 0.0 and details["too_deep"] == 2  # a too-deep formula matches nothing, not even itself
    assert score_all(deep, deep)["formula"][0] == 0.0


def test_kie_f1_on_deeply_nested_json_does_not_raise():
    from schemas.similarity import kie_f1

    deep = "[" * 500 + "1" + "]" * 500  # json.loads reads it; flattening it recursively did not
    score, details = kie_f1(f'{{"a": {deep}, "b": 2}}', '{"b": 2}')
    assert score == pytest.approx(2 / 3) and details["reference_fields"] == 2
    assert kie_f1(f'{{"a": {deep}}}', f'{{"a": {deep}}}')[0] == 1.0
    too_deep = "[" * 100_000 + "]" * 100_000  # beyond the JSON parser's own recursion
    assert kie_f1(f'{{"a": {too_deep}}}', '{"a": 1}')[0] is None
    assert kie_f1('{"a": 1}', f'{{"a": {too_deep}}}')[0] == 0.0


def test_every_metric_is_bounded_or_not_applicable():
    page = f"Text $x^2$ and a table\n{REF_2X2}\n"
    candidates = [page, "", "garbage <td>{", page.replace("x^2", "x^3") + "<div>", None]
    for candidate in candidates[:-1]:
        results = score_all(page, candidate)
        assert set(results) == set(METRICS)
        for name, (score, details) in results.items():
            if name == "kie_f1":  # n/a: the reference is not a JSON object
                assert score is None
                continue
            assert score is not None and 0.0 <= score <= 1.0 and not math.isnan(score), (name, candidate)
            assert isinstance(details, dict)
    results = score_all("plain reference", page)
    assert {n for n, (s, _) in results.items() if s is None} == {
        "formula", "formula_exact", "teds", "teds_s", "table_edit", "table_integrity", "kie_f1"}
    assert all(s == 1.0 for n, (s, _) in score_all(page, page).items() if n != "kie_f1")
