"""GRPO reward terms (Jina-OCR-v1 Table 4): product, floors, left-out terms, repetition, the worker
pool's timeouts, and the CLI. Values are computed by hand from the metric definitions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from model import rewards
from model.rewards import (
    DEFAULT_FLOORS,
    RewardConfig,
    RewardItem,
    RewardPool,
    combine,
    format_table,
    score,
)
from pipelines.clean.repeats import RepeatsConfig
from schemas.config import load
from schemas.similarity import METRICS

REPO = Path(__file__).resolve().parents[2]


def present(text: str, i: int = 0) -> str:
    return json.dumps({"pdf": "p.pdf", "page": 1, "id": f"t{i}", "type": "present", "text": text})


# --------------------------------------------------------------------------- combine


def test_combine_is_the_floored_product():
    terms = {"content": 0.5, "structure": 0.1, "table": 0.05, "repetition": 0.3, "formula": None}
    # structure floored to 0.2, table to 0.1, formula left out
    assert combine(terms, DEFAULT_FLOORS) == pytest.approx(0.5 * 0.2 * 0.1 * 0.3, abs=1e-12)
    assert combine(terms, {}) == pytest.approx(0.5 * 0.1 * 0.05 * 0.3, abs=1e-12)
    assert combine({"unit_tests": 0.7, "format": 0.9}, DEFAULT_FLOORS) == pytest.approx(0.63)
    assert combine({}, DEFAULT_FLOORS) == 1.0


def test_repetition_is_never_floored():
    assert combine({"content": 1.0, "repetition": 0.0}, DEFAULT_FLOORS) == 0.0
    with pytest.raises(ValueError, match="never floored"):
        RewardConfig(floors={"repetition": 0.2})


def test_config_validation():
    with pytest.raises(ValueError, match="unknown terms"):
        RewardConfig(terms=("content", "bleu"))
    # floors replace the defaults: a misspelt term would silently drop the real floors
    with pytest.raises(ValueError, match="floors has an unknown term 'structur'"):
        RewardConfig(floors={"structur": 0.5})
    with pytest.raises(ValueError, match="unknown terms"):
        RewardConfig(terms_by_dataset={"synth": ["tedz"]})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        RewardConfig(floors={"table": 1.5})
    with pytest.raises(ValueError, match="reward.flors: unknown key"):
        load(RewardConfig, {"flors": {}}, "reward")
    cfg = load(RewardConfig, {"terms": ["content"], "repeats": {"min_length": 64}}, "reward")
    assert cfg.terms == ("content",) and cfg.repeats.min_length == 64


# --------------------------------------------------------------------------- terms


def test_content_only_page_leaves_out_formula_table_and_tests():
    r = score("abcd", "abcf")
    assert r.terms == {"content": 0.75, "formula": None, "table": None, "structure": 1.0,
                       "unit_tests": None, "repetition": 1.0, "format": 1.0, "kie": None}
    assert r.left_out == ["formula", "table", "unit_tests", "kie"]
    assert r.total == pytest.approx(0.75)


def test_format_term_is_floored():
    # one disallowed tag of one: conformance 0 -> floor 0.2; content 1 - 13/17
    r = score("abcd", "<span>abcd</span>")
    assert r.terms["format"] == 0.0
    assert r.terms["content"] == pytest.approx(4 / 17)
    assert r.total == pytest.approx(4 / 17 * 0.2)


def test_structure_term_is_floored():
    # "{{x" has 2 braces, both unclosed: brace balance 0; tag closure 1 -> structural validity 0.5
    r = score("x", "{{x", cfg=RewardConfig(terms=("structure",)))
    assert r.terms["structure"] == pytest.approx(0.5)
    r = score("x", "{{x <b><i>", cfg=RewardConfig(terms=("structure",)))
    assert r.terms["structure"] == pytest.approx(0.0)
    assert r.total == pytest.approx(0.2)


def test_table_term_is_the_mean_of_teds_teds_s_and_table_edit():
    ref = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"
    cand = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>x</td></tr></table>"
    r = score(ref, cand, cfg=RewardConfig(terms=("table",)))
    parts = [METRICS[name](ref, cand)[0] for name in ("teds", "teds_s", "table_edit")]
    assert parts[1] == 1.0 and parts[0] < 1.0
    assert r.terms["table"] == pytest.approx(sum(parts) / 3)
    # TEDS: 6 nodes, one cell renamed at cost 1 -> 1 - 1/6
    assert parts[0] == pytest.approx(5 / 6)
    # no table in the completion: 0, floored at 0.1
    r = score(ref, "a b c d", cfg=RewardConfig(terms=("table",)))
    assert r.terms["table"] == 0.0 and r.total == pytest.approx(0.1)
    # only TEDS-S configured
    r = score(ref, cand, cfg=RewardConfig(terms=("table",), table_signals=("teds_s",)))
    assert r.terms["table"] == 1.0


def test_formula_term_and_left_out_without_reference_formula():
    r = score(r"see $\frac12$", r"see $\frac{1}{2}$", cfg=RewardConfig(terms=("formula",)))
    assert r.terms["formula"] == 1.0
    r = score(r"see $x+y$", "see nothing", cfg=RewardConfig(terms=("formula",)))
    assert r.terms["formula"] == 0.0 and r.total == 0.0  # formula has no floor
    r = score("plain", "$x$", cfg=RewardConfig(terms=("formula",)))
    assert r.terms["formula"] is None and r.left_out == ["formula"] and r.total == 1.0


FORMULA_MATH = json.dumps({"pdf": "f.pdf", "page": 1, "id": "m", "type": "math",
                           "math": "\\theta_{b}\\times\\tau\\neq 0"})


def test_formula_term_reads_a_formula_crop_as_one_display_equation():
    """A formula crop (convention latex_formula) answers a bare formula, which has no delimiters: the term
    reads reference and completion as one display equation each (checkable), as its math tests do."""
    ref = r"\theta_{b}\times\tau\neq0"
    cfg = RewardConfig(terms=("formula",))

    def formula(completion: str, convention: str | None = "latex_formula") -> float | None:
        return score(ref, completion, cfg=cfg, convention=convention).terms["formula"]

    assert formula(ref) == 1.0
    assert formula(f"\\[{ref}\\]") == 1.0 and formula(f"$${ref}$$") == 1.0  # its own delimiters are taken off
    near = formula(r"\theta_{b}\times\tau\neq1")
    assert 0.9 < near < 1.0
    assert formula("x+y") < 0.2
    assert formula(ref, convention=None) is None  # a page's bare text is no formula: left out, as before
    # the pool reads it the same way
    item = RewardItem(ref, r"\theta_{b}\times\tau\neq1", [FORMULA_MATH], convention="latex_formula")
    with RewardPool(RewardConfig(workers=1, terms=("formula", "unit_tests"))) as pool:
        (got,) = pool.score_many([item])
    assert got.terms["formula"] == pytest.approx(near) and got.terms["unit_tests"] == 0.0


NEMOTRON_MD = ("<x_65><y_25>The County Gazette<x_959><y_131><class_Page-Header>\n"
               "<x_65><y_140>Prices \\(x^{2}\\)<x_959><y_160><class_Text>\n"
               "<x_65><y_170><table><tr><td>a</td><td>1</td></tr></table><x_959><y_260><class_Table>\n")


@pytest.mark.parametrize(("convention", "stream"), [
    ("nemotron_plain_bbox", "<x_121><y_105>The letter figure<x_824><y_120>\n<x_121><y_126>this state<x_791><y_141>\n"),
    ("nemotron_bbox_cls", "<x_51><y_34><x_271><y_48><class_Page-Header>\n<x_56><y_70><x_494><y_98><class_Title>\n"),
    ("nemotron_md_bbox_cls", NEMOTRON_MD),
])
def test_a_perfect_box_stream_scores_one(convention, stream):
    """Box tags are not HTML: structure and format read the element texts (checkable) of a box stream."""
    r = score(stream, stream, convention=convention)
    assert r.terms["structure"] == 1.0 and r.terms["format"] == 1.0
    assert r.total == 1.0
    assert score(stream, stream).terms["format"] < 1.0  # read as it is, the stream's tags are not allowed HTML


def test_box_stream_structure_and_format_still_see_the_texts_markup():
    broken = NEMOTRON_MD.replace("</td></tr></table>", "</td>").replace("<td>a</td>", "<td><font x=1>a</font></td>")
    r = score(NEMOTRON_MD, broken, convention="nemotron_md_bbox_cls")
    assert r.terms["structure"] < 1.0 and r.terms["format"] < 1.0
    with RewardPool(RewardConfig(workers=1, terms=("structure", "format"))) as pool:
        (got,) = pool.score_many([RewardItem(NEMOTRON_MD, broken, convention="nemotron_md_bbox_cls")])
    assert got.terms == {"structure": r.terms["structure"], "format": r.terms["format"]}


def test_unit_tests_term_is_the_fraction_passed_and_floored():
    tests = [present("alpha beta", 0), present("gamma delta", 1)]
    cfg = RewardConfig(terms=("unit_tests",))
    assert score("ref", "alpha beta and more", tests, cfg).terms["unit_tests"] == 0.5
    assert score("ref", "alpha beta, gamma delta", tests, cfg).total == 1.0
    r = score("ref", "nothing here", tests, cfg)
    assert r.terms["unit_tests"] == 0.0 and r.total == pytest.approx(0.2)
    # dicts are accepted as well as JSON strings; a malformed test is refused at the boundary
    assert score("ref", "gamma delta", [json.loads(t) for t in tests], cfg).terms["unit_tests"] == 0.5
    with pytest.raises(ValueError, match="unit_tests\\[0\\]"):
        score("ref", "x", ['{"type": "present"}'], cfg)


def test_repetition_term_is_graded_by_the_loop_length():
    text = "Intro text about the thing. " * 3 + "the same row again | " * 60
    # the detector: exact loop, period 21, span (84, 1344): 1 - (1260 - 21) / 1344
    r = score(text, text, cfg=RewardConfig(terms=("content", "repetition")))
    assert r.terms["content"] == 1.0
    assert r.terms["repetition"] == pytest.approx(105 / 1344)
    assert r.total == pytest.approx(105 / 1344)
    shorter = "Intro text about the thing. " * 3 + "the same row again | " * 40
    assert score(shorter, shorter).terms["repetition"] > r.terms["repetition"]


@pytest.mark.parametrize("loop", ["type" * 40, "The cat sat on the mat. " * 6, "type" * 127,
                                  "# Invoice\n\nBilled to Jonas. " + "Total due: 3,073.94 EUR. " * 6])
def test_repetition_term_penalises_a_short_loop(loop):
    """Rollouts are a few hundred characters: a loop of 100-200 characters costs (the cleaning detector's
    512-character minimum never looked at them)."""
    assert 100 <= len(loop) <= 200 or loop == "type" * 127
    assert score(loop, loop).terms["repetition"] < 0.5


@pytest.mark.parametrize("answer", [
    "Date: " + "_" * 64, "1. Introduction " + "." * 66 + " 1", "A short page of text, then a rule.\n" + "-" * 72,
    "Name: John Smith\n\nSignature: " + "_" * 64,
    "# Invoice INV-38145\n\nBilled to **Jonas Delacroix**, Glenwick Archive. Issued 24 March 2015; payment due "
    "within 30 days.\n\nTotal due: **3,073.94 EUR**. Bank reference 7947-4157.",
    "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr><tr><td>3</td><td>4</td></tr>"
    "<tr><td>5</td><td>6</td></tr></table>",
    "1. a\n2. b\n3. c\n4. d\n5. e\n6. f\n7. g\n8. h\n9. i\n10. j\n",
    r"\[ \begin{pmatrix} 0 & 0 & 0 \\ 0 & 0 & 0 \\ 0 & 0 & 0 \end{pmatrix} \]",
    "Name: ________________  Date: ________________\nSignature: ________________",
])
def test_repetition_term_leaves_a_normal_short_answer_alone(answer):
    assert score(answer, answer).terms["repetition"] == 1.0


def test_reward_repeats_config_is_its_own():
    cfg = RewardConfig()
    assert isinstance(cfg.repeats, rewards.RewardRepeatsConfig)
    assert cfg.repeats.min_length == 48 and RepeatsConfig().min_length == 512  # cleaning keeps its own
    loaded = load(RewardConfig, {"repeats": {"min_length": 64}}, "reward")
    assert loaded.repeats.min_length == 64 and loaded.repeats.min_covered_chars == 48  # the others stay the reward's


def test_terms_by_dataset_selects_terms():
    cfg = RewardConfig(terms_by_dataset={"jinaocrsynth": ["content", "table"], "web-pdf": ["content"]})
    assert list(score("abcd", "abcd", cfg=cfg, dataset="jinaocrsynth").terms) == ["content", "table"]
    # first listed key wins: (source, domain)
    assert list(score("abcd", "abcd", cfg=cfg, dataset=("finepdfs", "web-pdf")).terms) == ["content"]
    assert list(score("abcd", "abcd", cfg=cfg, dataset="other").terms) == list(cfg.terms)
    assert cfg.terms == ("content", "formula", "table", "structure", "unit_tests", "repetition", "format", "kie")


# --------------------------------------------------------------------------- pool


def stall_term(reference, completion, tests, cfg):
    """A term that hangs: the pool must kill its worker."""
    time.sleep(600)
    return 1.0


def failing_term(reference, completion, tests, cfg):
    raise RuntimeError("boom")


@pytest.fixture
def extra_terms():
    rewards.register_term("stall", stall_term)
    rewards.register_term("failing", failing_term)
    yield
    del rewards.TERMS["stall"], rewards.TERMS["failing"]


def _big_table(rows: int, cols: int, word: str) -> str:
    body = "".join("<tr>" + "".join(f"<td>r{r}c{c} {word}</td>" for c in range(cols)) + "</tr>"
                   for r in range(rows))
    return f"<table>{body}</table>"


ITEMS = [
    RewardItem("abcd", "abcf"),
    RewardItem("# T\n\n$x^2$ and <table><tr><td>a</td></tr></table>", "# T\n\n$x^3$ and <table><tr><td>a</td></tr>"),
    RewardItem("ref", "alpha beta", [present("alpha beta"), present("zeta")]),
    RewardItem("abcd", "abcd", dataset="synth"),
    # a box stream: "alpha beta" spans two boxes, so it passes only on the stream's texts (its convention)
    RewardItem("ref", "<x_1><y_2>alpha<x_3><y_4>\n<x_1><y_5>beta<x_3><y_6>\n", [present("alpha beta")],
               convention="nemotron_plain_bbox"),
]


def test_pool_matches_in_process_scores():
    cfg = RewardConfig(workers=2, terms_by_dataset={"synth": ["content"]})
    with RewardPool(cfg) as pool:
        got = pool.score_many(ITEMS)
        assert pool.timeouts == 0
    want = [score(i.reference, i.completion, i.unit_tests, cfg, i.dataset, i.convention) for i in ITEMS]
    assert [g.to_dict() for g in got] == [w.to_dict() for w in want]
    assert got[2].terms["unit_tests"] == 0.5
    assert got[4].terms["unit_tests"] == 1.0


def test_unit_tests_read_the_completion_as_its_convention_has_it_read():
    stream = ITEMS[4]
    assert score(stream.reference, stream.completion, stream.unit_tests).terms["unit_tests"] == 0.0
    by_convention = score(stream.reference, stream.completion, stream.unit_tests, convention=stream.convention)
    assert by_convention.terms["unit_tests"] == 1.0
    # only the unit tests read the texts: content still compares the stream with the reference
    assert by_convention.terms["content"] == score(stream.reference, stream.completion).terms["content"]
    items = rewards.read_items([json.dumps({"reference": "r", "completion": stream.completion,
                                            "unit_tests": [present("alpha beta")],
                                            "convention": "nemotron_plain_bbox"})])
    assert items[0].convention == "nemotron_plain_bbox"
    with pytest.raises(ValueError, match="line 1: convention is not a string"):
        rewards.read_items([json.dumps({"reference": "r", "completion": "c", "convention": 3})])


def test_pool_timeout_scores_failure_and_keeps_going():
    # TEDS on a 300x20 table takes seconds; 0.5 s is not enough
    big = _big_table(300, 20, "value")
    cfg = RewardConfig(terms=("content", "table"), timeout_s=0.5, workers=1)
    with RewardPool(cfg) as pool:
        slow, fast = pool.score_many([RewardItem(big, big.replace("value", "valve")), RewardItem("abcd", "abcf")])
        assert pool.timeouts >= 1 and pool.replaced == pool.timeouts
    assert "table" in slow.timed_out and slow.terms["table"] == 0.0
    assert slow.total <= 0.1  # table failure floored at 0.1
    assert fast.timed_out == [] and fast.terms == {"content": 0.75, "table": None}


def test_pool_kills_a_hung_worker_and_replaces_it(extra_terms):
    cfg = RewardConfig(terms=("content", "stall", "failing"), timeout_s=1.0, workers=1)
    with RewardPool(cfg) as pool:
        first = pool._workers[0].process
        [r] = pool.score_many([RewardItem("abcd", "abcf")])
        assert r.timed_out == ["stall"] and r.terms["stall"] == 0.0 and r.total == 0.0
        assert r.errors == {"failing": "RuntimeError: boom"} and r.terms["failing"] == 0.0
        assert r.terms["content"] == 0.75
        assert first.poll() is not None  # the hung worker is gone
        assert pool._workers[0].process is not first
        # the replacement serves the next call
        [again] = pool.score_many([RewardItem("abcd", "abcd")])
        assert again.terms["content"] == 1.0 and again.timed_out == ["stall"]
        last = pool._workers[0].process
    assert last.poll() is not None  # closing the pool ends its workers


# --------------------------------------------------------------------------- CLI


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "model.rewards", *args], input=stdin, capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=120)


def test_cli_scores_a_jsonl(tmp_path):
    lines = [{"completion": "abcf", "reference": "abcd"},
             {"completion": "alpha beta", "reference": "ref", "unit_tests": [present("alpha beta"), present("zeta")]},
             {"completion": "abcd", "reference": "abcd", "dataset": "synth"}]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (tmp_path / "cfg.yaml").write_text("terms_by_dataset:\n  synth: [content]\n")
    done = _cli("--input", str(path), "--config", str(tmp_path / "cfg.yaml"), "--workers", "1")
    assert done.returncode == 0, done.stderr
    rows = done.stdout.strip().splitlines()
    assert rows[0].split()[:3] == ["line", "total", "content"]
    assert rows[1].split()[:3] == ["1", "0.7500", "0.7500"]
    # "ref" -> "alpha beta": 9 edits of 10 -> content 0.1; one unit test of two passes
    assert rows[2].split()[:3] == ["2", "0.0500", "0.1000"]
    assert rows[3].split() == ["3", "1.0000", "1.0000"] + ["-"] * 7  # dataset synth: content only
    # mean of totals (0.75 + 0.05 + 1) / 3, content mean (0.75 + 0.1 + 1) / 3
    assert rows[4].split()[:3] == ["mean", "0.6000", "0.6167"]
    done = _cli("--input", str(path), "--json", "--workers", "1", "--terms", "content,unit_tests")
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["terms"].get("unit_tests") for r in results] == [None, 0.5, None]
    assert [r["total"] for r in results] == pytest.approx([0.75, 0.05, 1.0])


def test_cli_rejects_a_bad_line(tmp_path):
    done = _cli(stdin='{"completion": "x"}\n')
    assert done.returncode == 2 and "line 1: reference missing" in done.stderr
    assert "python -m model.rewards" in _cli("--help").stdout


def test_format_table_marks_timeouts_and_left_out():
    r = rewards.RewardResult(0.1, {"content": 1.0, "table": 0.0, "formula": None}, ["formula"], ["table"])
    text = format_table([r])
    assert "0.0000T" in text and text.splitlines()[1].split()[-1] == "-"


_THEAD = ("<table><thead><tr><th>a</th><th>b</th></tr></thead>"
          "<tbody><tr><td>c  d</td><td>e</td></tr></tbody></table>")
_PLAIN = "<table><tr><th>a</th><th>b</th></tr><tr><td>c d</td><td>e</td></tr></table>"


def test_reward_table_term_follows_the_configured_convention():
    base = score(_THEAD, _PLAIN, cfg=RewardConfig(terms=("table",), table_signals=("teds",))).terms["table"]
    ptn = score(_THEAD, _PLAIN, cfg=RewardConfig(terms=("table",), table_signals=("teds",),
                                               teds_convention="pubtabnet")).terms["table"]
    assert base == 1.0 and ptn == pytest.approx(1 - 2.25 / 8)
    with pytest.raises(ValueError, match="teds_convention"):
        RewardConfig(teds_convention="PubTabNet")
