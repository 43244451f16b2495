"""The HTML renderer of JinaOCRSynth against real Chromium and KaTeX (both required:
``scripts/install_browser_assets.sh`` installs them)."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from schemas.browser import new_offline_page, shared_browser
from schemas.deadletter import RecordError
from schemas.page import PAGE_SCHEMA, PageRecord, validate
from synth.blocks import (
    Formula,
    Furniture,
    Heading,
    ListBlock,
    PageSpec,
    Paragraph,
    PlacedBlock,
    Table,
    TableCell,
)
from synth.pages import SynthPage, to_page_record
from synth.render_html import HtmlRenderer, katex_dist, render_html

REPO = Path(__file__).resolve().parents[2]


def _spec(blocks: list, *, layout: str = "report", columns: int = 1, size: tuple[int, int] = (640, 820),
          id: str = "t-page") -> PageSpec:
    return PageSpec(
        id=id, layout=layout, suite="layout", columns=columns, width_px=size[0], height_px=size[1],
        furniture=Furniture(header="Test Report 2024", footer="Internal", page_number="3"),
        blocks=tuple(PlacedBlock(b, c) for b, c in blocks),
    )


SMALL = _spec([
    (Heading("Results", 1), 0),
    (Paragraph("We measured **three** sites; the error is \\(\\hat{x} - x\\)."), 0),
    (Formula(r"\int_0^1 f(x)\,\mathrm{d}x = \frac{1}{2}"), 0),
    (Table(((TableCell("Site", header=True), TableCell("Value", header=True)),
            (TableCell("North"), TableCell("12.5")))), 0),
])


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory):
    with HtmlRenderer(tmp_path_factory.mktemp("synth")) as r:
        yield r


def test_renders_png_of_spec_size(renderer: HtmlRenderer) -> None:
    page = renderer.render(SMALL)
    assert page.png.startswith(b"\x89PNG")
    img = Image.open(io.BytesIO(page.png))
    assert img.size == (640, 820)
    assert len(set(img.convert("L").getdata())) > 2  # not blank


def test_two_column_paper_renders(renderer: HtmlRenderer) -> None:
    spec = _spec([(Heading("Left", 2), 0), (Paragraph("Column one text."), 0),
                  (Heading("Right", 2), 1), (Paragraph("Column two text."), 1)], layout="paper", columns=2)
    assert Image.open(io.BytesIO(renderer.render(spec).png)).size == (640, 820)


def test_overflow_is_rejected(renderer: HtmlRenderer) -> None:
    long = "The committee reviewed the proposal and approved funding for the next phase. " * 12
    spec = _spec([(Paragraph(long), 0) for _ in range(12)], id="t-overflow")
    with pytest.raises(RecordError) as err:
        renderer.render(spec)
    assert err.value.reason == "synth_overflow"
    renderer.render(SMALL)  # the reused page still works afterwards


def test_wide_formula_is_rejected(renderer: HtmlRenderer) -> None:
    wide = " + ".join(f"x_{{{i}}}^{{{i}}}" for i in range(60))
    with pytest.raises(RecordError) as err:
        renderer.render(_spec([(Formula(wide), 0)], id="t-wide"))
    assert err.value.reason == "synth_overflow"


def test_katex_error_is_rejected(renderer: HtmlRenderer) -> None:
    with pytest.raises(RecordError) as err:
        renderer.render(_spec([(Formula(r"\frac{1}{"), 0)], id="t-bad"))
    assert err.value.reason == "synth_katex_error"


def test_text_is_escaped_and_network_blocked(renderer: HtmlRenderer) -> None:
    spec = _spec([(Paragraph('<img src="http://example.com/x.png"> & <script>alert(1)</script>'), 0)])
    html = render_html(spec)
    assert "&lt;img" in html and "<img src=\"http" not in html and "&lt;script&gt;" in html
    renderer.render(spec)
    page = renderer._page  # the reused offline page the renderer just used
    assert page is not None
    for url in ("http://example.com/", "https://example.com/a.js", "http://127.0.0.1:1/"):
        outcome = page.evaluate("(u) => fetch(u).then(() => 'loaded', () => 'blocked')", url)
        assert outcome == "blocked", url
    outside = Path("/etc/hostname").as_uri()
    assert page.evaluate("(u) => fetch(u).then(() => 'loaded', () => 'blocked')", outside) == "blocked"


def test_html_and_png_are_deterministic(renderer: HtmlRenderer) -> None:
    assert render_html(SMALL) == render_html(SMALL)
    assert renderer.render(SMALL).png == renderer.render(SMALL).png


def test_page_record_is_valid(renderer: HtmlRenderer) -> None:
    page = renderer.render(SMALL)
    synth = SynthPage(SMALL.id, page.png, page.html, "# Results\n", [], {}, page.width, page.height)
    record = to_page_record(synth, SMALL)
    assert validate(record) == []
    assert record.source == "jinaocrsynth" and record.domain == "synthetic-layout"
    assert record.provenance[0].stage == "synth:html"


def test_cli_refuses_a_page_count_below_one(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "synth", "--pages", "0", "--out", str(tmp_path / "run")],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--pages must be at least 1, got 0" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_cli_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "synth", "--pages", "3", "--seed", "5", "--out", str(out)],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    kept = summary["kept"]
    assert kept + sum(summary["rejected"].values()) == 3 and kept >= 1
    pngs = sorted((out / "pages").glob("*.png"))
    assert len(pngs) == kept == len(list((out / "html").glob("*.html"))) == len(list((out / "reference").glob("*.md")))
    table = pq.read_table(out / "records")
    assert table.schema.equals(PAGE_SCHEMA, check_metadata=False) and table.num_rows == kept
    for row in table.to_pylist():
        assert validate(PageRecord.from_row(row)) == []
    for jsonl in (out / "bench_data").glob("*.jsonl"):
        for line in jsonl.read_text().splitlines():
            assert json.loads(line)["pdf"].endswith(".pdf")


def test_no_state_leaks_between_pages(renderer: HtmlRenderer, tmp_path: Path) -> None:
    """Pages rendered in sequence by one reused renderer equal each page from a fresh renderer."""
    other = _spec([(Heading("Zweite Seite", 2), 0), (Paragraph("Links \\(a^2 + b^2\\)."), 0),
                   (Heading("Rechts", 2), 1), (Formula(r"\sum_{k=1}^{n} k = \frac{n(n+1)}{2}"), 1)],
                  layout="newspaper", columns=2, size=(700, 760), id="t-other")
    other = dataclasses.replace(other, language="de")
    in_sequence = [renderer.render(spec).png for spec in (SMALL, other, SMALL, other)]
    fresh = []
    for spec in (SMALL, other):
        with HtmlRenderer(tmp_path) as r:
            fresh.append(r.render(spec).png)
    assert in_sequence == fresh + fresh
    assert fresh[0] != fresh[1]


def test_saved_html_is_a_standalone_document(renderer: HtmlRenderer, tmp_path: Path) -> None:
    """The returned HTML, loaded on its own, typesets, passes its checks and looks like the PNG."""
    rendered = renderer.render(SMALL)
    html = rendered.html
    assert html == render_html(SMALL, katex_dist().as_uri())
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    path = tmp_path / "page.html"
    path.write_text(html, encoding="utf-8")
    page = new_offline_page(shared_browser(), [katex_dist(), tmp_path], viewport=(SMALL.width_px, SMALL.height_px))
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("window.pmReport !== null", timeout=15_000)
        report = page.evaluate("window.pmReport")
        assert report["errors"] == [] and report["nproblems"] == 0, report
        shot = page.screenshot(clip={"x": 0, "y": 0, "width": SMALL.width_px, "height": SMALL.height_px}, type="png")
    finally:
        page.context.close()
    standalone = Image.open(io.BytesIO(shot)).convert("RGB")
    assert standalone.tobytes() == Image.open(io.BytesIO(rendered.png)).convert("RGB").tobytes()


# -- geometry: element boxes, classes and reading order from the DOM (synth/geometry.py) -----------

def _ink(png: bytes, box: tuple[float, float, float, float]) -> int:
    """Dark-ish pixels (far from the box's own median) inside ``box``."""
    import numpy as np

    grey = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.int16)
    x0, y0, x1, y1 = (int(v) for v in box)
    patch = grey[max(0, y0):y1 + 1, max(0, x0):x1 + 1]
    return int((np.abs(patch - np.median(patch)) > 60).sum()) if patch.size else 0


@pytest.mark.parametrize("layout,suite", [("invoice", "table"), ("form", "layout"), ("paper", "formula")])
def test_elements_follow_the_reference_order_with_boxes_on_ink(renderer: HtmlRenderer, layout: str, suite: str) -> None:
    from schemas.layout import ELEMENT_CLASSES, validate_elements
    from synth.fields import page_fields
    from synth.pages import page_spec, synthesize_page

    spec = page_spec(layout, suite, 11, f"geo-{layout}")
    page = synthesize_page(spec, renderer)
    record = to_page_record(page, spec)
    assert validate(record) == [] and validate_elements(page.elements, page.width, page.height) == []
    classes = {e.cls for e in page.elements}
    assert {"title", "text"} <= classes and classes <= set(ELEMENT_CLASSES)
    assert {"table": "table", "formula": "formula"}.get(suite, "text") in classes
    pos = 0  # body elements appear in the reference in the same order (furniture and pictures are not in it)
    for el in page.elements:
        if el.cls in ("page_header", "page_footer", "picture"):
            continue
        at = page.reference.find(el.text.strip(), pos)
        assert at >= 0, (el.cls, el.text[:60], page.reference[pos:pos + 200])
        pos = at
        if el.cls != "picture":
            assert _ink(page.png, el.box) > 0, (el.cls, el.box)  # the box is where the text is drawn
    assert any(e.cls.startswith("page_") for e in page.elements)  # furniture is laid out too
    fields = page_fields(page.spec)
    if layout in ("invoice", "form"):
        assert fields and all(v in page.reference.replace("**", "") for v in fields.values())
        assert record.metadata["fields"] == fields
    else:
        assert not fields


@pytest.mark.parametrize("layout", ["form", "invoice", "report", "infographic", "newspaper"])
def test_the_tests_texts_are_drawn_as_written(renderer: HtmlRenderer, layout: str) -> None:
    """What a page's tests quote is on the page with the same case (the drawn text, CSS applied): a heading
    drawn in capitals by ``text-transform`` failed its case-sensitive ``format`` test on a faithful
    transcription, and furniture drawn in capitals passed its ``absent`` test when copied."""
    from synth.pages import page_spec, synthesize_page

    page = synthesize_page(page_spec(layout, "layout", 0, f"case-{layout}"), renderer)
    drawn = " ".join(renderer._page.evaluate("document.querySelector('#page').innerText").split())
    quoted = [(t.type, t.text) for t in page.tests if t.type in ("present", "absent", "format")]
    assert {kind for kind, _ in quoted} >= {"absent", "format"}
    for kind, text in quoted:
        assert " ".join(text.split()) in drawn, (kind, text)


def test_close_from_another_thread_removes_the_folder(tmp_path: Path) -> None:
    """A runner may tear a DoFn down from another thread than the one that rendered: ``close`` then
    removes the renderer's folder and raises nothing (Playwright's pages cannot be reached from there)."""
    import threading

    r = HtmlRenderer(tmp_path)
    assert r.render(SMALL).png.startswith(b"\x89PNG")
    folder = r.page_dir
    errors: list[BaseException] = []

    def close() -> None:
        try:
            r.close()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    thread = threading.Thread(target=close)
    thread.start()
    thread.join()
    assert errors == []
    assert not folder.exists()
    r.close()  # and again from its own thread: nothing left to do, nothing raised


_UNCLIPPED = "#page, main, .col, .math-display { overflow: visible !important; }"


def _clipped_ink(renderer: HtmlRenderer) -> int:
    """Pixels of the last rendered page that change when nothing clips (ink overflow: hidden cut off)."""
    page = renderer._page
    assert page is not None
    before = page.screenshot()
    tag = page.add_style_tag(content=_UNCLIPPED)
    after = page.screenshot()
    tag.evaluate("(el) => el.remove()")
    a, b = (Image.open(io.BytesIO(x)).convert("L") for x in (before, after))
    return sum(abs(p - q) > 40 for p, q in zip(a.getdata(), b.getdata()))


ACCENTS = [r"\dot{e}(t) = -6\,\bar{e}(t) + \ddot{t}(t)", r"\mathbf{R}^{\top} \boldsymbol{x} = \boldsymbol{\rho}",
           r"\tilde{g}_{8} = \widetilde{gv} + \tilde{\rho}",
           r"\Pr_{\mathcal{D}}\left[ \boldsymbol{w} \in \mathbb{Z} \right]",
           r"\mathscr{A} \subseteq \mathscr{B} \times \mathbb{R}", r"\lim_{q \to 0} \frac{\cos(5q)}{q} = L"]


@pytest.mark.parametrize("layout", ["report", "paper", "slides"])
def test_display_formulas_keep_all_their_ink(renderer: HtmlRenderer, layout: str) -> None:
    """Accents, \\top and big delimiters reach past KaTeX's boxes; .math-display clipped them (overflow: hidden)."""
    size = (1280, 720) if layout == "slides" else (640, 820)
    spec = _spec([(Paragraph("Some text above the formulas."), 0)] + [(Formula(f), 0) for f in ACCENTS],
                 layout=layout, size=size, id=f"t-ink-{layout}")
    renderer.render(spec)
    assert _clipped_ink(renderer) == 0


def _standalone_report(html: str, tmp_path: Path, size: tuple[int, int] = (640, 820)) -> dict:
    path = tmp_path / "page.html"
    path.write_text(html, encoding="utf-8")
    page = new_offline_page(shared_browser(), [katex_dist(), tmp_path], viewport=size)
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("() => window.pmReport !== null", timeout=30_000)
        return page.evaluate("() => window.pmReport")
    finally:
        page.context.close()


def test_the_check_sees_formula_ink_and_list_markers_outside_their_boxes(tmp_path: Path) -> None:
    """CHECK_JS measures glyph ink (not only KaTeX's boxes) and list markers (not only the items)."""
    spec = _spec([(Formula(f), 0) for f in ACCENTS] + [(ListBlock(("First point", "Second point")), 0)],
                 id="t-check")
    html = render_html(spec)
    assert _standalone_report(html, tmp_path)["nproblems"] == 0
    tight = html.replace("</style>", ".math-display { padding: 0 !important; height: 0.5em; }\n"
                                     "ul { padding-left: 0 !important; }\n</style>", 1)
    problems = " ".join(_standalone_report(tight, tmp_path)["problems"])
    assert "formula ink outside its block" in problems and "list markers outside the list" in problems


@pytest.mark.parametrize("ordered", [True, False])
def test_infographic_list_markers_are_drawn(renderer: HtmlRenderer, ordered: bool) -> None:
    """The infographic's card padding (.col > *) replaced the list's: its numbers and bullets fell outside
    the column and were clipped."""
    items = ("Collect the samples", "Label every jar", "Ship them by Friday")
    spec = _spec([(Heading("Steps", 2), 0), (ListBlock(items, ordered=ordered), 0)], layout="infographic",
                 id=f"t-markers-{ordered}")
    renderer.render(spec)
    assert _clipped_ink(renderer) == 0
