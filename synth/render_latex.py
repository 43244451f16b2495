"""LaTeX renderer for JinaOCRSynth pages: a ``PageSpec`` -> LaTeX source -> ``pdflatex`` -> PNG.

Nemotron-Parse (section 3.4.4) adds LaTeX-rendered pages to its synthetic data; this renderer is
the counterpart of ``synth.render_html`` and returns the same ``RenderedPage`` (its ``html`` field
holds the ``.tex`` source). The page is an ``article`` whose paper has the spec's aspect ratio
(about the area of US letter), one column or ``multicols*`` with the spec's column breaks,
``fancyhdr`` furniture (only the header, footer and page-number text the spec has), unnumbered
headings, escaped paragraph text with ``**bold**``/``*italic*``/``\\( \\)`` inline markup, display
math in ``\\[ \\]`` (amsmath, amssymb, mathrsfs, bm), ``tabular`` tables honouring rowspan/colspan
and header rows (booktabs rules when ruled, ``multirow`` for row spans), lists, figures (the
block's picture or chart PNG, else a framed placeholder) with their caption, and footnotes with
the spec's own markers (``\\footnotemark[m]``/``\\footnotetext[m]``). The page's theme
(``synth.themes``) picks the font package (psnfss or lmodern), the heading colour and scales the
margins (``page_style``).

Every job runs ``pdflatex -no-shell-escape -halt-on-error -interaction=nonstopmode`` in a fresh
temporary directory (removed afterwards) under a wall-clock timeout. Rejections, as
``schemas.deadletter.RecordError``: ``synth_latex_language`` (a page not in English),
``synth_latex_failed`` (non-zero exit or no PDF; the message
is the first error lines of the log), ``synth_latex_timeout``, ``synth_overflow`` (more than one
page even with its figures shrunk to ``SMALL_FIGURE_HEIGHT``, or a line overfull by more than
``OVERFULL_LIMIT_PT``). Page 1 is rasterized with
``schemas.pdf_pages.rasterize_pdf_page`` at the spec's longest side and encoded like the corpus.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Self

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from PIL import Image

from schemas.deadletter import RecordError
from schemas.images import ImageEncoding, encode_image
from schemas.pdf_pages import pdf_line_boxes, pdf_page_count, rasterize_pdf_page
from schemas.tables import place_cells
from synth.blocks import (
    Block,
    Figure,
    Footnote,
    Formula,
    Heading,
    ListBlock,
    PageSpec,
    Paragraph,
    Table,
    TableCell,
)
from synth.charts import chart_png
from synth.render_html import RenderedPage
from synth.tables import header_rows

VERSION = "3"  # 2: ☑, ASCII quotes and ligature pairs, a leading [ drawn as the reference says; 3: φ ε as
# \varphi \varepsilon (the glyphs the reference names), math reading files refused, pdflatex paranoid
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates_latex"
DEFAULT_TIMEOUT_S = 30.0
OVERFULL_LIMIT_PT = 12.0  # a line sticking out further than this into the margin is an overflow
LETTER_AREA_IN2 = 8.5 * 11.0
FIGURE_HEIGHT = 0.24  # of \textheight, at most
SMALL_FIGURE_HEIGHT = 0.1  # the second try of a page that ran over

# Per-layout look: base font size (10-12: article, else extarticle), margins (inches), sans-serif.
STYLES: dict[str, dict[str, object]] = {
    "report": {"font_pt": 11, "margin": 0.9, "sans": False},
    "paper": {"font_pt": 10, "margin": 0.7, "sans": False},
    "newspaper": {"font_pt": 10, "margin": 0.55, "sans": False},
    "blog": {"font_pt": 11, "margin": 0.9, "sans": True},
    "slides": {"font_pt": 14, "margin": 0.6, "sans": True},  # 16:9 paper; 14pt is extsizes' extarticle
    "infographic": {"font_pt": 11, "margin": 0.7, "sans": True},
    "form": {"font_pt": 10, "margin": 0.75, "sans": True},
    "invoice": {"font_pt": 10, "margin": 0.75, "sans": True},
}
_DEFAULT_STYLE: dict[str, object] = {"font_pt": 10, "margin": 0.75, "sans": False}

_SPECIALS = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
             "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}
# Text-mode glyphs pdflatex's utf8 input does not set up (or sets up as math only).
# ☑ is a box with a check mark drawn in it (amssymb has no such glyph; ⊠ is ☒'s): it keeps the box's width.
_CHECKED_BOX = r"{\sbox0{$\square$}\rlap{\usebox0}\makebox[\wd0]{\raisebox{.1ex}{\scalebox{.75}{$\checkmark$}}}}"
_TEXT_UNICODE = {"☐": r"$\square$", "☑": _CHECKED_BOX, "☒": r"$\boxtimes$", "−": r"\textminus{}",
                 "≤": r"$\leq$", "≥": r"$\geq$", "≠": r"$\neq$", "±": r"$\pm$", "→": r"$\rightarrow$",
                 "←": r"$\leftarrow$", "∞": r"$\infty$", "≈": r"$\approx$", "✓": r"$\checkmark$",
                 "•": r"\textbullet{}", "·": r"\textperiodcentered{}", "…": r"\dots{}", "\u00a0": "~",
                 # T1 fonts draw ' and ` as the curly quotes ’ and ‘: textcomp's glyphs are the ASCII ones.
                 "'": r"\textquotesingle{}", "`": r"\textasciigrave{}"}
# Pairs the T1 fonts join into one other glyph (-- –, << «, >> », ,, „); an empty group between keeps both.
# (!` and ?` would give ¡ and ¿, but ` is always \textasciigrave, which forms no ligature.)
_LIGATURE_PAIRS = frozenset({"--", "<<", ">>", ",,"})
# Unicode glyphs inside math, as macros (the formula suite's ``unicode`` category).
_MATH_UNICODE = {"α": r"\alpha", "β": r"\beta", "γ": r"\gamma", "δ": r"\delta", "ε": r"\varepsilon",
                 "θ": r"\theta", "λ": r"\lambda", "μ": r"\mu", "π": r"\pi", "ρ": r"\rho", "σ": r"\sigma",
                 "τ": r"\tau", "φ": r"\varphi", "ω": r"\omega", "Σ": r"\Sigma", "Ω": r"\Omega", "Δ": r"\Delta",
                 "≤": r"\leq", "≥": r"\geq", "≠": r"\neq", "∑": r"\sum", "∏": r"\prod", "∫": r"\int",
                 "∈": r"\in", "∉": r"\notin", "∀": r"\forall", "∃": r"\exists", "→": r"\to", "←": r"\leftarrow",
                 "∞": r"\infty", "×": r"\times", "·": r"\cdot", "±": r"\pm", "≈": r"\approx", "ℝ": r"\mathbb{R}",
                 "ℕ": r"\mathbb{N}", "ℤ": r"\mathbb{Z}", "ℚ": r"\mathbb{Q}", "ℂ": r"\mathbb{C}", "∂": r"\partial",
                 "∇": r"\nabla", "⊂": r"\subset", "⊆": r"\subseteq", "∪": r"\cup", "∩": r"\cap", "−": "-"}
_MATH_UNICODE_RE = re.compile("|".join(map(re.escape, _MATH_UNICODE)))
# Math goes to pdflatex verbatim: refuse what reads or writes files, or builds control sequences or
# characters that a check of the source cannot see (``^^5c`` is a backslash, ``\csname``/``\scantokens``
# make any name). pdflatex also runs with ``openin_any=p`` and ``openout_any=p`` (``pdflatex_env``).
_UNSAFE_MATH = re.compile(
    r"\\(?:input|include|InputIfFileExists|IfFileExists|openin|read|readline|openout|write|immediate|closein|"
    r"closeout|csname|catcode|scantokens|endlinechar|newread|newwrite|pdffiledump|pdfmdfivesum|pdffilesize|"
    r"pdffilemoddate|pdfobj|pdfximage|includegraphics|special|pdfliteral)(?![A-Za-z])|\^\^")

# Inline markup, as in synth.render_html: \( math \), **bold**, *italic*; plus [^m] footnote markers.
_INLINE = re.compile(r"\\\((.+?)\\\)|\*\*(.+?)\*\*|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])|\[\^([^\]\s]+)\]",
                     re.DOTALL)
_NUMERIC = re.compile(r"^[\s$€£%()+\-−.,0-9]+$")
_FILE_LINE_ERROR = re.compile(r"^\S+\.tex:\d+: ")
_OVERFULL = re.compile(r"Overfull \\[hv]box \((\d+(?:\.\d+)?)pt too (?:wide|high)")


def escape_text(text: str) -> str:
    """Plain text -> LaTeX: escape the specials ``& % $ # _ { } ~ ^ \\``, map awkward Unicode and keep T1's
    quotes and ligatures from turning ASCII into other characters, so the page draws the reference's text."""
    out: list[str] = []
    for i, ch in enumerate(text):
        out.append(_SPECIALS.get(ch) or _TEXT_UNICODE.get(ch) or ch)
        if text[i:i + 2] in _LIGATURE_PAIRS:
            out.append("{}")
    return "".join(out)


def line_text(text: str) -> str:
    """A text-layer line as the reference writes it: ☑ is drawn as two glyphs (□ and ✓), which read back
    as ☑. (pdfium's own markers, U+FFFE and private-use code points, are text already:
    ``schemas.pdf_pages.unmarked_text``.)"""
    return text.replace("□✓", "☑").strip()


def math_source(latex: str) -> str:
    """Formula source for pdflatex: Unicode math glyphs become macros (``α`` -> ``\\alpha``, ``φ`` ->
    ``\\varphi``: the glyph the character names). Math that touches files or builds hidden control sequences
    (``_UNSAFE_MATH``) raises ``RecordError("synth_latex_unsafe")``."""
    m = _UNSAFE_MATH.search(latex)
    if m is not None:
        raise RecordError("synth_latex_unsafe", f"math may not use {m.group(0)!r}: {latex[:80]!r}")
    return _MATH_UNICODE_RE.sub(lambda m: _MATH_UNICODE[m.group(0)] + " ", latex)


def _marker(m: str) -> str:
    return f"\\footnotemark[{m}]" if m.isdigit() else f"\\textsuperscript{{{escape_text(m)}}}"


def rich(text: str) -> str:
    """Block text -> LaTeX: escaped, with inline math kept and emphasis/footnote markers converted."""
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(escape_text(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append(f"\\({math_source(m.group(1))}\\)")
        elif m.group(2) is not None:
            out.append(f"\\textbf{{{rich(m.group(2))}}}")
        elif m.group(3) is not None:
            out.append(f"\\textit{{{rich(m.group(3))}}}")
        else:
            out.append(_marker(m.group(4)))
        pos = m.end()
    out.append(escape_text(text[pos:]))
    return "".join(out)


# --- blocks ----------------------------------------------------------------------------------


def _heading(b: Heading) -> str:
    size = {1: r"\LARGE", 2: r"\Large", 3: r"\large"}.get(b.level, r"\normalsize")
    return f"{{\\noindent{size}\\bfseries\\pmaccent {rich(b.text)}\\par}}"


def _grid(table: Table) -> tuple[int, list[list[tuple[str, TableCell | None, int]]]]:
    """The table's full grid: per row, per column, ("cell", cell, 0) at a cell's origin,
    ("covered", origin cell, rows left below) under a rowspan, ("hspan", None, 0) inside a colspan."""
    placed = place_cells(table.rows)
    taken = {pos: (cell, dr) for pos, (cell, dr, _) in placed.items()}
    origins = {pos: cell for pos, (cell, dr, dc) in placed.items() if dr == 0 and dc == 0}
    width = max([0] + [c + 1 for (_, c) in taken])
    n_rows = max([len(table.rows)] + [r + 1 for (r, _) in taken])
    grid: list[list[tuple[str, TableCell | None, int]]] = []
    for r in range(n_rows):
        line: list[tuple[str, TableCell | None, int]] = []
        for c in range(width):
            if (r, c) in origins:
                line.append(("cell", origins[(r, c)], 0))
            elif (r, c) in taken:
                cell, dr = taken[(r, c)]
                # column of the origin of this span (leftmost column with the same cell on the row)
                left = c > 0 and (r, c - 1) in taken and taken[(r, c - 1)][0] is cell
                if left:
                    line.append(("hspan", None, 0))
                else:
                    line.append(("covered", cell, max(1, cell.rowspan) - 1 - dr))
            else:
                line.append(("empty", None, 0))
        grid.append(line)
    return width, grid


def _cell_text(cell: TableCell) -> str:
    body = rich(cell.text)
    if cell.header and body:
        body = f"\\textbf{{{body}}}"
    if cell.rowspan > 1 and body:
        body = f"\\multirow{{{cell.rowspan}}}{{*}}{{{body}}}"
    return body


def _table(b: Table) -> str:
    width, grid = _grid(b)
    ruled = b.style == "ruled"
    boxed = b.style == "grid"
    numeric_cols = [all(e[0] != "cell" or not e[1] or not e[1].text or e[1].header or bool(_NUMERIC.match(e[1].text))
                        for e in (grid[r][c] for r in range(len(grid)))) for c in range(width)]
    align = ["r" if numeric_cols[c] and c > 0 else "l" for c in range(width)]
    colspec = ("|" + "|".join(align) + "|") if boxed else "".join(align)
    n_head = header_rows(b)
    lines: list[str] = [f"\\begin{{tabular}}{{{colspec}}}"]
    lines.append(r"\toprule" if ruled else r"\hline" if boxed else "")
    for r, row in enumerate(grid):
        cells: list[str] = []
        c = 0
        while c < width:
            kind, cell, _ = row[c]
            span = 1
            while c + span < width and row[c + span][0] == "hspan":
                span += 1
            text = _cell_text(cell) if kind == "cell" and cell is not None else ""
            if span > 1:
                sep = "|" if boxed else ""
                a = "c" if span > 1 else align[c]
                lead = sep if boxed and c == 0 else ""
                text = f"\\multicolumn{{{span}}}{{{lead}{a}{sep}}}{{{text}}}"
            elif c == 0:
                # The rule or \\ before a row reads a leading [ as its optional argument (* too, for \\).
                text = "{}" + text
            cells.append(text)
            c += span
        end = " \\\\"
        if r < len(grid) - 1:
            # rules between rows: not across cells that a rowspan continues through
            open_cols = [c for c in range(width) if grid[r + 1][c][0] != "covered"
                         and not (grid[r + 1][c][0] == "hspan" and _covered_left(grid[r + 1], c))]
            if boxed:
                end += _clines(open_cols, width, r"\hline", "cline")
            elif ruled and n_head and r == n_head - 1:
                end += _clines(open_cols, width, r"\midrule", "cmidrule")
        else:
            end += r" \bottomrule" if ruled else r" \hline" if boxed else ""
        lines.append(" & ".join(cells) + end)
    lines.append(r"\end{tabular}")
    table_src = "\n".join(x for x in lines if x)
    caption = f"{{\\small\\itshape {rich(b.caption)}\\par}}\\nopagebreak[4]\n" if b.caption else ""
    return f"{caption}{{\\noindent\\small\\pmfit{{{table_src}}}\\par}}"


def _covered_left(line: list[tuple[str, TableCell | None, int]], c: int) -> bool:
    while c >= 0 and line[c][0] == "hspan":
        c -= 1
    return c >= 0 and line[c][0] == "covered"


def _clines(open_cols: list[int], width: int, full: str, partial: str) -> str:
    if len(open_cols) == width:
        return " " + full
    out = []
    run: list[int] = []
    for c in open_cols + [-10]:
        if run and c != run[-1] + 1:
            out.append(f"\\{partial}{{{run[0] + 1}-{run[-1] + 1}}}")
            run = []
        if c >= 0:
            run.append(c)
    return " " + " ".join(out)


def _list(b: ListBlock) -> str:
    env = "enumerate" if b.ordered else "itemize"
    items = "\n".join(f"\\item{{}}{rich(i)}" for i in b.items)  # {}: an item's leading [ is not \item's label
    return f"\\begin{{{env}}}\\setlength{{\\itemsep}}{{0pt}}\n{items}\n\\end{{{env}}}"


def _figure(b: Figure, images: dict[str, bytes], height: float = FIGURE_HEIGHT) -> str:
    png = chart_png(b.chart) if b.chart is not None else b.image_png
    if png is not None:
        name = f"fig{len(images)}.png"
        images[name] = png
        art = f"\\includegraphics[width=0.9\\linewidth,height={height}\\textheight,keepaspectratio]{{{name}}}"
    else:
        art = r"\framebox[0.9\linewidth]{\rule{0pt}{0.28\linewidth}}"
    return f"{{\\centering {art}\\par\\nopagebreak[4]\\small\\itshape {rich(b.caption)}\\par}}"


def _footnote(b: Footnote) -> str:
    if b.marker.isdigit():
        return f"\\footnotetext[{b.marker}]{{{rich(b.text)}}}"
    return f"{{\\footnotesize\\textsuperscript{{{escape_text(b.marker)}}}{rich(b.text)}\\par}}"


def block_latex(block: Block, images: dict[str, bytes], figure_height: float = FIGURE_HEIGHT) -> str:
    """One body block as LaTeX (``images`` collects embedded figure PNGs by file name; a figure is at most
    ``figure_height`` of the text height)."""
    if isinstance(block, Heading):
        return _heading(block)
    if isinstance(block, Paragraph):
        return rich(block.text)
    if isinstance(block, Formula):
        src = math_source(block.latex.strip())
        return f"\\[ {src} \\]" if block.display else f"\\( {src} \\)"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, ListBlock):
        return _list(block)
    if isinstance(block, Figure):
        return _figure(block, images, figure_height)
    if isinstance(block, Footnote):
        return _footnote(block)
    raise TypeError(f"unknown block type {type(block).__name__}")


def _environment() -> Environment:
    return Environment(
        loader=FileSystemLoader(str(TEMPLATE_DIR)),
        block_start_string=r"\BLOCK{", block_end_string="}",
        variable_start_string=r"\VAR{", variable_end_string="}",
        comment_start_string=r"\#{", comment_end_string="}",
        line_comment_prefix="%#",
        trim_blocks=True, lstrip_blocks=True, autoescape=False, keep_trailing_newline=True,
        undefined=StrictUndefined,
    )


_ENV = _environment()


def paper_size_bp(spec: PageSpec) -> tuple[float, float]:
    """Paper size in PostScript points: the spec's aspect ratio at about the area of US letter."""
    aspect = spec.width_px / spec.height_px
    width_in = math.sqrt(LETTER_AREA_IN2 * aspect)
    return round(width_in * 72, 3), round(width_in / aspect * 72, 3)


def render_latex(spec: PageSpec, figure_height: float = FIGURE_HEIGHT) -> tuple[str, dict[str, bytes]]:
    """The page's LaTeX source and the image files it includes (deterministic in the spec)."""
    images: dict[str, bytes] = {}
    n = max(1, spec.columns)
    columns: list[list[str]] = [[] for _ in range(n)]
    for pb in spec.blocks:
        src = block_latex(pb.block, images, figure_height)
        # A block after \begin{multicols*}{n} or \columnbreak must not start with [ (their optional arguments).
        columns[min(max(pb.column, 0), n - 1)].append("{}" + src if src.startswith("[") else src)
    fur = spec.furniture
    furniture = {"header": escape_text(fur.header), "footer": escape_text(fur.footer),
                 "page_number": escape_text(fur.page_number)}
    w, h = paper_size_bp(spec)
    tex = _ENV.get_template("page.tex.j2").render(
        style=page_style(spec), paper_w=f"{w:.3f}", paper_h=f"{h:.3f}",
        furniture=furniture, columns=columns).lstrip("\n")
    return tex, images


def page_style(spec: PageSpec) -> dict[str, object]:
    """The layout's ``STYLES`` entry with the page's theme applied: margins scaled (never widened), the theme's font
    package (roman or sans by the layout) and accent colour (``xcolor`` HTML hex, for headings)."""
    style = dict(STYLES.get(spec.layout, _DEFAULT_STYLE))
    theme = spec.theme
    if theme is None:
        return {**style, "font_package": "lmodern", "accent": None}
    # LaTeX pages have no trimming: wider margins than the layout's would push content to a second page.
    style["margin"] = round(float(style["margin"]) * min(theme.margin, 1.0), 3)  # type: ignore[arg-type]
    style["font_package"] = theme.latex_sans if style["sans"] else theme.latex_serif
    style["accent"] = theme.accent.lstrip("#").upper()
    return style


def log_excerpt(log: str, max_lines: int = 8) -> str:
    """The first error of a TeX log (the ``!`` or ``file:line:`` line and what follows), else its last lines."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("!") or _FILE_LINE_ERROR.match(line):
            excerpt = []
            for x in lines[i:i + max_lines]:
                if x.startswith("Here is how much"):
                    break
                excerpt.append(x)
            return "\n".join(excerpt).strip()
    return "\n".join(lines[-max_lines:]).strip()


def pdflatex_env() -> dict[str, str]:
    """pdflatex's environment: kpathsea's ``openin_any=p`` and ``openout_any=p`` (no reading or writing of
    dot files, parent folders or absolute paths outside the job; TeX's own files are still found through
    its search paths) and shell escape off, whatever the host's texmf.cnf says."""
    return {**os.environ, "openin_any": "p", "openout_any": "p", "shell_escape": "f"}


class LatexRenderer:
    """Renders ``PageSpec``s with ``pdflatex``, one fresh temp dir per job; safe to share across threads."""

    def __init__(self, work_dir: Path | str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 pdflatex: str = "pdflatex", png_compress_level: int = 1) -> None:
        exe = shutil.which(pdflatex)
        if exe is None:
            raise RuntimeError(f"{pdflatex} not found: run scripts/install_latex.sh")
        self._exe = exe
        self._work_dir = Path(work_dir) if work_dir is not None else None
        if self._work_dir is not None:
            self._work_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self._encode_cfg = ImageEncoding(png_compress_level=png_compress_level)

    def compile(self, tex: str, images: dict[str, bytes] | None = None, name: str = "page") -> bytes:
        """Compile ``tex`` to PDF bytes in a fresh temp dir (raises ``RecordError`` on failure)."""
        job = Path(tempfile.mkdtemp(prefix="synth-latex-", dir=self._work_dir))
        try:
            (job / "page.tex").write_text(tex, encoding="utf-8")
            for fname, data in (images or {}).items():
                (job / fname).write_bytes(data)
            cmd = [self._exe, "-no-shell-escape", "-halt-on-error", "-interaction=nonstopmode",
                   "-file-line-error", "page.tex"]
            try:
                proc = subprocess.run(cmd, cwd=job, env=pdflatex_env(), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=self.timeout_s,
                                      check=False)
            except subprocess.TimeoutExpired as exc:
                raise RecordError("synth_latex_timeout", f"{name}: pdflatex ran over {self.timeout_s:g} s") from exc
            log_path = job / "page.log"
            log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() \
                else proc.stdout.decode("utf-8", errors="replace")
            pdf_path = job / "page.pdf"
            if proc.returncode != 0 or not pdf_path.exists():
                raise RecordError("synth_latex_failed", f"{name}: pdflatex exit {proc.returncode}: {log_excerpt(log)}")
            worst = max((float(x) for x in _OVERFULL.findall(log)), default=0.0)
            if worst > OVERFULL_LIMIT_PT:
                raise RecordError("synth_overflow", f"{name}: a line is {worst:g}pt too wide")
            return pdf_path.read_bytes()
        finally:
            shutil.rmtree(job, ignore_errors=True)

    def render(self, spec: PageSpec) -> RenderedPage:
        if spec.language != "en":
            raise RecordError("synth_latex_language", f"{spec.id}: LaTeX pages are English only (pdflatex has "
                              f"no fonts for {spec.language!r} installed); render it as HTML")
        tex, images = render_latex(spec)
        pdf = self.compile(tex, images, spec.id)
        pages = pdf_page_count(pdf)
        if pages != 1 and images:
            # Shrink the pictures before giving up: a figure's reference is only its caption.
            tex, images = render_latex(spec, SMALL_FIGURE_HEIGHT)
            pdf = self.compile(tex, images, spec.id)
            pages = pdf_page_count(pdf)
        if pages != 1:
            raise RecordError("synth_overflow", f"{spec.id}: content runs to {pages} pages")
        size = (spec.width_px, spec.height_px)
        image, _ = rasterize_pdf_page(pdf, 0, max(size))
        raster_size = image.size
        if image.size != size:
            if abs(image.size[0] - size[0]) > 2 or abs(image.size[1] - size[1]) > 2:
                raise RecordError("synth_bad_size", f"{spec.id}: raster {image.size} != {size}")
            achromatic = image.info.get("achromatic")
            image = image.resize(size, Image.Resampling.LANCZOS)
            if achromatic is not None:
                image.info["achromatic"] = achromatic
        # Line boxes from the PDF's text layer (classless: pdflatex gives no element classes here).
        lines = pdf_line_boxes(pdf, 0, max(size))
        sx, sy = size[0] / raster_size[0], size[1] / raster_size[1]
        geometry = {"lines": [[x0 * sx, y0 * sy, x1 * sx, y1 * sy, shown] for x0, y0, x1, y1, text in lines
                              if (shown := line_text(text))]}
        return RenderedPage(png=encode_image(image, self._encode_cfg), html=tex, width=size[0], height=size[1],
                            geometry=geometry)

    def close(self) -> None:
        """Nothing is held between jobs; kept for symmetry with ``HtmlRenderer``."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pdf_text(pdf: bytes) -> str:
    """The text layer of a PDF's first page (for checks)."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    try:
        page = doc[0]
        tp = page.get_textpage()
        try:
            return str(tp.get_text_bounded())
        finally:
            tp.close()
            page.close()
    finally:
        doc.close()


__all__ = [
    "LatexRenderer",
    "RenderedPage",
    "escape_text",
    "line_text",
    "log_excerpt",
    "math_source",
    "paper_size_bp",
    "pdf_text",
    "render_latex",
    "rich",
]
