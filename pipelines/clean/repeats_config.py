"""What the degeneration-loop detector is configured with and what it finds: ``RepeatsConfig`` and ``Loop``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from schemas.config import option

Kind = Literal["exact", "truncated", "gapped", "near"]
Bands = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class RepeatsConfig:
    """Thresholds of the loop detector; each field's help is also shown by the CLI's ``--help``. The
    defaults are the ones the evaluation set was measured with.
    Bands are ``((max_period, min_copies), ...)``, ascending: a unit of period ``p`` needs the
    copies of the first band with ``p <= max_period``; longer units are not loops."""

    min_length: int = option(512, help="labels shorter than this are not inspected; the length is in columns: "
                                       "East Asian Wide and Fullwidth characters (CJK) count 3, as one carries "
                                       "about as much text as three Latin letters (a Chinese page is a third "
                                       "as long as its English translation)")
    tail_chars: int = option(1024, help="only this many last characters are searched (trailing whitespace "
                                        "set aside)")
    max_period: int = option(512, help="longest repeated unit, in characters")
    needle_chars: int = option(8, help="length of the end piece whose earlier occurrences propose periods")
    trace_chars: int = option(65_536, help="how far before the tail an exact loop is followed to report its "
                                           "start (reporting only)")
    min_copies: Bands = option(((2, 64), (8, 16), (32, 6), (96, 4), (341, 3), (512, 2)),
                               help="exact/truncated: copies needed per period band")
    min_covered_chars: int = option(256, help="exact/truncated: characters of the tail the loop must cover")
    table_min_copies: int = option(6, help="copies needed when the unit is a table row (<tr>, <td>, | cells, "
                                           "LaTeX &)")
    table_min_covered: int = option(512, help="characters a table-row loop must cover")
    empty_min_copies: int = option(12, help="copies needed when the unit (over 2 characters) has no letter or "
                                            "digit outside markup: empty cells, separator rows")
    empty_min_covered: int = option(896, help="characters such an empty-unit loop must cover: blank forms and "
                                              "empty tables are kept unless they fill the tail")
    form_min_chars: int = option(8192, help="form units (blanks and fill marks with short labels: `Name: ____`, "
                                            "`1. (A) (B) (C)`, `| ○ | ○ |`) follow the empty-unit rule and their "
                                            "loops must run this many characters (exact: traced before the tail; "
                                            "gapped and near-exact, numbered answer rows: within the tail, so "
                                            "never by default): a blank form or answer sheet of a page or two is "
                                            "kept")
    gapped: bool = option(True, help="look for gapped loops too")
    gapped_min_copies: Bands = option(((8, 24), (32, 8), (128, 5), (512, 3)),
                                      help="gapped: copies needed per band of normalised unit length")
    gapped_min_covered: int = option(320, help="gapped: characters the loop must cover (table and empty rules "
                                               "apply too)")
    gap_tolerance: float = option(0.25, help="chain search: a copy's normalised length may differ from the last "
                                             "copy's by this fraction")
    gap_min_tolerance: int = option(4, help="chain search: ... or by at least this many characters")
    gap_min_similarity: float = option(0.8, help="chain search: Indel similarity of each copy to the last copy")
    gap_same_letters: float = option(0.8, help="chain search: share of copies whose letters (outside tags) are "
                                               "the commonest letters: fillers carry no words")
    number_regularity: float = option(0.8, help="gapped: per number position, share of copy-to-copy steps equal "
                                                "to the commonest step (incrementing or constant numbers)")
    near: bool = option(True, help="look for near-exact loops too: copies back to back with a few character "
                                   "edits each (OCR-like substitutions)")
    near_max_edits: int = option(3, help="near: Levenshtein edits (digits and light punctuation aside) a copy may "
                                         "differ from the copies' consensus by ...")
    near_edit_rate: float = option(0.03, help="near: ... plus this fraction of the unit length")
    near_min_share: float = option(0.9, help="near: share of copies that must be that close to the consensus")
    near_slot_share: float = option(0.7, help="near: share of copies edited at one same position from which the "
                                              "edits are a varying slot ((a) ... (b) ..., a field), not noise")
    near_slot_word_edits: float = option(2.5, help="near: a word position where most copies differ from the "
                                                   "commonest word, by this many edits on average, is a varying "
                                                   "field (a weekday, a colour), not noise")
    near_shift: int = option(2, help="near: characters a copy boundary may move (edits that insert or delete)")
    near_needles: int = option(6, help="near: needles, near_needle_chars apart from the end, that propose "
                                       "periods where two of them recur at the same distance")
    near_needle_chars: int = option(6, help="near: length of those needles (shorter than needle_chars: in short "
                                            "units few 8-character pieces escape the edits)")
    drop: bool = option(True, help="stage: drop records with a loop (false: keep them, flagged in quality)")

    def __post_init__(self) -> None:
        for name in ("min_copies", "gapped_min_copies"):
            bands = tuple((int(p), int(c)) for p, c in getattr(self, name))
            if not bands or any(p < 1 or c < 2 for p, c in bands) or list(bands) != sorted(bands):
                raise ValueError(f"repeats: {name} must be ascending (max_period >= 1, copies >= 2) bands")
            object.__setattr__(self, name, bands)
        if self.tail_chars < 16 or self.max_period < 1 or self.needle_chars < 2:
            raise ValueError("repeats: tail_chars >= 16, max_period >= 1 and needle_chars >= 2 are required")
        shares = ("gap_min_similarity", "gap_same_letters", "near_edit_rate", "near_min_share", "near_slot_share")
        if any(not 0 <= getattr(self, name) <= 1 for name in shares):
            raise ValueError(f"repeats: {', '.join(shares)} must lie in [0, 1]")
        if self.near_max_edits < 0 or self.near_shift < 0 or self.near_needles < 2 or self.near_needle_chars < 2:
            raise ValueError("repeats: near_max_edits >= 0, near_shift >= 0, near_needles >= 2 and "
                             "near_needle_chars >= 2 are required")


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
