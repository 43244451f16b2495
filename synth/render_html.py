"""HTML renderer for JinaOCRSynth pages: a ``PageSpec`` -> jinja2 HTML -> Chromium -> PNG.

One shared Chromium per process (``schemas.browser.shared_browser``) and one reused offline page
per renderer: each page's HTML is written to the renderer's own temp folder and loaded from there,
so the only requests the page may make are ``file://`` under that folder and KaTeX's ``dist``
(``schemas.browser.new_offline_page`` aborts everything else). The viewport is the spec's page
size; formulas are typeset in the page by ``katex.render`` (``throwOnError``); after fonts load,
a geometry check in the page reports every element outside the page box or its column and every
column that scrolls (content clipped by ``overflow: hidden``). Such pages raise
``RecordError("synth_overflow")``, KaTeX failures ``RecordError("synth_katex_error")``, and a page
that does not finish within the timeout ``RecordError("synth_timeout")``.

Images are encoded like the corpus (``pipelines.render``): PNG, zlib level 1, achromatic pages as
8-bit grey. Chromium's output for the same HTML, fonts and build is byte-stable in our checks.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from PIL import Image
from playwright.sync_api import Browser, Page
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from pipelines.render import RenderConfig, _encode
from schemas.browser import new_offline_page, shared_browser
from schemas.deadletter import RecordError
from schemas.math_render import INSTALL_HINT, KATEX_DIR
from synth.blocks import Figure, PageSpec, PlacedBlock

VERSION = "1"
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
LAYOUTS: tuple[str, ...] = ("report", "paper", "newspaper", "invoice", "form", "slides", "blog", "infographic")
DEFAULT_TIMEOUT_MS = 15_000

# Runs in the page after KaTeX has loaded: typeset, wait for fonts, then measure.
PAGE_SCRIPT = r"""
window.pmReport = null;
(async () => {
  const errors = [];
  for (const el of document.querySelectorAll("[data-tex]")) {
    try {
      katex.render(el.dataset.tex, el, {
        displayMode: el.classList.contains("math-display"), throwOnError: true, output: "html"});
    } catch (e) {
      errors.push(`${(e && e.name) || "Error"}: ${(e && e.message) || e} in ${el.dataset.tex}`);
    }
  }
  await document.fonts.ready;
  const tol = 1.5;
  const problems = [];
  const name = (el) => el.localName + (el.className && typeof el.className === "string" ? "." + el.className.split(" ")[0] : "")
    + ` "${(el.textContent || "").trim().slice(0, 40)}"`;
  const outside = (r, b) => r.left < b.left - tol || r.top < b.top - tol || r.right > b.right + tol || r.bottom > b.bottom + tol;
  const page = document.getElementById("page");
  const P = page.getBoundingClientRect();
  const root = document.documentElement;
  if (root.scrollWidth > Math.ceil(P.width) + 1 || root.scrollHeight > Math.ceil(P.height) + 1)
    problems.push(`document scrolls: ${root.scrollWidth}x${root.scrollHeight}`);
  if (page.scrollHeight > page.clientHeight + 1 || page.scrollWidth > page.clientWidth + 1)
    problems.push(`page content ${page.scrollWidth}x${page.scrollHeight} exceeds the page box`);
  // KaTeX's internal struts and vlists have boxes that do not bound ink; check its outer box only.
  const visible = (el) => !(el.closest(".katex") && !el.classList.contains("katex"));
  for (const el of page.querySelectorAll("*")) {
    if (!visible(el)) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (outside(r, P)) problems.push(`outside the page: ${name(el)}`);
  }
  for (const col of page.querySelectorAll(".col")) {
    if (col.scrollHeight > col.clientHeight + 1 || col.scrollWidth > col.clientWidth + 1)
      problems.push(`column clipped: content ${col.scrollWidth}x${col.scrollHeight} in ${col.clientWidth}x${col.clientHeight}`);
    const C = col.getBoundingClientRect();
    for (const el of col.querySelectorAll("*")) {
      if (!visible(el)) continue;
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (outside(r, C)) problems.push(`outside its column: ${name(el)}`);
    }
  }
  for (const el of page.querySelectorAll(".math-display")) {
    if (el.scrollWidth > el.clientWidth + 1) problems.push(`formula clipped: ${el.dataset.tex.slice(0, 40)}`);
  }
  window.pmReport = {errors, problems: problems.slice(0, 20), nproblems: problems.length};
})();
"""

_INLINE = re.compile(r"\\\((.+?)\\\)|\*\*(.+?)\*\*|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", re.DOTALL)
_NUMERIC = re.compile(r"^[\s$€£%()+\-−.,0-9]+$")


def rich(text: str) -> Markup:
    """Escape block text and turn its inline markup into HTML: ``\\( \\)`` math, ``**bold**``, ``*italic*``."""
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(str(escape(text[pos:m.start()])))
        if m.group(1) is not None:
            out.append(f'<span class="math-inline" data-tex="{escape(m.group(1))}"></span>')
        elif m.group(2) is not None:
            out.append(f"<strong>{rich(m.group(2))}</strong>")
        else:
            out.append(f"<em>{rich(m.group(3))}</em>")
        pos = m.end()
    out.append(str(escape(text[pos:])))
    return Markup("".join(out))


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def figure_svg(fig: Figure) -> Markup:
    """A text-free stand-in for a figure: a bar/line chart for ``chart``, a photo-like scene otherwise.

    Text-free so that nothing on the page is missing from the reference Markdown; seeded by the
    caption so the same spec draws the same picture.
    """
    h = hashlib.sha256(fig.caption.encode("utf-8")).digest()
    w, ht = 600, 300
    if fig.kind == "chart":
        n = 5 + h[0] % 6
        palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
        color = palette[h[1] % len(palette)]
        parts = [f'<rect x="0" y="0" width="{w}" height="{ht}" fill="#fff"/>']
        for k in range(1, 5):  # grid lines
            y = 20 + k * 54
            parts.append(f'<line x1="50" y1="{y}" x2="{w - 20}" y2="{y}" stroke="#e4e4e4" stroke-width="1"/>')
        parts.append(f'<line x1="50" y1="20" x2="50" y2="{ht - 26}" stroke="#333" stroke-width="1.5"/>')
        parts.append(f'<line x1="50" y1="{ht - 26}" x2="{w - 20}" y2="{ht - 26}" stroke="#333" stroke-width="1.5"/>')
        slot = (w - 90) / n
        if h[2] % 2 == 0:
            for i in range(n):
                v = 30 + h[3 + i] % 200
                parts.append(f'<rect x="{60 + i * slot + slot * 0.15:.1f}" y="{ht - 26 - v}" width="{slot * 0.7:.1f}" '
                             f'height="{v}" fill="{color}"/>')
        else:
            pts = " ".join(f"{60 + i * slot + slot / 2:.1f},{ht - 26 - (30 + h[3 + i] % 200)}" for i in range(n))
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="3"/>')
            for p in pts.split():
                x, y = p.split(",")
                parts.append(f'<circle cx="{x}" cy="{y}" r="4.5" fill="{color}"/>')
    else:
        sky = ("#cfe3f2", "#e9dccb", "#d9e8d2", "#e2e2ea")[h[0] % 4]
        parts = [f'<rect x="0" y="0" width="{w}" height="{ht}" fill="{sky}"/>',
                 f'<circle cx="{120 + h[1] % 360}" cy="{60 + h[2] % 40}" r="{22 + h[3] % 14}" fill="#f7f2d8"/>',
                 f'<polygon points="0,{ht} {140 + h[4] % 80},{110 + h[5] % 60} {330 + h[6] % 60},{ht}" fill="#8aa39b"/>',
                 f'<polygon points="220,{ht} {420 + h[7] % 70},{90 + h[8] % 60} {w},{200 + h[9] % 40} {w},{ht}" fill="#6b8579"/>',
                 f'<rect x="0" y="{ht - 40}" width="{w}" height="40" fill="#55705f"/>']
    svg = (f'<svg class="fig" viewBox="0 0 {w} {ht}" xmlns="http://www.w3.org/2000/svg" '
           f'preserveAspectRatio="none" role="img">{"".join(parts)}</svg>')
    return Markup(svg)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=select_autoescape(["html", "j2", "html.j2"], default_for_string=True, default=True),
        keep_trailing_newline=True,
    )
    env.filters["rich"] = rich
    env.filters["data_uri"] = _data_uri
    env.filters["figure_svg"] = figure_svg
    env.filters["kind"] = lambda b: type(b).__name__
    env.filters["numeric"] = lambda s: bool(s) and bool(_NUMERIC.match(s)) and any(ch.isdigit() for ch in s)
    return env


_ENV = _environment()
_CSS = (TEMPLATE_DIR / "page.css").read_text(encoding="utf-8")


def katex_dist(katex_dir: Path = KATEX_DIR) -> Path:
    dist = (katex_dir / "dist").resolve()
    if not (dist / "katex.min.js").is_file():
        raise RuntimeError(f"KaTeX is not installed at {katex_dir}: {INSTALL_HINT}")
    return dist


def _columns(spec: PageSpec) -> list[list[PlacedBlock]]:
    n = max(1, spec.columns)
    cols: list[list[PlacedBlock]] = [[] for _ in range(n)]
    for pb in spec.blocks:
        cols[min(max(pb.column, 0), n - 1)].append(pb)
    return cols


def render_html(spec: PageSpec, katex_base: str | None = None) -> str:
    """The page's HTML (deterministic: a function of the spec and the KaTeX location only)."""
    if spec.layout not in LAYOUTS:
        raise RecordError("synth_unknown_layout", f"no template for layout {spec.layout!r}")
    base = katex_base if katex_base is not None else katex_dist().as_uri()
    template = _ENV.get_template(f"{spec.layout}.html.j2")
    return template.render(spec=spec, columns=_columns(spec), css=Markup(_CSS), katex_base=base, page_script=Markup(PAGE_SCRIPT))


@dataclass(frozen=True)
class RenderedPage:
    png: bytes
    html: str
    width: int
    height: int


class HtmlRenderer:
    """Renders ``PageSpec``s through one reused offline Chromium page; not thread-safe (one per worker)."""

    def __init__(self, work_dir: Path | str | None = None, *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 browser: Browser | None = None, png_compress_level: int = 1) -> None:
        self._dist = katex_dist()
        if work_dir is not None:
            Path(work_dir).mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix="synth-html-", dir=work_dir)).resolve()
        self._browser = browser
        self._page: Page | None = None
        self.timeout_ms = timeout_ms
        self._encode_cfg = RenderConfig(png_compress_level=png_compress_level)

    @property
    def page_dir(self) -> Path:
        """Where page HTML is written before loading (an allowed directory of the offline page)."""
        return self._dir

    def _get_page(self, size: tuple[int, int]) -> Page:
        if self._page is None or self._page.is_closed():
            browser = self._browser if self._browser is not None else shared_browser()
            self._page = new_offline_page(browser, [self._dist, self._dir], viewport=size)
        elif self._page.viewport_size != {"width": size[0], "height": size[1]}:
            self._page.set_viewport_size({"width": size[0], "height": size[1]})
        return self._page

    def _drop_page(self) -> None:
        if self._page is not None:
            try:
                self._page.context.close()
            except PlaywrightError:
                pass
            self._page = None

    def render(self, spec: PageSpec) -> RenderedPage:
        html = render_html(spec, self._dist.as_uri())
        size = (spec.width_px, spec.height_px)
        path = self._dir / "page.html"
        path.write_text(html, encoding="utf-8")
        page = self._get_page(size)
        try:
            page.goto(path.as_uri(), wait_until="load", timeout=self.timeout_ms)
            page.wait_for_function("window.pmReport !== null", timeout=self.timeout_ms)
            report = page.evaluate("window.pmReport")
            if report["errors"]:
                raise RecordError("synth_katex_error", f"{spec.id}: " + "; ".join(report["errors"][:3]))
            if report["nproblems"]:
                raise RecordError("synth_overflow",
                                  f"{spec.id}: {report['nproblems']} geometry problems: " + "; ".join(report["problems"][:3]))
            shot = page.screenshot(clip={"x": 0, "y": 0, "width": size[0], "height": size[1]},
                                   type="png", animations="disabled", caret="hide")
        except PlaywrightTimeout as exc:
            self._drop_page()  # a hung page must not poison the next one
            raise RecordError("synth_timeout", f"{spec.id}: page did not finish in {self.timeout_ms} ms") from exc
        except PlaywrightError:
            self._drop_page()
            raise
        image = Image.open(io.BytesIO(shot)).convert("RGB")
        if image.size != size:
            raise RecordError("synth_bad_size", f"{spec.id}: screenshot {image.size} != {size}")
        return RenderedPage(png=_encode(image, self._encode_cfg), html=html, width=size[0], height=size[1])

    def close(self) -> None:
        self._drop_page()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> HtmlRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
