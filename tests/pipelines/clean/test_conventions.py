import hashlib
import pickle

import pytest

from pipelines.clean.conventions import ConventionsConfig, ConventionsStage, rewrite
from schemas.deadletter import RecordError
from schemas.page import PageRecord, ProvenanceStep, page_id
from schemas.unit_tests import MathTest, PresenceTest, passing_tests, unit_test_to_json

DOLLARS = ConventionsConfig(inline="$", display="$$")


def record(response: str, response_format: str = "markdown") -> PageRecord:
    image = b"\x89PNG\r\n\x1a\n"
    return PageRecord(
        id=page_id("s", "doc", 1), source="s", source_id="doc", page_number=1, domain="d", language="en",
        license="cc0", image=image, image_sha256=hashlib.sha256(image).hexdigest(), width=1, height=1,
        task="parse_page", instruction="Convert.", response=response, response_format=response_format,
        provenance=[ProvenanceStep("read:s", "1", "x")],
    )


def nonzero(counters: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counters.items() if v}


@pytest.mark.parametrize("text, expected", [
    ("$x+y,t+v$", "$x+y$, $t+v$"),  # the Jina 5.2 example
    (r"\(x+y,t+v\)", "$x+y$, $t+v$"),
    (r"$\sin x, \cos x, \tan x$", r"$\sin x$, $\cos x$, $\tan x$"),
    (r"$x = 1,\quad y = 2$", "$x = 1$, $y = 2$"),  # spacing commands at the cut are dropped
    ("where $a,b$ are", "where $a$, $b$ are"),
])
def test_comma_joined_formulas_are_split(text, expected):
    out, counters = rewrite(text, DOLLARS)
    assert out == expected
    assert counters["split_formulas"] == 1


@pytest.mark.parametrize("formula", [
    "$f(x,y)$", r"$\{1,2\}$", "$x_{i,j}$", "$[a,b]$", r"$\langle u,v \rangle$", r"$1{,}5$",
    "$1,000$", "$3,14159$", "$1, 2, 3$",  # numbers and number lists
    r"$x_1, \dots, x_n$", "$a, ..., z$",  # one sequence
    r"$a, b \in A$", "$x, y > 0$",  # the relation binds the whole list
    r"$a\,b$", "$x,$", "$,x$", r"$\begin{pmatrix}a,b\end{pmatrix}$",
])
def test_formulas_that_must_not_be_split(formula):
    out, counters = rewrite(formula, DOLLARS)
    assert out == formula
    assert counters["split_formulas"] == 0


def test_display_formulas_are_never_split():
    assert rewrite(r"\[f(x) = 0, x > 0\]")[0] == r"\[f(x) = 0, x > 0\]"


def test_delimiters_are_normalised_to_the_default_olmocr_convention():
    out, counters = rewrite("Let $a$ and $$b=c$$ and \\(d\\) and \\[e\\].")
    assert out == r"Let \(a\) and \[b=c\] and \(d\) and \[e\]."
    assert nonzero(counters) == {"inline_delimiters": 1, "display_delimiters": 1}
    out, counters = rewrite("$x+y,t+v$")
    assert out == r"\(x+y\), \(t+v\)"
    assert nonzero(counters) == {"split_formulas": 1, "inline_delimiters": 1}


def test_delimiters_to_dollars_strip_inner_space():
    out, counters = rewrite(r"\( x + y \) and \[ z \]", DOLLARS)
    assert out == "$x + y$ and $$ z $$"
    assert nonzero(counters) == {"inline_delimiters": 1, "display_delimiters": 1}


@pytest.mark.parametrize("text", [
    "costs $5 and $10", r"\$5,6\$", "$ x$", "a $x", r"\(a", "$a$$b$", "$a\n\nb$", r"a \\(b\\) c",
])
def test_text_that_is_not_math_is_left_alone(text):
    out, counters = rewrite(text)
    assert out == text
    assert not nonzero(counters)


def test_escaped_brackets_around_numbers_are_citations_not_math():
    text = r"see \[12\] and \[3, 5-7\], eq. \(1\), but \[x,1\]"
    out, counters = rewrite(text, DOLLARS)
    assert out == r"see \[12\] and \[3, 5-7\], eq. \(1\), but $$x,1$$"
    assert nonzero(counters) == {"display_delimiters": 1}


def test_latex_bold_and_italic_outside_math_become_markdown():
    out, counters = rewrite(r"\textbf{Bold} and \emph{it} and \textit{ sp } and \textbf{\textit{both}}.")
    assert out == "**Bold** and *it* and  *sp*  and ***both***."
    assert nonzero(counters) == {"bold": 2, "italic": 3}
    out, counters = rewrite(r"\textbf{Theorem $a,b$ holds} and $\textbf{v}$ and \textbf{a {b} c}", DOLLARS)
    assert out == r"**Theorem $a$, $b$ holds** and $\textbf{v}$ and **a {b} c**"
    assert nonzero(counters) == {"bold": 2, "split_formulas": 1}


def test_emphasis_left_alone_when_it_cannot_be_markdown():
    for text in ("\\textbf{a\n\nb}", r"\textbf{open", r"\\textbf{x}"):
        assert rewrite(text)[0] == text


def test_code_spans_and_fences_are_never_touched():
    text = (
        "Use `$a,b$` and ``\\textbf{x}``.\n\n"
        "```latex\n$a,b$ \\textbf{x} \\(y\\)\n```\n\n"
        "~~~\n$$z$$\n~~~\n"
        "<code>$c,d$</code> then $e,f$"
    )
    out, counters = rewrite(text, DOLLARS)
    assert out == text.replace("$e,f$", "$e$, $f$")
    assert nonzero(counters) == {"split_formulas": 1}


def test_unclosed_fence_protects_the_rest_of_the_document():
    text = "$a,b$\n```\n$c,d$"
    assert rewrite(text, DOLLARS)[0] == "$a$, $b$\n```\n$c,d$"


def test_stage_counts_rewrites_and_records_provenance():
    stage = ConventionsStage()
    rec = stage(record(r"\textbf{Sum}: $x+y,t+v$ and $$z$$"))[0]
    assert rec.response == r"**Sum**: \(x+y\), \(t+v\) and \[z\]"
    assert rec.quality["conventions"] == {
        "changed": True,
        "counters": {"split_formulas": 1, "inline_delimiters": 1, "display_delimiters": 1, "bold": 1, "italic": 0},
    }
    assert rec.provenance[-1].stage == "clean:conventions"
    assert pickle.loads(pickle.dumps(stage)).cfg == stage.cfg


def test_other_formats_pass_through_unchanged():
    rec = ConventionsStage()(record(r"<p>$a,b$ \textbf{x}</p>", response_format="html"))[0]
    assert rec.response == r"<p>$a,b$ \textbf{x}</p>"
    assert rec.quality["conventions"]["skipped"] == "response_format html"
    text_rec = ConventionsStage()(record("$a,b$", response_format="text"))[0]
    assert text_rec.response == r"\(a\), \(b\)"


def test_bad_config_and_bad_input():
    with pytest.raises(ValueError, match="inline"):
        ConventionsStage(ConventionsConfig(inline="$$"))
    with pytest.raises(ValueError, match="display"):
        ConventionsStage(ConventionsConfig(display="\\("))
    with pytest.raises(RecordError) as info:
        ConventionsStage()(record("a\x00b"))
    assert info.value.reason == "nul_in_response"
    empty = ConventionsStage()(record(""))[0]
    assert empty.response == "" and empty.quality["conventions"]["changed"] is False


def test_ten_megabyte_response_is_rewritten():
    text = "Some words and a formula $x_{i,j}$ here. " * 250_000  # 10.25 MB
    out, counters = rewrite(text)
    assert counters["inline_delimiters"] == 250_000
    assert out.startswith(r"Some words and a formula \(x_{i,j}\) here.")


def test_a_rewritten_label_keeps_only_the_unit_tests_that_still_pass_on_it():
    """The math test of a comma-joined formula fails once the formula is split: it goes, counted; the
    rest stay. (Real KaTeX in Chromium judges the math test.)"""
    math = unit_test_to_json(MathTest(pdf="p.pdf", page=1, id="m", type="math", math="a=1, b=2"))
    present = unit_test_to_json(PresenceTest(pdf="p.pdf", page=1, id="t", type="present", text="be given"))
    rec = record(r"Let \(a=1, b=2\) be given.")
    rec.unit_tests = [math, present]
    assert [passing_tests([line], rec.response) == [line] for line in rec.unit_tests] == [True, True]
    out = ConventionsStage()(rec)[0]
    assert out.response == r"Let \(a=1\), \(b=2\) be given."
    assert out.unit_tests == [present] and out.quality["conventions"]["counters"]["tests_dropped"] == 1
    unchanged = record("Nothing to rewrite here.")
    unchanged.unit_tests = [math]  # a label the stage leaves alone keeps its tests unchecked
    assert ConventionsStage()(unchanged)[0].unit_tests == [math]


def test_math_tests_checked_after_a_rewrite_cache_their_renders_in_the_run(tmp_path, monkeypatch):
    """The labels are untrusted: their renders go to <output>/_katex, never the user's cache."""
    monkeypatch.setenv("PAGEMILL_CACHE", str(tmp_path / "home-cache"))
    math = unit_test_to_json(MathTest(pdf="p.pdf", page=1, id="m", type="math", math="c=3, d=4"))
    rec = record(r"Let \(c=3, d=4\) hold.")
    rec.unit_tests = [math]
    stage = ConventionsStage()
    stage.bind_output(str(tmp_path / "out"))
    assert stage(rec)[0].unit_tests == []
    assert list((tmp_path / "out" / "_katex").iterdir()) and not (tmp_path / "home-cache").exists()


def test_without_katex_a_rewritten_labels_math_tests_are_not_silently_dropped(monkeypatch):
    """Every math test fails when KaTeX is missing: the rewrite dropped them all as failing, with no letter."""
    from schemas import math_render

    def missing(*args, **kwargs):
        raise RuntimeError("KaTeX is not installed")

    monkeypatch.setattr(math_render, "katex_version", missing)
    rec = record(r"Let \(a=1, b=2\) be given.")
    rec.unit_tests = [unit_test_to_json(MathTest(pdf="p.pdf", page=1, id="m", type="math", math="a=1, b=2"))]
    with pytest.raises(RuntimeError, match="KaTeX is not installed"):
        ConventionsStage()(rec)
