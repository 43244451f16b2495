"""Unit tests derived from page blocks: every kept test passes on its reference, each suite gets
its structural tests, furniture gives ``absent`` tests, and a wrong test is dropped."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from schemas.unit_tests import unit_test_to_json
from synth.blocks import Furniture, Heading, ListBlock, PageSpec, Paragraph, PlacedBlock
from synth.content import LAYOUTS, SUITES, make_page_spec
from synth.reference import reference_markdown
from synth.tests_from_blocks import unit_tests_for_page, verify_tests


def _tests(layout: str, suite: str, seed: int):
    spec = make_page_spec(layout, suite, seed)
    md = reference_markdown(spec)
    kept, dropped = unit_tests_for_page(spec, md, f"{spec.id}.pdf")
    return spec, md, kept, dropped


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("suite", SUITES)
def test_kept_tests_pass_and_have_structure(layout: str, suite: str) -> None:
    for seed in (0, 1):
        spec, md, kept, _ = _tests(layout, suite, seed)
        assert all(t.check(md)[0] for t in kept)
        assert len({t.id for t in kept}) == len(kept)
        types = Counter(t.type for t in kept)
        assert types["baseline"] == 1
        assert types["absent"] >= 1  # every page has furniture
        assert types["present"] >= 1 and types["format"] >= 1
        if suite == "formula":
            assert types["math"] >= 2
        if suite == "table":
            assert types["table"] >= 1
        if spec.columns > 1:
            assert types["order"] >= 1


def test_deterministic() -> None:
    a = [unit_test_to_json(t) for t in _tests("newspaper", "table", 5)[2]]
    b = [unit_test_to_json(t) for t in _tests("newspaper", "table", 5)[2]]
    assert a == b


def test_furniture_becomes_absent_tests() -> None:
    spec, md, kept, _ = _tests("report", "layout", 2)
    absent = {t.text for t in kept if t.type == "absent"}
    assert spec.furniture.page_number in absent
    for t in kept:
        if t.type == "absent":
            assert t.check(md)[0]
            assert not t.check(md + "\n" + t.text)[0]  # a transcription with the furniture fails


def test_footnotes_and_cross_column_order() -> None:
    spec, _md, kept, _ = _tests("newspaper", "layout", 1)
    assert any(t.type == "footnote" for t in kept)
    col = {}
    for p in spec.blocks:
        col.setdefault(p.column, []).append(p)
    assert len(col) > 1


def test_wrong_tests_are_dropped() -> None:
    _, md, _, _ = _tests("report", "table", 3)
    candidates = [
        {"type": "present", "text": "zebra quantum marmalade"},
        {"type": "math", "math": "\\frac{a}{b} = \\gamma_{99}", "ignore_dollar_delimited": True},
        {"type": "order", "before": "zzzz never here", "after": "qqqq never there"},
        {"type": "present", "text": "x", "first_n": 0},  # invalid
        {"type": "present", "text": "\\( a \\)"},  # filtered: math delimiters in a text field
        {"type": "baseline"},
    ]
    kept, dropped = verify_tests(candidates, md, "p.pdf")
    assert [t.type for t in kept] == ["baseline"]
    assert dropped == {"fails_reference_present": 1, "fails_reference_math": 1, "fails_reference_order": 1,
                       "invalid_present": 1, "filtered_markup_present": 1}


@pytest.mark.parametrize("suite", SUITES)
def test_reading_order_pairs_are_of_different_blocks(suite: str) -> None:
    """The random reading-order pairs (``_order``) join sentences of different blocks: two sentences of one
    block stay in order whatever order a response reads the blocks in (the chain below tests those)."""
    from synth.reference import reading_order
    from synth.tests_from_blocks import _order, _text_blocks

    pairs = 0
    for layout in LAYOUTS:
        spec = make_page_spec(layout, suite, 3)
        text = _text_blocks(spec, reading_order(spec))
        block_of = {}
        for block, _, sentence in text:
            block_of.setdefault(sentence[:80], set()).add(block)
        for t in _order(random.Random(0), text):
            pairs += 1
            before, after = block_of[t["before"]], block_of[t["after"]]
            assert any(x != y for x in before for y in after), (spec.id, t["before"], t["after"])
    assert pairs > 0


# -- the chain: content-changing edits of the reference fail a test ---------------------------------------

_P1 = ("Tidal mills were built along estuaries where a dam could trap the rising sea. When the tide fell, "
       "the stored water turned a wheel for several hours. The Fairholt mill ran 14 hours a day in summer. "
       "Its miller kept a ledger of every sack that was ground.")
_P2 = ("Surveyors measure glacier retreat by returning to painted boulders. The distance between the oldest "
       "marker and the snout gives a durable record of change. Jonas Nakamura led the survey, which covered "
       "137 sites in 4 districts.")
_P3 = "Ash from old eruptions weathers into fertile soil. Villages are often found on the slopes of volcanoes."


def _hand_spec() -> PageSpec:
    blocks = (Heading("Mills and Glaciers", 1), Paragraph(_P1), Heading("Results"), Paragraph(_P2),
              ListBlock(("Applicant name: Elif Valdivia", "Date of application: 23 December 2021")),
              Paragraph(_P3))
    return PageSpec(id="hand", layout="report", suite="layout", furniture=Furniture(page_number="7"),
                    blocks=tuple(PlacedBlock(b) for b in blocks), seed=1)


def _caught(kept, md: str) -> bool:
    return not all(t.check(md)[0] for t in kept)


def _swap(md: str, a: str, b: str) -> str:
    assert md.count(a) == 1 and md.count(b) == 1 and md.index(a) < md.index(b)
    return md.replace(a, "\0").replace(b, a).replace("\0", b)


def test_chain_catches_swapped_deleted_and_renumbered_sentences() -> None:
    spec = _hand_spec()
    md = reference_markdown(spec)
    kept, _ = unit_tests_for_page(spec, md, "hand.pdf")
    assert kept and all(t.check(md)[0] for t in kept)
    sentences = [s for p in (_P1, _P2, _P3) for s in re.split(r"(?<=\.) ", p)]
    for p in (_P1, _P2, _P3):
        ps = re.split(r"(?<=\.) ", p)
        for a, b in zip(ps, ps[1:]):
            assert _caught(kept, _swap(md, a, b)), ("swap", a, b)
    for s in sentences:
        assert _caught(kept, md.replace(s + " ", "").replace(" " + s, "")), ("delete", s)
    assert _caught(kept, md.replace("14 hours", "15 hours"))  # a 2-digit number in prose
    assert _caught(kept, md.replace("in 4 districts", "in 5 districts"))  # a 1-digit one
    assert _caught(kept, md.replace("23 December", "24 December"))  # in a list item
    assert _caught(kept, _swap(md, _P1, _P3))  # two paragraphs
    assert _caught(kept, _swap(md, _P2, _P3))
    # Content kept, spelled otherwise: no test fails
    for same in (md.replace(" ", "  "), md.replace("\n\n", "\n\n\n"), md.replace("'", "\u2019")):
        assert all(t.check(same)[0] for t in kept)


def test_chain_quotes_templated_sentences_by_their_boundary() -> None:
    """A sentence with nothing of its own that occurs once (text around formulas, repeated on the page) is
    quoted over its boundary with a neighbour, so swapping it with that neighbour still fails a test."""
    tail = "In the fitted model \\( O(y \\log y) \\), and the bound \\( r \\leq q \\) holds for every site."
    paras = [f"{lead} {tail}" for lead in ("Hives are brought into the orchard during bloom.",
                                            "Sorting machines later read the codes optically.",
                                            "Capital letters were kept in the upper case.")]
    spec = PageSpec(id="tpl", layout="paper", suite="formula",
                    blocks=tuple(PlacedBlock(Paragraph(p)) for p in paras), seed=2)
    md = reference_markdown(spec)
    kept, _ = unit_tests_for_page(spec, md, "tpl.pdf")
    assert all(t.check(md)[0] for t in kept)
    for p in paras:
        lead = p[: p.index(" In the")]
        # the templated sentence before its paragraph's own: the formulas stay, only the order changes
        edited = md.replace(p, tail + " " + lead)
        assert _caught(kept, edited), lead


@pytest.mark.parametrize("suite", SUITES)
def test_generated_pages_catch_sentence_and_number_edits(suite: str) -> None:
    """On generated pages, swapping a paragraph's first two sentences, deleting its first sentence and
    changing a 1-2 digit number of its text each fail a test, and the reference passes every test (pages
    whose chain is complete: at most MAX_CHAIN + 1 sentences; specs hold more than a page shows)."""
    from synth.reference import reading_order
    from synth.tests_from_blocks import _text_blocks

    edits = Counter()
    for layout in LAYOUTS:
        for seed in (4, 5):
            spec, md, kept, _ = _tests(layout, suite, seed)
            assert all(t.check(md)[0] for t in kept)
            if len(_text_blocks(spec, reading_order(spec))) <= 61:  # MAX_CHAIN + 1
                _edit_and_check(spec, md, kept, edits)
    assert edits["sentences"] >= 8 and edits["numbers"] >= 4, edits


def _edit_and_check(spec, md, kept, edits: Counter) -> None:
    """Swap, delete and renumber in each paragraph of ``spec`` in turn; each edit must fail a test."""
    for pb in spec.blocks:
        text = pb.block.text if isinstance(pb.block, Paragraph) else ""
        if not text or text not in md or "[^" in text:
            continue
        parts = re.split(r"(?<=[.!?]) ", text)
        if len(parts) >= 2 and md.count(parts[0]) == 1 and md.count(parts[1]) == 1 and len(parts[0]) > 20:
            swapped = md.replace(text, " ".join([parts[1], parts[0], *parts[2:]]))
            assert _caught(kept, swapped), (spec.id, "swap", parts[:2])
            assert _caught(kept, md.replace(text, " ".join(parts[1:]))), (spec.id, "delete", parts[0])
            edits["sentences"] += 1
        plain = re.sub(r"\\\(.*?\\\)", lambda m: "\0" * len(m.group()), text)
        m = re.search(r"(?<![\w.,])\d{1,2}(?![\w]|[.,]\d)", plain)
        if m and md.count(text) == 1:
            new = str((int(m.group()) + 1) % 100)
            changed = md.replace(text, text[: m.start()] + new + text[m.end():])
            assert _caught(kept, changed), (spec.id, "number", text[max(0, m.start() - 30): m.end() + 10])
            edits["numbers"] += 1


def test_tests_per_page_are_bounded() -> None:
    from synth.tests_from_blocks import (
        MAX_CHAIN,
        MAX_NUMBER_SPANS,
        MAX_ORDER,
        MAX_PRESENT_NUMBERS,
        MAX_PRESENT_WORDS,
    )

    most = Counter()
    for layout in LAYOUTS:
        for suite in SUITES:
            _, _, kept, _ = _tests(layout, suite, 0)
            types = Counter(t.type for t in kept)
            for kind, n in types.items():
                most[kind] = max(most[kind], n)
            assert types["order"] <= MAX_ORDER + MAX_CHAIN
            assert types["present"] <= MAX_PRESENT_WORDS + MAX_PRESENT_NUMBERS + MAX_NUMBER_SPANS
            for t in kept:
                if t.type == "order" and t.max_diffs == 0:
                    assert len(t.before) <= 25 and len(t.after) <= 25  # chain fragments: exact quotes
    assert most["order"] > MAX_ORDER  # the chain is there
    assert MAX_CHAIN == 60  # test_generated_pages_catch_sentence_and_number_edits takes pages of <= 61 sentences
