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
   empty units, regular numbers read past OCR digits: copies identical but for random numbers,
   table rows sharing a description, are no loop).
"""

from __future__ import annotations

from collections import Counter

from rapidfuzz.distance import Levenshtein

from pipelines.clean.minhash import word_regex
from pipelines.clean.repeats_config import Loop, RepeatsConfig
from pipelines.clean.repeats_gapped import GappedSearch, letters
from pipelines.clean.repeats_periods import band_copies


def near_loop(search: GappedSearch) -> Loop | None:
    """The near-exact loop at the end of ``search.norm``, or None."""
    norm, cfg = search.norm, search.cfg
    n, k = len(norm), cfg.near_needle_chars
    if sum(search.end_needles().values()) < 8:
        # three copies put the text's last characters three times in the tail: two of the four
        # end needles that escaped the edits give 3 + 3 + 1 + 1; most clean labels stop here
        return None
    tried: list[int] = []
    slots: list[int] = []  # periods whose copies vary in a slot: their multiples hold the same lines
    attempts = 0
    for d in _candidate_periods(norm, k, cfg.max_period, cfg.near_needles, cfg.near_shift):
        if any(abs(d - t) <= cfg.near_shift for t in tried):
            continue
        if 6 * d > n and any(
            d >= 2 * t - cfg.near_shift and abs(d - t * round(d / t)) <= cfg.near_shift * round(d / t) for t in slots
        ):
            continue  # few copies of a multiple of a slot period: too few to see the slot again
        tried.append(d)
        attempts += 1
        if attempts > 3:
            break
        needed = band_copies(cfg.gapped_min_copies, d)
        if needed is None or needed * d > n + d:
            continue  # the tail cannot hold the copies this period needs
        if len(letters(norm[n - d:])) < 4:
            continue  # see below: no letters, no letter noise
        found = _copies(norm, d, k, cfg, needed)
        if found is None:
            continue
        bounds, distances, consensus, d, budget = found
        tried.append(d)
        # letter noise needs letters: rows of empty cells and digit-only cells are the earlier
        # passes' business (their digits and punctuation are normalised away here)
        if len(letters(consensus)) < 4:
            continue
        copies = [norm[a:b] for a, b in zip(bounds, bounds[1:])]
        verdict = _noise_not_slots(copies, distances, consensus, budget, cfg)
        if verdict is None:
            slots.append(d)
        elif verdict:
            loop = search.judge(bounds, consensus, kind="near")
            if loop is not None or search.settled:
                return loop
    return None


def _budget(cfg: RepeatsConfig, period: int) -> int:
    return cfg.near_max_edits + int(cfg.near_edit_rate * period)


def _copies(
    norm: str, d: int, k: int, cfg: RepeatsConfig, needed: int
) -> tuple[list[int], list[int], str, int, int] | None:
    """(copy boundaries, their distances to the consensus, consensus, period, edit budget) of at
    least three copies of period ``d`` (or of a fraction of it) that end the text, or None. The
    first walk compares each copy with the last one, which carries its own edits (twice the
    budget allowed); the second with the consensus of what the first found."""
    budget = _budget(cfg, d)
    # the consensus needs a dozen copies at most; the second walk finds them all
    bounds, _ = _walk(norm, d, norm[len(norm) - d:], cfg.near_shift, 2 * budget, 12)
    if len(bounds) < 4 or (len(bounds) < needed and len(bounds) < 7):
        return None  # too few copies for the band (unless some period d / m may have enough)
    consensus = _consensus([norm[a:b] for a, b in zip(bounds, bounds[1:])])
    q = _sub_period(consensus, k, budget)
    if q:  # the needles skipped copies whose own needle carried an edit: d was a multiple
        d, budget = q, _budget(cfg, q)
        bounds, _ = _walk(norm, d, norm[len(norm) - d:], cfg.near_shift, 2 * budget, 12)
        if len(bounds) < 4:
            return None
        consensus = _consensus([norm[a:b] for a, b in zip(bounds, bounds[1:])])
    # again against the consensus, which carries no edits: the walk goes on past noisier copies
    bounds, distances = _walk(norm, d, consensus, cfg.near_shift, 2 * budget)
    if len(bounds) < 4:
        return None
    return bounds, distances, consensus, d, budget


def _sub_period(consensus: str, k: int, budget: int) -> int:
    """A period ``d / m`` (m = 2, 3, 4) of the consensus within ``budget`` edits, or 0 (the
    consensus is a majority reading: its own copies hardly differ)."""
    d = len(consensus)
    for m in (4, 3, 2):
        q = round(d / m)
        if q >= k and Levenshtein.distance(consensus[q:], consensus[:-q], score_cutoff=budget) <= budget:
            return q
    return 0


def _candidate_periods(norm: str, k: int, max_period: int, needles: int, shift: int) -> list[int]:
    """Periods proposed by needles ending 0, k, 2k, ... characters before the end, shortest first:
    distances back to a needle's two nearest earlier occurrences on which two needles agree
    (within ``shift``). Natural text repeats an 8-character piece now and then; two at the same
    distance it seldom does. Edits hide some needles in some copies: the second occurrence finds
    the copy before (a multiple of the period, which ``_sub_period`` reduces)."""
    n = len(norm)
    # three copies at least (the longest band's need): no needle looks further back than this
    lo = max(0, n - needles * k - min(max_period, n // 3) - shift)
    rfind = norm.rfind
    hits = [
        (e0, j) for e0 in range(n, max(3 * k, n - needles * k), -k) if (j := rfind(norm[e0 - k: e0], lo, e0 - 1)) >= 0
    ]
    if len(hits) < 2:
        return []
    found = []
    for i, (e0, j) in enumerate(hits):
        found.append((e0 - k - j, i))
        j2 = norm.rfind(norm[e0 - k: e0], lo, j + k - 1)
        if j2 >= 0:
            found.append((e0 - k - j2, i))
    found.sort()
    out: list[int] = []
    for a, (d, i) in enumerate(found):
        if d < k:  # shorter units are periodic after normalisation: the earlier passes saw them
            continue
        for d2, i2 in found[a + 1:]:
            if d2 - d > shift:
                break
            if i2 != i:
                if not out or d - out[-1] > shift:
                    out.append(d)
                break
    return out


def _walk(norm: str, d: int, template: str, shift: int, limit: int, most: int = 1 << 30) -> tuple[list[int], list[int]]:
    """Copy boundaries (ascending, last == len(norm)) walking back from the end one period ``d``
    at a time, and each copy's distance to ``template``: a copy is the window one period back if
    it is within one edit of ``template`` (an insertion or deletion would cost two), else the
    closest with its start moved by up to ``shift``. The walk stops at the first window further
    than ``limit`` edits, or after ``most`` copies."""
    e = len(norm)
    bounds, distances = [e], []
    deltas = [x for x in sorted(range(-shift, shift + 1), key=abs) if x]
    while e - d - shift >= 0 and len(distances) < most:
        b0 = e - d
        # moving the start by up to `shift` changes the distance by as much: past that, stop
        dist0 = Levenshtein.distance(norm[b0:e], template, score_cutoff=limit + shift)
        if dist0 > limit + shift:
            break
        best, best_dist = (b0, dist0) if dist0 <= limit else (-1, limit + 1)
        if dist0 > 1:
            for delta in deltas:
                dist = Levenshtein.distance(norm[b0 + delta: e], template, score_cutoff=best_dist - 1)
                if dist < best_dist:
                    best, best_dist = b0 + delta, dist
                    if dist == 0:
                        break
        if best < 0:
            break
        bounds.append(best)
        distances.append(best_dist)
        e = best
    return bounds[::-1], distances[::-1]


def _consensus(copies: list[str]) -> str:
    """The copies' majority reading: each copy aligned to the last one votes per position of it
    for its character, a deletion, or an insertion before it; only edits are counted (a copy that
    agrees votes for the last copy's character), so the last copy's own edits are outvoted."""
    medoid = copies[-1]
    readings: dict[int, Counter[str]] = {}
    inserted: dict[int, Counter[str]] = {}
    for c in copies:
        extra: dict[int, str] = {}
        for op in Levenshtein.editops(medoid, c):
            if op.tag == "insert":
                extra[op.src_pos] = extra.get(op.src_pos, "") + c[op.dest_pos]
            else:
                readings.setdefault(op.src_pos, Counter())[c[op.dest_pos] if op.tag == "replace" else ""] += 1
        for i, piece in extra.items():
            inserted.setdefault(i, Counter())[piece] += 1
    half = len(copies) / 2
    out = list(medoid) + [""]
    for i, votes in readings.items():
        reading, count = votes.most_common(1)[0]
        if count > len(copies) - sum(votes.values()):
            out[i] = reading
    for i, votes in inserted.items():
        piece, count = votes.most_common(1)[0]
        if count > half:
            out[i] = piece + out[i]
    return "".join(out)


def _noise_not_slots(
    copies: list[str], distances: list[int], consensus: str, budget: int, cfg: RepeatsConfig
) -> bool | None:
    """Most copies are within ``budget`` edits of the consensus (``distances``), and their edits
    are scattered: no one position is edited in ``near_slot_share`` of the copies (and in four or
    more), no word position is a varying field. None when the copies vary in such a slot."""
    if sum(x <= budget for x in distances) < cfg.near_min_share * len(copies):
        return False
    # the last 20 copies tell a slot from noise as well as all of them
    copies, distances = copies[-20:], distances[-20:]
    edited_at: Counter[int] = Counter()
    for c, x in zip(copies, distances):
        if x:
            edited_at.update({op.src_pos for op in Levenshtein.editops(consensus, c)})
    if edited_at and edited_at.most_common(1)[0][1] >= max(4, cfg.near_slot_share * len(copies)):
        return None
    return None if _word_slot(copies, cfg.near_slot_word_edits) else True


def _word_slot(copies: list[str], min_edits: float) -> bool:
    """A word position that is a field whose value changes from copy to copy (a weekday, a
    colour), not noise: most copies differ there from the commonest word, by ``min_edits`` or more
    on average, or a tenth of them (two at least) hold another word altogether (``min_edits`` or
    more away, and half its length). Noise leaves words a character or two from the original.
    Words are MinHash's (``word_regex``): a CJK, Thai ... character is a word of its own, else a
    sentence written without spaces would be one word that any two edits make a "field"."""
    find_words = word_regex().findall
    rows = [find_words(c) for c in copies]
    width = Counter(map(len, rows)).most_common(1)[0][0]
    rows = [r for r in rows if len(r) == width]
    if len(rows) < 4 or width == 0:
        return False
    for column in zip(*rows):
        if column.count(column[0]) == len(rows):
            continue
        word = Counter(column).most_common(1)[0][0]  # ties: the first seen, not hash order
        agree = column.count(word)
        distances = [(Levenshtein.distance(w, word), max(len(w), len(word))) for w in column if w != word]
        if 2 * agree <= len(rows) and sum(d for d, _ in distances) >= min_edits * len(distances):
            return True
        if sum(d >= min_edits and 2 * d >= size for d, size in distances) >= max(2, len(rows) / 10):
            return True
    return False


