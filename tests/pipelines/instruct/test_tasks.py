"""pipelines/instruct/tasks.py, stage.py and dynamic.py: element crops, KIE and VQA records and
their checks, the field-F1 metric and reward term, and the instruct stage's draws and counters."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from PIL import Image

from model.eval import score_prediction
from model.rewards import TERMS, RewardConfig
from pipelines.clean.registry import stage_config
from pipelines.instruct.dynamic import dynamic_instruction
from pipelines.instruct.stage import InstructConfig, InstructStage
from pipelines.instruct.tasks import check_kie, check_vqa, crop_records, kie_record, kie_schema, vqa_records
from schemas.config import ConfigError
from schemas.layout import Element, element
from schemas.page import validate
from schemas.prompts import CONVENTION_PROMPTS
from schemas.similarity import METRICS
from tests.helpers import page_record
from tests.pipelines.instruct.test_instruct_conventions import ELEMENTS, TESTS, record

FIELDS = {"invoice_number": "INV-12345", "billed_to": "Ada Byron", "total_due": "1,234.50", "currency": "EUR"}


def test_crops_are_element_records_with_their_own_tests() -> None:
    elements = ELEMENTS[:5] + [element("picture", (40, 330, 300, 500), 5, ""),
                               element("caption", (40, 505, 300, 520), 6, "Figure 1: Pumps")] + ELEMENTS[5:6]
    elements = [replace(e, order=i) for i, e in enumerate(elements)]
    rec = record(elements=elements)
    crops = {c.task: c for c in crop_records(rec)}
    assert set(crops) == {"transcribe_table", "transcribe_formula", "caption"}
    table = crops["transcribe_table"]
    assert Image.open(io.BytesIO(table.image)).size == (table.width, table.height) == (568, 108)  # box + 4 px
    assert table.response.strip() == ELEMENTS[4].text and table.response_format == "html"
    assert [json.loads(x)["type"] for x in table.unit_tests] == ["table"]
    formula = crops["transcribe_formula"]  # bare LaTeX, and its formula's math test, read as a display equation
    assert [json.loads(x)["type"] for x in formula.unit_tests] == ["math"] and "$" not in formula.response
    assert score_prediction(formula.response, formula.response, formula.unit_tests, "latex_formula")[1][0]["passed"]
    assert not score_prediction(formula.response, formula.response, formula.unit_tests)[1][0]["passed"]
    assert score_prediction(f"$${formula.response}$$", "", formula.unit_tests, "latex_formula")[1][0]["passed"]
    assert crops["caption"].response == "Figure 1: Pumps" and crops["caption"].height == 178
    for c in crops.values():
        assert validate(c) == [] and c.id != rec.id and c.metadata["derived_from"] == rec.id and not c.elements
    assert len(crop_records(rec, limit=1)) == 1


def test_kie_answers_are_valid_against_the_schema_in_the_instruction() -> None:
    rec = record(metadata={"layout": "invoice", "fields": FIELDS})
    kie = kie_record(rec)
    schema = kie_schema(FIELDS)
    assert kie.task == "kie" and json.dumps(schema, ensure_ascii=False) in kie.instruction
    assert json.loads(kie.response) == FIELDS and check_kie(kie.response, schema) == []
    assert check_kie('{"invoice_number": 5}', schema) == [
        "missing 'billed_to'", "missing 'total_due'", "missing 'currency'", "'invoice_number' is not a string"]
    assert check_kie("not json", schema)[0].startswith("not JSON")
    assert kie_record(record()) is None and "JSON Schema" in kie_record(rec, "zh").instruction


def test_vqa_answers_come_from_fields_and_table_cells() -> None:
    rec = record(metadata={"layout": "invoice", "fields": FIELDS})
    qas = vqa_records(rec, 20, seed=0)
    by_q = {q.instruction: q.response for q in qas}
    assert by_q["What is the total due on this invoice? Answer with the value only."] == "1,234.50"
    cell_q = 'In the table, what is the value in the row "Pumps & valves" under the column "2023"? ' \
             "Answer with the value only."
    assert by_q[cell_q] == "12" and all(q.task == "vqa" and validate(q) == [] for q in qas)
    assert check_vqa(RESPONSE_TABLE, {"kind": "cell", "row": "Pumps & valves", "col": "2024", "answer": "15"})
    assert not check_vqa(RESPONSE_TABLE, {"kind": "cell", "row": "Pumps & valves", "col": "2024", "answer": "12"})
    assert [q.id for q in vqa_records(rec, 3, seed=0)] == [q.id for q in vqa_records(rec, 3, seed=0)]
    assert "这份发票上的应付总额是什么" in "".join(q.instruction for q in vqa_records(rec, 20, seed=0, language="zh"))


RESPONSE_TABLE = record().response


def test_kie_field_f1_metric_and_reward_term() -> None:
    ref = json.dumps(FIELDS)
    assert METRICS["kie_f1"](ref, ref)[0] == 1.0
    half = json.dumps({"invoice_number": "INV-12345", "billed_to": "Ada  BYRON", "total_due": "9", "x": "y"})
    score, details = METRICS["kie_f1"](ref, half)
    assert score == pytest.approx(0.5) and details["matched"] == 2  # case and spaces folded
    assert METRICS["kie_f1"](ref, "```json\n" + ref + "\n```")[0] == 1.0
    assert METRICS["kie_f1"](ref, "no json")[0] == 0.0 and METRICS["kie_f1"]("# page", ref)[0] is None
    assert TERMS["kie"](ref, half, [], RewardConfig()) == pytest.approx(0.5)
    assert TERMS["kie"]("# a page", half, [], RewardConfig()) is None


def test_stage_rewrites_counts_and_derives() -> None:
    cfg = InstructConfig(conventions={"nemotron_md_bbox_cls": 1.0}, vqa_per_page=1)
    rec = record(metadata={"layout": "invoice", "fields": FIELDS})
    out = InstructStage(cfg)(rec)
    page = out[0]
    assert page.task == "parse_page" and page.response.startswith("<x_") and page.response_format == "text"
    assert page.instruction == CONVENTION_PROMPTS[("nemotron_md_bbox_cls", "en")]
    assert page.metadata["instruct"] == {"convention": "nemotron_md_bbox_cls", "prompt_language": "en",
                                         "dynamic": False}
    assert page.quality["instruct"]["counters"] == {"task:parse_page": 1, "prompt:en": 1,
                                                    "convention:nemotron_md_bbox_cls": 1}
    assert [json.loads(x)["type"] for x in page.unit_tests] == ["present", "order", "table", "math"]
    assert sorted(r.task for r in out) == ["kie", "parse_page", "transcribe_formula", "transcribe_table", "vqa"]
    formula = next(r for r in out if r.task == "transcribe_formula")
    assert formula.metadata["instruct"]["convention"] == "latex_formula"  # what eval and rewards read it by
    (latex_ocr,) = InstructStage(cfg)(record(task="transcribe_formula", response="E=mc^{2}", response_format="latex",
                                             elements=[], unit_tests=[]))
    assert latex_ocr.metadata["instruct"]["convention"] == "latex_formula" and latex_ocr.response == "E=mc^{2}"
    assert formula.quality["instruct"]["counters"]["convention:latex_formula"] == 1
    assert all(validate(r) == [] for r in out) and page.provenance[-1].stage == "instruct:instruct"
    assert TESTS == record().unit_tests  # the input's tests are not edited in place


def test_stage_draws_are_seeded_and_assign_wins() -> None:
    cfg = InstructConfig(conventions={"markdown": 1, "plain": 1, "json_layout": 1}, zh_prompt_share=0.5,
                         dynamic_share=0.5, crops=(), kie=False, vqa_per_page=0)
    stage = InstructStage(cfg)
    recs = [record(id=f"r{i}", source_id=str(i)) for i in range(40)]
    first = [stage(r)[0].metadata["instruct"] for r in recs]
    again = [InstructStage(cfg)(record(id=f"r{i}", source_id=str(i)))[0].metadata["instruct"] for i in range(40)]
    assert first == again
    assert {m["convention"] for m in first} == {"markdown", "plain", "json_layout"}
    assert {m["prompt_language"] for m in first} == {"en", "zh"} and {m["dynamic"] for m in first} == {True, False}
    dyn = next(stage(r)[0] for r, m in zip(recs, first) if m["dynamic"] and m["prompt_language"] == "en")
    assert "1 table, 1 formula" in dyn.instruction  # composed from the page's own elements
    zh = stage(record(id="z", language="zh"))[0]
    assert zh.metadata["instruct"]["prompt_language"] == "zh"
    fixed = InstructStage(replace(cfg, assign={"s": "plain"}))(record())[0]
    assert fixed.metadata["instruct"]["convention"] == "plain"
    nobox = InstructStage(replace(cfg, assign={"s": "json_layout"}))(record(elements=[]))[0]
    assert nobox.metadata["instruct"]["convention"] == "markdown"  # a convention that does not apply falls back
    other = InstructStage(cfg)(record(task="vqa", response="12"))
    assert len(other) == 1 and other[0].response == "12" and other[0].quality["instruct"]["counters"] == {"task:vqa": 1}


def test_stage_config_is_checked_at_load() -> None:
    assert stage_config({"name": "instruct", "conventions": {"plain": 2}}).conventions == {"plain": 2}
    with pytest.raises(ConfigError, match="unknown conventions"):
        stage_config({"name": "instruct", "conventions": {"markdwn": 1}})
    with pytest.raises(ConfigError, match="dynamic_share"):
        stage_config({"name": "instruct", "dynamic_share": 2})


def test_a_crop_class_without_crop_records_is_refused_at_load() -> None:
    """A misspelt crop class used to crop nothing, silently; an element class with no crop task (``text``) failed
    on the first page that had one."""
    assert stage_config({"name": "instruct", "crops": ["picture"]}).crops == ("picture",)
    for bad in ("tabel", "text"):
        with pytest.raises(ConfigError, match=rf"^instruct: unknown crops \['{bad}'\]; known: table, formula, "
                                              "picture$"):
            stage_config({"name": "instruct", "crops": ["table", bad]}, "instruct")


def test_vqa_asks_only_heading_pairs_that_are_unique_on_the_page() -> None:
    def table(total: str, extra: str = "") -> str:
        return f"<table><tr><th>Region</th><th>2024</th></tr><tr><td>Total</td><td>{total}</td></tr>{extra}</table>"

    response = ("## Sales (units)\n\n" + table("410", "<tr><td>North</td><td>7</td></tr>") +
                "\n\n## Returns (units)\n\n" + table("98") + "\n")
    qas = vqa_records(page_record(response=response, width=200, height=300), 5, 0)
    assert [(q.instruction, q.response) for q in qas] == [
        ('In the table, what is the value in the row "North" under the column "2024"? '
         "Answer with the value only.", "7")]
    for answer in ("410", "98"):  # "Total" / "2024" has two answers on this page
        assert not check_vqa(response, {"kind": "cell", "row": "Total", "col": "2024", "answer": answer})


def test_dynamic_prompt_counts_formulas_not_citation_brackets() -> None:
    cited = "As shown in prior work \\[12\\], \\[3, 5-7\\], the method converges.\n"
    assert dynamic_instruction("parse_page", "markdown", "en", "en", [], cited, "0:x").startswith(
        "This document page is in English. Convert")
    both = cited + "\n\\[ E = mc^2 \\]\n\n`\\[x\\]` in code\n"
    assert "; it holds 1 formula. " in dynamic_instruction("parse_page", "markdown", "en", "en", [], both, "0:x")


def _figure_page(caption_box: tuple[int, int, int, int]):
    elements = [element("picture", (40, 330, 300, 500), 0, ""),
                element("caption", caption_box, 1, "Figure 1. Share of urban records by quarter (64.4% in total).")]
    return record(elements=elements)


def test_caption_crop_asks_for_a_caption_and_leaves_the_caption_out() -> None:
    rec = _figure_page((40, 502, 300, 520))  # 2 px under the picture: inside the 4 px padding
    (cap,) = crop_records(rec, ("picture",))
    assert cap.task == "caption" and cap.instruction == "Write a caption for this figure."
    assert cap.response == "Figure 1. Share of urban records by quarter (64.4% in total)."
    assert cap.height == 502 - 326 and Image.open(io.BytesIO(cap.image)).size == (cap.width, cap.height)
    assert crop_records(rec, ("picture",), language="zh")[0].instruction == "为这幅图写一条图注。"
    assert crop_records(_figure_page((40, 480, 300, 520)), ("picture",)) == []  # caption over the picture
    for seed in range(20):
        assert "caption" in dynamic_instruction("caption", None, "en", "en", [], "", str(seed)).lower()


@pytest.mark.parametrize("picture, caption, crop", [
    ((40, 330, 300, 500.2), (40, 500.6, 300, 520), (36, 326, 304, 500)),  # fractional edges, 0.4 px apart
    ((40, 330, 300, 500.2), (40, 500.9, 300, 520), (36, 326, 304, 500)),
    ((40, 330, 300, 500), (40, 300, 300, 329.5), (36, 330, 304, 504)),  # above
    ((40, 330, 300, 500), (301.5, 330, 420, 500), (36, 326, 301, 504)),  # right
])
def test_the_caption_side_is_read_from_the_elements_own_boxes(picture, caption, crop) -> None:
    elements = [Element("picture", *picture, 0), Element("caption", *caption, 1, "Figure 1. A pump.")]
    (cap,) = crop_records(record(elements=elements), ("picture",))
    assert (cap.width, cap.height) == (crop[2] - crop[0], crop[3] - crop[1])


@pytest.mark.parametrize("text", ["$$", "$$ $$", "\\[ \\]", "\\(\\)"])
def test_a_formula_of_delimiters_only_gives_no_crop(text) -> None:
    formula = next(e for e in ELEMENTS if e.cls == "formula")
    elements = [replace(e, text=text) if e is formula else e for e in ELEMENTS]
    assert not [c for c in crop_records(record(elements=elements)) if c.task == "transcribe_formula"]


def test_crop_responses_have_the_corpus_form_of_their_task() -> None:
    elements = ELEMENTS[:5] + [element("picture", (40, 330, 300, 500), 5, ""),
                               element("caption", (40, 505, 300, 520), 6, "Figure 1: Pumps\n")] + ELEMENTS[5:6]
    elements = [replace(e, order=i) for i, e in enumerate(elements)]
    formula = next(e for e in elements if e.cls == "formula")
    elements[elements.index(formula)] = replace(formula, text="\\[ E = m c ^ { 2 } \\]")
    crops = {c.task: c for c in crop_records(record(elements=elements))}
    assert crops["transcribe_formula"].response == "E=mc^{2}"  # as the conventions stage writes latex labels
    assert crops["transcribe_formula"].response_format == "latex"
    assert all(not c.response.endswith("\n") for c in crops.values())


def test_plain_text_transcriptions_get_the_plain_prompt() -> None:
    cfg = InstructConfig(zh_prompt_share=0.0, dynamic_share=0.0)
    rec = record(response="Le Journal des débats\nParis, 2 mars 1850.", response_format="text", elements=[],
                 unit_tests=[], language="fr")
    (page,) = InstructStage(cfg)(rec)
    assert page.instruction == CONVENTION_PROMPTS[("plain", "en")] and page.response == rec.response
    assert page.metadata["instruct"] == {"convention": "plain", "prompt_language": "en", "dynamic": False}
    assert page.quality["instruct"]["counters"] == {"task:parse_page": 1, "prompt:en": 1, "convention:plain": 1}
    assert page.provenance[-1].stage == "instruct:instruct"
    (zh,) = InstructStage(cfg)(replace(rec, language="zh-Hant"))
    assert zh.instruction == CONVENTION_PROMPTS[("plain", "zh")]
    (dyn,) = InstructStage(replace(cfg, dynamic_share=1.0))(rec)
    assert "French" in dyn.instruction and dyn.instruction.endswith(CONVENTION_PROMPTS[("plain", "en")])


def test_math_tests_rechecked_on_a_rewrite_cache_their_renders_in_the_run(tmp_path, monkeypatch):
    """The instruct stage re-checks a page's tests on each convention's rewrite; its math renders went to the
    user's ~/.cache (the labels are untrusted: the run's folders only)."""
    monkeypatch.setenv("PAGEMILL_CACHE", str(tmp_path / "home-cache"))
    stage = InstructStage(InstructConfig(assign={"s": "markdown_tables"}, crops=(), kie=False, vqa_per_page=0))
    stage.bind_output(str(tmp_path / "out"))
    math = json.dumps({"pdf": "p.pdf", "page": 1, "id": "m2", "type": "math", "math": "E=mc^{2}"})  # not verbatim
    out = stage(record(unit_tests=[math]))[0]
    assert out.metadata["instruct"]["convention"] == "markdown_tables"
    assert any('"math"' in t for t in out.unit_tests)  # the math test was checked, and kept
    assert list((tmp_path / "out" / "_katex").iterdir()) and not (tmp_path / "home-cache").exists()
