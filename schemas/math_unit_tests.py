"""The ``math`` unit test: a formula appears in the transcription, verbatim or rendering the same
(olmOCR-Bench semantics; see ``schemas.unit_tests``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from rapidfuzz import fuzz

from schemas.unit_test_base import UnitTest, shorten

_MATH_PATTERNS = (
    re.compile(r"\\\((.+?)\\\)", re.DOTALL),
    re.compile(r"\\\[(.+?)\\\]", re.DOTALL),
)
_DOLLAR_PATTERNS = (
    re.compile(r"\$\$(.+?)\$\$", re.DOTALL),
    re.compile(r"\$(.+?)\$", re.DOTALL),
)


def _nfc(text: str) -> str:
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


@lru_cache(maxsize=64)
def extract_equations(markdown: str, ignore_dollar_delimited: bool = False) -> tuple[str, ...]:
    """Candidate formulas in olmOCR-Bench order: every ``\\(..\\)``, then ``\\[..\\]``, then (unless
    ignored) ``$$..$$`` and ``$..$``; each kind is cut out before the next is searched."""
    patterns = _MATH_PATTERNS if ignore_dollar_delimited else _MATH_PATTERNS + _DOLLAR_PATTERNS
    found: list[str] = []
    rest = markdown
    for pattern in patterns:
        found.extend(m.strip() for m in pattern.findall(rest))
        rest = pattern.sub("", rest)
    return tuple(found)


def katex_key() -> str:
    """The installed KaTeX, for refresh keys (``resolved_inputs``): ``katex <version>`` or ``katex missing``.
    A stage whose output depends on rendering formulas (formula_render; conventions, instruct and relabel
    re-checking ``math`` tests) names it, so installing or upgrading KaTeX makes a refresh run it again."""
    from schemas.math_render import katex_version  # lazy: the browser-based renderer

    try:
        return f"katex {katex_version()}"
    except RuntimeError:
        return "katex missing"


def katex_inputs(spec: dict) -> list[str]:
    """``resolved_inputs`` (``pipelines.refresh``) of a stage whose output depends on rendering formulas:
    ``[katex_key()]``, whatever its config ``spec``."""
    return [katex_key()]


def run_cache_dir(output: str) -> str:
    """Where a run with output folder ``output`` caches the renders of its (untrusted) formulas
    (``schemas.math_render.cache_in``): ``<output>/_katex``, never the user's ``~/.cache``; ``""`` (no
    cache) for an object-store output, where SQLite cannot live."""
    return "" if "://" in output else f"{output.rstrip('/')}/_katex"


@dataclass(kw_only=True)
class MathTest(UnitTest):
    """The formula ``math`` appears: an extracted equation equal to it, or one that renders the same
    (``schemas.math_render.formulas_match``; candidates tried most string-similar first).

    The formula and the equations are compared in Unicode NFC: a page in NFD (``≠`` as ``=`` + U+0338,
    which KaTeX rejects; ``é`` as ``e`` + U+0301) reads as the same formulas."""

    TYPES: ClassVar[tuple[str, ...]] = ("math",)

    math: str
    ignore_dollar_delimited: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self._str("math")
        self._bool("ignore_dollar_delimited")

    def check(self, markdown: str) -> tuple[bool, str]:
        math = _nfc(self.math)
        equations = tuple(_nfc(eq) for eq in extract_equations(markdown, self.ignore_dollar_delimited))
        if math in equations:
            return True, f"equation {shorten(self.math)!r} found verbatim"
        if not equations:
            kinds = "\\( \\) or \\[ \\]" if self.ignore_dollar_delimited else "\\( \\), \\[ \\], $$ $$ or $ $"
            return False, f"no equations ({kinds}) in the page"
        from schemas.math_render import (
            formulas_match,  # lazy: pulls in the browser-based renderer
        )

        ordered = sorted(equations, key=lambda eq: -fuzz.ratio(eq, math))
        last_reason = ""
        for hypothesis in ordered:
            try:
                matched, reason = formulas_match(math, hypothesis)
            except Exception as exc:  # noqa: BLE001 - one unrenderable candidate must not hide the others
                matched, reason = False, f"{type(exc).__name__}: {exc}"
            if matched:
                return True, f"equation {shorten(hypothesis)!r} renders like {shorten(self.math)!r}: {reason}"
            last_reason = reason
        return False, f"no match for {shorten(self.math)!r} among {len(ordered)} equation(s); last: {last_reason}"
