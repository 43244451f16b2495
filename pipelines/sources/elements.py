"""Element-level and form corpora published as Hugging Face parquet: charts, form fields, document classes.

* ``SynthChartNetSource`` (kind ``synthchartnet``, task ``chart_to_table``): ``docling-project/SynthChartNet``
  (formerly ``ds4sd/``): ``images`` (a list of one ``Image``) and ``texts`` (a list of one
  ``{assistant, source, user}``); the assistant turn is DocTags, ``<loc_..>`` boxes then the chart's data
  as OTSL. The response is that table as canonical HTML (``table_labels.html_from_otsl``).
* ``CommonFormsSource`` (kind ``commonforms``, task ``kie``): ``jbarrow/CommonForms``: ``id``,
  ``image_id``, ``image``, ``file_name``, ``width``, ``height`` and ``objects`` (COCO-style: ``bbox``,
  ``category`` 0 Text / 1 CheckBox / 2 Signature, ...). The response is JSON
  ``{"fields": [{"type": "text" | "checkbox" | "signature", "bbox": [x0, y0, x1, y1]}, ...]}`` in
  reading order (top to bottom, then left to right), boxes on a 0-1000 grid of the page (so they stay
  right when the render stage rescales the image). A page without fields is dropped (``no_fields``).
* ``RvlCdipSource`` (kind ``rvl_cdip``, task ``kie``): ``aharley/rvl_cdip`` (parquet form): ``image``
  and ``label`` (a class index). RVL-CDIP has no fields, only the class: the response is JSON
  ``{"document_type": "<class>"}`` and the class is kept in ``quality["document_class"]`` and
  ``metadata["document_class"]``, so a mixture can balance or filter by it.

Each reader streams its parquet file by record batches (``parquet_rows``) and yields one ``Row`` per
input row. Bad rows are dead letters: ``missing_image`` (no image bytes), ``empty_label`` /
``unparseable_table`` / ``bad_label`` (a label that is empty or does not parse), ``bad_record``;
undecodable and over-large images are dead-lettered by the render stage (``corrupt_image``,
``image_too_large``), like every scan. Records have no id column in SynthChartNet and RVL-CDIP:
``source_id`` is then ``<file name>#<row>``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from pipelines.sources.base import SourcePage, SourceSettings, require_task
from pipelines.sources.historical import _ParquetHistoricalSource
from pipelines.sources.table_labels import to_html
from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.prompts import FORM_FIELD_PROMPTS, default_instruction


def image_cell(value: Any, column: str) -> bytes:
    """The bytes of a Hugging Face ``Image`` cell (``{bytes, path}``, raw bytes, or a list holding one)."""
    if isinstance(value, list):
        if len(value) != 1:
            raise RecordError("missing_image", f"column {column!r} holds {len(value)} images, expected one")
        value = value[0]
    if isinstance(value, dict):
        value = value.get("bytes")
    if isinstance(value, (bytes, bytearray)) and value:
        return bytes(value)
    raise RecordError("missing_image", f"column {column!r} holds no image bytes")


class _ElementSource(_ParquetHistoricalSource):
    """A parquet reader whose records have one fixed task; ``settings.task`` must name it."""

    TASK = ""
    RESPONSE_FORMAT = ""

    def __init__(self, settings: SourceSettings):
        super().__init__(settings)
        require_task(settings, self.TASK)

    def _source_id(self, record: dict[str, Any], fallback_id: str) -> str:
        return fallback_id

    def _element(self, source_id: str, payload: bytes, response: str, **extra: Any) -> SourcePage:
        return self._make_page(source_id=source_id, page_number=1, payload=payload, response=response,
                               response_format=self.RESPONSE_FORMAT, **extra)


_DOCTAG_NOISE = re.compile(r"<loc_\d+>|<_[^<>]*_>|</?(?:chart|otsl|doctag)>")


class SynthChartNetSource(_ElementSource):
    """SynthChartNet charts -> ``chart_to_table`` records whose response is the chart's data as HTML."""

    TASK = "chart_to_table"
    RESPONSE_FORMAT = "html"
    COLUMNS = ("images", "texts")

    def __init__(self, settings: SourceSettings):
        super().__init__(settings)
        self.required = self.COLUMNS

    def _page(self, source_id: str, record: dict[str, Any]) -> SourcePage:
        texts = record.get("texts") or []
        turn = texts[0] if isinstance(texts, list) and texts else None
        label = turn.get("assistant") if isinstance(turn, dict) else None
        if not isinstance(label, str) or not label.strip():
            raise RecordError("empty_label", "texts[0].assistant is empty")
        html = to_html(_DOCTAG_NOISE.sub("", label), "otsl")
        payload = image_cell(record.get("images"), "images")
        return self._element(source_id, payload, html, metadata={"source": turn.get("source")},
                             quality={"label_format": "otsl"})


CATEGORY_NAMES = ("text", "checkbox", "signature")  # CommonForms' class_label names Text, CheckBox, Signature


def _objects(value: Any) -> list[dict[str, Any]]:
    """``objects`` as a list of dicts, whether stored as a list of structs or (datasets' Sequence of a
    dict) a struct of lists."""
    if value is None:
        return []
    if isinstance(value, dict):
        keys = list(value)
        columns = [value[k] or [] for k in keys]
        if len({len(c) for c in columns}) > 1:
            raise RecordError("bad_label", "objects: its lists have different lengths")
        return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    raise RecordError("bad_label", f"objects is a {type(value).__name__}")


class CommonFormsSource(_ElementSource):
    """CommonForms pages -> ``kie`` records listing the form's fields (type and box) as JSON. The default
    instruction is the form-field prompt (``schemas.prompts.FORM_FIELD_PROMPTS``: field types, boxes, the
    0-1000 grid), not the generic KIE one; a source's own ``instruction`` is kept."""

    VERSION = "3"  # 2: historical.VERSION; 3: the default instruction is FORM_FIELD_PROMPTS
    TASK = "kie"
    RESPONSE_FORMAT = "json"
    COLUMNS = ("id", "image_id", "image", "file_name", "width", "height", "objects")

    def __init__(self, settings: SourceSettings):
        super().__init__(settings)
        language = settings.instruction_language
        if (settings.task == self.TASK and language in FORM_FIELD_PROMPTS
                and settings.instruction == default_instruction(self.TASK, language)):
            self.instruction = FORM_FIELD_PROMPTS[language]
        self.required = ("image", "width", "height", "objects")
        self._provenance = replace(self._provenance, version=self.VERSION)

    def _source_id(self, record: dict[str, Any], fallback_id: str) -> str:
        value = record.get("id")
        return str(value) if value is not None else fallback_id

    def _page(self, source_id: str, record: dict[str, Any]) -> SourcePage:
        width, height = record.get("width"), record.get("height")
        if not isinstance(width, int) or not isinstance(height, int) or width <= 0 or height <= 0:
            raise RecordError("bad_label", f"width={width!r} height={height!r}")
        fields = []
        for obj in _objects(record.get("objects")):
            category, bbox = obj.get("category", obj.get("category_id")), obj.get("bbox")
            if not isinstance(category, int) or not 0 <= category < len(CATEGORY_NAMES):
                raise RecordError("bad_label", f"field category {category!r}")
            if not isinstance(bbox, list) or len(bbox) != 4 or any(not isinstance(v, (int, float)) for v in bbox):
                raise RecordError("bad_label", f"field bbox {bbox!r}")
            x, y, w, h = bbox  # COCO: x, y, width, height in pixels
            if w <= 0 or h <= 0:
                raise RecordError("bad_label", f"field bbox {bbox!r} has no area")
            box = [round(1000 * x / width), round(1000 * y / height),
                   round(1000 * (x + w) / width), round(1000 * (y + h) / height)]
            fields.append({"type": CATEGORY_NAMES[category], "bbox": [min(1000, max(0, v)) for v in box]})
        if not fields:
            raise Dropped("no_fields")
        fields.sort(key=lambda f: (f["bbox"][1], f["bbox"][0]))
        payload = image_cell(record.get("image"), "image")
        counts = {name: sum(f["type"] == name for f in fields) for name in CATEGORY_NAMES}
        return self._element(source_id, payload, json.dumps({"fields": fields}, ensure_ascii=False),
                             quality={"fields": counts},
                             metadata={"file_name": record.get("file_name"), "image_id": record.get("image_id"),
                                       "bbox_grid": 1000})


RVL_CDIP_CLASSES = (
    "letter", "form", "email", "handwritten", "advertisement", "scientific report", "scientific publication",
    "specification", "file folder", "news article", "budget", "invoice", "presentation", "questionnaire",
    "resume", "memo",
)


class RvlCdipSource(_ElementSource):
    """RVL-CDIP pages -> ``kie`` records whose one extracted field is the document type."""

    TASK = "kie"
    RESPONSE_FORMAT = "json"
    COLUMNS = ("image", "label")

    @dataclass(frozen=True)
    class Options(_ParquetHistoricalSource.Options):
        label_names: tuple[str, ...] = option(RVL_CDIP_CLASSES, help="class index -> name (the card's "
                                                                     "ClassLabel order)")

    def __init__(self, settings: SourceSettings):
        super().__init__(settings)
        self.required = self.COLUMNS
        self.label_names = self.options.label_names

    def _page(self, source_id: str, record: dict[str, Any]) -> SourcePage:
        label = record.get("label")
        if not isinstance(label, int) or not 0 <= label < len(self.label_names):
            raise RecordError("bad_label", f"label {label!r} is not a class index (0..{len(self.label_names) - 1})")
        name = self.label_names[label]
        payload = image_cell(record.get("image"), "image")
        return self._element(source_id, payload, json.dumps({"document_type": name}),
                             quality={"document_class": name}, metadata={"document_class": name, "label": label})
