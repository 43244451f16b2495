"""Table metrics: TEDS and TEDS-S (PubTabNet), table edit similarity over canonical HTML, and
table integrity (rectangular grids).

TEDS comes in two named conventions (``TEDS_CONVENTIONS``; docs/judging.md says which to use when):

* ``"omnidocbench"`` (``DEFAULT_TEDS_CONVENTION``): OmniDocBench's normalisation
  (``utils/data_preprocess.normalized_html_table``) first: tables parsed once by ``schemas.tables``
  (HTML and Markdown pipe tables), thead/tbody unwrapped, every ``th`` renamed ``td`` (so header
  cells, ``<thead>`` rows and a Markdown header row score like plain cells), cell text NFKC-normalised
  with ``\u200b`` removed and whitespace collapsed, inline tags dropped; tree edit distance from
  ``schemas.tree_edit.table_tree_distance``.
* ``"pubtabnet"``: PubTabNet's ``metric.py`` as written (``schemas.teds_pubtabnet``).

Each metric returns a ``schemas.edit_distance.MetricResult``.
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Literal, get_args

import numpy as np

from schemas.edit_distance import MAX_PROBLEMS, Details, MetricResult, distance_matrix, text_similarity
from schemas.tables import Table, parse_tables
from schemas.teds_pubtabnet import parse_document_tables, pubtabnet_teds
from schemas.tree_edit import table_tree_distance

TedsConvention = Literal["omnidocbench", "pubtabnet"]
TEDS_CONVENTIONS: tuple[str, ...] = get_args(TedsConvention)
DEFAULT_TEDS_CONVENTION: TedsConvention = "omnidocbench"


def check_teds_convention(convention: str) -> TedsConvention:
    """``convention`` if it names a TEDS convention, else ValueError listing the known ones."""
    if convention not in TEDS_CONVENTIONS:
        raise ValueError(f"unknown TEDS convention {convention!r}; known: {', '.join(TEDS_CONVENTIONS)}")
    return convention  # type: ignore[return-value]


def _cell_labels(table: Table) -> list[tuple[int, int]]:
    # OmniDocBench renames every th to td: a cell's label is its spans only
    return [(c.rowspan, c.colspan) for row in table.rows for c in row]


def omnidocbench_cell_text(text: str) -> str:
    """A cell's text as OmniDocBench compares it: NFKC (fullwidth ``（１）`` reads ``(1)``), zero-width
    spaces removed, whitespace runs (``\xa0`` included) collapsed to one space, ends stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).replace("\u200b", "").split())


def table_node_count(table: Table) -> int:
    """Nodes of the TEDS tree below the root: rows + cells (PubTabNet's ``len(table.xpath('.//*'))``
    after OmniDocBench's unwrapping of thead/tbody and inline tags)."""
    return len(table.rows) + sum(len(row) for row in table.rows)


def table_ted(a: Table, b: Table, structure_only: bool = False) -> float:
    """Tree edit distance between the TEDS trees of two parsed tables.

    Tree: ``table`` -> ``tr`` per row -> one leaf per cell, labelled ``td`` with its rowspan and
    colspan (OmniDocBench renames every ``th`` to ``td``, so header cells are plain cells), carrying
    ``omnidocbench_cell_text`` of the cell text (inline tags dropped).
    Costs (PubTabNet ``CustomConfig``): insert/delete 1; rename 1 when rowspan or colspan differ,
    else the normalized edit distance of the two contents (0 under ``structure_only``).
    """
    labels_a, labels_b = _cell_labels(a), _cell_labels(b)
    ids: dict[tuple[str, int, int], int] = {}
    la = np.array([ids.setdefault(x, len(ids)) for x in labels_a], dtype=np.int64)
    lb = np.array([ids.setdefault(x, len(ids)) for x in labels_b], dtype=np.int64)
    same = la[:, None] == lb[None, :]
    if structure_only:
        cost = np.where(same, 0.0, 1.0)
    else:
        texts_a = [omnidocbench_cell_text(c.text) for row in a.rows for c in row]
        texts_b = [omnidocbench_cell_text(c.text) for row in b.rows for c in row]
        cost = np.where(same, distance_matrix(texts_a, texts_b), 1.0)
    return table_tree_distance([len(r) for r in a.rows], [len(r) for r in b.rows], cost)


def table_teds(a: Table, b: Table, structure_only: bool = False) -> float:
    """TEDS(a, b) = 1 - TED(a, b) / max(n_a, n_b), clamped to [0, 1].

    n = ``table_node_count`` (nodes below the root, as PubTabNet counts them). The clamp matters
    only for pathological pairs (e.g. one row of k cells against k rows of one differing cell), where
    the raw PubTabNet value goes negative. Two tables without any row score 1.
    """
    n = max(table_node_count(a), table_node_count(b))
    if n == 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - table_ted(a, b, structure_only) / n))


@lru_cache(maxsize=16)
def document_tables(text: str) -> tuple[Table, ...]:
    """``parse_tables(text)``, parsed once for all the metrics that score the same text (``score_all``
    runs TEDS, TEDS-S, table edit and integrity on one page). Shared: do not modify the tables."""
    return tuple(parse_tables(text))


@lru_cache(maxsize=16)
def _pubtabnet_tables(text: str) -> tuple[Any, ...]:
    # a text without "|" has no Markdown table: lxml alone reads it (parse_document_tables)
    return tuple(parse_document_tables(text, document_tables(text) if "|" in text else None))


def _parse(text: Any, role: str) -> tuple[Sequence[Table] | None, str | None]:
    if not isinstance(text, str):
        return None, f"{role} is {type(text).__name__}, not text"
    try:
        return document_tables(text), None
    except Exception as exc:  # parse_tables recovers from bad HTML; this guards the unforeseen
        return None, f"{role} could not be parsed: {exc.__class__.__name__}: {exc}"


def _parse_pubtabnet(text: Any, role: str) -> tuple[Sequence[Any] | None, str | None]:
    if not isinstance(text, str):
        return None, f"{role} is {type(text).__name__}, not text"
    try:
        return _pubtabnet_tables(text), None
    except Exception as exc:  # lxml refuses some inputs (e.g. a document that is only a NUL byte)
        return None, f"{role} could not be parsed: {exc.__class__.__name__}: {exc}"


def _paired_table_metric(reference: Any, candidate: Any, score_pair: Callable[[Any, Any], float],
                         parse: Callable[[Any, str], tuple[Sequence[Any] | None, str | None]] = _parse,
                         ) -> MetricResult:
    """Pair the i-th candidate table with the i-th reference table (document order: by start offset
    in the text, HTML and Markdown tables together); the score
    is the sum of pair scores / max(tables in reference, tables in candidate), so a missing or
    an extra table counts 0. None when the reference has no table."""
    ref_tables, error = parse(reference, "reference")
    if ref_tables is None:
        return None, {"reason": error}
    if not ref_tables:
        return None, {"reason": "reference has no table"}
    cand_tables, error = parse(candidate, "candidate")
    if cand_tables is None:
        return 0.0, {"reason": error, "reference_tables": len(ref_tables)}
    details: Details = {"reference_tables": len(ref_tables), "candidate_tables": len(cand_tables)}
    if not cand_tables:
        details["reason"] = "candidate has no table"
        return 0.0, details
    per_table, failures = [], []
    for i, (c, r) in enumerate(zip(cand_tables, ref_tables, strict=False)):
        try:
            per_table.append(score_pair(c, r))
        except Exception as exc:  # this pair scores 0; the others keep their scores
            per_table.append(0.0)
            failures.append(f"table {i + 1}: {exc.__class__.__name__}: {exc}")
    if failures:
        details["failed"] = failures[:MAX_PROBLEMS]
    details["per_table"] = [round(s, 6) for s in per_table]
    problems = [f"candidate table {i + 1}: {p}" for i, t in enumerate(cand_tables)
                for p in getattr(t, "problems", ())]
    if problems:
        details["problems"] = problems[:MAX_PROBLEMS]
    if len(cand_tables) != len(ref_tables):
        details["reason"] = "table counts differ; unpaired tables score 0"
    return sum(per_table) / max(len(ref_tables), len(cand_tables)), details


def teds_details(pred: Any, ref: Any, structure_only: bool = False,
                 convention: TedsConvention = DEFAULT_TEDS_CONVENTION) -> MetricResult:
    """TEDS (or TEDS-S) between every table of ``pred`` and of ``ref``, with details.

    Tables are HTML ``<table>`` or Markdown pipe tables anywhere in the text. Per pair
    ``table_teds`` (``convention="omnidocbench"``) or ``schemas.teds_pubtabnet.pubtabnet_teds``
    clamped at 0 (``"pubtabnet"``); over a page, tables are paired in document order and the score
    is Σ TEDS(pair) / max(#ref tables, #pred tables). Never raises on input: a reference without
    tables gives ``(None, {"reason": ...})``; a prediction without tables, or input that is not
    text, 0. An unknown ``convention`` is a ValueError.
    """
    if check_teds_convention(convention) == "pubtabnet":
        return _paired_table_metric(ref, pred, lambda c, r: max(0.0, pubtabnet_teds(c, r, structure_only)),
                                    _parse_pubtabnet)
    return _paired_table_metric(ref, pred, lambda c, r: table_teds(c, r, structure_only))


def teds(pred: Any, ref: Any, structure_only: bool = False,
         convention: TedsConvention = DEFAULT_TEDS_CONVENTION) -> float:
    """TEDS as a plain float: ``teds_details`` with n/a and failures mapped to 0.0."""
    score, _ = teds_details(pred, ref, structure_only, convention)
    return 0.0 if score is None else score


def table_to_html(table: Table) -> str:
    """Canonical HTML of a parsed table: ``<table><tr><td colspan="2">text</td>...</tr></table>``,
    ``th`` for header cells, spans only when > 1, text HTML-escaped and whitespace-collapsed."""
    out = ["<table>"]
    for row in table.rows:
        out.append("<tr>")
        for cell in row:
            tag = "th" if cell.header else "td"
            attrs = "".join(f' {k}="{v}"' for k, v in (("rowspan", cell.rowspan), ("colspan", cell.colspan)) if v > 1)
            out.append(f"<{tag}{attrs}>{html.escape(cell.text, quote=False)}</{tag}>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def table_edit_similarity(reference: Any, candidate: Any) -> MetricResult:
    """Table edit distance as a score: 1 - normalized_edit_distance(table_to_html(ref),
    table_to_html(cand)) per table pair (canonical HTML, so attribute order, whitespace and
    thead/tbody wrappers do not count), tables paired in order as in ``teds_details``."""
    return _paired_table_metric(
        reference, candidate, lambda c, r: text_similarity(table_to_html(r), table_to_html(c)))


def table_integrity(text: str) -> MetricResult:
    """Per table: filled / total positions of its occupancy grid (``Table.occupancy()``; holes come
    from ragged rows or spans that overrun), halved when the parser reported other problems
    (unclosed ``<table>``, cells outside ``<tr>``). Score = mean over tables; 1 with no table."""
    tables, error = _parse(text, "text")
    if tables is None:
        return 0.0, {"reason": error}
    if not tables:
        return 1.0, {"tables": 0}
    scores: list[float] = []
    problems: list[str] = []
    for i, table in enumerate(tables, start=1):
        filled, total = table.occupancy()
        score = filled / total if total else 1.0
        if filled < total:
            problems.append(f"table {i}: {total - filled} of {total} grid positions empty")
        other = [p for p in table.problems if "rectangle" not in p and "different numbers" not in p]
        if other:
            score *= 0.5
            problems += [f"table {i}: {p}" for p in other]
        scores.append(score)
    details: Details = {"tables": len(tables), "per_table": [round(s, 6) for s in scores]}
    if problems:
        details["problems"] = problems[:MAX_PROBLEMS]
    return sum(scores) / len(scores), details
