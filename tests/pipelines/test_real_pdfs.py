"""Real PDFs (olmOCR's public test fixtures) through the ``local_folder`` source: no dead letters, and
every page's stored pixels equal pdfium's own rendering of it.

The fast test reads five of those files, copied into ``tests/data/real_pdfs/`` (Apache-2.0, see its
README), with ``pages_per_unit: 2`` so a document is read as page ranges. The slow one runs the corpus
DAG over the whole folder (64 files, 591 pages, not in the repository): ``$PAGEMILL_REAL_PDFS`` or
``shared/real-pdfs/olmocr`` next to the checkout (or one level up).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pypdfium2 as pdfium
import pytest
from PIL import Image

from pipelines.accounting import Kind, account_rows
from pipelines.render import RenderConfig, render_page
from pipelines.sources.base import SourceSettings
from pipelines.sources.local_folder import LocalFolderSource

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = [Path(os.environ["PAGEMILL_REAL_PDFS"])] if os.environ.get("PAGEMILL_REAL_PDFS") else []
CANDIDATES += [REPO.parent / "shared/real-pdfs/olmocr", REPO.parent.parent / "shared/real-pdfs/olmocr"]
REAL_PDFS = next((p for p in CANDIDATES if p.is_dir()), None)
FEW = ["tests/gnarly_pdfs/edgar-rotated90.pdf", "tests/gnarly_pdfs/handwriting_bad_ocr.pdf",
       "tests/gnarly_pdfs/lots_of_sci_tables.pdf", "tests/sample_dataset/empty_document/blanktext.pdf",
       "tests/gnarly_pdfs/small_page_size.pdf"]

# The five files of the fast test are in the repository; the whole folder is not.
BUNDLED = REPO / "tests" / "data" / "real_pdfs"
needs_folder = pytest.mark.skipif(REAL_PDFS is None, reason="olmOCR's real PDF folder is not on this machine "
                                                            "(set PAGEMILL_REAL_PDFS)")


def pdfium_pixels(path: Path, index: int, longest_side: int = 1288) -> np.ndarray:
    """pypdfium2's own PdfPage.render of the page (a fresh document), as RGB."""
    pdf = pdfium.PdfDocument(str(path))
    try:
        page = pdf[index]
        return page.render(scale=longest_side / max(page.get_size())).to_numpy()[:, :, ::-1]
    finally:
        pdf.close()


def stored_pixels(png: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(png))
    return np.asarray(image.convert("RGB"))


def page_count(path: Path) -> int:
    pdf = pdfium.PdfDocument(str(path))
    try:
        return len(pdf)
    finally:
        pdf.close()


def test_a_few_real_pdfs_read_as_page_ranges_render_as_pdfium_does(tmp_path):
    for rel in FEW:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(BUNDLED / rel, tmp_path / rel)
    source = LocalFolderSource(SourceSettings(name="real", kind="local_folder", paths=(str(tmp_path),),
                                              options={"pages_per_unit": 2}))
    units = list(source.plan(str(tmp_path)))
    assert len(units) > len(FEW)  # the 6-page document is three units
    envelopes = [e for unit in units for e in account_rows("read", "real", source.read(unit))]
    counts: dict[str, int] = {}
    for kind, payload in envelopes:
        if kind == Kind.EVENT and payload.kind != "seconds":
            counts[payload.kind] = counts.get(payload.kind, 0) + int(payload.value)
    pages = [payload for kind, payload in envelopes if kind == Kind.ITEM]
    expected = {rel: page_count(tmp_path / rel) for rel in FEW}
    assert not [p for k, p in envelopes if k == Kind.DEAD]
    assert counts == {"in": len(FEW), "out": len(FEW), "emitted": sum(expected.values()), "units": len(units)}
    assert sorted((p.source_id, p.page_number) for p in pages) == sorted(
        (rel, i + 1) for rel, n in expected.items() for i in range(n))
    for page in pages:
        record = render_page(page, RenderConfig())
        want = pdfium_pixels(tmp_path / page.source_id, page.page_number - 1)
        got = stored_pixels(record.image)
        assert got.shape == want.shape and np.array_equal(got, want), (page.source_id, page.page_number)


@pytest.mark.slow
@needs_folder
def test_the_whole_real_pdf_folder_ingests_with_pdfiums_pixels(tmp_path):
    config = tmp_path / "real.yaml"
    config.write_text(json.dumps({
        "run": {"output": str(tmp_path / "out"), "progress_every": 0},
        "clean": {"stages": [], "dedup": {"enabled": False}},
        "sources": [{"name": "real", "kind": "local_folder", "paths": [str(REAL_PDFS)], "license": "unknown"}],
    }))
    done = subprocess.run([sys.executable, "-m", "pipelines.corpus", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    files = sorted(p for p in REAL_PDFS.rglob("*.pdf"))
    expected = {p.relative_to(REAL_PDFS).as_posix(): page_count(p) for p in files}
    assert manifest["totals"]["dead_lettered"] == 0 and manifest["dead_letter_files"] == []
    assert manifest["totals"]["in"] == len(files)
    assert manifest["totals"]["written"] == sum(expected.values())
    seen = set()
    for shard in sorted((tmp_path / "out" / "data").glob("*.parquet")):
        table = pq.ParquetFile(shard)
        for batch in table.iter_batches(batch_size=16, columns=["source_id", "page_number", "image"]):
            for source_id, number, image in zip(*(batch.column(c).to_pylist() for c in batch.schema.names)):
                want = pdfium_pixels(REAL_PDFS / source_id, number - 1)
                assert np.array_equal(stored_pixels(image["bytes"]), want), (source_id, number)
                seen.add((source_id, number))
    assert seen == {(rel, i + 1) for rel, n in expected.items() for i in range(n)}


SPLIT_RUNS: list[tuple[str, int, int]] = []  # (file, page, run start) that reference_lines split per character


def reference_lines(path: Path, index: int, longest_side: int = 1288) -> list[tuple]:
    """Line boxes as ``schemas.pdf_pages`` defines them, written plainly through pypdfium2's typed
    binding: the text between generated line breaks, boxed by the union of pdfium's text rectangles
    over it less the whitespace at its ends; where a rectangle lies wholly above or below the union so
    far, that text is instead split at every character whose box does not overlap the line so far
    (whitespace and box-less chars join a line without a box); pdfium's U+FFFE and private-use markers
    read as text (``schemas.pdf_pages.unmarked_text``)."""
    import ctypes

    pdf = pdfium.PdfDocument(str(path))
    try:
        page = pdf[index]
        width, height = page.get_size()
        scale = longest_side / max(width, height)
        textpage = page.get_textpage()
        n = textpage.count_chars()
        text = textpage.get_text_range(0, n) if n > 0 else ""
        if n <= 0 or len(text) != n:
            return []
        # pdfium's markers as text: U+FFFE (a hyphen at a line break) "-", a private-use code point a space
        text = "".join("-" if c == "\ufffe" else " " if "\ue000" <= c <= "\uf8ff" else c for c in text)
        boxes = [ctypes.c_double() for _ in range(4)]
        lines = []

        def add(box, chars):
            content = " ".join("".join(chars).split())
            if box is not None and content and box[2] > box[0] and box[3] > box[1]:
                lines.append((box[0] * scale, (height - box[3]) * scale, box[2] * scale, (height - box[1]) * scale,
                              content))

        def per_character(start, end):
            SPLIT_RUNS.append((path.name, index, start))
            box, chars = None, []
            for i in range(start, end):
                ch = text[i]
                if ch.isspace() or not pdfium.raw.FPDFText_GetCharBox(textpage.raw, i, *boxes):
                    chars.append(ch)
                    continue
                left, right, bottom, top = (b.value for b in boxes)
                if box is not None and (bottom > box[3] or top < box[1]):
                    add(box, chars)
                    box, chars = None, []
                box = [left, bottom, right, top] if box is None else [
                    min(box[0], left), min(box[1], bottom), max(box[2], right), max(box[3], top)]
                chars.append(ch)
            add(box, chars)

        start = 0
        for end in [i for i, ch in enumerate(text) if ch in "\r\n"] + [n]:
            run = text[start:end]
            if run.strip():
                first = start + len(run) - len(run.lstrip())
                rects = []
                for k in range(pdfium.raw.FPDFText_CountRects(textpage.raw, first, len(run.strip()))):
                    pdfium.raw.FPDFText_GetRect(textpage.raw, k, *boxes)
                    left, top, right, bottom = (b.value for b in boxes)
                    rects.append((left, bottom, right, top))
                box = None
                for rect in rects:
                    if box is not None and (rect[1] > box[3] or rect[3] < box[1]):
                        per_character(start, end)
                        break
                    box = list(rect) if box is None else [min(box[0], rect[0]), min(box[1], rect[1]),
                                                          max(box[2], rect[2]), max(box[3], rect[3])]
                else:
                    add(box, [run])
            start = end + 1
        return lines
    finally:
        pdf.close()


def test_render_stage_line_boxes_are_the_plain_definitions():
    """The render stage takes pixels, text layer and line boxes from one page load (``render_pdf_page``)
    with ctypes calls the typed binding would slow; the boxes are those of the plain definition, and those of
    ``pdf_line_boxes`` (its own page load)."""
    from schemas.layout import element
    from schemas.pdf_pages import pdf_line_boxes, render_pdf_page

    checked = 0
    for rel in FEW:
        path = BUNDLED / rel
        data = path.read_bytes()
        for index in range(page_count(path)):
            want = reference_lines(path, index)
            _, _, text, lines = render_pdf_page(data, index, 1288, with_text=True, with_lines=True)
            assert lines == want == pdf_line_boxes(data, index, 1288), (rel, index)
            pdf = pdfium.PdfDocument(data)
            try:
                page = pdf[index]
                assert text == page.get_textpage().get_text_bounded()
            finally:
                pdf.close()
            checked += len(want)
    assert checked > 100  # the scientific tables and the filing carry many lines
    assert SPLIT_RUNS  # both kinds of run were checked: boxed by rectangles and split per character
    # and the stage stores them as text_line elements, clipped to the page
    source = LocalFolderSource(SourceSettings(name="real", kind="local_folder", paths=(str(BUNDLED),)))
    page = next(p for unit in source.plan(str(BUNDLED)) for row in source.read(unit) for p in row.pages
                if p.source_id == FEW[2])
    record = render_page(page, RenderConfig())
    clipped = [(max(0.0, x0), max(0.0, y0), min(float(record.width), x1), min(float(record.height), y1), text)
               for x0, y0, x1, y1, text in reference_lines(BUNDLED / FEW[2], page.pdf_page_index)]
    kept = [b for b in clipped if b[2] > b[0] and b[3] > b[1]]
    assert record.elements == [element("text_line", b[:4], i, b[4]) for i, b in enumerate(kept)]


def test_line_boxes_carry_pdfiums_markers_as_text():
    """small_page_size.pdf hyphenates words at line ends, which pdfium reports as U+FFFE: the page's line
    boxes hold a hyphen there (what the page shows), never the marker or a private-use code point."""
    from schemas.pdf_pages import pdf_line_boxes, unmarked_text

    data = (BUNDLED / "tests/gnarly_pdfs/small_page_size.pdf").read_bytes()
    lines = pdf_line_boxes(data, 0, 1288)
    texts = [text for *_, text in lines]
    assert texts and not any("\ufffe" in t or any("\ue000" <= c <= "\uf8ff" for c in t) for t in texts)
    assert sum(t.endswith("-") for t in texts) >= 5
    assert unmarked_text("neigh\ufffe \uf8eb(x\uf8f8") == "neigh-  (x " and unmarked_text("plain") == "plain"
