"""olmOCR-Bench-compatible unit tests: typed test records, their checks, and JSONL I/O.

A unit test states one verifiable fact about the transcription of one PDF page: a text is present
or absent, one text precedes another, a table cell has given neighbours, a formula appears, the page
is not degenerate (baseline), a text is bold/italic/a heading, a footnote marker is placed. The
field names, thresholds and normalisation are those of olmOCR-Bench (``olmocr/bench/tests.py``), so
its JSONL files load unchanged and score the same; the same dicts are stored, one JSON string per
test, in ``PageRecord.unit_tests``.

Every test is a ``@dataclass(kw_only=True)`` validated on construction (``ValueError`` naming the
field) with ``check(markdown) -> (passed, explanation)``. Public fields keep the values as given
(so dump -> load round-trips exactly); the normalised reference strings live in private fields.

Differences from the reference, all deliberate:

* ``math`` tests do not render the reference when loaded (loading needs no browser); a reference that
  does not render makes ``check`` fail with the renderer's reason instead.
* ``format`` and ``footnote`` (synthetic-only types) apply the length guard olmOCR added to
  ``present``/``absent``: a formatted span or footnote context shorter than the target minus
  ``max_diffs`` cannot match (olmOCR's ``partial_ratio`` would score ``**R**`` as a full match of
  ``Results``, a reward hole).
* ``order`` uses ``schemas.text.find_near_matches`` in place of the ``fuzzysearch`` package; it
  follows the same algorithm for patterns of at least ``3 * (max_diffs + 1)`` characters and can
  differ at match boundaries for shorter ones.
* Markdown tables are GitHub pipe tables with a delimiter row (``schemas/tables.py``); olmOCR also
  takes any run of two or more lines containing ``|``.
* ``first_n``/``last_n`` of 0 and ``page`` < 1 are rejected rather than treated as unset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from rapidfuzz import fuzz

from schemas.tables import Cell, Table, parse_html_tables, parse_markdown_tables
from schemas.text import (
    alnum_lower,
    count_alnum,
    find_near_matches,
    non_ascii,
    normalize_text,
    normalized,
    normalized_lower,
    trailing_repeats,
)

TEST_TYPES = ("baseline", "present", "absent", "order", "table", "math", "format", "footnote")
CHECKED_VALUES = ("verified", "rejected")
FORMATS = ("heading", "bold", "italic")

# rapidfuzz scores are floats in [0, 100]; a cutoff this far below the threshold lets rapidfuzz stop
# early without ever turning an exact-threshold match into a miss.
_CUTOFF_SLACK = 1e-6


def _threshold(max_diffs: int, length: int) -> float:
    return 1.0 - max_diffs / (length if length > 0 else 1)


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[:n] + "..."


# ---------------------------------------------------------------------------------------------
# Base record


@dataclass(kw_only=True)
class UnitTest:
    """Fields every test has; ``check`` is implemented by each type."""

    TYPES: ClassVar[tuple[str, ...]] = ()

    pdf: str
    page: int
    id: str
    type: str
    max_diffs: int = 0
    checked: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        self._str("pdf")
        self._str("id")
        if not isinstance(self.type, str) or self.type not in self.TYPES:
            raise ValueError(
                f"field 'type' must be one of {list(self.TYPES)} for {type(self).__name__}, got {self.type!r}")
        self._int("page", minimum=1)
        self._int("max_diffs", minimum=0)
        if self.checked is not None and self.checked not in CHECKED_VALUES:
            raise ValueError(f"field 'checked' must be one of {list(CHECKED_VALUES)} or null, got {self.checked!r}")
        self._str("url", optional=True, allow_empty=True)

    def check(self, markdown: str) -> tuple[bool, str]:
        """Run the test on one candidate transcription: (passed, why)."""
        raise NotImplementedError

    # validation helpers -----------------------------------------------------------------------
    def _str(self, name: str, *, optional: bool = False, allow_empty: bool = False) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        if not isinstance(value, str):
            kind = type(value).__name__
            raise ValueError(f"field {name!r} must be a string, got {kind}")  # noqa: TRY004
        if not allow_empty and not value.strip():
            raise ValueError(f"field {name!r} must not be empty")

    def _int(self, name: str, *, minimum: int, optional: bool = False) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"field {name!r} must be an integer >= {minimum}, got {value!r}")

    def _bool(self, name: str) -> None:
        if not isinstance(getattr(self, name), bool):
            value = getattr(self, name)
            raise ValueError(f"field {name!r} must be true or false, got {value!r}")  # noqa: TRY004

    def _normalized_field(self, name: str) -> str:
        """Validate a required text field and return its normalised form (must keep content)."""
        self._str(name)
        value = normalize_text(getattr(self, name))
        if not value.strip():
            raise ValueError(f"field {name!r} is empty after normalisation: {getattr(self, name)!r}")
        return value


# ---------------------------------------------------------------------------------------------
# present / absent


@dataclass(kw_only=True)
class PresenceTest(UnitTest):
    """``present``: ``text`` occurs (up to ``max_diffs`` edits, ``partial_ratio``); ``absent``: it does not.

    ``first_n``/``last_n`` restrict the search to the first/last characters of the normalised page
    (both: their concatenation).
    """

    TYPES: ClassVar[tuple[str, ...]] = ("present", "absent")

    text: str
    case_sensitive: bool = True
    first_n: int | None = None
    last_n: int | None = None
    _query: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._bool("case_sensitive")
        self._int("first_n", minimum=1, optional=True)
        self._int("last_n", minimum=1, optional=True)
        query = self._normalized_field("text")
        self._query = query if self.case_sensitive else query.lower()

    def check(self, markdown: str) -> tuple[bool, str]:
        query = self._query
        md = normalized(markdown) if self.case_sensitive else normalized_lower(markdown)
        where = "page"
        if self.first_n and self.last_n:
            md, where = md[: self.first_n] + md[-self.last_n:], f"first {self.first_n} + last {self.last_n} chars"
        elif self.first_n:
            md, where = md[: self.first_n], f"first {self.first_n} chars"
        elif self.last_n:
            md, where = md[-self.last_n:], f"last {self.last_n} chars"
        present = self.type == "present"

        # partial_ratio is symmetric in its shorter argument: guard against a page shorter than the query
        min_required = len(query) - self.max_diffs
        if len(md) < min_required:
            if present:
                return False, (f"{where} too short ({len(md)} chars) to contain {_short(query)!r} "
                               f"(need >= {min_required})")
            return True, f"{where} too short ({len(md)} chars) to contain {_short(query)!r}"

        threshold = _threshold(self.max_diffs, len(query))
        if self.max_diffs == 0:
            found = query in md  # partial_ratio == 100 exactly when the query is a substring
            ratio = 1.0 if found else None
        else:
            score = fuzz.partial_ratio(query, md, score_cutoff=max(0.0, threshold * 100 - _CUTOFF_SLACK))
            ratio = score / 100.0
            found = ratio >= threshold
        if found:
            if present:
                return True, f"found {_short(query)!r} in {where} (ratio {ratio:.3f} >= {threshold:.3f})"
            return False, f"expected {_short(query)!r} absent from {where}, but ratio {ratio:.3f} >= {threshold:.3f}"
        if present:
            best = fuzz.partial_ratio(query, md) / 100.0
            return False, f"expected {_short(query)!r} in {where}, best match ratio {best:.3f} < {threshold:.3f}"
        return True, f"{_short(query)!r} absent from {where} (best match ratio < {threshold:.3f})"


# ---------------------------------------------------------------------------------------------
# order


@dataclass(kw_only=True)
class OrderTest(UnitTest):
    """``before`` starts before ``after`` for some pair of Levenshtein near matches (<= ``max_diffs``)."""

    TYPES: ClassVar[tuple[str, ...]] = ("order",)

    before: str
    after: str
    _before: str = field(init=False, repr=False, compare=False)
    _after: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._before = self._normalized_field("before")
        self._after = self._normalized_field("after")
        limit = min(len(self._before), len(self._after)) // 2
        if self.max_diffs > limit:
            raise ValueError(
                f"field 'max_diffs' ({self.max_diffs}) exceeds half the length of 'before'/'after' ({limit})")

    def check(self, markdown: str) -> tuple[bool, str]:
        md = normalized(markdown)
        if self.max_diffs == 0:
            first_before, last_after = md.find(self._before), md.rfind(self._after)
        else:
            bm = find_near_matches(self._before, md, self.max_diffs)
            am = find_near_matches(self._after, md, self.max_diffs)
            first_before = bm[0].start if bm else -1
            last_after = max(m.start for m in am) if am else -1
        if first_before < 0:
            return False, f"'before' text {_short(self._before)!r} not found (max_l_dist {self.max_diffs})"
        if last_after < 0:
            return False, f"'after' text {_short(self._after)!r} not found (max_l_dist {self.max_diffs})"
        if first_before < last_after:
            return True, f"{_short(self._before)!r} at {first_before} precedes {_short(self._after)!r} at {last_after}"
        return False, (f"{_short(self._before)!r} (first at {first_before}) never precedes "
                       f"{_short(self._after)!r} (last at {last_after})")


# ---------------------------------------------------------------------------------------------
# table


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
        threshold = max(0.5, _threshold(self.max_diffs, len(target)))
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
        threshold = max(0.5, _threshold(self.max_diffs, len(self._cell)))
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
                    return True, f"cell {_short(self._cell)!r} found at {pos} ({related} satisfied)"
                failures.append(f"at {pos}: " + "; ".join(reasons))
        if not failures:
            return False, (f"no cell matching {_short(self._cell)!r} (threshold {threshold:.2f}) "
                           f"in {len(views)} table(s)")
        return False, f"cells matching {_short(self._cell)!r} found but relations fail: " + " | ".join(failures[:5])


# ---------------------------------------------------------------------------------------------
# math

_MATH_PATTERNS = (
    re.compile(r"\\\((.+?)\\\)", re.DOTALL),
    re.compile(r"\\\[(.+?)\\\]", re.DOTALL),
)
_DOLLAR_PATTERNS = (
    re.compile(r"\$\$(.+?)\$\$", re.DOTALL),
    re.compile(r"\$(.+?)\$", re.DOTALL),
)


@lru_cache(maxsize=64)
def extract_equations(markdown: str, ignore_dollar_delimited: bool = False) -> tuple[str, ...]:
    """Candidate formulas in olmOCR-Bench order: every ``\\(..\\)``, then ``\\[..\\]``, then (unless
    ignored) ``$$..$$`` and ``$..$``; each kind is cut out before the next is searched."""
    patterns = _MATH_PATTERNS if ignore_dollar_delimited else _MATH_PATTERNS + _DOLLAR_PATTERNS
    found: list[str] = []
    rest = markdown
    for pattern in patterns:
        found.extend(m.strip() for m in pattern.findall(rest))
        rest = pattern.sub("", rest)
    return tuple(found)


@dataclass(kw_only=True)
class MathTest(UnitTest):
    """The formula ``math`` appears: an extracted equation equal to it, or one that renders the same
    (``schemas.math_render.formulas_match``; candidates tried most string-similar first)."""

    TYPES: ClassVar[tuple[str, ...]] = ("math",)

    math: str
    ignore_dollar_delimited: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self._str("math")
        self._bool("ignore_dollar_delimited")

    def check(self, markdown: str) -> tuple[bool, str]:
        equations = extract_equations(markdown, self.ignore_dollar_delimited)
        if self.math in equations:
            return True, f"equation {_short(self.math)!r} found verbatim"
        if not equations:
            kinds = "\\( \\) or \\[ \\]" if self.ignore_dollar_delimited else "\\( \\), \\[ \\], $$ $$ or $ $"
            return False, f"no equations ({kinds}) in the page"
        from schemas.math_render import (
            formulas_match,  # lazy: pulls in the browser-based renderer
        )

        ordered = sorted(equations, key=lambda eq: -fuzz.ratio(eq, self.math))
        last_reason = ""
        for hypothesis in ordered:
            try:
                matched, reason = formulas_match(self.math, hypothesis)
            except Exception as exc:  # noqa: BLE001 - one unrenderable candidate must not hide the others
                matched, reason = False, f"{type(exc).__name__}: {exc}"
            if matched:
                return True, f"equation {_short(hypothesis)!r} renders like {_short(self.math)!r}: {reason}"
            last_reason = reason
        return False, f"no match for {_short(self.math)!r} among {len(ordered)} equation(s); last: {last_reason}"


# ---------------------------------------------------------------------------------------------
# baseline

_IMAGE_TAG = re.compile(r"!\[.*?\]\(.*?\)")
_DISALLOWED = re.compile(
    "["
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\u3040-\u309f"  # hiragana
    "\u30a0-\u30ff"  # katakana
    "\U0001f600-\U0001f64f"  # emoticons
    "\U0001f300-\U0001f5ff"  # symbols and pictographs
    "\U0001f680-\U0001f6ff"  # transport and map
    "\U0001f1e0-\U0001f1ff"  # regional indicators (flags)
    "]"
)


@dataclass(kw_only=True)
class BaselineTest(UnitTest):
    """Page-level sanity on the raw text. With ``max_length``: a blank-page check (at most that many
    alphanumerics). Otherwise: some alphanumerics, no n-gram (1-5 chars) repeated more than
    ``max_repeats`` times back to back at the end, and no CJK/kana/emoji (unless disabled)."""

    TYPES: ClassVar[tuple[str, ...]] = ("baseline",)

    type: str = "baseline"
    max_length: int | None = None
    max_length_skips_image_alt_tags: bool = False
    max_repeats: int = 30
    check_disallowed_characters: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._int("max_length", minimum=0, optional=True)
        self._bool("max_length_skips_image_alt_tags")
        self._int("max_repeats", minimum=1)
        self._bool("check_disallowed_characters")

    def check(self, markdown: str) -> tuple[bool, str]:
        if self.max_length is not None:
            text = _IMAGE_TAG.sub("", markdown) if self.max_length_skips_image_alt_tags else markdown
            n = count_alnum(text)
            if n > self.max_length:
                return False, f"{n} alphanumeric characters on a page expected blank (max {self.max_length})"
            return True, f"blank enough: {n} alphanumeric characters (max {self.max_length})"
        if count_alnum(markdown) == 0:
            return False, "the text contains no alphanumeric characters"
        for size, count in enumerate(trailing_repeats(markdown, 5), start=1):
            if count > self.max_repeats:
                return False, f"text ends with {count} back-to-back repeats of the {size}-gram {markdown[-size:]!r}"
        if self.check_disallowed_characters:
            bad = _DISALLOWED.findall(non_ascii(markdown))
            if bad:
                sample = "".join(dict.fromkeys(bad))[:10]
                return False, f"text contains {len(bad)} disallowed (CJK/kana/emoji) characters, e.g. {sample!r}"
        charset = ", no disallowed characters" if self.check_disallowed_characters else ""
        return True, "has text, no runaway repetition" + charset


# ---------------------------------------------------------------------------------------------
# format

_FORMAT_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "heading": (
        re.compile(r"^#{1,6}\s+(.+?)$", re.MULTILINE),
        re.compile(r"<h[1-6][^>]*>(.*?)</h[1-6]>", re.IGNORECASE | re.DOTALL),
    ),
    "bold": (
        re.compile(r"\*\*(.*?)\*\*", re.DOTALL),
        re.compile(r"__(.*?)__", re.DOTALL),
        re.compile(r"<b[^>]*>(.*?)</b>", re.IGNORECASE | re.DOTALL),
        re.compile(r"<strong[^>]*>(.*?)</strong>", re.IGNORECASE | re.DOTALL),
    ),
    "italic": (
        re.compile(r"(?<!\*)\*(?!\*)(.*?)(?<!\*)\*(?!\*)", re.DOTALL),
        re.compile(r"(?<!_)_(?!_)(.*?)(?<!_)_(?!_)", re.DOTALL),
        re.compile(r"<i[^>]*>(.*?)</i>", re.IGNORECASE | re.DOTALL),
        re.compile(r"<em[^>]*>(.*?)</em>", re.IGNORECASE | re.DOTALL),
    ),
}


@lru_cache(maxsize=64)
def formatted_spans(markdown: str, fmt: str) -> tuple[str, ...]:
    """Normalised texts of every heading / bold / italic span (Markdown and HTML) in the raw page."""
    return tuple(normalize_text(m) for pattern in _FORMAT_PATTERNS[fmt] for m in pattern.findall(markdown))


@dataclass(kw_only=True)
class FormatTest(UnitTest):
    """``text`` appears inside a span with ``format`` (heading, bold or italic), ``partial_ratio``."""

    TYPES: ClassVar[tuple[str, ...]] = ("format",)

    text: str
    format: str
    case_sensitive: bool = True
    _query: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.format not in FORMATS:
            raise ValueError(f"field 'format' must be one of {list(FORMATS)}, got {self.format!r}")
        self._bool("case_sensitive")
        query = self._normalized_field("text")
        self._query = query if self.case_sensitive else query.lower()

    def check(self, markdown: str) -> tuple[bool, str]:
        spans = formatted_spans(markdown, self.format)
        if not self.case_sensitive:
            spans = tuple(s.lower() for s in spans)
        query = self._query
        threshold = _threshold(self.max_diffs, len(query))
        min_required = len(query) - self.max_diffs
        best = 0.0
        for span in spans:
            if len(span) < min_required:
                continue
            if span and query in span:
                return True, f"{_short(query)!r} is {self.format}"
            ratio = fuzz.partial_ratio(query, span) / 100.0
            best = max(best, ratio)
            if ratio >= threshold:
                return True, f"{_short(query)!r} is {self.format} (ratio {ratio:.3f} >= {threshold:.3f})"
        if not spans:
            return False, f"{_short(query)!r} not {self.format}: no {self.format} text in the page"
        sample = ", ".join(repr(_short(s, 20)) for s in spans[:3])
        return False, f"{_short(query)!r} not {self.format} (best ratio {best:.3f}); {self.format} text: {sample}"


# ---------------------------------------------------------------------------------------------
# footnote

_SUPERSCRIPT_DIGITS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_FOOTNOTE_WINDOW = 200


@dataclass(kw_only=True)
class FootnoteTest(UnitTest):
    """Footnote ``marker`` appears as ``[^m]`` (not a definition), ``<sup>m</sup>`` or superscript
    digits; optional ``appears_before_marker``/``appears_after_marker`` must sit within 200 characters
    before/after some occurrence (alphanumerics only, lowercased, ``partial_ratio``)."""

    TYPES: ClassVar[tuple[str, ...]] = ("footnote",)

    marker: str
    appears_before_marker: str | None = None
    appears_after_marker: str | None = None
    _patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _before: str | None = field(init=False, repr=False, compare=False)
    _after: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._str("marker")
        if any(c.isspace() for c in self.marker):
            raise ValueError(f"field 'marker' must not contain whitespace, got {self.marker!r}")
        self._before = self._optional_context("appears_before_marker")
        self._after = self._optional_context("appears_after_marker")
        m = re.escape(self.marker)
        patterns = [re.compile(rf"\[\^{m}\](?!:)"), re.compile(rf"<sup[^>]*>{m}</sup>", re.IGNORECASE)]
        if self.marker.isascii() and self.marker.isdigit():
            patterns.append(re.compile(re.escape(self.marker.translate(_SUPERSCRIPT_DIGITS))))
        self._patterns = tuple(patterns)

    def _optional_context(self, name: str) -> str | None:
        value = getattr(self, name)
        if value is None or value == "":
            return None
        return self._normalized_field(name)

    def check(self, markdown: str) -> tuple[bool, str]:
        spans = [(m.start(), m.end()) for p in self._patterns for m in p.finditer(markdown)]
        if not spans:
            m = self.marker
            return False, f"footnote marker {m!r} not found as [^{m}], <sup>{m}</sup> or superscript"
        failures = []
        if self._before is not None and not self._near(markdown, spans, self._before, before=True):
            failures.append(f"{_short(self._before)!r} not found before any marker {self.marker!r}")
        if self._after is not None and not self._near(markdown, spans, self._after, before=False):
            failures.append(f"{_short(self._after)!r} not found after any marker {self.marker!r}")
        if failures:
            return False, "; ".join(failures)
        return True, f"footnote marker {self.marker!r} found ({len(spans)} occurrence(s)) with its context"

    def _near(self, markdown: str, spans: list[tuple[int, int]], target: str, *, before: bool) -> bool:
        clean_target = alnum_lower(target)
        threshold = _threshold(self.max_diffs, len(target))
        for start, end in spans:
            raw = markdown[max(0, start - _FOOTNOTE_WINDOW):start] if before else markdown[end:end + _FOOTNOTE_WINDOW]
            clean = alnum_lower(raw)
            if not clean:
                continue
            check_length = min(len(clean), len(clean_target) * 2)
            window = clean[-check_length:] if before else clean[:check_length]
            if len(window) < len(clean_target) - self.max_diffs:
                continue
            if fuzz.partial_ratio(clean_target, window) / 100.0 >= threshold:
                return True
        return False


# ---------------------------------------------------------------------------------------------
# registry and JSONL

TEST_CLASSES: dict[str, type[UnitTest]] = {
    "present": PresenceTest,
    "absent": PresenceTest,
    "order": OrderTest,
    "table": TableTest,
    "math": MathTest,
    "baseline": BaselineTest,
    "format": FormatTest,
    "footnote": FootnoteTest,
}


def _init_fields(cls: type[UnitTest]) -> list[Any]:
    return [f for f in fields(cls) if f.init]


def unit_test_from_dict(data: Mapping[str, Any], where: str = "<test>") -> UnitTest:
    """Build the test a JSON object describes; ``ValueError`` prefixed with ``where`` otherwise."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")  # noqa: TRY004
    kind = data.get("type")
    cls = TEST_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"{where}: unknown test type {kind!r} (expected one of {', '.join(TEST_TYPES)})")
    known = _init_fields(cls)
    names = {f.name for f in known}
    for key in data:
        if key not in names:
            raise ValueError(f"{where}: unknown field {key!r} for type {kind}")
    for f in known:
        if f.default is MISSING and f.default_factory is MISSING and f.name not in data:
            raise ValueError(f"{where}: missing field {f.name!r} for type {kind}")
    try:
        return cls(**data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc} (type {kind})") from None


def unit_test_to_dict(test: UnitTest) -> dict[str, Any]:
    """The test's fields as given (olmOCR-Bench names and order), ready for ``json.dumps``."""
    return {f.name: getattr(test, f.name) for f in _init_fields(type(test))}


def unit_test_to_json(test: UnitTest) -> str:
    """One JSONL line / one ``PageRecord.unit_tests`` entry."""
    return json.dumps(unit_test_to_dict(test), ensure_ascii=False)


def unit_test_from_json(line: str, where: str = "<test>") -> UnitTest:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: malformed JSON: {exc.msg} (column {exc.colno})") from None
    return unit_test_from_dict(data, where)


@dataclass
class LoadProblem:
    """A JSONL line that did not yield a test; ``data`` is the parsed object when it parsed."""

    where: str
    message: str  # starts with ``where``
    data: Any = None


def read_tests(path: str | Path) -> tuple[list[UnitTest], list[LoadProblem]]:
    """Every valid test of a JSONL file, and every problem (bad JSON, invalid test, duplicate id)."""
    tests: list[UnitTest] = []
    problems: list[LoadProblem] = []
    first_line: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            data = None
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(LoadProblem(where, f"{where}: malformed JSON: {exc.msg} (column {exc.colno})"))
                continue
            try:
                test = unit_test_from_dict(data, where)
            except ValueError as exc:
                problems.append(LoadProblem(where, str(exc), data))
                continue
            if test.id in first_line:
                problems.append(LoadProblem(
                    where, f"{where}: duplicate id {test.id!r} (first on line {first_line[test.id]})", data))
                continue
            first_line[test.id] = number
            tests.append(test)
    return tests, problems


def load_tests(path: str | Path) -> list[UnitTest]:
    """All tests of a JSONL file; the first problem raises ``ValueError`` naming file and line."""
    tests, problems = read_tests(path)
    if problems:
        raise ValueError(problems[0].message)
    return tests


def dump_tests(tests: Iterable[UnitTest], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(unit_test_to_json(test) + "\n" for test in tests)


def check_all(tests: Iterable[UnitTest], markdown: str,
              on_error: Callable[[UnitTest, Exception], None] | None = None) -> list[tuple[UnitTest, bool, str]]:
    """Run tests on one page; an exception becomes a failure whose explanation names it."""
    out = []
    for test in tests:
        try:
            passed, why = test.check(markdown)
        except Exception as exc:  # noqa: BLE001 - reported as a failure with its cause
            if on_error is not None:
                on_error(test, exc)
            passed, why = False, f"error: {type(exc).__name__}: {exc}"
        out.append((test, passed, why))
    return out
