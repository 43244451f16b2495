"""``LocalFolderSource`` on the built local sample and on hand-made bad folders."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import pytest

from pipelines.render import RenderConfig, render_page
from pipelines.sources import build_source
from pipelines.sources.base import Row, SourceSettings
from pipelines.sources.local_folder import FolderFile, LocalFolderSource
from samples.make import local as sample
from samples.make.pdfs import paragraphs, scan_image, text_pdf
from schemas.deadletter import Dropped, RecordError


def settings(**options) -> SourceSettings:
    return SourceSettings(name="local", kind="local_folder", paths=(), instruction="Read the page.",
                          domain="office", license="cc-by-4.0", language="en", options=options)


def read_all(folder: Path | str, **options) -> dict[str, Row]:
    source = LocalFolderSource(settings(**options))
    rows = [row for unit in source.plan(str(folder)) for row in source.read(unit)]
    return {r.source_id: r for r in rows}


def reason(row: Row) -> str | None:
    return None if row.error is None else row.error.reason


def pdf(pages: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    return text_pdf([paragraphs(rng, 1, (5, 10)) for _ in range(pages)])


def zero_page_pdf() -> bytes:
    """A well-formed PDF whose page tree is empty."""
    objs = [b"<</Type/Catalog/Pages 2 0 R>>", b"<</Type/Pages/Kids[]/Count 0>>"]
    out, offsets = b"%PDF-1.4\n", []
    for i, obj in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 3\n0000000000 65535 f \n" + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<</Size 3/Root 1 0 R>>\nstartxref\n%d\n%%%%EOF\n" % xref


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("samples")
    sample.build(root)
    return root / "local"


def test_sample_folder(folder):
    source = LocalFolderSource(settings())
    units = list(source.plan(str(folder)))
    assert units == [FolderFile(str(folder), rel) for rel in (
        "letters/letter-1791.pdf", "report.pdf", "scans/deed.jpg", "unlabelled.png")]
    rows = read_all(folder)
    assert all(r.error is None for r in rows.values())

    report = rows["report.pdf"].pages
    parts = (folder / "report.md").read_text(encoding="utf-8").split("\f")
    assert [p.page_number for p in report] == [1, 2]
    assert [p.pdf_page_index for p in report] == [0, 1]
    assert [p.response for p in report] == [parts[0].strip(), parts[1].strip()]
    assert all(p.payload_kind == "pdf" and p.payload == (folder / "report.pdf").read_bytes() for p in report)
    assert report[0].response_format == "markdown"
    assert report[0].metadata == {"path": "report.pdf", "label_path": "report.md"}
    assert report[0].quality == {}
    assert (report[0].source, report[0].source_id, report[0].domain, report[0].license) == (
        "local", "report.pdf", "office", "cc-by-4.0")
    assert report[0].provenance[0].stage == "read:local_folder"

    (letter,) = rows["letters/letter-1791.pdf"].pages
    assert letter.source_id == "letters/letter-1791.pdf"
    assert letter.response == (folder / "letters" / "letter-1791.md").read_text().strip()

    (deed,) = rows["scans/deed.jpg"].pages
    assert deed.payload_kind == "image" and deed.response_format == "text"
    assert deed.response == (folder / "scans" / "deed.txt").read_text().strip()

    (blank,) = rows["unlabelled.png"].pages
    assert blank.response == "" and blank.quality == {"unlabelled": True}


def test_sample_renders_upright(folder):
    rows = read_all(folder)
    deed = render_page(rows["scans/deed.jpg"].pages[0], RenderConfig(longest_side=400))
    assert deed.width < deed.height  # stored landscape with EXIF orientation 6: upright is portrait
    page2 = render_page(rows["report.pdf"].pages[1], RenderConfig(longest_side=300))
    assert page2.text_layer and rows["report.pdf"].pages[1].response.split()[0] in page2.text_layer


def test_bad_pdfs(tmp_path):
    (tmp_path / "corrupt.pdf").write_bytes(b"%PDF-1.4\nnot really")
    (tmp_path / "locked.pdf").write_bytes(text_pdf([["secret"]], password="pw"))
    (tmp_path / "empty.pdf").write_bytes(zero_page_pdf())
    rows = read_all(tmp_path)
    assert reason(rows["corrupt.pdf"]) == "corrupt_pdf"
    assert reason(rows["locked.pdf"]) == "encrypted_pdf"
    # pdfium refuses to load a PDF with an empty page tree, so render.open_pdf reports it as corrupt.
    assert reason(rows["empty.pdf"]) == "zero_page_pdf"
    assert all(not r.pages and isinstance(r.error, RecordError) for r in rows.values())


def test_label_page_mismatch_and_trailing_form_feed(tmp_path):
    (tmp_path / "two.pdf").write_bytes(pdf(2))
    (tmp_path / "two.md").write_text("only one part")
    (tmp_path / "three.pdf").write_bytes(pdf(3))
    (tmp_path / "three.md").write_text("a\fb\fc\f")  # pdftotext style: a form feed after every page
    (tmp_path / "img.png").write_bytes(scan_image(random.Random(0), "x", size=(50, 50), fmt="PNG"))
    (tmp_path / "img.txt").write_text("one\ftwo")
    rows = read_all(tmp_path)
    assert reason(rows["two.pdf"]) == "label_page_mismatch"
    assert "two.md has 1" in str(rows["two.pdf"].error) and "2 page(s)" in str(rows["two.pdf"].error)
    assert [p.response for p in rows["three.pdf"].pages] == ["a", "b", "c"]
    assert reason(rows["img.png"]) == "label_page_mismatch"


def test_invalid_utf8_label(tmp_path):
    (tmp_path / "scan.jpg").write_bytes(scan_image(random.Random(0), "x", size=(50, 50)))
    (tmp_path / "scan.md").write_bytes(b"caf\xe9 latin-1")
    (row,) = read_all(tmp_path).values()
    assert reason(row) == "invalid_utf8" and "scan.md" in str(row.error)


def test_label_preferences_and_normalisation(tmp_path):
    (tmp_path / "a.jpg").write_bytes(scan_image(random.Random(0), "x", size=(50, 50)))
    (tmp_path / "a.md").write_bytes("\ufeff# Title\r\n\r\nBody\r\n".encode("utf-8"))
    (tmp_path / "a.txt").write_text("ignored")
    (page,) = read_all(tmp_path)["a.jpg"].pages
    assert page.response == "# Title\n\nBody" and page.response_format == "markdown"
    assert page.metadata["label_path"] == "a.md"


def test_unsafe_symlinks(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.pdf").write_bytes(pdf(1))
    (outside / "secret.md").write_text("secret label")
    (outside / "dir").mkdir()
    (outside / "dir" / "inner.pdf").write_bytes(pdf(1))
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside / "secret.pdf", root / "link.pdf")
    (root / "real.pdf").write_bytes(pdf(1))
    os.symlink(root / "real.pdf", root / "alias.pdf")  # inside the folder: fine
    (root / "labelled.pdf").write_bytes(pdf(1))
    os.symlink(outside / "secret.md", root / "labelled.md")
    os.symlink(outside / "dir", root / "linked_dir")  # symlinked folders are not descended
    rows = read_all(root)
    assert sorted(rows) == ["alias.pdf", "labelled.pdf", "link.pdf", "real.pdf"]
    assert reason(rows["link.pdf"]) == "unsafe_path" and not rows["link.pdf"].pages
    assert reason(rows["labelled.pdf"]) == "unsafe_path"
    assert reason(rows["alias.pdf"]) is None and reason(rows["real.pdf"]) is None
    source = LocalFolderSource(settings())
    (row,) = source.read(FolderFile(str(root), "../outside/secret.pdf"))
    assert reason(row) == "unsafe_path"


def test_plan_filters_and_sorts(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    for name in ("b/z.TIFF", "b/a.webp", "Upper.PDF", "a.jpeg", "notes.md", "doc.docx", ".hidden/x.pdf",
                 "._a.jpg", "c.tif"):
        (tmp_path / name).write_bytes(b"x")
    units = [u.rel for u in LocalFolderSource(settings()).plan(str(tmp_path) + "/")]
    assert units == ["Upper.PDF", "a.jpeg", "b/a.webp", "b/z.TIFF", "c.tif"]


def test_require_labels_and_pickling(tmp_path):
    (tmp_path / "x.png").write_bytes(scan_image(random.Random(0), "x", size=(40, 40), fmt="PNG"))
    (row,) = read_all(tmp_path, require_labels=True).values()
    assert isinstance(row.error, Dropped) and row.error.reason == "unlabelled"
    source = build_source(settings())
    assert isinstance(source, LocalFolderSource)
    (unit,) = pickle.loads(pickle.dumps(list(source.plan(str(tmp_path)))))
    (row,) = pickle.loads(pickle.dumps(source)).read(unit)
    assert row.pages[0].quality == {"unlabelled": True}


def test_long_pdf_is_planned_as_page_ranges_counted_once(tmp_path):
    from pipelines.accounting import Kind, account_rows

    (tmp_path / "long.pdf").write_bytes(pdf(5))
    (tmp_path / "short.pdf").write_bytes(pdf(2, seed=1))
    (tmp_path / "bad.pdf").write_bytes(pdf(5, seed=2))
    (tmp_path / "bad.md").write_text("one\fpart\fshort")  # 3 parts for 5 pages: every range sees it
    source = LocalFolderSource(settings(pages_per_unit=2))
    units = list(source.plan(str(tmp_path)))
    assert [(u.rel, u.start, u.end) for u in units] == [
        ("bad.pdf", 0, 2), ("bad.pdf", 2, 4), ("bad.pdf", 4, None),
        ("long.pdf", 0, 2), ("long.pdf", 2, 4), ("long.pdf", 4, None), ("short.pdf", 0, None)]
    envelopes = [e for unit in units for e in account_rows("read", "local", source.read(unit))]
    counts: dict[tuple[str, str], int] = {}
    for kind, event in envelopes:
        if kind == Kind.EVENT and event.kind != "seconds":
            counts[(event.kind, event.reason)] = counts.get((event.kind, event.reason), 0) + int(event.value)
    assert counts == {("in", ""): 3, ("out", ""): 2, ("emitted", ""): 7, ("dead", "label_page_mismatch"): 1,
                      ("units", ""): len(units)}  # each unit finished once
    pages = [p for kind, p in envelopes if kind == Kind.ITEM]
    assert [(p.source_id, p.page_number, p.pdf_page_index) for p in pages] == (
        [("long.pdf", i + 1, i) for i in range(5)] + [("short.pdf", 1, 0), ("short.pdf", 2, 1)])
    whole = LocalFolderSource(settings(pages_per_unit=0))
    assert [(u.rel, u.start, u.end) for u in whole.plan(str(tmp_path))] == [
        ("bad.pdf", 0, None), ("long.pdf", 0, None), ("short.pdf", 0, None)]


def test_a_local_folder_is_planned_file_by_file_to_the_same_units(tmp_path):
    """``parts`` lists a local folder's files; planning each one (as the corpus DAG does, spread over its
    workers: ``pipelines.transforms.input_parts``) gives the folder's own plan, unit for unit. A remote
    folder, and a source without parts, stay one input."""
    from pipelines.transforms import input_parts

    (tmp_path / "sub").mkdir()
    (tmp_path / "long.pdf").write_bytes(pdf(5))
    (tmp_path / "sub" / "short.pdf").write_bytes(pdf(2, seed=1))
    (tmp_path / "x.png").write_bytes(scan_image(random.Random(0), "x", size=(40, 40), fmt="PNG"))
    (tmp_path / "notes.md").write_text("a label without its file: not an input")
    source = LocalFolderSource(settings(pages_per_unit=2))
    parts = list(source.parts(str(tmp_path) + "/"))
    root = str(tmp_path)
    assert parts == [FolderFile(root, "long.pdf"), FolderFile(root, "sub/short.pdf"), FolderFile(root, "x.png")]
    whole = list(source.plan(root))
    assert [(u.rel, u.start, u.end) for u in whole] == [
        ("long.pdf", 0, 2), ("long.pdf", 2, 4), ("long.pdf", 4, None), ("sub/short.pdf", 0, None), ("x.png", 0, None)]
    assert [u for part in pickle.loads(pickle.dumps(parts)) for u in source.plan(part)] == whole
    assert list(source.parts("gs://bucket/scans/")) == ["gs://bucket/scans/"]

    local = settings(pages_per_unit=2)
    assert list(input_parts((local, root))) == [(local, part) for part in parts]
    mix = SourceSettings(name="mix", kind="olmocr_mix", paths=())
    assert list(input_parts((mix, "/data/olmocr-mix"))) == [(mix, "/data/olmocr-mix")]
