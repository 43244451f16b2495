"""Edit distance, the measure the similarity metrics build on, and the result every metric returns.

A metric is ``fn(reference, candidate) -> (score | None, details)`` (``MetricResult``): a score in
[0, 1] (1 = perfect), ``None`` when the reference has no structure of that kind, and a JSON-able
``details`` dict; problems are listed up to ``MAX_PROBLEMS`` with their full count.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

Details = dict[str, Any]
MetricResult = tuple[float | None, Details]

MAX_PROBLEMS = 50  # problems listed per metric; the count is always complete


def token_strings(sequences: Sequence[Sequence[Hashable]]) -> list[str]:
    """Each sequence as a string of one code point per item, equal items (``==``) getting the same
    code point and different items different ones across all ``sequences`` (surrogates skipped), so
    Levenshtein over the strings is Levenshtein over the items. rapidfuzz compares the items of a
    non-string sequence by hash, where ``""`` and ``"\x00"`` (or ``"a"`` and ``97``) collide."""
    vocab: dict[Hashable, str] = {}

    def code(item: Hashable) -> str:
        c = vocab.get(item)
        if c is None:
            n = len(vocab)
            c = vocab[item] = chr(n if n < 0xD800 else n + 0x800)
        return c

    return ["".join(code(item) for item in seq) for seq in sequences]


def normalized_edit_distance(a: str | Sequence[Any], b: str | Sequence[Any]) -> float:
    """Levenshtein(a, b) / max(len(a), len(b)), in [0, 1]; 0.0 for two empty inputs.

    The OmniDocBench text convention (``Edit_dist``), on characters of a string or items of a
    sequence (items compare by ``==``; see ``token_strings``). No normalisation is applied here;
    callers normalise first.
    """
    if not (isinstance(a, str) and isinstance(b, str)):
        a, b = token_strings([a, b])
    return float(Levenshtein.normalized_distance(a, b))


def text_similarity(a: str | Sequence[Any], b: str | Sequence[Any]) -> float:
    """1 - normalized_edit_distance(a, b) = 1 - Levenshtein(a, b) / max(len(a), len(b))."""
    return 1.0 - normalized_edit_distance(a, b)


def collapse_whitespace(text: str) -> str:
    """Runs of whitespace -> one space, ends stripped."""
    return " ".join(text.split())


def distance_matrix(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Normalized edit distances between every string of ``a`` and of ``b``, each distinct
    string computed once."""
    ua: dict[str, int] = {}
    ub: dict[str, int] = {}
    ia = np.array([ua.setdefault(s, len(ua)) for s in a], dtype=np.int64)
    ib = np.array([ub.setdefault(s, len(ub)) for s in b], dtype=np.int64)
    if not ua or not ub:
        return np.zeros((len(a), len(b)))
    m = process.cdist(list(ua), list(ub), scorer=Levenshtein.normalized_distance, dtype=np.float64)
    return m[np.ix_(ia, ib)]


def problem_details(problems: list[str]) -> Details:
    """A metric's ``details`` entries for its problems: the first ``MAX_PROBLEMS`` and the count (none if none)."""
    return {"problems": problems[:MAX_PROBLEMS], "problem_count": len(problems)} if problems else {}


def mask_spans(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with every character inside ``spans`` (but newlines) blanked, so offsets and lines stay."""
    chars = list(text)
    for start, end in spans:
        for k in range(start, end):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars)
