"""Formula labels: the conventions stage's latex rewrites (rendering unchanged) and the KaTeX render check.

Both render with the project's KaTeX in Chromium (``schemas.math_render``), as the DAG does.
"""

from __future__ import annotations

import pytest

from pipelines.clean.conventions import ConventionsConfig, ConventionsStage, rewrite_formula
from pipelines.clean.registry import build_stage
from schemas.deadletter import Dropped, RecordError
from schemas.math_render import KatexRenderer
from tests.helpers import page_record


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    with KatexRenderer(tmp_path_factory.mktemp("katex")) as r:
        yield r


LABELS = [
    ("\\frac { a } { b } + \\sqrt { x _ { 1 } }", "\\frac{a}{b}+\\sqrt{x_{1}}", 0, 1),
    ("$\\alpha b$", "\\alpha b", 1, 0),  # the space ends \alpha: kept
    ("\\[ \\mathrm { d } x \\]", "\\mathrm{d}x", 1, 1),
    ("\\text { if } x > 0", "\\text{ if }x>0", 0, 1),  # text mode keeps its spaces
    ("\\begin{equation*} a = b \\end{equation*}", "a=b", 1, 1),
    ("E=mc^2", "E=mc^2", 0, 0),
]


@pytest.mark.parametrize("label, expected, delimiters, spacing", LABELS)
def test_formula_rewrite_keeps_the_rendering(label, expected, delimiters, spacing, renderer):
    out, counters = rewrite_formula(label)
    assert out == expected
    assert counters == {"formula_delimiters": delimiters, "formula_spacing": spacing}
    bare = label.strip().removeprefix("$").removesuffix("$").removeprefix("\\[").removesuffix("\\]")
    bare = bare.replace("\\begin{equation*}", "").replace("\\end{equation*}", "")
    before, after = renderer.render_many([bare, out])
    assert before.ok and after.ok and before.mathml == after.mathml


def test_conventions_stage_rewrites_latex_records_only():
    stage = ConventionsStage()
    formula = stage(page_record(task="transcribe_formula", response="x ^ { 2 }", response_format="latex"))[0]
    assert formula.response == "x^{2}"
    assert formula.quality["conventions"]["counters"] == {"formula_delimiters": 0, "formula_spacing": 1}
    off = ConventionsStage(ConventionsConfig(formulas=False))
    kept = off(page_record(task="transcribe_formula", response="x ^ { 2 }", response_format="latex"))[0]
    assert kept.response == "x ^ { 2 }" and "skipped" in kept.quality["conventions"]


def test_formula_render_drops_what_katex_rejects(monkeypatch, tmp_path):
    monkeypatch.setenv("PAGEMILL_CACHE", str(tmp_path))
    stage = build_stage({"name": "formula_render"})
    good = stage(page_record(task="transcribe_formula", response="\\frac{a}{b}", response_format="latex"))[0]
    assert good.quality["formula_render"] == {"ok": True} and good.provenance[-1].stage == "clean:formula_render"
    bad = page_record(task="transcribe_formula", response="\\notakatexmacro{x}", response_format="latex")
    with pytest.raises(Dropped) as err:
        stage(bad)
    assert err.value.reason == "katex_error" and "notakatexmacro" in bad.quality["formula_render"]["error"]
    page = page_record(response="\\notakatexmacro is fine in a page")  # other tasks pass untouched
    assert stage(page) == [page] and "formula_render" not in page.quality
    with pytest.raises(RecordError, match="latex"):
        stage(page_record(task="transcribe_formula", response="x", response_format="markdown"))


def test_formula_render_drops_with_the_renderers_reason(monkeypatch, tmp_path):
    """One path: a label the renderer refuses is dropped with its reason (an untrusted \\href: katex_error;
    past the deadline: katex_timeout; a huge rendering: formula_too_large)."""
    from schemas.math_render import RenderedFormula

    monkeypatch.setenv("PAGEMILL_CACHE", str(tmp_path))
    stage = build_stage({"name": "formula_render"})
    href = page_record(task="transcribe_formula", response="\\href{http://127.0.0.1:9/}{x}", response_format="latex")
    with pytest.raises(Dropped) as err:
        stage(href)
    assert err.value.reason == "katex_error" and "href" in href.quality["formula_render"]["error"]

    class Fake:
        def __init__(self, reason):
            self.reason = reason

        def render(self, latex):
            return RenderedFormula(latex=latex, error="x", reason=self.reason)

    for reason in ("katex_timeout", "formula_too_large"):
        stage._renderer = Fake(reason)
        with pytest.raises(Dropped) as err:
            stage(page_record(task="transcribe_formula", response="x", response_format="latex"))
        assert err.value.reason == reason



def test_a_misspelt_task_is_refused_at_start_up_naming_the_known_ones():
    """A typo in `tasks` used to switch the render check off: no record of that task exists."""
    from pipelines.clean.formula_render import FormulaRenderConfig
    from pipelines.clean.registry import stage_config
    from schemas.config import ConfigError

    with pytest.raises(ConfigError, match=r"^clean\.stages\[1\]: unknown tasks \['transcribe_formul'\]; known: "
                                          r"parse_page, transcribe_table, transcribe_formula, "):
        stage_config({"name": "formula_render", "tasks": ["transcribe_formul"]}, "clean.stages[1]")
    assert FormulaRenderConfig(tasks=("transcribe_formula", "caption")).tasks == ("transcribe_formula", "caption")


def test_the_dags_formula_render_cache_lives_under_the_run_output(monkeypatch, tmp_path):
    """Every rendered (untrusted) label is cached: in a run, under <output>/_katex, never in ~/.cache."""
    from pipelines.clean.registry import build_stage as build
    from pipelines.config import CleanConfig
    from pipelines.corpus import Clean
    from schemas import math_render

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PAGEMILL_CACHE", raising=False)
    made: list = []

    class Recorder:
        def __init__(self, cache_dir=None, *, use_cache=True, **_):
            made.append((cache_dir, use_cache))
            self._closed = False

        def render(self, latex):
            return math_render.RenderedFormula(latex=latex, mathml="<math/>")

        def close(self):
            self._closed = True

    monkeypatch.setattr(math_render, "KatexRenderer", Recorder)
    out = tmp_path / "out"
    clean = Clean(CleanConfig(stages=[{"name": "formula_render"}]), str(out))
    stage = dict(clean.stages)["formula_render"]
    kept = stage(page_record(task="transcribe_formula", response="\\frac{a}{b}", response_format="latex"))
    assert kept and made and made[-1][0] == f"{out}/_katex" and made[-1][1] is True
    assert not home.exists()
    store = build({"name": "formula_render"})
    store.bind_output("gs://bucket/run")  # SQLite cannot live in an object store: no cache at all
    store(page_record(task="transcribe_formula", response="x", response_format="latex"))
    assert made[-1] == (None, False) and not home.exists()
