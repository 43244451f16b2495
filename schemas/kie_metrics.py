"""Key-information extraction: field-level F1 of a JSON answer against the reference fields.

GLM-OCR scores KIE by field F1 (its table 2); Jina-OCR-v1 4.3 lists KIE among the tasks. Both JSON
documents are flattened to ``(path, value)`` pairs (nested objects by dotted keys, list items by
index); values compare as strings with whitespace collapsed and case folded. A candidate that is
not JSON (a ```json fence is allowed) scores 0; a reference that is not a JSON object is n/a.
"""

from __future__ import annotations

import json
import re
from typing import Any

from schemas.edit_distance import MetricResult

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_json_answer(text: str) -> Any:
    """The JSON value of an answer (inside a Markdown code fence or bare); ``ValueError`` if none,
    or if it is nested too deep for the JSON parser (``RecursionError`` there)."""
    m = _FENCE.match(text)
    try:
        return json.loads(m.group(1) if m else text)
    except RecursionError as exc:
        raise ValueError("JSON nested too deep") from exc


def flatten_fields(value: Any, prefix: str = "") -> set[tuple[str, str]]:
    """``(path, normalized value)`` pairs of a JSON value's leaves (iterative: any depth)."""
    fields: set[tuple[str, str]] = set()
    stack = [(value, prefix)]
    while stack:
        value, prefix = stack.pop()
        if isinstance(value, dict):
            stack += [(v, f"{prefix}.{k}" if prefix else str(k)) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(v, f"{prefix}[{i}]") for i, v in enumerate(value)]
        else:
            text = "" if value is None else (json.dumps(value) if isinstance(value, bool) else str(value))
            fields.add((prefix, " ".join(text.split()).casefold()))
    return fields


def kie_f1(reference: str, candidate: str) -> MetricResult:
    """F1 = 2PR / (P + R), P = matched / candidate fields, R = matched / reference fields, a field
    matching when path and normalized value are equal. None when the reference is not a JSON object."""
    try:
        ref = parse_json_answer(reference)
    except ValueError:
        return None, {"reason": "reference is not JSON"}
    if not isinstance(ref, dict):
        return None, {"reason": "reference is not a JSON object"}
    try:
        cand = parse_json_answer(candidate)
    except ValueError as exc:
        return 0.0, {"reason": f"candidate is not JSON: {exc}"}
    ref_fields, cand_fields = flatten_fields(ref), flatten_fields(cand)
    matched = len(ref_fields & cand_fields)
    if not ref_fields and not cand_fields:
        return 1.0, {"fields": 0}
    precision = matched / len(cand_fields) if cand_fields else 0.0
    recall = matched / len(ref_fields) if ref_fields else 0.0
    f1 = 0.0 if matched == 0 else 2 * precision * recall / (precision + recall)
    missing = sorted(p for p, _ in ref_fields - cand_fields)[:10]
    return f1, {"precision": precision, "recall": recall, "matched": matched, "reference_fields": len(ref_fields),
                "candidate_fields": len(cand_fields), "wrong_or_missing": missing}
