"""Chinese pages (CJK font, zh content, tests that allow CJK) and chart figures (SVG in HTML, PNG in LaTeX)."""

from __future__ import annotations

import io
import subprocess

import pytest
from PIL import Image

from synth.blocks import Figure
from synth.charts import CHART_KINDS, chart_png, chart_svg, make_chart
from synth.content import make_page_spec
from synth.reference import reference_markdown
from synth.render_html import render_html
from synth.tests_from_blocks import unit_tests_for_page


def _figures(spec):
    return [p.block for p in spec.blocks if isinstance(p.block, Figure)]


def test_zh_spec_is_chinese_and_deterministic():
    a = make_page_spec("report", "layout", 3, language="zh")
    assert a == make_page_spec("report", "layout", 3, language="zh")
    assert a.language == "zh"
    md = reference_markdown(a)
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in md) > 100
    with pytest.raises(ValueError):
        make_page_spec("report", "layout", 3, language="fr")


@pytest.mark.parametrize("layout", ["report", "newspaper", "paper", "invoice", "form", "slides", "blog", "infographic"])
def test_zh_tests_pass_on_reference_and_baseline_allows_cjk(layout):
    spec = make_page_spec(layout, "layout", 7, language="zh")
    md = reference_markdown(spec)
    kept, _ = unit_tests_for_page(spec, md, "x.pdf")
    for t in kept:
        assert t.check(md)[0], t
    (baseline,) = [t for t in kept if t.type == "baseline"]
    assert baseline.check_disallowed_characters is False
    present = [t.text for t in kept if t.type == "present"]
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in p) and " " not in p for p in present)


def test_chart_png_is_deterministic_and_text_free_size():
    for kind in ("bar", "line", "pie"):
        a, b = chart_png(make_chart("seed-1", kind)), chart_png(make_chart("seed-1", kind))
        assert a == b and a.startswith(b"\x89PNG")
        image = Image.open(io.BytesIO(a)).convert("RGB")
        assert image.size == (600, 300)
        assert len(set(image.resize((60, 30)).getdata())) > 3  # drawn, not a blank box
    assert chart_png(make_chart("seed-1", "bar")) != chart_png(make_chart("seed-2", "bar"))


def test_chart_svg_is_text_free_and_follows_the_seed():
    kinds = {make_chart(f"s{i}").kind for i in range(60)}
    assert kinds == set(CHART_KINDS)  # every kind is drawn from seeds
    for kind in CHART_KINDS:
        chart = make_chart("seed-1", kind)
        svg = chart_svg(chart)
        assert svg == chart_svg(make_chart("seed-1", kind)) and svg.startswith("<svg")
        assert "<text" not in svg and "<image" not in svg
        assert any(color in svg for color in chart.colors)
        assert svg != chart_svg(make_chart("seed-2", kind))


def test_chart_figures_carry_a_chart_drawn_as_inline_svg():
    spec = next(s for seed in range(40) for s in [make_page_spec("report", "layout", seed)]
                if any(f.kind == "chart" for f in _figures(s)))
    fig = next(f for f in _figures(spec) if f.kind == "chart")
    assert fig.chart is not None and fig.image_png is None and fig.chart.kind in CHART_KINDS
    again = make_page_spec(spec.layout, spec.suite, spec.seed)
    assert next(f for f in _figures(again) if f.kind == "chart").chart == fig.chart
    assert chart_svg(fig.chart) in render_html(spec)


def test_cjk_font_installed():
    out = subprocess.run(["fc-list", ":lang=zh-cn", "family"], capture_output=True, text=True).stdout
    assert "WenQuanYi Micro Hei" in out, "install fonts-wqy-microhei"


_GLYPHS_JS = """() => {
  const el = document.querySelector('h1');
  const font = getComputedStyle(el).fontFamily;
  const draw = (ch) => {
    const c = document.createElement('canvas'); c.width = 40; c.height = 40;
    const g = c.getContext('2d'); g.font = '32px ' + font; g.fillText(ch, 2, 32);
    return c.toDataURL();
  };
  const c = document.createElement('canvas').getContext('2d'); c.font = '32px ' + font;
  return {font, same: draw('中') === draw('文'), blank: draw('中') === draw(' '), width: c.measureText('中文').width,
          fontOk: document.fonts.check('16px "WenQuanYi Micro Hei"', '中文')};
}"""


def test_zh_page_renders_without_tofu(tmp_path):
    from synth.render_html import HtmlRenderer

    spec = make_page_spec("report", "layout", 3, language="zh")
    with HtmlRenderer(tmp_path) as renderer:
        page = renderer.render(spec)
        info = renderer._page.evaluate(_GLYPHS_JS)
    assert "WenQuanYi Micro Hei" in info["font"]
    assert info["fontOk"] and info["width"] > 40
    assert not info["same"] and not info["blank"]  # distinct glyphs, not identical tofu boxes
    assert Image.open(io.BytesIO(page.png)).size == (spec.width_px, spec.height_px)


def test_latex_pages_include_the_chart_as_a_png_of_the_same_shapes():
    from dataclasses import replace

    from synth.blocks import PlacedBlock
    from synth.content import without_optional
    from synth.render_latex import render_latex

    spec = next(s for seed in range(40) for s in [make_page_spec("report", "layout", seed)]
                if any(f.kind == "chart" for f in _figures(s)))
    fig = next(f for f in _figures(spec) if f.kind == "chart")
    required = without_optional(spec)
    spec = replace(required, blocks=(*required.blocks, PlacedBlock(fig, required.blocks[-1].column)))
    tex, images = render_latex(spec)
    assert list(images.values()) == [chart_png(fig.chart)] and "\\includegraphics" in tex
