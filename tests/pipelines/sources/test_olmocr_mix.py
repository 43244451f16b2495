"""olmOCR-mix readers on the published layouts (built by samples.make.olmocr under tmp_path)."""

import gzip
import os
import shutil

import pytest

from pipelines.sources import SourceSettings, build_source
from pipelines.sources.olmocr_mix import parse_front_matter, safe_member_name
from samples.make.olmocr import write_tar
from samples.make.pdfs import text_pdf
from schemas.deadletter import RecordError


def source(kind: str, **options):
    return build_source(SourceSettings(name=kind, kind=kind, paths=(), instruction="Convert.",
                                       domain="documents", license="odc-by", options=options))


def read_all(src, uri):
    return [row for unit in src.plan(uri) for row in src.read(unit)]


def by_id(rows):
    return {r.source_id: r for r in rows}


@pytest.fixture
def mix(tmp_path, samples_root):
    shutil.copytree(samples_root / "olmocr-mix-1025", tmp_path / "mix")
    return tmp_path / "mix"


def test_1025_reads_every_row_once(mix):
    rows = read_all(source("olmocr_mix"), str(mix / "00_documents_train.parquet"))
    ids = [r.source_id for r in rows]
    assert len(ids) == len(set(ids)) == 10
    good = [r for r in rows if r.error is None]
    assert len(good) == 8
    page = good[0].pages[0]
    assert page.payload.startswith(b"%PDF") and page.split == "train"
    assert page.metadata["pdf"].startswith("00_documents_train_00000.tar.gz:")


def test_each_tarball_path_is_resolved_once_per_unit_not_once_per_row(mix, monkeypatch):
    """Checking a row's tarball against the root costs two realpath calls: done for every row in every
    tarball unit, it made reading a file of many tarballs ~8x slower."""
    from pipelines.sources import olmocr_mix

    calls = []
    real = olmocr_mix.path_under
    monkeypatch.setattr(olmocr_mix, "path_under", lambda *a: calls.append(a[1]) or real(*a))
    src = source("olmocr_mix")
    units = list(src.plan(str(mix / "00_documents_train.parquet")))
    rows = [row for unit in units for row in src.read(unit)]
    assert len(rows) == 10
    assert len(calls) <= (len(units) + 1) * len(set(calls))  # once in planning, once per unit (not per row)


def test_rotation_flags_kept_and_applied(mix):
    rows = read_all(source("olmocr_mix"), str(mix / "00_documents_train.parquet"))
    rotated = [r.pages[0] for r in rows if r.pages and r.pages[0].rotation]
    assert len(rotated) == 1
    assert rotated[0].rotation == 90
    assert rotated[0].quality["olmocr"]["is_rotation_valid"] is False
    table = [r.pages[0] for r in rows if r.pages and r.pages[0].quality["olmocr"]["is_table"]]
    assert table and table[0].response.startswith("<table>")


def test_missing_member_and_escaping_relpath_are_dead_letters(mix, tmp_path):
    rows = by_id(read_all(source("olmocr_mix"), str(mix / "00_documents_train.parquet")))
    assert rows["rg_900/missing"].error.reason == "missing_tar_member"
    assert rows["rg_901/escape"].error.reason == "unsafe_tar_member"
    # the tarball really holds '../../escape.pdf': nothing may have been written outside the run
    assert not (tmp_path / "escape.pdf").exists() and not (tmp_path.parent / "escape.pdf").exists()


def test_each_units_refresh_digest_covers_exactly_the_rows_it_reports(mix):
    """Editing a row changes the digest of the units that report it before or after, and only theirs: a row
    made unsafe moves from its tarball's unit to the no-tarball one, so both must be read again."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines import io
    from pipelines.sources import olmocr_mix

    path = str(mix / "00_documents_train.parquet")

    def digests():
        io.content_id.cache_clear()
        olmocr_mix._rows_by_tarball.cache_clear()
        src = source("olmocr_mix")
        return {unit.tarballs: (src.unit_digest(unit), {r.source_id for r in src.read(unit)})
                for unit in src.plan(path)}

    before = digests()
    table = pq.read_table(path)
    rel, ids = table.column("pdf_relpath").to_pylist(), table.column("id").to_pylist()
    k = next(i for i, r in enumerate(rel) if r and ":" in r and "../" not in r)
    tarball, member = rel[k].split(":", 1)
    rel[k] = f"{tarball}:../{member}"  # the tarball stays safe, the member does not
    pq.write_table(table.set_column(table.schema.get_field_index("pdf_relpath"), "pdf_relpath",
                                    pa.array(rel, table.schema.field("pdf_relpath").type)), path)
    after = digests()
    moved = ids[k]
    assert moved in after[None][1] and moved not in before[None][1]
    for unit in before:
        reported = before[unit][1] | after[unit][1]
        assert (before[unit][0] != after[unit][0]) == (moved in reported), unit


def test_missing_and_corrupt_tarballs(mix):
    tar = mix / "pdf_tarballs" / "01_books_train_00000.tar.gz"
    data = tar.read_bytes()
    tar.unlink()
    rows = read_all(source("olmocr_mix"), str(mix / "01_books_train.parquet"))
    assert {r.error.reason for r in rows} == {"missing_tarball"} and len(rows) == 4
    tar.write_bytes(data[: len(data) // 2])  # cut mid-stream
    rows = read_all(source("olmocr_mix"), str(mix / "01_books_train.parquet"))
    assert len(rows) == 4
    assert {r.error.reason for r in rows if r.error} == {"corrupt_tarball"}


def test_truncated_parquet_is_one_dead_letter_naming_the_file(mix):
    path = mix / "01_books_train.parquet"
    path.write_bytes(path.read_bytes()[:200])
    rows = read_all(source("olmocr_mix"), str(path))
    assert len(rows) == 1
    assert rows[0].source_id == str(path) and rows[0].error.reason == "unreadable_parquet"


def test_symlink_member_is_refused(tmp_path):
    import io
    import tarfile

    import pandas as pd

    tar_path = tmp_path / "pdf_tarballs" / "x_train_00000.tar.gz"
    tar_path.parent.mkdir()
    with gzip.open(tar_path, "wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        info = tarfile.TarInfo("doc.pdf")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    row = {"id": "doc", "url": "u", "page_number": 1, "pdf_relpath": "pdf_tarballs/x_train_00000.tar.gz:doc.pdf",
           "primary_language": "en", "is_rotation_valid": True, "rotation_correction": 0, "is_table": False,
           "is_diagram": False, "natural_text": "t", "extras": None}
    pd.DataFrame([row]).set_index("id").to_parquet(tmp_path / "x_train.parquet")
    rows = read_all(source("olmocr_mix"), str(tmp_path / "x_train.parquet"))
    assert [r.error.reason for r in rows] == ["unsafe_tar_member"]
    del io


def test_0225_json_response(samples_root):
    rows = read_all(source("olmocr_mix_0225"), str(samples_root / "olmocr-mix-0225" / "train-s2pdf.parquet"))
    assert len(rows) == 4
    assert sorted(r.error.reason for r in rows if r.error) == ["bad_response_json"]
    good = [r.pages[0] for r in rows if r.pages]
    assert all(p.language == "en" and p.response for p in good)


def test_0225_tarball_symlinked_out_of_its_folder_is_never_opened(samples_root, tmp_path, monkeypatch):
    from pipelines import io as pio

    shutil.copytree(samples_root / "olmocr-mix-0225", tmp_path / "mix")
    outside = tmp_path / "outside"
    outside.mkdir()
    tarballs = tmp_path / "mix" / "pdf_tarballs"
    (tarballs / "s2pdf_00000.tar.gz").rename(outside / "s2pdf_00000.tar.gz")
    os.symlink(outside / "s2pdf_00000.tar.gz", tarballs / "s2pdf_00000.tar.gz")
    opened = []
    real = pio.open_read
    monkeypatch.setattr(pio, "open_read", lambda uri, *a, **k: opened.append(str(uri)) or real(uri, *a, **k))
    rows = read_all(source("olmocr_mix_0225"), str(tmp_path / "mix" / "train-s2pdf.parquet"))
    assert len(rows) == 4 and not any(".tar.gz" in uri for uri in opened)
    assert [r.error.reason for r in rows] == ["missing_tar_member"] * 4  # (its PDFs are in no tarball read)


def test_train_dir_pairs(samples_root):
    rows = read_all(source("olmocr_train_dir"), str(samples_root / "olmocr-train"))
    assert len(rows) == 4
    assert sorted(r.error.reason for r in rows if r.error) == ["invalid_front_matter", "invalid_utf8"]


def test_train_dir_symlink_outside_root_is_refused(tmp_path):
    root = tmp_path / "train"
    root.mkdir()
    outside = tmp_path / "outside.pdf"
    outside.write_bytes(text_pdf([["x"]]))
    (root / "a.md").write_text("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
                               "is_table: False\nis_diagram: False\n---\nhello\n")
    os.symlink(outside, root / "a.pdf")
    rows = read_all(source("olmocr_train_dir"), str(root))
    assert [r.error.reason for r in rows] == ["unsafe_path"]


def test_train_dir_label_symlink_outside_root_is_refused(tmp_path):
    root = tmp_path / "train"
    root.mkdir()
    outside = tmp_path / "outside.md"
    outside.write_text("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
                       "is_table: False\nis_diagram: False\n---\nPRIVATE\n")
    (root / "a.pdf").write_bytes(text_pdf([["x"]]))
    os.symlink(outside, root / "a.md")  # the label leaves the root: never read
    rows = read_all(source("olmocr_train_dir"), str(root))
    assert [r.error.reason for r in rows] == ["unsafe_path"] and not rows[0].pages


def test_train_dir_does_not_plan_through_a_symlinked_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.pdf").write_bytes(text_pdf([["x"]]))
    (outside / "b.md").write_text("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
                                  "is_table: False\nis_diagram: False\n---\nPRIVATE\n")
    root = tmp_path / "train"
    (root / "in").mkdir(parents=True)
    (root / "in" / "a.pdf").write_bytes(text_pdf([["x"]]))
    (root / "in" / "a.md").write_text((outside / "b.md").read_text().replace("PRIVATE", "kept"))
    os.symlink(outside, root / "elsewhere")
    src = source("olmocr_train_dir")
    assert [md for _, md in src.plan(str(root))] == [str(root / "in" / "a.md")]
    rows = read_all(src, str(root))
    assert [(r.source_id, r.error) for r in rows] == [("in/a", None)] and rows[0].pages[0].response == "kept\n"


def test_front_matter_parsing():
    fields, body = parse_front_matter(
        "---\nprimary_language: None\nis_rotation_valid: True\nrotation_correction: 180\n"
        "is_table: False\nis_diagram: True\n---\n# Title\n", "x.md")
    assert fields["primary_language"] is None and fields["rotation_correction"] == 180 and body == "# Title\n"
    for bad in ("no front matter", "---\nprimary_language: en\n---\n", "---\n[unclosed\n",
                "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 45\n"
                "is_table: False\nis_diagram: False\n---\n"):
        with pytest.raises(RecordError) as info:
            parse_front_matter(bad, "x.md")
        assert info.value.reason == "invalid_front_matter"


@pytest.mark.parametrize("name,ok", [("a/b.pdf", True), ("../x.pdf", False), ("/etc/passwd", False),
                                     ("a/../../x", False), ("a/./b.pdf", True), ("", False)])
def test_safe_member_name(name, ok):
    assert safe_member_name(name) is ok


def test_tar_writer_is_deterministic(tmp_path):
    write_tar(tmp_path / "a.tar.gz", [("x.pdf", b"1")])
    write_tar(tmp_path / "b.tar.gz", [("x.pdf", b"1")])
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
