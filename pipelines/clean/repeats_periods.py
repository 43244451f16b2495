"""Exact periodic suffixes, and how many copies of which unit make a loop: shared by both detector passes.

``best_period`` finds the longest accepted periodic suffix of a string from the earlier
occurrences of its last characters; ``natural_phase`` says where copies of a unit naturally begin;
``copy_needs`` gives the copies and covered characters a unit needs (table rows and empty units
need more).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Callable

from pipelines.clean.repeats_config import Bands, RepeatsConfig

TAG = re.compile(r"<[^>]*>|&[a-z]+;")
_ALNUM = re.compile(r"[^\W_]")
_SENTENCE_END = frozenset(".!?;:\u3002\uff01\uff1f")


def band_copies(bands: Bands, period: int) -> int | None:
    for max_period, copies in bands:
        if period <= max_period:
            return copies
    return None


@lru_cache(maxsize=16)
def _band_table(bands: Bands) -> tuple[int, ...]:
    """``band_copies`` for periods 0 .. the last band's (0 stands for None), looked up by index."""
    return tuple(band_copies(bands, p) or 0 for p in range(bands[-1][0] + 1))


# Blanks and fill marks of forms and answer sheets: underscores, ellipses and middle dots, circles
# and boxes to tick. Brackets and single full stops are not fills: ``f(x)``, ``a[i]`` and prose are
# not forms. A run of three or more full stops (a dot leader), an empty box ``[ ]`` and an option
# letter ``(A)`` ... ``(E)`` not written after a word (``f(a)`` is an argument) count as fills too
# (``_FILL_RUNS``).
_FILL = frozenset("_\uff3f\u2026\u2025\u00b7\u30fb\u25cb\u25ef\u25cf\u25a1\u25a0\u2610\u2611\u2612\u25fb"
                  "\u25fc\u25fd\u25fe\u25a2")
_FILL_RUNS = re.compile(r"\.{3,}|\[\s?\]|(?<![\w)\]])[(\[\uff08]\s?[A-Ea-e]\s?[)\]\uff09]")
_LABEL = re.compile(r"[^\W_]+(?:[ \-/][^\W_]+)*")


def _is_symbol(c: str) -> bool:
    """An emoji or another pictographic symbol (category So or Sk) that is no fill mark."""
    return c not in _FILL and unicodedata.category(c) in ("So", "Sk")


def unit_class(unit: str) -> str:
    """``form`` (blanks and fill marks with short labels: ``Name: ____ Company: ____``, ``1. (A) (B)
    (C)``, ``| ○ | ○ |``, ``姓名：＿＿＿``), ``table`` (a table row or cell run), ``empty`` (no letter,
    digit or symbol outside markup) or ``text`` (emoji and other symbols are text: ``😂😭🙏``)."""
    content = TAG.sub("", unit)
    if not _ALNUM.search(content) and (content.isascii() or not any(map(_is_symbol, content))):
        return "form" if _form_like(content) else "empty"
    if _form_like(content):
        return "form"
    if "<t" in unit or "</t" in unit or unit.count("|") >= 2 or ("&" in unit and "\\\\" in unit):
        return "table"
    return "text"


def _form_like(content: str) -> bool:
    """Three blanks or fill marks at least (an option letter counts 3), as many as label characters,
    and labels of at most four words (runs of letters and digits)."""
    if len(content.strip()) <= 2:
        return False
    fills = 0
    for run in _FILL_RUNS.findall(content):
        fills += len(run) if run[0] == "." else 3
    if fills:
        content = _FILL_RUNS.sub(" ", content)
    fills += sum(c in _FILL for c in content)
    if fills < 3:
        return False
    labels = _LABEL.findall(content)
    return sum(map(len, labels)) <= fills and all(label.count(" ") < 4 for label in labels)


def copy_needs(cfg: RepeatsConfig, unit: str, copies: int, base: int, symbol_runs: bool = True) -> tuple[int, int]:
    """(min copies, min covered chars) for ``unit`` whose period band asks ``copies``;
    ``symbol_runs``: units of one or two symbols are judged by their band alone. Form units are held
    to the empty-unit rule (and callers to ``cfg.form_min_chars``)."""
    kind = unit_class(unit)
    if kind == "table":
        return max(copies, cfg.table_min_copies), max(base, cfg.table_min_covered)
    if kind in ("empty", "form") and (len(unit) > 2 or not symbol_runs):
        return max(copies, cfg.empty_min_copies), max(base, cfg.empty_min_covered)
    return copies, base


def _periodic_run(t: str, n: int, p: int, lo: int) -> int:
    """Length of the longest suffix of ``t[:n]`` with period ``p``, given ``t[n-lo:n]`` has it."""
    if t[p:n] == t[: n - p]:
        return n
    good, bad = lo, n  # invariant: region of length `good` is p-periodic, of length `bad` is not
    while bad - good > 1:
        mid = (good + bad) // 2
        if t[n - mid + p: n] == t[n - mid: n - p]:
            good = mid
        else:
            bad = mid
    return good


def best_period(t: str, max_period: int, needle_chars: int, bands: Bands, min_covered: int,
                 accept: Callable[[int, int], bool]) -> tuple[int, int] | None:
    """The (period, region length) of the longest accepted periodic suffix of ``t``, ties to the
    shorter period. Candidates come from earlier occurrences of the last ``needle_chars``."""
    n = len(t)
    k = min(needle_chars, n // 4)
    if k < 1:
        return None
    needle = t[n - k:]
    table = _band_table(bands)
    best: tuple[int, int] | None = None
    lo = max(0, n - k - max_period)
    end = n - 1  # rfind end bound: occurrences must end before the needle itself does
    while True:
        j = t.rfind(needle, lo, end)
        if j < 0:
            return best
        end = j + k - 1
        p = n - k - j
        copies = table[p] if p < len(table) else 0
        if not copies:
            return best
        need = max(copies * p, min_covered)
        if need > n or t[n - need + p: n] != t[n - need: n - p]:
            continue
        length = _periodic_run(t, n, p, need)
        if (best is None or length > best[1]) and accept(p, length):
            best = (p, length)
        # Periods q <= length - p need not be tried, accepted p or not: a multiple of p repeats the
        # same unit with fewer copies, and any other q would make gcd(p, q) < p a period of the
        # region (Fine and Wilf), so its own region is shorter than p + q: under two copies.
        end = min(end, n - length + p - 1)


def _phase_strength(uu: str, c: int, p: int) -> int:
    """How natural a copy boundary is at offset ``c`` of the unit (``uu`` is the unit twice)."""
    a, b = uu[c + p - 1], uu[c]
    if a == "\n":
        return 3 if b.isspace() else 5
    if uu.startswith("<tr", c) or uu.endswith("</tr>", 0, c + p) or uu.endswith("\\\\", 0, c + p):
        return 4
    if a.isspace() and not b.isspace():
        return 3 if uu[c + p - 2] in _SENTENCE_END else 2
    if b in "<\\|$" or a in ">}|$":
        return 1
    return 0


def natural_phase(unit: str, end_phase: int | None) -> int:
    """The offset into ``unit`` (which starts where the loop was measured to start) where copies
    most naturally begin. Ties go to the measured start, then to the nearest offset after it (a
    loop's first characters often match the text before it by accident); when the start is not
    known (``end_phase`` given: the window cut the loop), ties go to ``end_phase``."""
    p = len(unit)
    if p == 1:
        return 0
    uu = unit + unit
    strengths = [_phase_strength(uu, c, p) for c in range(p)]
    top = max(strengths)
    if end_phase is not None and strengths[end_phase % p] == top:
        return end_phase % p
    return strengths.index(top)
