"""Records derived from one page: element crops, key-information extraction and VQA (Jina-OCR-v1 4.3).

* ``crop_records``: each ``table`` / ``formula`` element of a page with boxes becomes a
  ``transcribe_table`` / ``transcribe_formula`` record (the crop as image, the element's reference
  as response, the page's ``table`` tests that pass on it); a ``picture`` followed by its ``caption``
  becomes a ``caption`` record (the picture's crop, cut short of the caption's box so that the caption
  is not in it; the caption as response, the instruction asks for a caption). Responses are in the
  form of the corpus's records of the same task: a table's HTML, a formula as bare LaTeX (the
  ``conventions`` stage's ``rewrite_formula``, as on LaTeX-OCR and UniMER labels; its formula's ``math``
  tests, read as a display equation: convention ``latex_formula``), a caption's text; none ends with a newline.
* ``kie_record``: a page whose ``metadata["fields"]`` holds its key fields (synthetic invoices and
  forms, ``synth.fields``) becomes a ``kie`` record: the JSON schema of the fields in the
  instruction, the fields as JSON in the response (``check_kie`` validates it against the schema).
* ``vqa_records``: questions on the page's fields and table cells (by their row and column
  headings, only where no other cell of the page has the same pair: the question names no table),
  each answer read from the source structure (``check_vqa`` re-reads it).
"""

from __future__ import annotations

import io
import json
import math
import random
from collections import Counter
from dataclasses import replace

from PIL import Image

from pipelines.clean.conventions import rewrite_formula
from pipelines.instruct.conventions import FORMULA_CONVENTION, checkable
from schemas.images import ImageEncoding, encode_image
from schemas.layout import Element
from schemas.page import PageRecord, image_sha256, page_id
from schemas.prompts import KIE_PROMPTS, default_instruction
from schemas.tables import Table, parse_html_tables, place_cells
from schemas.unit_tests import unit_test_from_json
from synth.fields import FIELD_LABELS

CROP_TASKS = {"table": "transcribe_table", "formula": "transcribe_formula", "picture": "caption"}
CROP_FORMATS = {"table": "html", "formula": "latex", "picture": "text"}
_ENCODING = ImageEncoding()


def _derived(record: PageRecord, transform: str, *, image: bytes | None = None, width: int = 0, height: int = 0,
             task: str, instruction: str, response: str, response_format: str, unit_tests: list[str]) -> PageRecord:
    """A new record of ``record``'s page (its own id, image when given; no elements or text layer)."""
    img = record.image if image is None else image
    return replace(record, id=page_id(record.source, record.source_id, record.page_number, transform), image=img,
                   image_sha256=image_sha256(img), width=width or record.width,
                   height=height or record.height, task=task, instruction=instruction, response=response,
                   response_format=response_format, unit_tests=unit_tests, text_layer=None, elements=[],
                   quality={}, metadata={**record.metadata, "derived_from": record.id, "transform": transform})


def _crop_box(el: Element, pad: int, width: int, height: int) -> tuple[int, int, int, int]:
    return (max(0, int(el.x0) - pad), max(0, int(el.y0) - pad),
            min(width, int(el.x1 + 0.999) + pad), min(height, int(el.y1 + 0.999) + pad))


def _overlaps(box: tuple[int, int, int, int], el: Element) -> bool:
    return box[0] < el.x1 and el.x0 < box[2] and box[1] < el.y1 and el.y0 < box[3]


def _clear_of(box: tuple[int, int, int, int], picture: Element, el: Element) -> tuple[int, int, int, int] | None:
    """``box`` (``picture``'s padded crop) cut back so that it does not reach ``el`` (its caption): the
    padding toward the caption's side goes (the side read from the two elements' own boxes); ``None``
    when the picture's own box overlaps the caption."""
    x0, y0, x1, y1 = box
    if not _overlaps(box, el):
        return box
    if el.y0 >= picture.y1:  # caption below
        y1 = min(y1, math.floor(el.y0))
    elif el.y1 <= picture.y0:  # above
        y0 = max(y0, math.ceil(el.y1))
    elif el.x0 >= picture.x1:  # right
        x1 = min(x1, math.floor(el.x0))
    elif el.x1 <= picture.x0:  # left
        x0 = max(x0, math.ceil(el.x1))
    out = (x0, y0, x1, y1)
    return out if x1 > x0 and y1 > y0 and not _overlaps(out, el) else None


def _crop(page: Image.Image, box: tuple[int, int, int, int]) -> tuple[bytes, int, int]:
    crop = page.crop(box)
    return encode_image(crop, _ENCODING), crop.width, crop.height


def _element_tests(tests: list[str], cls: str, response: str) -> list[str]:
    """The page's tests about this element: ``math`` tests of its formula (the same formula once both are
    in the corpus form) that pass on the crop's response read as a display equation (``checkable`` of
    ``FORMULA_CONVENTION``), ``table`` tests that pass on its table."""
    kept = []
    for line in tests:
        test = unit_test_from_json(line)
        if cls == "formula" and test.type == "math" and rewrite_formula(test.math)[0] == response:
            if test.check(checkable(FORMULA_CONVENTION, response))[0]:
                kept.append(line)
        elif cls == "table" and test.type == "table" and test.check(response)[0]:
            kept.append(line)
    return kept


def _response(el: Element, text: str) -> str:
    """A crop's response in its task's corpus form: a formula as bare LaTeX (the ``conventions``
    stage's formula-label normalisation), others their text; stripped, no trailing newline."""
    if el.cls != "formula":
        return text.strip()
    formula = rewrite_formula(text)[0]
    return formula if formula.strip("$\\[]() \n") else ""  # delimiters around nothing: no formula


def crop_records(record: PageRecord, kinds: tuple[str, ...] = ("table", "formula", "picture"),
                 pad: int = 4, min_px: int = 12, language: str = "en", limit: int | None = None,
                 seed: int = 0) -> list[PageRecord]:
    """Element-level records of a page with boxes (see the module docstring): at most ``limit`` of
    them, drawn seeded by the record id when there are more."""
    out: list[PageRecord] = []
    elements = record.elements
    def target(i: int) -> str:  # the crop's response: the caption after a picture, else the element's text
        if elements[i].cls == "picture":
            nxt = elements[i + 1] if i + 1 < len(elements) else None
            return nxt.text.strip() if nxt is not None and nxt.cls == "caption" else ""
        return elements[i].text.strip()

    def box(i: int) -> tuple[int, int, int, int] | None:  # a picture's crop stops short of its caption
        b = _crop_box(elements[i], pad, record.width, record.height)
        return _clear_of(b, elements[i], elements[i + 1]) if elements[i].cls == "picture" else b

    chosen = [i for i, el in enumerate(elements) if el.cls in kinds and el.x1 - el.x0 >= min_px
              and el.y1 - el.y0 >= min_px and _response(el, target(i)) and box(i) is not None]
    if limit is not None and len(chosen) > limit:
        chosen = sorted(random.Random(f"crops:{seed}:{record.id}").sample(chosen, limit))
    if not chosen:
        return out
    with Image.open(io.BytesIO(record.image)) as page:
        page.load()
        crops = [(i, _crop(page, box(i))) for i in chosen]
    for i, (image, w, h) in crops:
        el = elements[i]
        response = _response(el, target(i))
        task = CROP_TASKS[el.cls]
        out.append(_derived(record, f"crop:{el.cls}:{el.order}", image=image, width=w, height=h, task=task,
                            instruction=default_instruction(task, language), response=response,
                            response_format=CROP_FORMATS[el.cls],
                            unit_tests=_element_tests(record.unit_tests, el.cls, response)))
    return out


def kie_schema(fields: dict[str, str]) -> dict:
    """The JSON schema a KIE answer must satisfy: an object of exactly these string fields."""
    return {"type": "object", "properties": {k: {"type": "string"} for k in fields},
            "required": list(fields), "additionalProperties": False}


def check_kie(response: str, schema: dict) -> list[str]:
    """Every way ``response`` fails ``schema`` (the subset ``kie_schema`` writes): JSON object, the
    required keys, no others, string values. Empty when valid."""
    try:
        value = json.loads(response)
    except ValueError as exc:
        return [f"not JSON: {exc}"]
    if not isinstance(value, dict):
        return ["not a JSON object"]
    problems = [f"missing {k!r}" for k in schema.get("required", []) if k not in value]
    if schema.get("additionalProperties") is False:
        problems += [f"unexpected {k!r}" for k in value if k not in schema["properties"]]
    problems += [f"{k!r} is not a string" for k, v in value.items() if not isinstance(v, str)]
    return problems


def kie_record(record: PageRecord, language: str = "en") -> PageRecord | None:
    fields = record.metadata.get("fields")
    if not fields:
        return None
    schema = kie_schema(fields)
    instruction = KIE_PROMPTS[language].format(schema=json.dumps(schema, ensure_ascii=False))
    return _derived(record, "kie", task="kie", instruction=instruction,
                    response=json.dumps(fields, ensure_ascii=False), response_format="json", unit_tests=[])


_FIELD_Q = {"en": "What is the {label} on this {doc}? Answer with the value only.",
            "zh": "这份{doc}上的{label}是什么？只回答其值。"}
_CELL_Q = {"en": "In the table, what is the value in the row \"{row}\" under the column \"{col}\"? "
                 "Answer with the value only.",
           "zh": "表格中“{row}”这一行、“{col}”这一列的值是什么？只回答其值。"}
_DOCS = {("invoice", "en"): "invoice", ("form", "en"): "form", ("invoice", "zh"): "发票", ("form", "zh"): "表格"}


def field_label(key: str, language: str) -> str:
    labels = FIELD_LABELS.get(key)
    if labels is None:
        return key.replace("_", " ")
    return labels[1] if language == "zh" else labels[0][0].lower() + labels[0][1:]


def table_cells(table: Table) -> list[tuple[str, str, str]]:
    """(row heading, column heading, value) for each data cell of a table that opens with heading
    rows: the column heading is the lowest heading row's cell over the column, the row heading the
    first column's text; only where both headings are unique, so each question has one answer."""
    placed = place_cells(table.rows)
    n_rows = max((r for r, _ in placed), default=-1) + 1
    n_cols = max((c for _, c in placed), default=-1) + 1
    n_head = 0
    while n_head < len(table.rows) and table.rows[n_head] and all(c.header for c in table.rows[n_head]):
        n_head += 1
    if not n_head or n_rows - n_head < 1 or n_cols < 2:
        return []

    def text(r: int, c: int, origin: bool = True) -> str:
        cell = placed.get((r, c))
        if cell is None or (origin and (cell[1] or cell[2])):
            return ""
        return " ".join(cell[0].text.split())

    cols = [text(n_head - 1, c, origin=False) for c in range(n_cols)]
    rows = [text(r, 0) for r in range(n_rows)]
    out = []
    for r in range(n_head, n_rows):
        for c in range(1, n_cols):
            value = text(r, c)
            if value and rows[r] and cols[c] and rows[n_head:].count(rows[r]) == 1 and cols.count(cols[c]) == 1:
                out.append((rows[r], cols[c], value))
    return out


def page_cells(response: str) -> list[tuple[str, str, str]]:
    """``table_cells`` of every table of the page, keeping only (row, column) heading pairs that occur
    once on the page: a cell question names no table, so two tables with the same headings (sales
    and returns, each with a "Total" row) would give one question two answers."""
    cells = [cell for table in parse_html_tables(response) for cell in table_cells(table)]
    seen = Counter((row, col) for row, col, _ in cells)
    return [cell for cell in cells if seen[cell[:2]] == 1]


def check_vqa(record_response: str, question: dict) -> bool:
    """Re-read a VQA answer from the source structure: the field's value, or the page's one cell at
    the question's row and column headings (``page_cells``)."""
    if question["kind"] == "field":
        return question["fields"].get(question["key"]) == question["answer"]
    return (question["row"], question["col"], question["answer"]) in page_cells(record_response)


def vqa_records(record: PageRecord, n: int, seed: int, language: str = "en") -> list[PageRecord]:
    """Up to ``n`` questions on the page's fields and table cells, drawn seeded by the record's id."""
    candidates: list[dict] = []
    fields = record.metadata.get("fields") or {}
    doc = _DOCS.get((record.metadata.get("layout", ""), language))
    if doc:
        for key, value in fields.items():
            candidates.append({"kind": "field", "key": key, "answer": value, "fields": fields,
                               "q": _FIELD_Q[language].format(label=field_label(key, language), doc=doc)})
    for row, col, value in page_cells(record.response):
        candidates.append({"kind": "cell", "row": row, "col": col, "answer": value,
                           "q": _CELL_Q[language].format(row=row, col=col)})
    rng = random.Random(f"vqa:{seed}:{record.id}")
    chosen = rng.sample(candidates, min(n, len(candidates)))
    out = []
    for k, q in enumerate(chosen):
        if not check_vqa(record.response, q):
            continue
        out.append(_derived(record, f"vqa:{k}:{q['q']}", task="vqa", instruction=q["q"], response=q["answer"],
                            response_format="text", unit_tests=[]))
    return out
