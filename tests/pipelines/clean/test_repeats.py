"""Repeat-loop detector: each kind with exact period/copies/span, the legitimate structures it must
keep, the stage, the CLI, and precision/recall on the evaluation set ``tests/data/repeat_loops.jsonl``."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

from pipelines.clean.repeats import (
    VERSION,
    Loop,
    RepeatsConfig,
    RepeatsStage,
    find_loop,
    normalize,
    normalize_index,
)
from schemas.deadletter import Dropped, RecordError
from schemas.page import PageRecord, params_hash

REPO = Path(__file__).resolve().parents[3]
EVAL_SET = REPO / "tests" / "data" / "repeat_loops.jsonl"

WORDS = (
    "the results of the analysis are shown in table two and the model was trained on data "
    "from several sources while the committee reported that prices increased during the year"
).split()


def prose(seed: int, chars: int = 3000) -> str:
    """Natural-ish text ending with a paragraph break, so no loop unit matches its end by accident."""
    rng = random.Random(seed)
    out: list[str] = []
    total = 0
    while total < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18)))
        out.append(sentence.capitalize() + rng.choice([". ", "; ", ".\n\n", "? "]))
        total += len(out[-1])
    return "".join(out).rstrip() + "\n\n"


# --------------------------------------------------------------------------- loops, one per kind


def test_exact_loop_of_a_sentence():
    prefix = prose(1)
    text = prefix + "The cat sat on the mat. " * 80
    assert find_loop(text) == Loop("exact", 24, 80, (len(prefix), len(text)))


def test_exact_loop_of_table_rows_ending_in_a_newline():
    prefix = prose(2) + "<table>\n<tr><td>Year</td><td>Total</td></tr>\n"
    row = "<tr><td>0.5</td><td>0.5</td></tr>\n"
    text = prefix + row * 40
    # the row's "</td></tr>\n" also ends the header row: the span still starts at the first copy
    assert find_loop(text) == Loop("exact", len(row), 40, (len(prefix), len(text)))


def test_exact_loop_of_a_formula_fragment_and_of_one_symbol():
    prefix = prose(3)
    text = prefix + "$$\nx = " + "\\frac{1}{2} + " * 60
    loop = find_loop(text)
    assert (loop.kind, loop.period, loop.copies, loop.span[1]) == ("exact", 14, 60, len(text))
    dots = prefix + "." * 400
    assert find_loop(dots) == Loop("exact", 1, 400, (len(prefix), len(dots)))


def test_loop_longer_than_the_tail_is_traced_to_its_start():
    prefix = prose(4)
    text = prefix + "und die Stadt " * 600  # 8,400 characters, far beyond the 1,024-character tail
    assert find_loop(text) == Loop("exact", 14, 600, (len(prefix), len(text)))


def test_truncated_loop_cut_inside_the_last_copy():
    prefix = prose(5)
    text = prefix + "The cat sat on the mat. " * 80 + "The cat s"
    assert find_loop(text) == Loop("truncated", 24, 80, (len(prefix), len(text)))
    rows = prefix + "| 1.0 | n/a | n/a |\n" * 60 + "| 1.0 | n/"
    assert find_loop(rows) == Loop("truncated", 20, 60, (len(prefix), len(rows)))


def test_truncated_loop_with_multi_line_unit_cut_after_its_first_line():
    prefix = prose(6)
    unit = "## Results\n\nThe values are listed below.\n\n"
    text = prefix + unit * 30 + "## Results\n\n"
    loop = find_loop(text)
    assert loop == Loop("truncated", len(unit), 30, (len(prefix), len(text)))


def test_gapped_loop_with_incrementing_numbers():
    prefix = prose(7)
    text = prefix + "".join(f"{i}. foo bar baz\n" for i in range(1, 81))
    loop = find_loop(text)
    end = len(text.rstrip())
    # gapped loops are reported inside the 1,024-character tail: 64 copies of 16 characters
    assert loop is not None and loop.kind == "gapped" and loop.period == 16
    assert loop.span[1] == end and end - 1024 <= loop.span[0] <= end - 1000 and 62 <= loop.copies <= 64


def test_gapped_formula_with_incrementing_denominators():
    prefix = prose(8)
    text = prefix + "$$\n" + " + ".join(f"\\frac{{1}}{{{i}}}" for i in range(2, 90))
    loop = find_loop(text)
    assert loop is not None and loop.kind == "gapped" and loop.copies >= 60


def test_gapped_loop_with_whitespace_and_punctuation_jitter():
    prefix = prose(9)
    rng = random.Random(0)
    seps = [", ", ". ", "; ", " ", "\n", "  "]
    text = prefix + "".join("the same result" + rng.choice(seps) for _ in range(90))
    loop = find_loop(text)
    assert loop is not None and loop.kind == "gapped" and loop.copies >= 60


def test_gapped_loop_with_short_fillers_between_copies():
    prefix = prose(10)
    rng = random.Random(1)
    fillers = ["", " ", "<br>", " - ", "\n", " |"]
    text = prefix + "".join("Observed values of the model parameter" + rng.choice(fillers) for i in range(40))
    loop = find_loop(text)
    assert loop is not None and loop.kind == "gapped" and 38 <= loop.period <= 42
    assert loop.copies >= 24 and loop.span[1] == len(text.rstrip())  # the tail holds 25 copies


def _noisy_copies(unit: str, count: int, edits: list[tuple[str, str]], seed: int) -> str:
    """``count`` copies of ``unit``, each with one or two of ``edits`` (word-level misreadings)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        copy = unit
        for old, new in rng.sample(edits, rng.choice([1, 2])):
            copy = copy.replace(old, new, 1)
        out.append(copy)
    return "".join(out)


def test_near_exact_loop_of_a_sentence_with_substitutions_in_each_copy():
    prefix = prose(30)
    unit = "the total was paid to the county treasurer in full. "
    edits = [("total", "totel"), ("paid", "pald"), ("the county", "tha county"), ("full", "fu1l"),
             ("treasurer", "treasurcr"), ("was", "wos")]
    text = prefix + _noisy_copies(unit, 40, edits, 0)
    loop = find_loop(text)
    assert loop is not None and loop.kind == "near" and abs(loop.period - len(unit)) <= 1
    end = len(text.rstrip())
    # near-exact loops are reported inside the 1,024-character tail, like gapped ones
    assert loop.span[1] == end and loop.span[0] <= end - 900 and loop.copies >= 17


def test_near_exact_loop_with_edits_that_change_the_length():
    prefix = prose(31)
    unit = "| Morning | Harbour Office | modern |\n"
    edits = [("modern", "rnodern"), ("Harbour", "Harhour"), ("Morning", "Moming"), ("Office", "Offlce")]
    text = prefix + _noisy_copies(unit, 60, edits, 1)
    loop = find_loop(text)
    assert loop is not None and loop.kind == "near" and abs(loop.period - len(unit)) <= 2


def test_near_exact_pass_can_be_switched_off_and_tuned():
    prefix = prose(32)
    unit = "Glacier retreat is measured from painted boulders. "
    edits = [("Glacier", "G1acier"), ("painted", "palnted"), ("boulders", "bou1ders"), ("measured", "rneasured")]
    text = prefix + _noisy_copies(unit, 30, edits, 2)
    assert find_loop(text).kind == "near"
    assert find_loop(text, RepeatsConfig(near=False)) is None
    # no edits tolerated: the copies are too far apart
    assert find_loop(text, RepeatsConfig(near_max_edits=0, near_edit_rate=0.0)) is None


NEAR_NEGATIVES = {
    "lettered items with the same text": lambda: "\n".join(f"({c}) Not applicable." for c in "abcdefghijklmnopqrst"),
    "month lines": lambda: "\n".join(
        f"The {m} delivery arrives at the north gate before noon."
        for m in ["January", "February", "March", "April", "May", "June", "July", "August", "September",
                  "October", "November", "December"]
    ),
    "lines whose one word is a compass point": lambda: "\n".join(
        f"Readings from the {w} station were logged every hour."
        for w in ["north", "south", "east", "north", "west", "south", "north", "east", "west", "south", "east",
                  "north", "west", "east", "south"]
    ),
    "one line with another word now and then": lambda: "\n".join(
        f"Samples were stored {w} the cold room until the survey ended."
        for w in ["in", "in", "in", "beside", "in", "in", "outside", "in", "in", "near", "in", "in"]
    ),
    "ocr-noisy refrain between verses": lambda: "\n\n".join(
        f"Verse {v}: the river runs by the mill and the wheel turns slowly.\n"
        + "Oh the tide, the tide, it brings the boats home".replace("tide", t, 1)
        for v, t in zip(range(4), ["tide", "tlde", "tide", "ticle"])
    ),
}


@pytest.mark.parametrize("name", sorted(NEAR_NEGATIVES))
def test_near_repeats_that_are_not_loops(name):
    text = prose(33) + NEAR_NEGATIVES[name]()
    assert find_loop(text) is None


ZH_PAGE = ("本研究旨在探讨城市化进程对区域生态环境的影响，并提出相应的政策建议。"
           "我们收集了过去二十年的遥感数据，结合实地调查结果进行综合分析。")
JA_PAGE = ("この報告書では、地域社会における高齢化の現状と課題について述べる。"
           "調査は全国の市町村を対象に実施され、回答率は八割を超えた。")


def _char_edits(unit: str, count: int, edits: int, pool: str, seed: int) -> str:
    """``count`` copies of ``unit``, each with ``edits`` characters replaced from ``pool``."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        chars = list(unit)
        for i in rng.sample([i for i, c in enumerate(chars) if c.isalpha()], edits):
            chars[i] = rng.choice(pool)
        out.append("".join(chars))
    return "".join(out)


@pytest.mark.parametrize("prefix, unit", [
    (ZH_PAGE * 4, "被告人称其并未出席该次会议，相关文件系公司其他负责人在其不知情且未经其同意的情况下签署的。"),
    (JA_PAGE * 4, "被告は当該会議に出席しておらず、関係書類は本人の知らないうちに他の役員が署名したものである。"),
], ids=["zh", "ja"])
@pytest.mark.parametrize("edits", [1, 2, 3])
def test_near_exact_loop_in_chinese_and_japanese_with_several_edits_per_copy(prefix, unit, edits):
    # a CJK word is one character (as in MinHash): a sentence written without spaces is not one
    # "word" that two edits turn into a varying field
    text = prefix + _char_edits(unit, 20, edits, "己已巳未末人入日曰", 7)
    loop = find_loop(text)
    assert loop is not None and loop.kind == "near" and loop.period == len(unit) and loop.span[1] == len(text)


NAMES_ZH = ["张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊", "赵敏", "黄强", "周杰", "吴霞",
            "徐涛", "孙丽", "马超", "朱琳", "胡斌", "郭娟", "何勇", "高洁", "林峰", "罗敏"]


@pytest.mark.parametrize("lines", [
    [f"经研究决定，任命{n}同志为办公室主任。" for n in NAMES_ZH],
    [f"{n}同学本学期的各科成绩均为优秀。" for n in NAMES_ZH],
    [f"本周{d}上午九点在会议室召开例会。" for d in "一三二五四一二四三五二一四五三二四一五三"],
], ids=["name-mid", "name-first", "weekday"])
def test_chinese_lines_that_differ_in_a_slot_are_not_a_near_loop(lines):
    assert find_loop(ZH_PAGE * 4 + "\n".join(lines) + "\n") is None


def _statement(markdown: bool, rows: int = 30) -> str:
    """A bank statement whose rows all read "Card payment", with random dates and amounts."""
    rng = random.Random(5)
    out = ["| Date | Description | Amount |\n|---|---|---|\n" if markdown
           else "<table>\n<tr><th>Date</th><th>Description</th><th>Amount</th></tr>\n"]
    for _ in range(rows):
        date = f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        amount = f"{rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"
        out.append(f"| {date} | Card payment | {amount} |\n" if markdown
                   else f"<tr><td>{date}</td><td>Card payment</td><td>{amount}</td></tr>\n")
    return "".join(out)


STATEMENTS = {
    "html table": lambda: _statement(False) + "</table>\n",
    "markdown table then a page footer": lambda: _statement(True) + "\nPage 2\n",
    "markdown table whose last row has an ocr edit": lambda: (
        _statement(True) + "| 2023-12-31 | Card paymnt | 120.50 |\n"
    ),
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_table_rows_sharing_a_description_are_not_a_near_loop(name):
    # the rows are the same once digits are deleted, so the near-exact pass finds copies without
    # letter edits: like gapped copies, they are a loop only if their numbers repeat or step
    text = prose(34) + STATEMENTS[name]()
    assert len(text) >= 2048
    assert find_loop(text) is None


@pytest.mark.parametrize("unit, edits, seed", [
    ("the total of 3910.18 was paid by card on 2023-10-08. ",
     [("total", "totel"), ("paid", "pald"), ("3910", "39l0"), ("card", "carcl"), ("2023", "2O23"), ("was", "wos")], 0),
    ("<tr><td>2023-10-08</td><td>Card payment</td><td>3910.18</td></tr>\n",
     [("Card", "Carcl"), ("payment", "payrnent"), ("3910", "39l0"), ("2023", "2O23"), ("payment", "pavment"),
      ("18", "l8")], 2),
])
def test_near_exact_loop_whose_numbers_repeat_under_ocr_noise(unit, edits, seed):
    # a loop repeats its numbers: OCR noise that puts letters in them (2O23, 39l0) or digits in
    # words does not make them look like a table's independent values
    text = prose(40 + seed) + _noisy_copies(unit, 40, edits, seed)
    loop = find_loop(text)
    assert loop is not None and loop.kind == "near" and abs(loop.period - len(unit)) <= 1 and loop.copies >= 15


# --------------------------------------------------------------------------- legitimate structure


def _md_table(rows: list[list[str]]) -> str:
    head = "| " + " | ".join(f"Col {i}" for i in range(len(rows[0]))) + " |\n"
    sep = "|" + "---|" * len(rows[0]) + "\n"
    return head + sep + "".join("| " + " | ".join(r) + " |\n" for r in rows)


NEGATIVES = {
    "markdown table with empty cells": lambda rng: _md_table(
        [["Total" if i % 5 == 0 else " ", " ", " ", " "] for i in range(25)]
    ),
    "blank markdown sheet": lambda rng: _md_table([[" ", " ", " "] for _ in range(30)]),
    "html table with identical empty rows": lambda rng: "<table>\n" + "<tr><td></td><td></td><td></td></tr>\n" * 20,
    "html rows of identical cells then the end": lambda rng: (
        "<table>\n" + "<tr><td>0</td><td>0</td><td>0</td></tr>\n" * 8 + "</table>"
    ),
    "wide separator row": lambda rng: "| " + " | ".join(map(str, range(40))) + " |\n|" + "---|" * 40,
    "toc dot leaders": lambda rng: "\n".join(
        f"{i}. {rng.choice(['Introduction', 'Methods', 'Results', 'Discussion'])} {rng.choice(WORDS)} "
        + "." * rng.randint(20, 50)
        + f" {3 * i + 1}"
        for i in range(1, 35)
    ),
    "list sharing a prefix": lambda rng: "\n".join(
        f"- Item: {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)}" for _ in range(40)
    ),
    "questionnaire": lambda rng: "\n".join(
        f"{i}. Do you {rng.choice(WORDS)} the {rng.choice(WORDS)} {rng.choice(WORDS)}? Yes [ ] No [ ]"
        for i in range(1, 30)
    ),
    "form with blanks": lambda rng: "\n".join(
        f"{f}: " + "_" * 30 for f in ("Name", "Address", "City", "Phone", "E-mail", "Signature", "Date")
    ),
    "refrain sung twice at the end": lambda rng: (
        "Verse one goes here and there\nand somewhere else\n\n"
        + "Oh glory, glory, let it shine\nall along the river line\n\n" * 2
    ),
    "running header per column": lambda rng: "\n\n".join(
        "JOURNAL OF APPLIED STATISTICS\n\n" + prose(20 + i, 300).strip() for i in range(4)
    ),
    "repeated table header in a multi-column layout": lambda rng: (
        "| Name | Score | Name | Score | Name | Score |\n|---|---|---|---|---|---|\n"
        + "\n".join(
            "| "
            + " | ".join(f"{rng.choice(['Ann', 'Bo', 'Cy', 'Di'])} | {rng.randint(0, 99)}" for _ in range(3))
            + " |"
            for _ in range(12)
        )
    ),
    "numeric table with a year column": lambda rng: _md_table(
        [[str(1990 + i), f"{rng.uniform(0, 99):.1f}", str(rng.randint(100, 999))] for i in range(45)]
    ),
    "numbered blank lines": lambda rng: "\n".join(f"{i}. " + "_" * 40 for i in range(1, 11)),
}


@pytest.mark.parametrize("name", sorted(NEGATIVES))
def test_legitimate_structure_is_not_a_loop(name):
    rng = random.Random(name)
    text = prose(11) + NEGATIVES[name](rng)
    assert len(text) >= 2048
    assert find_loop(text) is None


def test_short_and_empty_labels_are_not_inspected():
    assert find_loop("") is None
    assert find_loop("ab" * 200) is None  # 400 characters < min_length
    assert find_loop("ab" * 200, RepeatsConfig(min_length=100)) == Loop("exact", 2, 200, (0, 400))
    assert find_loop(" \n" * 2000) is None  # whitespace is not a loop


def test_cjk_labels_are_measured_in_columns():
    # 415 characters of Chinese hold as much text as ~1,240 of English: a wide character counts 3
    text = ZH_PAGE + "我们认为这是一个重要的问题。" * 25
    assert len(text) < 512
    loop = find_loop(text)
    assert loop is not None and loop.period == 14 and loop.span[1] == len(text)
    assert find_loop("问题。" * 50) is None  # 150 characters, 450 columns: too short
    assert find_loop("ｘｙ" * 150) is not None  # 300 characters, 900 columns
    assert find_loop("ｘｙ" * 150, RepeatsConfig(min_length=901)) is None


FORM_INTRO = ("Please complete one line per visitor. Visitors must wear their badge at all times and return it to "
              "reception when leaving the building. Thank you for helping us keep the site safe.\n\n")
FORMS = {
    "visitor sign-in sheet": "VISITOR SIGN-IN SHEET\n" + FORM_INTRO
    + "Name: ______________________ Company: ____________________ Time in: ______ Time out: ______\n" * 20,
    "numbered answer sheet": "ANSWER SHEET\nMark one answer per question with a pencil.\n\n"
    + "".join(f"{i}. (A) (B) (C) (D) (E)\n" for i in range(1, 61)),
    "answer sheet as a markdown table": "ANSWER SHEET\n\n| No. | A | B | C | D |\n|---|---|---|---|---|\n"
    + "".join(f"| {i} | ○ | ○ | ○ | ○ |\n" for i in range(1, 61)),
    "chinese registration form": "报名登记表\n请每位参加者填写一行，字迹工整，信息真实有效。"
    "报名截止日期为本月三十日，逾期不予受理。\n"
    + "姓名：＿＿＿＿＿＿　性别：＿＿　出生日期：＿＿＿＿年＿＿月＿＿日　联系电话：＿＿＿＿＿＿＿＿\n" * 12,
    "checkbox rows": FORM_INTRO + "Initials: ☐ ☐ ☐ ☐ Date: ____/____/______\n" * 40,
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_blank_forms_and_answer_sheets_are_not_loops(name):
    assert find_loop(FORMS[name]) is None


def test_form_units_are_held_to_the_empty_rule_and_must_run_long():
    from pipelines.clean.repeats_periods import unit_class

    assert unit_class("Name: ______ Company: ______ Time: ____\n") == "form"
    assert unit_class(" (A) (B) (C) (D)\n") == "form" and unit_class("| ○ | ○ | ○ |\n") == "form"
    assert unit_class("姓名：＿＿＿＿　性别：＿＿\n") == "form"
    assert unit_class("|  |  |  |\n") == "empty" and unit_class("<tr><td></td></tr>") == "empty"
    assert unit_class("x_{i} + ") == "text" and unit_class("The total was paid (a) in full.") == "text"
    assert unit_class("| Total | 0.5 |\n") == "table"
    # brackets of math and code are no fills: their loops are text loops
    assert unit_class("f(x) + g(x) + h(x) = ") == "text" and unit_class("a[i][j] = b[i][j];\n") == "text"
    assert unit_class("f(a) + g(b) + h(c) = ") == "text" and unit_class("Section 1. ... \n") == "text"
    head = prose(8)
    assert find_loop(head + "f(x) + g(x) + h(x) = " * 60) == Loop("exact", 21, 60, (len(head), len(head) + 1260))
    assert find_loop(head + "a[i][j] = b[i][j];\n" * 60) is not None
    # a model looping on a form row for pages is still caught: the loop runs past form_min_chars
    row = "Name: ______________________ Company: ____________________\n"
    text = prose(40) + row * 200
    assert find_loop(text) == Loop("exact", len(row), 200, (len(text) - 200 * len(row), len(text)))
    assert find_loop(text, RepeatsConfig(form_min_chars=len(row) * 201)) is None
    # numbered form rows are a gapped loop when they cover form_min_chars of the tail (never, by default)
    rows = prose(40) + "".join(f"{i}. (A) (B) (C) (D) (E)\n" for i in range(1, 700))
    assert find_loop(rows, RepeatsConfig(form_min_chars=512)).kind == "gapped"
    assert find_loop(rows) is None


@pytest.mark.parametrize("unit, count", [
    ("😂😭🙏", 150), ("👨\u200d👩\u200d👧", 120), ("★☆★", 150), ("🙏🏽🔥", 150),
])
def test_emoji_and_symbol_loops_are_text_loops(unit, count):
    from pipelines.clean.repeats_periods import unit_class

    assert unit_class(unit) == "text"
    text = prose(41) + unit * count  # 450-600 characters: under the empty-unit rule's 896
    assert find_loop(text) == Loop("exact", len(unit), count, (len(text) - count * len(unit), len(text)))


def test_config_validation_and_bands_from_lists():
    cfg = RepeatsConfig(min_copies=[[4, 20], [512, 3]])
    assert cfg.min_copies == ((4, 20), (512, 3))
    with pytest.raises(ValueError):
        RepeatsConfig(min_copies=((8, 4), (4, 10)))
    with pytest.raises(ValueError):
        RepeatsConfig(gap_min_similarity=2.0)
    with pytest.raises(ValueError):
        RepeatsConfig(near_slot_share=1.5)
    with pytest.raises(ValueError):
        RepeatsConfig(near_needles=1)


def test_normalize_index_maps_back_to_the_text():
    tail = prose(12, 1200)[-1024:] + "1. foo,  bar\n\n2. foo; bar\t3) x"
    norm, index = normalize(tail), normalize_index(tail)
    assert len(norm) == len(index)
    assert all(c == tail[i] or (c == " " and tail[i].isspace()) for c, i in zip(norm, index))


def test_ten_megabyte_labels_are_read_from_the_tail():
    clean = prose(13, 10_000_000)
    looped = prose(14) + "the end of the line " * 500_000
    assert find_loop(clean) is None
    loop = find_loop(looped)
    # traced back trace_chars before the tail, not to the loop's real start 10 MB earlier
    assert loop.kind == "exact" and loop.period == 20 and loop.span[1] == len(looped)



# --------------------------------------------------------------------------- stage


def record(response: object) -> PageRecord:
    return PageRecord(
        id="r1",
        source="s",
        source_id="d1",
        page_number=0,
        domain="other",
        language="en",
        license="cc-by",
        image=b"",
        image_sha256="",
        width=1,
        height=1,
        task="parse_page",
        instruction="OCR",
        response=response,
    )  # type: ignore[arg-type]


def test_stage_drops_loops_with_the_kind_as_reason():
    text = prose(15) + "The cat sat on the mat. " * 80 + "The c"
    rec = record(text)
    with pytest.raises(Dropped) as err:
        RepeatsStage()(rec)
    assert err.value.reason == "repeat_loop_truncated"
    assert rec.quality["repeats"] == {
        "loop": True,
        "kind": "truncated",
        "period": 24,
        "copies": 80,
        "span": [len(prose(15)), len(text)],
    }
    assert rec.provenance == []


def test_stage_drops_near_exact_loops_with_their_own_reason():
    edits = [("river", "rlver"), ("gauge", "gavge"), ("morning", "moming"), ("level", "1evel")]
    text = prose(34) + _noisy_copies("The river gauge showed the morning level. ", 30, edits, 3)
    rec = record(text)
    with pytest.raises(Dropped) as err:
        RepeatsStage()(rec)
    assert err.value.reason == "repeat_loop_near" and rec.quality["repeats"]["kind"] == "near"


def test_stage_keeps_clean_records_and_flags_loops_when_not_dropping():
    stage = RepeatsStage()
    kept = stage(record(prose(16)))
    assert kept[0].quality["repeats"] == {"loop": False, "kind": None, "period": None, "copies": None, "span": None}
    step = kept[0].provenance[-1]
    assert (step.stage, step.version, step.params_hash) == (
        "clean:repeats",
        VERSION,
        params_hash(asdict(RepeatsConfig())),
    )
    flagging = RepeatsStage(RepeatsConfig(drop=False))
    kept = flagging(record(prose(17) + "x_{i} + " * 200))
    assert kept[0].quality["repeats"]["loop"] is True and kept[0].quality["repeats"]["kind"] == "exact"
    assert stage(record(""))[0].quality["repeats"]["loop"] is False
    with pytest.raises(RecordError) as err:
        stage(record(b"bytes"))
    assert err.value.reason == "bad_response"


def test_stage_is_built_by_the_registry():
    from pipelines.clean.registry import build_stage

    stage = build_stage({"name": "repeats", "min_copies": [[8, 10], [512, 3]], "drop": False})
    assert isinstance(stage, RepeatsStage) and stage.cfg.min_copies == ((8, 10), (512, 3))


# --------------------------------------------------------------------------- CLI


def test_cli_reports_loops_and_bad_lines(tmp_path):
    loop_text = prose(18) + "<tr><td></td><td>n/a</td></tr>" * 60
    lines = [
        json.dumps({"id": "clean", "text": prose(19)}),
        "{not json",
        json.dumps({"id": "loop", "text": loop_text}),
        json.dumps({"id": "no-text"}),
        json.dumps({"id": 7, "text": 12}),
    ]
    source = tmp_path / "in.jsonl"
    source.write_bytes(("\n".join(lines) + "\n").encode() + b"\xff\xfe\n")
    target = tmp_path / "out.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.clean.repeats",
            "--input",
            str(source),
            "--output",
            str(target),
            "--tail-chars",
            "1024",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in target.read_text().splitlines()]
    assert out[0] == {"id": "clean", "loop": False, "kind": None, "period": None, "copies": None, "span": None}
    assert out[1]["id"] is None and out[1]["error"].startswith("line 2: not JSON")
    assert out[2] == {
        "id": "loop",
        "loop": True,
        "kind": "exact",
        "period": 30,
        "copies": 60,
        "span": [len(prose(18)), len(loop_text)],
    }
    assert out[3] == {"id": "no-text", "error": "line 4: missing text"}
    assert out[4] == {"id": 7, "error": "line 5: text is int, not a string"}
    assert out[5]["error"].startswith("line 6: not UTF-8")
    assert len(out) == 6


# --------------------------------------------------------------------------- evaluation set


KINDS = ("exact", "truncated", "gapped", "near")


def _evaluate(items: list[dict]) -> tuple[dict[str, float], dict[str, float], int, Counter]:
    """Per kind: recall (found as a loop of any kind), precision (of loops reported as that kind);
    also the count of detected loops whose kind is wrong, and the confusion counts."""
    confusion: Counter = Counter()
    for item in items:
        loop = find_loop(item["text"])
        confusion[(item["label"], loop.kind if loop else None)] += 1
    recall = {
        k: sum(v for (label, pred), v in confusion.items() if label == k and pred)
        / sum(v for (label, _), v in confusion.items() if label == k)
        for k in KINDS
    }
    precision = {
        k: confusion[(k, k)] / max(1, sum(v for (_, pred), v in confusion.items() if pred == k)) for k in KINDS
    }
    wrong_kind = sum(v for (label, pred), v in confusion.items() if label and pred and label != pred)
    return recall, precision, wrong_kind, confusion


def test_evaluation_set_precision_and_recall_per_kind():
    items = [json.loads(line) for line in EVAL_SET.read_text(encoding="utf-8").splitlines()]
    labels = Counter(item["label"] for item in items)
    assert all(labels[k] >= 100 for k in KINDS) and labels[None] >= 400
    assert all(2048 <= len(item["text"]) <= 16 * 1024 + 4096 for item in items)
    recall, precision, wrong_kind, confusion = _evaluate(items)
    # measured (benchmarks/clean_repeats.py): recall exact 0.891 (98/110), truncated 0.943 (99/105),
    # gapped 0.973 (107/110), near 0.925 (111/120); precision 1.0 for each kind; 0 of 416 hard
    # negatives flagged; every detected loop has the right kind. The misses are short table-row
    # loops (under the table and empty-unit coverage rules) and long units with too few copies in
    # the tail (a 200-character sentence repeated four times).
    assert recall["exact"] >= 0.85 and recall["truncated"] >= 0.90 and recall["gapped"] >= 0.94, confusion
    assert recall["near"] >= 0.9, confusion
    assert min(precision.values()) >= 0.98, confusion
    assert sum(v for (label, pred), v in confusion.items() if label is None and pred) <= 2, confusion
    assert wrong_kind <= 2, confusion


def test_evaluation_set_is_what_its_generator_writes():
    sys.path.insert(0, str(REPO / "tests" / "data"))
    try:
        import make_repeat_loops
    finally:
        sys.path.pop(0)
    rebuilt = make_repeat_loops.build(20240604)
    stored = EVAL_SET.read_text(encoding="utf-8").splitlines()
    assert len(rebuilt) == len(stored)
    assert all(json.dumps(item, ensure_ascii=False) == line for item, line in zip(rebuilt, stored))


# --------------------------------------------------------------------------- the needle gate


def test_needle_gate_skips_only_labels_the_gapped_and_near_passes_would_not_flag():
    """``may_repeat`` decides on a bound of the end needles' counts, without normalising the tail: on
    the evaluation set and on clean prose, every tail it turns away yields nothing in either pass,
    and it does turn most clean tails away (the point of it)."""
    from pipelines.clean.repeats_detect import _trailing_space_start
    from pipelines.clean.repeats_gapped import GappedSearch, gapped_loop, may_repeat
    from pipelines.clean.repeats_near import near_loop

    cfg = RepeatsConfig()
    texts = [json.loads(line)["text"] for line in EVAL_SET.read_text(encoding="utf-8").splitlines()]
    clean = [prose(seed, 4000) + f"Tabelle {seed}: Ärger über Straßen, naïve café — end." for seed in range(40)]
    skipped = {"eval": 0, "clean": 0}
    for group, items in (("eval", texts), ("clean", clean)):
        for text in items:
            stop = _trailing_space_start(text, 4096)
            offset = max(0, stop - cfg.tail_chars)
            tail = text[offset:stop]
            if may_repeat(tail, cfg):
                continue
            skipped[group] += 1
            search = GappedSearch(tail, offset, cfg)
            assert gapped_loop(search) is None and near_loop(search) is None, text[-300:]
    assert skipped["eval"] > 100 and skipped["clean"] > 20
    # bands that accept two copies leave too few needle occurrences to bound: the gate stays open
    loose = RepeatsConfig(gapped_min_copies=((512, 2),))
    assert all(may_repeat(text[-1024:], loose) for text in clean[:5])
