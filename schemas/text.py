"""Text primitives shared by the olmOCR-Bench-compatible unit tests (``schemas/unit_tests.py``).

``normalize_text`` reproduces olmOCR-Bench's normalisation step for step (same regexes, same
order, same replacement table), because test outcomes depend on its quirks: paired ``_``/``*``
inside a line vanish, ``<br />`` with a space is kept, newlines become spaces. It runs on the
reference fields of a test and on the candidate Markdown.

Also here: ``find_near_matches`` (Levenshtein-bounded substring search with the match semantics of
the ``fuzzysearch`` library that olmOCR-Bench's ``order`` test uses), ``trailing_repeats`` (the
back-to-back n-gram counter of olmOCR's ``RepeatDetector``), and per-page caches so that many
tests on one page normalise the page once.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple

from rapidfuzz.distance import Levenshtein

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


def normalize_text(text: str) -> str:
    """olmOCR-Bench ``normalize_text``: drop bold/italic markers, collapse whitespace, NFC, ASCII-fy
    quotes and dashes. Not idempotent (``*_a_*`` -> ``_a_`` -> ``a``), exactly like the reference."""
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
    """Substrings of ``text`` within Levenshtein distance ``max_l_dist`` of ``pattern``.

    Follows ``fuzzysearch.find_near_matches(pattern, text, max_l_dist=...)``: with 0 every exact
    occurrence (overlaps included); otherwise the pattern is cut into ``max_l_dist + 1`` n-grams (one
    must occur exactly), each exact n-gram hit is extended right then left by the cheapest (then
    longest) alignment of the rest of the pattern, and overlapping hits are merged into one, keeping
    the lowest distance, then the longest, then the leftmost. Sorted by start.
    """
    if not pattern:
        raise ValueError("pattern must not be empty")
    if max_l_dist < 0:
        raise ValueError("max_l_dist must be >= 0")
    m, n = len(pattern), len(text)
    if max_l_dist == 0:
        found, i = [], text.find(pattern)
        while i >= 0:
            found.append(NearMatch(i, i + m, 0))
            i = text.find(pattern, i + 1)
        return found
    if max_l_dist >= m:
        raise ValueError("max_l_dist must be smaller than the pattern length")
    k = max_l_dist
    ngram_len = m // (k + 1)
    hits: set[NearMatch] = set()
    for ngram_start in range(0, m - ngram_len + 1, ngram_len):
        ngram_end = ngram_start + ngram_len
        ngram = pattern[ngram_start:ngram_end]
        before_reversed = pattern[:ngram_start][::-1]
        after = pattern[ngram_end:]
        lo = max(0, ngram_start - k)
        hi = max(lo, min(n, n - m + ngram_end + k))
        index = text.find(ngram, lo, hi)
        while index >= 0:
            right = _expand(after, text[index + ngram_len:index - ngram_start + m + k], k)
            if right is not None:
                dist_right, right_size = right
                window = text[max(0, index - ngram_start - (k - dist_right)):index][::-1]
                left = _expand(before_reversed, window, k - dist_right)
                if left is not None:
                    dist_left, left_size = left
                    hits.add(NearMatch(index - left_size, index + ngram_len + right_size, dist_left + dist_right))
            index = text.find(ngram, index + 1, hi)
    return _consolidate(hits)


def _expand(sub: str, window: str, max_dist: int) -> tuple[int, int] | None:
    """Best alignment of all of ``sub`` against a prefix of ``window``: (distance, prefix length),
    lowest distance first, then the longest prefix; None when no prefix is within ``max_dist``."""
    length = len(sub)
    if length == 0:
        return 0, 0
    best: tuple[int, int] | None = None
    for j in range(max(0, length - max_dist), min(len(window), length + max_dist) + 1):
        d = Levenshtein.distance(sub, window[:j], score_cutoff=max_dist)
        if d <= max_dist and (best is None or d <= best[0]):
            best = (d, j)
    return best


def _consolidate(hits: set[NearMatch]) -> list[NearMatch]:
    groups: list[list[NearMatch]] = []
    for hit in sorted(hits):
        # sorted by start: a hit can only overlap the group opened last
        if groups and hit.start < max(h.end for h in groups[-1]) and hit.end > groups[-1][0].start:
            groups[-1].append(hit)
        else:
            groups.append([hit])
    return sorted(min(group, key=lambda h: (h.dist, h.start - h.end, h.start)) for group in groups)
