"""Math-formula equivalence as olmOCR-Bench's `math` tests judge it: KaTeX renders in headless Chromium.

`formulas_match(reference, candidate)` says whether a candidate LaTeX formula shows the reference:

1. fast path: the two strings are equal after whitespace normalisation (no rendering);
2. both are rendered by KaTeX (`displayMode: true`, `throwOnError: true`, 24px, 800x400 viewport)
   in a page that cannot reach the network; a formula KaTeX rejects fails, with KaTeX's message, and so
   does one that uses a command needing trust (`\\href`, `\\url`, `\\includegraphics`, `\\html...`: all
   refused), one whose rendering is too large (`formula_too_large`) or one not rendered within the
   renderer's deadline (`katex_timeout`; `RenderedFormula.reason` names which);
3. pass if the reference's MathML is a substring of the candidate's, both stripped of whitespace
   and zero-width characters (the `<annotation>` holding the TeX source and the outermost `<mrow>`
   are left out, so a formula embedded in a larger one is found; olmOCR-Bench keeps that `<mrow>`
   and finds such formulas by the glyph rule instead), at a place not inside a radical, fraction,
   `menclose` (cancel, box), accent or over/under construct or phantom (`_DECORATING`: `x+y` is in
   the MathML of `\\sqrt{x+y}`, but not as it is); otherwise
4. pass if every reference glyph (a character of the HTML rendering, with its box) and mark (a
   stroke KaTeX draws without a character: fraction bar, over/underline, `\\sout`, radical, cancel
   stroke, wide accent, stretchy arrow or brace; `Glyph.mark`) maps onto a distinct identical
   candidate one (`Glyph.identity`: same character or mark kind, font size and boldness) such that
   neighbours agree: for each reference glyph and its nearest glyph up, down, left or right, their
   images stand at the same relative offset (within `TOLERANCE_PX`) and no other candidate glyph in
   that direction is nearer (within `TOLERANCE_PX`); and no candidate glyph or mark left unmapped
   lies on a mapped one (`overlays`: a negation overlay, an accent, a radical, a bar or stroke over
   or under them). The mapping is found by backtracking.

Where this differs from olmOCR-Bench (`olmocr/bench/katex/render.py`), on purpose:

- olmOCR-Bench identifies glyphs by their character alone. We ignore the typeface too (family and
  italic/upright: `\\mathcal{I}`, `\\mathrm{d}`, `\\mathbb{R}` match `I`, `d`, `R`, as olmOCR-Bench
  judges them), but keep the font size (`\\tfrac` is not `\\dfrac`, a script is not full size) and
  bold (`\\mathbf{x}` is not `x`: bold marks vectors and matrices), which olmOCR-Bench does not.
- olmOCR-Bench compares only which glyph is each glyph's neighbour (and only within a 5 px band
  around the row or column), never the offsets; so it passes `x^2` for `x_2`. We compare offsets.
- olmOCR-Bench's KaTeX stylesheet is inlined into an `about:blank` page, so KaTeX's fonts never
  load and glyphs are laid out in the system's fallback fonts; we load KaTeX's own fonts.
- olmOCR-Bench sees characters only and never asks what else the candidate draws on them, so it passes
  `\\sqrt{x+y}=z`, `\\overline{x+y}=z`, `\\cancel{x}+y=z` for `x+y=z`, `{a \\atop b}=c` for
  `\\frac{a}{b}=c`, and some added accents; its neighbour rule happens to fail most negations
  (`\\neq`, `\\notin`, `\\not\\subset`: the overlay glyph competes as a neighbour). pagemill's check
  also scores GRPO rewards, so a changed meaning must fail: marks take part in the mapping, nothing
  may be drawn over what maps, and MathML found only under a decoration is left to the glyph rule.

`benchmarks/math_parity.py` measures the agreement with olmOCR-Bench's own code (docs/judging.md).

Per-character boxes are read with DOM `Range`s over each text node, which splits multi-character
spans exactly rather than dividing a span's width evenly.

`KatexRenderer` holds one page in one browser (`schemas.browser`) and reuses it for every formula;
results are stored in SQLite under `$PAGEMILL_CACHE/katex` (default `~/.cache/pagemill/katex`),
keyed by KaTeX's version, this module's output format and the formula, so a formula renders once
across runs and processes. KaTeX itself comes from `assets/katex/node_modules/katex`
(`scripts/install_browser_assets.sh`).

Thread safety: a `KatexRenderer` (its page and its SQLite connection) belongs to the thread that
first uses it; use one renderer per thread or process. `formulas_match` without a renderer uses
`default_renderer()`, which is per thread and closed at exit.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import warnings
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Self

import numpy as np
from playwright.sync_api import Browser, Page
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from schemas.browser import INSTALL_HINT, new_offline_page, shared_browser

REPO_ROOT = Path(__file__).resolve().parent.parent
KATEX_DIR = REPO_ROOT / "assets" / "katex" / "node_modules" / "katex"
TOLERANCE_PX = 5.0
VIEWPORT = (800, 400)
FONT_SIZE_PX = 24
# Bump when what the page extracts changes, so cached renders of the old form are not reused.
# 2: failures carry a reason; trust-refused commands and KaTeX's error-colour nodes fail; outputs over
# MAX_NODES / MAX_GLYPHS fail (formula_too_large); maxExpand is MAX_EXPAND.
# 3: marks (fraction bars, over/underlines, radicals, cancel strokes, other SVG) are extracted.
RENDER_FORMAT = "pagemill-katex-render/3"
MAX_BATCH = 64
# What a batch may take beyond one deadline, per formula, before it is given up and its formulas are rendered
# one at a time (formulas take ~5-20 ms each): a formula that never ends holds its batch ~37 s, not 64 deadlines.
BATCH_ALLOWANCE_S = 0.5
MAX_SEARCH_STEPS = 200_000
# Formulas are untrusted labels: a short `\def` nesting expands to tens of thousands of glyphs and keeps
# KaTeX and the layout busy for minutes. Each formula gets a deadline (KatexRenderer(timeout_s=...)); the
# rendering is capped in elements and glyphs before anything is measured; macro expansions are capped
# below KaTeX's default of 1000.
DEFAULT_TIMEOUT_S = 5.0
MAX_NODES = 50_000  # HTML elements of one rendering
MAX_GLYPHS = 5_000  # characters of the HTML rendering (each one is measured)
MAX_EXPAND = 500
# KaTeX draws what it refuses (an untrusted \href, \url, \includegraphics, \htmlStyle, ...) in errorColor
# instead of throwing; an unusual colour marks those nodes so they fail the formula.
ERROR_COLOR = "#cc0001"
# Reasons a formula fails (RenderedFormula.reason), the formula_render stage's drop reasons.
KATEX_ERROR, KATEX_TIMEOUT, FORMULA_TOO_LARGE = "katex_error", "katex_timeout", "formula_too_large"

_PAGE_SCRIPT = r"""
window.pmReady = Promise.all([...document.fonts].map((f) => f.load().catch(() => null)));

function pmMeasure(el) {
  let mathml = "";
  const sem = el.querySelector(".katex-mathml semantics");
  if (sem) {
    const kids = [...sem.children].filter((c) => c.localName !== "annotation");
    let nodes = kids;
    if (kids.length === 1 && kids[0].localName === "mrow") nodes = [...kids[0].children];
    mathml = nodes.map((n) => n.outerHTML).join("");
  }
  const glyphs = [];
  const html = el.querySelector(".katex-html");
  if (html) {
    // Boxes relative to the rendering's own top-left corner, wherever the page placed it.
    const origin = html.getBoundingClientRect();
    const walker = document.createTreeWalker(html, NodeFilter.SHOW_TEXT);
    const range = document.createRange();
    const fonts = new Map();
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const parent = node.parentElement;
      let font = fonts.get(parent);
      if (font === undefined) {
        const cs = getComputedStyle(parent);
        font = [cs.fontFamily, cs.fontWeight, cs.fontStyle, parseFloat(cs.fontSize).toFixed(1)].join("|");
        fonts.set(parent, font);
      }
      const text = node.data;
      let i = 0;
      for (const ch of text) {  // iterates code points, not UTF-16 units
        const j = i + ch.length;
        if (!/^\s$/u.test(ch)) {
          range.setStart(node, i);
          range.setEnd(node, j);
          const r = range.getBoundingClientRect();
          if (r.width > 0 && r.height > 0) {
            glyphs.push([ch, +(r.x - origin.x).toFixed(2), +(r.y - origin.y).toFixed(2),
                         +r.width.toFixed(2), +r.height.toFixed(2), font]);
          }
        }
        i = j;
      }
    }
  }
  return {mathml, glyphs, marks: html ? pmMarks(html) : []};
}

// Strokes KaTeX draws without a character: rules (fraction bars, over/underlines, \sout) and SVG (radicals,
// cancel strokes, wide accents, stretchy arrows and braces). Each becomes a mark [kind, x, y, w, h, font]
// the comparison maps like a glyph. Tall delimiters (SVG inside .delimsizing) are left out: delimiters are
// compared as leniently as their glyph forms; so are array rules (\hline, column lines) and box frames.
const PM_RULES = [["frac-line", "frac-line"], ["overline-line", "overline"], ["underline-line", "underline"],
                  ["katex-sout", "strike"]];
function pmMarkKind(el) {
  if (el.localName === "svg") {
    if (el.closest(".delimsizing")) return null;
    const lines = [...el.querySelectorAll("line")];
    if (lines.length) return "cancel:" + lines.map((l) => l.getAttribute("y1")).join(",");
    const atom = el.closest(".sqrt, .mord, .mrel, .mbin, .mop, .minner, .mopen, .mclose, .mpunct");
    if (atom && atom.classList.contains("sqrt")) return "sqrt";
    const path = el.querySelector("path");
    const d = path ? (path.getAttribute("d") || "").replace(/\s+/g, " ").slice(0, 24) : "";
    return "svg:" + d;
  }
  for (const [cls, kind] of PM_RULES) if (el.classList.contains(cls)) return kind;
  return null;
}

function pmMarks(html) {
  const origin = html.getBoundingClientRect();
  const marks = [];
  for (const el of html.querySelectorAll("svg, .frac-line, .overline-line, .underline-line, .katex-sout")) {
    const kind = pmMarkKind(el);
    if (!kind) continue;
    const r = el.getBoundingClientRect();
    let [x0, y0, x1, y1] = [r.left, r.top, r.right, r.bottom];
    const parent = el.parentElement;
    if (el.localName === "svg" && parent && getComputedStyle(parent).overflow !== "visible") {
      const p = parent.getBoundingClientRect();  // a stretchy SVG is 400em wide, clipped by its parent
      [x0, y0, x1, y1] = [Math.max(x0, p.left), Math.max(y0, p.top), Math.min(x1, p.right), Math.min(y1, p.bottom)];
    }
    if (x1 - x0 <= 0 || y1 - y0 <= 0) continue;
    const size = parseFloat(getComputedStyle(el.localName === "svg" ? el.parentElement : el).fontSize).toFixed(1);
    marks.push([kind, +(x0 - origin.x).toFixed(2), +(y0 - origin.y).toFixed(2), +(x1 - x0).toFixed(2),
                +(y1 - y0).toFixed(2), `mark|400|normal|${size}`]);
  }
  return marks;
}

function pmRenderOne(tex, limits) {
  const host = document.getElementById("host");
  host.textContent = "";
  const el = document.createElement("div");
  host.appendChild(el);
  const refused = [];
  try {
    katex.render(tex, el, {
      displayMode: true, throwOnError: true, maxExpand: limits.maxExpand, errorColor: limits.errorColor,
      // nothing that could load or link anything: every command that asks is refused (and fails below)
      trust: (context) => { refused.push(context.command); return false; },
    });
  } catch (e) {
    return {error: `${(e && e.name) || "Error"}: ${(e && e.message) || e}`, reason: "katex_error"};
  }
  if (refused.length) {
    return {error: `untrusted command refused: ${[...new Set(refused)].join(", ")}`, reason: "katex_error"};
  }
  const nodes = el.getElementsByTagName("*").length;
  if (nodes > limits.maxNodes) {
    return {error: `rendering has ${nodes} elements (over ${limits.maxNodes})`, reason: "formula_too_large"};
  }
  const html = el.querySelector(".katex-html");
  const chars = html ? html.textContent.length : 0;
  if (chars > limits.maxGlyphs) {
    return {error: `rendering has ${chars} characters (over ${limits.maxGlyphs})`, reason: "formula_too_large"};
  }
  if (el.innerHTML.toLowerCase().includes(limits.errorColor)) {
    return {error: "KaTeX drew an error-colour node (an unsupported command)", reason: "katex_error"};
  }
  return pmMeasure(el);
}

window.pmRender = async (formulas, limits, timeoutMs) => {
  await window.pmReady;
  const out = formulas.map((tex) => {
    const started = performance.now();
    const result = pmRenderOne(tex, limits);
    const took = performance.now() - started;
    // each formula is held to the deadline, in a batch as alone (the caller's wait only catches one that never ends)
    return took > timeoutMs ? {error: `KaTeX took ${Math.round(took)} ms (over ${timeoutMs} ms)`,
                               reason: "katex_timeout"} : result;
  });
  document.getElementById("host").textContent = "";
  return out;
};

// Starts one render and returns at once: the caller waits for pmResult with a deadline, so a formula
// that never finishes cannot hold the caller (page.evaluate itself has no timeout).
window.pmStart = (formulas, limits, timeoutMs) => {
  window.pmResult = null;
  setTimeout(() => window.pmRender(formulas, limits, timeoutMs).then((r) => { window.pmResult = r; }), 0);
};
"""


def _page_html(katex_dist: Path) -> str:
    base = katex_dist.resolve().as_uri()
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<link rel='stylesheet' href='{base}/katex.min.css'>"
        f"<script src='{base}/katex.min.js'></script>"
        f"<style>body{{margin:0;font-size:{FONT_SIZE_PX}px}}#host{{font-size:{FONT_SIZE_PX}px}}</style>"
        "</head><body><div id='host'></div>"
        f"<script>{_PAGE_SCRIPT}</script></body></html>"
    )


@dataclass(frozen=True)
class Glyph:
    """One rendered character: its box in CSS pixels from the rendering's top-left corner, and its
    font (family|weight|style|size).

    A mark (`mark=True`) is a stroke KaTeX draws without a character, compared like a glyph: `char` names
    its kind (`frac-line`, `overline`, `underline`, `strike`, `sqrt`, `cancel:<y1>`, or `svg:<path start>`
    for wide accents, stretchy arrows and braces; never one character, so never equal to a glyph's), `font`
    is `mark|400|normal|<size>`.
    """

    char: str
    x: float
    y: float
    w: float
    h: float
    font: str
    mark: bool = False

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    @property
    def identity(self) -> tuple[str, str, bool]:
        """What must be equal for two glyphs to be the same: character, font size and boldness.

        The family and style are left out: KaTeX sets `\\mathcal{I}`, `\\mathrm{d}`, `\\mathbb{R}` in
        other faces than `I`, `d`, `R`, and olmOCR-Bench (which compares characters only) counts
        them equal.
        """
        parts = self.font.rsplit("|", 3)
        if len(parts) != 4:  # not `family|weight|style|size`: the whole font string must match
            return self.char, self.font, False
        return self.char, parts[3], _is_bold(parts[1])


def _is_bold(weight: str) -> bool:
    """CSS `font-weight` as `getComputedStyle` reports it ("400", "700", or a keyword)."""
    if weight in ("bold", "bolder"):
        return True
    try:
        return float(weight) >= 600
    except ValueError:
        return False


@dataclass(frozen=True)
class RenderedFormula:
    """KaTeX's rendering of one formula, or the error KaTeX raised.

    `mathml` leaves out the `<annotation>` (the TeX source) and the outermost `<mrow>`.
    """

    latex: str
    mathml: str = ""
    glyphs: tuple[Glyph, ...] = ()
    error: str | None = None
    marks: tuple[Glyph, ...] = ()  # rules and SVG strokes (`Glyph.mark`), in document order
    # why it failed: KATEX_ERROR (KaTeX rejected it, or drew a refused command), KATEX_TIMEOUT, FORMULA_TOO_LARGE
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> str:
        glyphs = [[g.char, g.x, g.y, g.w, g.h, g.font] for g in self.glyphs]
        marks = [[m.char, m.x, m.y, m.w, m.h, m.font] for m in self.marks]
        return json.dumps({"mathml": self.mathml, "glyphs": glyphs, "marks": marks, "error": self.error,
                           "reason": self.reason}, ensure_ascii=False)

    @classmethod
    def from_dict(cls, latex: str, data: dict) -> RenderedFormula:
        if data.get("error") is not None:
            return cls(latex=latex, error=str(data["error"]), reason=str(data.get("reason") or KATEX_ERROR))
        glyphs = tuple(
            Glyph(str(c), float(x), float(y), float(w), float(h), str(f)) for c, x, y, w, h, f in data["glyphs"]
        )
        marks = tuple(
            Glyph(str(c), float(x), float(y), float(w), float(h), str(f), mark=True)
            for c, x, y, w, h, f in data.get("marks", ())
        )
        return cls(latex=latex, mathml=str(data["mathml"]), glyphs=glyphs, marks=marks)


def katex_version(katex_dir: Path = KATEX_DIR) -> str:
    """The installed KaTeX's version, read from its package.json."""
    manifest = katex_dir / "package.json"
    if not manifest.is_file() or not (katex_dir / "dist" / "katex.min.js").is_file():
        raise RuntimeError(f"KaTeX is not installed at {katex_dir}: {INSTALL_HINT}")
    return str(json.loads(manifest.read_text(encoding="utf-8"))["version"])


def default_cache_dir() -> Path:
    """`$PAGEMILL_CACHE/katex`, or `~/.cache/pagemill/katex`."""
    root = os.environ.get("PAGEMILL_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "pagemill") / "katex"


class KatexRenderer:
    """Renders LaTeX with KaTeX in one reused Chromium page, behind a persistent SQLite cache.

    The browser page is opened on the first cache miss only. `render_count` counts formulas
    actually rendered in the browser. Not thread-safe: one renderer per thread or process.
    """

    def __init__(
        self,
        cache_dir: Path | str | None = None,
        *,
        browser: Browser | None = None,
        katex_dir: Path | str = KATEX_DIR,
        use_cache: bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_nodes: int = MAX_NODES,
        max_glyphs: int = MAX_GLYPHS,
        max_expand: int = MAX_EXPAND,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.limits = {"maxNodes": int(max_nodes), "maxGlyphs": int(max_glyphs), "maxExpand": int(max_expand),
                       "errorColor": ERROR_COLOR}
        self.katex_dir = Path(katex_dir)
        self.version = katex_version(self.katex_dir)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.use_cache = use_cache
        self.render_count = 0
        self._browser = browser
        self._page: Page | None = None
        self._html_dir: Path | None = None
        self._db: sqlite3.Connection | None = None
        self._closed = False

    # -- cache -------------------------------------------------------------------------------
    def _key(self, latex: str) -> str:
        limits = json.dumps(self.limits, sort_keys=True)  # another cap may render it differently
        return hashlib.sha256(f"{RENDER_FORMAT}\0{self.version}\0{limits}\0{latex}".encode()).hexdigest()

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.cache_dir / "renders.sqlite3", timeout=30)
                db.execute("PRAGMA journal_mode=WAL")
                # A cache: losing the last writes on power loss is fine, an fsync per formula is not.
                db.execute("PRAGMA synchronous=NORMAL")
            except (OSError, sqlite3.Error) as exc:
                warnings.warn(f"KaTeX cache at {self.cache_dir} unusable ({exc}); caching in memory", stacklevel=3)
                db = sqlite3.connect(":memory:")
            db.execute("CREATE TABLE IF NOT EXISTS renders (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.commit()
            self._db = db
        return self._db

    def _lookup(self, latexes: Sequence[str]) -> dict[str, RenderedFormula]:
        if not self.use_cache:
            return {}
        db = self._connect()
        found: dict[str, RenderedFormula] = {}
        for latex in dict.fromkeys(latexes):
            row = db.execute("SELECT value FROM renders WHERE key = ?", (self._key(latex),)).fetchone()
            if row is not None:
                found[latex] = RenderedFormula.from_dict(latex, json.loads(row[0]))
        return found

    def _store(self, results: Sequence[RenderedFormula]) -> None:
        results = [r for r in results if r.reason != KATEX_TIMEOUT]  # a deadline missed may be the machine's load
        if not self.use_cache or not results:
            return
        db = self._connect()
        with db:
            db.executemany(
                "INSERT OR REPLACE INTO renders (key, value) VALUES (?, ?)",
                [(self._key(r.latex), r.to_json()) for r in results],
            )

    # -- browser -----------------------------------------------------------------------------
    @property
    def page_open(self) -> bool:
        return self._page is not None

    def _open_page(self) -> Page:
        if self._closed:
            raise RuntimeError("KatexRenderer is closed")
        if self._page is None or self._page.is_closed():
            dist = (self.katex_dir / "dist").resolve()
            if self._html_dir is None:
                self._html_dir = Path(tempfile.mkdtemp(prefix="pagemill-katex-"))
                (self._html_dir / "render.html").write_text(_page_html(dist), encoding="utf-8")
            browser = self._browser if self._browser is not None else shared_browser()
            page = new_offline_page(browser, [dist, self._html_dir], viewport=VIEWPORT)
            page.goto((self._html_dir / "render.html").as_uri())
            if page.evaluate("typeof katex") != "object":
                page.context.close()
                raise RuntimeError(f"KaTeX did not load from {dist}: {INSTALL_HINT}")
            self._page = page
        return self._page

    def _drop_page(self) -> None:
        """Close the page (a timed-out render may still be running in it); the next render opens a fresh one."""
        if self._page is not None:
            with suppress(Exception):
                self._page.context.close()
            self._page = None

    def _render_batch(self, latexes: list[str]) -> list[dict] | None:
        """The formulas rendered in the page, each that took over ``timeout_s`` a ``katex_timeout`` (timed in
        the page); None when the whole batch is not back within ``timeout_s`` + ``BATCH_ALLOWANCE_S`` a
        formula (one formula that never ends: the page, still busy, is closed). The render starts in the page
        and is waited for from here: ``page.evaluate`` has no timeout, and a busy page runs no timers."""
        page = self._open_page()
        page.evaluate("([xs, limits, ms]) => window.pmStart(xs, limits, ms)", [latexes, self.limits,
                                                                               self.timeout_s * 1000])
        try:
            handle = page.wait_for_function("() => window.pmResult", polling=2,
                                            timeout=(self.timeout_s + BATCH_ALLOWANCE_S * len(latexes)) * 1000)
        except PlaywrightTimeoutError:
            self._drop_page()
            return None
        try:
            return handle.json_value()
        finally:
            with suppress(Exception):
                handle.dispose()

    def _render_guarded(self, latexes: list[str]) -> list[dict]:
        """``_render_batch`` once more on a fresh page after a crash; a batch past its deadline is rendered
        again one formula at a time, so only the formulas that are slow on their own fail (``katex_timeout``)."""
        try:
            raw = self._render_batch(latexes)
        except PlaywrightError:  # a crashed page or a browser gone away: start over once on a fresh page
            self._drop_page()
            raw = self._render_batch(latexes)
        if raw is not None:
            return raw
        if len(latexes) > 1:
            return [r for latex in latexes for r in self._render_guarded([latex])]
        return [{"error": f"KaTeX did not finish within {self.timeout_s:g} s", "reason": KATEX_TIMEOUT}]

    def _render_in_browser(self, latexes: Sequence[str]) -> list[RenderedFormula]:
        out: list[RenderedFormula] = []
        for start in range(0, len(latexes), MAX_BATCH):
            batch = list(latexes[start:start + MAX_BATCH])
            out.extend(RenderedFormula.from_dict(latex, raw) for latex, raw in zip(batch, self._render_guarded(batch)))
            self.render_count += len(batch)
        return out

    # -- public ------------------------------------------------------------------------------
    def render_many(self, latexes: Sequence[str]) -> list[RenderedFormula]:
        """Render each formula (cached ones are not rendered again); KaTeX errors are results, not raised."""
        found = self._lookup(latexes)
        missing = [latex for latex in dict.fromkeys(latexes) if latex not in found]
        if missing:
            fresh = self._render_in_browser(missing)
            self._store(fresh)
            found.update((r.latex, r) for r in fresh)
        return [found[latex] for latex in latexes]

    def render(self, latex: str) -> RenderedFormula:
        return self.render_many([latex])[0]

    def close(self) -> None:
        """Close the page and the cache; the shared browser stays up for other users."""
        self._closed = True
        self._drop_page()  # the browser may already be gone at exit
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._html_dir is not None:
            shutil.rmtree(self._html_dir, ignore_errors=True)
            self._html_dir = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_local = threading.local()
_defaults: list[tuple[int, KatexRenderer]] = []
_defaults_lock = threading.Lock()


@contextmanager
def cache_in(cache_dir: str | None) -> Iterator[None]:
    """Within the block, this thread's ``default_renderer()`` (what the ``math`` unit test uses) caches
    under ``cache_dir`` (``schemas.math_unit_tests.run_cache_dir``; ``""``: no cache; None: no change):
    a stage checking a run's labels keeps their renders in the run's folders."""
    previous = getattr(_local, "cache_override", None)
    if cache_dir is not None:
        _local.cache_override = cache_dir
    try:
        yield
    finally:
        _local.cache_override = previous


def default_renderer(cache_dir: Path | str | None = None, use_cache: bool = True) -> KatexRenderer:
    """This thread's renderer with the default cache (or ``cache_dir``, or the folder of an enclosing
    ``cache_in``; ``use_cache=False``: none), created on first use and closed at exit."""
    override = getattr(_local, "cache_override", None)
    if cache_dir is None and use_cache and override is not None:
        cache_dir, use_cache = (override or None), bool(override)
    if getattr(_local, "pid", None) != os.getpid():
        _local.renderers, _local.pid = {}, os.getpid()
    key = (str(cache_dir) if cache_dir is not None else None, use_cache)
    renderer: KatexRenderer | None = _local.renderers.get(key)
    if renderer is None or renderer._closed:
        renderer = KatexRenderer(cache_dir, use_cache=use_cache)
        _local.renderers[key] = renderer
        with _defaults_lock:
            _defaults.append((threading.get_ident(), renderer))
    return renderer


def _close_defaults() -> None:
    me = threading.get_ident()
    with _defaults_lock:
        mine = [r for t, r in _defaults if t == me]
        _defaults[:] = [(t, r) for t, r in _defaults if t != me]
    for r in mine:
        r.close()


# Registered after schemas.browser's hook, so it runs first (atexit is LIFO): pages before browser.
atexit.register(_close_defaults)


# -- comparison ------------------------------------------------------------------------------

_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|\s+|.", re.DOTALL)
# Whitespace is significant in text mode (\text..., \tag's label, ...); a run of it counts as one space.
_TEXT_MODE = re.compile(r"\\(?:text[a-z]*|mbox|hbox|vbox|verb|tag|emph|href|url)(?![A-Za-z])")


def normalize_latex(latex: str) -> str | None:
    """Whitespace-insensitive form of a formula, for the fast path; None when there is no safe one.

    In math mode TeX ignores spaces, except that one ends a control word (`\\alpha b`) and one keeps
    `\\\\ [b]` a row break followed by `[b]` (without it, `[b]` is the break's size argument). With text
    mode present only runs of whitespace are collapsed. A `%` comment ends at a newline, which no
    collapsing may move: such a formula has no normal form.
    """
    if "%" in latex.replace("\\%", ""):
        return None
    if _TEXT_MODE.search(latex):
        return " ".join(latex.split())
    out: list[str] = []
    prev, spaced = "", False
    for tok in _TOKEN.findall(latex):
        if tok.isspace():
            spaced = True
            continue
        if prev[:1] == "\\" and prev[1:].isalpha() and tok[0].isalpha():
            out.append(" ")
        elif prev == "\\\\" and tok == "[" and spaced:
            out.append(" ")
        out.append(tok)
        prev, spaced = tok, False
    return "".join(out)


_DIRECTIONS = ("up", "down", "left", "right")


@dataclass
class _Layout:
    glyphs: tuple[Glyph, ...]
    centers: np.ndarray  # (n, 2)
    nearest: dict[str, np.ndarray]  # direction -> index of nearest glyph, -1 when none
    nearest_dist: dict[str, np.ndarray]


def _direction_masks(delta: np.ndarray, tol: float) -> dict[str, np.ndarray]:
    """For offsets `delta[..., (dx, dy)]`: which direction each lies in (dominant axis; screen y down)."""
    dx, dy = delta[..., 0], delta[..., 1]
    apart = (np.abs(dx) > tol) | (np.abs(dy) > tol)
    horizontal = np.abs(dx) >= np.abs(dy)
    return {
        "right": apart & horizontal & (dx > 0),
        "left": apart & horizontal & (dx < 0),
        "down": apart & ~horizontal & (dy > 0),
        "up": apart & ~horizontal & (dy < 0),
    }


def _layout(glyphs: tuple[Glyph, ...], tol: float) -> _Layout:
    centers = np.array([[g.cx, g.cy] for g in glyphs], dtype=float).reshape(-1, 2)
    delta = centers[None, :, :] - centers[:, None, :]  # delta[i, j] = position of j seen from i
    dist = np.hypot(delta[..., 0], delta[..., 1])
    nearest: dict[str, np.ndarray] = {}
    nearest_dist: dict[str, np.ndarray] = {}
    for d, mask in _direction_masks(delta, tol).items():
        masked = np.where(mask, dist, np.inf)
        idx = masked.argmin(axis=1) if len(glyphs) else np.zeros(0, dtype=int)
        best = masked[np.arange(len(glyphs)), idx] if len(glyphs) else np.zeros(0)
        nearest[d] = np.where(np.isfinite(best), idx, -1)
        nearest_dist[d] = best
    return _Layout(glyphs, centers, nearest, nearest_dist)


def _font_size(g: Glyph) -> float:
    try:
        return float(g.font.rsplit("|", 1)[-1])
    except ValueError:
        return 0.0


# How much of the smaller box two glyphs must share, across and down, for one to lie on the other.
OVERLAY_SHARE_X, OVERLAY_SHARE_Y = 0.5, 0.25
_OVERLAY_BLOCK = 256  # candidate glyphs per vectorised block (memory ~ n x block)


def overlays(glyphs: Sequence[Glyph], tol: float = TOLERANCE_PX) -> list[list[int]]:
    """For each glyph or mark k, the indices of the others that lie on it (drawn over it, changing it).

    A glyph lies on a glyph at least as large (font size within 5%) when their centres are within `tol`
    on both axes, or their boxes share at least half the narrower width and a quarter of the lower
    height: KaTeX's negation overlays (`\\neq`, `\\not\\subset`, the `/` of `\\notin`) and accents
    (`\\bar`, `\\hat`, `\\tilde`, `\\dot`) do; neighbours, scripts and the limits of `\\sum`
    (script size) do not. A mark (`Glyph.mark`: a rule or SVG stroke) lies on whatever has its centre
    under the mark's width with the boxes at most `2 * tol` apart vertically: a radical, overline,
    underline, cancel stroke, wide accent or brace over what it decorates, a fraction bar under its
    numerator and over its denominator. A glyph lies on a mark when its centre is inside the mark's box
    (the index of `\\sqrt[3]`, anything added under a cancel stroke).
    """
    items = tuple(glyphs)
    n = len(items)
    if n == 0:
        return []
    box = np.array([[g.x, g.y, g.x + g.w, g.y + g.h] for g in items], dtype=float)
    size = np.array([_font_size(g) for g in items])
    mark = np.array([g.mark for g in items], dtype=bool)
    w, h = box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]
    cx, cy = (box[:, 0] + box[:, 2]) / 2, (box[:, 1] + box[:, 3]) / 2
    out: list[list[int]] = [[] for _ in range(n)]
    for start in range(0, n, _OVERLAY_BLOCK):
        ks = slice(start, min(n, start + _OVERLAY_BLOCK))  # on[j, k - start]: does j lie on k?
        ox = np.minimum(box[:, None, 2], box[None, ks, 2]) - np.maximum(box[:, None, 0], box[None, ks, 0])
        oy = np.minimum(box[:, None, 3], box[None, ks, 3]) - np.maximum(box[:, None, 1], box[None, ks, 1])
        centred = (np.abs(cx[:, None] - cx[None, ks]) <= tol) & (np.abs(cy[:, None] - cy[None, ks]) <= tol)
        shared = ((ox >= OVERLAY_SHARE_X * np.minimum(w[:, None], w[None, ks]))
                  & (oy >= OVERLAY_SHARE_Y * np.minimum(h[:, None], h[None, ks])))
        glyph_on = ~mark[:, None] & ~mark[None, ks] & (size[:, None] >= 0.95 * size[None, ks]) & (centred | shared)
        mark_on = (mark[:, None] & (box[:, None, 0] <= cx[None, ks]) & (cx[None, ks] <= box[:, None, 2])
                   & (oy >= -2 * tol))
        inside = (~mark[:, None] & mark[None, ks]
                  & (box[None, ks, 0] <= cx[:, None]) & (cx[:, None] <= box[None, ks, 2])
                  & (box[None, ks, 1] <= cy[:, None]) & (cy[:, None] <= box[None, ks, 3]))
        on = glyph_on | mark_on | inside
        for j, col in zip(*(a.tolist() for a in np.nonzero(on)), strict=True):
            if j != start + col:
                out[start + col].append(j)
    return out


def map_glyphs(
    reference: Sequence[Glyph], candidate: Sequence[Glyph], tol: float = TOLERANCE_PX, *, check_overlays: bool = True
) -> dict[int, int] | None:
    """A mapping of reference glyph indices onto candidate glyph indices that keeps neighbours, or None.

    Glyphs and marks alike (`Glyph.mark`; a mark maps onto a mark of its kind). With `check_overlays` no
    candidate glyph or mark left unmapped may lie on a mapped one (`overlays`): the candidate may hold more
    formula beside the reference's, not strokes drawn over it (a negation, an accent, a radical, a bar).
    """
    return _map_glyphs(reference, candidate, tol, check_overlays)[0]


def _map_glyphs(
    reference: Sequence[Glyph], candidate: Sequence[Glyph], tol: float, check_overlays: bool
) -> tuple[dict[int, int] | None, bool]:
    """`map_glyphs`, and whether the overlay rule ruled out a candidate glyph or a complete mapping."""
    ref, hyp = _layout(tuple(reference), tol), _layout(tuple(candidate), tol)
    n = len(ref.glyphs)
    if n == 0:
        return {}, False
    ref_ids, hyp_ids = [g.identity for g in ref.glyphs], [g.identity for g in hyp.glyphs]
    by_identity: dict[tuple[str, str, bool], list[int]] = {}
    for k, key in enumerate(hyp_ids):
        by_identity.setdefault(key, []).append(k)
    on: list[list[int]] = []
    blocked = False
    if check_overlays:
        on = overlays(hyp.glyphs, tol)
        # A candidate glyph under something the reference has nowhere can never be used: prune it up front.
        wanted = set(ref_ids)
        unusable = {k for k, js in enumerate(on) if any(hyp_ids[j] not in wanted for j in js)}
        if unusable:
            blocked = any(hyp_ids[k] in wanted for k in unusable)
            by_identity = {key: [k for k in ks if k not in unusable] for key, ks in by_identity.items()}
    options = [by_identity.get(key, []) for key in ref_ids]
    if any(not o for o in options):
        return None, blocked

    # Constraints between reference glyphs i and j: (i, j, direction of j seen from i).
    edges: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    for d in _DIRECTIONS:
        for i, j in enumerate(ref.nearest[d]):
            if j >= 0:
                edges[i].append((int(j), d))
                edges[int(j)].append((i, _opposite(d)))

    # Visit order: start from the glyph with fewest options, then grow along neighbour edges so
    # each new glyph is pinned by an already placed one.
    order: list[int] = []
    placed = [False] * n
    while len(order) < n:
        start = min((i for i in range(n) if not placed[i]), key=lambda i: len(options[i]))
        queue = [start]
        placed[start] = True
        while queue:
            i = queue.pop(0)
            order.append(i)
            for j, _ in sorted(edges[i], key=lambda e: len(options[e[0]])):
                if not placed[j]:
                    placed[j] = True
                    queue.append(j)

    def consistent(i: int, k: int, mapping: dict[int, int]) -> bool:
        for j, d in edges[i]:
            m = mapping.get(j)
            if m is None:
                continue
            want = ref.centers[j] - ref.centers[i]
            got = hyp.centers[m] - hyp.centers[k]
            if np.abs(want - got).max() > tol:
                return False
            # j's image must be (within tolerance) the nearest candidate glyph in direction d of k,
            # and k the nearest in the opposite direction of j's image, when the reference says so.
            if ref.nearest[d][i] == j and np.hypot(*got) > hyp.nearest_dist[d][k] + tol:
                return False
            back = _opposite(d)
            if ref.nearest[back][j] == i and np.hypot(*got) > hyp.nearest_dist[back][m] + tol:
                return False
        return True

    mapping: dict[int, int] = {}
    used: set[int] = set()
    steps = 0

    def search(pos: int) -> bool:
        nonlocal steps, blocked
        if pos == n:  # complete: nothing left unmapped may lie on a mapped glyph
            if not on or all(j in used for k in used for j in on[k]):
                return True
            blocked = True
            return False
        i = order[pos]
        for k in options[i]:
            steps += 1
            if steps > MAX_SEARCH_STEPS:
                return False
            if k in used or not consistent(i, k, mapping):
                continue
            mapping[i] = k
            used.add(k)
            if search(pos + 1):
                return True
            del mapping[i]
            used.discard(k)
        return False

    return (dict(mapping), blocked) if search(0) else (None, blocked)


def _opposite(d: str) -> str:
    return {"up": "down", "down": "up", "left": "right", "right": "left"}[d]


# Whitespace and the invisible zero-width characters, as olmOCR-Bench strips them from MathML.
_INVISIBLE = re.compile(r"[\s\u200a-\u200d\u2060\ufeff]+")


def _strip_ws(s: str) -> str:
    return _INVISIBLE.sub("", s)


# Elements that change what they enclose: a formula found inside one of them is not found as it is (radical,
# fraction, strike or frame, accent, over/underline, brace or stacked script, phantom). The glyph rule judges.
_DECORATING = ("msqrt", "mroot", "mfrac", "menclose", "mover", "munder", "munderover", "mphantom")
_DECORATING_TAG = re.compile(rf"<(/?)(?:{'|'.join(_DECORATING)})(?=[\s/>])[^>]*?(/?)>")


def _mathml_contains(reference: str, candidate: str) -> bool:
    """The reference's MathML (stripped) occurs in the candidate's, at least once outside every element
    that changes what it encloses (`_DECORATING`; KaTeX's MathML is well nested)."""
    ref, cand = _strip_ws(reference), _strip_ws(candidate)
    if not ref or ref not in cand:
        return False
    tags = [m for m in _DECORATING_TAG.finditer(candidate) if not m.group(2)]  # self-closing ones enclose nothing
    if not tags:
        return True
    gaps = [(m.start(), m.end() - m.start()) for m in _INVISIBLE.finditer(candidate)]
    at, removed = [g[0] for g in gaps], list(accumulate(g[1] for g in gaps))

    def stripped(i: int) -> int:  # position in `cand` of the tag at `candidate[i]` (no tag starts in whitespace)
        k = bisect_right(at, i)
        return i - (removed[k - 1] if k else 0)

    opens = [stripped(m.start()) for m in tags if not m.group(1)]
    closes = [stripped(m.start()) for m in tags if m.group(1)]
    pos = cand.find(ref)
    while pos >= 0:
        if bisect_left(opens, pos) == bisect_left(closes, pos):  # no decorating element open here
            return True
        pos = cand.find(ref, pos + 1)
    return False


def _marks(rendered: RenderedFormula) -> str:
    return f"{len(rendered.marks)} mark" + ("" if len(rendered.marks) == 1 else "s")


def compare_rendered(reference: RenderedFormula, candidate: RenderedFormula) -> tuple[bool, str]:
    """olmOCR-Bench's rule on two renderings: MathML containment, else a neighbour-preserving glyph mapping.

    Stricter than olmOCR-Bench, so that a changed meaning fails: MathML found only inside a radical,
    fraction, accent, strike ... is left to the glyph rule; the reference's marks (fraction bars, radicals,
    over/underlines, cancel strokes) map like glyphs; nothing the candidate adds may lie on what maps
    (`map_glyphs`, `overlays`).
    """
    if reference.error is not None:
        return False, f"reference formula does not render: {reference.error}"
    if candidate.error is not None:
        return False, f"candidate formula does not render: {candidate.error}"
    if _mathml_contains(reference.mathml, candidate.mathml):
        return True, "reference MathML is contained in the candidate's MathML"
    ref_items, hyp_items = reference.glyphs + reference.marks, candidate.glyphs + candidate.marks
    if not ref_items:
        return False, "reference renders no glyphs and its MathML is not in the candidate's"
    ref_n = f"{len(reference.glyphs)} glyphs" + (f" and {_marks(reference)}" if reference.marks else "")
    hyp_n = f"{len(candidate.glyphs)}" + (f" and {len(candidate.marks)}" if candidate.marks else "")
    mapping, blocked = _map_glyphs(ref_items, hyp_items, TOLERANCE_PX, True)
    if mapping is None:
        why = (f"MathML differs and the reference's {ref_n} do not map onto the candidate's {hyp_n} with "
               f"consistent neighbours (tolerance {TOLERANCE_PX:g}px)")
        if blocked:
            why += (" without a candidate glyph or mark lying on a mapped one (a negation, accent, radical, bar "
                    "or stroke the reference lacks)")
        return False, why
    marks = f" (and its {_marks(reference)})" if reference.marks else ""
    return True, f"all {len(reference.glyphs)} reference glyphs map onto the candidate's layout{marks}"


def formulas_match(reference: str, candidate: str, renderer: KatexRenderer | None = None) -> tuple[bool, str]:
    """Whether `candidate` renders the `reference` formula (or contains it), with an explanation.

    A formula KaTeX rejects gives `(False, ...)` naming KaTeX's error; nothing is raised for it.
    """
    normal = normalize_latex(reference)
    if reference == candidate or (normal is not None and normal == normalize_latex(candidate)):
        return True, "identical after whitespace normalisation"
    r = renderer if renderer is not None else default_renderer()
    ref, hyp = r.render_many([reference, candidate])
    return compare_rendered(ref, hyp)
