"""The one training-sample schema: ``PageRecord``, its pyarrow schema and its validation.

Every corpus, synthetic page and model input in pagemill is a ``PageRecord``. The pyarrow schema
carries the ``huggingface`` schema metadata of the matching ``datasets.Features`` (``features()``),
so ``datasets.load_dataset("parquet", ...)`` returns ``image`` as an ``Image``. The schema is built
from pyarrow types without importing ``datasets`` (~0.4 s in every Beam worker);
``tests/schemas/test_page.py`` checks it equals ``features().arrow_schema``, metadata included.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import struct
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pyarrow as pa

from schemas.layout import ELEMENT_TYPE, Element, validate_elements

TASKS = (
    "parse_page", "transcribe_table", "transcribe_formula", "chart_to_table", "caption", "vqa", "kie", "preference",
)
RESPONSE_FORMATS = ("markdown", "html", "latex", "text", "json")
SPLITS = ("train", "eval", "test")
IMAGE_MAGIC = {b"\x89PNG\r\n\x1a\n": "png", b"RIFF": "webp", b"\xff\xd8\xff": "jpeg"}
_LANGUAGE = re.compile(r"^(und|[a-z]{2,3}([-_][A-Za-z0-9]{2,8})*)$")
INT32_MAX = 2**31 - 1  # page_number, width and height are int32 columns of PAGE_SCHEMA


@dataclass(frozen=True)
class ProvenanceStep:
    """One stage that produced or changed a record: name, code version and a hash of its params."""

    stage: str
    version: str
    params_hash: str


@dataclass
class PageRecord:
    """One instruction-response training sample with its page image.

    ``unit_tests`` holds olmOCR-Bench JSONL lines (one JSON object per test); ``quality`` and
    ``metadata`` are JSON-serialisable dicts (flags and scores from cleaning and audit; source
    fields such as the URL) stored as JSON strings so every stage can add keys without a schema
    migration.
    """

    id: str
    source: str
    source_id: str
    page_number: int
    domain: str
    language: str
    license: str
    image: bytes
    image_sha256: str
    width: int
    height: int
    task: str
    instruction: str
    response: str
    response_format: str = "markdown"
    unit_tests: list[str] = field(default_factory=list)
    quality: dict[str, Any] = field(default_factory=dict)
    provenance: list[ProvenanceStep] = field(default_factory=list)
    split: str = "train"
    text_layer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Task "preference" only (pairs from relabel's preference stage, DPO-style): ``response`` is the chosen
    # answer, ``rejected`` the other one, each with its judge score; None on every other task.
    rejected: str | None = None
    chosen_score: float | None = None
    rejected_score: float | None = None
    # Page geometry in reading order (schemas/layout.py): empty when the source gives none.
    elements: list[Element] = field(default_factory=list)

    def to_row(self) -> dict[str, Any]:
        """The Arrow row: image as the HF ``Image`` struct, dicts as JSON strings."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["image"] = {"bytes": self.image, "path": None}
        row["quality"] = json.dumps(self.quality, sort_keys=True)
        row["metadata"] = json.dumps(self.metadata, sort_keys=True)
        row["provenance"] = [asdict(p) for p in self.provenance]
        row["elements"] = [e.to_row() for e in self.elements]
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> PageRecord:
        values = dict(row)
        image = values["image"]
        values["image"] = image["bytes"] if isinstance(image, dict) else image
        values["quality"] = json.loads(values.get("quality") or "{}")
        values["metadata"] = json.loads(values.get("metadata") or "{}")
        values["provenance"] = [ProvenanceStep(**p) for p in values.get("provenance") or []]
        values["unit_tests"] = list(values.get("unit_tests") or [])
        values["elements"] = [Element.from_row(e) for e in values.get("elements") or []]
        # what every stage relies on before it can even name the record in a dead letter
        for name in ("id", "source", "source_id"):
            if not isinstance(values.get(name), str):
                raise ValueError(f"{name} is {type(values.get(name)).__name__}, not a string")
        for name in ("quality", "metadata"):
            if not isinstance(values[name], dict):
                raise ValueError(f"{name} is a JSON {type(values[name]).__name__}, not an object")
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])  # datasets.Image's storage
_FIELDS = [
    ("id", pa.string()),
    ("source", pa.string()),
    ("source_id", pa.string()),
    ("page_number", pa.int32()),
    ("domain", pa.string()),
    ("language", pa.string()),
    ("license", pa.string()),
    ("image", IMAGE_TYPE),
    ("image_sha256", pa.string()),
    ("width", pa.int32()),
    ("height", pa.int32()),
    ("task", pa.string()),
    ("instruction", pa.string()),
    ("response", pa.string()),
    ("response_format", pa.string()),
    ("unit_tests", pa.list_(pa.string())),
    ("quality", pa.string()),
    ("provenance", pa.list_(pa.struct([("stage", pa.string()), ("version", pa.string()),
                                       ("params_hash", pa.string())]))),
    ("split", pa.string()),
    ("text_layer", pa.string()),
    ("metadata", pa.string()),
    ("rejected", pa.string()),
    ("chosen_score", pa.float64()),
    ("rejected_score", pa.float64()),
    ("elements", pa.list_(ELEMENT_TYPE)),
]


def _hf_feature(arrow_type: pa.DataType) -> dict:
    """The ``datasets`` feature dict (as ``Features.to_dict`` writes it) for the types used here."""
    if arrow_type == IMAGE_TYPE:
        return {"_type": "Image"}
    if pa.types.is_list(arrow_type):
        return {"feature": _hf_feature(arrow_type.value_type), "_type": "List"}
    if pa.types.is_struct(arrow_type):
        return {f.name: _hf_feature(f.type) for f in arrow_type}
    dtype = {"double": "float64", "float": "float32"}.get(str(arrow_type), str(arrow_type))  # datasets' names
    return {"dtype": dtype, "_type": "Value"}


PAGE_SCHEMA: pa.Schema = pa.schema(
    _FIELDS,
    metadata={"huggingface": json.dumps({"info": {"features": {name: _hf_feature(t) for name, t in _FIELDS}}})},
)


def features():
    """``datasets.Features`` of a page record (imports ``datasets``, so only where needed)."""
    import datasets

    return datasets.Features.from_dict(json.loads(PAGE_SCHEMA.metadata[b"huggingface"])["info"]["features"])


def stable_id(*parts: str) -> str:
    """A 32-hex-digit id hashed from ``parts``: the same inputs give the same id on every run. A lone
    surrogate (a file name that is not UTF-8, JSON's ``"\\udc80"``) is hashed as its code point, never
    raised on: the record it names still needs an id for its dead letter."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as UTF-8 (a lone surrogate, e.g. from a file name that is not UTF-8
    or JSON's ``"\\ud800"``: no shard can hold it), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{exc.reason} at {exc.start}"
    return None


def escaped(text: str) -> str:
    """``text`` with every lone surrogate written as its backslash escape (``caf\\udce9.pdf``): storable,
    and still naming the file or id it came from."""
    if unicode_problem(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def page_id(source: str, source_id: str, page_number: int, transform: str = "") -> str:
    """Stable, content-derived record id: the same inputs give the same id on every run."""
    return stable_id(source, source_id, str(page_number), transform)


def params_hash(params: Any) -> str:
    """Short hash of a JSON-serialisable parameter object, for provenance."""
    blob = json.dumps(params, sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:12]


_last_digest: tuple[bytes, str] | None = None


def image_sha256(data: bytes) -> str:
    """The sha256 hex digest of image bytes, as ``PageRecord.image_sha256`` holds it.

    The last bytes object hashed is remembered (by identity, with a reference held so no other
    object can take its address): the render stage hashes a page's PNG and ``validate`` checks the
    same object next, in the same fused step, and a second hash cost 0.2 ms a 1288-px page. Bytes
    are immutable, so the same object has the same digest."""
    global _last_digest
    last = _last_digest
    if last is not None and last[0] is data:
        return last[1]
    digest = hashlib.sha256(data).hexdigest()
    _last_digest = (data, digest)
    return digest


def image_format(data: bytes) -> str | None:
    for magic, name in IMAGE_MAGIC.items():
        if data.startswith(magic):
            return name
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from the image's header, nothing decoded: a PNG's IHDR read in place (every
    rendered page is validated; PIL's header parse costs tens of microseconds), WebP and JPEG through
    PIL's header parse (not ``schemas.images.open_image``: it imports this module, through
    ``schemas.deadletter``). None when the header gives none (truncated or not an image)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return struct.unpack(">II", data[16:24]) if data[12:16] == b"IHDR" and len(data) >= 24 else None
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return None


def validate(record: PageRecord) -> list[str]:
    """Every violation of the PageRecord contract, as human-readable strings (empty when valid)."""
    problems: list[str] = []
    for name in ("id", "source", "source_id", "domain", "license", "instruction"):
        value = getattr(record, name)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{name} must be a non-empty string")
    if not isinstance(record.response, str):
        problems.append("response must be a string")
    if isinstance(record.response, str) and "\x00" in record.response:
        problems.append("response contains NUL characters")
    for name in ("id", "source", "source_id", "domain", "license", "response", "instruction", "text_layer",
                 "rejected"):
        value = getattr(record, name)
        problem = unicode_problem(value) if isinstance(value, str) else None
        if problem:  # a lone surrogate from JSON's "\ud800" or a file name: no shard can hold it
            problems.append(f"{name} is not valid Unicode ({problem})")
    if not _is_int(record.page_number) or not 0 <= record.page_number <= INT32_MAX:
        problems.append(f"page_number must be an int in 0..{INT32_MAX}, got {record.page_number!r}")
    if not isinstance(record.language, str) or not _LANGUAGE.match(record.language):
        problems.append(f"language must be an ISO 639 code or 'und', got {record.language!r}")
    if record.task not in TASKS:
        problems.append(f"task {record.task!r} not in {TASKS}")
    if record.response_format not in RESPONSE_FORMATS:
        problems.append(f"response_format {record.response_format!r} not in {RESPONSE_FORMATS}")
    if record.split not in SPLITS:
        problems.append(f"split {record.split!r} not in {SPLITS}")
    if not isinstance(record.image, bytes) or not record.image:
        problems.append("image must be non-empty encoded bytes")
    else:
        if image_format(record.image) is None:
            problems.append("image bytes are not PNG, WebP or JPEG")
        if image_sha256(record.image) != record.image_sha256:
            problems.append("image_sha256 does not match the image bytes")
    for name in ("width", "height"):
        value = getattr(record, name)
        if not _is_int(value) or not 0 < value <= INT32_MAX:
            problems.append(f"{name} must be an int in 1..{INT32_MAX}, got {value!r}")
    sized = all(_is_int(v) and 0 < v <= INT32_MAX for v in (record.width, record.height))
    if sized and isinstance(record.image, bytes) and image_format(record.image) is not None:
        size = image_size(record.image)
        if size is None:
            problems.append("image header is unreadable (no width and height)")
        elif size != (record.width, record.height):
            problems.append(f"width x height {record.width}x{record.height} differ from the image's "
                            f"{size[0]}x{size[1]}")
    if record.unit_tests:
        from schemas.unit_tests import unit_test_from_json  # the one olmOCR-Bench test validator (lazy: ~0.2 s)

        for i, test in enumerate(record.unit_tests):
            try:
                unit_test_from_json(test, f"unit_tests[{i}]")
            except (TypeError, ValueError) as exc:
                problems.append(str(exc))
    for name in ("quality", "metadata"):
        try:
            json.dumps(getattr(record, name))
        except (TypeError, ValueError):
            problems.append(f"{name} is not JSON-serialisable")
    if not record.provenance:
        problems.append("provenance is empty")
    if record.elements and isinstance(record.width, int) and isinstance(record.height, int):
        problems.extend(validate_elements(record.elements, record.width, record.height))
    problems.extend(_preference_problems(record))
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _preference_problems(record: PageRecord) -> list[str]:
    pair = (record.rejected, record.chosen_score, record.rejected_score)
    if record.task != "preference":
        return [] if pair == (None, None, None) else \
            [f"rejected, chosen_score and rejected_score are for task 'preference' only, not {record.task!r}"]
    problems = []
    if not isinstance(record.rejected, str) or not record.rejected.strip():
        problems.append("a preference record needs a non-empty rejected response")
    scores = [s for s in pair[1:] if isinstance(s, (int, float)) and not isinstance(s, bool)]
    if len(scores) != 2:
        problems.append("a preference record needs numeric chosen_score and rejected_score")
    elif scores[0] < scores[1]:
        problems.append(f"chosen_score {scores[0]} is below rejected_score {scores[1]}")
    return problems
