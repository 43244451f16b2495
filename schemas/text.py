"""Text primitives shared by the olmOCR-Bench-compatible unit tests (``schemas/unit_tests.py``).

``normalize_text`` reproduces olmOCR-Bench's normalisation step for step (same regexes, same
order, same replacement table), because test outcomes depend on its quirks: paired ``_``/``*``
inside a line vanish, ``<br />`` with a space is kept, newlines become spaces. It runs on the
reference fields of a test and on the candidate Markdown.

Also here: ``find_near_matches`` (Levenshtein-bounded substring search: the ``fuzzysearch`` library
that olmOCR-Bench's ``order`` test calls, with a stable choice between equally good matches),
``trailing_repeats`` (the back-to-back n-gram counter of olmOCR's ``RepeatDetector``), and per-page
caches so that many tests on one page normalise the page once.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple

from fuzzysearch.common import group_matches
from fuzzysearch.levenshtein import find_near_matches_levenshtein
from fuzzysearch.search_exact import search_exact

_BR = re.compile(r"<br/?>")
_BOLD_STARS = re.compile(r"\*\*(.*?)\*\*")
_BOLD_UNDERSCORES = re.compile(r"__(.*?)__")
_B_TAG = re.compile(r"</?b>")
_I_TAG = re.compile(r"</?i>")
_BOLD_PAIR = re.compile(r"(\*\*|__)(.*?)\1")
_ITALIC_PAIR = re.compile(r"(\*|_)(.*?)\1")
_WHITESPACE = re.compile(r"\s+")
_REPLACEMENTS = {
    "\u2018": "'", "\u2019": "'", "\u201a": "'",  # ‘ ’ ‚
    "\u201c": '"', "\u201d": '"', "\u201e": '"',  # “ ” „
    "\uff3f": "_",  # fullwidth low line
    "\u2013": "-", "\u2014": "-", "\u2011": "-", "\u2012": "-", "\u2212": "-",  # – — ‑ ‒ −
    "\u00b5": "\u03bc",  # micro sign -> Greek mu
}
_TRANSLATE = str.maketrans(_REPLACEMENTS)
_NEEDS_WORK = re.compile(r"[<*_]|[^\S ]| {2}")


def normalize_text(text: str | None) -> str:
    """olmOCR-Bench ``normalize_text``: drop bold/italic markers, collapse whitespace, NFC, ASCII-fy
    quotes and dashes. Not idempotent (``*_a_*`` -> ``_a_`` -> ``a``), exactly like the reference.
    None (an unset field given as null) gives "" (the reference returns None; both are falsy)."""
    if text is None:
        return ""
    if text.isascii() and not _NEEDS_WORK.search(text):
        return text  # no markup, no whitespace to collapse, nothing non-ASCII: every step is a no-op
    text = _BR.sub(" ", text)
    text = _BOLD_STARS.sub(r"\1", text)
    text = _BOLD_UNDERSCORES.sub(r"\1", text)
    text = _B_TAG.sub("", text)
    text = _I_TAG.sub("", text)
    text = _BOLD_PAIR.sub(r"\2", text)
    text = _ITALIC_PAIR.sub(r"\2", text)
    text = _WHITESPACE.sub(" ", text)
    text = unicodedata.normalize("NFC", text)
    return text.translate(_TRANSLATE)


# Candidate pages are checked by many tests in a row; the caches make that one normalisation per page
# (a str caches its own hash, so a hit on the same object costs a dict lookup).
@lru_cache(maxsize=64)
def normalized(text: str) -> str:
    return normalize_text(text)


@lru_cache(maxsize=64)
def normalized_lower(text: str) -> str:
    return normalized(text).lower()


def alnum_lower(text: str) -> str:
    """Alphanumeric characters of ``normalize_text(text)``, lowercased (footnote comparisons)."""
    return "".join(c for c in normalize_text(text) if c.isalnum()).lower()


_ASCII_ALNUM = bytes(i for i in range(128) if chr(i).isalnum())
_ASCII_RUN = re.compile(r"[\x00-\x7f]+")


def non_ascii(text: str) -> str:
    """The characters of ``text`` above U+007F, in order (fast path for mostly-ASCII pages)."""
    return "" if text.isascii() else _ASCII_RUN.sub("", text)


def count_alnum(text: str) -> int:
    """Number of characters for which ``str.isalnum()`` holds."""
    ascii_bytes = text.encode("ascii", "ignore")
    count = len(ascii_bytes) - len(ascii_bytes.translate(None, _ASCII_ALNUM))
    return count + sum(map(str.isalnum, non_ascii(text)))


def spaces_collapsed(text: str) -> str:
    """Every run of whitespace as one space, the ends kept (``edit_distance.collapse_whitespace`` strips them)."""
    return _WHITESPACE.sub(" ", text)


def trailing_repeats(text: str, max_ngram: int = 5) -> list[int]:
    """For n = 1..max_ngram: how many times the last n characters repeat back to back at the end, with
    every whitespace run counted as one space (``spaces_collapsed``).

    ``"abcabc"`` -> ``[1, 1, 2, 1, 1]``; ``""`` -> all zeros. Same counts as olmOCR's ``RepeatDetector``
    (``ngram_repeats``), which collapses whitespace first too: trailing blank lines are one space, and a
    loop whose copies differ only in whitespace is a loop.
    """
    text = spaces_collapsed(text)
    counts = [0] * max_ngram
    length = len(text)
    for size in range(1, max_ngram + 1):
        if length < size:
            continue
        target = text[length - size:]
        count = 0
        pos = length - size
        while pos >= 0 and text.startswith(target, pos):
            count += 1
            pos -= size
        counts[size - 1] = count
    return counts


class NearMatch(NamedTuple):
    start: int
    end: int
    dist: int


def find_near_matches(pattern: str, text: str, max_l_dist: int) -> list[NearMatch]:
    """Substrings of ``text`` within Levenshtein distance ``max_l_dist`` of ``pattern``, sorted by start.

    ``fuzzysearch.find_near_matches(pattern, text, max_l_dist=max_l_dist)``, the call olmOCR-Bench's
    ``order`` test makes, with one change: the choice among equally good matches is made stable.
    The search itself is fuzzysearch's (0: every exact occurrence, overlaps included; patterns of at
    least ``3 * (max_l_dist + 1)`` characters: its n-gram expansion; shorter ones: its
    linear-programming search), and so is the grouping of overlapping matches. fuzzysearch then keeps
    the lowest distance, then the longest match of each group, by ``min`` over a ``set`` whose order
    follows ``attrs`` hashes, which are salted by ``PYTHONHASHSEED``: between matches equal on both
    it picks one by chance, differently from one process to the next. Here the leftmost of them wins,
    one of the picks fuzzysearch can make, so the result is reproducible and otherwise identical.

    Not hand-written on purpose: a rapidfuzz-based port of the n-gram search was ~10x faster but chose
    other match starts (fuzzysearch's expansions stop early and prefer the later end on ties) and had
    no linear-programming search, which flipped ``order`` verdicts (docs/judging.md).
    """
    if not pattern:
        raise ValueError("pattern must not be empty")
    if max_l_dist < 0:
        raise ValueError("max_l_dist must be >= 0")
    if max_l_dist == 0:
        return [NearMatch(i, i + len(pattern), 0) for i in search_exact(pattern, text)]
    if max_l_dist >= len(pattern):
        raise ValueError("max_l_dist must be smaller than the pattern length")
    groups = group_matches(find_near_matches_levenshtein(pattern, text, max_l_dist))
    best = (min(group, key=lambda m: (m.dist, m.start - m.end, m.start)) for group in groups)
    return sorted(NearMatch(m.start, m.end, m.dist) for m in best)
