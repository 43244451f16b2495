"""Readers of Table 2's element, form and multilingual corpora on their samples and on bad rows.

olmOCR-synthmix, LaTeX-OCR (mapped columns), UniMER (``formula_lines``), MMTab, SynthChartNet,
CommonForms, RVL-CDIP and JSSODa (mapped columns, Japanese), each read from the layout
``samples/make/elements.py`` writes; pages are rendered by the real render stage so the bad images
(undecodable, over the pixel cap) reach their dead letter where the DAG puts them.
"""

from __future__ import annotations

import io as _io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.config import load_config
from pipelines.render import RenderConfig, render_page
from pipelines.sources import build_source
from pipelines.sources.base import Row, SourceSettings
from pipelines.sources.mmtab import iter_json_items
from samples.make import elements as sample
from schemas.config import ConfigError
from schemas.deadletter import Dropped, RecordError
from schemas.page import validate
from schemas.unit_tests import check_all, unit_test_from_json

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("elements")
    sample.build(path)
    return path


def source(kind: str, task: str = "parse_page", language: str = "und", **options):
    return build_source(SourceSettings(name=kind, kind=kind, paths=(), task=task, language=language,
                                       license="test", options=options))


def read(src, *uris) -> dict[str, Row]:
    rows = [row for uri in uris for unit in src.plan(str(uri)) for row in src.read(unit)]
    out = {r.source_id: r for r in rows}
    assert len(out) == len(rows), "source ids must be unique"
    return out


def outcome(row: Row) -> str:
    """ok, or the reason it was dropped / dead-lettered (reading, then rendering)."""
    if row.error is not None:
        kind = "dropped" if isinstance(row.error, Dropped) else "dead"
        return f"{kind}:{row.error.reason}"
    try:
        for page in row.pages:
            record = render_page(page, RenderConfig())
            assert validate(record) == [], validate(record)
    except RecordError as exc:
        return f"dead:{exc.reason}"
    return "ok"


# -- olmOCR-synthmix ---------------------------------------------------------------------------


def test_synthmix_tests_become_unit_tests_checked_on_their_reference(root):
    src = source("olmocr_synthmix")
    rows = read(src, root / "olmocr-synthmix/bench_data/general.jsonl")
    assert {k: outcome(r) for k, r in rows.items()} == {
        "general/pdf_00000_page1": "ok", "general/pdf_00001_page1": "ok",
        "general/pdf_00002_page1": "dead:missing_reference", "general/pdf_00003_page1": "dead:missing_pdf"}
    (page,) = rows["general/pdf_00000_page1"].pages
    assert page.quality["read"]["counters"] == {"tests_kept": 6, "tests_failed_reference": 1, "tests_invalid": 1}
    tests = [unit_test_from_json(t) for t in page.unit_tests]
    assert {t.type for t in tests} == {"present", "absent", "order", "math", "table", "baseline"}
    assert "Zanzibar" not in "".join(page.unit_tests)
    assert all(passed for _, passed, _ in check_all(tests, page.response))  # the one checker, again
    assert not page.response.startswith("---") and page.language == "en" and page.payload_kind == "pdf"


def test_synthmix_claude_original_reference_and_split_groups(root, tmp_path):
    src = source("olmocr_synthmix", reference="claude_original", root=str(root / "olmocr-synthmix"))
    rows = read(src, root / "olmocr-synthmix/bench_data/general.jsonl")
    assert outcome(rows["general/pdf_00001_page1"]) == "ok"
    lines = (root / "olmocr-synthmix/bench_data/general.jsonl").read_text().splitlines()
    first = [ln for ln in lines if "pdf_00001" in ln]
    jsonl = tmp_path / "bench_data" / "general.jsonl"
    jsonl.parent.mkdir()
    jsonl.write_text("\n".join([first[0], lines[0], first[1]]) + "\n")  # pdf_00001's group is interrupted
    src = source("olmocr_synthmix", root=str(root / "olmocr-synthmix"))
    outcomes = [outcome(r) for unit in src.plan(str(jsonl)) for r in src.read(unit)]
    assert outcomes == ["ok", "ok", "dead:split_test_group"]


def test_synthmix_a_repeated_test_id_is_invalid_not_kept_twice(root, tmp_path):
    lines = (root / "olmocr-synthmix/bench_data/general.jsonl").read_text().splitlines()
    first = [ln for ln in lines if "pdf_00000" in ln]
    jsonl = tmp_path / "bench_data" / "general.jsonl"
    jsonl.parent.mkdir()
    jsonl.write_text("\n".join([*first, first[0]]) + "\n")  # the first test again, as olmOCR's load_tests refuses
    rows = read(source("olmocr_synthmix", root=str(root / "olmocr-synthmix")), jsonl)
    (page,) = rows["general/pdf_00000_page1"].pages
    ids = [unit_test_from_json(t).id for t in page.unit_tests]
    assert len(ids) == len(set(ids)) == 6
    assert page.quality["read"]["counters"] == {"tests_kept": 6, "tests_failed_reference": 1, "tests_invalid": 2}


def test_synthmix_pdf_or_reference_symlinked_out_of_the_dataset_is_unsafe(tmp_path):
    import os

    (tmp_path / "secret.md").write_text("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
                                        "is_table: False\nis_diagram: False\n---\nBay of Fundy\n")
    (tmp_path / "secret.pdf").write_bytes(b"%PDF-1.4 outside")
    ds = tmp_path / "ds"
    (ds / "training" / "general").mkdir(parents=True)
    (ds / "bench_data").mkdir()
    os.symlink(tmp_path / "secret.md", ds / "training" / "general" / "a.md")  # the reference leaves
    (ds / "training" / "general" / "b.md").write_text((tmp_path / "secret.md").read_text())
    os.symlink(tmp_path / "secret.pdf", ds / "training" / "general" / "b.pdf")  # the PDF leaves
    tests = [{"pdf": f"general/{n}.pdf", "page": 1, "id": n, "type": "present", "max_diffs": 0,
              "text": "Bay of Fundy", "case_sensitive": True} for n in ("a", "b")]
    (ds / "bench_data" / "general.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests))
    rows = read(source("olmocr_synthmix"), ds / "bench_data" / "general.jsonl")
    assert {k: outcome(r) for k, r in rows.items()} == {"general/a": "dead:unsafe_path",
                                                          "general/b": "dead:unsafe_path"}


def test_synthmix_unreadable_file_is_one_row(tmp_path):
    (row,) = source("olmocr_synthmix").read(str(tmp_path / "nope.jsonl"))
    assert outcome(row) == "dead:unreadable_file"


# -- formulas ----------------------------------------------------------------------------------


def test_files_of_the_same_name_in_two_subsets_give_distinct_fallback_ids(root, tmp_path):
    """Rows without an id column are named by their file relative to the source's paths, so LaTeX_OCR's
    <subset>/train-00000-of-00001.parquet files (one per subset folder) cannot collide."""
    import shutil

    for subset in ("small", "full"):
        (tmp_path / subset).mkdir()
        shutil.copy(root / "latex-ocr/small/train-00000-of-00001.parquet", tmp_path / subset)
    src = build_source(SourceSettings(
        name="latex", kind="historical", paths=(str(tmp_path / "*/train-*.parquet"),), task="transcribe_formula",
        license="test", options={"columns": {"text": "text", "image_bytes": "image"}, "response_format": "latex"}))
    rows = read(src, tmp_path / "small/train-00000-of-00001.parquet", tmp_path / "full/train-00000-of-00001.parquet")
    assert len(rows) == 14 and "small/train-00000-of-00001.parquet#0" in rows
    assert "full/train-00000-of-00001.parquet#0" in rows


def test_latex_ocr_as_mapped_columns_without_id(root):
    src = source("historical", task="transcribe_formula", columns={"text": "text", "image_bytes": "image"},
                 response_format="latex")
    rows = read(src, root / "latex-ocr/small/train-00000-of-00001.parquet")
    name = "train-00000-of-00001.parquet"
    assert [outcome(rows[f"{name}#{i}"]) for i in range(7)] == [
        "ok", "ok", "ok", "ok", "dropped:empty_transcription", "dead:missing_image", "dead:corrupt_image"]
    page = rows[f"{name}#1"].pages[0]
    assert (page.task, page.response_format, page.response) == (
        "transcribe_formula", "latex", sample.LATEX_OCR_ROWS[1][1])


def test_unimer_formula_lines(root):
    src = source("formula_lines", task="transcribe_formula")
    rows = read(src, root / "unimer/UniMER-Test/spe.txt")
    assert {k: outcome(r) for k, r in rows.items()} == {
        "spe/0000000.png": "ok", "spe/0000001.png": "ok", "spe/0000002.png": "dead:empty_label",
        "spe/0000003.png": "dead:missing_image", "spe/0000004.png": "dead:image_too_large"}
    page = rows["spe/0000001.png"].pages[0]
    assert page.response == "\\alpha \\beta \\gamma" and page.metadata == {"label_file": "spe.txt", "line": 2}


def test_formula_lines_unpadded_names_and_other_folder(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "math.txt").write_text("a+b\nc\n")
    (tmp_path / "imgs" / "1.png").write_bytes(sample.text_image(["c"]))
    rows = read(source("formula_lines", task="transcribe_formula", images=str(tmp_path / "imgs"), name_width=0),
                tmp_path / "math.txt")
    assert {k: outcome(r) for k, r in rows.items()} == {"math/0.png": "dead:missing_image", "math/1.png": "ok"}


def test_formula_lines_digest_follows_the_images_and_a_bom_is_not_a_formula(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "math.txt").write_bytes("\ufeff\\frac{a}{b}\nc\n".encode())
    (tmp_path / "imgs" / "0.png").write_bytes(sample.text_image(["a/b"]))
    src = source("formula_lines", task="transcribe_formula", images=str(tmp_path / "imgs"), name_width=0)
    unit = str(tmp_path / "math.txt")
    rows = read(src, unit)
    assert rows["math/0.png"].pages[0].response == "\\frac{a}{b}"
    from pipelines import io

    digests = [src.unit_digest(unit)]
    (tmp_path / "imgs" / "1.png").write_bytes(sample.text_image(["c"]))  # the missing image arrives
    io.content_id.cache_clear()  # content ids are cached per process; a refresh is a new run
    digests.append(src.unit_digest(unit))
    (tmp_path / "imgs" / "1.png").write_bytes(sample.text_image(["d"]))  # and is replaced
    io.content_id.cache_clear()
    digests.append(src.unit_digest(unit))
    assert len(set(digests)) == 3 and src.unit_digest(unit) == digests[-1]


def test_mmtab_digest_follows_the_images_its_items_name(tmp_path, root):
    import shutil

    images = tmp_path / "images"
    shutil.copytree(root / "mmtab/all_test_image", images)
    unit = str(root / "mmtab/MMTab-eval_test_data_49K.json")
    src = source("mmtab", task="transcribe_table", images=str(images))
    from pipelines import io

    before = src.unit_digest(unit)
    named = sorted(images.iterdir())[0]
    named.write_bytes(named.read_bytes() + b"\0")  # an image replaced
    io.content_id.cache_clear()  # content ids are cached per process; a refresh is a new run
    after = src.unit_digest(unit)
    assert after != before
    (images / "unrelated.jpg").write_bytes(b"x")  # a file no item names changes nothing
    io.content_id.cache_clear()
    assert src.unit_digest(unit) == after


def test_formula_lines_image_symlinked_out_of_the_folder_is_unsafe(tmp_path):
    import os

    (tmp_path / "secret.png").write_bytes(b"\x89PNG outside")
    (tmp_path / "set" / "f").mkdir(parents=True)
    os.symlink(tmp_path / "secret.png", tmp_path / "set" / "f" / "0.png")
    (tmp_path / "set" / "f.txt").write_text("x^2\n")
    src = source("formula_lines", task="transcribe_formula", name_width=0)
    rows = read(src, tmp_path / "set" / "f.txt")
    assert {k: outcome(r) for k, r in rows.items()} == {"f/0.png": "dead:unsafe_path"}
    assert src.unit_digest(str(tmp_path / "set" / "f.txt"))  # the digest never hashes the outside file


# -- MMTab ---------------------------------------------------------------------------------------


def test_mmtab_tables_become_canonical_html(root):
    src = source("mmtab", task="transcribe_table", images=str(root / "mmtab/all_test_image"))
    rows = read(src, root / "mmtab/MMTab-eval_test_data_49K.json",
                root / "mmtab/MMTab-pre_pretrain_data_llava_format_150K.json")
    assert {k: outcome(r) for k, r in rows.items()} == {
        "TR_test_item_0": "ok", "TR_test_item_1": "ok", "TR_test_item_2": "ok",
        "TR_test_item_3": "dropped:not_table_recognition", "TR_test_item_4": "dead:unparseable_table",
        "TR_test_item_5": "dead:missing_image", "TR_pretrain_0": "ok", "caption_0": "dropped:not_table_recognition"}
    latex = rows["TR_test_item_1"].pages[0]
    assert latex.response.startswith("<table><tr><td>City</td>") and '<td colspan="2">Madrid, Spain</td>' in \
        latex.response and latex.quality["label_format"] == "latex"
    markdown = rows["TR_test_item_2"].pages[0]
    assert "<th>Team</th>" in markdown.response and "```" not in markdown.response
    assert {p.response_format for r in rows.values() for p in r.pages} == {"html"}


def test_mmtab_image_symlinked_out_of_the_folder_or_not_plain_is_unsafe(tmp_path):
    import os

    (tmp_path / "secret.png").write_bytes(b"\x89PNG outside")
    images = tmp_path / "mm" / "images"
    images.mkdir(parents=True)
    os.symlink(tmp_path / "secret.png", images / "T1.jpg")
    items = [{"item_id": "T1", "image_id": "T1", "output": "<table><tr><td>a</td></tr></table>",
              "original_query_type": "table recognition with HTML"},
             {"id": "L1", "image": "../secret.png",
              "conversations": [{"from": "gpt", "value": "<table><tr><td>a</td></tr></table>"}]}]
    (tmp_path / "mm" / "eval.json").write_text(json.dumps(items))
    src = source("mmtab", task="transcribe_table", images=str(images))
    rows = read(src, tmp_path / "mm" / "eval.json")
    assert {k: outcome(r) for k, r in rows.items()} == {"T1": "dead:unsafe_path", "L1": "dead:unsafe_path"}


def test_iter_json_items_streams_across_chunks(monkeypatch):
    import pipelines.sources.mmtab as mmtab

    monkeypatch.setattr(mmtab, "CHUNK", 7)  # items and numbers cut at every chunk boundary
    items = [{"a": "é" * 5, "n": 12345678}, 1234567890, [1, 2, {"b": None}], "x"]
    assert list(iter_json_items(_io.BytesIO(json.dumps(items).encode()), "t")) == items
    lines = b'{"a": 1}\n{"a": 2}\n'
    assert list(iter_json_items(_io.BytesIO(lines), "t")) == [{"a": 1}, {"a": 2}]
    with pytest.raises(RecordError, match="offset"):
        list(iter_json_items(_io.BytesIO(b'[{"a": 1}, {"a": '), "t"))


def test_mmtab_truncated_file_keeps_its_items_and_names_the_break(tmp_path, root):
    good = json.loads((root / "mmtab/MMTab-eval_test_data_49K.json").read_text())[:1]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(good)[:-1] + ', {"item_id": ')
    src = source("mmtab", task="transcribe_table", images=str(root / "mmtab/all_test_image"))
    outcomes = [outcome(r) for r in src.read(str(path))]
    assert outcomes == ["ok", "dead:unreadable_json"]


# -- SynthChartNet, CommonForms, RVL-CDIP --------------------------------------------------------


def test_synthchartnet_otsl_to_html(root):
    rows = read(source("synthchartnet", task="chart_to_table"), root / "synthchartnet/default/train/0000.parquet")
    assert [outcome(rows[f"0000.parquet#{i}"]) for i in range(5)] == [
        "ok", "ok", "dead:unparseable_table", "dead:empty_label", "dead:missing_image"]
    first = rows["0000.parquet#0"].pages[0]
    assert first.response == ("<table><tr><th>Quarter</th><th>Revenue</th></tr><tr><td>Q1</td><td>40</td></tr>"
                              "<tr><td>Q2</td><td>65</td></tr><tr><td>Q3</td><td>90</td></tr></table>")
    assert '<th colspan="2">Sales</th>' in rows["0000.parquet#1"].pages[0].response


def test_commonforms_fields_as_kie_json(root):
    rows = read(source("commonforms", task="kie"), root / "commonforms/data/test-00000-of-00001.parquet")
    assert {k: outcome(r) for k, r in rows.items()} == {
        "1001": "ok", "1002": "dropped:no_fields", "1003": "dead:bad_label", "1004": "dead:corrupt_image"}
    page = rows["1001"].pages[0]
    fields = json.loads(page.response)["fields"]
    # COCO [x, y, w, h] on a 400x300 page -> [x0, y0, x1, y1] on a 0-1000 grid, top to bottom
    assert fields == [{"type": "text", "bbox": [200, 60, 950, 133]}, {"type": "checkbox", "bbox": [250, 233, 285, 280]},
                      {"type": "signature", "bbox": [275, 767, 950, 867]}]
    assert page.response_format == "json" and page.quality["fields"] == {"text": 1, "checkbox": 1, "signature": 1}


def test_commonforms_objects_as_a_list_of_structs(tmp_path):
    objects = pa.list_(pa.struct([("bbox", pa.list_(pa.float32())), ("category", pa.int64())]))
    table = pa.Table.from_pylist(
        [{"image": {"bytes": sample.form_image(), "path": None}, "width": 400, "height": 300,
          "objects": [{"bbox": [0.0, 0.0, 40.0, 30.0], "category": 2}]}],
        schema=pa.schema([("image", sample.IMAGE), ("width", pa.int64()), ("height", pa.int64()),
                          ("objects", objects)]))
    pq.write_table(table, tmp_path / "f.parquet")
    (row,) = read(source("commonforms", task="kie"), tmp_path / "f.parquet").values()
    assert json.loads(row.pages[0].response) == {"fields": [{"type": "signature", "bbox": [0, 0, 100, 100]}]}


def test_rvl_cdip_class_as_kie_and_quality(root):
    rows = read(source("rvl_cdip", task="kie"), root / "rvl-cdip/default/test/0000.parquet")
    assert [outcome(rows[f"0000.parquet#{i}"]) for i in range(4)] == ["ok", "ok", "dead:bad_label",
                                                                      "dead:missing_image"]
    invoice = rows["0000.parquet#1"].pages[0]
    assert json.loads(invoice.response) == {"document_type": "invoice"}
    assert invoice.quality["document_class"] == invoice.metadata["document_class"] == "invoice"


def test_jssoda_japanese_as_mapped_columns(root):
    src = source("historical", language="ja", columns={"id": "id", "text": "text", "image_bytes": "image"},
                 quality_columns=["is_vertical", "num_columns"])
    rows = read(src, root / "jssoda/data/validation-00000-of-00001.parquet")
    assert {k: outcome(r) for k, r in rows.items()} == {
        "jssoda-val-000001": "ok", "jssoda-val-000002": "ok", "jssoda-val-000003": "dropped:empty_transcription",
        "jssoda-val-000004": "dead:missing_image"}
    page = rows["jssoda-val-000002"].pages[0]
    assert page.language == "ja" and page.quality["is_vertical"] is True and "春はあけぼの" in page.response


# -- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, task", [("formula_lines", "parse_page"), ("mmtab", "kie"),
                                        ("synthchartnet", "transcribe_table"), ("rvl_cdip", "parse_page")])
def test_a_reader_refuses_a_task_it_does_not_make(kind, task):
    with pytest.raises(ValueError, match="set task"):
        source(kind, task=task)


@pytest.mark.parametrize("kind, task", [("formula_lines", "transcribe_formula"), ("mmtab", "transcribe_table"),
                                        ("olmocr_synthmix", "parse_page"), ("commonforms", "kie")])
def test_a_misspelt_option_fails_at_config_load(kind, task, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"sources": [{"name": "s", "kind": kind, "paths": ["x"], "task": task,
                                               "options": {"imagez": "y"}}]}))
    with pytest.raises(ConfigError, match="imagez"):
        load_config(config)


def test_corpus_config_lists_every_new_kind():
    cfg = load_config(REPO / "configs" / "corpus.yaml")
    kinds = {s.kind for s in cfg.sources}
    assert {"olmocr_synthmix", "formula_lines", "mmtab", "synthchartnet", "commonforms", "rvl_cdip"} <= kinds
    assert {s.language for s in cfg.sources if s.name == "jssoda"} == {"ja"}


def test_commonforms_default_instruction_names_field_types_boxes_and_grid(root):
    from schemas.prompts import FORM_FIELD_PROMPTS, default_instruction

    rows = read(source("commonforms", task="kie"), root / "commonforms/data/test-00000-of-00001.parquet")
    page = next(p for r in rows.values() for p in r.pages)
    assert page.instruction == FORM_FIELD_PROMPTS["en"] != default_instruction("kie")
    assert all(w in page.instruction for w in ('"fields"', "checkbox", "signature", "bbox", "0-1000"))
    assert page.provenance[0].version == "3"
    own = build_source(SourceSettings(name="cf", kind="commonforms", paths=(), task="kie", instruction="Mine."))
    assert own.instruction == "Mine."  # a source's own instruction is kept
    zh = build_source(SourceSettings(name="cf", kind="commonforms", paths=(), task="kie", instruction_language="zh"))
    assert zh.instruction == FORM_FIELD_PROMPTS["zh"]


def test_mmtab_array_item_is_decoded_a_bounded_number_of_times(monkeypatch):
    """An item of n chunks used to be re-decoded after every chunk (n^2/2 chunk decodes): counted, not timed."""
    from pipelines.sources import mmtab

    monkeypatch.setattr(mmtab, "CHUNK", 1024)
    decoded = 0
    real = mmtab.json.JSONDecoder.raw_decode

    def counting(self, s, idx=0):
        nonlocal decoded
        decoded += len(s) - idx
        return real(self, s, idx)

    monkeypatch.setattr(mmtab.json.JSONDecoder, "raw_decode", counting)
    data = b'[{"id": "a", "x": "' + b"y" * (300 * 1024) + b'"}, {"id": "b"}]'
    items = list(iter_json_items(_io.BytesIO(data), "big.json"))
    assert [i["id"] for i in items] == ["a", "b"]
    assert decoded <= 5 * len(data)  # the old reader decoded ~150 x the item


def test_mmtab_over_long_line_is_its_bad_item_and_array_item_ends_the_file():
    from pipelines.sources.mmtab import iter_json_items as items_of

    lines = b'{"a": 1}\n{"a": "' + b"x" * 500 + b'"}\n{"a": 2}\n'
    got = list(items_of(_io.BytesIO(lines), "t.jsonl", max_item=100))
    assert got[0] == {"a": 1} and got[2] == {"a": 2}
    assert isinstance(got[1], RecordError) and got[1].reason == "bad_item" and "line 2" in str(got[1])
    array = b'[{"a": 1}, {"a": "' + b"x" * 500 + b'"}, {"a": 2}]'
    it = items_of(_io.BytesIO(array), "t.json", max_item=100)
    assert next(it) == {"a": 1}
    with pytest.raises(RecordError, match="max_item_bytes=100") as err:
        next(it)
    assert err.value.reason == "unreadable_json"
