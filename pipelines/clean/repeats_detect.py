"""Degeneration-loop detection in the tail of an OCR label: ``find_loop`` (Jina-OCR-v1 section 4.1).

"A detector inspects the last 1,024 characters of long labels for exact, truncation-tolerant, and
gapped repeats and drops the degeneration loops it finds." ``find_loop(text, cfg)`` looks at the
last ``tail_chars`` characters of a label and returns a ``Loop`` or ``None``:

* ``exact``: a unit of 1..``max_period`` characters repeated back to back up to the end;
* ``truncated``: the same, with the label cut inside the last copy;
* ``gapped``: copies that differ in digits (incrementing numbers), whitespace or light punctuation
  (``1. foo 2. foo 3. foo``), or that are separated by short fillers without words;
* ``near``: copies back to back that each carry a character edit or two (OCR-like substitutions:
  ``the total was paid`` / ``the totel was paid`` / ``tha total was pald``).

How it works, and why it is fast (the tail is at most 1 KB; a clean 2-16 KB label costs ~15-25 µs):

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
2. Gapped repeats. First a gate (``may_repeat``): both passes below start from needles at the end of
   the normalised tail that must recur in it, and an upper bound of their counts comes from the tail
   with digits, light punctuation and whitespace deleted (one ``bytes.translate``, four counts), so
   about two thirds of clean labels skip normalising altogether. Otherwise the tail is normalised
   (digits and light punctuation deleted, whitespace runs collapsed; ``normalize``) and step 1 runs
   again on the result. Then a chain search follows
   copies of a normalised needle spaced about one period apart (within ``gap_tolerance``), each
   ``gap_min_similarity`` similar to the last copy and with the same letters (fillers carry no
   words). A chain may end up to two needles before the end when what follows holds no new words;
   one whose needle-anchored copies differ in a few letters is reported as near-exact.
3. Near-exact repeats (``pipelines/clean/repeats_near.py``), on the same normalised tail, only
   when the chain search's end needles recur (most clean labels stop there): periods proposed by
   short needles that recur at the same distance, copies walked back one period at a
   time with a Levenshtein budget, and a verdict against the copies' consensus (edits scattered,
   not a slot such as ``(a) ... (b) ...`` or a weekday that changes from line to line).

Legitimate structure is kept out by requiring both enough copies for the period band *and* enough
covered characters; units that look like table rows (HTML ``<tr>``/``<td>``, Markdown pipes, LaTeX
``&`` with ``\\``) need more coverage, and units with no letter or digit outside markup (empty
cells, separator rows; not one- or two-character symbol runs; emoji and other symbols are text)
need the tail nearly full. So do form rows (blanks and fill marks with labels no longer than them:
``Name: ____ Company: ____``, ``1. (A) (B) (C)``; not the brackets of ``f(x)``), whose loops, exact,
gapped or near-exact, must also run ``form_min_chars``: blank forms and answer
sheets repeat a row for a page or two, a degeneration loop goes on. Labels shorter than
``min_length`` columns (``text_width``: CJK characters count 3) are not inspected. Gapped
repeats must keep their numbers regular (each number stays or steps by a constant from copy to
copy), so a data table whose rows share only their shape is not a loop; a chain whose copies
differ in words (lists and forms sharing a prefix, table rows with content) is not one either.
Refrains and repeated headers are not back to back, or not repeated often enough. Near-exact
copies follow the gapped bands, coverage and regular numbers (a number OCR noise put letters in,
``2O23``, takes no step; a word it put digits in, ``fu1l``, is no number), and need letters to carry
their noise: rows that share a description but hold random dates and amounts are a table.

``span`` is in characters of the text and starts at the first complete copy. Exact and truncated
loops that fill the tail are traced back up to ``trace_chars`` further to report where they start
(the decision only uses the tail); gapped and near-exact spans stay inside the tail. ``copies`` counts the
complete copies inside the span; ``period`` is the unit length (for gapped and near-exact loops,
the median copy length in the text).
"""

from __future__ import annotations

from unicodedata import east_asian_width

from pipelines.clean.repeats_config import Kind, Loop, RepeatsConfig
from pipelines.clean.repeats_gapped import GappedSearch, gapped_loop, may_repeat
from pipelines.clean.repeats_near import near_loop
from pipelines.clean.repeats_periods import band_copies, best_period, copy_needs, natural_phase, unit_class


def _trailing_space_start(text: str, cap: int) -> int:
    """Index where the text's trailing whitespace starts (looking back at most ``cap`` characters)."""
    end = len(text)
    while end > 0 and text[end - 1].isspace() and len(text) - end < cap:
        end -= 1
    return end


def text_width(text: str) -> int:
    """Length in columns: East Asian Wide and Fullwidth characters (CJK ideographs, kana, Hangul,
    full-width forms) count 3, others 1. A CJK character carries about as much text as three Latin
    letters (a Chinese page runs about a third of the characters of its English translation), so
    ``min_length`` asks the same amount of text in every script."""
    if text.isascii():
        return len(text)
    return len(text) + 2 * sum(east_asian_width(c) in "WF" for c in text)


def find_loop(text: str, cfg: RepeatsConfig = RepeatsConfig()) -> Loop | None:
    """The degeneration loop at the end of ``text``, or ``None`` (also for empty text and texts
    shorter than ``cfg.min_length`` columns, ``text_width``). Only the last ``cfg.tail_chars``
    characters are searched."""
    if not text or (len(text) < cfg.min_length and text_width(text) < cfg.min_length):
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
    if loop is None and (cfg.gapped or cfg.near) and may_repeat(tail, cfg):
        search = GappedSearch(tail, offset, cfg, periodic[0])
        if cfg.gapped:
            loop = gapped_loop(search)
        if loop is None and cfg.near and not search.settled:
            loop = near_loop(search)
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
        copies, covered = copy_needs(cfg, unit, band_copies(cfg.min_copies, p) or 0, cfg.min_covered_chars)
        return length >= covered and length >= copies * p

    found = best_period(tail, cfg.max_period, cfg.needle_chars, cfg.min_copies, cfg.min_covered_chars, accept)
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
    if length < cfg.form_min_chars and unit_class(tail[n - p:]) == "form":
        return None  # a blank form or answer sheet: its rows repeat for a page or two, not on and on
    phase = natural_phase(text[start: start + p], None if reached_start else length % p)
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
