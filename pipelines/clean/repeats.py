"""Degeneration-loop detector for OCR labels (Jina-OCR-v1 section 4.1).

"A detector inspects the last 1,024 characters of long labels for exact, truncation-tolerant, and
gapped repeats and drops the degeneration loops it finds." ``find_loop(text, cfg)`` looks at the
last ``tail_chars`` characters of a label and returns a ``Loop`` or ``None``:

* ``exact``: a unit of 1..``max_period`` characters repeated back to back up to the end;
* ``truncated``: the same, with the label cut inside the last copy;
* ``gapped``: copies that differ in digits (incrementing numbers), whitespace or light punctuation
  (``1. foo 2. foo 3. foo``), or that are separated by short fillers without words.

How it works, and why it is fast (the tail is at most 1 KB; a clean 2-16 KB label costs ~25 µs):

1. Exact periods. A tail with a periodic suffix of period ``p`` contains its own last
   ``needle_chars`` characters again ``p`` characters earlier, so ``str.rfind`` of that needle
   proposes every candidate period. A candidate is first checked with one slice comparison over the
   shortest region its thresholds need, and only then measured by binary search over slice
   comparisons; a measured region rules out all shorter candidates inside it (Fine and Wilf).
   Periodicity does not care where a copy begins, so a loop cut inside its last copy is found like
   a complete one. Exact and truncated are then told apart by the loop's natural copy boundary:
   the phase whose junction is strongest (a line start, a table row, a sentence end, a word start),
   ties going to where the loop begins: the label is truncated when it does not end on it.
   Trailing whitespace is tried both as part of the loop (units ending in a newline) and not.
2. Gapped repeats. The tail is normalised (digits and light punctuation deleted, whitespace runs
   collapsed; ``normalize``) and step 1 runs again on the result. Then a chain search follows
   copies of a normalised needle spaced about one period apart (within ``gap_tolerance``), each
   ``gap_min_similarity`` similar to the last copy and with the same letters (fillers carry no
   words). A chain may end up to two needles before the end when what follows holds no new words.

Legitimate structure is kept out by requiring both enough copies for the period band *and* enough
covered characters; units that look like table rows (HTML ``<tr>``/``<td>``, Markdown pipes, LaTeX
``&`` with ``\\``) need more coverage, and units with no letter or digit outside markup (empty
cells, separator rows; not one- or two-character symbol runs) need the tail nearly full. Gapped
repeats must keep their numbers regular (each number stays or steps by a constant from copy to
copy), so a data table whose rows share only their shape is not a loop; a chain whose copies
differ in words (lists and forms sharing a prefix, table rows with content) is not one either.
Refrains and repeated headers are not back to back, or not repeated often enough.

``span`` is in characters of the text and starts at the first complete copy. Exact and truncated
loops that fill the tail are traced back up to ``trace_chars`` further to report where they start
(the decision only uses the tail); gapped spans stay inside the tail. ``copies`` counts the
complete copies inside the span; ``period`` is the unit length (for gapped loops, the median copy
length in the text).

``RepeatsStage`` is the per-record stage (``record.quality["repeats"]``, drop reason
``repeat_loop_<kind>``). CLI over JSON lines (``--help`` lists every threshold)::

    python -m pipelines.clean.repeats [--input FILE.jsonl] [--output FILE.jsonl] [--tail-chars 1024 ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from statistics import median
from typing import IO, Any, Callable, Iterable, Iterator, Literal

from rapidfuzz.distance import Indel

from schemas.deadletter import Dropped, RecordError
from schemas.page import PageRecord, ProvenanceStep, params_hash

VERSION = "1"
Kind = Literal["exact", "truncated", "gapped"]
Bands = tuple[tuple[int, int], ...]


def _doc(default: Any, help_text: str) -> Any:
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class RepeatsConfig:
    """Thresholds of the loop detector. Each field's ``metadata["help"]`` documents it (also shown
    by the CLI's ``--help``); the defaults are the ones the evaluation set was measured with.
    Bands are ``((max_period, min_copies), ...)``, ascending: a unit of period ``p`` needs the
    copies of the first band with ``p <= max_period``; longer units are not loops."""

    min_length: int = _doc(512, "labels shorter than this many characters are not inspected")
    tail_chars: int = _doc(1024, "only this many last characters are searched (trailing whitespace set aside)")
    max_period: int = _doc(512, "longest repeated unit, in characters")
    needle_chars: int = _doc(8, "length of the end piece whose earlier occurrences propose periods")
    trace_chars: int = _doc(65_536, "how far before the tail an exact loop is followed to report its start "
                                    "(reporting only)")
    min_copies: Bands = _doc(((2, 64), (8, 16), (32, 6), (96, 4), (341, 3), (512, 2)),
                             "exact/truncated: copies needed per period band")
    min_covered_chars: int = _doc(256, "exact/truncated: characters of the tail the loop must cover")
    table_min_copies: int = _doc(6, "copies needed when the unit is a table row (<tr>, <td>, | cells, LaTeX &)")
    table_min_covered: int = _doc(512, "characters a table-row loop must cover")
    empty_min_copies: int = _doc(12, "copies needed when the unit (over 2 characters) has no letter or digit "
                                     "outside markup: empty cells, separator rows")
    empty_min_covered: int = _doc(896, "characters such an empty-unit loop must cover: blank forms and "
                                       "empty tables are kept unless they fill the tail")
    gapped: bool = _doc(True, "look for gapped loops too")
    gapped_min_copies: Bands = _doc(((8, 24), (32, 8), (128, 5), (512, 3)),
                                    "gapped: copies needed per band of normalised unit length")
    gapped_min_covered: int = _doc(320, "gapped: characters the loop must cover (table and empty rules apply too)")
    gap_tolerance: float = _doc(0.25, "chain search: a copy's normalised length may differ from the last "
                                      "copy's by this fraction")
    gap_min_tolerance: int = _doc(4, "chain search: ... or by at least this many characters")
    gap_min_similarity: float = _doc(0.8, "chain search: Indel similarity of each copy to the last copy")
    gap_same_letters: float = _doc(0.8, "chain search: share of copies whose letters (outside tags) are "
                                        "the commonest letters: fillers carry no words")
    number_regularity: float = _doc(0.8, "gapped: per number position, share of copy-to-copy steps equal "
                                         "to the commonest step (incrementing or constant numbers)")
    drop: bool = _doc(True, "stage: drop records with a loop (false: keep them, flagged in quality)")

    def __post_init__(self) -> None:
        for name in ("min_copies", "gapped_min_copies"):
            bands = tuple((int(p), int(c)) for p, c in getattr(self, name))
            if not bands or any(p < 1 or c < 2 for p, c in bands) or list(bands) != sorted(bands):
                raise ValueError(f"repeats: {name} must be ascending (max_period >= 1, copies >= 2) bands")
            object.__setattr__(self, name, bands)
        if self.tail_chars < 16 or self.max_period < 1 or self.needle_chars < 2:
            raise ValueError("repeats: tail_chars >= 16, max_period >= 1 and needle_chars >= 2 are required")
        if not 0 <= self.gap_min_similarity <= 1 or not 0 <= self.gap_same_letters <= 1:
            raise ValueError("repeats: gap_min_similarity and gap_same_letters must lie in [0, 1]")


@dataclass(frozen=True)
class Loop:
    """A loop found at the end of a label: ``span`` is ``(start, end)`` in characters of the text."""

    kind: Kind
    period: int
    copies: int
    span: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        return {"loop": True, "kind": self.kind, "period": self.period, "copies": self.copies,
                "span": list(self.span)}


NO_LOOP: dict[str, Any] = {"loop": False, "kind": None, "period": None, "copies": None, "span": None}

# Normalisation for gapped repeats: ASCII digits and light punctuation deleted (plus a few non-ASCII
# punctuation marks), then runs of ASCII whitespace collapsed. It runs on UTF-8 bytes because
# bytes.translate/split are C loops while str.translate on non-ASCII text goes through a dict per
# character (5x slower). The index map back to the text is only built when a candidate needs it.
_DELETED_ASCII = b"0123456789.,;:!?'\"`"
_DELETED_OTHER = tuple(c.encode() for c in "\u00b7\u2022\u2019\u201c\u201d\uff0c\u3002\uff1b\uff1a\uff01\uff1f\u3001")
_DELETED_OTHER_RE = re.compile(b"|".join(re.escape(m) for m in _DELETED_OTHER))
_DELETED_SET = frozenset(_DELETED_ASCII.decode() + b"".join(_DELETED_OTHER).decode())
_WORDS = re.compile(r"[^ \t\n\r\x0b\x0c]+")  # what bytes.split() splits on
_INT = re.compile(r"\d{1,18}")
_TAG = re.compile(r"<[^>]*>|&[a-z]+;")
_ALNUM = re.compile(r"[^\W_]")
_SENTENCE_END = frozenset(".!?;:\u3002\uff01\uff1f")


def _min_copies(bands: Bands, period: int) -> int | None:
    for max_period, copies in bands:
        if period <= max_period:
            return copies
    return None


def _unit_class(unit: str) -> str:
    """``table`` (a table row or cell run), ``empty`` (no letter or digit outside markup) or ``text``."""
    content = _TAG.sub("", unit)
    if not _ALNUM.search(content):
        return "empty"
    if "<t" in unit or "</t" in unit or unit.count("|") >= 2 or ("&" in unit and "\\\\" in unit):
        return "table"
    return "text"


def _needs(cfg: RepeatsConfig, unit: str, copies: int, base: int, symbol_runs: bool = True) -> tuple[int, int]:
    """(min copies, min covered chars) for ``unit`` whose period band asks ``copies``;
    ``symbol_runs``: units of one or two symbols are judged by their band alone."""
    unit_class = _unit_class(unit)
    if unit_class == "table":
        return max(copies, cfg.table_min_copies), max(base, cfg.table_min_covered)
    if unit_class == "empty" and (len(unit) > 2 or not symbol_runs):
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


def _best_period(t: str, max_period: int, needle_chars: int, bands: Bands, min_covered: int,
                 accept: Callable[[int, int], bool]) -> tuple[int, int] | None:
    """The (period, region length) of the longest accepted periodic suffix of ``t``, ties to the
    shorter period. Candidates come from earlier occurrences of the last ``needle_chars``."""
    n = len(t)
    k = min(needle_chars, n // 4)
    if k < 1:
        return None
    needle = t[n - k:]
    best: tuple[int, int] | None = None
    lo = max(0, n - k - max_period)
    end = n - 1  # rfind end bound: occurrences must end before the needle itself does
    while True:
        j = t.rfind(needle, lo, end)
        if j < 0:
            return best
        end = j + k - 1
        p = n - k - j
        copies = _min_copies(bands, p)
        if copies is None:
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


def _natural_phase(unit: str, end_phase: int | None) -> int:
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


def _trailing_space_start(text: str, cap: int) -> int:
    """Index where the text's trailing whitespace starts (looking back at most ``cap`` characters)."""
    end = len(text)
    while end > 0 and text[end - 1].isspace() and len(text) - end < cap:
        end -= 1
    return end


def find_loop(text: str, cfg: RepeatsConfig = RepeatsConfig()) -> Loop | None:
    """The degeneration loop at the end of ``text``, or ``None`` (also for empty text and texts
    shorter than ``cfg.min_length``). Only the last ``cfg.tail_chars`` characters are searched."""
    if not text or len(text) < cfg.min_length:
        return None
    stop = _trailing_space_start(text, 4096)
    offset = max(0, stop - cfg.tail_chars)
    tail = text[offset:stop]
    if len(tail) < 2 * cfg.needle_chars:
        return None
    loop = None
    if stop < len(text):  # trailing whitespace may be part of the loop (units ending in "\n")
        start = max(0, len(text) - cfg.tail_chars)
        loop = _exact_loop(text, text[start:], start, len(text), cfg)
    periodic = [0]
    if loop is None:
        loop = _exact_loop(text, tail, offset, stop, cfg, periodic)
    if loop is None and cfg.gapped:
        loop = _gapped_loop(tail, offset, cfg, periodic[0])
    return loop


# --------------------------------------------------------------------------- exact and truncated


def _exact_loop(text: str, tail: str, offset: int, stop: int, cfg: RepeatsConfig,
                periodic: list[int] | None = None) -> Loop | None:
    """``periodic[0]`` is set to the longest exactly periodic suffix measured, loop or not."""
    n = len(tail)

    def accept(p: int, length: int) -> bool:
        if periodic is not None:
            periodic[0] = max(periodic[0], length)
        unit = tail[n - p:]
        if unit.isspace():
            return False
        copies, covered = _needs(cfg, unit, _min_copies(cfg.min_copies, p) or 0, cfg.min_covered_chars)
        return length >= covered and length >= copies * p

    found = _best_period(tail, cfg.max_period, cfg.needle_chars, cfg.min_copies, cfg.min_covered_chars, accept)
    if found is None:
        return None
    p, length = found
    start = offset + n - length
    reached_start = True  # the measured start is where the loop begins, unless the window cut it
    if start == offset and offset > 0:
        floor = max(0, offset - cfg.trace_chars)
        start = _trace_back(text, start, stop, p, floor)
        reached_start = start > floor or floor == 0
    # trailing whitespace that continues the pattern belongs to the loop (a unit ending in "\n")
    end = stop
    while end < len(text) and text[end] == text[end - p]:
        end += 1
    length = end - start
    phase = _natural_phase(text[start: start + p], None if reached_start else length % p)
    copies, rest = divmod(length - phase, p)
    kind: Kind = "exact" if rest == 0 else "truncated"
    return Loop(kind, p, copies, (start + phase, end))


def _trace_back(text: str, start: int, stop: int, p: int, floor: int) -> int:
    """Earliest ``s >= floor`` such that ``text[s:stop]`` keeps period ``p`` (given ``text[start:stop]`` does)."""
    if text[floor:start] == text[floor + p: start + p]:
        return floor
    good, bad = start, floor
    step = p
    while good - step > floor:  # gallop: loops usually end well before the cap
        probe = good - step
        if text[probe:good] == text[probe + p: good + p]:
            good, step = probe, step * 2
        else:
            bad = probe
            break
    while good - bad > 1:
        mid = (good + bad) // 2
        if text[mid:good] == text[mid + p: good + p]:
            good = mid
        else:
            bad = mid
    return good


# --------------------------------------------------------------------------- gapped


def normalize(tail: str) -> str:
    """The gapped-repeat view of ``tail``: digits and light punctuation deleted, runs of ASCII
    whitespace collapsed to one space, leading and trailing ones dropped."""
    data = tail.encode("utf-8", "surrogatepass").translate(None, _DELETED_ASCII)
    if not tail.isascii():
        data = _DELETED_OTHER_RE.sub(b"", data)
    return b" ".join(data.split()).decode("utf-8", "surrogatepass")


def normalize_index(tail: str) -> list[int]:
    """For each character of ``normalize(tail)``, its index in ``tail`` (a space maps to the first
    whitespace character of its run)."""
    kept = [i for i, c in enumerate(tail) if c not in _DELETED_SET]
    stripped = "".join(tail[i] for i in kept)
    index: list[int] = []
    previous_end = -1
    for m in _WORDS.finditer(stripped):
        if previous_end >= 0:
            index.append(kept[previous_end])
        index.extend(kept[m.start(): m.end()])
        previous_end = m.end()
    return index


class _Mapping:
    """Lazily built map from normalised positions back to the text."""

    def __init__(self, tail: str):
        self.tail = tail
        self._index: list[int] | None = None

    def boundary(self, x: int) -> int:
        """Tail index where a copy starting at normalised position ``x`` starts: right after the
        previous kept character, so deleted digits and punctuation before it join this copy."""
        if self._index is None:
            self._index = normalize_index(self.tail)
        if x <= 0:
            return 0
        if x >= len(self._index):
            return len(self.tail)
        return self._index[x - 1] + 1

    def raw_copies(self, bounds: list[int]) -> list[str]:
        raw = [self.boundary(x) for x in bounds]
        raw[-1] = len(self.tail)
        return [self.tail[a:b] for a, b in zip(raw, raw[1:])]


def _numbers_regular(copies: list[str], share: float) -> bool:
    """Each number position either stays or steps by a constant between copies (most of the time)."""
    rows = [[int(x) for x in _INT.findall(c)] for c in copies]
    if not any(rows):
        return True
    width, count = Counter(len(r) for r in rows).most_common(1)[0]
    if count < share * len(rows):
        return False
    rows = [r for r in rows if len(r) == width]
    if len(rows) < 3:
        return True
    for j in range(width):
        steps = Counter(b[j] - a[j] for a, b in zip(rows, rows[1:]))
        if steps.most_common(1)[0][1] < share * (len(rows) - 1):
            return False
    return True


def _gapped_loop(tail: str, offset: int, cfg: RepeatsConfig, periodic: int = 0) -> Loop | None:
    """``periodic``: length of the exactly periodic suffix of ``tail`` that the exact pass rejected."""
    search = _GappedSearch(tail, offset, cfg, periodic)
    if len(search.norm) < 2 * cfg.needle_chars:
        return None
    _best_period(search.norm, cfg.max_period, cfg.needle_chars, cfg.gapped_min_copies, 0, search.accept_period)
    if search.result is not None or search.settled:
        return search.result
    return _chain_loop(search)


class _GappedSearch:
    """State of one gapped search: the normalised tail, its lazy map back, the verdict so far."""

    def __init__(self, tail: str, offset: int, cfg: RepeatsConfig, periodic: int):
        self.tail, self.offset, self.cfg, self.periodic = tail, offset, cfg, periodic
        self.norm = normalize(tail)
        self.mapping = _Mapping(tail)
        self.result: Loop | None = None
        # a repeat long enough to be a loop was judged not to be one (a table whose rows share
        # their shape but not their numbers): other views of the same rows need not be tried
        self.settled = False

    def needs(self, unit: str) -> tuple[int, int] | None:
        band = _min_copies(self.cfg.gapped_min_copies, len(unit))
        if band is None:
            return None
        return _needs(self.cfg, unit, band, self.cfg.gapped_min_covered, symbol_runs=False)

    def judge(self, bounds: list[int], unit: str, partial_last: bool = False) -> Loop | None:
        """A gapped Loop over normalised copy boundaries ``bounds`` (ascending, last == len(norm);
        the last copy is cut short when ``partial_last``), or None."""
        copies = len(bounds) - 1 - partial_last
        needs = self.needs(unit)
        if needs is None or copies < needs[0]:
            return None
        raw = self.mapping.raw_copies(bounds)
        whole = raw[:-1] if partial_last else raw
        covered = sum(map(len, raw))
        if covered < needs[1]:
            return None
        self.settled = True
        # Identical copies, or copies inside an exactly periodic stretch (seen at another period),
        # are the exact detector's business; the first copy may have absorbed deleted characters
        # of the text before the loop, so it does not count.
        if len(set(whole[1:])) <= 1 or covered - len(raw[0]) <= self.periodic:
            return None
        if not _numbers_regular(whole, self.cfg.number_regularity):
            return None
        end = self.offset + len(self.tail)
        return Loop("gapped", round(median(len(c) for c in whole)), copies, (end - covered, end))

    def accept_period(self, p: int, length: int) -> bool:
        """``_best_period`` callback: is the normalised periodic suffix (p, length) a gapped loop?"""
        norm, n = self.norm, len(self.norm)
        unit = norm[n - p:]
        needs = self.needs(unit)
        if needs is None or not unit.strip() or length // p < needs[0]:
            return False
        s = n - length
        phase = _natural_phase(norm[s: s + p], None if s > 0 else length % p)
        bounds = list(range(s + phase, n, p))
        loop = self.judge(bounds + [n], unit, bounds[-1] + p != n)
        if loop is not None:
            self.result = loop
        return loop is not None


def _letters(segment: str) -> str:
    """The letters of ``segment`` outside HTML tags: what a filler must not change."""
    return "".join(c for c in _TAG.sub("", segment) if c.isalpha())


def _chain_loop(search: _GappedSearch) -> Loop | None:
    """Copies of a normalised needle about one period apart, each similar to the last copy and
    with the same letters (fillers carry no words). The needle is taken at a few offsets from the
    end, as the text may end inside a filler."""
    norm, cfg = search.norm, search.cfg
    n = len(norm)
    k = cfg.needle_chars
    for shift in (0, k // 2, k, 2 * k):
        e0 = n - shift
        needle = norm[e0 - k: e0]
        if e0 < 2 * k or not needle.strip() or norm.count(needle) < 3:
            continue  # a chain of three copies needs the needle three times
        lo = max(0, e0 - k - cfg.max_period)
        end = e0 - 1
        for _ in range(4):  # a few candidate periods; natural text rarely offers even one
            j = norm.rfind(needle, lo, end)
            if j < 0:
                break
            end = j + k - 1
            d = e0 - k - j
            if d < 2 * k:
                continue  # short units are periodic after normalisation: the exact pass saw them
            loop = _walk_chain(search, needle, e0, d)
            if loop is not None or search.settled:
                return loop
    return None


def _walk_chain(search: _GappedSearch, needle: str, e0: int, d: int) -> Loop | None:
    """Walk back from the copy ``norm[e0-d:e0]`` through earlier occurrences of ``needle``."""
    norm, cfg = search.norm, search.cfg
    k = len(needle)
    template = norm[e0 - d: e0]
    tol = max(cfg.gap_min_tolerance, int(cfg.gap_tolerance * d))
    ends = [e0, e0 - d]
    segments = [template]
    while True:
        e = ends[-1]
        q = norm.rfind(needle, max(0, e - d - k - tol), min(e - 1, e - d + tol))
        if q < 0:
            break
        segment = norm[q + k: e]
        if abs(len(segment) - d) > tol or Indel.normalized_similarity(segment, template) < cfg.gap_min_similarity:
            break
        segments.append(segment)
        ends.append(q + k)
    first = ends[-1] - d
    if first >= 0 and Indel.normalized_similarity(norm[first: ends[-1]], template) >= cfg.gap_min_similarity:
        segments.append(norm[first: ends[-1]])
        ends.append(first)
    if len(segments) < 3:
        return None
    letters = Counter(_letters(x) for x in segments).most_common(1)[0][1]
    if letters < cfg.gap_same_letters * len(segments):
        # a long run of similar lines with different words (a list, a table): not a loop, and
        # other needles would only walk the same lines again
        search.settled = len(segments) >= 8
        return None
    bounds = ends[::-1]
    if e0 < len(norm):
        # what follows the last needle must be the start of another copy or a filler, not words
        # that close the structure ("</table>")
        rest = "".join(c for c in norm[e0:] if c.isalpha())
        if rest and rest not in "".join(c for c in norm[bounds[0]: e0] if c.isalpha()):
            return None
        return search.judge(bounds + [len(norm)], template, True)
    return search.judge(bounds, template)


# --------------------------------------------------------------------------- stage


class RepeatsStage:
    """Per-record stage: finds a loop in ``record.response``, records it in ``quality["repeats"]``
    (``loop``, ``kind``, ``period``, ``copies``, ``span``) and drops the record with reason
    ``repeat_loop_<kind>``, or keeps it flagged when ``cfg.drop`` is false. An empty response has
    no loop; one that is not a string is a ``RecordError`` (``bad_response``)."""

    name = "repeats"

    def __init__(self, cfg: RepeatsConfig = RepeatsConfig()) -> None:
        self.cfg = cfg
        self._provenance = ProvenanceStep(f"clean:{self.name}", VERSION, params_hash(asdict(cfg)))

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        text = "" if record.response is None else record.response
        if not isinstance(text, str):
            raise RecordError("bad_response", f"response must be a string, got {type(text).__name__}")
        loop = find_loop(text, self.cfg)
        record.quality[self.name] = loop.to_dict() if loop else dict(NO_LOOP)
        if loop is not None and self.cfg.drop:
            raise Dropped(f"repeat_loop_{loop.kind}")
        record.provenance.append(self._provenance)
        return [record]


# --------------------------------------------------------------------------- CLI


def _bands(value: str) -> Bands:
    try:
        bands = tuple((int(a), int(b)) for a, b in (part.split(":") for part in value.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MAX_PERIOD:COPIES[,...], got {value!r}") from None
    return bands


def _bool(value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(f"{a}:{b}" for a, b in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.clean.repeats",
        description="Find degeneration loops at the end of OCR labels (exact, truncated, gapped "
                    "repeats in the last --tail-chars characters). Reads JSON lines with `id` and "
                    "`text`; writes one JSON line per input line: `id`, `loop` (bool), `kind` "
                    "(exact/truncated/gapped/null), `period`, `copies`, `span` ([start, end) in "
                    "characters). A bad line (not JSON, not an object, no `id` or `text`, `text` "
                    "not a string, not UTF-8) gives `id` (null if unknown) and `error` naming the "
                    "line number and the reason instead; blank lines are skipped.",
        epilog="Bands are MAX_PERIOD:COPIES pairs, ascending, e.g. --min-copies 2:64,8:16,32:6.",
    )
    parser.add_argument("--input", metavar="FILE.jsonl", help="input JSON lines (default: stdin)")
    parser.add_argument("--output", metavar="FILE.jsonl", help="output JSON lines (default: stdout)")
    converters: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "bool": _bool, "Bands": _bands}
    for f in dataclasses.fields(RepeatsConfig):
        if f.name == "drop":
            continue
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=converters[str(f.type)],
                            default=f.default, metavar=str(f.type).upper(),
                            help=f"{f.metadata['help']} (default: {_shown(f.default)})".replace("%", "%%"))
    return parser


def scan_lines(lines: Iterable[bytes | str], cfg: RepeatsConfig) -> Iterator[dict[str, Any]]:
    """One result object per input line (blank lines skipped); never raises on bad input."""
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield {"id": None, "error": f"line {number}: not UTF-8 ({exc.reason} at byte {exc.start})"}
                continue
        else:
            line = raw
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            yield {"id": None, "error": f"line {number}: not JSON ({exc})"}
            continue
        if not isinstance(item, dict):
            yield {"id": None, "error": f"line {number}: not a JSON object"}
            continue
        ident = item.get("id")
        missing = [k for k in ("id", "text") if k not in item]
        if missing:
            yield {"id": ident, "error": f"line {number}: missing {' and '.join(missing)}"}
            continue
        if not isinstance(item["text"], str):
            yield {"id": ident, "error": f"line {number}: text is {type(item['text']).__name__}, not a string"}
            continue
        loop = find_loop(item["text"], cfg)
        yield {"id": ident, **(loop.to_dict() if loop else NO_LOOP)}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(RepeatsConfig) if f.name != "drop"}
    try:
        cfg = RepeatsConfig(**options)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source: IO[bytes] = open(args.input, "rb") if args.input else sys.stdin.buffer
    sink: IO[str] = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for result in scan_lines(source, cfg):
            # ASCII escapes keep ids with lone surrogates writable
            sink.write(json.dumps(result, ensure_ascii=True) + "\n")
    finally:
        if args.input:
            source.close()
        if args.output:
            sink.close()
        else:
            sink.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
