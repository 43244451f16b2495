"""The structured content of a synthetic page: typed blocks that templates render and that the
reference Markdown and the unit tests are derived from, so the ground truth is exact by
construction (JinaOCRSynth, Jina-OCR-v1 section 4.2).

A ``PageSpec`` is what one page shows: its layout kind, page furniture (running header, footer,
page number), and the body blocks in reading order, each assigned to a column. Renderers turn a
spec into pixels (HTML through Chromium, LaTeX through pdflatex); ``synth.reference`` turns the
same spec into the reference Markdown; ``synth.tests_from_blocks`` into olmOCR-Bench tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from synth.themes import Theme

if TYPE_CHECKING:  # planning imports blocks, not the chart drawing
    from synth.charts import Chart

# Page kinds, each with its template and content builder. The order is the planner's: page ``i`` of
# a run gets ``LAYOUTS[i % 8]`` (``synth.plan``), so reordering changes which page gets which layout.
LAYOUTS: tuple[str, ...] = ("report", "paper", "newspaper", "invoice", "form", "slides", "blog", "infographic")
# What a page tests, by the structure inserted into it; page ``i`` gets ``SUITES[i % 3]`` under suite ``all``.
SUITES: tuple[str, ...] = ("layout", "formula", "table")


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2  # 1..4, Markdown '#' count


@dataclass(frozen=True)
class Paragraph:
    text: str  # plain text; inline math as \( ... \) and emphasis as **bold** / *italic* allowed


@dataclass(frozen=True)
class Formula:
    latex: str  # without delimiters
    display: bool = True
    category: str = ""  # e.g. accent, font, matrix, macro, unicode (the formula suite's label)


@dataclass(frozen=True)
class TableCell:
    text: str
    rowspan: int = 1
    colspan: int = 1
    header: bool = False


@dataclass(frozen=True)
class Table:
    rows: tuple[tuple[TableCell, ...], ...]
    caption: str = ""
    style: str = "ruled"  # ruled | borderless | grid
    category: str = ""  # e.g. spanned, dense_numeric, transposed, borderless, empty_cells, checkbox

    @property
    def cell_count(self) -> int:
        """Cells as written (a spanning cell counts once): the measure of a table page's density goal."""
        return sum(len(row) for row in self.rows)


@dataclass(frozen=True)
class ListBlock:
    items: tuple[str, ...]
    ordered: bool = False


@dataclass(frozen=True)
class Figure:
    caption: str
    kind: str = "picture"  # picture (synth.pictures) | chart (synth.charts) | placeholder (a drawn stand-in)
    image_png: bytes | None = None  # the picture, embedded as a data URI / included file by the renderers
    chart: Chart | None = None  # a chart's kind and colours: inline SVG in HTML, a PNG of the same shapes in LaTeX
    width_pct: int = 100  # drawn at this share of the column width (a figure shrunk to fit the page)


@dataclass(frozen=True)
class Footnote:
    marker: str  # e.g. "1"
    text: str


Block = Union[Heading, Paragraph, Formula, Table, ListBlock, Figure, Footnote]


@dataclass(frozen=True)
class Furniture:
    """Page furniture: shown on the page, absent from the reference (olmOCR-Bench convention)."""

    header: str = ""
    footer: str = ""
    page_number: str = ""


@dataclass(frozen=True)
class PlacedBlock:
    block: Block
    column: int = 0
    # Filler the renderer may leave out (or move to another column) to fill the page without
    # overflowing it; the spec a renderer returns has only the blocks it kept, none optional.
    optional: bool = False


@dataclass(frozen=True)
class PageSpec:
    id: str
    layout: str  # one of LAYOUTS
    suite: str  # one of SUITES
    language: str = "en"
    columns: int = 1
    width_px: int = 1024
    height_px: int = 1325  # US letter aspect at 1024 px wide
    furniture: Furniture = field(default_factory=Furniture)
    blocks: tuple[PlacedBlock, ...] = ()
    license: str = "cc0-1.0"
    seed: int = 0
    sources: tuple[str, ...] = ()  # provenance of bundled text (title + licence per item)
    theme: Theme | None = None  # fonts, colours, margins (synth.themes); None: the layouts' default look
