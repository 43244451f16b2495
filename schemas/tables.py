"""Tables inside a transcription: HTML ``<table>`` and Markdown pipe tables, parsed once.

``parse_tables(text)`` returns every table as a ``Table``: rows of ``Cell`` (text, rowspan,
colspan, header flag), in document order. Everything that reasons about tables builds on it: the
``table`` unit test (``Table.grid()``, an occupancy grid that expands spans) and TEDS (the
table -> row -> cell tree). Parsing never raises: HTML that does not parse yields what could be
recovered, and ``Table.problems`` lists what was wrong (unclosed tags, ragged rows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any


@dataclass(frozen=True)
class Cell:
    text: str
    rowspan: int = 1
    colspan: int = 1
    header: bool = False  # <th>, inside <thead>, or (Markdown) the header row


@dataclass
class Table:
    rows: list[list[Cell]]
    source: str = "html"  # html | markdown
    problems: list[str] = field(default_factory=list)

    def grid(self) -> list[list[Cell | None]]:
        """Occupancy grid: each spanned cell fills every position it covers; holes are ``None``."""
        placed = place_cells(self.rows)
        n_cols = max((c for _, c in placed), default=-1) + 1
        n_rows = max((r for r, _ in placed), default=-1) + 1
        return [[placed[(r, c)][0] if (r, c) in placed else None for c in range(n_cols)] for r in range(n_rows)]

    @property
    def is_rectangular(self) -> bool:
        return all(cell is not None for row in self.grid() for cell in row)


def place_cells(rows) -> dict[tuple[int, int], tuple[Any, int, int]]:
    """Where spanned cells land: ``(row, col) -> (cell, row offset, col offset)`` for every position a
    cell covers (offsets ``0, 0`` at its origin). Cells are placed left to right in the first free
    column, as HTML does; any cell type with ``rowspan`` and ``colspan`` works."""
    placed: dict[tuple[int, int], tuple[Any, int, int]] = {}
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


class _TableParser(HTMLParser):
    """Collects every <table> (nested tables become separate tables, text kept in the outer cell)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: list[Table] = []
        self._stack: list[dict] = []  # open tables: rows, current row, current cell, thead flag

    def handle_starttag(self, tag, attrs):
        tag = tag.lower()
        if tag == "table":
            self._stack.append({"rows": [], "row": None, "cell": None, "thead": False, "problems": []})
            return
        if not self._stack:
            return
        t = self._stack[-1]
        if tag == "thead":
            t["thead"] = True
        elif tag in ("tbody", "tfoot"):
            t["thead"] = False
        elif tag == "tr":
            self._close_row(t)
            t["row"] = []
        elif tag in ("td", "th"):
            self._close_cell(t)
            if t["row"] is None:
                t["row"] = []
                t["problems"].append("cell outside <tr>")
            a = dict(attrs)
            t["cell"] = {"text": [], "rowspan": _span(a.get("rowspan")), "colspan": _span(a.get("colspan")),
                         "header": tag == "th" or t["thead"]}
        elif tag == "br" and t["cell"] is not None:
            t["cell"]["text"].append(" ")

    def handle_endtag(self, tag):
        tag = tag.lower()
        if not self._stack:
            return
        t = self._stack[-1]
        if tag in ("td", "th"):
            self._close_cell(t)
        elif tag == "tr":
            self._close_row(t)
        elif tag == "thead":
            t["thead"] = False
        elif tag == "table":
            self._finish()

    def handle_data(self, data):
        if self._stack and self._stack[-1]["cell"] is not None:
            self._stack[-1]["cell"]["text"].append(data)

    def _close_cell(self, t):
        cell = t["cell"]
        if cell is not None:
            text = " ".join("".join(cell["text"]).split())
            t["row"].append(Cell(text, cell["rowspan"], cell["colspan"], cell["header"]))
            t["cell"] = None

    def _close_row(self, t):
        self._close_cell(t)
        if t["row"] is not None:
            t["rows"].append(t["row"])
            t["row"] = None

    def _finish(self, unclosed: bool = False):
        t = self._stack.pop()
        self._close_row(t)
        if unclosed:
            t["problems"].append("unclosed <table>")
        table = Table(t["rows"], "html", t["problems"])
        if not table.is_rectangular:
            table.problems.append("rows do not form a rectangle")
        self.tables.append(table)
        if self._stack and self._stack[-1]["cell"] is not None:
            self._stack[-1]["cell"]["text"].append(" ")

    def close(self):
        super().close()
        while self._stack:
            self._finish(unclosed=True)


def _span(value) -> int:
    try:
        return max(1, min(1000, int(str(value).strip())))
    except (TypeError, ValueError):
        return 1


def parse_html_tables(text: str) -> list[Table]:
    if "<table" not in text.lower():
        return []
    parser = _TableParser()
    parser.feed(text)
    parser.close()
    return parser.tables


_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")  # GFM: one or more dashes per cell


def _split_row(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    cells = re.split(r"(?<!\\)\|", line)
    return [" ".join(c.replace("\\|", "|").split()) for c in cells]


def parse_markdown_tables(text: str) -> list[Table]:
    """GitHub-style pipe tables: a header row, a ``---`` separator row, then body rows."""
    lines = text.splitlines()
    tables: list[Table] = []
    i = 0
    while i < len(lines) - 1:
        if "|" in lines[i] and _SEPARATOR.match(lines[i + 1]):
            header = _split_row(lines[i])
            rows = [[Cell(t, header=True) for t in header]]
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows.append([Cell(t) for t in _split_row(lines[i])])
                i += 1
            table = Table(rows, "markdown")
            if not table.is_rectangular or len({len(r) for r in rows}) > 1:
                table.problems.append("rows have different numbers of cells")
            tables.append(table)
        else:
            i += 1
    return tables


def parse_tables(text: str, markdown: bool = True) -> list[Table]:
    """Every HTML table, then (unless ``markdown=False``) every Markdown pipe table."""
    tables = parse_html_tables(text)
    if markdown:
        tables += parse_markdown_tables(text)
    return tables
