"""Response conventions: deterministic rewrites of one record's structured content (Jina-OCR-v1 4.3).

A record's response in the corpus convention (``markdown``: Markdown, LaTeX math in ``\\( \\)`` /
``\\[ \\]``, HTML tables) is rewritten into another convention from the record alone: its response
and, for the box conventions, its ``elements`` (``schemas.layout``). ``CONVENTIONS`` lists them:

* ``markdown``: unchanged (today's corpus convention);
* ``plain``: plain text: no heading marks, emphasis or footnote markers, formulas as bare LaTeX,
  table rows as tab-separated cells, HTML as text (``<br>`` and block tags line breaks, ``<sup>`` /
  ``<sub>`` as ``^`` / ``_``, entities their characters);
* ``markdown_tables``: tables as GitHub pipe tables (a spanned cell's text in its first position; bold
  and italic in a cell as ``**..**`` / ``*..*``);
* ``latex_tables``: tables as ``tabular`` with ``\\multicolumn`` / ``\\multirow`` (``\\textbf{}`` /
  ``\\textit{}`` in a cell);
* ``nemotron_md_bbox_cls``, ``nemotron_plain_bbox``, ``nemotron_bbox_cls``: Nemotron-Parse's box
  stream ``<x_..><y_..>text<x_..><y_..><class_..>`` on its 1024 x 1280 grid, in reading order:
  Markdown text with boxes and classes (its maximal-information prompt), plain text with boxes and
  no classes, and boxes with classes and no text (the three combinations with boxes);
* ``json_layout``: ``{"width", "height", "elements": [{"class", "bbox", "text"}]}``, boxes in pixels.

``KEPT_TESTS`` says which olmOCR-Bench test types each convention keeps the structure of, and
``checkable`` turns a response back into the text those tests read (a box stream's text parts, in
order); ``kept_tests`` keeps only kept-type tests that pass on it, which is what ``model.eval`` and
``model.rewards`` score (a record's convention is in ``metadata["instruct"]``). Box conventions lay
out the page's furniture too, so they do not keep ``absent`` tests (which say headers and footers are
left out).

A table nested in another table has no pipe-table or ``tabular`` form: the table conventions do not
apply to a response that holds one (``applicable``), and ``plain`` writes the inner table's cells as
text of the outer cell.
"""

from __future__ import annotations

import html
import html.entities
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from pipelines.clean.conventions import mask_code_and_math, strip_formula_delimiters, unmask
from schemas.layout import Element, grid_box, nemotron_class
from schemas.tables import Table, parse_html_tables, place_cells
from schemas.unit_tests import passing_tests, unit_test_from_json, unit_test_to_json

CONVENTIONS: tuple[str, ...] = (
    "markdown", "plain", "markdown_tables", "latex_tables",
    "nemotron_md_bbox_cls", "nemotron_plain_bbox", "nemotron_bbox_cls", "json_layout",
)
BOX_CONVENTIONS = ("nemotron_md_bbox_cls", "nemotron_plain_bbox", "nemotron_bbox_cls", "json_layout")
CLASS_CONVENTIONS = ("nemotron_md_bbox_cls", "nemotron_bbox_cls", "json_layout")  # need semantic classes
TABLE_CONVENTIONS = ("markdown_tables", "latex_tables")  # need a table in the response
RESPONSE_FORMAT = {"markdown": "markdown", "plain": "text", "markdown_tables": "markdown",
                   "latex_tables": "markdown", "nemotron_md_bbox_cls": "text", "nemotron_plain_bbox": "text",
                   "nemotron_bbox_cls": "text", "json_layout": "json"}
_TEXT_TESTS = ("present", "absent", "order", "baseline")
KEPT_TESTS: dict[str, tuple[str, ...]] = {
    "markdown": ("present", "absent", "order", "baseline", "table", "math", "format", "footnote"),
    "plain": _TEXT_TESTS,
    "markdown_tables": ("present", "absent", "order", "baseline", "table", "math", "format", "footnote"),
    "latex_tables": ("present", "absent", "order", "baseline", "math", "format", "footnote"),
    "nemotron_md_bbox_cls": ("present", "order", "baseline", "table", "math", "format", "footnote"),
    "nemotron_plain_bbox": ("present", "order", "baseline"),
    "nemotron_bbox_cls": (),
    "json_layout": ("present", "order", "baseline", "table", "math", "format", "footnote"),
}

_TABLE_TAG = re.compile(r"<(/?)table\b[^>]*>", re.IGNORECASE)
# Only tags of HTML elements a transcription holds: in "x<y and y>z" the brackets are text.
_HTML_TAGS = ("a|abbr|b|big|blockquote|br|caption|center|cite|code|col|colgroup|dd|del|div|dl|dt|em|figcaption|"
              "figure|font|h[1-6]|hr|i|img|ins|kbd|li|mark|ol|p|pre|q|s|samp|small|span|strike|strong|sub|sup|"
              "table|tbody|td|tfoot|th|thead|tr|tt|u|ul|var")
# Real tag syntax only: a tag name, then attributes that are well formed (``name=value``, or one of a few
# boolean names), so "a<b or b>c" and "1<p and p>0" are text (``or``, ``and`` are no attributes).
_BOOLEAN_ATTRS = "nowrap|hidden|compact|reversed|noshade|open|checked|disabled|selected|readonly"
_ATTRS = (r"(?:\s+(?:[A-Za-z_:][-\w:.]*\s*=\s*(?:\"[^\"<>]*\"|'[^'<>]*'|[^\s\"'=<>`]+)"
          rf"|(?:{_BOOLEAN_ATTRS})(?=[\s/>])))*")


def _tag_re(names: str) -> re.Pattern[str]:
    """An opening (attributes, optional ``/``) or closing tag of one of ``names``."""
    return re.compile(rf"<(?:(?:{names}){_ATTRS}\s*/?|/(?:{names})\s*)>", re.IGNORECASE)


_TAG = _tag_re(_HTML_TAGS)
_BR = re.compile(rf"(?<![ \t])[ \t]*{_tag_re('br').pattern}[ \t]*", re.IGNORECASE)  # (?<!): linear in spaces
# block elements end a line; a run of them (and the whitespace around it) is one line break, or a blank
# line where the text already had one
_BLOCK_TAGS = ("p|div|li|h[1-6]|tr|table|thead|tbody|tfoot|caption|ul|ol|dl|dt|dd|blockquote|pre|figure|"
               "figcaption|center|hr")
_BLOCK_RUN = re.compile(rf"(?<!\s)\s*(?:{_tag_re(_BLOCK_TAGS).pattern}\s*)+", re.IGNORECASE)
# an innermost <sup>/<sub> element; its text holds no other sup/sub tag, so that an unclosed one is
# searched only up to the next (linear time); ``_script`` writes the ones inside first
_SCRIPT = re.compile(rf"<(sup|sub){_ATTRS}\s*>((?:[^<]|<(?!/?su[bp]\b))*)</\1\s*>", re.IGNORECASE)
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")  # with its ';'
_EMPHASIS_TAG = re.compile(rf"<(?:(b|strong|i|em){_ATTRS}\s*|/(b|strong|i|em)\s*)>", re.IGNORECASE)
_HEADING = re.compile(r"^#{1,6}\s+", re.MULTILINE)
_EMPH = re.compile(r"\*\*(.+?)\*\*|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", re.DOTALL)
_MARKER = re.compile(r"\[\^([^\]\s]+)\](:?)")
_STREAM = re.compile(r"<x_(\d+)><y_(\d+)>(.*?)<x_(\d+)><y_(\d+)>(<class_[^>]+>)?", re.DOTALL)


@dataclass(frozen=True)
class Rewrite:
    response: str
    response_format: str
    convention: str


def applicable(convention: str, response: str, elements: list[Element]) -> bool:
    """Whether ``convention`` says something of this record: box conventions need elements (classed
    ones semantic classes, not only text-layer lines), table conventions a table."""
    if convention in BOX_CONVENTIONS and not elements:
        return False
    if convention in CLASS_CONVENTIONS and all(e.cls == "text_line" for e in elements):
        return False
    if convention in TABLE_CONVENTIONS and ("<table" not in response.lower()
                                            or any(nested for _, _, nested in table_spans(response))):
        return False  # a table inside a table has no pipe-table or tabular form
    return convention in CONVENTIONS


def table_spans(text: str) -> list[tuple[int, int, bool]]:
    """``(start, end, nested)`` of each outermost ``<table>..</table>`` of ``text``, found by counting
    the depth of table tags (a non-greedy match would end at a nested table's ``</table>``); ``nested``:
    it holds another table. An unclosed table has no span; a stray ``</table>`` is skipped."""
    spans: list[tuple[int, int, bool]] = []
    depth, start, nested = 0, 0, False
    for m in _TABLE_TAG.finditer(text):
        if not m.group(1):
            if depth == 0:
                start, nested = m.start(), False
            nested = nested or depth > 0
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                spans.append((start, m.end(), nested))
    return spans


def _cell_text(text: str) -> str:
    return " ".join(text.split())


# Inline emphasis inside a table cell: ``_tables_as(..., emphasis=True)`` writes <b>/<strong> and <i>/<em>
# as these marks before the cells are parsed (a valid response holds no NUL), so that a cell's text
# keeps them; ``_cell_runs`` reads them back as nested runs.
_EMPHASIS_KIND = {"b": "B", "strong": "B", "i": "I", "em": "I"}
_MARK_TOKEN = re.compile(r"\x00(/?)([BI])")  # \x00B opens a bold span, \x00/B closes it


def _mark_emphasis(html_text: str) -> str:
    def mark(m: re.Match[str]) -> str:
        return "\x00" + ("" if m.group(1) else "/") + _EMPHASIS_KIND[(m.group(1) or m.group(2)).lower()]

    return _EMPHASIS_TAG.sub(mark, html_text.replace("\x00", ""))


def _cell_runs(text: str) -> list:
    """A cell's text as runs: strings and ``(kind, runs)`` for its bold (``B``) and italic (``I``)
    spans. A close without its open is dropped, one that closes an outer span closes the spans
    inside it, and a span left open ends with the cell (as HTML ends it); a span inside one of the
    same kind adds no mark and no run (so runs nest two deep at most, however deep the tags)."""
    root: list = []
    stack: list[tuple[str | None, list]] = [(None, root)]
    inner_same = {"B": 0, "I": 0}  # spans opened inside one of their kind, not yet closed
    pos = 0
    for m in _MARK_TOKEN.finditer(text):
        if m.start() > pos:
            stack[-1][1].append(text[pos:m.start()])
        pos = m.end()
        kind = m.group(2)
        is_open = any(k == kind for k, _ in stack[1:])
        if not m.group(1):
            if is_open:
                inner_same[kind] += 1
                continue
            node: tuple[str, list] = (kind, [])
            stack[-1][1].append(node)
            stack.append(node)
        elif inner_same[kind]:
            inner_same[kind] -= 1
        elif is_open:
            while stack.pop()[0] != kind:
                pass
    if pos < len(text):
        stack[-1][1].append(text[pos:])
    return root


def _render_runs(runs: list, text_fn: Callable[[str], str], wrap: Callable[[str, str], str],
                 open_kinds: tuple[str, ...] = ()) -> str:
    """``runs`` written with ``text_fn`` for text and ``wrap(kind, inner)`` for a span; a span's
    outer whitespace goes outside its marks, an empty span is its text only."""
    out = []
    for run in runs:
        if isinstance(run, str):
            out.append(text_fn(run))
            continue
        kind, inner_runs = run
        inner = _render_runs(inner_runs, text_fn, wrap, (*open_kinds, kind))
        core = inner.strip()
        if not core or kind in open_kinds:
            out.append(inner)
        else:
            lead, trail = inner[: len(inner) - len(inner.lstrip())], inner[len(inner.rstrip()):]
            out.append(lead + wrap(kind, core) + trail)
    return "".join(out)


def _markdown_cell(text: str) -> str:
    """A pipe-table cell: ``|`` escaped, bold as ``**..**``, italic as ``*..*``."""
    return _render_runs(_cell_runs(_cell_text(text)), lambda t: t.replace("|", "\\|"),
                        lambda kind, inner: f"**{inner}**" if kind == "B" else f"*{inner}*").strip()


def _latex_cell(text: str) -> str:
    """A ``tabular`` cell: text escaped (``_latex_escape``), bold as ``\\textbf{}``, italic as ``\\textit{}``."""
    return _render_runs(_cell_runs(_cell_text(text)), _latex_escape,
                        lambda kind, inner: f"\\textbf{{{inner}}}" if kind == "B" else f"\\textit{{{inner}}}").strip()


def table_markdown(table: Table) -> str:
    """A GFM pipe table: the first row is the header; a spanned cell's text in its first position."""
    placed = place_cells(table.rows)
    n_rows = max((r for r, _ in placed), default=-1) + 1
    n_cols = max((c for _, c in placed), default=-1) + 1
    grid = [["" for _ in range(n_cols)] for _ in range(n_rows)]
    for (r, c), (cell, dr, dc) in placed.items():
        if dr == 0 and dc == 0:
            grid[r][c] = _markdown_cell(cell.text)
    lines = ["| " + " | ".join(row) + " |" for row in grid]
    if lines:
        lines.insert(1, "|" + "|".join("---" for _ in range(n_cols)) + "|")
    return "\n".join(lines)


_LATEX_SPECIALS = {"\\": "\\textbackslash{}", "^": "\\^{}", "~": "\\~{}", **{c: "\\" + c for c in "&%$#_{}"}}
_LATEX_SPECIAL = re.compile(r"[\\^~&%$#_{}]")


def _latex_text(text: str) -> str:
    """Text as LaTeX prints it; one pass, so the braces of ``\\textbackslash{}`` are not escaped again."""
    return _LATEX_SPECIAL.sub(lambda m: _LATEX_SPECIALS[m.group(0)], text)


# CommonMark: a backslash before ASCII punctuation writes that character (\[12\] is "[12]", \* a star)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def _latex_escape(text: str) -> str:
    """Escape LaTeX specials outside math; every formula becomes inline math (a cell is one line of a
    ``tabular``). Formulas are found as the ``conventions`` stage finds them; code is text here, and a
    Markdown escape the character it escapes."""
    masked, code, formulas = mask_code_and_math(text.replace("\x00", ""))
    prose = _latex_text(_ESCAPE.sub(r"\1", masked))
    return unmask(prose, [_latex_text(c) for c in code], [f"${f.body.strip()}$" for f in formulas])


def table_latex(table: Table) -> str:
    """A ``tabular`` with ``\\multicolumn{n}{c}{..}`` and ``\\multirow{n}{*}{..}``; one column spec per
    grid column, ``\\hline`` after a header row."""
    placed = place_cells(table.rows)
    n_cols = max((c for _, c in placed), default=-1) + 1
    lines = [f"\\begin{{tabular}}{{{'l' * n_cols}}}"]
    for r, row in enumerate(table.rows):
        parts, c = [], 0
        while c < n_cols:
            cell, dr, dc = placed.get((r, c), (None, 0, 0))
            if cell is None:
                parts.append("")
                c += 1
                continue
            span = max(1, cell.colspan)
            text = "" if dr else _latex_cell(cell.text)
            if dr == 0 and cell.rowspan > 1:
                text = f"\\multirow{{{cell.rowspan}}}{{*}}{{{text}}}"
            if span > 1:
                text = f"\\multicolumn{{{span}}}{{c}}{{{text}}}"
            parts.append(text)
            c += span - dc
        lines.append(" & ".join(parts) + " \\\\" + (" \\hline" if row and all(x.header for x in row) else ""))
    lines.append("\\end{tabular}")
    return "\n".join(lines)


def table_plain(table: Table) -> str:
    return "\n".join("\t".join(_cell_text(_MARK_TOKEN.sub("", c.text)) for c in row) for row in table.rows)


def _outer_table(html: str) -> Table | None:
    """The outermost table of one ``table_spans`` span; a table nested in it is text of its outer
    cell there (``schemas.tables``' standard reading)."""
    tables = parse_html_tables(html)
    return tables[0] if tables else None  # in document order: the span starts with its outer table


def _tables_as(response: str, fn: Callable[[Table], str], flatten: bool = False, emphasis: bool = False) -> str:
    """``response`` with each outermost HTML table written by ``fn``. A table holding another table
    has no pipe-table or ``tabular`` form: it stays HTML unless ``flatten`` (its text in the outer cell).
    ``emphasis``: the cells' text keeps their bold and italic spans as marks (``_cell_runs``), which
    ``table_markdown`` and ``table_latex`` write; not for masked text (its placeholders hold NULs)."""
    out, pos = [], 0
    for start, end, nested in table_spans(response):
        html_table = response[start:end]
        table = _outer_table(_mark_emphasis(html_table) if emphasis else html_table) if flatten or not nested else None
        out += [response[pos:start], fn(table) if table is not None else html_table]
        pos = end
    return "".join(out) + response[pos:]


def _scripts(text: str) -> str:
    """Every ``<sup>x</sup>`` as ``^x`` and ``<sub>x</sub>`` as ``_x``: braces around more than one
    character (``10<sup>-3</sup>`` -> ``10^{-3}``), as a formula writes them; innermost first
    (``<sup>2<sub>i</sub></sup>`` -> ``^{2_i}``), tags inside dropped."""
    for _ in range(8):  # nesting depth
        text, n = _SCRIPT.subn(_script, text)
        if not n:
            break
    return text


def _script(m: re.Match[str]) -> str:
    body = " ".join(_TAG.sub("", m.group(2)).split())
    if not body:
        return ""
    mark = "^" if m.group(1).lower() == "sup" else "_"
    return mark + (body if len(body) == 1 else "{" + body + "}")


def _entity(m: re.Match[str]) -> str:
    """A character reference as its character; a name HTML does not define stays text (``&parameter;``
    is no ``&para;``)."""
    ref = m.group(0)
    if ref[1] == "#":
        return html.unescape(ref)
    return html.entities.html5.get(ref[1:], ref)


def _block_break(m: re.Match[str]) -> str:
    return "\n\n" if m.group(0).count("\n") >= 2 else "\n"


def _html_as_text(text: str) -> str:
    """HTML inside prose as plain text, once ``_scripts`` wrote ``<sup>``/``<sub>``: ``<br>`` a line break,
    a run of block tags (``p``, ``div``, ``li``, ``h1``-``h6``, ``tr``, ``table``, lists, ``blockquote``,
    ...) one line break (a blank line where the text had one), other tags dropped, and character
    references (``&amp;``, ``&#8212;``; with their ``;``) as their characters. Only real tag syntax is a
    tag: in ``a<b or b>c`` the brackets are text."""
    text = _BR.sub("\n", text)
    text = _BLOCK_RUN.sub(_block_break, text)
    text = _TAG.sub("", text)
    return _ENTITY.sub(_entity, text)


def plain_text(markdown: str) -> str:
    """Markdown -> plain text: tables as tab-separated rows (a nested table's cells as text of its
    outer cell), heading marks, emphasis and footnote markers removed (a footnote definition keeps
    its marker as ``m``), HTML as text (``_html_as_text``: line breaks for ``<br>`` and block tags,
    ``^``/``_`` for ``<sup>``/``<sub>``, entities as characters), Markdown escapes written as the
    character they escape, formulas as bare LaTeX; code as it is. Code and formulas are found as the
    ``conventions`` stage finds them (``pipelines.clean.conventions.mask_code_and_math``). A NUL never
    occurs in a valid response (``schemas.page.validate``); any other is dropped, so that none poses
    as a placeholder."""
    text, code, formulas = mask_code_and_math(markdown.replace("\x00", ""))
    escaped: list[str] = []
    text = _ESCAPE.sub(lambda m: escaped.append(m.group(1)) or f"\x00E{len(escaped) - 1}\x00", text)
    text = _scripts(text)  # before the tables, whose cells' tags the table parser drops
    # a cell's text is already decoded (entities, tags): escaped again, so that the HTML pass keeps it
    text = _tables_as(text, lambda table: html.escape(table_plain(table), quote=False), flatten=True)
    text = _HEADING.sub("", text)
    for _ in range(2):  # nested emphasis
        text = _EMPH.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)
    text = _MARKER.sub(lambda m: m.group(1) if m.group(2) else "", text)
    text = _html_as_text(text)
    text = re.sub(r"\x00E(\d+)\x00", lambda m: escaped[int(m.group(1))], text)
    text = unmask(text, code, [f.body.strip() for f in formulas])
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def _element_text(el: Element, plain: bool) -> str:
    text = el.text.strip()
    return plain_text(text).strip() if plain and text else text


def nemotron_stream(elements: list[Element], width: int, height: int, text: str | None, classes: bool) -> str:
    """Nemotron-Parse's output: per element ``<x_a><y_b>text<x_c><y_d>`` (top-left, bottom-right on
    the 1024 x 1280 grid) then ``<class_Name>`` when ``classes``; ``text``: ``"markdown"``,
    ``"plain"`` or None (no text); one element per line, in reading order."""
    lines = []
    for el in elements:
        x0, y0, x1, y1 = grid_box(el, width, height)
        body = "" if text is None else _element_text(el, text == "plain")
        cls = f"<class_{nemotron_class(el.cls)}>" if classes else ""
        lines.append(f"<x_{x0}><y_{y0}>{body}<x_{x1}><y_{y1}>{cls}")
    return "\n".join(lines) + "\n"


def json_layout(elements: list[Element], width: int, height: int) -> str:
    items = [{"class": el.cls, "bbox": [round(el.x0), round(el.y0), round(el.x1), round(el.y1)], "text": el.text}
             for el in elements]
    return json.dumps({"width": width, "height": height, "elements": items}, ensure_ascii=False)


def rewrite(convention: str, response: str, elements: list[Element], width: int, height: int) -> Rewrite:
    """``response`` (corpus Markdown) in ``convention``; ``ValueError`` when it does not apply."""
    if not applicable(convention, response, elements):
        raise ValueError(f"convention {convention!r} does not apply to this record")
    if convention == "markdown":
        out = response
    elif convention == "plain":
        out = plain_text(response)
    elif convention == "markdown_tables":
        out = _tables_as(response, table_markdown, emphasis=True)
    elif convention == "latex_tables":
        out = _tables_as(response, table_latex, emphasis=True)
    elif convention == "nemotron_md_bbox_cls":
        out = nemotron_stream(elements, width, height, "markdown", True)
    elif convention == "nemotron_plain_bbox":
        out = nemotron_stream(elements, width, height, "plain", False)
    elif convention == "nemotron_bbox_cls":
        out = nemotron_stream(elements, width, height, None, True)
    else:
        out = json_layout(elements, width, height)
    return Rewrite(out, RESPONSE_FORMAT[convention], convention)


NO_CONVENTION = "-"  # records without a recorded response convention (the instruct stage did not run)
# Formula crops (task transcribe_formula) answer one bare formula; their ``math`` tests read it as a display
# equation (``checkable``).
FORMULA_CONVENTION = "latex_formula"


def record_convention(metadata: str | dict | None) -> str:
    """The response convention a record's ``metadata["instruct"]`` names (``NO_CONVENTION`` if none)."""
    if isinstance(metadata, str):
        metadata = json.loads(metadata or "{}")
    return ((metadata or {}).get("instruct") or {}).get("convention") or NO_CONVENTION


def checkable(convention: str | None, response: str) -> str:
    """The text a unit test reads in a response of ``convention``: the response itself, or a box
    stream's / JSON layout's element texts in order, separated by blank lines. ``model.eval`` and
    ``model.rewards`` score a completion's tests on this text too, so a model's output need not be
    well formed: JSON that does not parse as a layout (a truncated completion) is read as it is, and a
    box stream's text is whatever its complete ``<x_><y_>text<x_><y_>`` groups hold. A bare formula
    (``FORMULA_CONVENTION``) is read as one display equation (its own delimiters, if a completion wrote
    any, taken off first). Any other convention (``None``, ``markdown``, unknown) reads the response as it is."""
    if convention == FORMULA_CONVENTION:
        return f"\\[ {strip_formula_delimiters(response)} \\]\n"
    if convention == "json_layout":
        try:
            elements = json.loads(response)["elements"]
            texts = [e["text"] for e in elements if e["text"]]
        except (ValueError, TypeError, KeyError):
            return response
        if all(isinstance(t, str) for t in texts):
            return "\n\n".join(texts) + "\n"
        return response
    if convention in BOX_CONVENTIONS:
        return "\n\n".join(m.group(3) for m in _STREAM.finditer(response) if m.group(3)) + "\n"
    return response


def adapt_test(convention: str, line: str) -> str | None:
    """A page test as it applies to a response of ``convention`` (JSON line), or None when the
    convention does not keep its type. Table tests read Markdown tables under ``markdown_tables``."""
    test = unit_test_from_json(line)
    if test.type not in KEPT_TESTS[convention]:
        return None
    if convention == "markdown_tables" and test.type == "table" and getattr(test, "ignore_markdown_tables", False):
        return unit_test_to_json(replace(test, ignore_markdown_tables=False))
    return line


def kept_tests(convention: str, tests: list[str], response: str, katex_cache: str | None = None) -> list[str]:
    """The page's tests adapted to ``convention`` that pass on the ``checkable`` text of ``response``
    (the rewrite), which is what ``model.eval`` and ``model.rewards`` score (``katex_cache``: where
    ``math`` tests cache their renders, ``passing_tests``)."""
    adapted = (adapt_test(convention, line) for line in tests)
    return passing_tests([line for line in adapted if line is not None], checkable(convention, response),
                         katex_cache)
