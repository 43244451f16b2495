"""Deterministic reference-vs-candidate metrics for OCR transcriptions (Jina-OCR-v1 Table 4).

Every metric returns a score in [0, 1] (1 = perfect) with its formula in the docstring, and is
registered in ``METRICS`` as ``name -> fn(reference, candidate) -> (score | None, details)`` so
GRPO rewards, audits and evaluation can iterate them. ``None`` means "n/a": the reference has no
structure of that kind (no table for the table metrics, no formula for the formula metrics).

* content: ``text_similarity`` = 1 - normalized edit distance (OmniDocBench convention:
  Levenshtein / max length).
* formula string matching: ``normalize_formula`` then 1 - normalized edit distance, exact match.
* tables: TEDS and TEDS-S (PubTabNet), and a table edit distance over canonical HTML. TEDS has two
  conventions (``TEDS_CONVENTIONS``): ``METRICS`` uses ``DEFAULT_TEDS_CONVENTION``;
  ``metrics_for(convention)`` and ``score_all(..., teds_convention=...)`` pick the other.
* structural validity: brace balance, HTML tag closure, table integrity (rectangular grids).
* HTML conformance: only allow-listed tags and attributes.
* key-information extraction: ``kie_f1``, field-level F1 of a JSON answer (``schemas.kie_metrics``).

The metrics live in ``schemas.edit_distance`` (and the ``MetricResult`` type),
``schemas.table_metrics``, ``schemas.formula_metrics`` and ``schemas.markup_validity``; this module
is the registry and the public facade: it re-exports their public names, so
``from schemas.similarity import ...`` reaches every metric.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, partial

from schemas.edit_distance import (
    MAX_PROBLEMS,
    Details,
    MetricResult,
    collapse_whitespace,
    normalized_edit_distance,
    text_similarity,
)
from schemas.formula_metrics import (
    FORMULA_ARITY,
    FORMULA_DECLARATIVE,
    FORMULA_DROPPED,
    FORMULA_DROPPED_WITH_ARG,
    FORMULA_MACROS,
    extract_formulas,
    find_math,
    formula_exact,
    formula_exact_match,
    formula_match,
    formula_similarity,
    formula_tokens,
    normalize_formula,
)
from schemas.kie_metrics import flatten_fields, kie_f1, parse_json_answer
from schemas.markup_validity import ALLOWED_HTML, VOID_TAGS, brace_balance, html_conformance, tag_closure
from schemas.table_metrics import (
    DEFAULT_TEDS_CONVENTION,
    TEDS_CONVENTIONS,
    TedsConvention,
    check_teds_convention,
    document_tables,
    table_edit_similarity,
    table_integrity,
    table_node_count,
    table_ted,
    table_teds,
    table_to_html,
    teds,
    teds_details,
)

__all__ = [
    "DEFAULT_TEDS_CONVENTION", "TEDS_CONVENTIONS", "TedsConvention", "check_teds_convention", "metrics_for",
    "ALLOWED_HTML", "FORMULA_ARITY", "FORMULA_DECLARATIVE", "FORMULA_DROPPED", "FORMULA_DROPPED_WITH_ARG",
    "FORMULA_MACROS", "MAX_PROBLEMS", "METRICS", "VOID_TAGS", "Details", "Metric", "MetricResult",
    "brace_balance", "collapse_whitespace", "content_similarity", "extract_formulas", "find_math", "formula_exact",
    "formula_exact_match", "formula_match", "formula_similarity", "formula_tokens", "html_conformance",
    "normalize_formula", "normalized_edit_distance", "score_all", "structural_validity", "table_edit_similarity",
    "table_integrity", "table_node_count", "table_ted", "table_teds", "table_to_html", "tag_closure", "teds",
    "teds_details", "text_similarity", "flatten_fields", "kie_f1", "parse_json_answer",
]


def content_similarity(reference: str, candidate: str) -> MetricResult:
    """Content: 1 - normalized edit distance over the whole mixed Markdown/LaTeX/HTML text, after
    collapsing whitespace runs to one space (layout whitespace is not content)."""
    ref, cand = collapse_whitespace(reference), collapse_whitespace(candidate)
    return text_similarity(ref, cand), {"reference_chars": len(ref), "candidate_chars": len(cand)}


def _teds_metric(reference: str, candidate: str, convention: TedsConvention = DEFAULT_TEDS_CONVENTION
                 ) -> MetricResult:
    """TEDS (PubTabNet): see ``teds_details``."""
    return teds_details(candidate, reference, convention=convention)


def _teds_s_metric(reference: str, candidate: str, convention: TedsConvention = DEFAULT_TEDS_CONVENTION
                   ) -> MetricResult:
    """TEDS-S: TEDS on structure only (cell contents ignored); see ``teds_details``."""
    return teds_details(candidate, reference, structure_only=True, convention=convention)


def _table_integrity_metric(reference: str, candidate: str) -> MetricResult:
    """``table_integrity(candidate)``; None when the reference has no table."""
    if not document_tables(reference):
        return None, {"reason": "reference has no table"}
    return table_integrity(candidate)


def structural_validity(reference: str, candidate: str) -> MetricResult:
    """Mean of ``brace_balance``, ``tag_closure`` and, when the candidate has a table,
    ``table_integrity`` of the candidate (the reference is not consulted)."""
    parts = {"brace_balance": brace_balance(candidate)[0], "tag_closure": tag_closure(candidate)[0]}
    if document_tables(candidate):
        parts["table_integrity"] = table_integrity(candidate)[0]
    return sum(parts.values()) / len(parts), {k: round(v, 6) for k, v in parts.items()}


def _brace_balance_metric(reference: str, candidate: str) -> MetricResult:
    """``brace_balance(candidate)``."""
    return brace_balance(candidate)


def _tag_closure_metric(reference: str, candidate: str) -> MetricResult:
    """``tag_closure(candidate)``."""
    return tag_closure(candidate)


def _html_conformance_metric(reference: str, candidate: str) -> MetricResult:
    """``html_conformance(candidate)`` with the default allow-list."""
    return html_conformance(candidate)


Metric = Callable[[str, str], MetricResult]

METRICS: dict[str, Metric] = {
    "content": content_similarity,
    "formula": formula_match,
    "formula_exact": formula_exact,
    "teds": _teds_metric,
    "teds_s": _teds_s_metric,
    "table_edit": table_edit_similarity,
    "brace_balance": _brace_balance_metric,
    "tag_closure": _tag_closure_metric,
    "table_integrity": _table_integrity_metric,
    "structural_validity": structural_validity,
    "html_conformance": _html_conformance_metric,
    "kie_f1": kie_f1,
}


@lru_cache(maxsize=None)
def metrics_for(teds_convention: TedsConvention = DEFAULT_TEDS_CONVENTION) -> dict[str, Metric]:
    """``METRICS`` with ``teds`` and ``teds_s`` computed under ``teds_convention`` (shared; do not
    modify)."""
    check_teds_convention(teds_convention)
    if teds_convention == DEFAULT_TEDS_CONVENTION:
        return METRICS
    return {**METRICS, "teds": partial(_teds_metric, convention=teds_convention),
            "teds_s": partial(_teds_s_metric, convention=teds_convention)}


def score_all(reference: str, candidate: str,
              teds_convention: TedsConvention = DEFAULT_TEDS_CONVENTION) -> dict[str, MetricResult]:
    """Every metric of ``metrics_for(teds_convention)``; a metric that raises scores 0 with the
    error as its reason."""
    out: dict[str, MetricResult] = {}
    for name, fn in metrics_for(teds_convention).items():
        try:
            score, details = fn(reference, candidate)
        except Exception as exc:  # a reward loop must never die on one odd page
            score, details = 0.0, {"reason": f"{exc.__class__.__name__}: {exc}"}
        out[name] = (None if score is None else float(score), details)
    return out
