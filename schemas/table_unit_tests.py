"""The ``table`` unit test: a cell with given neighbours and headings, in an HTML or Markdown table of
the transcription (olmOCR-Bench semantics; see ``schemas.unit_tests``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar

from rapidfuzz import fuzz

from schemas.tables import Cell, Table, parse_html_tables, parse_markdown_tables
from schemas.text import normalize_text
from schemas.unit_test_base import UnitTest, match_threshold, shorten


class _TableView:
    """One parsed table as olmOCR-Bench sees it: cells keyed by their top-left grid position,
    normalised texts, heading cells, and (lazily, memoised) neighbour sets."""

    def __init__(self, table: Table):
        self.grid = table.grid()
        self.n_rows = len(self.grid)
        self.n_cols = len(self.grid[0]) if self.grid else 0
        self.origin: dict[int, tuple[int, int]] = {}  # id(Cell) -> top-left position
        self.cells: dict[tuple[int, int], Cell] = {}
        for r, row in enumerate(self.grid):
            for c, cell in enumerate(row):
                if cell is not None and id(cell) not in self.origin:
                    self.origin[id(cell)] = (r, c)
                    self.cells[(r, c)] = cell
        self.text = {pos: normalize_text(cell.text) for pos, cell in self.cells.items()}
        self.by_text: dict[str, list[tuple[int, int]]] = {}
        for pos, text in self.text.items():
            self.by_text.setdefault(text, []).append(pos)
        if table.source == "markdown":
            self.headings = {pos for pos in self.cells if pos[0] == 0 or pos[1] == 0}
        else:
            self.headings = {pos for pos, cell in self.cells.items() if cell.header}
        self._memo: dict[tuple[str, tuple[int, int]], frozenset[tuple[int, int]]] = {}

    def _span(self, pos: tuple[int, int]) -> tuple[range, range]:
        cell = self.cells[pos]
        rows = range(pos[0], min(self.n_rows, pos[0] + max(1, cell.rowspan)))
        cols = range(pos[1], min(self.n_cols, pos[1] + max(1, cell.colspan)))
        return rows, cols

    def neighbours(self, direction: str, pos: tuple[int, int]) -> frozenset[tuple[int, int]]:
        """First occupied cell (not this one) in ``direction`` along every spanned row/column."""
        key = (direction, pos)
        if key in self._memo:
            return self._memo[key]
        me = self.cells[pos]
        rows, cols = self._span(pos)
        found: set[tuple[int, int]] = set()
        if direction in ("left", "right"):
            scan = range(cols.stop, self.n_cols) if direction == "right" else range(cols.start - 1, -1, -1)
            for r in rows:
                for c in scan:
                    other = self.grid[r][c]
                    if other is not None and other is not me:
                        found.add(self.origin[id(other)])
                        break
        else:
            scan = range(rows.stop, self.n_rows) if direction == "down" else range(rows.start - 1, -1, -1)
            for c in cols:
                for r in scan:
                    other = self.grid[r][c]
                    if other is not None and other is not me:
                        found.add(self.origin[id(other)])
                        break
        result = self._memo[key] = frozenset(found)
        return result

    def heading_cells(self, direction: str, pos: tuple[int, int]) -> frozenset[tuple[int, int]]:
        """Walk ``up``/``left`` transitively: every heading cell reached, else the edge cells reached."""
        key = ("heading-" + direction, pos)
        if key in self._memo:
            return self._memo[key]
        headings: set[tuple[int, int]] = set()
        ends: set[tuple[int, int]] = set()
        seen = {pos}
        todo = [pos]
        while todo:
            cur = todo.pop()
            if cur in self.headings:
                headings.add(cur)
            nxt = self.neighbours(direction, cur)
            if not nxt:
                ends.add(cur)
            for n in nxt:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        headings.discard(pos)
        ends.discard(pos)
        result = self._memo[key] = frozenset(headings or ends)
        return result


@lru_cache(maxsize=64)
def _html_table_views(markdown: str) -> tuple[_TableView, ...]:
    return tuple(_TableView(t) for t in parse_html_tables(markdown) if t.rows)


@lru_cache(maxsize=64)
def _markdown_table_views(markdown: str) -> tuple[_TableView, ...]:
    return tuple(_TableView(t) for t in parse_markdown_tables(markdown) if t.rows)


def _table_views(markdown: str, include_markdown: bool) -> tuple[_TableView, ...]:
    html = _html_table_views(markdown)
    return html + _markdown_table_views(markdown) if include_markdown else html


_RELATIONS = ("up", "down", "left", "right", "top_heading", "left_heading")


@dataclass(kw_only=True)
class TableTest(UnitTest):
    """A table cell matching ``cell`` whose neighbours match every relation that is set.

    Matching is whole-string ``fuzz.ratio`` >= max(0.5, 1 - max_diffs/len). Neighbours are the first
    occupied cells over every spanned row/column; headings are walked transitively (``<th>``/
    ``<thead>`` in HTML, row 0 and column 0 in Markdown), falling back to the edge cells.
    """

    TYPES: ClassVar[tuple[str, ...]] = ("table",)

    cell: str
    up: str = ""
    down: str = ""
    left: str = ""
    right: str = ""
    top_heading: str = ""
    left_heading: str = ""
    ignore_markdown_tables: bool = False
    _cell: str = field(init=False, repr=False, compare=False)
    _relations: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._bool("ignore_markdown_tables")
        self._cell = self._normalized_field("cell")
        relations = []
        for name in _RELATIONS:
            self._str(name, allow_empty=True)
            value = normalize_text(getattr(self, name))
            if value:
                relations.append((name, value))
        self._relations = tuple(relations)

    def _matches(self, view: _TableView, target: str,
                 candidates: Iterable[tuple[int, int]]) -> tuple[bool, float, str | None]:
        threshold = max(0.5, match_threshold(self.max_diffs, len(target)))
        best, best_text = -1.0, None
        for pos in candidates:
            text = view.text[pos]
            sim = 1.0 if text == target else fuzz.ratio(target, text) / 100.0
            if sim > best:
                best, best_text = sim, text
            if sim >= threshold:
                return True, sim, text
        return False, best, best_text

    def check(self, markdown: str) -> tuple[bool, str]:
        views = _table_views(markdown, not self.ignore_markdown_tables)
        if not views:
            return False, "no tables found" + (" (Markdown tables ignored)" if self.ignore_markdown_tables else "")
        threshold = max(0.5, match_threshold(self.max_diffs, len(self._cell)))
        failures: list[str] = []
        for view in views:
            if self.max_diffs == 0:
                matches = view.by_text.get(self._cell, [])
            else:
                matches = [pos for pos, text in view.text.items() if fuzz.ratio(self._cell, text) / 100.0 >= threshold]
            for pos in matches:
                reasons = []
                for name, target in self._relations:
                    if name == "top_heading":
                        others = view.heading_cells("up", pos)
                    elif name == "left_heading":
                        others = view.heading_cells("left", pos)
                    else:
                        others = view.neighbours(name, pos)
                    ok, best, best_text = self._matches(view, target, others)
                    if not ok and best_text is None:
                        reasons.append(f"no cell {name.replace('_', ' ')}, expected {target!r}")
                    elif not ok:
                        reasons.append(f"{name} is {best_text!r}, expected {target!r} (best similarity {best:.2f})")
                if not reasons:
                    related = ", ".join(name for name, _ in self._relations) or "no relations"
                    return True, f"cell {shorten(self._cell)!r} found at {pos} ({related} satisfied)"
                failures.append(f"at {pos}: " + "; ".join(reasons))
        if not failures:
            return False, (f"no cell matching {shorten(self._cell)!r} (threshold {threshold:.2f}) "
                           f"in {len(views)} table(s)")
        return False, f"cells matching {shorten(self._cell)!r} found but relations fail: " + " | ".join(failures[:5])
