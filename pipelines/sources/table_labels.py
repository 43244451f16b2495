"""Table labels of element-level corpora -> one canonical HTML table, with a parse check.

MMTab publishes its table-recognition answers as HTML, Markdown or LaTeX; SynthChartNet its chart
data as OTSL (the table language of docling/SmolDocling). Every reader that emits a
``transcribe_table`` or ``chart_to_table`` record turns its label into the canonical HTML of
``schemas.table_metrics.table_to_html`` (``<table><tr><td colspan="2">..</td></tr></table>``,
``th`` for header cells) through the project's one table parser (``schemas.tables``), then parses
the result again: a label that does not give exactly one table, with no parse problems, raises
``RecordError("unparseable_table")`` and is dead-lettered.

LaTeX is read as MMTab's own evaluation reads it (``MMTab_evaluation.ipynb``: rows end at ``\\\\``,
cells split at ``&``, ``\\hline`` rules dropped) plus ``\\multicolumn{n}{..}{text}`` as a colspan;
anything else in a cell (``\\textbf{x}``) is kept as written.

OTSL (Lysak et al., 2023): ``<fcel>`` a cell whose text follows, ``<ecel>`` an empty cell,
``<lcel>`` merged with the cell on its left, ``<ucel>`` with the cell above, ``<xcel>`` with both,
``<nl>`` ends a row; DocTags adds ``<ched>`` (column header), ``<rhed>`` (row header) and
``<srow>`` (section row) as cells that start with text.
"""

from __future__ import annotations

import re

from schemas.deadletter import RecordError
from schemas.table_metrics import table_to_html
from schemas.tables import Cell, Table, parse_html_tables, parse_markdown_tables

_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n?|\n?\s*```\s*$")


def _unfence(text: str) -> str:
    return _FENCE.sub("", text.strip()).strip()


def _one_table(tables: list[Table], what: str) -> Table:
    if len(tables) != 1:
        raise RecordError("unparseable_table", f"{what}: expected one table, found {len(tables)}")
    table = tables[0]
    if not table.rows or not any(table.rows):
        raise RecordError("unparseable_table", f"{what}: the table has no cells")
    if table.problems:
        raise RecordError("unparseable_table", f"{what}: {'; '.join(table.problems)}")
    return table


def html_from_html(text: str) -> str:
    return table_to_html(_one_table(parse_html_tables(_unfence(text)), "HTML label"))


def html_from_markdown(text: str) -> str:
    return table_to_html(_one_table(parse_markdown_tables(_unfence(text)), "Markdown label"))


_TABULAR = re.compile(r"\\begin\{tabular\*?\}(?:\{[^{}]*\})?(?:\{(?:[^{}]|\{[^{}]*\})*\})(.*?)\\end\{tabular\*?\}",
                      re.DOTALL)
_RULES = re.compile(r"\\(?:hline|toprule|midrule|bottomrule|cline\{[^}]*\}|cmidrule(?:\([^)]*\))?\{[^}]*\})")
_MULTICOLUMN = re.compile(r"^\\multicolumn\{(\d+)\}\{[^{}]*\}\{(.*)\}$", re.DOTALL)
_ROW_END = re.compile(r"(?<!\\)\\\\(?:\[[^\]]*\])?")
_AMP = re.compile(r"(?<!\\)&")


def html_from_latex(text: str) -> str:
    body = _unfence(text)
    match = _TABULAR.search(body)
    if match:
        body = match.group(1)
    body = _RULES.sub(" ", body)
    rows: list[list[Cell]] = []
    for line in _ROW_END.split(body):
        if not line.strip():
            continue
        cells = []
        for piece in _AMP.split(line):
            piece = " ".join(piece.split())
            m = _MULTICOLUMN.match(piece)
            cells.append(Cell(" ".join(m.group(2).split()), colspan=int(m.group(1))) if m else Cell(piece))
        rows.append(cells)
    table = Table(rows, "latex")
    widths = {sum(c.colspan for c in row) for row in rows}
    if len(widths) > 1:
        table.problems.append(f"rows span different numbers of columns {sorted(widths)}")
    return table_to_html(_one_table([table], "LaTeX label"))


_OTSL_TOKEN = re.compile(r"<(fcel|ecel|lcel|ucel|xcel|ched|rhed|srow|nl)>")
_STARTS = {"fcel", "ecel", "ched", "rhed", "srow"}


def html_from_otsl(text: str) -> str:
    """OTSL (see the module doc) -> canonical HTML; spans from the merge tokens."""
    grid: list[list[tuple[str, str]]] = [[]]
    pieces = _OTSL_TOKEN.split(text)
    if pieces[0].strip():
        raise RecordError("unparseable_table", f"OTSL label: text before the first token: {pieces[0][:40]!r}")
    for tag, content in zip(pieces[1::2], pieces[2::2], strict=True):
        if tag == "nl":
            grid.append([])
        else:
            grid[-1].append((tag, " ".join(content.split())))
    grid = [row for row in grid if row]
    if not grid:
        raise RecordError("unparseable_table", "OTSL label: no cells")
    width = max(len(row) for row in grid)
    if any(len(row) != width for row in grid):
        raise RecordError("unparseable_table", "OTSL label: rows have different numbers of tokens")
    rows: list[list[Cell]] = []
    for r, row in enumerate(grid):
        cells = []
        for c, (tag, content) in enumerate(row):
            if tag not in _STARTS:
                if (tag == "lcel" and c == 0) or (tag == "ucel" and r == 0) or (tag == "xcel" and (r == 0 or c == 0)):
                    raise RecordError("unparseable_table", f"OTSL label: <{tag}> at row {r}, column {c} merges "
                                                           "with nothing")
                continue
            colspan = 1
            while c + colspan < width and row[c + colspan][0] == "lcel":
                colspan += 1
            rowspan = 1
            while r + rowspan < len(grid) and grid[r + rowspan][c][0] in ("ucel", "xcel"):
                rowspan += 1
            cells.append(Cell(content if tag != "ecel" else "", rowspan=rowspan, colspan=colspan,
                              header=tag == "ched"))
        rows.append(cells)
    return table_to_html(_one_table([Table(rows, "otsl")], "OTSL label"))


CONVERTERS = {"html": html_from_html, "markdown": html_from_markdown, "latex": html_from_latex, "otsl": html_from_otsl}


def to_html(text: str, fmt: str) -> str:
    """``text`` in ``fmt`` (html, markdown, latex, otsl) as canonical HTML, re-parsed as a check."""
    if not isinstance(text, str) or not text.strip():
        raise RecordError("empty_label", "the table label is empty")
    html = CONVERTERS[fmt](text)
    _one_table(parse_html_tables(html), "converted table")  # the parse check on what is stored
    return html
