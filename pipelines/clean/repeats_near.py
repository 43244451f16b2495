"""Near-exact loops: copies back to back that each carry a few character edits (OCR-like substitutions,
``rn``/``m``, ``l``/``1``, ``e``/``c`` ...), the detector's third pass (see ``pipelines/clean/repeats_detect.py``).

It runs on the gapped pass's normalised tail (digits and light punctuation deleted, whitespace
collapsed), so edits to those are gone already and only letter edits are left to tolerate.

1. Candidate periods: a few needles (``needle_chars`` long) taken at steps before the end, as the
   end itself may carry an edit; the distance from each needle back to its nearest earlier
   occurrences proposes a period. Natural text seldom repeats an 8-character needle within
   ``max_period``, so a clean label costs a handful of ``str.rfind`` calls.
2. Copies: from the end, each earlier copy is the window one period back whose start may drift by
   ``near_shift`` characters (insertions, deletions) that is closest, in Levenshtein distance, to
   the last copy; the walk stops at the first window further than twice the per-copy budget.
3. Verdict: the per-position majority of the copies (the consensus, the unit without its noise)
   must lie within ``near_max_edits + near_edit_rate * period`` edits of ``near_min_share`` of the
   copies; a list whose lines differ in a word is far from any consensus. Edits that fall on the
   same consensus position in ``near_slot_share`` of the copies are a slot (``(a) ... (b) ...``, a
   varying field), not noise. Copies and coverage then follow the gapped rules (bands, table and
   empty units, regular numbers).
"""

from __future__ import annotations

import re
from collections import Counter

from rapidfuzz.distance import Levenshtein
from rapidfuzz.process import cdist

from pipelines.clean.repeats_config import Loop, RepeatsConfig
from pipelines.clean.repeats_gapped import GappedSearch, letters as _letters

_WORD = re.compile(r"[^\W_]+")


def near_loop(search: GappedSearch) -> Loop | None:
    """The near-exact loop at the end of ``search.norm``, or None."""
    norm, cfg = search.norm, search.cfg
    n, k = len(norm), cfg.needle_chars
    tried: list[int] = []
    slots: list[int] = []  # periods whose copies vary in a slot: their multiples hold the same lines
    for d in _candidate_periods(norm, k, cfg.max_period, cfg.near_needles, cfg.near_shift):
        if any(abs(d - t) <= cfg.near_shift for t in tried) or any(
            d >= 2 * t - cfg.near_shift and abs(d - t * round(d / t)) <= cfg.near_shift * round(d / t) for t in slots
        ):
            continue
        tried.append(d)
        budget = cfg.near_max_edits + int(cfg.near_edit_rate * d)
        # first walk: against the last copy, which carries its own edits; then against the
        # consensus of what it found, which does not
        bounds = _walk(norm, d, norm[n - d:], cfg.near_shift, 2 * budget)
        if len(bounds) >= 4:
            consensus = _consensus([norm[a:b] for a, b in zip(bounds, bounds[1:])])
            q = _sub_period(consensus, k, budget)
            if q:  # the needles skipped copies whose own needle carried an edit: d was a multiple
                d, budget = q, cfg.near_max_edits + int(cfg.near_edit_rate * q)
                tried.append(d)
                bounds = _walk(norm, d, norm[n - d:], cfg.near_shift, 2 * budget)
                consensus = _consensus([norm[a:b] for a, b in zip(bounds, bounds[1:])])
            bounds = _walk(norm, d, consensus, cfg.near_shift, 2 * budget)
            copies = [norm[a:b] for a, b in zip(bounds, bounds[1:])]
            # letter noise needs letters: rows of empty cells and digit-only cells are the
            # earlier passes' business (their digits and punctuation are normalised away here)
            if len(copies) < 3 or len(_letters(consensus)) < 4:
                continue
            verdict = _noise_not_slots(copies, consensus, budget, cfg)
            if verdict is None:
                slots.append(d)
            elif verdict:
                loop = search.judge(bounds, consensus, kind="near")
                if loop is not None or search.settled:
                    return loop
        if len(tried) >= 3:
            break
    return None


def _sub_period(consensus: str, k: int, budget: int) -> int:
    """A period ``d / m`` (m = 2, 3, 4) of the consensus within ``budget`` edits per copy, or 0."""
    d = len(consensus)
    for m in (4, 3, 2):
        q = round(d / m)
        if q >= k and Levenshtein.distance(consensus[q:], consensus[:-q], score_cutoff=budget * (m - 1)) <= budget * (
            m - 1
        ):
            return q
    return 0


def _candidate_periods(norm: str, k: int, max_period: int, needles: int, shift: int) -> list[int]:
    """Periods proposed by needles ending 0, k, 2k, ... characters before the end, shortest first."""
    n = len(norm)
    found: set[int] = set()
    for i in range(needles):
        e0 = n - i * k
        if e0 < 3 * k:
            break
        needle = norm[e0 - k: e0]
        if not needle.strip():
            continue
        lo = max(0, e0 - k - max_period - shift)
        end = e0 - 1
        for _ in range(2):  # the nearest copy's needle may itself carry an edit: also the one before
            j = norm.rfind(needle, lo, end)
            if j < 0:
                break
            d = e0 - k - j
            if d >= k:  # shorter units are periodic after normalisation: the earlier passes saw them
                found.add(d)
            end = j + k - 1
    return sorted(found)


def _walk(norm: str, d: int, template: str, shift: int, limit: int) -> list[int]:
    """Copy boundaries (ascending, last == len(norm)) walking back from the end one period ``d``
    at a time: each copy is the window, its start moved by up to ``shift``, closest to
    ``template``; the walk stops at the first window further than ``limit`` edits."""
    e = len(norm)
    bounds = [e]
    while e - d - shift >= 0:
        best, best_dist = -1, limit + 1
        for delta in sorted(range(-shift, shift + 1), key=abs):
            b = e - d + delta
            dist = Levenshtein.distance(norm[b:e], template, score_cutoff=limit)
            if dist < best_dist:
                best, best_dist = b, dist
                if dist == 0:
                    break
        if best < 0:
            break
        bounds.append(best)
        e = best
    return bounds[::-1]


def _consensus(copies: list[str]) -> str:
    """The copies' majority reading: each copy aligned to the medoid (the copy closest to the
    others, among the last 16) votes per medoid position for a character, a deletion, or an
    insertion before it."""
    recent = copies[-16:]
    distances = cdist(recent, copies, scorer=Levenshtein.distance, workers=1)
    medoid = recent[int(distances.sum(axis=1).argmin())]
    votes = [Counter() for _ in range(len(medoid) + 1)]  # type: list[Counter[str]]
    inserted = [Counter() for _ in range(len(medoid) + 1)]  # type: list[Counter[str]]
    for c in copies:
        reading = list(medoid) + [""]
        extra = [""] * (len(medoid) + 1)
        for op in Levenshtein.editops(medoid, c):
            if op.tag == "replace":
                reading[op.src_pos] = c[op.dest_pos]
            elif op.tag == "delete":
                reading[op.src_pos] = ""
            else:
                extra[op.src_pos] += c[op.dest_pos]
        for i in range(len(medoid) + 1):
            votes[i][reading[i]] += 1
            inserted[i][extra[i]] += 1
    return "".join(ins.most_common(1)[0][0] + vote.most_common(1)[0][0] for ins, vote in zip(inserted, votes))


def _noise_not_slots(copies: list[str], consensus: str, budget: int, cfg: RepeatsConfig) -> bool | None:
    """Most copies are within ``budget`` edits of the consensus, and their edits are scattered:
    no one position is edited in ``near_slot_share`` of the copies (and in four or more), no word
    position is a varying field. None when the copies vary in such a slot."""
    close = sum(Levenshtein.distance(c, consensus, score_cutoff=budget) <= budget for c in copies)
    if close < cfg.near_min_share * len(copies):
        return False
    edited_at: Counter[int] = Counter()
    for c in copies:
        edited_at.update({op.src_pos for op in Levenshtein.editops(consensus, c)})
    if edited_at and edited_at.most_common(1)[0][1] >= max(4, cfg.near_slot_share * len(copies)):
        return None
    return None if _word_slot(copies, cfg.near_slot_word_edits) else True


def _word_slot(copies: list[str], min_edits: float) -> bool:
    """A word position that is a field whose value changes from copy to copy (a weekday, a
    colour), not noise: most copies differ there from the commonest word, by ``min_edits`` or more
    on average, or a tenth of them (two at least) hold another word altogether (``min_edits`` or
    more away, and half its length). Noise leaves words a character or two from the original."""
    rows = [_WORD.findall(c) for c in copies]
    width = Counter(map(len, rows)).most_common(1)[0][0]
    rows = [r for r in rows if len(r) == width]
    if len(rows) < 4 or width == 0:
        return False
    for column in zip(*rows):
        word, agree = Counter(column).most_common(1)[0]
        if agree == len(rows):
            continue
        distances = [(Levenshtein.distance(w, word), max(len(w), len(word))) for w in column if w != word]
        if 2 * agree <= len(rows) and sum(d for d, _ in distances) >= min_edits * len(distances):
            return True
        if sum(d >= min_edits and 2 * d >= size for d, size in distances) >= max(2, len(rows) / 10):
            return True
    return False
