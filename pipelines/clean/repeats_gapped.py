"""Gapped repeats: copies that differ in digits, whitespace or light punctuation, or are separated by
short fillers without words (the detector's second pass; see ``pipelines/clean/repeats_detect.py``)."""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from statistics import median

import numpy as np
from rapidfuzz.distance import Indel

from pipelines.clean.repeats_config import Kind, Loop, RepeatsConfig
from pipelines.clean.repeats_periods import TAG, band_copies, best_period, copy_needs, natural_phase, unit_class

# Normalisation for gapped repeats: ASCII digits and light punctuation deleted (plus a few non-ASCII
# punctuation marks), then runs of ASCII whitespace collapsed. It runs on UTF-8 bytes because
# bytes.translate/split are C loops while str.translate on non-ASCII text goes through a dict per
# character (5x slower). The index map back to the text is only built when a candidate needs it.
_DELETED_ASCII = b"0123456789.,;:!?'\"`"
_DELETED_OTHER = tuple(c.encode() for c in "\u00b7\u2022\u2019\u201c\u201d\uff0c\u3002\uff1b\uff1a\uff01\uff1f\u3001")
_DELETED_OTHER_RE = re.compile(b"|".join(re.escape(m) for m in _DELETED_OTHER))
_DELETED_OTHER_STR = tuple(m.decode() for m in _DELETED_OTHER)
_DELETED_SET = frozenset(_DELETED_ASCII.decode() + b"".join(_DELETED_OTHER).decode())
# per code point: 1 deleted, 2 ASCII whitespace (what bytes.split() splits on), 0 kept as is
_CLASS = np.zeros(0x110000, dtype=np.uint8)
_CLASS[[ord(c) for c in _DELETED_SET]] = 1
_CLASS[[ord(c) for c in " \t\n\r\x0b\x0c"]] = 2
_INT = re.compile(r"\d{1,18}")
# a run of ASCII letters and digits holding a digit: a number, or a number or word that OCR noise crossed over
_NUMBER_LIKE = re.compile(r"[A-Za-z0-9]*[0-9][A-Za-z0-9]*")
_NOT_LETTERS_ASCII = bytes(b for b in range(128) if not chr(b).isalpha())


def normalize(tail: str) -> str:
    """The gapped-repeat view of ``tail``: digits and light punctuation deleted, runs of ASCII
    whitespace collapsed to one space, leading and trailing ones dropped."""
    data = tail.encode("utf-8", "surrogatepass").translate(None, _DELETED_ASCII)
    # searching the str for each mark is cheaper than one regex pass over the bytes
    if not tail.isascii() and any(c in tail for c in _DELETED_OTHER_STR):
        data = _DELETED_OTHER_RE.sub(b"", data)
    return b" ".join(data.split()).decode("utf-8", "surrogatepass")


def normalize_index(tail: str) -> list[int]:
    """For each character of ``normalize(tail)``, its index in ``tail`` (a space maps to the first
    whitespace character of its run)."""
    return _index_array(tail).tolist()


def _index_array(tail: str) -> np.ndarray:
    """``normalize_index`` as an array, vectorised: it runs once per loop candidate."""
    kinds = _CLASS[np.frombuffer(tail.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)]
    kept = np.flatnonzero(kinds != 1)
    space = kinds[kept] == 2
    # a whitespace character stays when the kept character before it is not one (a leading one has
    # none), and the last one goes if it ends the text
    after_space = np.empty_like(space)
    if len(space):
        after_space[0] = True
        after_space[1:] = space[:-1]
    index = kept[~space | ~after_space]
    if len(index) and kinds[index[-1]] == 2:
        index = index[:-1]
    return index


# the gate's view: what ``normalize`` keeps, less the spaces (see ``may_repeat``)
_GATE_DELETED = _DELETED_ASCII + b" \t\n\r\x0b\x0c"


def may_repeat(tail: str, cfg: RepeatsConfig) -> bool:
    """False when no gapped or near-exact loop can be found in ``tail``, decided without normalising
    all of it (most clean labels stop here; True means: run the passes).

    Both passes start from the end needles of the normalised tail (``GappedSearch.end_needles``):
    the periodic and chain searches need one of them three times, the near-exact pass four of them
    eight times in all. Only the last ``4 * needle_chars`` normalised characters are needed to
    know the needles (``normalize`` of a suffix is a suffix of ``normalize``), and each count is
    bounded from above by the count of the needle without its spaces in the tail with the spaces
    deleted as well: the non-space characters of the normalised tail, in order, so each needle
    occurrence is one there too, and occurrences that do not overlap stay apart."""
    k = cfg.needle_chars
    if not _gate_sound(k, cfg.gapped_min_copies):
        return True
    if not tail.isascii() and any(c in tail for c in _DELETED_OTHER_STR):
        return True  # multi-byte deletions: the full normalisation decides
    data = tail.encode("utf-8", "surrogatepass")
    ascii_only = len(data) == len(tail)
    width = 16 * k
    while True:
        if ascii_only:  # normalize() on bytes, without its checks and decoding
            end: str | bytes = b" ".join(data[-width:].translate(None, _DELETED_ASCII).split())
        else:
            end = normalize(tail[-width:])
        if len(end) >= 4 * k or width >= len(tail):
            break
        width *= 4
    if len(end) < 4 * k:
        return True
    squeezed = data.translate(None, _GATE_DELETED)
    total = 0
    n = len(end)
    for shift in (0, k // 2, k, 2 * k):
        piece = end[n - shift - k: n - shift]
        needle = piece.replace(b" ", b"") if ascii_only else piece.replace(" ", "").encode("utf-8", "surrogatepass")
        count = squeezed.count(needle) if needle else 0
        if count >= 3:
            return True
        total += count
    return total >= 8


@lru_cache(maxsize=16)
def _gate_sound(k: int, bands: tuple[tuple[int, int], ...]) -> bool:
    """``may_repeat`` holds for these bands: every periodic run the gapped periodic search can
    accept (``copies * p`` characters of period ``p``) holds its last ``k`` characters three times
    without overlap."""
    low = 1
    for max_period, copies in bands:
        for p in range(low, max_period + 1):
            step = p * -(-k // p)  # occurrences p apart overlap unless ceil(k / p) periods apart
            if copies * p < k or (copies * p - k) // step + 1 < 3:
                return False
        low = max_period + 1
    return True


class _Mapping:
    """Lazily built map from normalised positions back to the text."""

    def __init__(self, tail: str):
        self.tail = tail
        self._index: np.ndarray | None = None

    def boundary(self, x: int) -> int:
        """Tail index where a copy starting at normalised position ``x`` starts: right after the
        previous kept character, so deleted digits and punctuation before it join this copy."""
        if self._index is None:
            self._index = _index_array(self.tail)
        if x <= 0:
            return 0
        if x >= len(self._index):
            return len(self.tail)
        return int(self._index[x - 1]) + 1

    def raw_copies(self, bounds: list[int]) -> list[str]:
        raw = [self.boundary(x) for x in bounds]
        raw[-1] = len(self.tail)
        return [self.tail[a:b] for a, b in zip(raw, raw[1:])]


def _numbers_regular(copies: list[str], share: float, near: bool = False) -> bool:
    """Each number position either stays or steps by a constant between copies (most of the time):
    a loop repeats its numbers or counts, a table's rows that share their words (every row "Card
    payment") hold independent dates and amounts. Near-exact copies read theirs with
    ``_near_numbers``; a number that noise made unreadable takes no step."""
    rows = [_near_numbers(c) if near else [int(x) for x in _INT.findall(c)] for c in copies]
    if not any(rows):
        return True
    width, count = Counter(len(r) for r in rows).most_common(1)[0]
    if count < share * len(rows):
        return False
    rows = [r for r in rows if len(r) == width]
    if len(rows) < 3:
        return True
    for j in range(width):
        steps = Counter(b[j] - a[j] for a, b in zip(rows, rows[1:]) if a[j] is not None and b[j] is not None)
        if steps and steps.most_common(1)[0][1] < share * steps.total():
            return False
    return True


def _near_numbers(copy: str) -> list[int | None]:
    """The numbers of a near-exact copy, whose OCR noise swaps letters and digits (l/1, O/0, S/5):
    a run of letters and digits that is mostly letters is a word (``fu1l``), one that is mostly
    digits a number, None when letters crept in (``2O23``, ``39l0``): it keeps its position."""
    out: list[int | None] = []
    for token in _NUMBER_LIKE.findall(copy):
        digits = sum(c.isdigit() for c in token)
        if digits == len(token):
            out.append(int(token))
        elif 2 * digits >= len(token):
            out.append(None)
    return out


def gapped_loop(search: GappedSearch) -> Loop | None:
    """The gapped loop at the end of the search's tail, or None (``search.settled`` tells whether a
    repeat long enough to be a loop was judged not to be one)."""
    cfg = search.cfg
    if len(search.norm) < 2 * cfg.needle_chars:
        return None
    best_period(search.norm, cfg.max_period, cfg.needle_chars, cfg.gapped_min_copies, 0, search.accept_period)
    if search.result is not None or search.settled:
        return search.result
    return _chain_loop(search)


class GappedSearch:
    """State of one gapped (then near-exact) search: the normalised tail, its lazy map back, the
    verdict so far. ``periodic``: length of the exactly periodic suffix of ``tail`` that the exact
    pass rejected."""

    def __init__(self, tail: str, offset: int, cfg: RepeatsConfig, periodic: int = 0):
        self.tail, self.offset, self.cfg, self.periodic = tail, offset, cfg, periodic
        self.norm = normalize(tail)
        self.mapping = _Mapping(tail)
        self.result: Loop | None = None
        # a repeat long enough to be a loop was judged not to be one (a table whose rows share
        # their shape but not their numbers): other views of the same rows need not be tried
        self.settled = False
        # a long chain of similar copies whose letters differ: not a gapped loop (a list, a table),
        # and other needles would walk the same lines; the near-exact pass still judges it
        self.letters_differ = False
        self._end_needles: dict[int, int] | None = None

    def end_needles(self) -> dict[int, int]:
        """How often each needle ending 0, k/2, k and 2k characters before the end of the
        normalised tail occurs in it (k = ``needle_chars``; blank needles and ones too close to the
        start count 0). The chain search and the near-exact pass both start from these."""
        if self._end_needles is None:
            norm, k = self.norm, self.cfg.needle_chars
            n = len(norm)
            self._end_needles = {
                shift: norm.count(norm[n - shift - k: n - shift])
                if n - shift >= 2 * k and norm[n - shift - k: n - shift].strip()
                else 0
                for shift in (0, k // 2, k, 2 * k)
            }
        return self._end_needles

    def needs(self, unit: str) -> tuple[int, int] | None:
        band = band_copies(self.cfg.gapped_min_copies, len(unit))
        if band is None:
            return None
        return copy_needs(self.cfg, unit, band, self.cfg.gapped_min_covered, symbol_runs=False)

    def judge(self, bounds: list[int], unit: str, partial_last: bool = False, kind: Kind = "gapped") -> Loop | None:
        """A Loop of ``kind`` over normalised copy boundaries ``bounds`` (ascending, last == len(norm);
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
        if covered < self.cfg.form_min_chars and unit_class(unit) == "form":
            return None  # numbered blank rows, answer rows: a form of a page or two (RepeatsConfig.form_min_chars)
        # Identical copies, or copies inside an exactly periodic stretch (seen at another period),
        # are the exact detector's business; the first copy may have absorbed deleted characters
        # of the text before the loop, so it does not count.
        if len(set(whole[1:])) <= 1 or covered - len(raw[0]) <= self.periodic:
            return None
        # a loop repeats its numbers or steps them, a table's rows need not; near-exact copies are
        # read past their OCR digits (l/1, O/0), or a table of shared words would pass as one
        if not _numbers_regular(whole, self.cfg.number_regularity, near=kind == "near"):
            return None
        end = self.offset + len(self.tail)
        return Loop(kind, round(median(len(c) for c in whole)), copies, (end - covered, end))

    def accept_period(self, p: int, length: int) -> bool:
        """``best_period`` callback: is the normalised periodic suffix (p, length) a gapped loop?"""
        norm, n = self.norm, len(self.norm)
        unit = norm[n - p:]
        needs = self.needs(unit)
        if needs is None or not unit.strip() or length // p < needs[0]:
            return False
        s = n - length
        phase = natural_phase(norm[s: s + p], None if s > 0 else length % p)
        bounds = list(range(s + phase, n, p))
        loop = self.judge(bounds + [n], unit, bounds[-1] + p != n)
        if loop is not None:
            self.result = loop
        return loop is not None


def letters(segment: str) -> str:
    """The letters of ``segment`` outside HTML tags: what a filler must not change."""
    if "<" in segment or "&" in segment:
        segment = TAG.sub("", segment)
    if segment.isascii():  # a C loop over bytes instead of a call per character
        return segment.encode().translate(None, _NOT_LETTERS_ASCII).decode()
    return "".join(filter(str.isalpha, segment))


def _chain_loop(search: GappedSearch) -> Loop | None:
    """Copies of a normalised needle about one period apart, each similar to the last copy and
    with the same letters (fillers carry no words). The needle is taken at a few offsets from the
    end, as the text may end inside a filler."""
    norm, cfg = search.norm, search.cfg
    n = len(norm)
    k = cfg.needle_chars
    for shift, count in search.end_needles().items():
        if count < 3:
            continue  # a chain of three copies needs the needle three times
        e0 = n - shift
        needle = norm[e0 - k: e0]
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
            if loop is not None or search.settled or search.letters_differ:
                return loop
    return None


def _walk_chain(search: GappedSearch, needle: str, e0: int, d: int) -> Loop | None:
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
    if len(segments) == 1:
        return None  # the first copy below could make two: a chain needs three
    first = ends[-1] - d
    if first >= 0 and Indel.normalized_similarity(norm[first: ends[-1]], template) >= cfg.gap_min_similarity:
        segments.append(norm[first: ends[-1]])
        ends.append(first)
    if len(segments) < 3:
        return None
    seen = [letters(x) for x in segments]
    same = Counter(seen).most_common(1)[0][1]
    # copies between two needles (the last one, the template, and the first are cut by position)
    anchored = set(seen[1: len(seen) - (first >= 0 and ends[-1] == first)])
    if same < cfg.gap_same_letters * len(segments):
        # a long run of similar lines with different words (a list, a table): not a gapped loop,
        # and other needles would only walk the same lines again
        search.letters_differ = len(segments) >= 8
        return None
    # copies anchored on the needle whose words differ carry character edits: near-exact (not
    # copies cut inside markup, where the letters of tag names come and go)
    kind: Kind = "near" if len(anchored) > 1 and min(map(len, anchored)) >= 4 else "gapped"
    bounds = ends[::-1]
    if e0 < len(norm):
        # what follows the last needle must be the start of another copy or a filler, not words
        # that close the structure ("</table>")
        rest = "".join(c for c in norm[e0:] if c.isalpha())
        if rest and rest not in "".join(c for c in norm[bounds[0]: e0] if c.isalpha()):
            return None
        return search.judge(bounds + [len(norm)], template, True, kind)
    return search.judge(bounds, template, kind=kind)
