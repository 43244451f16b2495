"""Samples of the Table 2 element, form and multilingual corpora, each in its published layout.

``build(root)`` writes (layout facts and where they come from: docs/sources.md):

* ``olmocr-synthmix/``: ``bench_data/general.jsonl`` (olmOCR-Bench tests), ``training/general/
  pdf_0000N_page1.{pdf,md}`` and ``bench_data/claude_original/general/..._pg1_repeat1.md``.
  pdf_00000_page1: 6 valid tests (present, absent, order, math, baseline, table), one of which
  (present "Zanzibar") fails on the reference (``tests_failed_reference``), plus one invalid line
  (``tests_invalid``); pdf_00001_page1: a page with 2 tests; pdf_00002_page1: no .md
  (``missing_reference``); pdf_00003_page1: no PDF (``missing_pdf``).
* ``latex-ocr/small/train-00000-of-00001.parquet`` (``image``, ``text``: linxy/LaTeX_OCR): rows 0-2
  formulas (row 1 with im2latex token spacing), row 3 ``\\notakatexmacro`` (renders nowhere:
  ``katex_error`` at formula_render), row 4 empty text (``empty_transcription``), row 5 no image bytes
  (``missing_image``), row 6 bytes that are no image (``corrupt_image`` at render).
* ``unimer/UniMER-Test/spe.txt`` + ``spe/000000N.png``: lines 0-1 formulas, line 2 blank with an image
  (``empty_label``), line 3 without an image (``missing_image``), line 4 a 12000x12000 image
  (``image_too_large`` at render).
* ``mmtab/MMTab-eval_test_data_49K.json`` + ``mmtab/all_test_image/*.jpg``: items 0-2 table
  recognition in HTML, Latex and Markdown, item 3 a question (``not_table_recognition``), item 4 a
  ragged Markdown table (``unparseable_table``), item 5 an image not in the folder (``missing_image``);
  ``mmtab/MMTab-pre_pretrain_data_llava_format_150K.json``: one LLaVA-format table item, one caption
  item (``not_table_recognition``).
* ``synthchartnet/default/train/0000.parquet`` (``images``, ``texts``): rows 0-1 charts with OTSL
  data (row 1 with a merged header), row 2 OTSL that merges into nothing (``unparseable_table``),
  row 3 an empty answer (``empty_label``), row 4 no image (``missing_image``).
* ``commonforms/data/test-00000-of-00001.parquet``: row 0 a form with 3 fields, row 1 no fields
  (``no_fields``), row 2 a box with no area (``bad_label``), row 3 undecodable image (``corrupt_image``).
* ``rvl-cdip/default/test/0000.parquet`` (``image`` TIFF, ``label``): rows 0-1 letter and invoice, row
  2 label 99 (``bad_label``), row 3 no image (``missing_image``).
* ``jssoda/data/validation-00000-of-00001.parquet`` (llm-jp/JSSODa: ``id``, ``image``, ``question``,
  ``text``, ``is_vertical``, ``num_columns``): rows 0-1 Japanese text (row 1 vertical), row 2 empty
  text (``empty_transcription``), row 3 no image (``missing_image``).

Small images (a few hundred pixels) keep ``make corpus`` fast. Seeded and byte-identical across reruns
(``python -m samples.make.elements <root>``).
"""

from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw, ImageFont

from samples.make.historical import huge_png
from samples.make.pdfs import text_pdf

SEED = 2024
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
JA_FONT = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"


def _font(path: str, size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.truetype(path, size)
    except OSError:
        return ImageFont.load_default()


def _png(image: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


def text_image(lines: list[str], size: tuple[int, int] = (360, 80), font: str = FONT, vertical: bool = False,
               fmt: str = "PNG") -> bytes:
    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    face = _font(font, 18)
    if vertical:
        for col, line in enumerate(lines):
            for i, ch in enumerate(line):
                draw.text((size[0] - 30 - 26 * col, 8 + 22 * i), ch, fill=0, font=face)
    else:
        for i, line in enumerate(lines):
            draw.text((10, 10 + 26 * i), line, fill=0, font=face)
    return _png(image, fmt)


def table_image(rows: list[list[str]], fmt: str = "JPEG", spans: dict[tuple[int, int], int] | None = None) -> bytes:
    """A ruled table; ``spans`` maps (row, cell index) to the columns that cell spans (a merged cell)."""
    spans = spans or {}
    w, h = 110, 28
    n_cols = max(sum(spans.get((r, c), 1) for c in range(len(row))) for r, row in enumerate(rows))
    image = Image.new("RGB", (w * n_cols + 2, h * len(rows) + 2), "white")
    draw = ImageDraw.Draw(image)
    face = _font(FONT, 14)
    for r, row in enumerate(rows):
        x = 0
        for c, text in enumerate(row):
            span = spans.get((r, c), 1)
            draw.rectangle([x * w, r * h, (x + span) * w, (r + 1) * h], outline="black")
            draw.text((x * w + 6, r * h + 6), text, fill="black", font=face)
            x += span
    return _png(image, fmt)


def chart_image(values: list[int]) -> bytes:
    """One bar per value (up to four fit), coloured in turn."""
    image = Image.new("RGB", (320, 200), "white")
    draw = ImageDraw.Draw(image)
    step = 60 if len(values) <= 4 else 260 // len(values)
    for i, v in enumerate(values):
        draw.rectangle([30 + step * i, 180 - 1.5 * v, 30 + step * i + step * 2 // 3, 180],
                       fill=("steelblue", "orange", "green", "purple")[i % 4])
    draw.line([20, 180, 300, 180], fill="black")
    return _png(image)


def _write(path: Path, rows: list[dict], schema: pa.Schema) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=4)


# -- olmOCR-synthmix --------------------------------------------------------------------------

SYNTH_PAGES = {
    "pdf_00000_page1": ("Tidal Energy Survey", [
        "Tidal Energy Survey",
        "Measurements at the Bay of Fundy show a mean range of 11.7 metres, the largest recorded.",
        "The turbine array produced 4.2 GWh in its first season of operation.",
    ]),
    "pdf_00001_page1": ("Glacier Notes", [
        "Glacier Notes",
        "The Aletsch glacier retreated by 51 metres during the last measured year, the largest loss since "
        "records began in 1880. Meltwater now feeds a proglacial lake that did not exist a decade ago, and the "
        "survey team logged the shoreline with a differential GPS on four visits between June and September.",
    ]),
    "pdf_00002_page1": ("Missing Reference", ["This page has tests but no reference Markdown."]),
    "pdf_00003_page1": ("Missing PDF", ["This page has a reference but no PDF."]),
}
FRONT = "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n" \
        "is_diagram: False\n---\n"


def _test(pdf: str, kind: str, n: int, **fields) -> dict:
    return {"pdf": f"general/{pdf}.pdf", "page": 1, "id": f"{pdf}_{kind}_{n:08x}", "type": kind, "max_diffs": 0,
            **fields}


def tidal_pdf(title: str, paras: list[str], formula: str, table: list[list[str]]) -> bytes:
    """pdf_00000's page: the paragraphs, the last one ending with ``formula`` (DejaVu, for the Greek and
    the fraction), then a ruled table, so that everything its reference Markdown holds is on the page."""
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen import canvas

    pdfmetrics.registerFont(TTFont("DejaVuSans", FONT))
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=letter, invariant=1)
    c.setTitle(title)
    y = letter[1] - 72
    c.setFont("Helvetica-Bold", 16)
    c.drawString(72, y, paras[0])
    y -= 28
    c.setFont("Helvetica", 10)
    for i, para in enumerate(paras[1:]):
        last = i == len(paras) - 2
        text = para.rstrip(".") + ", where" if last else para
        c.drawString(72, y, text)
        if last:
            c.setFont("DejaVuSans", 10)
            c.drawString(72 + c.stringWidth(text + " ", "Helvetica", 10), y, formula + ".")
            c.setFont("Helvetica", 10)
        y -= 20
    y -= 10
    for r, row in enumerate(table):
        for col, text in enumerate(row):
            c.rect(72 + 90 * col, y - 6, 90, 20)
            c.setFont("Helvetica-Bold" if r == 0 else "Helvetica", 10)
            c.drawString(78 + 90 * col, y, text)
        y -= 20
    c.showPage()
    c.save()
    return buf.getvalue()


def build_synthmix(root: Path) -> None:
    base = root / "olmocr-synthmix"
    training = base / "training" / "general"
    original = base / "bench_data" / "claude_original" / "general"
    training.mkdir(parents=True, exist_ok=True)
    original.mkdir(parents=True, exist_ok=True)
    references = {
        "pdf_00000_page1": "# Tidal Energy Survey\n\nMeasurements at the Bay of Fundy show a mean range of 11.7 "
                           "metres, the largest recorded.\n\nThe turbine array produced 4.2 GWh in its first "
                           "season of operation, where \\(P = \\frac{1}{2} \\rho A v^3\\).\n\n<table><tr><th>Site"
                           "</th><th>Range</th></tr><tr><td>Fundy</td><td>11.7</td></tr><tr><td>Severn</td>"
                           "<td>10.4</td></tr></table>\n",
        "pdf_00001_page1": "# Glacier Notes\n\nThe Aletsch glacier retreated by 51 metres during the last "
                           "measured year, the largest loss since records began in 1880. Meltwater now feeds "
                           "a proglacial lake that did not exist a decade ago, and the survey team logged the "
                           "shoreline with a differential GPS on four visits between June and September.\n",
        "pdf_00003_page1": "# Missing PDF\n\nThis page has a reference but no PDF.\n",
    }
    for stem, (title, paras) in SYNTH_PAGES.items():
        if stem == "pdf_00000_page1":  # its reference has a formula and a table: the page shows them
            pdf = tidal_pdf(title, paras, "P = ½ ρ A v³", [["Site", "Range"], ["Fundy", "11.7"], ["Severn", "10.4"]])
            (training / f"{stem}.pdf").write_bytes(pdf)
        elif stem != "pdf_00003_page1":
            (training / f"{stem}.pdf").write_bytes(text_pdf([paras], title=title))
        if stem in references:
            (training / f"{stem}.md").write_text(FRONT + references[stem], encoding="utf-8")
            (original / f"{stem}_pg1_repeat1.md").write_text(FRONT + references[stem], encoding="utf-8")
    p0, p1 = "pdf_00000_page1", "pdf_00001_page1"
    tests = [
        _test(p0, "present", 1, text="Bay of Fundy", case_sensitive=True),
        _test(p0, "present", 2, text="Zanzibar", case_sensitive=True),  # not on the page: fails on the reference
        _test(p0, "absent", 3, text="Page 7 of 9", case_sensitive=False, max_diffs=1),
        _test(p0, "order", 4, before="mean range of 11.7 metres", after="turbine array produced"),
        _test(p0, "math", 5, math="P = \\frac{1}{2} \\rho A v^3"),
        _test(p0, "table", 6, cell="11.7", left="Fundy", top_heading="Range"),
        _test(p0, "baseline", 7, max_repeats=30),
    ]
    lines = [json.dumps(t) for t in tests]
    lines.insert(3, json.dumps({"pdf": f"general/{p0}.pdf", "page": 1, "id": "bad", "type": "sparkle"}))
    lines += [json.dumps(_test(p1, "present", 8, text="Aletsch glacier")),
              json.dumps(_test(p1, "baseline", 9, max_repeats=30))]
    lines += [json.dumps(_test("pdf_00002_page1", "present", 10, text="no reference")),
              json.dumps(_test("pdf_00003_page1", "present", 11, text="no PDF"))]
    (base / "bench_data" / "general.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


# -- formulas ----------------------------------------------------------------------------------

LATEX_OCR_ROWS = [
    ("image", "E = m c^{2}"),
    ("image", "\\frac { a } { b } + \\sqrt { x _ { 1 } }"),
    ("image", "\\int_{0}^{1} f(x)\\,dx"),
    ("image", "\\notakatexmacro{x}"),
    ("image", ""),
    ("none", "a+b"),
    ("garbage", "c+d"),
]


def build_latex_ocr(root: Path) -> None:
    rows = []
    for kind, text in LATEX_OCR_ROWS:
        image = {"image": {"bytes": text_image([text or "(blank)"]), "path": None},
                 "none": {"bytes": None, "path": None},
                 "garbage": {"bytes": b"this is not an image", "path": None}}[kind]
        rows.append({"image": image, "text": text})
    _write(root / "latex-ocr" / "small" / "train-00000-of-00001.parquet", rows,
           pa.schema([("image", IMAGE), ("text", pa.string())]))


UNIMER_LINES = ["x ^ { 2 } + y ^ { 2 } = r ^ { 2 }", "\\alpha \\beta \\gamma", "", "\\sum_{i=1}^{n} i",
                "\\lim_{n \\to \\infty} a_n"]


def build_unimer(root: Path) -> None:
    base = root / "unimer" / "UniMER-Test"
    folder = base / "spe"
    folder.mkdir(parents=True, exist_ok=True)
    (base / "spe.txt").write_text("\n".join(UNIMER_LINES) + "\n", encoding="utf-8")
    for i, line in enumerate(UNIMER_LINES):
        if i == 3:
            continue  # no image for line 3
        data = huge_png() if i == 4 else text_image([line or "(blank)"])
        (folder / f"{i:07d}.png").write_bytes(data)


# -- MMTab -------------------------------------------------------------------------------------

TABLES = {
    "TABMWP_101": [["Year", "Sales", "Profit"], ["2022", "140", "12"], ["2023", "165", "19"]],
    "WTQ_202": [["City", "Rain (mm)", "Sun (h)"], ["Bergen", "2250", "1200"], ["Madrid", "420", "2769"]],
    "FeTaQA_303": [["Team", "Won", "Lost"], ["Lions", "11", "3"], ["Otters", "6", "8"]],
    "HiTab_404": [["Item", "Count"], ["Pens", "40"], ["Ink", "12"]],
}


def _html(rows: list[list[str]]) -> str:
    return "<table>" + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows) + "</table>"


def build_mmtab(root: Path) -> None:
    base = root / "mmtab"
    images = base / "all_test_image"
    images.mkdir(parents=True, exist_ok=True)
    weather = TABLES["WTQ_202"]
    latex = ("\\begin{tabular}{|c|c|c|}\n\\hline\n" + " & ".join(weather[0]) + " \\\\\n\\hline\n"
             + " & ".join(weather[1]) + " \\\\\n\\hline\n\\multicolumn{2}{|c|}{Madrid, Spain} & 2769 \\\\\n"
             "\\hline\n\\end{tabular}")
    teams = TABLES["FeTaQA_303"]
    markdown = "```markdown\n" + "\n".join(["| " + " | ".join(teams[0]) + " |", "| --- | --- | --- |"]
                                            + ["| " + " | ".join(r) + " |" for r in teams[1:]]) + "\n```"
    ragged = "| Item | Count |\n| --- | --- |\n| Pens | 40 | 12 | 9 |"
    items = []
    for i, (query_type, output, image_id) in enumerate([
        ("table recognition with HTML", _html(TABLES["TABMWP_101"]), "TABMWP_101"),
        ("table recognition with Latex", latex, "WTQ_202"),
        ("table recognition with Markdown", markdown, "FeTaQA_303"),
        ("table question answering", "The profit in 2023 was 19.", "TABMWP_101"),
        ("table recognition with Markdown", ragged, "HiTab_404"),
        ("table recognition with HTML", _html(TABLES["HiTab_404"]), "TABMWP_missing"),
    ]):
        items.append({"item_id": f"TR_test_item_{i}", "image_id": image_id,
                      "input": "Recognize the table in the image.", "output": output, "task_type": "TR",
                      "dataset_name": image_id.split("_")[0], "original_query": "None", "answer_list": [],
                      "original_query_type": query_type})
    for image_id, rows in TABLES.items():
        if image_id == "WTQ_202":  # the image shows what the LaTeX label holds: its last row's merged cell
            rows, spans = [*weather[:2], ["Madrid, Spain", "2769"]], {(2, 0): 2}
            (images / f"{image_id}.jpg").write_bytes(table_image(rows, spans=spans))
            continue
        (images / f"{image_id}.jpg").write_bytes(table_image(rows))
    (base / "MMTab-eval_test_data_49K.json").write_text(json.dumps(items, indent=1), encoding="utf-8")
    pretrain = [["Planet", "Moons"], ["Mars", "2"], ["Jupiter", "95"]]
    (images / "TABMWP_505.jpg").write_bytes(table_image(pretrain))
    llava = [
        {"id": "TR_pretrain_0", "image": "TABMWP_505.jpg", "conversations": [
            {"from": "human", "value": "<image>\nRender this table in HTML."},
            {"from": "gpt", "value": _html(pretrain)}]},
        {"id": "caption_0", "image": "TABMWP_505.jpg", "conversations": [
            {"from": "human", "value": "<image>\nDescribe the image."},
            {"from": "gpt", "value": "A small table of planets and their moons."}]},
    ]
    (base / "MMTab-pre_pretrain_data_llava_format_150K.json").write_text(json.dumps(llava), encoding="utf-8")


# -- SynthChartNet -----------------------------------------------------------------------------

def build_synthchartnet(root: Path) -> None:
    good = ("<loc_20><loc_30><loc_480><loc_470><_Chart_><ched>Quarter<ched>Revenue<nl>"
            "<fcel>Q1<fcel>40<nl><fcel>Q2<fcel>65<nl><fcel>Q3<fcel>90<nl></chart>")
    merged = ("<loc_10><loc_10><loc_490><loc_490><_Chart_><ched>Region<ched>Sales<lcel><nl>"
              "<ecel><ched>2022<ched>2023<nl><fcel>North<fcel>12<fcel>18<nl><fcel>South<fcel>9<fcel>30<nl></chart>")
    bad = "<loc_1><loc_1><loc_9><loc_9><_Chart_><lcel>x<fcel>1<nl></chart>"
    rows = []
    # the bars are the label's values (good: Q1-Q3; merged: North and South, 2022 and 2023); the bad and empty
    # labels are dead letters, whatever their chart shows
    bars = {0: [40, 65, 90], 1: [12, 18, 9, 30]}
    for i, (label, image) in enumerate(((good, True), (merged, True), (bad, True), ("", True), (good, False))):
        values = bars.get(i, [40 + 7 * i, 65, 90 - 9 * i])
        rows.append({"images": [{"bytes": chart_image(values), "path": None}] if image else [],
                     "texts": [{"assistant": label, "source": "SynthChartNet", "user": "<chart>"}]})
    schema = pa.schema([("images", pa.list_(IMAGE)), ("texts", pa.list_(pa.struct(
        [("assistant", pa.string()), ("source", pa.string()), ("user", pa.string())])))])
    _write(root / "synthchartnet" / "default" / "train" / "0000.parquet", rows, schema)


# -- CommonForms -------------------------------------------------------------------------------

def form_image() -> bytes:
    image = Image.new("L", (400, 300), 255)
    draw = ImageDraw.Draw(image)
    face = _font(FONT, 14)
    draw.text((20, 20), "Name:", fill=0, font=face)
    draw.rectangle([80, 18, 380, 40], outline=0)
    draw.text((20, 70), "Member:", fill=0, font=face)
    draw.rectangle([100, 70, 114, 84], outline=0)
    draw.text((20, 240), "Signature:", fill=0, font=face)
    draw.line([110, 260, 380, 260], fill=0)
    return _png(image)


def build_commonforms(root: Path) -> None:
    objects_type = pa.struct([("id", pa.list_(pa.int64())), ("area", pa.list_(pa.float32())),
                              ("bbox", pa.list_(pa.list_(pa.float32()))), ("category", pa.list_(pa.int64())),
                              ("category_id", pa.list_(pa.int64())), ("iscrowd", pa.list_(pa.int64())),
                              ("segmentation", pa.list_(pa.list_(pa.int64())))])

    def objects(boxes: list[tuple[list[float], int]]) -> dict:
        return {"id": list(range(len(boxes))), "area": [b[2] * b[3] for b, _ in boxes], "bbox": [b for b, _ in boxes],
                "category": [c for _, c in boxes], "category_id": [c for _, c in boxes], "iscrowd": [0] * len(boxes),
                "segmentation": [[] for _ in boxes]}

    fields = [([80.0, 18.0, 300.0, 22.0], 0), ([100.0, 70.0, 14.0, 14.0], 1), ([110.0, 230.0, 270.0, 30.0], 2)]
    rows = [
        {"id": 1001, "image_id": 501, "image": {"bytes": form_image(), "path": None}, "file_name": "501.png",
         "width": 400, "height": 300, "objects": objects(fields)},
        {"id": 1002, "image_id": 502, "image": {"bytes": form_image(), "path": None}, "file_name": "502.png",
         "width": 400, "height": 300, "objects": objects([])},
        {"id": 1003, "image_id": 503, "image": {"bytes": form_image(), "path": None}, "file_name": "503.png",
         "width": 400, "height": 300, "objects": objects([([10.0, 10.0, 0.0, 5.0], 0)])},
        {"id": 1004, "image_id": 504, "image": {"bytes": b"\x89PNG\r\n\x1a\ntruncated", "path": None},
         "file_name": "504.png", "width": 400, "height": 300, "objects": objects(fields[:1])},
    ]
    schema = pa.schema([("id", pa.int64()), ("image_id", pa.int64()), ("image", IMAGE), ("file_name", pa.string()),
                        ("width", pa.int64()), ("height", pa.int64()), ("objects", objects_type)])
    _write(root / "commonforms" / "data" / "test-00000-of-00001.parquet", rows, schema)


# -- RVL-CDIP ----------------------------------------------------------------------------------

def build_rvl_cdip(root: Path) -> None:
    letter = text_image(["Dear Sir,", "Thank you for your letter."], (300, 380), fmt="TIFF")
    invoice = text_image(["INVOICE No. 4471", "Total due: $1,280.00"], (300, 380), fmt="TIFF")
    rows = [{"image": {"bytes": letter, "path": None}, "label": 0},
            {"image": {"bytes": invoice, "path": None}, "label": 11},
            {"image": {"bytes": letter, "path": None}, "label": 99},
            {"image": {"bytes": None, "path": None}, "label": 15}]
    _write(root / "rvl-cdip" / "default" / "test" / "0000.parquet", rows,
           pa.schema([("image", IMAGE), ("label", pa.int64())]))


# -- JSSODa (Japanese) -------------------------------------------------------------------------

def build_jssoda(root: Path) -> None:
    horizontal = ["吾輩は猫である。名前はまだ無い。", "どこで生れたかとんと見当がつかぬ。",
                  "何でも薄暗いじめじめした所で", "ニャーニャー泣いていた事だけは記憶している。"]
    vertical = ["春はあけぼの。", "やうやう白くなりゆく山ぎは、", "少しあかりて、紫だちたる雲の", "細くたなびきたる。"]
    question = "画像内のテキストを読み取ってください。"
    rows = [
        {"id": "jssoda-val-000001", "image": {"bytes": text_image(horizontal, (420, 120), JA_FONT), "path": None},
         "question": question, "text": "\n".join(horizontal), "is_vertical": False, "num_columns": 1},
        {"id": "jssoda-val-000002", "image": {"bytes": text_image(vertical, (140, 360), JA_FONT, vertical=True),
                                              "path": None},
         "question": question, "text": "\n".join(vertical), "is_vertical": True, "num_columns": 2},
        {"id": "jssoda-val-000003", "image": {"bytes": text_image(["空"], (120, 60), JA_FONT), "path": None},
         "question": question, "text": "", "is_vertical": False, "num_columns": 1},
        {"id": "jssoda-val-000004", "image": {"bytes": None, "path": None}, "question": question,
         "text": "画像がない。", "is_vertical": False, "num_columns": 1},
    ]
    schema = pa.schema([("id", pa.string()), ("image", IMAGE), ("question", pa.string()), ("text", pa.string()),
                        ("is_vertical", pa.bool_()), ("num_columns", pa.int32())])
    _write(root / "jssoda" / "data" / "validation-00000-of-00001.parquet", rows, schema)


def build(root: Path) -> None:
    random.seed(SEED)
    build_synthmix(root)
    build_latex_ocr(root)
    build_unimer(root)
    build_mmtab(root)
    build_synthchartnet(root)
    build_commonforms(root)
    build_rvl_cdip(root)
    build_jssoda(root)


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]))
