"""Reference Markdown of a synthetic page, derived from its ``PageSpec`` (exact by construction).

Conventions (olmOCR-Bench / Jina-OCR-v1 section 5.2):

* blocks in reading order, column by column; page furniture (header, footer, page number) omitted;
* headings as ATX ``#``; paragraphs as given (inline math ``\\( \\)``, ``**bold**``, ``[^m]`` markers);
* display formulas as ``\\[ latex \\]`` on their own line, non-display ``Formula`` blocks as ``\\( latex \\)``;
* tables as the reference HTML (``synth.tables.table_html``), caption on the line before;
* lists as ``- item`` / ``1. item``; figures by their caption;
* footnotes as ``[^m]: text`` at the end of the page.
"""

from __future__ import annotations

from synth.blocks import (
    Block,
    Figure,
    Footnote,
    Formula,
    Heading,
    ListBlock,
    PageSpec,
    Paragraph,
    Table,
)
from synth.tables import table_html


def block_markdown(block: Block) -> str:
    """One body block as Markdown (footnotes as their definition line)."""
    if isinstance(block, Heading):
        return "#" * max(1, min(6, block.level)) + " " + block.text
    if isinstance(block, Paragraph):
        return block.text
    if isinstance(block, Formula):
        latex = block.latex.strip()
        return f"\\[ {latex} \\]" if block.display else f"\\( {latex} \\)"
    if isinstance(block, Table):
        html = table_html(block)
        return f"{block.caption}\n\n{html}" if block.caption else html
    if isinstance(block, ListBlock):
        if block.ordered:
            return "\n".join(f"{i}. {item}" for i, item in enumerate(block.items, start=1))
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Figure):
        return block.caption
    if isinstance(block, Footnote):
        return f"[^{block.marker}]: {block.text}"
    raise TypeError(f"unknown block type {type(block).__name__}")


def reading_order(spec: PageSpec) -> list[Block]:
    """Body blocks (footnotes excluded) column by column, keeping the spec's order within a column."""
    placed = sorted(enumerate(spec.blocks), key=lambda ib: (ib[1].column, ib[0]))
    return [p.block for _, p in placed if not isinstance(p.block, Footnote)]


def reference_markdown(spec: PageSpec, order: list[Block] | None = None) -> str:
    """The page's reference Markdown: body blocks separated by blank lines, then footnote definitions.

    ``order``: the page's ``reading_order`` when the caller has it already (computed here otherwise)."""
    parts = [block_markdown(b) for b in (reading_order(spec) if order is None else order)]
    notes = [p.block for p in spec.blocks if isinstance(p.block, Footnote)]
    if notes:
        parts.append("\n".join(block_markdown(n) for n in notes))
    return "\n\n".join(parts) + "\n"
