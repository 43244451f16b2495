"""Tables inside a transcription: HTML ``<table>`` and Markdown pipe tables, parsed once.

``parse_tables(text)`` returns every table as a ``Table``: rows of ``Cell`` (text, rowspan,
colspan, header flag), in document order. Everything that reasons about tables builds on it: the
``table`` unit test and TEDS (the table -> row -> cell tree); ``Table.grid()`` is the occupancy grid
that expands spans, at most ``MAX_GRID_AREA`` positions (``place_cells``). Two named readings
(``convention=``): ``"standard"`` (GFM pipe tables, HTML with implied end tags; TEDS) and
``"olmocr"`` (what olmOCR-Bench's table test accepts: pipe-line runs without a separator row,
BeautifulSoup's tree; the unit test). Document order is the order of the tables' start offsets in
the text, HTML and Markdown alike (``Table.start``). Parsing never raises: HTML that does not parse
yields what could be recovered, and ``Table.problems`` lists what was wrong (unclosed tags, ragged
rows, no separator row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, Literal, get_args

from bs4 import BeautifulSoup


@dataclass(frozen=True)
class Cell:
    text: str
    rowspan: int = 1
    colspan: int = 1
    header: bool = False  # <th>, inside <thead>, or (Markdown) the header row
    # The text as olmOCR-Bench reads it, where that differs from ``text`` only in inner whitespace
    # (set by the "olmocr" HTML convention: line breaks and <br> kept as "\n", ends trimmed); its
    # emphasis regexes do not match across a line break, so the difference can decide a test.
    raw: str | None = field(default=None, compare=False)


@dataclass
class Table:
    rows: list[list[Cell]]
    source: str = "html"  # html | markdown
    problems: list[str] = field(default_factory=list)
    # Where the table stands in the text it was parsed from ("standard" convention): ``text[start:end]``
    # is the table (an unclosed ``<table>`` runs to the end); ``depth`` > 0 for an HTML table nested in
    # another table. -1 / 0 where unknown (``"olmocr"`` convention, tables built by hand).
    start: int = field(default=-1, compare=False)
    end: int = field(default=-1, compare=False)
    depth: int = field(default=0, compare=False)

    def grid(self) -> list[list[Cell | None]]:
        """Occupancy grid: each spanned cell fills every position it covers; holes are ``None``.
        Spans are cut so that the grid has at most ``MAX_GRID_AREA`` positions (``place_cells``)."""
        placed = place_cells(self.rows)
        n_rows, n_cols = _extent(placed)
        return [[placed[(r, c)][0] if (r, c) in placed else None for c in range(n_cols)] for r in range(n_rows)]

    def occupancy(self) -> tuple[int, int]:
        """``(filled, total)`` positions of ``grid()``, without building it."""
        placed = place_cells(self.rows)
        n_rows, n_cols = _extent(placed)
        return len(placed), n_rows * n_cols

    @property
    def is_rectangular(self) -> bool:
        filled, total = self.occupancy()
        return filled == total


# The most positions (rows x columns of the bounding box) a table's occupancy grid may have. Real
# tables stay far below (200 rows x 30 columns is 6,000); without a bound a few cells with
# colspan="1000" rowspan="1000" (HTML's own limits) make millions of positions.
MAX_GRID_AREA = 100_000


def _extent(placed: dict[tuple[int, int], Any]) -> tuple[int, int]:
    return (max((r for r, _ in placed), default=-1) + 1, max((c for _, c in placed), default=-1) + 1)


def _fit(limit: int, fixed: int, origin: int, span: int) -> int:
    """The largest ``s`` in ``1..span`` with ``max(fixed, origin + s)`` times the other side within
    ``limit`` (``limit`` already divided by that side); at least 1."""
    return max(1, min(span, limit - origin)) if origin + span > fixed else span


def place_cells(rows, max_area: int = MAX_GRID_AREA) -> dict[tuple[int, int], tuple[Any, int, int]]:
    """Where spanned cells land: ``(row, col) -> (cell, row offset, col offset)`` for every position a
    cell covers (offsets ``0, 0`` at its origin). Cells are placed left to right in the first free
    column, as HTML does; any cell type with ``rowspan`` and ``colspan`` works.

    The grid's bounding box (rows x columns) is kept within ``max_area`` positions: a cell whose
    spans would take it past that has its rowspan cut to the most that fits, then, if that is not
    enough, its colspan (each at least 1; a cell without spans is never cut, so a long ragged table
    may still exceed the bound by its own cells). Below the bound spans are placed as written. The
    cells keep their spans (TEDS labels use them); only the grid is cut."""
    placed: dict[tuple[int, int], tuple[Any, int, int]] = {}
    n_rows = n_cols = 0
    for r, row in enumerate(rows):
        c = 0
        for cell in row:
            while (r, c) in placed:
                c += 1
            rowspan, colspan = max(1, cell.rowspan), max(1, cell.colspan)
            if max(n_rows, r + rowspan) * max(n_cols, c + colspan) > max_area:
                width = max(n_cols, c + colspan)
                rowspan = _fit(max_area // width, n_rows, r, rowspan)
                height = max(n_rows, r + rowspan)
                if height * width > max_area:
                    colspan = _fit(max_area // height, n_cols, c, colspan)
            n_rows, n_cols = max(n_rows, r + rowspan), max(n_cols, c + colspan)
            for dr in range(rowspan):
                for dc in range(colspan):
                    placed[(r + dr, c + dc)] = (cell, dr, dc)
            c += colspan
    return placed


class _TableParser(HTMLParser):
    """Collects every <table> (nested tables become separate tables, text kept in the outer cell)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tables: list[Table] = []
        self._stack: list[dict] = []  # open tables: rows, current row, current cell, thead flag
        self._text = text
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]  # HTMLParser counts "\n" only

    def _offset(self) -> int:
        """Offset in the text of the tag being handled."""
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def handle_starttag(self, tag, attrs):
        tag = tag.lower()
        if tag == "table":
            self._stack.append({"rows": [], "row": None, "cell": None, "thead": False, "problems": [],
                                "start": self._offset(), "depth": len(self._stack)})
            return
        if not self._stack:
            return
        t = self._stack[-1]
        if tag in ("tr", "td", "th"):  # the outer cell reads a nested table's cells as words
            self._add_text(" ", outer_only=True)
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
        elif tag == "br":
            self._add_text(" ")

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
            close = self._text.find(">", self._offset())
            self._finish(end=len(self._text) if close < 0 else close + 1)

    def handle_data(self, data):
        self._add_text(data)

    def _add_text(self, text: str, outer_only: bool = False) -> None:
        """Text belongs to the open cell of every open table: a nested table's text is also its outer cell's."""
        for t in self._stack[:-1] if outer_only else self._stack:
            if t["cell"] is not None:
                t["cell"]["text"].append(text)

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

    def _finish(self, unclosed: bool = False, end: int | None = None):
        t = self._stack.pop()
        self._close_row(t)
        if unclosed:
            t["problems"].append("unclosed <table>")
        table = Table(t["rows"], "html", t["problems"], t["start"], len(self._text) if end is None else end, t["depth"])
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


Convention = Literal["standard", "olmocr"]
CONVENTIONS: tuple[str, ...] = get_args(Convention)


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown table convention {convention!r}; expected one of {CONVENTIONS}")


def _olmocr_span(value) -> int:
    """olmOCR-Bench's reading of a span attribute: a Python ``int`` >= 1, else 1; capped like ``_span``
    so that a runaway ``colspan`` cannot exhaust memory (olmOCR has no cap)."""
    try:
        span = int(value)
    except (TypeError, ValueError):
        return 1
    return min(1000, span) if span > 0 else 1


def _olmocr_html_tables(text: str) -> list[Table]:
    # The same library and tree builder olmOCR-Bench uses: it closes no element implicitly, so an
    # unclosed <td> holds the cells after it, and rows of nested tables are rows of the outer one too.
    start = text.lower().find("<table")
    if "<" not in text[:start]:
        text = text[start:]  # plain text before the first table makes no element: same tree, less to build
    soup = BeautifulSoup(text, "html.parser")
    tables: list[Table] = []
    for element in soup.find_all("table"):
        trs = element.find_all("tr")
        rows: list[list[Cell]] = []
        for r, tr in enumerate(trs):
            in_head = tr.find_parent("thead") is not None
            row = []
            for cell in tr.find_all(["th", "td"], recursive=False):
                for br in cell.find_all("br"):
                    br.replace_with("\n")
                raw = cell.get_text(separator="").strip()
                rowspan = _olmocr_span(cell.get("rowspan"))
                if str(cell.get("rowspan", "")).strip() == "0":  # "to the end of the table"
                    rowspan = max(1, len(trs) - r)
                row.append(Cell(" ".join(raw.split()), rowspan, _olmocr_span(cell.get("colspan")),
                                cell.name == "th" or in_head, raw))
            rows.append(row)
        if any(rows):
            table = Table(rows, "html")
            if not table.is_rectangular:
                table.problems.append("rows do not form a rectangle")
            tables.append(table)
    return tables


def parse_html_tables(text: str, convention: Convention = "standard") -> list[Table]:
    """Every ``<table>``, in document order (of their ``<table>`` tags: an outer table before the
    tables nested in it).

    ``"standard"``: a tolerant reading with HTML's implied end tags (a ``<td>`` or ``<tr>`` closes
    the open cell or row); a nested table is a table of its own (``Table.depth`` > 0), its text also
    kept in the outer cell. ``Table.start``/``Table.end`` locate each table in ``text``.

    ``"olmocr"`` (olmOCR-Bench's ``table`` test): BeautifulSoup's ``html.parser`` tree, nothing
    closed implicitly; a table's rows are all ``<tr>`` below it (nested tables included), a row's
    cells its direct ``<th>``/``<td>`` children; cell text is all text below the cell with ``<br>``
    as a line break, ends trimmed (``Cell.raw``); a heading is a ``<th>`` or a cell of a row inside
    a ``<thead>``; ``rowspan="0"`` reaches the last row; tables without any cell are dropped.
    """
    _check_convention(convention)
    if "<table" not in text.lower():
        return []
    if convention == "olmocr":
        return _olmocr_html_tables(text)
    parser = _TableParser(text)
    parser.feed(text)
    parser.close()
    return sorted(parser.tables, key=lambda t: t.start)


_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")  # GFM: one or more dashes per cell


def _split_row(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    cells = re.split(r"(?<!\\)\|", line)
    return [" ".join(c.replace("\\|", "|").split()) for c in cells]


def _gfm_tables(text: str) -> list[Table]:
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    lines = [line.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029") for line in lines]
    tables: list[Table] = []
    i = 0
    while i < len(lines) - 1:
        if "|" in lines[i] and _SEPARATOR.match(lines[i + 1]):
            first = i
            header = _split_row(lines[i])
            rows = [[Cell(t, header=True) for t in header]]
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows.append([Cell(t) for t in _split_row(lines[i])])
                i += 1
            table = Table(rows, "markdown", start=starts[first], end=starts[i])
            if not table.is_rectangular or len({len(r) for r in rows}) > 1:
                table.problems.append("rows have different numbers of cells")
            tables.append(table)
        else:
            i += 1
    return tables


_RULE_CHARS = frozenset("- :")  # what a separator row holds once its pipes are gone
_FORMATTING_CHARS = frozenset("- :|")


def _is_separator(line: str) -> bool:
    rest = line.replace("|", "").strip()
    return bool(rest) and set(rest) <= _RULE_CHARS


def _olmocr_block(block: list[str]) -> Table | None:
    """One run of pipe lines as olmOCR-Bench reads it (see ``parse_markdown_tables``)."""
    separator = next((i for i, line in enumerate(block) if _is_separator(line)), None)
    rows: list[list[Cell]] = []
    for i, line in enumerate(block):
        # The second test looks at the line as written: a tab or a CR makes it a row of cells.
        if i == separator or (line.strip() and set(line) <= _FORMATTING_CHARS):
            continue
        texts = [piece.strip() for piece in line.split("|")]
        if texts and texts[0] == "":
            texts = texts[1:]
        if texts and texts[-1] == "":
            texts = texts[:-1]
        if texts:
            rows.append([Cell(t, header=not rows) for t in texts])
    if not rows:
        return None
    table = Table(rows, "markdown")
    if separator is None:
        table.problems.append("no separator row")
    if len({len(r) for r in rows}) > 1:
        table.problems.append("rows have different numbers of cells")
    return table


def _olmocr_tables(text: str) -> list[Table]:
    tables: list[Table] = []
    block: list[str] = []
    for line in text.strip().split("\n") + [""]:  # the empty sentinel closes the last block
        if "|" in line:
            block.append(line)
            continue
        if len(block) >= 2 and (table := _olmocr_block(block)) is not None:
            tables.append(table)
        block = []
    return tables


def parse_markdown_tables(text: str, convention: Convention = "standard") -> list[Table]:
    """Markdown pipe tables, read by one of two conventions.

    ``"standard"`` (GitHub Flavored Markdown): a header row, a ``---`` delimiter row right under it,
    then body rows up to the first line without ``|`` or blank; ``\\|`` escapes a pipe; inner whitespace is collapsed.

    ``"olmocr"`` (olmOCR-Bench's ``table`` test, ``olmocr/bench/table_parsing.py``), meant for OCR
    output that often drops the delimiter row:

    * the text is stripped at both ends and split at ``\\n`` only (a ``\\r`` stays in its line);
    * a table is a run of two or more consecutive lines that each contain ``|``; no separator needed;
    * in a run, the first line that is non-empty and only ``-``, ``:`` and spaces once its pipes
      are removed and its ends trimmed is the separator and is dropped, wherever it stands; later
      lines made only of ``-``, ``:``, space and ``|`` are dropped too;
    * every other line is split at every ``|`` (a backslash does not escape it, nor do code spans
      or math), each piece trimmed; one empty piece at the start and one at the end (the outer
      pipes) are removed; a line left with nothing is dropped;
    * row 0 and column 0 are the headings; rows keep their own lengths (cells left-aligned, the
      missing positions are holes), so the grid need not be a rectangle.
    """
    _check_convention(convention)
    return _olmocr_tables(text) if convention == "olmocr" else _gfm_tables(text)


def parse_tables(text: str, markdown: bool = True, convention: Convention = "standard") -> list[Table]:
    """Every HTML table and (unless ``markdown=False``) every Markdown pipe table.

    ``"standard"``: in document order, HTML and Markdown tables together, by where each starts in
    the text (``Table.start``; a nested HTML table after its outer table). ``"olmocr"``: the HTML
    tables, then the Markdown ones (the ``table`` test searches them all; order does not matter).
    """
    tables = parse_html_tables(text, convention)
    if markdown:
        tables += parse_markdown_tables(text, convention)
    if convention == "standard":
        tables.sort(key=lambda t: t.start)
    return tables
