"""HTML renderer for JinaOCRSynth pages: a ``PageSpec`` -> jinja2 HTML -> Chromium -> PNG.

One shared Chromium per process (``schemas.browser.shared_browser``) and one reused offline page
per renderer. The page loads a shell document once (KaTeX's CSS and script, from the renderer's own
temp folder); for each spec the full standalone document is rendered by ``render_html`` (what
``html/<id>.html`` holds) and its ``<html lang>``, ``<style>``, ``<body class>`` and body are swapped
into the shell, so no file is written and nothing is re-parsed per page. The only requests the page
may make are ``file://`` under that folder and KaTeX's ``dist`` (``schemas.browser.new_offline_page``
aborts everything else). The viewport is the spec's page size; formulas are typeset in the page by
``katex.render`` (``throwOnError``); after images decode and fonts load (awaited only while some are
loading), a spec with optional blocks is filled (``FLOW_JS``: what fits is kept, the rest left out,
a figure may shrink; ``RenderedPage.spec`` is the spec of what the page shows), then a geometry
check in the page reports every element outside the page box or its column and every column that
scrolls (content clipped by ``overflow: hidden``). The same check (``CHECK_JS``)
runs in the standalone document. Such pages raise ``RecordError("synth_overflow")``, KaTeX failures
``RecordError("synth_katex_error")``, and a page that does not finish within the timeout
``RecordError("synth_timeout")``. The page box is captured by CDP ``Page.captureScreenshot`` (PNG
with Chromium's fast settings, a lossless carrier).

Images are encoded like rasterised PDF pages in the corpus (``schemas.images``): PNG with unfiltered
rows deflated by ISA-L at level 1, achromatic pages as 8-bit grey; the screenshot is decoded by
``decode_rgb`` (ISA-L for Chromium's PNGs, OpenCV otherwise), so the stored pixels are Chromium's
exactly. Chromium's output for the same HTML, fonts and build is byte-stable in our checks.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from playwright.sync_api import Browser, CDPSession, Page
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from schemas.browser import new_offline_page, shared_browser
from schemas.deadletter import RecordError
from schemas.images import ImageEncoding, decode_rgb, encode_image, grey_if_achromatic
from schemas.math_render import INSTALL_HINT, KATEX_DIR
from synth.blocks import LAYOUTS, Figure, Footnote, PageSpec, PlacedBlock
from synth.charts import chart_svg

VERSION = "3"  # 2: headings and furniture drawn in the case the reference quotes; 3: display formulas padded
# and their ink (glyphs past KaTeX's boxes) checked against their block, infographic list markers inside the card
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
DEFAULT_TIMEOUT_MS = 15_000
MAX_PAGES = 4  # offline pages a renderer keeps, one per page size

# The in-page check, shared by the standalone document (``PAGE_SCRIPT``) and the renderer's reused
# shell (``HtmlRenderer``): typeset every ``[data-tex]`` node with KaTeX, wait for images to decode
# and for fonts (only while some are loading), fill the page when the renderer set ``window.pmFlow``
# (it then typesets each block as it tries it), then measure. Resolves to ``{errors, problems,
# nproblems, flow}``, or ``{timeout: true}`` when images or fonts take longer than ``timeoutMs``.
# A few JavaScript lines run past 120 characters (the noqa at its end): the text goes verbatim into
# every saved page, so rewrapping it would change the pages' bytes.
CHECK_JS = r"""
async (timeoutMs) => {
  const failed = new Map(), typeset = new WeakSet();
  const tex = (root) => {  // typeset root's formulas (once each); FLOW_JS calls it per block it tries
    for (const el of root.matches("[data-tex]") ? [root] : root.querySelectorAll("[data-tex]")) {
      if (typeset.has(el)) continue;
      typeset.add(el);
      try {
        katex.render(el.dataset.tex, el, {
          displayMode: el.classList.contains("math-display"), throwOnError: true, output: "html"});
      } catch (e) {
        failed.set(el, `${(e && e.name) || "Error"}: ${(e && e.message) || e} in ${el.dataset.tex}`);
      }
    }
  };
  const page = document.getElementById("page");
  if (!window.pmFlow) tex(page);
  // Style and layout now, so that every font the page uses starts loading; not for a page the renderer
  // fills (its fonts are all loaded up front, and FLOW_JS takes every block out first).
  if (!window.pmFlow) page.getBoundingClientRect();
  const waits = [...document.images].map((img) => img.decode().catch(() => null));
  if (document.fonts.status !== "loaded") waits.push(document.fonts.ready);
  if (waits.length) {
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(() => resolve("timeout"), timeoutMs); });
    const done = await Promise.race([Promise.all(waits), late]);
    clearTimeout(timer);
    if (done === "timeout") return {timeout: true, errors: [], problems: [], nproblems: 0};
  }
  // Ink that CSS boxes do not bound: a glyph's ink (canvas metrics at its baseline) can reach past KaTeX's
  // boxes, and a list's markers sit outside its items. inkOut(el): how far a display formula's ink (glyphs,
  // SVGs, rules) reaches above and below el's box; markerOut(list): how far its markers reach left of it.
  const ctx = document.createElement("canvas").getContext("2d"), metrics = new Map(), range = document.createRange();
  const fontOf = (cs) => `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
  const measure = (font, text) => {
    const key = font + "\u0000" + text;
    let m = metrics.get(key);
    if (!m) {
      ctx.font = font;
      const t = ctx.measureText(text);
      metrics.set(key, m = [t.fontBoundingBoxAscent, t.actualBoundingBoxAscent, t.actualBoundingBoxDescent, t.width]);
    }
    return m;
  };
  const inkOut = (el) => {
    const B = el.getBoundingClientRect();
    let top = B.top, bottom = B.bottom;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!n.textContent.trim()) continue;
      range.selectNodeContents(n);
      const r = range.getBoundingClientRect();
      if (!r.height) continue;
      const [ascent, up, down] = measure(fontOf(getComputedStyle(n.parentElement)), n.textContent);
      top = Math.min(top, r.top + ascent - up);
      bottom = Math.max(bottom, r.top + ascent + down);
    }
    for (const x of el.querySelectorAll("svg, .frac-line, .overline-line, .underline-line, .hline, .hdashline, .rule")) {
      const r = x.getBoundingClientRect();
      if (r.width || r.height) { top = Math.min(top, r.top); bottom = Math.max(bottom, r.bottom); }
    }
    return Math.max(B.top - top, bottom - B.bottom);
  };
  const markerOut = (list) => {  // an outside marker ("3. ", "• ") ends where its item's content starts
    const L = list.getBoundingClientRect(), first = list.localName === "ol" ? (list.start || 1) : 0;
    let out = 0;
    [...list.children].forEach((li, k) => {
      const cs = getComputedStyle(li);
      if (cs.display !== "list-item" || cs.listStylePosition !== "outside" || cs.listStyleType === "none") return;
      const width = measure(fontOf(cs), list.localName === "ol" ? `${first + k}. ` : "\u2022 ")[3];
      const left = li.getBoundingClientRect().left + parseFloat(cs.borderLeftWidth) + parseFloat(cs.paddingLeft) - width;
      out = Math.max(out, L.left - left);
    });
    return out;
  };
  const flow = window.pmFlow ? window.pmFlow(tex, inkOut, markerOut) : null;  // the renderer's page filling (FLOW_JS), if any
  const errors = [...failed].filter(([el]) => el.isConnected).map(([, e]) => e);
  const tol = 1.5;
  const problems = [];
  const name = (el) => el.localName + (el.className && typeof el.className === "string" ? "." + el.className.split(" ")[0] : "")
    + ` "${(el.textContent || "").trim().slice(0, 40)}"`;
  const outside = (r, b) => r.left < b.left - tol || r.top < b.top - tol || r.right > b.right + tol || r.bottom > b.bottom + tol;
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
    if (inkOut(el) > tol) problems.push(`formula ink outside its block: ${el.dataset.tex.slice(0, 40)}`);
  }
  for (const el of page.querySelectorAll("ul, ol")) {
    if (markerOut(el) > tol) problems.push(`list markers outside the list: ${name(el)}`);
  }
  return {errors, problems: problems.slice(0, 20), nproblems: problems.length, flow};
}
"""  # noqa: E501

# Fills the page from a body that holds more than fits (``PlacedBlock.optional`` filler): takes every
# block element out of the columns (one element per block, in ``_columns`` order; ``optional[k]``
# says whether element ``k`` may be left out), then puts them back in reading order, each in the
# current column if it fits there (a figure that does not may shrink to 90..40 % of the column
# width), else in the next column; a block that fits in no column is left out, a required one by
# evicting optional blocks from the last column first. Before moving on from a column, the next
# few optional paragraphs, lists, tables and formulas are tried in its gap. Footnotes stay at the end of the
# last column; optional headings left at the end of a column, or before another heading, are
# removed. Returns what stayed: ``placed`` ([element index, column] in reading order), ``shrunk``
# ([element index, width %]) and ``missing`` (required elements that fit nowhere).
FLOW_JS = r"""
(optional, tex, inkOut, markerOut) => {
  const page = document.getElementById("page");
  const cols = [...page.querySelectorAll("main > .col")];
  const items = cols.flatMap((c) => [...c.children]);
  if (items.length !== optional.length) return {error: `${items.length} elements for ${optional.length} blocks`};
  const idx = new Map(items.map((el, i) => [el, i]));
  const isNote = (el) => el.classList.contains("footnote");
  const isHeading = (el) => /^h[1-6]$/.test(el.localName);
  const notes = items.filter(isNote), body = items.filter((el) => !isNote(el));
  for (const el of items) el.remove();
  const n = cols.length, last = cols[n - 1];
  for (const el of notes) last.appendChild(el);
  const put = (col, el) => col.insertBefore(el, col === last && notes.length ? notes[0] : null);
  const fits = (col, el) => {
    if (col.scrollHeight > col.clientHeight + 1 || col.scrollWidth > col.clientWidth + 1) return false;
    if (el.classList.contains("math-display") && (el.scrollWidth > el.clientWidth + 1 || inkOut(el) > 1)) return false;
    if ((el.localName === "ul" || el.localName === "ol") && markerOut(el) > 1) return false;
    // Stricter than the final check (1.5 px): scrollHeight is rounded, boxes are not.
    const r = el.getBoundingClientRect(), C = col.getBoundingClientRect();
    const end = col.lastElementChild.getBoundingClientRect();  // a footnote below el, if any
    return r.right <= C.right + 1 && r.bottom <= C.bottom + 1 && end.bottom <= C.bottom + 1;
  };
  const place = (col, el) => {  // true when el now sits in col
    put(col, el);
    tex(el);
    if (fits(col, el)) return true;
    if (el.localName === "figure") {
      for (let pct = 90; pct >= 40; pct -= 10) {
        el.style.cssText = `width: ${pct}%; margin-left: auto; margin-right: auto;`;
        if (fits(col, el)) return true;
      }
      el.removeAttribute("style");
    }
    el.remove();
    return false;
  };
  const done = new Set(), missing = [];
  const gapFillers = (from) => body.slice(from + 1).filter((el) => optional[idx.get(el)] && !done.has(el)
    && (el.localName === "p" || el.localName === "ul" || el.localName === "ol" || el.localName === "table"
        || el.classList.contains("math-display")));
  const skip = (el) => done.has(el) || (misses >= 4 && optional[idx.get(el)]);  // misses: the last column is full
  // Each trial costs a layout. So, until a column first runs out of room, the next 3 blocks are tried in
  // one: blocks only stack down, so when all of them fit at once, each fits after its predecessors, as
  // placing them one by one finds; otherwise they come out again and go one by one.
  let c = 0, misses = 0, runCol = 0;
  for (let k = 0; k < body.length; k++) {
    const el = body[k];
    if (skip(el)) continue;
    if (runCol <= c && c < n) {
      const run = [];
      for (let j = k; j < body.length && run.length < 3; j++) if (!skip(body[j])) run.push(body[j]);
      for (const e of run) { put(cols[c], e); tex(e); }
      if (run.length > 1 && run.every((e) => fits(cols[c], e))) {
        for (const e of run) done.add(e);
        k = body.indexOf(run[run.length - 1]);
        continue;
      }
      for (const e of run) e.remove();
      runCol = c + 1;
    }
    done.add(el);
    let ok = false;
    while (!ok && c < n) {
      ok = place(cols[c], el);
      if (ok || c === n - 1) break;
      for (const filler of gapFillers(k).slice(0, 4)) if (place(cols[c], filler)) done.add(filler);
      c++;
    }
    if (!ok && c === n - 1) misses++;
    if (ok || optional[idx.get(el)]) continue;
    const victims = [...last.children].filter((v) => !isNote(v) && optional[idx.get(v)]);
    put(last, el);
    while (!fits(last, el) && victims.length) victims.pop().remove();
    if (fits(last, el)) c = n - 1; else { el.remove(); missing.push(idx.get(el)); }
  }
  for (const col of cols) {
    let kids = [...col.children].filter((el) => !isNote(el));
    for (let j = kids.length - 1; j >= 0; j--) {
      const el = kids[j];
      if (isHeading(el) && optional[idx.get(el)] && (j === kids.length - 1 || isHeading(kids[j + 1]))) {
        el.remove();
        kids.splice(j, 1);
      }
    }
  }
  const placed = cols.flatMap((col, k) => [...col.children].filter((el) => !isNote(el)).map((el) => [idx.get(el), k]));
  // [style*=width]: a figure tried smaller and then put back whole can keep an empty style attribute.
  const shrunk = [...page.querySelectorAll("main > .col > figure[style*=width]")].map(
    (el) => [idx.get(el), parseInt(el.style.width, 10)]);
  return {placed, shrunk, missing};
}
"""  # noqa: E501

# The filled share of the text area, from the DOM boxes: per ``.col``, the bottom of its last
# non-empty block over the column's height, averaged over the columns (benchmarks/synth.py).
FILL_JS = r"""
() => {
  const cols = [...document.querySelectorAll("#page main .col")];
  if (!cols.length) return 0;
  let sum = 0;
  for (const col of cols) {
    const C = col.getBoundingClientRect();
    let bottom = C.top;
    for (const el of col.children) {
      const r = el.getBoundingClientRect();
      if (r.height > 0) bottom = Math.max(bottom, r.bottom);
    }
    sum += Math.min(1, Math.max(0, (bottom - C.top) / Math.max(1, C.height)));
  }
  return sum / cols.length;
}
"""

# Page geometry from the DOM (``synth.geometry`` turns it into ``schemas.layout`` elements): every box
# in viewport pixels (the screenshot's), in DOM order, which is the reading order. ``furniture``: the
# text leaves outside ``main`` as [above main?, box, text]; ``blocks``: per element of
# ``main > .col`` (one per block, in column order) its parts as [role, box]. A text box spans the
# Range of the element's contents across (tight around the glyphs) and its content box down (whole
# lines: a fallback font's taller glyphs, CJK ones, stay inside); a list item reaches over the list's
# padding, where its marker is drawn; a table is the union of its rows (its caption apart), a picture
# its img/svg.
GEOMETRY_JS = r"""
() => {
  const page = document.getElementById("page"), main = page.querySelector("main");
  const rect = (r) => [r.left, r.top, r.right, r.bottom];
  const textBox = (el) => {  // the glyphs' extent across; down, the element's content box (full line height)
    const g = document.createRange(); g.selectNodeContents(el);
    const t = g.getBoundingClientRect(), r = el.getBoundingClientRect(), cs = getComputedStyle(el);
    // lines tighter than 1.3 em: glyphs (CJK ones from a fallback font) may paint past them; widen by that
    const fs = parseFloat(cs.fontSize), lh = cs.lineHeight === "normal" ? 1.2 * fs : parseFloat(cs.lineHeight);
    const spill = Math.max(0, (1.3 * fs - lh) / 2);
    const top = r.top + parseFloat(cs.paddingTop) + parseFloat(cs.borderTopWidth) - spill;
    const bottom = r.bottom - parseFloat(cs.paddingBottom) - parseFloat(cs.borderBottomWidth) + spill;
    return [t.left, Math.min(t.top, top), t.right, Math.max(t.bottom, bottom)];
  };
  const union = (els) => { const rs = els.map((e) => e.getBoundingClientRect());
    return [Math.min(...rs.map((r) => r.left)), Math.min(...rs.map((r) => r.top)),
            Math.max(...rs.map((r) => r.right)), Math.max(...rs.map((r) => r.bottom))]; };
  const hasText = (el) => (el.textContent || "").trim().length > 0;
  const leaves = (el) => {  // the text-bearing descendants, down to elements that hold text themselves
    const kids = [...el.children].filter(hasText);
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    return kids.length && !own ? kids.flatMap(leaves) : [el];
  };
  const M = main.getBoundingClientRect();
  const furniture = [];
  for (const part of page.children) {
    if (part === main || !hasText(part)) continue;
    for (const leaf of leaves(part)) furniture.push([part.getBoundingClientRect().top < M.top, textBox(leaf), leaf.textContent.trim()]);
  }
  const blocks = [...main.querySelectorAll(":scope > .col")].flatMap((col) => [...col.children]).map((el) => {
    const tag = el.localName;
    if (/^h[1-6]$/.test(tag)) return [[tag, textBox(el)]];
    if (tag === "ul" || tag === "ol") {  // an item's box reaches left over the list's padding, where its marker is
      const left = el.getBoundingClientRect().left;
      return [...el.children].map((li) => { const b = textBox(li); return ["li", [Math.min(left, b[0]), b[1], b[2], b[3]]]; });
    }
    if (tag === "table") {
      const cap = el.querySelector(":scope > caption"), rows = [...el.querySelectorAll("tr")];
      return [...(cap ? [["caption", textBox(cap)]] : []), ["table", union(rows.length ? rows : [el])]];
    }
    if (tag === "figure") {
      const pic = el.querySelector("img, svg"), cap = el.querySelector("figcaption");
      return [...(pic ? [["picture", rect(pic.getBoundingClientRect())]] : []), ...(cap ? [["caption", textBox(cap)]] : [])];
    }
    if (el.classList.contains("math-display") || (tag === "p" && el.querySelector(".math-inline") && !el.textContent.trim().length))
      return [["formula", textBox(el)]];
    if (el.classList.contains("footnote")) return [["footnote", textBox(el)]];
    return [["text", textBox(el)]];
  });
  return {furniture, blocks};
}
"""  # noqa: E501

# Runs in a standalone page (the saved ``html/<id>.html``) once KaTeX has loaded.
PAGE_SCRIPT = ("window.pmReport = null;\n(" + CHECK_JS.strip() + ")(" + str(DEFAULT_TIMEOUT_MS)
               + ").then((r) => { window.pmReport = r; });\n")

# The renderer's reused shell: KaTeX's CSS and script load once; each page then swaps in its own
# ``<html lang>``, ``<style>``, ``<body class>`` and body (``_SWAP_JS``) and runs ``CHECK_JS``, then, on a
# page that passed, ``GEOMETRY_JS``: one round trip a page.
_SHELL = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>pagemill synth</title>
<link rel="stylesheet" href="{katex_base}/katex.min.css">
<script src="{katex_base}/katex.min.js"></script>
<style id="pm-style"></style>
</head>
<body></body>
</html>
"""
_SWAP_JS = "async ([lang, css, bodyClass, body, timeoutMs, optional]) => {\n" \
    "  const flags = optional ? [...optional].map((c) => c === '1') : null;  // one string: cheap to send\n" \
    "  // A page to fill stays undrawn (display: none) until FLOW_JS runs: a frame while images decode\n" \
    "  // would lay out, paint and raster the overfull body for nothing.\n" \
    "  window.pmFlow = optional ? (tex, inkOut, markerOut) => {\n" \
    "    document.body.removeAttribute('style');\n" \
    "    return (" + FLOW_JS.strip() + ")(flags, tex, inkOut, markerOut);\n" \
    "  } : null;\n" \
    "  if (optional) document.body.style.display = 'none';\n" \
    "  document.documentElement.lang = lang;\n" \
    "  document.getElementById('pm-style').textContent = css;\n" \
    "  document.body.className = bodyClass;\n" \
    "  document.body.innerHTML = body;\n" \
    "  window.scrollTo(0, 0);\n" \
    "  const report = await (" + CHECK_JS.strip() + ")(timeoutMs);\n" \
    "  const flow = report.flow, failed = flow && (flow.error || flow.missing.length);\n" \
    "  if (!report.timeout && !report.errors.length && !report.nproblems && !failed)\n" \
    "    report.geometry = (" + GEOMETRY_JS.strip() + ")();\n" \
    "  return report;\n}"
_PARTS = re.compile(r'<html lang="(?P<lang>[^"]*)">.*?<style>\n(?P<css>.*?)</style>\n</head>\n'
                    r'<body class="(?P<cls>[^"]*)">\n(?P<body>.*)<script>.*</script>\n</body>\n</html>\n?\Z', re.DOTALL)


def html_parts(html: str) -> tuple[str, str, str, str]:
    """``(lang, css, body class, body)`` of a ``render_html`` document: what the shell swaps in."""
    m = _PARTS.search(html)
    if m is None:
        raise ValueError("not a synth page document")
    return m["lang"], m["css"], m["cls"], m["body"]


_INLINE = re.compile(
    r"\\\((.+?)\\\)|\*\*(.+?)\*\*|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])|\[\^([^\]\s]+)\]", re.DOTALL
)
_NUMERIC = re.compile(r"^[\s$€£%()+\-−.,0-9]+$")


def rich(text: str) -> Markup:
    """Escape block text and turn its inline markup into HTML: ``\\( \\)`` math, ``**bold**``,
    ``*italic*`` and footnote markers ``[^m]`` (drawn as a superscript ``m``, as printed pages do)."""
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(str(escape(text[pos:m.start()])))
        if m.group(1) is not None:
            out.append(f'<span class="math-inline" data-tex="{escape(m.group(1))}"></span>')
        elif m.group(2) is not None:
            out.append(f"<strong>{rich(m.group(2))}</strong>")
        elif m.group(3) is not None:
            out.append(f"<em>{rich(m.group(3))}</em>")
        else:
            out.append(f'<sup class="fn-marker">{escape(m.group(4))}</sup>')
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
                 (f'<polygon points="0,{ht} {140 + h[4] % 80},{110 + h[5] % 60} {330 + h[6] % 60},{ht}" '
                  'fill="#8aa39b"/>'),
                 (f'<polygon points="220,{ht} {420 + h[7] % 70},{90 + h[8] % 60} {w},{200 + h[9] % 40} {w},{ht}" '
                  'fill="#6b8579"/>'),
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
    env.filters["chart_svg"] = lambda chart: Markup(chart_svg(chart))
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


def _column_order(spec: PageSpec) -> list[list[int]]:
    """Indexes into ``spec.blocks`` per column, in the order the template draws them."""
    n = max(1, spec.columns)
    cols: list[list[int]] = [[] for _ in range(n)]
    for i, pb in enumerate(spec.blocks):
        cols[min(max(pb.column, 0), n - 1)].append(i)
    return cols


def _columns(spec: PageSpec) -> list[list[PlacedBlock]]:
    return [[spec.blocks[i] for i in col] for col in _column_order(spec)]


def filled_spec(spec: PageSpec, flow: dict) -> PageSpec:
    """The spec of what ``FLOW_JS`` kept on the page: its ``placed`` blocks in reading order, in their
    columns, figures at their ``shrunk`` width, then the footnotes; none optional any more (the page
    is full, so drawing it again needs no filling and gives the same DOM)."""
    order = [i for col in _column_order(spec) for i in col]
    shrunk = {order[k]: pct for k, pct in flow["shrunk"]}
    n = max(1, spec.columns)
    blocks: list[PlacedBlock] = []
    for k, column in flow["placed"]:
        i = order[k]
        block = spec.blocks[i].block
        if i in shrunk and isinstance(block, Figure):
            block = replace(block, width_pct=shrunk[i])
        blocks.append(PlacedBlock(block, column))
    blocks.extend(PlacedBlock(pb.block, n - 1) for pb in spec.blocks if isinstance(pb.block, Footnote))
    return replace(spec, blocks=tuple(blocks))


def render_html(spec: PageSpec, katex_base: str | None = None) -> str:
    """The page's HTML (deterministic: a function of the spec and the KaTeX location only)."""
    if spec.layout not in LAYOUTS:
        raise RecordError("synth_unknown_layout", f"no template for layout {spec.layout!r}")
    base = katex_base if katex_base is not None else katex_dist().as_uri()
    template = _ENV.get_template(f"{spec.layout}.html.j2")
    return template.render(spec=spec, columns=_columns(spec), css=Markup(_CSS), katex_base=base,
                           page_script=Markup(PAGE_SCRIPT))


@dataclass(frozen=True)
class RenderedPage:
    png: bytes
    html: str
    width: int
    height: int
    spec: PageSpec | None = None  # what the page shows, when the renderer left optional blocks out
    geometry: dict | None = None  # GEOMETRY_JS's boxes (HTML pages); synth.geometry makes elements of them


class HtmlRenderer:
    """Renders ``PageSpec``s through one reused offline Chromium page; not thread-safe (one per worker).

    The page loads a shell document once (KaTeX's CSS and script from its ``dist``); each spec's
    style and body are then swapped into it (``_SWAP_JS``), typeset and checked in one round trip,
    and the page box is captured with ``Page.captureScreenshot``. Nothing is written per page: the
    only file is the shell in the renderer's own folder, the one other directory the page may read.
    """

    def __init__(self, work_dir: Path | str | None = None, *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 browser: Browser | None = None, png_compress_level: int = 1) -> None:
        self._dist = katex_dist()
        if work_dir is not None:
            Path(work_dir).mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix="synth-html-", dir=work_dir)).resolve()
        self._thread = threading.get_ident()  # where its pages were made: Playwright's objects work only there
        self._shell = self._dir / "shell.html"
        self._shell.write_text(_SHELL.format(katex_base=self._dist.as_uri()), encoding="utf-8")
        self._browser = browser
        # One offline page per page size (slides are landscape): switching a page's viewport costs
        # ~20 ms of CPU (browser, renderer, compositor), more than a second page costs to keep.
        self._pages: dict[tuple[int, int], tuple[Page, CDPSession]] = {}
        self._page: Page | None = None  # the page of the last render
        self._cdp: CDPSession | None = None
        self.timeout_ms = timeout_ms
        # Unfiltered rows deflated by ISA-L (schemas.png), as rasterised PDF pages are stored: a rendered
        # page is as flat as they are. Pillow's adaptive filters cost ~45 ms a page for ~4% smaller files.
        self._encode_cfg = ImageEncoding(png_compress_level=png_compress_level, png_filter="none")

    @property
    def page_dir(self) -> Path:
        """The renderer's folder (holds the shell document; an allowed directory of the offline page)."""
        return self._dir

    def _get_page(self, size: tuple[int, int]) -> Page:
        entry = self._pages.get(size)
        if entry is None or entry[0].is_closed():
            if entry is not None:
                self._drop_page(size)
            while len(self._pages) >= MAX_PAGES:
                self._drop_page(next(iter(self._pages)))  # the oldest
            browser = self._browser if self._browser is not None else shared_browser()
            page = new_offline_page(browser, [self._dist, self._dir], viewport=size)
            self._thread = threading.get_ident()
            # Registered (and current) before goto, so that an error closes this page and no other.
            self._pages[size] = self._page, self._cdp = page, page.context.new_cdp_session(page)
            page.goto(self._shell.as_uri(), wait_until="load", timeout=self.timeout_ms)
            # Every KaTeX face loaded up front: FLOW_JS typesets and measures each block as it tries
            # it, so no font may still be loading then (a page's layout must not depend on history).
            page.evaluate("() => Promise.all([...document.fonts].map((f) => f.load().catch(() => null)))")
            page.evaluate("() => { window.pmSwap = " + _SWAP_JS + "; }")  # compiled once, called per page
            entry = self._pages[size]
        self._page, self._cdp = entry
        return entry[0]

    def _drop_page(self, size: tuple[int, int] | None = None) -> None:
        """Close the page of ``size`` (default: the last one used)."""
        if size is None:
            size = next((k for k, (page, _) in self._pages.items() if page is self._page), None)
        entry = self._pages.pop(size, None) if size is not None else None
        if entry is not None:
            try:
                entry[0].context.close()
            except PlaywrightError:
                pass
            if entry[0] is self._page:
                self._page, self._cdp = None, None

    def _swap(self, page: Page, args: list) -> dict:
        """``window.pmSwap(...args)`` (``_SWAP_JS``) through the page's CDP session: V8 returns the report as
        JSON, without Playwright's serialisers on either side of its driver (~5 ms of CPU a page)."""
        assert self._cdp is not None
        reply = self._cdp.send("Runtime.evaluate", {
            "expression": "pmSwap(" + json.dumps(args) + ")", "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in reply:
            details = reply["exceptionDetails"]
            message = (details.get("exception") or {}).get("description") or details.get("text", "")
            raise PlaywrightError(f"page script failed: {message}")
        return reply["result"]["value"]

    # ``synth.pages`` hands this renderer specs with optional filler: it fills the page itself.
    fills_pages = True

    def render(self, spec: PageSpec) -> RenderedPage:
        """The page of ``spec``; with optional blocks, the page filled from them (``FLOW_JS``) and the
        spec of what it shows in ``RenderedPage.spec``, whose ``render_html`` is ``RenderedPage.html``."""
        html = render_html(spec, self._dist.as_uri())
        lang, css, body_class, body = html_parts(html)
        size = (spec.width_px, spec.height_px)
        optional = [spec.blocks[i].optional for col in _column_order(spec) for i in col]
        final: PageSpec | None = None
        try:
            page = self._get_page(size)
            report = self._swap(page, [lang, css, body_class, body, self.timeout_ms,
                                       "".join("01"[o] for o in optional) if any(optional) else None])
            if report.get("timeout"):
                raise PlaywrightTimeout(f"images or fonts not ready in {self.timeout_ms} ms")
            if report["errors"]:
                raise RecordError("synth_katex_error", f"{spec.id}: " + "; ".join(report["errors"][:3]))
            flow = report.get("flow")
            if flow is not None:
                if "error" in flow:
                    raise RecordError("synth_fill_error", f"{spec.id}: {flow['error']}")
                if flow["missing"]:
                    raise RecordError("synth_overflow", f"{spec.id}: {len(flow['missing'])} required blocks "
                                      "fit in no column")
                final = filled_spec(spec, flow)
                html = render_html(final, self._dist.as_uri())
            if report["nproblems"]:
                problems = "; ".join(report["problems"][:3])
                raise RecordError("synth_overflow", f"{spec.id}: {report['nproblems']} geometry problems: " + problems)
            geometry = report["geometry"]
            assert self._cdp is not None
            # Chromium's PNG is only a lossless carrier here (re-encoded below like the corpus), so
            # let it use its fast zlib settings.
            shot = self._cdp.send("Page.captureScreenshot", {
                "format": "png", "optimizeForSpeed": True, "captureBeyondViewport": False, "fromSurface": True,
                "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}})
        except PlaywrightTimeout as exc:
            self._drop_page()  # a hung page must not poison the next one
            raise RecordError("synth_timeout", f"{spec.id}: page did not finish in {self.timeout_ms} ms") from exc
        except PlaywrightError:
            self._drop_page()
            raise
        pixels = decode_rgb(base64.b64decode(shot["data"]))
        if pixels.shape[1::-1] != size:
            raise RecordError("synth_bad_size", f"{spec.id}: screenshot {pixels.shape[1::-1]} != {size}")
        grey = grey_if_achromatic(pixels)
        png = encode_image(pixels if grey is None else grey, self._encode_cfg)
        return RenderedPage(png=png, html=html, width=size[0], height=size[1], spec=final, geometry=geometry)

    def close(self) -> None:
        """Close the renderer's pages and remove its folder. From another thread than the one that made its
        pages (a runner tearing a DoFn down) only the folder goes: its pages cannot be reached from there, and
        they close with their browser, which closes with its process."""
        if threading.get_ident() == self._thread:
            for size in list(self._pages):
                self._drop_page(size)
        self._pages.clear()
        self._page = self._cdp = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> HtmlRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
