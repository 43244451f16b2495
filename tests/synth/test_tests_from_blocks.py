"""Unit tests derived from page blocks: every kept test passes on its reference, each suite gets
its structural tests, furniture gives ``absent`` tests, and a wrong test is dropped."""

from __future__ import annotations

from collections import Counter

import pytest

from schemas.unit_tests import unit_test_to_json
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
def test_order_tests_pair_sentences_of_different_blocks(suite: str) -> None:
    """Two sentences of one block stay in order whatever order a response reads the blocks in."""
    from synth.blocks import Figure, ListBlock, Paragraph
    from synth.tests_from_blocks import _plain

    pairs = 0
    for layout in LAYOUTS:
        spec, _, kept, _ = _tests(layout, suite, 3)
        texts = []
        for pb in spec.blocks:
            b = pb.block
            if isinstance(b, Paragraph):
                texts.append(_plain(b.text))
            elif isinstance(b, ListBlock):
                texts.append(" ".join(_plain(i) for i in b.items))
            elif isinstance(b, Figure):
                texts.append(b.caption)
        for t in kept:
            if t.type == "order":
                pairs += 1
                assert not any(t.before in x and t.after in x for x in texts), (spec.id, t.before, t.after)
    assert pairs > 0
