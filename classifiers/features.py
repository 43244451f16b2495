"""Handcrafted page features for the failure-mode classifiers (Jina-OCR-v1 4.1): plain functions.

Three groups, each a ``dict[str, float]`` with a fixed key order (``IMAGE_FEATURES``,
``TEXT_LAYER_FEATURES``, ``LABEL_FEATURES``):

* image (OpenCV, on the page decoded straight to grey and downscaled to ``WORK_WIDTH`` pixels wide):
  ruling lines by morphology (horizontal, vertical, their crossings: table grids), cell density,
  column count from the vertical projection profile, text-line count and height from the horizontal
  one, ink density, skew, speckle noise and sharpness, colour, aspect ratio;
* PDF text layer, when the record has one (``text_layer``): length, lines, digits, scripts, math glyphs;
* label (the record's ``response``), when it has one: HTML/Markdown table tags and cells, LaTeX glyph
  classes (fractions, big operators, Greek, accents, fonts, matrices) and math density, scripts, length.
  A formula label (a ``transcribe_formula`` crop's one bare formula, as LaTeX-OCR and UniMER records hold,
  or any label that is one bare formula) counts as one display formula (``formula_label``).

The classifiers see only what an unlabelled page has (image + text layer: ``input_features``); the
label features give the weak labels (``weak_labels``) and the model card. The image work runs on a
small page (about 8x fewer pixels than a 1288-px page), which is what makes it cheap; pass an
already decoded grey array to ``image_features`` to share the decode with another stage.
"""

from __future__ import annotations

import math
import re
from typing import Any

import cv2
import numpy as np

import schemas.images  # noqa: F401  (glibc keeps page-sized buffers on its heap: decodes skip page faults)
from pipelines.clean.conventions import strip_formula_delimiters
from pipelines.instruct.conventions import FORMULA_CONVENTION, record_convention
from schemas.formula_metrics import find_math
from schemas.png import decode_png

WORK_WIDTH = 384  # px: the downscaled page the image features are computed on

IMAGE_FEATURES: tuple[str, ...] = (
    "aspect", "log_pixels", "colour_saturation", "colour_fraction", "ink_density", "background_std",
    "h_lines", "v_lines", "h_line_cover", "v_line_cover", "line_crossings", "grid_cells",
    "columns", "column_gap_share", "text_lines", "line_height", "line_pitch_cv", "row_ink_share",
    "components", "small_component_share", "wide_component_share", "tall_component_share",
    "component_height_median", "skew_degrees", "sharpness", "ink_left_right_balance", "ink_top_share",
    "centred_lines", "cell_lines", "cell_line_run",
)
TEXT_LAYER_FEATURES: tuple[str, ...] = (
    "tl_present", "tl_log_chars", "tl_lines", "tl_digit_share", "tl_cjk_share", "tl_latin_share",
    "tl_math_glyphs", "tl_tab_share", "tl_mean_line_chars",
)
LABEL_FEATURES: tuple[str, ...] = (
    "lb_present", "lb_log_chars", "lb_html_tables", "lb_html_cells", "lb_spans", "lb_md_table_rows",
    "lb_display_math", "lb_inline_math", "lb_frac", "lb_big_ops", "lb_greek", "lb_accents", "lb_fonts",
    "lb_matrices", "lb_scripts", "lb_math_share", "lb_cjk_share", "lb_digit_share", "lb_headings",
    "lb_list_items",
)
INPUT_FEATURES: tuple[str, ...] = IMAGE_FEATURES + TEXT_LAYER_FEATURES

# Unicode math glyphs a PDF text layer carries where LaTeX had a command.
_MATH_GLYPHS = re.compile(r"[\u2200-\u22ff\u0391-\u03c9\u2190-\u21ff\u27e8\u27e9\u2032\u221a\u00b1\u00d7\u00f7]")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")
_DIGIT = re.compile(r"[0-9]")
_DISPLAY = re.compile(r"\$\$.+?\$\$|\\\[.+?\\\]|\\begin\{(equation|align|gather|multline)\*?\}", re.S)
_INLINE = re.compile(r"(?<![\$\\])\$(?!\$)[^$\n]+?\$|\\\(.+?\\\)", re.S)
_LATEX_CLASSES = {
    "lb_frac": re.compile(r"\\[dt]?frac|\\binom|\\over(?![A-Za-z])"),
    "lb_big_ops": re.compile(r"\\(sum|int|iint|oint|prod|coprod|bigcup|bigcap|lim|sup|inf)(?![A-Za-z])"),
    "lb_greek": re.compile(r"\\(alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|"
                           r"lambda|mu|nu|xi|pi|rho|sigma|tau|upsilon|phi|varphi|chi|psi|omega|Gamma|Delta|"
                           r"Theta|Lambda|Xi|Pi|Sigma|Phi|Psi|Omega)(?![A-Za-z])"),
    "lb_accents": re.compile(r"\\(hat|widehat|bar|overline|tilde|widetilde|vec|dot|ddot|breve|check|acute|"
                             r"grave)(?![A-Za-z])"),
    "lb_fonts": re.compile(r"\\(mathbb|mathcal|mathfrak|mathscr|mathrm|mathbf|mathsf|mathit|boldsymbol|"
                           r"operatorname)(?![A-Za-z])"),
    "lb_matrices": re.compile(r"\\begin\{(matrix|pmatrix|bmatrix|Bmatrix|vmatrix|Vmatrix|array|cases|smallmatrix)\}"),
}


def decode_grey(image: bytes | memoryview, width: int = WORK_WIDTH) -> tuple[np.ndarray, np.ndarray | None,
                                                                         tuple[int, int]]:
    """(grey page ``width`` px wide, small BGR thumbnail or None for grey images, original (h, w)).

    The corpus's PNGs (unfiltered rows, and Chromium's "up" rows) are inflated with ISA-L
    (``schemas.png.decode_png``, no copy of an unfiltered page); anything else (other PNGs, WebP, JPEG) goes
    through OpenCV. A colour page is made grey at full size (one cheap pass) and keeps a 64-px BGR thumbnail
    (sampled bilinearly to 128 px, then area-averaged) for the colour features. The grey page is then halved
    while it is at least twice ``width`` (a bilinear resize at exactly 1/2 is the mean of each 2 x 2 block, ~4x
    cheaper than ``INTER_AREA``) and resized bilinearly the rest of the way (``reduce``). Raises ``ValueError`` on
    bytes that cannot be decoded."""
    full = decode_png(image, writable=False)
    order = cv2.COLOR_RGB2GRAY
    if full is None:
        full = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_UNCHANGED)
        if full is None:
            raise ValueError("image bytes cannot be decoded")
        if full.dtype != np.uint8:
            full = (full / 257).astype(np.uint8)
        if full.ndim == 3 and full.shape[2] == 4:
            full = cv2.cvtColor(full, cv2.COLOR_BGRA2BGR)
        order = cv2.COLOR_BGR2GRAY
    shape = full.shape[:2]
    colour = None
    if full.ndim == 3:
        if full.shape[2] == 1:
            full = full[:, :, 0]
        else:
            sample = cv2.resize(full, (128, max(1, round(128 * shape[0] / shape[1]))), interpolation=cv2.INTER_LINEAR)
            if order == cv2.COLOR_RGB2GRAY:
                sample = cv2.cvtColor(sample, cv2.COLOR_RGB2BGR)
            colour = cv2.resize(sample, (64, max(1, round(64 * shape[0] / shape[1]))), interpolation=cv2.INTER_AREA)
            full = cv2.cvtColor(full, order)
    return reduce(full, width), colour, shape


def halve(grey: np.ndarray) -> np.ndarray:
    """``grey`` at half size, each pixel the mean of a 2 x 2 block: a bilinear resize at exactly 1/2 (an odd last
    row or column is left out, so that the scale is exact: at 1325 -> 662 rows the sample points drift and a
    1-px rule can fall between them)."""
    h, w = grey.shape[:2]
    return cv2.resize(grey[:h - h % 2, :w - w % 2], (w // 2, h // 2), interpolation=cv2.INTER_LINEAR)


def reduce(grey: np.ndarray, width: int = WORK_WIDTH) -> np.ndarray:
    """``grey`` downscaled to ``width`` px wide, aspect kept (smaller pages are left as they are): halved (2 x 2
    means) while at least twice ``width``, then resized bilinearly (under 2x every pixel still counts; 4x cheaper
    than ``INTER_AREA`` there) to the size ``downscale`` gives."""
    h, w = grey.shape[:2]
    if w <= width:
        return grey
    size = (width, max(1, round(h * width / w)))
    while grey.shape[1] >= 2 * width and grey.shape[0] >= 2 * size[1]:
        grey = halve(grey)
    return cv2.resize(grey, size, interpolation=cv2.INTER_AREA if grey.shape[1] >= 2 * width else cv2.INTER_LINEAR)


def downscale(grey: np.ndarray, width: int = WORK_WIDTH) -> np.ndarray:
    """``grey`` (or BGR) resized (area interpolation) to ``width`` px wide, aspect kept; smaller pages are left as
    they are."""
    h, w = grey.shape[:2]
    if w <= width:
        return grey
    return cv2.resize(grey, (width, max(1, round(h * width / w))), interpolation=cv2.INTER_AREA)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of the runs of True in a 1-d bool array."""
    if not mask.any():
        return []
    d = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def image_features(grey: np.ndarray, colour: np.ndarray | None = None,
                   original_shape: tuple[int, int] | None = None) -> dict[str, float]:
    """The ``IMAGE_FEATURES`` of a grey page (already downscaled, e.g. by ``decode_grey``).

    Masks stay uint8 (0/255) and every count, sum and projection is an OpenCV reduction over them: numpy
    boolean temporaries and reductions were half of this function's time."""
    h, w = grey.shape
    oh, ow = original_shape or (h, w)
    f: dict[str, float] = {"aspect": oh / max(ow, 1), "log_pixels": math.log10(max(oh * ow, 1))}
    if colour is not None:
        sat = cv2.cvtColor(colour, cv2.COLOR_BGR2HSV)[..., 1]
        f["colour_saturation"] = float(sat.mean()) / 255.0
        f["colour_fraction"] = float(np.count_nonzero(sat > 0.25 * 255)) / sat.size
    else:
        f["colour_saturation"] = f["colour_fraction"] = 0.0
    _, ink = cv2.threshold(grey, 0, 255, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    n_ink = cv2.countNonZero(ink)
    f["ink_density"] = n_ink / (h * w)
    if n_ink < h * w:
        f["background_std"] = float(cv2.meanStdDev(grey, mask=cv2.bitwise_not(ink))[1][0, 0]) / 255.0
    else:
        f["background_std"] = 0.0

    # Ruling lines: opening with long thin kernels keeps only long straight strokes.
    hk = cv2.getStructuringElement(cv2.MORPH_RECT, (max(8, w // 12), 1))
    vk = cv2.getStructuringElement(cv2.MORPH_RECT, (1, max(8, h // 30)))
    hl = cv2.morphologyEx(ink, cv2.MORPH_OPEN, hk)
    vl = cv2.morphologyEx(ink, cv2.MORPH_OPEN, vk)
    n_hl, n_vl = cv2.countNonZero(hl), cv2.countNonZero(vl)
    # Line counts from projections (runs of rows holding a horizontal rule; columns holding a vertical one).
    f["h_lines"] = float(len(_runs(cv2.reduce(hl, 1, cv2.REDUCE_MAX).ravel() > 0))) if n_hl else 0.0
    f["v_lines"] = float(len(_runs(cv2.reduce(vl, 0, cv2.REDUCE_MAX).ravel() > 0))) if n_vl else 0.0
    f["h_line_cover"] = n_hl / (w * 10)
    f["v_line_cover"] = n_vl / (h * 10)
    n_x = 0
    if n_hl and n_vl:
        three = np.ones((3, 3), np.uint8)
        crossings = cv2.bitwise_and(cv2.dilate(hl, three), cv2.dilate(vl, three))
        if cv2.countNonZero(crossings):
            n_x = cv2.connectedComponents(crossings, connectivity=8)[0] - 1
    f["line_crossings"] = float(n_x)
    # Cells: regions closed by the ruling lines (background components of the grid, page background excluded),
    # labelled within the lines' bounding box framed by one background pixel: the frame's component is the page
    # background around the box.
    grid = cv2.bitwise_or(hl, vl)
    if n_x >= 4:
        x, y, bw, bh = cv2.boundingRect(grid)
        cells = cv2.copyMakeBorder(cv2.bitwise_not(grid[y:y + bh, x:x + bw]), 1, 1, 1, 1, cv2.BORDER_CONSTANT,
                                   value=255)
        _, labels, c_stats, _ = cv2.connectedComponentsWithStatsWithAlgorithm(cells, 4, cv2.CV_32S, cv2.CCL_DEFAULT)
        areas = np.delete(c_stats[:, cv2.CC_STAT_AREA], [0, labels[0, 0]])
        f["grid_cells"] = float(((areas > 20) & (areas < 0.25 * h * w)).sum())
    else:
        f["grid_cells"] = 0.0

    text = cv2.subtract(ink, grid)  # ink off the ruling lines (both masks are 0/255)
    # Projections of the text ink: pixels per column (over the page's middle rows) and per row.
    band = text[h // 8: h - h // 8] if h >= 16 else text
    col_ink = cv2.reduce(band, 0, cv2.REDUCE_SUM, dtype=cv2.CV_32S).ravel() / (255.0 * max(band.shape[0], 1))
    row_px = cv2.reduce(text, 1, cv2.REDUCE_SUM, dtype=cv2.CV_32S).ravel() / 255.0
    # Columns: runs of inked x positions, gaps of >= 2% of the width bridged out.
    inked = col_ink > 0.01
    gap = max(2, w // 50)
    runs = _runs(inked)
    merged: list[list[int]] = []
    for s, e in runs:
        if merged and s - merged[-1][1] < gap:
            merged[-1][1] = e
        else:
            merged.append([s, e])
    wide = [r for r in merged if r[1] - r[0] >= w // 12]
    f["columns"] = float(len(wide))
    if wide:
        span = wide[-1][1] - wide[0][0]
        covered = sum(e - s for s, e in wide)
        f["column_gap_share"] = float(span - covered) / max(span, 1)
    else:
        f["column_gap_share"] = 0.0
    # Text lines from the horizontal profile.
    row_ink = row_px / w
    rows = _runs(row_ink > 0.004)
    heights = np.array([e - s for s, e in rows], np.float32)
    f["text_lines"] = float(len(rows))
    f["line_height"] = float(np.median(heights)) / h * 100 if len(rows) else 0.0
    if len(rows) >= 3:
        starts = np.array([s for s, _ in rows], np.float32)
        pitch = np.diff(starts)
        f["line_pitch_cv"] = float(pitch.std() / max(pitch.mean(), 1e-6))
    else:
        f["line_pitch_cv"] = 0.0
    f["row_ink_share"] = float(np.count_nonzero(row_ink > 0.004)) / h

    # Block-based labelling (Grana's BBDT): the same components as the default, in about half the time.
    _, _, stats, _ = cv2.connectedComponentsWithStatsWithAlgorithm(text, 8, cv2.CV_32S, cv2.CCL_BBDT)
    st = stats[1:]
    n = max(len(st), 1)
    cw, ch, area = st[:, cv2.CC_STAT_WIDTH], st[:, cv2.CC_STAT_HEIGHT], st[:, cv2.CC_STAT_AREA]
    f["components"] = float(len(st)) / 100.0
    f["small_component_share"] = float((area <= 2).sum()) / n
    f["wide_component_share"] = float(((cw >= 4 * np.maximum(ch, 1)) & (cw >= 6)).sum()) / n  # fraction bars, rules
    f["tall_component_share"] = float((ch >= 2.5 * np.maximum(np.median(ch) if len(ch) else 1, 1)).sum()) / n
    f["component_height_median"] = float(np.median(ch)) if len(ch) else 0.0
    f["centred_lines"], f["cell_lines"], f["cell_line_run"] = _line_layout(text, st, wide or [[0, w]])
    half = w // 2
    left = cv2.reduce(text[:, :half], 1, cv2.REDUCE_SUM, dtype=cv2.CV_32F).ravel() / 255.0
    right = row_px.astype(np.float32) - left
    f["skew_degrees"] = _skew(left, right, half)
    f["sharpness"] = float(cv2.meanStdDev(cv2.Laplacian(grey, cv2.CV_32F))[1][0, 0]) ** 2 / 1e4
    total_left, total = float(left.sum()), float(row_px.sum())
    f["ink_left_right_balance"] = (2 * total_left - total) / max(total, 1.0)
    f["ink_top_share"] = float(row_px[: h // 3].sum()) / max(total, 1.0)
    return {k: f[k] for k in IMAGE_FEATURES}


def _line_layout(text: np.ndarray, st: np.ndarray, columns: list[list[int]]) -> tuple[float, float, float]:
    """Text lines, column by column: (centred lines, cell lines, the longest run of consecutive cell lines).

    A centred line is narrow (under 60% of the column), centred in it (centre within 8% of the column's) and
    set in prose (a full-width line of body-text height, under 2% of the page's, within two lines of it): how
    display formulas sit, and few other lines do (a heading now and then; a slide's or title page's centred
    lines have no small prose around them). A count, not a share of the lines: on a page of few lines (a
    slide) a share is large by chance, and a classifier trained on synthetic pages learned to trust it. A cell
    line holds >= 3 runs of text separated by gaps of over 4% of the column (word spaces are ~1%): a row of a
    table, ruled or not; runs of them are tables. Lines are runs of the column's own row profile; a line's
    components are those whose centres fall in it."""
    if not len(st):
        return 0.0, 0.0, 0.0
    cx = st[:, cv2.CC_STAT_LEFT] + st[:, cv2.CC_STAT_WIDTH] / 2
    cy = st[:, cv2.CC_STAT_TOP] + st[:, cv2.CC_STAT_HEIGHT] / 2
    left, right = st[:, cv2.CC_STAT_LEFT], st[:, cv2.CC_STAT_LEFT] + st[:, cv2.CC_STAT_WIDTH]
    n_centred = n_cells = best_run = 0
    for x0, x1 in columns:
        width = x1 - x0
        runs = _runs(cv2.reduce(text[:, x0:x1], 1, cv2.REDUCE_MAX).ravel() > 0)
        if not runs or width < 8:
            continue
        starts = np.array([a for a, _ in runs])
        ends = np.array([b for _, b in runs])
        inside = np.flatnonzero((cx >= x0) & (cx < x1))
        line = np.searchsorted(starts, cy[inside], side="right") - 1
        ok = (line >= 0) & (cy[inside] < ends[np.maximum(line, 0)])
        line, idx = line[ok], inside[ok]
        if not len(line):
            continue
        lo = np.full(len(runs), x1, np.int64)
        hi = np.full(len(runs), x0, np.int64)
        np.minimum.at(lo, line, left[idx])
        np.maximum.at(hi, line, right[idx])
        has = hi > lo
        centre = (lo + hi) / 2 - (x0 + x1) / 2
        # Centred in prose: a full-width line (>= 80% of the column) within two lines above or below, so that
        # centred titles, slides and captions on their own do not count.
        small = (ends - starts) < 0.02 * text.shape[0]
        full = (has & small & ((hi - lo) >= 0.8 * width)).astype(np.int32)
        near_full = np.convolve(full, np.ones(5, np.int32))[2:2 + len(full)] > 0
        centred = has & ((hi - lo) < 0.6 * width) & (np.abs(centre) < 0.08 * width) & near_full
        n_centred += int(centred.sum())
        # Gaps between neighbouring components of a line, left to right.
        order = np.lexsort((left[idx], line))
        ln, lf, rt = line[order], left[idx][order], right[idx][order]
        big = (ln[1:] == ln[:-1]) & (lf[1:] - rt[:-1] > 0.04 * width)
        gaps = np.zeros(len(runs), np.int64)
        np.add.at(gaps, ln[1:][big], 1)
        cell = gaps >= 2
        n_cells += int(cell.sum())
        best_run = max([best_run] + [int(e - a) for a, e in _runs(cell)])
    return float(n_centred), float(n_cells), float(best_run)


def _skew(left: np.ndarray, right: np.ndarray, half: int, max_degrees: float = 5.0) -> float:
    """Text-line angle in degrees (positive: lines fall to the right), from the vertical shift that best aligns
    the row profiles (ink pixels per row) of the page's left and right halves, whose centres are ``half`` px
    apart."""
    h = len(left)
    if left.sum() < 50 or right.sum() < 50:
        return 0.0
    left = left - left.mean()
    right = right - right.mean()
    # At most h - 1: on a strip shorter than the reach (a text-line crop) a larger shift would slice past the ends.
    reach = max(1, min(int(math.tan(math.radians(max_degrees)) * half), h - 1))
    scores = [float(np.dot(left[max(0, -d): h - max(0, d)], right[max(0, d): h - max(0, -d)]))
              for d in range(-reach, reach + 1)]
    dy = int(np.argmax(scores)) - reach
    return math.degrees(math.atan2(dy, half))


def _share(pattern: re.Pattern, text: str) -> float:
    return len(pattern.findall(text)) / max(len(text), 1)


def text_layer_features(text: str | None) -> dict[str, float]:
    """The ``TEXT_LAYER_FEATURES`` of a PDF text layer (all zero when there is none)."""
    if not text or not text.strip():
        return dict.fromkeys(TEXT_LAYER_FEATURES, 0.0)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return {
        "tl_present": 1.0,
        "tl_log_chars": math.log10(len(text) + 1),
        "tl_lines": float(len(lines)),
        "tl_digit_share": _share(_DIGIT, text),
        "tl_cjk_share": _share(_CJK, text),
        "tl_latin_share": _share(_LATIN, text),
        "tl_math_glyphs": float(len(_MATH_GLYPHS.findall(text))),
        "tl_tab_share": (text.count("\t") + len(re.findall(r" {3,}", text))) / max(len(lines), 1),
        "tl_mean_line_chars": sum(len(ln) for ln in lines) / max(len(lines), 1),
    }


FORMULA_TASK = "transcribe_formula"
_COMMAND = re.compile(r"\\[A-Za-z]+")
_TEXT_TASKS = ("caption", "vqa")  # answers in words: a label of theirs is no formula without saying so
_TEXT_ARG = re.compile(r"\\(?:text[a-z]*|mbox|emph)\s*\{[^{}]*\}")
# two words in a row (LaTeX commands out), or a sentence's full stop
_PROSE = re.compile(r"[A-Za-z]{2,}\.?\s+[A-Za-z]{2,}|[A-Za-z]{3,}\.\s")
_MATHY = re.compile(r"[=_^+<>]")  # a relation, an operator or a script
# Not one formula: a blank line, a Markdown heading, an HTML tag, a LaTeX tabular, a double quote (JSON), a
# Windows path (``C:\Users``); on a label of several lines, a Markdown list item or table row.
_NOT_FORMULA = re.compile(r"\n[ \t]*\n|^#{1,6} |</?(table|tr|td|th|p|div|br|span|img)\b[^<>]*>|\\begin\{tabular|\"|"
                          r"\b[A-Za-z]:\\",
                          re.M | re.I)
_TABLE_TASKS = frozenset({"transcribe_table", "chart_to_table", "kie"})  # labels that are tables or JSON
_MD_LINE = re.compile(r"^\s*([-*+] |\d+[.)] |\|.*\|\s*$)", re.M)


def is_formula_record(task: str | None = None, response_format: str | None = None,
                      metadata: str | dict | None = None) -> bool:
    """A record whose label is one bare formula by what it says of itself: task ``transcribe_formula``, a
    ``latex`` response with no other task, or the instruct convention ``latex_formula`` in its metadata (a
    JSON string, as in a corpus row, or a dict). Metadata that does not parse says nothing."""
    if task == FORMULA_TASK or (response_format == "latex" and not task):
        return True
    if not metadata or (isinstance(metadata, str) and FORMULA_CONVENTION not in metadata):
        return False
    try:
        return record_convention(metadata) == FORMULA_CONVENTION
    except (ValueError, TypeError, AttributeError):
        return False


def formula_label(response: str | None, task: str | None = None, response_format: str | None = None,
                  metadata: str | dict | None = None) -> str | None:
    """The formula of a label that is one formula, delimiters taken off (``strip_formula_delimiters``), else None.

    A formula record's label (``is_formula_record``) is one formula whatever it holds, as its ``math`` tests read
    it (``pipelines.instruct.conventions.checkable``: one display equation). Any other label (not a table, chart,
    KIE, caption or VQA task's, nor an HTML or JSON one) is one bare formula when it has a LaTeX command, no math
    delimiters (``schemas.formula_metrics.find_math`` finds none), no blank line, Markdown heading, HTML tag,
    tabular, double quote (JSON) or Windows path, no Markdown list item or table row when it has several lines,
    no prose (two words in a row, or a sentence's full stop, once the commands and ``\\text{..}`` arguments are
    out), and something of math: a relation, ``+``, a script, a Unicode math glyph or a LaTeX math command
    (fraction, big operator, Greek, accent, math font, matrix)."""
    if not response or not response.strip():
        return None
    if is_formula_record(task, response_format, metadata):
        return strip_formula_delimiters(response)
    if task in _TABLE_TASKS or task in _TEXT_TASKS or response_format in ("html", "json") or "\\" not in response:
        return None
    text = response.strip()
    if not _COMMAND.search(text) or _NOT_FORMULA.search(text) or ("\n" in text and _MD_LINE.search(text)) \
            or find_math(text) \
            or _PROSE.search(_COMMAND.sub(" ", _TEXT_ARG.sub(" ", text))):
        return None
    if _MATHY.search(text) or _MATH_GLYPHS.search(text) or any(p.search(text) for p in _LATEX_CLASSES.values()):
        return text
    return None


def label_features(response: str | None, task: str | None = None, response_format: str | None = None,
                   metadata: str | dict | None = None) -> dict[str, float]:
    """The ``LABEL_FEATURES`` of a label (Markdown with HTML tables and LaTeX math; zero when absent).

    ``task``, ``response_format``, ``metadata``: the record's, when known. A label that is one formula
    (``formula_label``: a formula crop's, or one bare formula) is one display formula, all of it math."""
    if not response or not response.strip():
        return dict.fromkeys(LABEL_FEATURES, 0.0)
    latex = "\\" in response  # no backslash: no LaTeX command, no \[ or \( math
    formula = formula_label(response, task, response_format, metadata)
    if formula is not None:
        display, inline = [formula], []
    else:
        display = [m.group(0) for m in _DISPLAY.finditer(response)] if latex or "$$" in response else []
        inline = [m.group(0) for m in _INLINE.finditer(response)] if latex or "$" in response else []
    math_spans = display + inline
    f = {
        "lb_present": 1.0,
        "lb_log_chars": math.log10(len(response) + 1),
        "lb_html_tables": float(len(re.findall(r"<table\b", response, re.I))),
        "lb_html_cells": float(len(re.findall(r"<t[dh]\b", response, re.I))),
        "lb_spans": float(len(re.findall(r"(row|col)span\s*=", response, re.I))),
        "lb_md_table_rows": float(len(re.findall(r"^\s*\|.*\|\s*$", response, re.M))),
        "lb_display_math": float(len(display)),
        "lb_inline_math": float(len(inline)),
        "lb_scripts": float(len(re.findall(r"[_^]", "".join(math_spans)))),
        "lb_math_share": sum(len(s) for s in math_spans) / len(response),
        "lb_cjk_share": 0.0 if response.isascii() else _share(_CJK, response),
        "lb_digit_share": sum(map(response.count, "0123456789")) / len(response),
        "lb_headings": float(len(re.findall(r"^#{1,6} ", response, re.M))),
        "lb_list_items": float(len(re.findall(r"^\s*([-*+]|\d+[.)])\s", response, re.M))),
    }
    for name, pattern in _LATEX_CLASSES.items():
        f[name] = float(len(pattern.findall(response))) if latex else 0.0
    return {k: f[k] for k in LABEL_FEATURES}


def page_features(record: Any, grey: np.ndarray | None = None) -> dict[str, float]:
    """Every feature of a ``PageRecord`` (or a row dict with ``image``, ``text_layer``, ``response``, and
    optionally ``task``, ``response_format``, ``metadata``).

    ``grey``: the page already decoded and downscaled by another stage (shares the decode)."""
    get = (lambda k: record.get(k)) if isinstance(record, dict) else (lambda k: getattr(record, k, None))
    if grey is None:
        image = get("image")
        if isinstance(image, dict):
            image = image.get("bytes")
        grey, colour, shape = decode_grey(image)
    else:
        colour, shape = None, None
    out = image_features(grey, colour, shape)
    out.update(text_layer_features(get("text_layer")))
    out.update(label_features(get("response"), get("task"), get("response_format"), get("metadata")))
    return out


def vector(features: dict[str, float], names: tuple[str, ...] = INPUT_FEATURES) -> np.ndarray:
    """The features named in ``names``, in that order, as float32 (missing names raise KeyError)."""
    return np.array([features[n] for n in names], np.float32)


# Weak labels the corpus already carries: each a rule over a page's features and its record fields.
WEAK_LABELS: tuple[str, ...] = ("html_table", "display_formula", "many_columns", "historical")


def weak_labels(features: dict[str, float], domain: str = "") -> dict[str, bool]:
    """``WEAK_LABELS`` of one page: a label with an HTML table, one with a display formula, >= 3 text
    columns on the image, a historical domain (``historical-*``)."""
    return {
        "html_table": features.get("lb_html_tables", 0.0) > 0 or features.get("lb_md_table_rows", 0.0) >= 3,
        "display_formula": features.get("lb_display_math", 0.0) > 0,
        "many_columns": features.get("columns", 0.0) >= 3,
        "historical": domain.startswith("historical"),
    }
