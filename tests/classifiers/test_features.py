"""Page features on hand-made pages: ruling lines and cells, columns, skew, colour, label and text-layer features."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from classifiers.features import (
    IMAGE_FEATURES,
    INPUT_FEATURES,
    decode_grey,
    image_features,
    label_features,
    page_features,
    text_layer_features,
    vector,
    weak_labels,
)


def _words(img: np.ndarray, x0: int, x1: int, y0: int, y1: int, pitch: int = 24) -> None:
    """Fake text: rows of word-sized dark blobs between x0 and x1."""
    rng = np.random.default_rng(0)
    for y in range(y0, y1, pitch):
        x = x0
        while x < x1 - 30:
            w = int(rng.integers(20, 60))
            cv2.rectangle(img, (x, y), (min(x + w, x1), y + 10), 0, -1)
            x += w + 12


def _png(img: np.ndarray) -> bytes:
    return cv2.imencode(".png", img)[1].tobytes()


def _features(img: np.ndarray) -> dict[str, float]:
    return image_features(*decode_grey(_png(img)))


def test_ruled_table_has_lines_crossings_and_cells():
    img = np.full((1300, 1000), 255, np.uint8)
    for r in range(7):
        cv2.line(img, (100, 300 + 60 * r), (900, 300 + 60 * r), 0, 3)
    for c in range(5):
        cv2.line(img, (100 + 200 * c, 300), (100 + 200 * c, 660), 0, 3)
    table = _features(img)
    plain = np.full((1300, 1000), 255, np.uint8)
    _words(plain, 100, 900, 100, 1200)
    text = _features(plain)
    assert table["h_lines"] >= 6 and table["v_lines"] >= 4
    assert table["line_crossings"] >= 25  # 7 x 5 crossings
    assert table["grid_cells"] >= 20  # 6 x 4 cells
    assert text["line_crossings"] == 0 and text["grid_cells"] == 0
    assert text["text_lines"] > 30


@pytest.mark.parametrize("columns", [1, 2, 3])
def test_column_count_from_projection(columns):
    img = np.full((1300, 1000), 255, np.uint8)
    width = (800 - 60 * (columns - 1)) // columns
    for c in range(columns):
        x0 = 100 + c * (width + 60)
        _words(img, x0, x0 + width, 100, 1200)
    assert _features(img)["columns"] == columns


def test_skew_sign_and_size():
    img = np.full((1300, 1000), 255, np.uint8)
    _words(img, 150, 850, 150, 1150, pitch=30)
    level = _features(img)["skew_degrees"]
    rot = cv2.warpAffine(img, cv2.getRotationMatrix2D((500, 650), -2.0, 1.0), (1000, 1300), borderValue=255)
    skewed = _features(rot)["skew_degrees"]
    assert abs(level) < 0.3
    assert 1.0 < abs(skewed) < 3.5


def test_a_text_line_crop_shorter_than_the_skew_search_has_features():
    """A 900 x 26 line crop (the corpus's line-OCR pages): the skew search reaches about 40 px either way at
    that width, more than the strip's height, and used to fail with mismatched slices."""
    img = np.full((26, 909), 255, np.uint8)
    _words(img, 10, 890, 8, 18)
    f = _features(img)
    assert f["skew_degrees"] == 0.0 and f["text_lines"] >= 1


def test_colour_and_grey_pages():
    grey = np.full((400, 300), 255, np.uint8)
    colour = np.full((400, 300, 3), 255, np.uint8)
    colour[:200] = (0, 0, 255)  # red upper half
    fg, fc = _features(grey), _features(colour)
    assert fg["colour_fraction"] == 0.0
    assert 0.4 < fc["colour_fraction"] < 0.6
    assert fc["aspect"] == pytest.approx(400 / 300)


def test_label_features_tables_and_latex_glyph_classes():
    md = ("# Results\n\n<table><tr><th colspan=\"2\">A</th></tr><tr><td>1</td><td>2</td></tr></table>\n\n"
          "$$\\frac{\\alpha}{\\hat{x}} + \\sum_{i=1}^n \\mathbb{R}$$ and $x^2$\n\n"
          "$$\\begin{pmatrix}a&b\\end{pmatrix}$$\n- item\n")
    f = label_features(md)
    assert f["lb_html_tables"] == 1 and f["lb_html_cells"] == 3 and f["lb_spans"] == 1
    assert f["lb_display_math"] == 2 and f["lb_inline_math"] == 1
    assert f["lb_frac"] == 1 and f["lb_big_ops"] == 1 and f["lb_greek"] == 1
    assert f["lb_accents"] == 1 and f["lb_fonts"] == 1 and f["lb_matrices"] == 1
    assert f["lb_headings"] == 1 and f["lb_list_items"] == 1
    assert label_features(None)["lb_present"] == 0.0
    wl = weak_labels({**f, "columns": 1.0}, "historical-newspaper")
    assert wl == {"html_table": True, "display_formula": True, "many_columns": False, "historical": True}


def test_text_layer_features():
    f = text_layer_features("Total\t12 345\n∑ α ≤ β\n中文")
    assert f["tl_present"] == 1.0 and f["tl_lines"] == 3
    assert f["tl_math_glyphs"] == 4 and f["tl_cjk_share"] > 0
    assert text_layer_features(None) == dict.fromkeys(f, 0.0)


def test_page_features_of_a_record_row_and_bad_bytes():
    img = np.full((500, 400), 255, np.uint8)
    _words(img, 40, 360, 40, 460)
    row = {"image": {"bytes": _png(img), "path": None}, "text_layer": None, "response": "hello"}
    f = page_features(row)
    assert list(f)[: len(IMAGE_FEATURES)] == list(IMAGE_FEATURES)
    assert vector(f).shape == (len(INPUT_FEATURES),)
    with pytest.raises(ValueError, match="cannot be decoded"):
        decode_grey(b"not an image")


@pytest.mark.parametrize("channels", [1, 3])
def test_isal_and_opencv_decodes_give_the_same_small_page(channels):
    # The corpus's unfiltered PNGs take the ISA-L path (RGB order), anything else OpenCV's (BGR order): same page.
    from schemas.png import encode_png

    img = np.full((1325, 1024), 255, np.uint8)
    _words(img, 80, 940, 100, 1200)
    cv2.line(img, (80, 600), (940, 600), 0, 2)  # a 2-px rule: the halving and the last resize must keep it
    if channels == 3:
        rgb = np.dstack([img, img, img])
        rgb[:300, :, 0] = 200  # a tinted band: a colour page
        fast, slow = decode_grey(encode_png(rgb)), decode_grey(_png(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)))
        assert np.array_equal(fast[1], slow[1])
    else:
        fast, slow = decode_grey(encode_png(img)), decode_grey(_png(img))
        assert fast[1] is None and slow[1] is None
    assert fast[0].shape == (497, 384) and fast[2] == slow[2] == (1325, 1024)
    assert np.array_equal(fast[0], slow[0])
    assert image_features(*fast)["h_lines"] >= 1


def test_centred_narrow_lines_like_display_formulas():
    prose = np.full((1300, 1000), 255, np.uint8)
    _words(prose, 100, 900, 100, 1200)
    maths = prose.copy()
    for y in (300, 600, 900):  # three display "formulas": short lines centred in the column, space around them
        maths[y - 40: y + 50, 100:900] = 255
        for x in range(400, 600, 25):  # glyph-sized blobs (a solid bar would be taken for a ruling line)
            cv2.rectangle(maths, (x, y), (x + 14, y + 14), 0, -1)
    fp, fm = _features(prose), _features(maths)
    assert fm["centred_lines"] >= 3 and fp["centred_lines"] == 0


def test_unruled_table_rows_are_cell_lines():
    prose = np.full((1300, 1000), 255, np.uint8)
    _words(prose, 100, 900, 100, 1200)
    table = prose.copy()
    table[400:700, 100:900] = 255
    for y in range(420, 680, 36):  # eight rows of four cells, no ruling lines
        for x in (100, 320, 540, 760):
            cv2.rectangle(table, (x, y), (x + 60, y + 12), 0, -1)
    ft, fp = _features(table), _features(prose)
    assert ft["line_crossings"] == 0
    assert ft["cell_line_run"] >= 6 and ft["cell_lines"] >= 6
    assert fp["cell_line_run"] <= 1


FORMULA_CROPS = [r"x^{2}+y^{2}=r^{2}", r"\frac{a}{b}+\sqrt{x_{1}}", r"\alpha\beta\gamma", "∀h∈A:\\ ρ(h)≤α(h)",
                 r"A=\begin{pmatrix}\frac{1}{5}&t_{21}\\8&t_{12}\end{pmatrix}", r"$$E=mc^{2}$$"]


@pytest.mark.parametrize("latex", FORMULA_CROPS)
def test_a_formula_crops_bare_latex_label_is_one_display_formula(latex):
    # LaTeX-OCR / UniMER records: task transcribe_formula, response_format latex, one bare formula (or, as a
    # completion may write it, one formula in its own delimiters: still one)
    f = label_features(latex, "transcribe_formula", "latex")
    assert f["lb_display_math"] == 1 and f["lb_inline_math"] == 0
    assert f["lb_math_share"] > 0.5
    assert weak_labels(f)["display_formula"]
    # the instruct stage's convention alone says so too, and a latex response with no task
    meta = '{"instruct": {"convention": "latex_formula", "dynamic": false}}'
    assert label_features(latex, metadata=meta)["lb_display_math"] == 1
    assert label_features(latex, response_format="latex")["lb_display_math"] == 1
    assert label_features(latex, metadata={"instruct": {"convention": "latex_formula"}})["lb_display_math"] == 1


def test_formula_scripts_count_and_a_bare_formula_label_without_a_task():
    f = label_features(r"\hat{k}_{9}=\widehat{kx}+\hat{\phi}", "transcribe_formula", "latex")
    assert f["lb_scripts"] == 1 and f["lb_accents"] == 3  # scripts: 0 when the label was not read as math
    # a label that says nothing of itself but is one bare formula (LaTeX commands, no delimiters), LaTeX-OCR's
    # space-tokenised spelling included
    for bare in (r"\frac { a } { b } + \sqrt { x _ { 1 } }", r"\mathcal{K}(r)=\mathscr{F}(r)+\mathrm{KF}_{6}",
                 r"- \frac { 1 } { 2 } | x |"):
        assert label_features(bare)["lb_display_math"] == 1, bare
        assert label_features(bare, "parse_page", "text")["lb_display_math"] == 1, bare


@pytest.mark.parametrize("label, task, fmt", [
    ("We use \\emph{this} method to show it", None, None),         # prose with a command
    ("see \\cite{foo}", None, None),                               # a command, nothing of math
    ('{"name": "Lena", "note": "a\\nb = c"}', "kie", "json"),     # JSON
    ("# Title\n\nSome $x^2$ text", "parse_page", "markdown"),       # a page, inline math only
    ("- \\alpha = 1\n- \\beta = 2", None, "markdown"),              # a Markdown list
    (r"\begin{tabular}{cc} a & b \\ \hline \end{tabular}", "transcribe_table", "latex"),
    ("x^{2}+y^{2}=r^{2}", None, None),                             # no command: not known to be LaTeX
    ("10 February 2020", "vqa", "text"),
])
def test_labels_that_are_not_one_formula_are_not_display_formulas(label, task, fmt):
    assert label_features(label, task, fmt)["lb_display_math"] == 0
    # a malformed metadata string naming the convention says nothing
    assert label_features(label, task, fmt, metadata="{latex_formula")["lb_display_math"] == 0


def test_extracted_formula_crop_rows_carry_the_display_formula():
    from classifiers.extract import ALL_FEATURES, extract_row

    img = np.full((60, 300), 255, np.uint8)
    _words(img, 20, 280, 20, 40)
    row = {"id": "f1", "image": {"bytes": _png(img), "path": None}, "response": r"\int_{0}^{1}f(x)\,dx",
           "task": "transcribe_formula", "response_format": "latex", "metadata": "{}"}
    feats = dict(zip(ALL_FEATURES, extract_row(row)["features"]))
    assert feats["lb_display_math"] == 1
    assert page_features(row)["lb_display_math"] == 1


@pytest.mark.parametrize("label, task", [
    ("Figure 1: Plot of \\alpha vs. T", "caption"), ("Fig. 3. Variation of \\sigma with load", "caption"),
    ("The value is \\alpha", "vqa"), ("C:\\Users\\data > report_v2.txt", "parse_page"),
    ("Use \\d+ to match digits_only", "parse_page"), ("Plot of \\alpha against T", None),
])
def test_words_around_a_command_are_no_formula(label, task):
    from classifiers.features import formula_label

    assert formula_label(label, task) is None
