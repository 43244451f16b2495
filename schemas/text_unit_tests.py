"""The unit-test types that check running text: ``present``/``absent``, ``order``, ``baseline``,
``format`` (heading, bold, italic) and ``footnote`` (olmOCR-Bench semantics; see ``schemas.unit_tests``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar

from rapidfuzz import fuzz

from schemas.text import (
    alnum_lower,
    count_alnum,
    find_near_matches,
    non_ascii,
    normalize_text,
    normalized,
    normalized_lower,
    spaces_collapsed,
    trailing_repeats,
)
from schemas.unit_test_base import CUTOFF_SLACK, UnitTest, match_threshold, shorten

FORMATS = ("heading", "bold", "italic")


@dataclass(kw_only=True)
class PresenceTest(UnitTest):
    """``present``: ``text`` occurs (up to ``max_diffs`` edits, ``partial_ratio``); ``absent``: it does not.

    ``first_n``/``last_n`` restrict the search to the first/last characters of the normalised page
    (both: their concatenation).
    """

    TYPES: ClassVar[tuple[str, ...]] = ("present", "absent")

    text: str
    case_sensitive: bool = True
    first_n: int | None = None
    last_n: int | None = None
    _query: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._bool("case_sensitive")
        self._int("first_n", minimum=1, optional=True)
        self._int("last_n", minimum=1, optional=True)
        query = self._normalized_field("text")
        self._query = query if self.case_sensitive else query.lower()

    def check(self, markdown: str) -> tuple[bool, str]:
        query = self._query
        md = normalized(markdown) if self.case_sensitive else normalized_lower(markdown)
        where = "page"
        if self.first_n and self.last_n:
            md, where = md[: self.first_n] + md[-self.last_n:], f"first {self.first_n} + last {self.last_n} chars"
        elif self.first_n:
            md, where = md[: self.first_n], f"first {self.first_n} chars"
        elif self.last_n:
            md, where = md[-self.last_n:], f"last {self.last_n} chars"
        present = self.type == "present"

        # partial_ratio is symmetric in its shorter argument: guard against a page shorter than the query
        min_required = len(query) - self.max_diffs
        if len(md) < min_required:
            if present:
                return False, (f"{where} too short ({len(md)} chars) to contain {shorten(query)!r} "
                               f"(need >= {min_required})")
            return True, f"{where} too short ({len(md)} chars) to contain {shorten(query)!r}"

        threshold = match_threshold(self.max_diffs, len(query))
        if self.max_diffs == 0:
            found = query in md  # partial_ratio == 100 exactly when the query is a substring
            ratio = 1.0 if found else None
        else:
            score = fuzz.partial_ratio(query, md, score_cutoff=max(0.0, threshold * 100 - CUTOFF_SLACK))
            ratio = score / 100.0
            found = ratio >= threshold
        if found:
            if present:
                return True, f"found {shorten(query)!r} in {where} (ratio {ratio:.3f} >= {threshold:.3f})"
            return False, f"expected {shorten(query)!r} absent from {where}, but ratio {ratio:.3f} >= {threshold:.3f}"
        if present:
            best = fuzz.partial_ratio(query, md) / 100.0
            return False, f"expected {shorten(query)!r} in {where}, best match ratio {best:.3f} < {threshold:.3f}"
        return True, f"{shorten(query)!r} absent from {where} (best match ratio < {threshold:.3f})"


@dataclass(kw_only=True)
class OrderTest(UnitTest):
    """``before`` starts before ``after`` for some pair of Levenshtein near matches (<= ``max_diffs``),
    found as ``fuzzysearch`` finds them (``schemas.text.find_near_matches``)."""

    TYPES: ClassVar[tuple[str, ...]] = ("order",)

    before: str
    after: str
    _before: str = field(init=False, repr=False, compare=False)
    _after: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._before = self._normalized_field("before")
        self._after = self._normalized_field("after")
        limit = min(len(self._before), len(self._after)) // 2
        if self.max_diffs > limit:
            raise ValueError(
                f"field 'max_diffs' ({self.max_diffs}) exceeds half the length of 'before'/'after' ({limit})")

    def check(self, markdown: str) -> tuple[bool, str]:
        md = normalized(markdown)
        if self.max_diffs == 0:
            first_before = md.find(self._before)
        else:
            bm = find_near_matches(self._before, md, self.max_diffs)
            first_before = bm[0].start if bm else -1
        if first_before < 0:
            return False, f"'before' text {shorten(self._before)!r} not found (max_l_dist {self.max_diffs})"
        # olmOCR searches for both texts first; the verdict is the same, and a missing 'before' saves a search
        if self.max_diffs == 0:
            last_after = md.rfind(self._after)
        else:
            am = find_near_matches(self._after, md, self.max_diffs)
            last_after = am[-1].start if am else -1
        if last_after < 0:
            return False, f"'after' text {shorten(self._after)!r} not found (max_l_dist {self.max_diffs})"
        if first_before < last_after:
            return True, (f"{shorten(self._before)!r} at {first_before} precedes "
                          f"{shorten(self._after)!r} at {last_after}")
        return False, (f"{shorten(self._before)!r} (first at {first_before}) never precedes "
                       f"{shorten(self._after)!r} (last at {last_after})")


_IMAGE_TAG = re.compile(r"!\[.*?\]\(.*?\)")
_DISALLOWED = re.compile(
    "["
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\u3040-\u309f"  # hiragana
    "\u30a0-\u30ff"  # katakana
    "\U0001f600-\U0001f64f"  # emoticons
    "\U0001f300-\U0001f5ff"  # symbols and pictographs
    "\U0001f680-\U0001f6ff"  # transport and map
    "\U0001f1e0-\U0001f1ff"  # regional indicators (flags)
    "]"
)


@dataclass(kw_only=True)
class BaselineTest(UnitTest):
    """Page-level sanity on the raw text. With ``max_length``: a blank-page check (at most that many
    alphanumerics). Otherwise: some alphanumerics, no n-gram (1-5 chars) repeated more than
    ``max_repeats`` times back to back at the end, and no CJK/kana/emoji (unless disabled)."""

    TYPES: ClassVar[tuple[str, ...]] = ("baseline",)

    type: str = "baseline"
    max_length: int | None = None
    max_length_skips_image_alt_tags: bool = False
    max_repeats: int = 30
    check_disallowed_characters: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._int("max_length", minimum=0, optional=True)
        self._bool("max_length_skips_image_alt_tags")
        self._int("max_repeats", minimum=1)
        self._bool("check_disallowed_characters")

    def check(self, markdown: str) -> tuple[bool, str]:
        if self.max_length is not None:
            text = _IMAGE_TAG.sub("", markdown) if self.max_length_skips_image_alt_tags else markdown
            n = count_alnum(text)
            if n > self.max_length:
                return False, f"{n} alphanumeric characters on a page expected blank (max {self.max_length})"
            return True, f"blank enough: {n} alphanumeric characters (max {self.max_length})"
        if count_alnum(markdown) == 0:
            return False, "the text contains no alphanumeric characters"
        for size, count in enumerate(trailing_repeats(markdown, 5), start=1):
            if count > self.max_repeats:
                tail = spaces_collapsed(markdown)[-size:]
                return False, f"text ends with {count} back-to-back repeats of the {size}-gram {tail!r}"
        if self.check_disallowed_characters:
            bad = _DISALLOWED.findall(non_ascii(markdown))
            if bad:
                sample = "".join(dict.fromkeys(bad))[:10]
                return False, f"text contains {len(bad)} disallowed (CJK/kana/emoji) characters, e.g. {sample!r}"
        charset = ", no disallowed characters" if self.check_disallowed_characters else ""
        return True, "has text, no runaway repetition" + charset


_FORMAT_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "heading": (
        re.compile(r"^#{1,6}\s+(.+?)$", re.MULTILINE),
        re.compile(r"<h[1-6][^>]*>(.*?)</h[1-6]>", re.IGNORECASE | re.DOTALL),
    ),
    "bold": (
        re.compile(r"\*\*(.*?)\*\*", re.DOTALL),
        re.compile(r"__(.*?)__", re.DOTALL),
        re.compile(r"<b[^>]*>(.*?)</b>", re.IGNORECASE | re.DOTALL),
        re.compile(r"<strong[^>]*>(.*?)</strong>", re.IGNORECASE | re.DOTALL),
    ),
    "italic": (
        re.compile(r"(?<!\*)\*(?!\*)(.*?)(?<!\*)\*(?!\*)", re.DOTALL),
        re.compile(r"(?<!_)_(?!_)(.*?)(?<!_)_(?!_)", re.DOTALL),
        re.compile(r"<i[^>]*>(.*?)</i>", re.IGNORECASE | re.DOTALL),
        re.compile(r"<em[^>]*>(.*?)</em>", re.IGNORECASE | re.DOTALL),
    ),
}


@lru_cache(maxsize=64)
def formatted_spans(markdown: str, fmt: str) -> tuple[str, ...]:
    """Normalised texts of every heading / bold / italic span (Markdown and HTML) in the raw page."""
    return tuple(normalize_text(m) for pattern in _FORMAT_PATTERNS[fmt] for m in pattern.findall(markdown))


@dataclass(kw_only=True)
class FormatTest(UnitTest):
    """``text`` appears inside a span with ``format`` (heading, bold or italic), ``partial_ratio``."""

    TYPES: ClassVar[tuple[str, ...]] = ("format",)

    text: str
    format: str
    case_sensitive: bool = True
    _query: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.format not in FORMATS:
            raise ValueError(f"field 'format' must be one of {list(FORMATS)}, got {self.format!r}")
        self._bool("case_sensitive")
        query = self._normalized_field("text")
        self._query = query if self.case_sensitive else query.lower()

    def check(self, markdown: str) -> tuple[bool, str]:
        spans = formatted_spans(markdown, self.format)
        if not self.case_sensitive:
            spans = tuple(s.lower() for s in spans)
        query = self._query
        threshold = match_threshold(self.max_diffs, len(query))
        min_required = len(query) - self.max_diffs
        best = 0.0
        for span in spans:
            if len(span) < min_required:
                continue
            if span and query in span:
                return True, f"{shorten(query)!r} is {self.format}"
            ratio = fuzz.partial_ratio(query, span) / 100.0
            best = max(best, ratio)
            if ratio >= threshold:
                return True, f"{shorten(query)!r} is {self.format} (ratio {ratio:.3f} >= {threshold:.3f})"
        if not spans:
            return False, f"{shorten(query)!r} not {self.format}: no {self.format} text in the page"
        sample = ", ".join(repr(shorten(s, 20)) for s in spans[:3])
        return False, f"{shorten(query)!r} not {self.format} (best ratio {best:.3f}); {self.format} text: {sample}"


_SUPERSCRIPT_DIGITS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_FOOTNOTE_WINDOW = 200


@dataclass(kw_only=True)
class FootnoteTest(UnitTest):
    """Footnote ``marker`` appears as ``[^m]`` (not a definition), ``<sup>m</sup>`` or superscript
    digits; optional ``appears_before_marker``/``appears_after_marker`` must sit within 200 characters
    before/after some occurrence (alphanumerics only, lowercased, ``partial_ratio``)."""

    TYPES: ClassVar[tuple[str, ...]] = ("footnote",)

    marker: str
    appears_before_marker: str | None = None
    appears_after_marker: str | None = None
    _patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _before: str | None = field(init=False, repr=False, compare=False)
    _after: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._str("marker")
        if any(c.isspace() for c in self.marker):
            raise ValueError(f"field 'marker' must not contain whitespace, got {self.marker!r}")
        self._before = self._optional_context("appears_before_marker")
        self._after = self._optional_context("appears_after_marker")
        m = re.escape(self.marker)
        patterns = [re.compile(rf"\[\^{m}\](?!:)"), re.compile(rf"<sup[^>]*>{m}</sup>", re.IGNORECASE)]
        if self.marker.isascii() and self.marker.isdigit():
            patterns.append(re.compile(re.escape(self.marker.translate(_SUPERSCRIPT_DIGITS))))
        self._patterns = tuple(patterns)

    def _optional_context(self, name: str) -> str | None:
        value = getattr(self, name)
        if value is None or value == "":
            return None
        return self._normalized_field(name)

    def check(self, markdown: str) -> tuple[bool, str]:
        spans = [(m.start(), m.end()) for p in self._patterns for m in p.finditer(markdown)]
        if not spans:
            m = self.marker
            return False, f"footnote marker {m!r} not found as [^{m}], <sup>{m}</sup> or superscript"
        failures = []
        if self._before is not None and not self._near(markdown, spans, self._before, before=True):
            failures.append(f"{shorten(self._before)!r} not found before any marker {self.marker!r}")
        if self._after is not None and not self._near(markdown, spans, self._after, before=False):
            failures.append(f"{shorten(self._after)!r} not found after any marker {self.marker!r}")
        if failures:
            return False, "; ".join(failures)
        return True, f"footnote marker {self.marker!r} found ({len(spans)} occurrence(s)) with its context"

    def _near(self, markdown: str, spans: list[tuple[int, int]], target: str, *, before: bool) -> bool:
        clean_target = alnum_lower(target)
        threshold = match_threshold(self.max_diffs, len(target))
        for start, end in spans:
            raw = markdown[max(0, start - _FOOTNOTE_WINDOW):start] if before else markdown[end:end + _FOOTNOTE_WINDOW]
            clean = alnum_lower(raw)
            if not clean:
                continue
            check_length = min(len(clean), len(clean_target) * 2)
            # an empty target checks the whole window, as olmOCR does (partial_ratio("", text) is 0: no match)
            window = (clean[-check_length:] if before else clean[:check_length]) if check_length else clean
            if len(window) < len(clean_target) - self.max_diffs:
                continue
            if fuzz.partial_ratio(clean_target, window) / 100.0 >= threshold:
                return True
        return False
