"""KaTeX math checks (`schemas.math_render`) and the offline browser (`schemas.browser`), in real Chromium.

These tests need Debian's Chromium and the KaTeX npm package; when either is missing they run
`scripts/install_browser_assets.sh` once and fail with its output if that does not help.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "scripts" / "install_browser_assets.sh"
OLMOCR_BENCH = REPO / "tests" / "data" / "olmocr_bench"


def _assets_present() -> bool:
    from schemas.browser import chromium_path
    from schemas.math_render import KATEX_DIR

    return os.access(chromium_path(), os.X_OK) and (KATEX_DIR / "dist" / "katex.min.js").is_file()


@pytest.fixture(scope="module", autouse=True)
def browser_assets() -> None:
    if _assets_present():
        return
    proc = subprocess.run(["bash", str(INSTALL)], check=False, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not _assets_present():
        pytest.fail(
            f"Chromium or KaTeX missing and {INSTALL.relative_to(REPO)} did not install them "
            f"(exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory, browser_assets: None) -> Iterator[object]:
    from schemas.math_render import KatexRenderer

    r = KatexRenderer(tmp_path_factory.mktemp("katex-cache"))
    yield r
    r.close()


def test_spacing_only_difference_passes_without_rendering(renderer) -> None:
    from schemas.math_render import formulas_match, normalize_latex

    before = renderer.render_count
    ok, why = formulas_match("\\frac{ a }{b}  +\n c", r"\frac{a}{b}+c", renderer)
    assert ok and "whitespace" in why
    assert renderer.render_count == before
    # A space that ends a control word, or one in text mode, is not dropped.
    assert normalize_latex(r"\alpha b") != normalize_latex(r"\alphab")
    assert normalize_latex(r"\text{a b}") != normalize_latex(r"\text{ab}")


def test_whitespace_that_changes_the_formula_takes_no_shortcut(renderer) -> None:
    """A newline ending a % comment, a space in \\tag's text, and the space that keeps `\\\\ [b]` a row break
    (not a size argument) all matter to KaTeX: such pairs are compared rendered, and differ."""
    from schemas.math_render import formulas_match, normalize_latex

    for reference, candidate in (("a %c\nb", "a %c b"), (r"x = 1 \tag{a b}", r"x = 1 \tag{ab}"),
                                 (r"\begin{matrix} a \\ [b] \end{matrix}", r"\begin{matrix} a \\[b] \end{matrix}")):
        ok, why = formulas_match(reference, candidate, renderer)
        assert "whitespace" not in why, (reference, candidate)
    assert not formulas_match("a %c\nb", "a %c b", renderer)[0]  # the candidate comments b out
    assert not formulas_match(r"\begin{matrix} a \\ [b] \end{matrix}", r"\begin{matrix} a \\[b] \end{matrix}",
                              renderer)[0]  # [b] as a size does not parse
    assert normalize_latex(r"50\% + x") == normalize_latex(r"50 \% +x")  # an escaped % is no comment


def test_braced_superscript_renders_identically(renderer) -> None:
    from schemas.math_render import formulas_match

    a, b = renderer.render_many(["x^2", "x^{2}"])
    assert a.mathml == b.mathml and a.glyphs == b.glyphs
    assert formulas_match("x^2", "x^{2}", renderer)[0]


def test_frac_and_dfrac_render_alike_in_display_mode(renderer) -> None:
    """In display mode `\\frac` is already display style: KaTeX lays both out glyph for glyph alike.

    `\\dfrac` adds an `<mstyle displaystyle>` wrapper to the MathML, so `\\frac` as reference passes
    by MathML containment and `\\dfrac` as reference passes by the glyph layout rule.
    """
    from schemas.math_render import formulas_match

    frac, dfrac = renderer.render_many([r"\frac{a}{b}", r"\dfrac{a}{b}"])
    assert frac.glyphs == dfrac.glyphs
    assert frac.mathml != dfrac.mathml
    ok, why = formulas_match(r"\frac{a}{b}", r"\dfrac{a}{b}", renderer)
    assert ok and "MathML" in why
    ok, why = formulas_match(r"\dfrac{a}{b}", r"\frac{a}{b}", renderer)
    assert ok and "glyphs map" in why
    # Text-style fractions are laid out smaller: not the same formula.
    assert not formulas_match(r"\dfrac{a}{b}", r"\tfrac{a}{b}", renderer)[0]


def test_formula_embedded_in_larger_one_passes(renderer) -> None:
    from schemas.math_render import formulas_match

    assert formulas_match("a+b", "c = a+b", renderer)[0]
    # MathML differs (`\dfrac` wrapper), so this one is found by the layout mapping alone.
    ok, why = formulas_match(r"\dfrac{a}{b}", r"c + \frac{a}{b}", renderer)
    assert ok and "glyphs map" in why
    assert not formulas_match("c = a+b", "a+b", renderer)[0]


def test_different_formulas_fail(renderer) -> None:
    from schemas.math_render import formulas_match

    ok, why = formulas_match("x^2", "x_2", renderer)
    assert not ok and "do not map" in why
    assert not formulas_match("x_2", "x^2", renderer)[0]
    assert not formulas_match(r"\frac{a+b}{c}", r"\frac{c}{a+b}", renderer)[0]
    assert not formulas_match("x", r"\mathbf{x}", renderer)[0]
    assert not formulas_match(r"\frac{n(n+1)}{2}", r"\frac{n(n-1)}{2}", renderer)[0]


def test_typeface_is_ignored_but_size_and_bold_are_not(renderer) -> None:
    """olmOCR-Bench compares characters only; we ignore the face (calligraphic, upright, blackboard)
    but keep size and bold."""
    from schemas.math_render import formulas_match

    same = [(r"\mathcal{I}_{i}", "I_i"), ("I_i", r"\mathcal{I}_i"), (r"\mathrm{d}x", "dx"), (r"\mathbb{R}", "R")]
    for ref, cand in same:
        ok, why = formulas_match(ref, cand, renderer)
        assert ok and "glyphs map" in why, (ref, cand, why)
    assert not formulas_match(r"\mathcal{I}_{i}", "I^i", renderer)[0]
    assert not formulas_match(r"\mathcal{I}_{i}", "J_i", renderer)[0]
    assert not formulas_match("v", r"\boldsymbol{v}", renderer)[0]
    assert not formulas_match(r"\mathbf{v}", r"\mathrm{v}", renderer)[0]


def test_olmocr_bench_sample_math_2503_04086_00(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """olmOCR-Bench's own check passes this sample test on the olmOCR pipeline's transcription
    (reference `\\mathcal{I}_{i}`, transcription `I_i`); so must ours. Data: tests/data/olmocr_bench/."""
    from schemas import math_render
    from schemas.unit_tests import load_tests

    monkeypatch.setenv("PAGEMILL_CACHE", str(tmp_path))
    monkeypatch.setattr(math_render, "_local", threading.local())
    [test] = load_tests(OLMOCR_BENCH / "math_2503_04086_00.jsonl")
    markdown = (OLMOCR_BENCH / "math_2503_04086_pg1_repeat1.md").read_text(encoding="utf-8")
    assert r"\mathcal{I}_{i}" in test.math and r"\mathcal" not in markdown
    ok, why = test.check(markdown)
    assert ok and "glyphs map" in why, why
    # Not a pass by default: a superscript where the subscript was, or another letter, fails.
    for wrong in ("Rs = I^i", "Rs = J_i"):
        ok, why = test.check(markdown.replace("Rs = I_i", wrong))
        assert not ok and "no match" in why
    math_render.default_renderer().close()


def test_katex_rejected_formula_fails_with_explanation(renderer) -> None:
    from schemas.math_render import formulas_match

    ok, why = formulas_match(r"\frac{a", r"\frac{a}{b}", renderer)
    assert not ok
    assert why.startswith("reference formula does not render") and "KaTeX parse error" in why
    ok, why = formulas_match(r"\frac{a}{b}", r"\frac{a", renderer)
    assert not ok and "candidate formula does not render" in why and "ParseError" in why
    ok, why = formulas_match("x", r"\notacommand{x}", renderer)
    assert not ok and "Undefined control sequence" in why


def _nested(body: int, levels: str = "bcd") -> str:
    """A \\def nesting: \\a is `body` x's, each next macro ten (the last nine) of the one before."""
    tex, prev = r"\def\a{" + "x" * body + "}", "a"
    for i, name in enumerate(levels):
        tex += rf"\def\{name}{{" + f"\\{prev}" * (9 if i == 2 else 10) + "}"
        prev = name
    return tex + f"\\{prev}"


def test_commands_needing_trust_fail_instead_of_rendering_as_error_text(renderer) -> None:
    """KaTeX draws a refused \\href, \\url, \\includegraphics, \\htmlStyle, \\htmlData in its error colour
    instead of throwing: such a formula must not count as rendered."""
    for tex in (r"\href{http://127.0.0.1:9/h}{x}", r"\url{http://127.0.0.1:9/u}",
                r"\includegraphics[height=1em]{file:///etc/hostname}",
                r"\htmlStyle{background:url(http://127.0.0.1:9/s)}{x}", r"\htmlData{src=http://127.0.0.1:9/d}{x}",
                r"a + \htmlClass{c}{x}"):
        out = renderer.render(tex)
        assert not out.ok and out.reason == "katex_error" and "refused" in out.error, (tex, out)
    assert renderer.render(r"{\color{red} x}").ok  # colour as such is fine


def test_a_rendering_over_the_caps_is_formula_too_large(renderer) -> None:
    tex = _nested(100, "bc")  # 10,000 glyphs: refused before any glyph is measured
    out = renderer.render(tex)
    assert not out.ok and out.reason == "formula_too_large", out
    nested = _nested(20)
    out = renderer.render(nested)  # 1,000 expansions: over the lowered maxExpand
    assert not out.ok and out.reason == "katex_error" and "Too many expansions" in out.error


def test_a_formula_past_its_deadline_is_katex_timeout_and_the_page_is_replaced(tmp_path: Path,
                                                                                  browser_assets: None) -> None:
    """A short label whose expansion keeps KaTeX busy for minutes (no caps here, to reach the deadline) is
    abandoned after timeout_s; the next formula renders on a fresh page; a timeout is not cached."""
    from schemas.math_render import KatexRenderer

    slow = _nested(40)
    with KatexRenderer(tmp_path, timeout_s=1.5, max_nodes=10**9, max_glyphs=10**9, max_expand=10**6) as r:
        assert r.render("x").ok
        out = r.render(slow)  # minutes without the deadline, and then ok
        assert not out.ok and out.reason == "katex_timeout", out
        after = r.render(r"\frac{a}{b}")
        assert after.ok and after.glyphs
        assert r._lookup([slow]) == {}  # retried next time, not remembered as a failure
    with pytest.raises(ValueError):
        KatexRenderer(tmp_path, timeout_s=0)


def test_the_deadline_holds_each_formula_in_a_batch_as_alone(tmp_path: Path, browser_assets: None) -> None:
    """A formula that takes longer than the deadline fails alone and among 63 quick ones alike (the batch is
    not given the sum of their deadlines); the quick ones render."""
    from schemas.math_render import KatexRenderer

    slow = " + ".join(f"\\frac{{a_{{{i}}}}}{{b_{{{i}}}}}" for i in range(400))
    quick = [f"x_{{{i}}}" for i in range(63)]
    with KatexRenderer(tmp_path, use_cache=False, timeout_s=0.15) as r:
        assert r.render("y").ok  # the page and fonts are up before anything is timed
        assert r.render(slow).reason == "katex_timeout"
        first, *rest = r.render_many([slow, *quick])
        assert first.reason == "katex_timeout" and all(f.ok for f in rest)


def test_cache_survives_renderers_and_skips_the_browser(tmp_path: Path, browser_assets: None) -> None:
    from schemas.math_render import KatexRenderer, formulas_match

    pairs = [(r"\sqrt{y}+1", r"z=\sqrt{y}+1"), (r"\beta^3", r"\beta_3"), (r"\frac{q", "q")]
    with KatexRenderer(tmp_path) as first:
        expected = [formulas_match(a, b, first) for a, b in pairs]
        assert first.render_count == 6
        assert [formulas_match(a, b, first) for a, b in pairs] == expected
        assert first.render_count == 6
    with KatexRenderer(tmp_path) as second:
        assert [formulas_match(a, b, second) for a, b in pairs] == expected
        assert second.render_count == 0 and not second.page_open
    assert [ok for ok, _ in expected] == [True, False, False]


def test_default_renderer_uses_pagemill_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas import math_render

    monkeypatch.setenv("PAGEMILL_CACHE", str(tmp_path))
    monkeypatch.setattr(math_render, "_local", threading.local())
    ok, why = math_render.formulas_match("m^2", "m_2")
    assert not ok and "do not map" in why
    renderer = math_render.default_renderer()
    assert renderer is math_render.default_renderer()
    assert renderer.cache_dir == tmp_path / "katex" and (tmp_path / "katex" / "renders.sqlite3").is_file()
    renderer.close()


def test_glyph_mapping_rules_without_a_browser() -> None:
    from schemas.math_render import Glyph, map_glyphs

    def g(c: str, x: float, y: float, font: str = "KaTeX_Math|400|italic|29.0") -> Glyph:
        return Glyph(c, x, y, 10, 20, font)

    ref = [g("a", 0, 0), g("+", 15, 0), g("b", 30, 0)]
    shifted = [g("c", 100, 50), g("=", 115, 50), g("a", 130, 51), g("+", 145, 50), g("b", 162, 49)]
    assert map_glyphs(ref, shifted) == {0: 2, 1: 3, 2: 4}
    assert map_glyphs(ref, [g("b", 0, 0), g("+", 15, 0), g("a", 30, 0)]) is None
    # Beyond the 5px tolerance.
    assert map_glyphs(ref, [g("a", 0, 0), g("+", 15, 0), g("b", 37, 0)]) is None
    # Same character in another face is the same glyph; in bold or at another size it is not.
    assert map_glyphs([g("x", 0, 0)], [g("x", 0, 0, "KaTeX_Main|400|normal|29.0")]) == {0: 0}
    assert map_glyphs([g("x", 0, 0)], [g("x", 0, 0, "KaTeX_Main|700|normal|29.0")]) is None
    assert map_glyphs([g("x", 0, 0)], [g("x", 0, 0, "KaTeX_Math|bold|italic|29.0")]) is None
    assert map_glyphs([g("x", 0, 0)], [g("x", 0, 0, "KaTeX_Math|400|italic|20.3")]) is None
    # A font string not in family|weight|style|size form must match as a whole.
    assert map_glyphs([g("x", 0, 0, "F")], [g("x", 0, 0, "G")]) is None


# -- meaning changes drawn over the reference's glyphs (negations, accents, strokes) ---------------------


def test_negated_relations_fail_against_the_plain_relation(renderer) -> None:
    """KaTeX draws `\\neq`, `\\not\\subset`, `\\notin` as the relation plus an overlay glyph at the same place:
    every reference glyph still maps, so only the overlay left unmapped on a mapped glyph shows the negation.
    Pairs from synth pages (formula-form-s0-00004, blog-s1-00022) and the relations KaTeX negates so."""
    from schemas.math_render import formulas_match

    negated = [
        (r"\mathbf{w} \in \mathbb{R}^{3}", r"\mathbf{w} \notin \mathbb{R}^{3}"),
        (r"\dot{f}(t) = -5\,\tilde{f}(t) + \ddot{u}(t)", r"\dot{f}(t) \neq -5\,\tilde{f}(t) + \ddot{u}(t)"),
        (r"∑_{i=1}^{4} c_i ≥ α", r"∑_{i\neq 1}^{4} c_i ≥ α"),
        (r"A \subset B", r"A \not\subset B"),
        (r"a \equiv b", r"a \not\equiv b"),
        ("a = b", "a ≠ b"),
        ("a = b", r"a \not= b"),
        ("a < b", r"a \not< b"),
    ]
    for ref, cand in negated:
        ok, why = formulas_match(ref, cand, renderer)
        assert not ok and "lying on a mapped one" in why, (ref, cand, why)
    # Spellings of the same negation still match each other.
    for ref, cand in ((r"a \neq b", r"a \not= b"), (r"a \not= b", "a ≠ b"), (r"x \notin A", r"x ∉ A")):
        assert formulas_match(ref, cand, renderer)[0], (ref, cand)


def test_accents_added_by_the_candidate_fail(renderer) -> None:
    from schemas.math_render import formulas_match

    for ref, cand in ((r"O(x \log x)", r"O(\bar{x} \log x)"), ("x = 1", r"\hat{x} = 1"), ("x = 1", r"\tilde{x} = 1"),
                      ("f(t) = 1", r"\dot{f}(t) = 1"), ("x = 1", r"\vec{x} = 1"), ("AB = 1", r"\widehat{AB} = 1")):
        ok, why = formulas_match(ref, cand, renderer)
        assert not ok and "lying on a mapped one" in why, (ref, cand, why)
    assert formulas_match(r"O(\bar{x} \log x)", r"O(\bar{x} \log x) + 1", renderer)[0]


def test_rules_and_svg_strokes_are_marks_that_must_match(renderer) -> None:
    """Fraction bars, over/underlines, radicals and cancel strokes are no characters: they are extracted as
    marks, so a reference's bar must be in the candidate, and a candidate's radical or stroke over the
    reference's glyphs fails. Tall delimiters (SVG) are not marks."""
    from schemas.math_render import formulas_match

    kinds = {tex: tuple(m.char for m in renderer.render(tex).marks)
             for tex in (r"\frac{a}{b}", r"\sqrt{x}", r"\overline{x}", r"\underline{x}", r"\cancel{x}",
                         r"{a \atop b}", r"\left(\begin{matrix}a\\b\\c\\d\\e\end{matrix}\right)")}
    assert kinds == {r"\frac{a}{b}": ("frac-line",), r"\sqrt{x}": ("sqrt",), r"\overline{x}": ("overline",),
                     r"\underline{x}": ("underline",), r"\cancel{x}": ("cancel:100%",), r"{a \atop b}": (),
                     r"\left(\begin{matrix}a\\b\\c\\d\\e\end{matrix}\right)": ()}
    assert all(m.mark for m in renderer.render(r"\sqrt{x}").marks)
    for ref, cand in (("x + y = z", r"\sqrt{x + y} = z"), ("x + y = z", r"\overline{x + y} = z"),
                      ("x + y = z", r"\cancel{x} + y = z"), (r"\frac{a}{b} = c", r"{a \atop b} = c"),
                      ("x + y = z", r"\underline{x + y} = z"), (r"\sqrt{2}", r"\sqrt[3]{2}"),
                      ("x+y", r"\sqrt{x+y}"), ("x+y", r"\frac{x+y}{2}")):
        assert not formulas_match(ref, cand, renderer)[0], (ref, cand)
    # The MathML of `x+y` is inside the candidate's, but under a radical or a fraction: the glyph rule decides.
    ok, why = formulas_match("x+y", r"\sqrt{x+y}", renderer)
    assert "MathML differs" in why


def test_more_formula_beside_the_reference_and_respellings_still_pass(renderer) -> None:
    """Containment stays: strokes, negations and accents elsewhere in the candidate do not matter; the
    reference's own bars and radicals map onto the candidate's."""
    from schemas.math_render import formulas_match

    for ref, cand in ((r"\frac{a}{b} = c", r"\frac{a}{b} = c + \sqrt{d}"),
                      ("x + y = z", r"w \neq x + y = z \quad \sqrt{2}"),
                      ("x + y = z", r"\overline{w} + x + y = z"),
                      (r"\sqrt{x+y} = z", r"\sqrt{x+y} = z + \bar{u}"),
                      (r"\dfrac{a}{b} = c", r"\frac{a}{b} = c"),
                      (r"a \leq b", "a ≤ b"), (r"f \to g", r"f \rightarrow g"),
                      (r"\sum_{i=1}^{n} a_i", r"\sum_{i=1}^{n} a_i + b")):
        ok, why = formulas_match(ref, cand, renderer)
        assert ok, (ref, cand, why)
    ok, why = formulas_match(r"\dfrac{a}{b} = c", r"\frac{a}{b} = c", renderer)
    assert "glyphs map" in why and "1 mark" in why  # found by the layout rule, its bar included


def test_marks_survive_the_cache(tmp_path: Path, browser_assets: None) -> None:
    from schemas.math_render import KatexRenderer, RenderedFormula

    with KatexRenderer(tmp_path) as first:
        fresh = first.render(r"\sqrt{x} + \frac{a}{b}")
    with KatexRenderer(tmp_path) as second:
        cached = second.render(r"\sqrt{x} + \frac{a}{b}")
        assert second.render_count == 0
    assert cached == fresh and sorted(m.char for m in cached.marks) == ["frac-line", "sqrt"]
    assert RenderedFormula.from_dict("x", {"mathml": "", "glyphs": []}).marks == ()  # an entry without marks


def test_math_test_reads_nfd_pages_and_formulas_as_nfc(renderer, monkeypatch: pytest.MonkeyPatch) -> None:
    """KaTeX rejects the combining U+0338 of an NFD `≠`: a page (or a test formula) in NFD must still match."""
    import unicodedata

    from schemas import math_render
    from schemas.unit_tests import MathTest

    monkeypatch.setattr(math_render, "default_renderer", lambda: renderer)

    def nfd(s: str) -> str:
        return unicodedata.normalize("NFD", s)

    def math(formula: str) -> MathTest:
        return MathTest(pdf="p.pdf", page=1, id="m", type="math", math=formula, ignore_dollar_delimited=True)

    assert nfd("a ≠ b") != "a ≠ b"
    for ref, page in (("a ≠ b", nfd(r"Text \(a ≠ b\) more.")), (nfd("x ∉ A"), r"Text \(x ∉ A\) more."),
                      ("a ≠ b", nfd(r"Text \(a≠b\) more."))):
        ok, why = math(ref).check(page)
        assert ok, (ref, page, why)
    assert not math("a = b").check(nfd(r"Text \(a ≠ b\) more."))[0]


def test_overlay_rule_without_a_browser() -> None:
    """An unmapped candidate glyph on a mapped one (same centre, or boxes largely shared at no smaller size)
    fails the mapping; a mark over or under mapped glyphs does too; script-size limits and marks elsewhere
    do not."""
    from schemas.math_render import Glyph, map_glyphs, overlays

    def g(c: str, x: float, y: float, size: str = "29.0", w: float = 10, h: float = 20) -> Glyph:
        return Glyph(c, x, y, w, h, f"KaTeX_Main|400|normal|{size}")

    def mark(kind: str, x: float, y: float, w: float, h: float) -> Glyph:
        return Glyph(kind, x, y, w, h, "mark|400|normal|29.0", mark=True)

    ref = [g("a", 0, 0), g("=", 15, 0), g("b", 30, 0)]
    negated = [g("a", 0, 0), g("\ue020", 15, 0), g("=", 15, 0), g("b", 30, 0)]
    assert map_glyphs(ref, negated) is None
    assert map_glyphs(ref, negated, check_overlays=False) == {0: 0, 1: 2, 2: 3}
    assert overlays(negated)[2] == [1] and overlays(negated)[0] == []
    # The reference's own overlay maps: nothing is left over.
    assert map_glyphs(negated, negated) == {0: 0, 1: 1, 2: 2, 3: 3}
    # A second, plain copy of the formula elsewhere in the candidate is found past the negated one.
    assert map_glyphs(ref, negated + [g("a", 0, 50), g("=", 15, 50), g("b", 30, 50)]) == {0: 4, 1: 5, 2: 6}
    # A smaller glyph (a limit) sharing the box is no overlay; one of the same size is.
    assert map_glyphs(ref, [*ref, g("n", 16, 4, size="20.3", w=6)]) is not None
    assert map_glyphs(ref, [*ref, g("ˉ", 16, 4, w=8)]) is None
    # A radical over `a = b`, a bar just under it: fail; a radical beside it: fine.
    assert map_glyphs(ref, [*ref, mark("sqrt", -5, -2, 50, 24)]) is None
    assert map_glyphs(ref, [*ref, mark("frac-line", -2, 26, 44, 2)]) is None
    assert map_glyphs(ref, [*ref, mark("sqrt", 60, -2, 30, 24)]) is not None
    # A reference mark must find a candidate mark of its kind.
    bar_ref = [g("a", 0, -20), mark("frac-line", 0, 5, 10, 2), g("b", 0, 20)]
    assert map_glyphs(bar_ref, [g("a", 0, -20), g("b", 0, 20)]) is None
    assert map_glyphs(bar_ref, [g("a", 0, -20), mark("overline", 0, 5, 10, 2), g("b", 0, 20)]) is None
    assert map_glyphs(bar_ref, [g("a", 50, -20), mark("frac-line", 50, 5, 10, 2), g("b", 50, 20)]) == \
        {0: 0, 1: 1, 2: 2}


class _CountingServer(ThreadingHTTPServer):
    connections = 0

    def verify_request(self, request, client_address) -> bool:  # every TCP connection, even without a request
        type(self).connections += 1
        return True


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"leaked")

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


def test_offline_page_blocks_network_and_foreign_files(tmp_path: Path, browser_assets: None) -> None:
    from playwright.sync_api import Error as PlaywrightError

    from schemas.browser import new_offline_page, shared_browser

    server = _CountingServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}"
    try:
        site, outside = tmp_path / "site", tmp_path / "outside"
        site.mkdir()
        outside.mkdir()
        Image.new("RGB", (3, 2), "red").save(site / "ok.png")
        Image.new("RGB", (3, 2), "red").save(outside / "secret.png")
        (site / "link.png").symlink_to(outside / "secret.png")
        (site / "page.html").write_text(
            f"""<!DOCTYPE html><html><head>
<link rel="stylesheet" href="{url}/style.css"><script src="{url}/script.js"></script></head><body>
<img id="ok" src="ok.png"><img id="secret" src="{(outside / 'secret.png').as_uri()}"><img id="link" src="link.png">
<img src="{url}/img.png"><iframe src="{url}/frame"></iframe>
<script>
const settle = (p) => p.then(() => "open", () => "blocked");
window.attempts = Promise.all([
  settle(fetch("{url}/fetch")),
  settle(fetch("{url}/post", {{method: "POST", body: "x", mode: "no-cors"}})),
  new Promise((r) => {{ const x = new XMLHttpRequest(); x.open("GET", "{url}/xhr");
    x.onload = () => r("open"); x.onerror = () => r("blocked"); x.send(); }}),
  new Promise((r) => {{ const ws = new WebSocket("ws://127.0.0.1:{port}/ws");
    ws.onopen = () => r("open"); ws.onclose = () => r("blocked"); }}),
  new Promise((r) => {{ const es = new EventSource("{url}/events");
    es.onopen = () => r("open"); es.onerror = () => {{ es.close(); r("blocked"); }}; }}),
  Promise.resolve(navigator.sendBeacon("{url}/beacon", "x") ? "queued" : "blocked"),
]);
</script></body></html>""",
            encoding="utf-8",
        )
        page = new_offline_page(shared_browser(), [site])
        try:
            page.goto((site / "page.html").as_uri())
            results = page.evaluate("window.attempts")
            assert all(r in ("blocked", "queued") for r in results), results
            loaded = page.evaluate(
                "['ok', 'secret', 'link'].map((id) => document.getElementById(id).naturalWidth)"
            )
            assert loaded == [3, 0, 0]  # the symlink resolves outside the allowed folder
            with pytest.raises(PlaywrightError):
                page.goto(f"{url}/navigate")
            page.wait_for_timeout(300)  # give a beacon or a retry time to go out
        finally:
            page.context.close()
    finally:
        server.shutdown()
        server.server_close()
    assert _CountingServer.connections == 0
