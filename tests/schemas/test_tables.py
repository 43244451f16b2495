"""Tables as olmOCR-Bench's ``table`` test reads them (``convention="olmocr"``), from hand-made cases.

Each expectation follows olmOCR-Bench's ``olmocr/bench/table_parsing.py`` and ``tests.py``; all of
them were also run through olmOCR's own ``TableTest`` (``benchmarks/table_parity.py`` measures the
agreement on generated documents). The ``"standard"`` readings (GFM pipe tables, HTML with implied
end tags) used by TEDS are asserted where the two differ.
"""

from __future__ import annotations

import random

import pytest

from schemas.table_unit_tests import bench_grid
from schemas.tables import (
    MAX_GRID_AREA,
    Cell,
    Table,
    parse_html_tables,
    parse_markdown_tables,
    parse_tables,
    place_cells,
)
from schemas.unit_tests import TableTest


def table(cell, **kw):
    return TableTest(pdf="doc.pdf", page=1, id="t", type="table", cell=cell, **kw)


def passes(md, cell, **kw) -> bool:
    return table(cell, **kw).check(md)[0]


def olmocr_rows(md):
    return [[[c.text for c in row] for row in t.rows] for t in parse_markdown_tables(md, convention="olmocr")]


# ------------------------------------------------------------------------------- which lines form a table

NO_SEPARATOR = "Results:\n\n| Name | Age |\n| Ann | 31 |\n| Bob | 42 |\n"


def test_table_without_separator_row_is_found_and_checked():
    assert parse_markdown_tables(NO_SEPARATOR) == []  # GFM needs the delimiter row
    tables = parse_markdown_tables(NO_SEPARATOR, convention="olmocr")
    assert [[c.text for c in row] for row in tables[0].rows] == [["Name", "Age"], ["Ann", "31"], ["Bob", "42"]]
    assert "no separator row" in tables[0].problems
    assert passes(NO_SEPARATOR, "31", up="Age", left="Ann", down="42")
    assert not passes(NO_SEPARATOR, "31", up="Bob")
    # the failure: "no tables found"
    passed, why = table("42", top_heading="Age", left_heading="Bob").check(NO_SEPARATOR)
    assert passed, why


def test_header_is_row_zero_and_column_zero_without_separator():
    md = "| Item | Q1 | Q2 |\n| Rent | 10 | 11 |\n| Food | 20 | 21 |"
    assert passes(md, "21", top_heading="Q2", left_heading="Food")
    assert not passes(md, "21", top_heading="11")  # a body cell is not a heading: the walk goes to row 0
    assert not passes(md, "21", left_heading="20")
    # column 0 cells are headings too, so every cell above a column-0 cell is one of its top headings
    assert passes(md, "Food", top_heading="Item") and passes(md, "Food", top_heading="Rent")


def test_separator_is_dropped_wherever_it_stands():
    md = "| a | b |\n| c | d |\n|---|:--:|\n| e | f |"
    assert olmocr_rows(md) == [[["a", "b"], ["c", "d"], ["e", "f"]]]
    assert passes(md, "e", up="c")
    assert passes(md, "f", top_heading="b")  # the header is still row 0, not the row above the separator
    first_line = "|---|---|\n| a | b |\n| c | d |"
    assert olmocr_rows(first_line) == [[["a", "b"], ["c", "d"]]]


def test_later_rule_lines_are_dropped_unless_they_hold_other_characters():
    md = "| a | b |\n|---|---|\n| :-- | --: |\n| | |\n| c | d |"
    assert olmocr_rows(md) == [[["a", "b"], ["c", "d"]]]
    # only "-", ":", space and "|" make a rule line: "===" is a row, and so is a rule with a tab in it
    assert olmocr_rows("| a |\n|===|\n| b |") == [[["a"], ["==="], ["b"]]]
    assert olmocr_rows("| a |\n|---|\n|\t---|\n| b |") == [[["a"], ["---"], ["b"]]]
    # a separator may be only colons, or spaced dashes
    assert olmocr_rows("| a |\n| : |\n| b |") == [[["a"], ["b"]]]
    assert olmocr_rows("| a | b |\n| - | - |\n| c | d |") == [[["a", "b"], ["c", "d"]]]


def test_a_table_is_two_or_more_consecutive_lines_with_a_pipe():
    assert olmocr_rows("Cost | value, on one line only.") == []
    assert olmocr_rows("|a|b|\n|---|---|") == [[["a", "b"]]]  # two lines, one row after the separator
    assert olmocr_rows("a | b\nc | d") == [[["a", "b"], ["c", "d"]]]  # outer pipes are optional
    assert olmocr_rows("| a | b |\n\n| c | d |") == []  # a blank line ends a run: two single lines
    two = "| a | b |\n| c | d |\n\n| e | f |\n| g | h |"
    assert olmocr_rows(two) == [[["a", "b"], ["c", "d"]], [["e", "f"], ["g", "h"]]]
    assert passes(two, "h", up="f") and not passes(two, "e", up="c")


def test_table_embedded_in_text_takes_adjacent_pipe_prose_as_rows():
    md = "Intro paragraph.\n| a | b |\n| c | d |\nClosing text without pipes."
    assert olmocr_rows(md) == [[["a", "b"], ["c", "d"]]]
    prose = "Revenue | costs are below.\n| a | b |\n| c | d |"  # no blank line: the prose is row 0
    assert olmocr_rows(prose) == [[["Revenue", "costs are below."], ["a", "b"], ["c", "d"]]]
    assert passes(prose, "a", up="Revenue")


def test_crlf_and_surrounding_whitespace():
    md = "\n\n  | a | b |\r\n| c | d |\r\n\n"
    assert olmocr_rows(md) == [[["a", "b"], ["c", "d"]]]
    assert passes(md, "d", up="b", left="c")
    # cells are trimmed of any whitespace (no-break spaces included) but keep their inner spacing
    assert olmocr_rows("|\u00a0a  b\t| c |\n| d | e |") == [[["a  b", "c"], ["d", "e"]]]
    assert passes("|\u00a0a  b\t| c |\n| d | e |", "a b", right="c")  # normalisation collapses it


# ------------------------------------------------------------------------------------ cells and ragged rows


def test_ragged_rows_leave_holes_that_neighbour_searches_skip():
    md = "| a | b | c |\n| d |\n| g | h | i |"
    assert olmocr_rows(md) == [[["a", "b", "c"], ["d"], ["g", "h", "i"]]]
    assert "rows have different numbers of cells" in parse_markdown_tables(md, convention="olmocr")[0].problems
    assert passes(md, "h", up="b")  # the hole under b is skipped
    assert passes(md, "g", up="d") and passes(md, "d", up="a")
    assert not passes(md, "d", right="h")  # nothing to the right of a short row
    longer = "| a | b |\n| c | d | e |"
    assert passes(longer, "e", left="d", left_heading="c")
    assert not passes(longer, "e", up="b")
    assert not passes(longer, "e", top_heading="b")  # nothing above e: no heading and no edge cell to fall back to


def test_empty_cells_hold_their_place():
    md = "| a |  | c |\n| d | e | f |"
    assert olmocr_rows(md) == [[["a", "", "c"], ["d", "e", "f"]]]
    assert not passes(md, "c", left="a")  # the empty cell is c's left neighbour
    assert passes(md, "e", left="d")


def test_pipes_split_cells_even_when_escaped_or_in_code():
    md = "| x \\| y | z |\n| `a|b` | 2 |"
    assert olmocr_rows(md) == [[["x \\", "y", "z"], ["`a", "b`", "2"]]]
    assert passes(md, "y", right="z")
    assert not passes(md, "x | y")
    # GFM reads the escape (TEDS uses this reading)
    gfm = parse_markdown_tables("| x \\| y | z |\n|---|---|\n| 1 | 2 |")
    assert [[c.text for c in r] for r in gfm[0].rows] == [["x | y", "z"], ["1", "2"]]


def test_cells_are_normalised_before_matching():
    md = "| **Total** | _net_ |\n| 1–2 | 3 |"
    assert passes(md, "Total", right="net") and passes(md, "1-2", up="Total")


# ------------------------------------------------------------------------------------------ HTML tables


def test_html_unclosed_cells_nest_as_in_beautifulsoup():
    html = "<table><tr><td>a<td>b</tr><tr><td>c</td><td>d</td></tr></table>"
    # olmOCR-Bench closes nothing implicitly: the second <td> lies inside the first
    assert [[c.text for c in r] for r in parse_html_tables(html, convention="olmocr")[0].rows] == [["ab"], ["c", "d"]]
    assert passes(html, "ab", down="c") and not passes(html, "b")
    assert [[c.text for c in r] for r in parse_html_tables(html)[0].rows] == [["a", "b"], ["c", "d"]]


def test_html_nested_table_rows_belong_to_the_outer_table_too():
    html = "<table><tr><td>x<table><tr><td>in</td></tr></table></td><td>y</td></tr><tr><td>z</td></tr></table>"
    outer, inner = parse_html_tables(html, convention="olmocr")
    assert [[c.text for c in r] for r in outer.rows] == [["xin", "y"], ["in"], ["z"]]
    assert [[c.text for c in r] for r in inner.rows] == [["in"]]
    assert passes(html, "z", up="in")


def test_standard_reading_keeps_a_nested_tables_text_in_its_outer_cell():
    html = ("<table><tr><td>x <table><tr><td>in</td><td>a&lt;b</td></tr><tr><td>r2<br>r3</td></tr></table> y</td>"
            "<td>B</td></tr><tr><td>z</td></tr></table>")
    outer, inner = parse_html_tables(html)  # document order: the outer table starts first
    assert (outer.depth, inner.depth) == (0, 1) and html[outer.start:outer.end] == html
    nested = html[inner.start:inner.end]
    assert nested.startswith("<table><tr><td>in") and nested.endswith("</table>")
    assert [[c.text for c in r] for r in inner.rows] == [["in", "a<b"], ["r2 r3"]]
    # the inner cells read as words of the outer cell; the inner rows are not rows of the outer table
    assert [[c.text for c in r] for r in outer.rows] == [["x in a<b r2 r3 y", "B"], ["z"]]


def test_html_headings_spans_and_line_breaks():
    html = ("<table><thead><tr><td>Region</td><td>Sales</td></tr></thead>"
            '<tr><td rowspan="0">North</td><td>*10<br>12*</td></tr><tr><td>13</td></tr><tr><td>14</td></tr></table>')
    t = parse_html_tables(html, convention="olmocr")[0]
    assert [c.header for c in t.rows[0]] == [True, True]  # a row inside <thead> is a heading row
    assert t.rows[1][0].rowspan == 3  # rowspan="0": to the last row
    assert passes(html, "14", left="North", top_heading="Sales")
    # <br> is a line break and emphasis does not pair across it, as in olmOCR-Bench
    assert t.rows[1][1].raw == "*10\n12*" and t.rows[1][1].text == "*10 12*"
    assert not passes(html, "10 12")  # the cell stays "*10 12*"; the test's own field loses its stars
    assert passes("<table><tr><td>*10 12*</td></tr></table>", "10 12")


def test_colliding_spans_fail_like_olmocr_raising():
    # row 1's colspan takes the column still held by row 0's rowspan: olmOCR-Bench's parser raises
    # IndexError on the cut rowspan, and its benchmark counts every table test on the page failed
    bad = "<table><tr><td>a</td><td rowspan=3>b</td></tr><tr><td colspan=2>c</td><td>e</td></tr></table>"
    good = "<table><tr><td>p</td><td>q</td></tr><tr><td>r</td><td>s</td></tr></table>"
    passed, why = table("s", up="q").check(good + bad)
    assert not passed and "raises" in why
    assert passes(good, "s", up="q")


def test_bench_grid_equals_table_grid_on_well_formed_spans():
    html = ("<table><tr><th rowspan=2>R</th><th colspan=2>S</th></tr><tr><th>1</th><th>2</th></tr>"
            "<tr><td rowspan=2>N</td><td>10</td><td>12</td></tr><tr><td>11</td><td>13</td></tr></table>")
    t = parse_html_tables(html, convention="olmocr")[0]
    grid, cells = bench_grid(t.rows)
    expected = [[(r, c) if cell is not None else None for c, cell in enumerate(row)] for r, row in enumerate(t.grid())]
    # same shape and holes; every position names the origin of the cell covering it
    assert [[p is None for p in row] for row in grid] == [[p is None for p in row] for row in expected]
    assert [[cells[p].text for p in row] for row in grid] == [[c.text for c in row] for row in t.grid()]


def test_conventions_are_named():
    with pytest.raises(ValueError, match="unknown table convention"):
        parse_markdown_tables("| a |\n| b |", convention="gfm")
    with pytest.raises(ValueError, match="unknown table convention"):
        parse_html_tables("<table></table>", convention="bs4")
    both = NO_SEPARATOR + "\n<table><tr><td>x</td></tr></table>"
    assert len(parse_tables(both, convention="olmocr")) == 2 and len(parse_tables(both)) == 1


# ------------------------------------------------------------------------------------ order and spans


def test_standard_tables_come_in_document_order_across_html_and_markdown():
    md = "| a | b |\r\n|---|---|\r\n| 1 | 2 |\r\n"
    html = '<table><tr><td colspan="2">x</td></tr></table>'
    text = f"intro\n{md}\ntext {html}\n\n{md.replace('1', '3')}"
    tables = parse_tables(text)
    # before, every HTML table came first, then every Markdown one
    assert [t.source for t in tables] == ["markdown", "html", "markdown"]
    assert [text[t.start:t.end] for t in tables] == [md, html, md.replace("1", "3")]
    assert [t.start for t in tables] == sorted(t.start for t in tables)
    unclosed = parse_tables("x <table><tr><td>a")[0]
    assert (unclosed.start, unclosed.end) == (2, len("x <table><tr><td>a"))


def _unbounded_place_cells(rows):
    """place_cells as it was before the grid bound: every covered position."""
    placed = {}
    for r, row in enumerate(rows):
        c = 0
        for cell in row:
            while (r, c) in placed:
                c += 1
            for dr in range(max(1, cell.rowspan)):
                for dc in range(max(1, cell.colspan)):
                    placed[(r + dr, c + dc)] = (cell, dr, dc)
            c += max(1, cell.colspan)
    return placed


def test_grid_bound_changes_nothing_below_it_and_bounds_the_box_above_it():
    rng = random.Random(7)
    for _ in range(300):
        rows = [[Cell(str(rng.random()), rng.choice((1, 1, 1, 2, 3)), rng.choice((1, 1, 1, 2, 4)))
                 for _ in range(rng.randint(0, 5))] for _ in range(rng.randint(1, 6))]
        exact = _unbounded_place_cells(rows)
        assert place_cells(rows) == exact
        table = Table(rows)
        grid = table.grid()
        assert table.occupancy() == (sum(c is not None for r in grid for c in r), sum(len(r) for r in grid))
        assert table.is_rectangular == all(c is not None for r in grid for c in r)
    # one 1000 x 1000 cell: cut to 100 rows x 1000 columns, the cell keeps its spans
    big = Table([[Cell("x", 1000, 1000)]])
    assert big.occupancy() == (MAX_GRID_AREA, MAX_GRID_AREA) and big.rows[0][0].rowspan == 1000
    # rowspan cut first, to the most that fits: a 2 x 5 box under a bound of 12, not 6 x 5
    wide, tall = Cell("w", 1, 5), Cell("t", 5, 1)
    placed = place_cells([[wide], [tall]], max_area=12)
    assert sorted(placed) == [(0, c) for c in range(5)] + [(1, 0)]
    # ... then colspan: 3 rows x 4 columns under a bound of 12
    placed = place_cells([[Cell("a", 3, 1), Cell("b", 1, 9)]], max_area=12)
    assert max(c for _, c in placed) == 3 and max(r for r, _ in placed) == 2
