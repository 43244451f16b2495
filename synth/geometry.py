"""A synthetic page's elements (``schemas.layout``) from the boxes the renderer measured.

The HTML renderer measures the DOM in Chromium (``synth.render_html.GEOMETRY_JS``): furniture
leaves outside ``main`` and, per block element of ``main > .col`` (one per block of the page's spec,
in column order), its parts with their boxes. Here each part gets its class and its text from the
spec's typed block, so class, box, reading order and content are exact by construction (the
NVpdftex idea of Nemotron-Parse, done in the browser): headings of level 1 are ``title``, others
``section_header``; each list item a ``list_item``; a table its ``caption`` then the ``table``; a
figure its ``picture`` then its ``caption``; display formulas ``formula``; footnotes ``footnote``;
the running header and footer ``page_header`` / ``page_footer``.
"""

from __future__ import annotations

from schemas.deadletter import RecordError
from schemas.layout import Element, element
from synth.blocks import Figure, Footnote, Formula, Heading, ListBlock, PageSpec, Paragraph, Table
from synth.reference import block_markdown
from synth.tables import table_html


def _column_blocks(spec: PageSpec) -> list:
    n = max(1, spec.columns)
    cols: list[list] = [[] for _ in range(n)]
    for pb in spec.blocks:
        cols[min(max(pb.column, 0), n - 1)].append(pb.block)
    return [b for col in cols for b in col]


def _parts(block, roles: list[str]) -> list[tuple[str, str]]:
    """(class, text) for each measured part of ``block``, in the order GEOMETRY_JS reports them."""
    if isinstance(block, Heading):
        return [("title" if block.level == 1 else "section_header", block_markdown(block))]
    if isinstance(block, ListBlock):
        lines = block_markdown(block).split("\n")
        return [("list_item", line) for line in lines]
    if isinstance(block, Table):
        return ([("caption", block.caption)] if block.caption else []) + [("table", table_html(block))]
    if isinstance(block, Figure):
        out = [("picture", "")] if "picture" in roles else []
        return out + ([("caption", block.caption)] if block.caption else [])
    if isinstance(block, Formula):
        return [("formula", block_markdown(block))]
    if isinstance(block, Footnote):
        return [("footnote", block_markdown(block))]
    if isinstance(block, Paragraph):
        return [("text", block.text)]
    raise TypeError(f"unknown block type {type(block).__name__}")


def page_elements(spec: PageSpec, geometry: dict, width: int, height: int) -> list[Element]:
    """The page's elements in reading order: header furniture, the blocks column by column (footnotes
    last, as drawn), footer furniture. ``RecordError("synth_geometry")`` when the DOM and the spec
    disagree (a part count that does not match the block)."""
    blocks = _column_blocks(spec)
    measured = geometry["blocks"]
    if len(measured) != len(blocks):
        raise RecordError("synth_geometry", f"{spec.id}: {len(measured)} block elements for {len(blocks)} blocks")
    out: list[tuple[str, list[float], str]] = []
    for above, box, text in geometry["furniture"]:
        if above:
            out.append(("page_header", box, text))
    for block, parts in zip(blocks, measured):
        roles = [role for role, _ in parts]
        typed = _parts(block, roles)
        if len(typed) != len(parts):
            raise RecordError("synth_geometry", f"{spec.id}: {type(block).__name__} drawn as {roles}")
        out.extend((cls, box, text) for (cls, text), (_, box) in zip(typed, parts))
    for above, box, text in geometry["furniture"]:
        if not above:
            out.append(("page_footer", box, text))
    elements: list[Element] = []
    for cls, (x0, y0, x1, y1), text in out:
        box = (max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1))
        if box[2] - box[0] < 0.5 or box[3] - box[1] < 0.5:
            continue  # nothing drawn (an empty leaf)
        elements.append(element(cls, box, len(elements), text))
    return elements


def line_elements(geometry: dict, width: int, height: int) -> list[Element]:
    """``text_line`` elements from a text layer's line boxes (LaTeX pages: pdfium on pdflatex's PDF)."""
    elements: list[Element] = []
    for x0, y0, x1, y1, text in geometry["lines"]:
        box = (max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1))
        if box[2] - box[0] >= 0.5 and box[3] - box[1] >= 0.5:
            elements.append(element("text_line", box, len(elements), text))
    return elements


def rendered_elements(spec: PageSpec, geometry: dict | None, width: int, height: int) -> list[Element]:
    """Elements of a rendered page: DOM boxes (HTML), text-layer lines (LaTeX), none without geometry."""
    if not geometry:
        return []
    if "lines" in geometry:
        return line_elements(geometry, width, height)
    return page_elements(spec, geometry, width, height)
