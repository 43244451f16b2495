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
   and finds such formulas by the glyph rule instead);
4. otherwise pass if every reference glyph (a character of the HTML rendering, with its box) maps
   onto a distinct identical candidate glyph (`Glyph.identity`: same character, font size and
   boldness) such that neighbours agree: for each reference glyph and its nearest glyph up, down,
   left or right, their images stand at the same relative offset (within `TOLERANCE_PX`) and no
   other candidate glyph in that direction is nearer (within `TOLERANCE_PX`). The mapping is found
   by backtracking.

Where this differs from olmOCR-Bench (`olmocr/bench/katex/render.py`), on purpose:

- olmOCR-Bench identifies glyphs by their character alone. We ignore the typeface too (family and
  italic/upright: `\\mathcal{I}`, `\\mathrm{d}`, `\\mathbb{R}` match `I`, `d`, `R`, as olmOCR-Bench
  judges them), but keep the font size (`\\tfrac` is not `\\dfrac`, a script is not full size) and
  bold (`\\mathbf{x}` is not `x`: bold marks vectors and matrices), which olmOCR-Bench does not.
- olmOCR-Bench compares only which glyph is each glyph's neighbour (and only within a 5 px band
  around the row or column), never the offsets; so it passes `x^2` for `x_2`. We compare offsets.
- olmOCR-Bench's KaTeX stylesheet is inlined into an `about:blank` page, so KaTeX's fonts never
  load and glyphs are laid out in the system's fallback fonts; we load KaTeX's own fonts.

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
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
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
RENDER_FORMAT = "pagemill-katex-render/2"
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
  return {mathml, glyphs};
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
    font (family|weight|style|size)."""

    char: str
    x: float
    y: float
    w: float
    h: float
    font: str

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
    # why it failed: KATEX_ERROR (KaTeX rejected it, or drew a refused command), KATEX_TIMEOUT, FORMULA_TOO_LARGE
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> str:
        glyphs = [[g.char, g.x, g.y, g.w, g.h, g.font] for g in self.glyphs]
        return json.dumps({"mathml": self.mathml, "glyphs": glyphs, "error": self.error, "reason": self.reason},
                          ensure_ascii=False)

    @classmethod
    def from_dict(cls, latex: str, data: dict) -> RenderedFormula:
        if data.get("error") is not None:
            return cls(latex=latex, error=str(data["error"]), reason=str(data.get("reason") or KATEX_ERROR))
        glyphs = tuple(
            Glyph(str(c), float(x), float(y), float(w), float(h), str(f)) for c, x, y, w, h, f in data["glyphs"]
        )
        return cls(latex=latex, mathml=str(data["mathml"]), glyphs=glyphs)


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


def default_renderer() -> KatexRenderer:
    """This thread's renderer with the default cache, created on first use and closed at exit."""
    renderer: KatexRenderer | None = getattr(_local, "renderer", None)
    if renderer is None or renderer._closed or getattr(_local, "pid", None) != os.getpid():
        renderer = KatexRenderer()
        _local.renderer, _local.pid = renderer, os.getpid()
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


def map_glyphs(
    reference: Sequence[Glyph], candidate: Sequence[Glyph], tol: float = TOLERANCE_PX
) -> dict[int, int] | None:
    """A mapping of reference glyph indices onto candidate glyph indices that keeps neighbours, or None."""
    ref, hyp = _layout(tuple(reference), tol), _layout(tuple(candidate), tol)
    n = len(ref.glyphs)
    if n == 0:
        return {}
    by_identity: dict[tuple[str, str, bool], list[int]] = {}
    for k, g in enumerate(hyp.glyphs):
        by_identity.setdefault(g.identity, []).append(k)
    options = [by_identity.get(g.identity, []) for g in ref.glyphs]
    if any(not o for o in options):
        return None

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
        nonlocal steps
        if pos == n:
            return True
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

    return dict(mapping) if search(0) else None


def _opposite(d: str) -> str:
    return {"up": "down", "down": "up", "left": "right", "right": "left"}[d]


# Whitespace and the invisible zero-width characters, as olmOCR-Bench strips them from MathML.
_INVISIBLE = re.compile(r"[\s\u200a-\u200d\u2060\ufeff]+")


def _strip_ws(s: str) -> str:
    return _INVISIBLE.sub("", s)


def compare_rendered(reference: RenderedFormula, candidate: RenderedFormula) -> tuple[bool, str]:
    """olmOCR-Bench's rule on two renderings: MathML containment, else a neighbour-preserving glyph mapping."""
    if reference.error is not None:
        return False, f"reference formula does not render: {reference.error}"
    if candidate.error is not None:
        return False, f"candidate formula does not render: {candidate.error}"
    ref_mathml = _strip_ws(reference.mathml)
    if ref_mathml and ref_mathml in _strip_ws(candidate.mathml):
        return True, "reference MathML is contained in the candidate's MathML"
    if not reference.glyphs:
        return False, "reference renders no glyphs and its MathML is not in the candidate's"
    mapping = map_glyphs(reference.glyphs, candidate.glyphs)
    if mapping is None:
        return False, (
            f"MathML differs and the reference's {len(reference.glyphs)} glyphs do not map onto the "
            f"candidate's {len(candidate.glyphs)} with consistent neighbours (tolerance {TOLERANCE_PX:g}px)"
        )
    return True, f"all {len(reference.glyphs)} reference glyphs map onto the candidate's layout"


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
