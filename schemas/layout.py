"""Page geometry: the elements of a page with their box, class and reading order (``PageRecord.elements``).

One enum of element classes (``ELEMENT_CLASSES``, Nemotron-Parse's taxonomy in snake case, plus
``text_line`` for the untyped line boxes a PDF text layer gives). Boxes are ``x0, y0, x1, y1`` in
pixels of the record's own image (origin top left, ``x0 < x1``, ``y0 < y1``, inside the image),
``order`` is the reading order (0, 1, 2, ... in list order) and ``text`` the element's content in the
record's reference conventions (Markdown; tables as HTML; display formulas as ``\\[ \\]``; a picture
has none). Synthetic HTML pages get them from the DOM at render time (exact by construction),
PDF pages with a text layer get pdfium's line boxes, classless. ``nemotron_class`` and
``grid_box`` give the Nemotron-Parse spellings (``<class_Section-Header>``, a 1024 x 1280 grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

ELEMENT_CLASSES: tuple[str, ...] = (
    "title", "section_header", "text", "list_item", "table", "formula", "caption", "picture",
    "page_header", "page_footer", "footnote", "text_line",
)
# Nemotron-Parse's class names (3.4.3 of the seed); text_line has none there (a box without class).
_NEMOTRON = {"title": "Title", "section_header": "Section-Header", "text": "Text", "list_item": "List-Item",
             "table": "Table", "formula": "Formula", "caption": "Caption", "picture": "Picture",
             "page_header": "Page-Header", "page_footer": "Page-Footer", "footnote": "Footnote",
             "text_line": "Text"}
GRID = (1024, 1280)  # Nemotron-Parse's coordinate grid (width, height)

ELEMENT_TYPE = pa.struct([("cls", pa.string()), ("x0", pa.float64()), ("y0", pa.float64()),
                          ("x1", pa.float64()), ("y1", pa.float64()), ("order", pa.int32()),
                          ("text", pa.string())])


@dataclass(frozen=True)
class Element:
    """One element of a page: class, box in image pixels, reading-order index, content."""

    cls: str
    x0: float
    y0: float
    x1: float
    y1: float
    order: int
    text: str = ""

    @property
    def box(self) -> tuple[float, float, float, float]:
        return (self.x0, self.y0, self.x1, self.y1)

    def to_row(self) -> dict[str, Any]:
        return {"cls": self.cls, "x0": self.x0, "y0": self.y0, "x1": self.x1, "y1": self.y1,
                "order": self.order, "text": self.text}

    @classmethod
    def from_row(cls, row: dict[str, Any] | Element) -> Element:
        if isinstance(row, Element):
            return row
        return cls(str(row["cls"]), float(row["x0"]), float(row["y0"]), float(row["x1"]), float(row["y1"]),
                   int(row["order"]), str(row.get("text") or ""))


def element(cls: str, box: tuple[float, float, float, float] | list[float], order: int, text: str = "") -> Element:
    """An ``Element`` with its box rounded to 0.01 px (stable bytes across runs)."""
    x0, y0, x1, y1 = box
    return Element(cls, round(float(x0), 2), round(float(y0), 2), round(float(x1), 2), round(float(y1), 2), order, text)


def nemotron_class(cls: str) -> str:
    return _NEMOTRON[cls]


def grid_box(el: Element, width: int, height: int) -> tuple[int, int, int, int]:
    """The element's box on Nemotron-Parse's 1024 x 1280 grid (integers, clamped)."""
    gx, gy = GRID

    def q(v: float, size: int, g: int) -> int:
        return max(0, min(g, round(v / size * g)))

    return (q(el.x0, width, gx), q(el.y0, height, gy), q(el.x1, width, gx), q(el.y1, height, gy))


def scale_elements(elements: list[Element], sx: float, sy: float) -> list[Element]:
    """Boxes scaled by (sx, sy): what a resized image's elements are."""
    return [element(e.cls, (e.x0 * sx, e.y0 * sy, e.x1 * sx, e.y1 * sy), e.order, e.text) for e in elements]


def validate_elements(elements: list[Element], width: int, height: int, tol: float = 1.0) -> list[str]:
    """Every violation of the elements contract (empty when valid): known class, ordered box inside
    the image (``tol`` px of slack for anti-aliased edges), orders 0..n-1 in list order."""
    problems: list[str] = []
    for i, e in enumerate(elements):
        if not isinstance(e, Element):
            problems.append(f"elements[{i}] is not an Element")
            continue
        if e.cls not in ELEMENT_CLASSES:
            problems.append(f"elements[{i}].cls {e.cls!r} not in {ELEMENT_CLASSES}")
        if not (e.x0 < e.x1 and e.y0 < e.y1):
            problems.append(f"elements[{i}] box {e.box} is empty or inverted")
        if e.x0 < -tol or e.y0 < -tol or e.x1 > width + tol or e.y1 > height + tol:
            problems.append(f"elements[{i}] box {e.box} outside the {width}x{height} image")
        if e.order != i:
            problems.append(f"elements[{i}].order is {e.order}, expected {i} (reading order = list order)")
    return problems
