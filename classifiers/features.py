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

WORK_WIDTH = 384  # px: the downscaled page the image features are computed on

IMAGE_FEATURES: tuple[str, ...] = (
    "aspect", "log_pixels", "colour_saturation", "colour_fraction", "ink_density", "background_std",
    "h_lines", "v_lines", "h_line_cover", "v_line_cover", "line_crossings", "grid_cells",
    "columns", "column_gap_share", "text_lines", "line_height", "line_pitch_cv", "row_ink_share",
    "components", "small_component_share", "wide_component_share", "tall_component_share",
    "component_height_median", "skew_degrees", "sharpness", "ink_left_right_balance", "ink_top_share",
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


def decode_grey(image: bytes, width: int = WORK_WIDTH) -> tuple[np.ndarray, np.ndarray | None, tuple[int, int]]:
    """(grey page ``width`` px wide, small BGR thumbnail or None for grey images, original (h, w)).

    PNG/WebP/JPEG via OpenCV; a colour page keeps a 64-px BGR thumbnail for the colour features. A colour
    page is downscaled first and made grey after (the two are linear, so the result is the same up to
    rounding, on 8x fewer pixels). Raises ``ValueError`` on bytes OpenCV cannot decode."""
    buf = np.frombuffer(image, np.uint8)
    full = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if full is None:
        raise ValueError("image bytes cannot be decoded")
    shape = full.shape[:2]
    if full.dtype != np.uint8:
        full = (full / 257).astype(np.uint8)
    colour = None
    if full.ndim == 3:
        if full.shape[2] == 4:
            full = cv2.cvtColor(full, cv2.COLOR_BGRA2BGR)
        small = downscale(full, width)
        colour = cv2.resize(small, (64, max(1, round(64 * shape[0] / shape[1]))), interpolation=cv2.INTER_AREA)
        return cv2.cvtColor(small, cv2.COLOR_BGR2GRAY), colour, shape
    return downscale(full, width), colour, shape


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
    """The ``IMAGE_FEATURES`` of a grey page (already downscaled, e.g. by ``decode_grey``)."""
    h, w = grey.shape
    oh, ow = original_shape or (h, w)
    f: dict[str, float] = {"aspect": oh / max(ow, 1), "log_pixels": math.log10(max(oh * ow, 1))}
    if colour is not None:
        hsv = cv2.cvtColor(colour, cv2.COLOR_BGR2HSV)
        sat = hsv[..., 1].astype(np.float32) / 255.0
        f["colour_saturation"] = float(sat.mean())
        f["colour_fraction"] = float((sat > 0.25).mean())
    else:
        f["colour_saturation"] = f["colour_fraction"] = 0.0
    _, ink = cv2.threshold(grey, 0, 255, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    ink_b = ink > 0
    f["ink_density"] = float(ink_b.mean())
    bg = grey[~ink_b]
    f["background_std"] = float(bg.std()) / 255.0 if bg.size else 0.0

    # Ruling lines: opening with long thin kernels keeps only long straight strokes.
    hk = cv2.getStructuringElement(cv2.MORPH_RECT, (max(8, w // 12), 1))
    vk = cv2.getStructuringElement(cv2.MORPH_RECT, (1, max(8, h // 30)))
    hl = cv2.morphologyEx(ink, cv2.MORPH_OPEN, hk)
    vl = cv2.morphologyEx(ink, cv2.MORPH_OPEN, vk)
    # Line counts from projections (runs of rows holding a horizontal rule; columns holding a vertical one).
    h_rows, v_cols = hl.max(axis=1) > 0, vl.max(axis=0) > 0
    f["h_lines"] = float(len(_runs(h_rows)))
    f["v_lines"] = float(len(_runs(v_cols)))
    f["h_line_cover"] = float(np.count_nonzero(hl)) / (w * 10)
    f["v_line_cover"] = float(np.count_nonzero(vl)) / (h * 10)
    crossings = cv2.bitwise_and(cv2.dilate(hl, np.ones((3, 3), np.uint8)), cv2.dilate(vl, np.ones((3, 3), np.uint8)))
    n_x = cv2.connectedComponents(crossings, connectivity=8)[0] - 1
    f["line_crossings"] = float(n_x)
    # Cells: regions closed by the ruling lines (background components of the grid, page background excluded).
    grid = cv2.bitwise_or(hl, vl)
    if n_x >= 4:
        n_cells, _, c_stats, _ = cv2.connectedComponentsWithStats(cv2.bitwise_not(grid), connectivity=4)
        areas = c_stats[1:, cv2.CC_STAT_AREA]
        f["grid_cells"] = float(((areas > 20) & (areas < 0.25 * h * w)).sum())
    else:
        f["grid_cells"] = 0.0

    text = cv2.bitwise_and(ink, cv2.bitwise_not(grid))
    text_b = text > 0
    # Columns: runs of inked x positions, gaps of >= 2% of the width bridged out, over the page's middle rows.
    band = text_b[h // 8: h - h // 8] if h >= 16 else text_b
    col_ink = band.mean(axis=0)
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
    row_ink = text_b.mean(axis=1)
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
    f["row_ink_share"] = float((row_ink > 0.004).mean())

    n_c, _, stats, _ = cv2.connectedComponentsWithStats(text, connectivity=8)
    st = stats[1:]
    n = max(len(st), 1)
    cw, ch, area = st[:, cv2.CC_STAT_WIDTH], st[:, cv2.CC_STAT_HEIGHT], st[:, cv2.CC_STAT_AREA]
    f["components"] = float(len(st)) / 100.0
    f["small_component_share"] = float((area <= 2).sum()) / n
    f["wide_component_share"] = float(((cw >= 4 * np.maximum(ch, 1)) & (cw >= 6)).sum()) / n  # fraction bars, rules
    f["tall_component_share"] = float((ch >= 2.5 * np.maximum(np.median(ch) if len(ch) else 1, 1)).sum()) / n
    f["component_height_median"] = float(np.median(ch)) if len(ch) else 0.0
    f["skew_degrees"] = _skew(text_b)
    f["sharpness"] = float(cv2.Laplacian(grey, cv2.CV_32F).var()) / 1e4
    half = w // 2
    left, right = float(text_b[:, :half].sum()), float(text_b[:, half:].sum())
    f["ink_left_right_balance"] = (left - right) / max(left + right, 1.0)
    f["ink_top_share"] = float(text_b[: h // 3].sum()) / max(float(text_b.sum()), 1.0)
    return {k: f[k] for k in IMAGE_FEATURES}


def _skew(text_b: np.ndarray, max_degrees: float = 5.0) -> float:
    """Text-line angle in degrees (positive: lines fall to the right), from the vertical shift that best aligns
    the row profiles of the page's left and right halves (their centres are half a page width apart)."""
    h, w = text_b.shape
    half = w // 2
    left = text_b[:, :half].sum(axis=1).astype(np.float32)
    right = text_b[:, half:].sum(axis=1).astype(np.float32)
    if left.sum() < 50 or right.sum() < 50:
        return 0.0
    left -= left.mean()
    right -= right.mean()
    reach = max(1, int(math.tan(math.radians(max_degrees)) * half))
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


def label_features(response: str | None) -> dict[str, float]:
    """The ``LABEL_FEATURES`` of a label (Markdown with HTML tables and LaTeX math; zero when absent)."""
    if not response or not response.strip():
        return dict.fromkeys(LABEL_FEATURES, 0.0)
    display = _DISPLAY.findall(response)
    math_spans = [m.group(0) for m in _DISPLAY.finditer(response)] + [m.group(0) for m in _INLINE.finditer(response)]
    f = {
        "lb_present": 1.0,
        "lb_log_chars": math.log10(len(response) + 1),
        "lb_html_tables": float(len(re.findall(r"<table\b", response, re.I))),
        "lb_html_cells": float(len(re.findall(r"<t[dh]\b", response, re.I))),
        "lb_spans": float(len(re.findall(r"(row|col)span\s*=", response, re.I))),
        "lb_md_table_rows": float(len(re.findall(r"^\s*\|.*\|\s*$", response, re.M))),
        "lb_display_math": float(len(display)),
        "lb_inline_math": float(len(_INLINE.findall(response))),
        "lb_scripts": float(len(re.findall(r"[_^]", "".join(math_spans)))),
        "lb_math_share": sum(len(s) for s in math_spans) / len(response),
        "lb_cjk_share": _share(_CJK, response),
        "lb_digit_share": _share(_DIGIT, response),
        "lb_headings": float(len(re.findall(r"^#{1,6} ", response, re.M))),
        "lb_list_items": float(len(re.findall(r"^\s*([-*+]|\d+[.)])\s", response, re.M))),
    }
    for name, pattern in _LATEX_CLASSES.items():
        f[name] = float(len(pattern.findall(response)))
    return {k: f[k] for k in LABEL_FEATURES}


def page_features(record: Any, grey: np.ndarray | None = None) -> dict[str, float]:
    """Every feature of a ``PageRecord`` (or a row dict with ``image``, ``text_layer``, ``response``).

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
    out.update(label_features(get("response")))
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
