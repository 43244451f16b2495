"""olmOCR-mix readers on hostile or malformed inputs: every row gets exactly one outcome, a bad cell costs only
its own row, and no error message grows with the input (inputs hand-built under tmp_path)."""

import gzip
import io
import tarfile
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.sources import SourceSettings, build_source, olmocr_mix
from pipelines.sources.olmocr_mix import parse_front_matter
from samples.make.olmocr import write_tar
from schemas.deadletter import RecordError

TAR = "x_train_00000.tar.gz"


def source(kind: str, **options):
    return build_source(SourceSettings(name=kind, kind=kind, paths=(), instruction="Convert.",
                                       domain="documents", license="odc-by", options=options))


def read_all(src, uri):
    return [row for unit in src.plan(uri) for row in src.read(unit)]


def outcomes(rows) -> dict:
    """source id -> page text or error reason; fails when a row has more than one outcome."""
    counts = Counter(r.source_id for r in rows)
    assert all(n == 1 for n in counts.values()), counts
    return {r.source_id: (r.error.reason if r.error else r.pages[0].response) for r in rows}


def mix_rows(n: int = 3, **columns) -> list[dict]:
    """``n`` good 1025 rows (doc0..), with ``columns[name]`` (a list of n values) replacing a column."""
    rows = [{"id": f"doc{i}", "url": f"https://example.org/{i}.pdf", "page_number": i + 1,
             "pdf_relpath": f"pdf_tarballs/{TAR}:doc{i}.pdf", "primary_language": "en", "is_rotation_valid": True,
             "rotation_correction": 0, "is_table": False, "is_diagram": False, "natural_text": f"text {i}",
             "extras": '{"k": 1}'} for i in range(n)]
    for name, values in columns.items():
        for row, value in zip(rows, values):
            row[name] = value
    return rows


def write_mix(root, rows, members=None, name="x_train"):
    """``<root>/<name>.parquet`` of ``rows`` and its tarball holding ``members`` (default: doc<i>.pdf each)."""
    if members is None:
        members = [(f"doc{i}.pdf", f"%PDF-1.4 doc{i}".encode()) for i in range(len(rows))]
    write_tar(root / "pdf_tarballs" / TAR, members)
    path = root / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


# --- 1 and 2: a bad cell costs its own row only ----------------------------------------------------------------

@pytest.mark.parametrize("column,values,reason", [
    ("page_number", ["1", "abc", "3"], "bad_page_number"),  # a string column (1 and 3 still read)
    ("page_number", [1.0, 2.5, 3.0], "bad_page_number"),
    ("page_number", [1, 0, 3], "bad_page_number"),
    ("extras", [None, 7, None], "invalid_extras"),  # an int column: json.loads(7) raised TypeError
    ("extras", ['{"a": 1}', "[" * 100_000, None], "invalid_extras"),  # nesting past the recursion limit
    ("natural_text", [None, 5, None], "bad_natural_text"),
    ("url", [None, 3, None], "bad_url"),
])
def test_one_bad_cell_dead_letters_only_its_row(tmp_path, column, values, reason):
    path = write_mix(tmp_path, mix_rows(**{column: values}))
    got = outcomes(read_all(source("olmocr_mix"), path))
    assert got["doc1"] == reason
    assert got["doc0"] != reason and got["doc2"] != reason  # written, not blamed on the tarball
    assert {got["doc0"], got["doc2"]} & {"corrupt_tarball", "bad_record"} == set()
    assert len(got) == 3


def test_bad_page_number_does_not_become_corrupt_tarball(tmp_path):
    """The reviewer's case: int('abc') escaped into the tarball's error handler, which lost the row and
    dead-lettered every later row as corrupt_tarball."""
    path = write_mix(tmp_path, mix_rows(5, page_number=["1", "2", "abc", "4", "5"]))
    rows = read_all(source("olmocr_mix"), path)
    got = outcomes(rows)
    assert got == {"doc0": "text 0", "doc1": "text 1", "doc2": "bad_page_number", "doc3": "text 3",
                   "doc4": "text 4"}
    bad = next(r for r in rows if r.error)
    assert "doc2" in str(bad.error) and "page_number" in str(bad.error)
    assert [r.pages[0].page_number for r in rows if r.pages] == [1, 2, 4, 5]


def test_unforeseen_error_in_one_row_is_that_rows_bad_record(tmp_path, monkeypatch):
    path = write_mix(tmp_path, mix_rows())
    real = olmocr_mix.OlmOcrMixSource.response_fields

    def flaky(self, row, where):
        if where == "doc1":
            raise ZeroDivisionError("boom")
        return real(self, row, where)

    monkeypatch.setattr(olmocr_mix.OlmOcrMixSource, "response_fields", flaky)
    got = outcomes(read_all(source("olmocr_mix"), path))
    assert got == {"doc0": "text 0", "doc1": "bad_record", "doc2": "text 2"}


def test_bad_ids_are_dead_lettered_once_by_their_place(tmp_path):
    rows = mix_rows(3, id=["doc0", None, "d" * 5000])
    path = write_mix(tmp_path, rows)
    got = outcomes(read_all(source("olmocr_mix"), path))
    assert got == {"doc0": "text 0", f"{path}#row1": "missing_id", f"{path}#row2": "bad_id"}


def test_0225_bad_cells(tmp_path):
    deep = "[" * 100_000
    good = ('{"primary_language": "en", "is_rotation_valid": true, "rotation_correction": 0, "is_table": false, '
            '"is_diagram": false, "natural_text": "hello"}')
    rows = [{"id": "a", "url": "u", "page_number": 1, "response": good},
            {"id": "b", "url": "u", "page_number": 1, "response": deep},
            {"id": "c", "url": "u", "page_number": "x", "response": good},
            {"id": None, "url": "u", "page_number": 1, "response": good},
            {"id": "e", "url": "u", "page_number": 1, "response": good.replace('"hello"', "[1]")}]
    for row in rows:
        row["page_number"] = str(row["page_number"])
    path = tmp_path / "train-s2pdf.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    write_tar(tmp_path / "pdf_tarballs" / "t.tar.gz", [(f"{i}.pdf", b"%PDF") for i in "abce"])
    got = outcomes(read_all(source("olmocr_mix_0225"), str(path)))
    assert got == {"a": "hello", "b": "bad_response_json", "c": "bad_page_number", f"{path}#row3": "missing_id",
                   "e": "bad_natural_text"}


# --- 3: a refused member, then the stream breaks --------------------------------------------------------------

def _tar_with_refused_member_then_truncated(path, refused: str, kind: str):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"%PDF-1.4 good"
        info = tarfile.TarInfo("doc0.pdf")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(refused)
        if kind == "symlink":
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
        else:
            big = b"x" * 4096
            info.size = len(big)
            tar.addfile(info, io.BytesIO(big))
        junk = bytes(range(256)) * 800
        info = tarfile.TarInfo("zz/junk.bin")
        info.size = len(junk)
        tar.addfile(info, io.BytesIO(junk))
    raw = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw[: len(raw) - 150_000]))  # cut inside junk.bin's data


@pytest.mark.parametrize("kind,reason", [("symlink", "unsafe_tar_member"), ("oversize", "tar_member_too_large")])
def test_refused_member_then_broken_stream_gives_each_row_one_outcome(tmp_path, monkeypatch, kind, reason):
    monkeypatch.setattr(olmocr_mix, "MAX_MEMBER_BYTES", 1024)
    path = write_mix(tmp_path, mix_rows(2))
    _tar_with_refused_member_then_truncated(tmp_path / "pdf_tarballs" / TAR, "doc1.pdf", kind)
    got = outcomes(read_all(source("olmocr_mix"), path))
    assert got == {"doc0": "text 0", "doc1": reason}


def test_member_cut_while_read_is_corrupt_tarball_once(tmp_path):
    path = write_mix(tmp_path, mix_rows(2), members=[("doc0.pdf", b"%PDF a"), ("doc1.pdf", bytes(range(256)) * 800)])
    tar = tmp_path / "pdf_tarballs" / TAR
    raw = gzip.decompress(tar.read_bytes())
    tar.write_bytes(gzip.compress(raw[:100_000]))  # doc1.pdf's data is cut
    got = outcomes(read_all(source("olmocr_mix"), path))
    assert got == {"doc0": "text 0", "doc1": "corrupt_tarball"}


def test_oversized_long_name_header_is_corrupt_tarball(tmp_path, monkeypatch):
    """tarfile reads a GNU long name (or pax header) whole: one claiming more than the cap stops the stream."""
    monkeypatch.setattr(olmocr_mix, "MAX_TAR_HEADER_BYTES", 1024)
    path = write_mix(tmp_path, mix_rows(1))
    tar = tmp_path / "pdf_tarballs" / TAR
    with gzip.open(tar, "wb") as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as out:
        for name in ("n" * 2000, "doc0.pdf"):
            info = tarfile.TarInfo(name)
            info.size = 4
            out.addfile(info, io.BytesIO(b"%PDF"))
    rows = read_all(source("olmocr_mix"), path)
    assert outcomes(rows) == {"doc0": "corrupt_tarball"}
    assert "extended header" in str(rows[0].error) and len(str(rows[0].error)) < 1000


# --- 4: a parquet file whose pdf_relpath column is missing or not strings -------------------------------------

@pytest.mark.parametrize("mode", ["missing", "int", "binary"])
def test_bad_pdf_relpath_column_is_one_bad_schema_letter(tmp_path, mode):
    table = pa.Table.from_pylist(mix_rows(3))
    i = table.schema.get_field_index("pdf_relpath")
    if mode == "missing":
        table = table.remove_column(i)
    elif mode == "int":
        table = table.set_column(i, "pdf_relpath", pa.array(range(3)))
    else:
        table = table.set_column(i, "pdf_relpath", pa.array([f"pdf_tarballs/{TAR}:doc{k}.pdf".encode()
                                                             for k in range(3)]))
    write_tar(tmp_path / "pdf_tarballs" / TAR, [(f"doc{k}.pdf", b"%PDF") for k in range(3)])
    path = str(tmp_path / "x_train.parquet")
    pq.write_table(table, path)
    src = source("olmocr_mix")
    units = list(src.plan(path))  # raised IndexError/TypeError out of plan
    rows = [row for unit in units for row in src.read(unit)]
    assert [(r.source_id, r.error.reason) for r in rows] == [(path, "bad_schema")]
    assert "pdf_relpath" in str(rows[0].error)


def test_a_bad_file_does_not_stop_a_good_one(tmp_path):
    good = write_mix(tmp_path, mix_rows(2))
    bad_table = pa.Table.from_pylist(mix_rows(2)).drop_columns(["pdf_relpath"])
    bad = str(tmp_path / "y_train.parquet")
    pq.write_table(bad_table, bad)
    src = source("olmocr_mix")
    got = outcomes(read_all(src, bad) + read_all(src, good))
    assert got == {bad: "bad_schema", "doc0": "text 0", "doc1": "text 1"}


def test_a_non_string_relpath_cell_is_that_rows_letter():
    with pytest.raises(RecordError) as info:
        olmocr_mix._split_relpath(12)
    assert info.value.reason == "missing_pdf_relpath"


# --- 5: front matter: YAML aliases, oversized values, odd keys ------------------------------------------------

def _alias_bomb(depth: int) -> str:
    levels = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, depth):
        levels.append(f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return ("---\nprimary_language: en\nis_rotation_valid: true\nrotation_correction: [" + ", ".join(levels)
            + "]\nis_table: false\nis_diagram: false\n---\nHello\n")


def test_front_matter_aliases_are_refused_with_a_short_message():
    with pytest.raises(RecordError) as info:
        parse_front_matter(_alias_bomb(3), "bomb.md")  # 9**3 strings: a ~5 KB message before
    assert info.value.reason == "invalid_front_matter"
    assert "alias" in str(info.value) and len(str(info.value)) < 1000


@pytest.mark.parametrize("valid,rotation,diagram,why", [
    ("&t true", "0", "*t", "alias"),  # a harmless-looking alias is refused too
    ("true", "false", "false", "rotation_correction False"),  # a bool is an int in Python: it passed as 0
])
def test_front_matter_refused(valid, rotation, diagram, why):
    text = (f"---\nprimary_language: en\nis_rotation_valid: {valid}\nrotation_correction: {rotation}\n"
            f"is_table: false\nis_diagram: {diagram}\n---\nHello\n")
    with pytest.raises(RecordError) as info:
        parse_front_matter(text, "x.md")
    assert info.value.reason == "invalid_front_matter" and why in str(info.value)


@pytest.mark.parametrize("value", ["x" * 1_000_000, "[" + ", ".join(["[" + ",".join(["1"] * 500) + "]"] * 20) + "]"])
def test_front_matter_messages_quote_values_briefly(value):
    text = (f"---\nprimary_language: en\nis_rotation_valid: true\nrotation_correction: 0\n"
            f"is_table: {value}\nis_diagram: false\n---\n")
    with pytest.raises(RecordError) as info:
        parse_front_matter(text, "x.md")
    assert info.value.reason == "invalid_front_matter" and len(str(info.value)) < 1000


@pytest.mark.parametrize("front", [
    "1: x\na: y\n",  # keys of mixed types: sorting them raised TypeError
    "rotation_correction: " + "1" * 5000 + "\n",  # an int past Python's digit limit: ValueError from PyYAML
    "a: " + "[" * 5000 + "\n",  # nesting
])
def test_odd_front_matter_is_invalid_front_matter(front):
    with pytest.raises(RecordError) as info:
        parse_front_matter("---\n" + front + "---\nbody\n", "x.md")
    assert info.value.reason == "invalid_front_matter" and len(str(info.value)) < 1000


def test_train_dir_alias_bomb_is_one_short_dead_letter_and_the_rest_read(tmp_path):
    root = tmp_path / "train"
    root.mkdir()
    (root / "bomb.md").write_text(_alias_bomb(4))
    (root / "bomb.pdf").write_bytes(b"%PDF-1.4")
    (root / "ok.md").write_text("---\nprimary_language: en\nis_rotation_valid: true\nrotation_correction: 0\n"
                                "is_table: false\nis_diagram: false\n---\nHello\n")
    (root / "ok.pdf").write_bytes(b"%PDF-1.4")
    (root / "odd.md").write_text("---\n1: x\na: y\n---\nHello\n")
    (root / "odd.pdf").write_bytes(b"%PDF-1.4")
    rows = read_all(source("olmocr_train_dir"), str(root))
    assert outcomes(rows) == {"bomb": "invalid_front_matter", "ok": "Hello\n", "odd": "invalid_front_matter"}
    assert all(len(str(r.error)) < 1000 for r in rows if r.error)


def test_oversized_front_matter_is_refused_before_parsing():
    text = "---\nprimary_language: en\n" + "# pad\n" * 20_000 + "---\n"
    with pytest.raises(RecordError) as info:
        parse_front_matter(text, "x.md")
    assert info.value.reason == "invalid_front_matter" and "over" in str(info.value)


def test_long_relpath_is_quoted_briefly(tmp_path):
    path = write_mix(tmp_path, mix_rows(2, pdf_relpath=[f"pdf_tarballs/{TAR}:doc0.pdf", "y" * 1_000_000]))
    rows = read_all(source("olmocr_mix"), path)
    assert outcomes(rows) == {"doc0": "text 0", "doc1": "missing_pdf_relpath"}
    assert all(len(str(r.error)) < 1000 for r in rows if r.error)
