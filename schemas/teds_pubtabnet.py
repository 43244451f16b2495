"""TEDS as PubTabNet's own ``src/metric.py`` defines it (the ``"pubtabnet"`` TEDS convention).

The ``"omnidocbench"`` convention (``schemas.table_metrics``) scores a normalised table: thead and
tbody unwrapped, header cells labelled ``th``, cell whitespace collapsed. PubTabNet (IBM,
github.com/ibm-aur-nlp/PubTabNet) scores the HTML as written:

* HTML is parsed by lxml's HTML parser (``lxml.html``, comments removed), as PubTabNet does.
* Tree: every element below ``<table>`` is a node labelled by its tag (``thead``, ``tbody``,
  ``tr``, ``th``, ``caption`` ... as written). A ``<td>`` is a leaf labelled (td, colspan,
  rowspan) carrying its content as a token list: the characters of its text, and for each
  element inside it ``<tag>``, its text, its children, ``</tag>`` and its tail (tails of
  nested ``td`` are dropped, as PubTabNet does). Any other element, ``th`` included, carries no
  content and its child elements (``<b>`` in a ``<th>``) are tree nodes.
* Rename cost 1 when tag, colspan or rowspan differ; for two ``td`` the normalised Levenshtein
  distance of their token lists (0 when both are empty); 0 otherwise. Insert and delete 1.
* TEDS = 1 - TED / n, n = the larger count of elements below ``<table>`` (``.//*``: this counts
  elements inside ``td`` too, which are not tree nodes). TEDS-S: ``td`` contents left empty.

Where a page is scored rather than one table: the tables are those ``schemas.tables.parse_tables``
finds (the same finder as the ``"omnidocbench"`` convention), in document order (by start offset,
HTML and Markdown together): each HTML table not inside another table (PubTabNet takes
``body/table``) is its own text ``<table ...>...</table>`` parsed by lxml, each Markdown pipe table is
written as PubTabNet's annotations are (header row as ``<td>`` cells in ``<thead>``, the rest in
``<tbody>``). Two departures, both outside PubTabNet's own inputs:
two tables without any element score 1 (PubTabNet divides by zero), and ``teds_details`` clamps
the page score at 0 (``pubtabnet_teds`` returns the raw value, which can be negative).
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
from lxml import html as lxml_html

from schemas.edit_distance import distance_matrix, token_strings
from schemas.tables import Table, parse_tables
from schemas.tree_edit import Node, postorder_leftmost, tree_distance

_PARSER = lxml_html.HTMLParser(remove_comments=True, encoding="utf-8")


def _tokens(el: Any, out: list[str]) -> None:
    out.append(f"<{el.tag}>")
    out.extend(el.text or "")
    for child in el:
        _tokens(child, out)
    if el.tag != "unk":
        out.append(f"</{el.tag}>")
    if el.tag != "td":
        out.extend(el.tail or "")


def cell_tokens(td: Any) -> list[str]:
    """A ``<td>``'s content as PubTabNet tokenises it (its own tags and tail excluded)."""
    out: list[str] = list(td.text or "")
    for child in td:
        _tokens(child, out)
    return out


def _span_label(value: str) -> int:
    """A span attribute as PubTabNet labels it (``int(value)``); one that is not an integer, on which
    PubTabNet's ``metric.py`` raises, reads as a missing span (1)."""
    try:
        return int(value)
    except ValueError:
        return 1


def _tree(el: Any, structure_only: bool) -> Node:
    if el.tag == "td":
        colspan, rowspan = _span_label(el.attrib.get("colspan", "1")), _span_label(el.attrib.get("rowspan", "1"))
        return Node(("td", colspan, rowspan, () if structure_only else tuple(cell_tokens(el))))
    return Node((el.tag, None, None, None), [_tree(child, structure_only) for child in el])


def _rename_costs(nodes_a: list[Node], nodes_b: list[Node]) -> np.ndarray:
    """PubTabNet's ``CustomConfig.rename`` for every node pair, the Levenshtein distances of the
    ``td`` token lists computed at once (each distinct token mapped to one character)."""
    ids: dict[Any, int] = {}
    ka = np.array([ids.setdefault(n.label[:3], len(ids)) for n in nodes_a], dtype=np.int64)
    kb = np.array([ids.setdefault(n.label[:3], len(ids)) for n in nodes_b], dtype=np.int64)
    cost = np.where(ka[:, None] == kb[None, :], 0.0, 1.0)
    td_a = [i for i, n in enumerate(nodes_a) if n.label[0] == "td"]
    td_b = [j for j, n in enumerate(nodes_b) if n.label[0] == "td"]
    if td_a and td_b:
        strings = token_strings([nodes_a[i].label[3] for i in td_a] + [nodes_b[j].label[3] for j in td_b])
        dist = distance_matrix(strings[:len(td_a)], strings[len(td_a):])
        sub = np.ix_(td_a, td_b)
        cost[sub] = np.where(cost[sub] == 0.0, dist, 1.0)
    return cost


def element_count(table: Any) -> int:
    """PubTabNet's n: elements below the ``<table>`` element (``len(table.xpath('.//*'))``)."""
    return len(table.xpath(".//*"))


def pubtabnet_ted(pred: Any, true: Any, structure_only: bool = False) -> float:
    """Tree edit distance between two lxml ``<table>`` elements under PubTabNet's rules."""
    nodes_a, lml_a = postorder_leftmost(_tree(pred, structure_only))
    nodes_b, lml_b = postorder_leftmost(_tree(true, structure_only))
    if len(nodes_a) > len(nodes_b):  # symmetric costs: loop over the smaller tree
        nodes_a, lml_a, nodes_b, lml_b = nodes_b, lml_b, nodes_a, lml_a
    return tree_distance(lml_a, lml_b, _rename_costs(nodes_a, nodes_b))


def pubtabnet_teds(pred: Any, true: Any, structure_only: bool = False) -> float:
    """PubTabNet's TEDS of two lxml ``<table>`` elements, unclamped: 1 - TED / n (1 when n = 0)."""
    n = max(element_count(pred), element_count(true))
    if n == 0:
        return 1.0
    return 1.0 - pubtabnet_ted(pred, true, structure_only) / n


def markdown_table_html(table: Table) -> str:
    """A parsed table written as PubTabNet's annotations are: header rows' cells as ``<td>`` in
    ``<thead>``, the other rows in ``<tbody>``, spans only when > 1."""
    def row_html(row) -> str:
        cells = []
        for cell in row:
            attrs = "".join(f' {k}="{v}"' for k, v in (("colspan", cell.colspan), ("rowspan", cell.rowspan)) if v > 1)
            cells.append(f"<td{attrs}>{html.escape(cell.text, quote=False)}</td>")
        return "<tr>" + "".join(cells) + "</tr>"

    n_head = 0
    while n_head < len(table.rows) and table.rows[n_head] and all(c.header for c in table.rows[n_head]):
        n_head += 1
    head, body = table.rows[:n_head], table.rows[n_head:]
    out = "<table>"
    if head:
        out += "<thead>" + "".join(row_html(r) for r in head) + "</thead>"
    if body:
        out += "<tbody>" + "".join(row_html(r) for r in body) + "</tbody>"
    return out + "</table>"


def parse_document_tables(text: str, tables: list[Table] | tuple[Table, ...] | None = None) -> list[Any]:
    """The page's tables as lxml ``<table>`` elements, in document order: of ``parse_tables(text)``
    (or ``tables``, already parsed from ``text``), each HTML table not nested in another, its text
    ``text[start:end]`` parsed by lxml, and each Markdown pipe table rendered by ``markdown_table_html``.
    A text with no ``|`` holds no Markdown table: lxml parses it whole (the same tables, in the same order,
    without the standard reading's parse first)."""
    if tables is None and "|" not in text:
        return lxml_html.document_fromstring(text, parser=_PARSER).xpath("//table[not(ancestor::table)]") \
            if "<table" in text.lower() else []
    out: list[Any] = []
    for table in parse_tables(text) if tables is None else tables:
        if table.source == "markdown":
            doc = lxml_html.document_fromstring(markdown_table_html(table), parser=_PARSER)
            out += doc.xpath("body/table")
        elif table.depth == 0:
            doc = lxml_html.document_fromstring(text[table.start:table.end], parser=_PARSER)
            out += doc.xpath("//table[not(ancestor::table)]")
    return out


__all__ = ["cell_tokens", "element_count", "markdown_table_html", "parse_document_tables", "pubtabnet_ted",
           "pubtabnet_teds"]
