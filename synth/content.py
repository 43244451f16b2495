"""Seeded page content for JinaOCRSynth: text blocks and whole ``PageSpec``s per layout and suite.

Text comes from the bundled snippets (``synth/data/snippets.json``: short CC0 paragraphs, each with
its title and licence, recorded in ``PageSpec.sources``) plus procedurally generated names,
numbers and dates. ``make_page_spec(layout, suite, seed, id)`` fills one page:

* layout kinds: ``LAYOUTS`` (report, slides, blog, infographic, newspaper (2-3 columns), form,
  invoice, paper (2 columns));
* suites: ``layout`` (mixed blocks and one table or formula where it fits), ``formula`` (one
  display formula per ``synth.formulas`` category plus inline math, then more), ``table`` (two
  tables of different ``synth.tables`` categories, then more), categories round-robin per page;
* page furniture (running header, footer, page number), never part of the reference.

Conventions the renderers rely on (paragraph, list-item and footnote text):

* inline math is written ``\\( ... \\)``; emphasis as ``**bold**`` / ``*italic*``;
* a footnote marker is written ``[^m]`` in the text and should be drawn as a superscript ``m``;
  the matching ``Footnote(marker=m)`` block is its note (draw it at the foot of the column/page).

Blocks are in reading order, column by column (``PlacedBlock.column`` never decreases), so
``synth.reference`` can emit them as they come. Past the required blocks (which always fit) comes
optional filler (``PlacedBlock.optional``), about 1.3x what the page holds (``_BUDGET``): the HTML
renderer keeps what fits and returns the spec of the page it drew; ``without_optional`` gives the
required blocks alone (for a renderer that does not fill). Once the snippets run out, paragraphs are
generated fact sentences rather than repeats. ``max_blocks`` caps the body, ``density`` (0.5-1.5)
scales optional text, ``fill=False`` leaves the filler out.

``language="zh"`` gives a Simplified Chinese page: paragraphs from ``synth/data/snippets_zh.json``
(CC0, written for pagemill), Chinese names, organisations, headings, captions, furniture and dates
(``2021年3月5日``), and tables' words and captions and formulas' ``\\text{}`` words in Chinese. Figures
are seeded and text-free: a chart (``Figure.chart``, ``synth.charts``: its kind and colours; the
renderers draw it) or a procedural picture (a PNG in ``Figure.image_png``, ``synth.pictures``).
``synth.themes`` draws each page's fonts, colours, margins, column count and page size (16:9 for
slides) from its own seed.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from synth.blocks import (
    LAYOUTS,
    SUITES,
    Block,
    Figure,
    Footnote,
    Formula,
    Furniture,
    Heading,
    ListBlock,
    PageSpec,
    Paragraph,
    PlacedBlock,
    Table,
)
from synth.charts import make_chart
from synth.formulas import CATEGORIES as FORMULA_CATEGORIES
from synth.formulas import generate_formula, inline_formula, localize_formula
from synth.pictures import picture_png
from synth.tables import CATEGORIES as TABLE_CATEGORIES
from synth.tables import generate_table, localize_table
from synth.themes import page_theme

LANGUAGES: tuple[str, ...] = ("en", "zh")
DATA_DIR = Path(__file__).resolve().parent / "data"

_FIRST = ("Amara", "Bruno", "Chen", "Dagny", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kofi", "Lena",
          "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Soren", "Talia", "Umar", "Vera", "Wen", "Yusuf")
_LAST = ("Abbott", "Brennan", "Castillo", "Delacroix", "Eriksen", "Fontaine", "Gallagher", "Haddad", "Iversen",
         "Jablonski", "Kowalczyk", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov", "Quiroga", "Rasmussen",
         "Szabo", "Thornbury", "Underhill", "Valdivia", "Whitlock", "Zielinski")
_ORGS = ("Arden Water Board", "Belmont Institute", "Carrow Transit Authority", "Dunmore Field Station",
         "Elmstead Cooperative", "Fairholt Observatory", "Glenwick Archive", "Harrowby Survey Office")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_SECTION_HEADINGS = ("Background", "Method", "Findings", "Discussion", "Outlook", "Summary", "Next steps",
                     "Results", "Context", "Recommendations")

_ZH_FAMILY = ("王", "李", "张", "刘", "陈", "杨", "赵", "黄", "周", "吴", "徐", "孙", "胡", "朱", "高", "林")
_ZH_GIVEN = ("晓明", "婷", "建国", "丽华", "志强", "敏", "海燕", "俊杰", "雪", "文博", "静怡", "国平", "欣然", "立新")
_ZH_ORGS = ("东湖水务局", "北山研究所", "江城交通管理局", "南岭野外观测站", "青松合作社", "云台天文台",
            "西溪档案馆", "临海测绘院")
_ZH_HEADINGS = ("背景", "方法", "主要发现", "讨论", "展望", "小结", "下一步工作", "结果", "概况", "建议")


@dataclass(frozen=True)
class Snippet:
    title: str
    text: str
    license: str
    source: str
    topic: str


@lru_cache(maxsize=2)
def load_snippets(language: str = "en") -> tuple[Snippet, ...]:
    """The bundled openly licensed paragraphs (title, text, licence, source, topic) of ``language``."""
    name = {"en": "snippets.json", "zh": "snippets_zh.json"}[language]
    data = json.loads((DATA_DIR / name).read_text(encoding="utf-8"))
    return tuple(Snippet(s["title"], s["text"], s["license"], s["source"], s["topic"]) for s in data["snippets"])


# -- procedural values ---------------------------------------------------------------------------

def person_name(rng: random.Random, language: str = "en") -> str:
    if language == "zh":
        return rng.choice(_ZH_FAMILY) + rng.choice(_ZH_GIVEN)
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def date_text(rng: random.Random, language: str = "en") -> str:
    if language == "zh":
        return f"{rng.randint(2015, 2025)}年{rng.randint(1, 12)}月{rng.randint(1, 28)}日"
    return f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} {rng.randint(2015, 2025)}"


def number_text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        return f"{rng.randint(1200, 98000):,}"
    if kind < 0.7:
        return f"{rng.uniform(1, 99):.1f}%"
    return f"{rng.uniform(10, 9999):,.2f}"


def fact_sentence(rng: random.Random, language: str = "en") -> str:
    """A sentence carrying generated names, numbers and dates (good ``present`` targets)."""
    if language == "zh":
        org = rng.choice(_ZH_ORGS)
        return rng.choice([
            (f"{org}在{date_text(rng, 'zh')}至{date_text(rng, 'zh')}期间"
             f"共记录了{rng.randint(1200, 98000):,}条观测数据。"),
            f"{person_name(rng, 'zh')}负责此次调查，覆盖{rng.randint(3, 40)}个区县的{rng.randint(12, 480)}个站点。",
            f"据{person_name(rng, 'zh')}介绍，{rng.randint(2016, 2026)}年的预算定为{number_text(rng)}元。",
            f"{date_text(rng, 'zh')}的复核确认，该时期内的变化幅度为{rng.uniform(1, 40):.1f}%。",
        ])
    org = rng.choice(_ORGS)
    return rng.choice([
        f"The {org} recorded {number_text(rng)} observations between {date_text(rng)} and {date_text(rng)}.",
        (f"{person_name(rng)} led the survey, which covered {rng.randint(12, 480)} sites "
         f"in {rng.randint(3, 40)} districts."),
        f"According to {person_name(rng)}, the budget for {rng.randint(2016, 2026)} was set at {number_text(rng)}.",
        f"A follow-up review on {date_text(rng)} confirmed a change of {rng.uniform(1, 40):.1f}% over the period.",
    ])


# -- text blocks -----------------------------------------------------------------------------------

class ContentSource:
    """Draws text blocks from the snippets without repeating one on a page; records what it used."""

    def __init__(self, rng: random.Random, density: float = 1.0, language: str = "en"):
        self.rng = rng
        self.language = language
        self.zh = language == "zh"
        self.density = max(0.5, min(1.5, density))
        self._pool = list(load_snippets(language))
        rng.shuffle(self._pool)
        self.used: list[Snippet] = []
        self._footnotes = 0

    def snippet(self) -> Snippet:
        s = self._pool[len(self.used) % len(self._pool)]
        self.used.append(s)
        return s

    @property
    def exhausted(self) -> bool:
        """Every snippet is on the page already: new text is generated (facts) rather than repeated."""
        return len(self.used) >= len(self._pool)

    def heading(self, level: int = 2, text: str | None = None) -> Heading:
        if text is None:
            # Nothing used yet: the next snippet is the one the page's title names.
            if self.rng.random() < 0.5 or self.exhausted or not self.used:
                text = self.rng.choice(_ZH_HEADINGS if self.zh else _SECTION_HEADINGS)
            else:
                text = self._pool[len(self.used) % len(self._pool)].title
        return Heading(text=text, level=level)

    def paragraph(self, *, bold: bool = False, inline_math: bool = False, fact: bool | None = None,
                  footnote: bool = False) -> tuple[Paragraph, Footnote | None]:
        if self.exhausted:  # a page longer than the snippet pool: generated sentences, no repeats
            sentences = [fact_sentence(self.rng, self.language) for _ in range(self.rng.randint(2, 3))]
        else:
            sentences = _sentences(self.snippet().text)
            keep = max(1, round(len(sentences) * min(1.0, self.density)))
            sentences = sentences[:keep]
        if bold:
            sentences[0] = (_embolden_zh if self.zh else _embolden)(self.rng, sentences[0])
        note: Footnote | None = None
        if footnote:
            self._footnotes += 1
            marker = str(self._footnotes)
            first = sentences[0]
            ref = f"[^{marker}]"
            sentences[0] = first[:-1] + ref + first[-1] if first[-1] in ".!?。！？" else first + ref
            note = Footnote(marker=marker, text=self.footnote_text())
        if inline_math:
            a, b = inline_formula(self.rng), inline_formula(self.rng)
            sentences.append(f"在拟合模型 \\( {a} \\) 中，界 \\( {b} \\) 对每个站点都成立。" if self.zh else
                             f"In the fitted model \\( {a} \\), and the bound \\( {b} \\) holds for every site.")
        if fact if fact is not None else self.rng.random() < 0.5 * self.density:
            sentences.append(fact_sentence(self.rng, self.language))
        return Paragraph(("" if self.zh else " ").join(sentences)), note

    def footnote_text(self) -> str:
        if self.zh:
            return self.rng.choice([
                f"数据于{date_text(self.rng, 'zh')}修订。",
                f"资料来源：{self.rng.choice(_ZH_ORGS)}内部数据。",
                f"与{person_name(self.rng, 'zh')}的私人通信。",
                f"不含{self.rng.randint(2, 30)}条不完整记录。",
            ])
        return self.rng.choice([
            f"Figures revised on {date_text(self.rng)}.",
            f"Source: {self.rng.choice(_ORGS)}, internal data.",
            f"Personal communication with {person_name(self.rng)}.",
            f"Excludes {self.rng.randint(2, 30)} incomplete records.",
        ])

    def list_block(self, ordered: bool | None = None, n: int | None = None) -> ListBlock:
        n = n or self.rng.randint(3, 4)
        items = []
        for _ in range(n):
            kind = self.rng.random()
            if kind < 0.4 and not self.exhausted:
                items.append(_sentences(self.snippet().text)[0])
            elif self.zh and kind < 0.7:
                items.append(f"{self.rng.choice(_ZH_HEADINGS)}：{date_text(self.rng, 'zh')}"
                             f"前完成{number_text(self.rng)}")
            elif self.zh:
                items.append(f"请联系{self.rng.choice(_ZH_ORGS)}的{person_name(self.rng, 'zh')}")
            elif kind < 0.7:
                items.append(f"{self.rng.choice(_SECTION_HEADINGS)}: {number_text(self.rng)} by {date_text(self.rng)}")
            else:
                items.append(f"Contact {person_name(self.rng)} at the {self.rng.choice(_ORGS)}")
        return ListBlock(items=tuple(items), ordered=self.rng.random() < 0.5 if ordered is None else ordered)

    def figure(self, n: int = 1) -> Figure:
        s = self.rng.choice(self._pool)
        if self.zh:
            caption = self.rng.choice([
                f"图{n}：{self.rng.randint(2015, 2025)}年{self.rng.randint(3, 40)}个监测站点的{s.title}情况。",
                f"图{n}　各季度{s.topic}类记录所占比例（共{self.rng.randint(1200, 98000):,}条）。",
            ])
        else:
            caption = self.rng.choice([
                f"Figure {n}: {s.title} at {self.rng.randint(3, 40)} monitoring sites, {self.rng.randint(2015, 2025)}.",
                f"Figure {n}. Share of {s.topic} records by quarter ({number_text(self.rng)} in total).",
            ])
        kind = self.rng.choice(["picture", "chart"])
        # Seeded by the caption (no draw from the page's rng) and text-free (synth.charts, synth.pictures).
        if kind == "chart":
            return Figure(caption=caption, kind=kind, chart=make_chart(caption))
        return Figure(caption=caption, kind=kind, image_png=picture_png(caption))

    def sources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f"{s.title} ({s.license}, {s.source})" for s in self.used))


def _sentences(text: str) -> list[str]:
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch in "。！？" or ch in ".!?" and (i + 1 == len(text) or text[i + 1] == " "):
            out.append(text[start:i + 1].strip())
            start = i + 1
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


def _embolden(rng: random.Random, sentence: str) -> str:
    words = sentence.split(" ")
    candidates = [i for i, w in enumerate(words) if w.isalpha() and len(w) >= 6]
    if not candidates:
        return sentence
    i = rng.choice(candidates)
    words[i] = f"**{words[i]}**"
    return " ".join(words)


def _embolden_zh(rng: random.Random, sentence: str) -> str:
    """Bold a run of 2-4 Chinese characters (there are no word spaces to pick a word by)."""
    runs = [m for m in re.finditer(r"[\u4e00-\u9fff]{4,}", sentence)]
    if not runs:
        return sentence
    m = rng.choice(runs)
    size = rng.randint(2, min(4, len(m.group()) - 1))
    start = m.start() + rng.randint(0, len(m.group()) - size)
    return sentence[:start] + "**" + sentence[start:start + size] + "**" + sentence[start + size:]


# -- pages -----------------------------------------------------------------------------------------

def _furniture_zh(rng: random.Random, layout: str, org: str) -> Furniture:
    page = rng.randint(2, 24)
    total = page + rng.randint(0, 30)
    number = rng.choice([f"第 {page} 页，共 {total} 页", f"第 {page} 页", f"- {page} -", f"{page} / {total}"])
    header = {
        "report": f"{org} · {rng.randint(2015, 2025)}年度报告",
        "slides": f"{org}情况通报",
        "blog": f"{org}博客",
        "infographic": f"数说{org}",
        "newspaper": f"{rng.choice(['海港', '山谷', '县城', '晚间'])}时报 · {date_text(rng, 'zh')}",
        "form": f"表{rng.choice('ABCDEFGH')}-{rng.randint(100, 999)} · {org}",
        "invoice": f"{org} · 财务部",
        "paper": f"应用{rng.choice(['调查', '野外', '系统', '测量'])}研究学报，第{rng.randint(2, 40)}卷",
    }[layout]
    footer = rng.choice(["内部资料，注意保密", f"打印于{date_text(rng, 'zh')}", "联系邮箱：records@example.org", ""])
    if rng.random() < 0.15:
        header = ""
    return Furniture(header=header, footer=footer, page_number=number)


def _title_zh(rng: random.Random, layout: str, src: ContentSource) -> str:
    t = src._pool[0].title
    return {
        "report": f"{t}：进展报告",
        "slides": t,
        "blog": f"关于{t}的几点体会",
        "infographic": f"{t}一览",
        "newspaper": f"{t}引发广泛关注",
        "form": f"{rng.choice(['场地使用', '设备借用', '研究许可', '会员资格'])}申请表",
        "invoice": f"发票 INV-{rng.randint(10000, 99999)}",
        "paper": f"论{t}的测量",
    }[layout]


def _furniture(rng: random.Random, layout: str, org: str) -> Furniture:
    page = rng.randint(2, 24)
    total = page + rng.randint(0, 30)
    number = rng.choice([f"Page {page} of {total}", f"Page {page}", f"- {page} -", f"{page} / {total}"])
    header = {
        "report": f"{org} · Annual Report {rng.randint(2015, 2025)}",
        "slides": f"{org} briefing",
        "blog": f"{org} Blog",
        "infographic": f"{org} in numbers",
        "newspaper": f"The {rng.choice(['Harbour', 'Valley', 'County', 'Evening'])} Gazette · {date_text(rng)}",
        "form": f"Form {rng.choice('ABCDEFGH')}-{rng.randint(100, 999)} · {org}",
        "invoice": f"{org} · Accounts department",
        "paper": (f"Journal of Applied {rng.choice(['Survey', 'Field', 'Systems', 'Measurement'])} Studies, "
                  f"Vol. {rng.randint(2, 40)}"),
    }[layout]
    footer = rng.choice(["Confidential: internal distribution only", f"Printed {date_text(rng)}",
                         f"Contact: records@{org.split()[0].lower()}.example.org", ""])
    if rng.random() < 0.15:
        header = ""
    return Furniture(header=header, footer=footer, page_number=number)


def _title(rng: random.Random, layout: str, src: ContentSource, org: str) -> str:
    s = src._pool[0]
    return {
        "report": f"{s.title}: Progress Report",
        "slides": s.title,
        "blog": f"What We Learned About {s.title}",
        "infographic": f"{s.title} at a Glance",
        "newspaper": f"{s.title} Draw Record Interest",
        "form": f"Application for {rng.choice(['Site Access', 'Equipment Loan', 'Research Permit', 'Membership'])}",
        "invoice": f"Invoice INV-{rng.randint(10000, 99999)}",
        "paper": f"On the Measurement of {s.title}",
    }[layout]


# The density goal of a table page (issue 23): >= 2 tables, or one of at least this many cells (a slide).
LARGE_TABLE_CELLS = 30


@dataclass(frozen=True)
class _Draft:
    """A page being filled: its rng, content source and settings, and the body so far as (block,
    required) pairs (required blocks survive ``max_blocks``; optional ones are cut from the end) plus
    the footnotes its paragraphs called for. Layout builders append to it."""

    rng: random.Random
    src: ContentSource
    language: str
    suite: str
    columns: int
    body: list[tuple[Block, bool]]
    notes: list[Footnote] = field(default_factory=list)
    formula_cats: list[str] = field(default_factory=lambda: list(FORMULA_CATEGORIES))  # round-robin order
    table_cats: list[str] = field(default_factory=lambda: list(TABLE_CATEGORIES))
    flags: set[str] = field(default_factory=set)  # "figure": the filler has added its one figure
    drawn: dict[str, int] = field(default_factory=dict)  # formulas/tables drawn so far
    form_labels: set[str] = field(default_factory=set)  # filler form fields used: each label once a page

    @property
    def zh(self) -> bool:
        return self.language == "zh"

    @property
    def orgs(self) -> tuple[str, ...]:
        return _ZH_ORGS if self.zh else _ORGS

    @property
    def max_cols(self) -> int:
        """The widest table that fits a column."""
        return 4 if self.columns > 1 else 7

    @property
    def has_filler_figure(self) -> bool:
        return "figure" in self.flags

    def formula(self) -> Formula:
        """The next display formula, categories round-robin in the page's order."""
        k = self.drawn.get("formula", 0)
        self.drawn["formula"] = k + 1
        return generate_formula(self.rng, self.formula_cats[k % len(self.formula_cats)])

    def table(self) -> Table:
        """The next table, categories round-robin in the page's order (narrow in columns)."""
        k = self.drawn.get("table", 0)
        self.drawn["table"] = k + 1
        return generate_table(self.rng, self.table_cats[k % len(self.table_cats)], max_cols=self.max_cols)

    def large_table(self, min_cells: int = LARGE_TABLE_CELLS) -> Table:
        """The next table of at least ``min_cells`` cells: tables drawn round-robin until one is that
        large (5 of the 6 categories reach 30 cells, about a quarter of their tables do)."""
        for _ in range(500):
            table = self.table()
            if table.cell_count >= min_cells:
                return table
        raise RuntimeError(f"no table of {min_cells} cells in 500 draws")  # p ~ 0.75**500: never

    def name(self) -> str:
        return person_name(self.rng, self.language)

    def date(self) -> str:
        return date_text(self.rng, self.language)

    def add(self, block: Block, required: bool) -> None:
        self.body.append((block, required))

    def para(self, **kw: bool) -> None:
        """A required paragraph (``ContentSource.paragraph`` options), and its footnote if it has one."""
        p, note = self.src.paragraph(**kw)
        self.add(p, True)
        if note is not None:
            self.notes.append(note)


# -- layouts: each builder adds the blocks after the title, in reading order ------------------------

def _report(d: _Draft) -> None:
    d.para(bold=True)
    d.add(d.src.heading(2), False)
    d.para(footnote=True)
    d.add(d.src.list_block(), False)
    d.add(d.src.figure(), False)


def _slides(d: _Draft) -> None:
    # On a formula or table slide the structure is the point: it follows the title (formulas in two
    # columns, ``make_page_spec``; one large table, ``_suite_blocks``), and the slide's bullets come after
    # it as filler where there is room (a 16:9 column held the title, the bullets and three formulas).
    if d.suite != "layout":
        return
    d.add(d.src.list_block(ordered=False, n=3), True)
    d.add(d.src.heading(2), False)
    d.add(d.src.paragraph(fact=False, bold=True)[0], True)


def _blog(d: _Draft) -> None:
    d.add(Paragraph(f"作者：**{d.name()}** · {d.date()}" if d.zh else f"By **{d.name()}** · {d.date()}"), True)
    d.para()
    d.add(d.src.heading(2), False)
    d.para(footnote=d.rng.random() < 0.5)
    d.add(d.src.figure(), False)


def _infographic(d: _Draft) -> None:
    d.para(fact=True)
    d.add(d.src.list_block(ordered=False), True)
    d.add(d.src.figure(), False)
    d.add(d.src.heading(3), False)
    d.add(d.src.list_block(ordered=True, n=3), False)


def _newspaper(d: _Draft) -> None:
    if d.zh:
        d.add(Paragraph(f"{d.name()}，{d.rng.choice(['本报记者', '科学编辑', '特约通讯员'])}"), True)
    else:
        d.add(Paragraph(f"By {d.name()}, {d.rng.choice(['Staff Reporter', 'Science Editor', 'Correspondent'])}"),
              True)
    d.para(bold=True)
    d.para(fact=True)
    d.add(d.src.heading(2), False)
    d.para(footnote=True)
    if d.columns == 3:
        d.para()
    d.add(d.src.figure(), False)


def _form(d: _Draft) -> None:
    d.para(fact=False)
    if d.zh:
        fields = (f"申请人姓名：{d.name()}", f"申请日期：{d.date()}",
                  f"编号：{d.rng.choice('ABCDEFGH')}{d.rng.randint(100000, 999999)}",
                  f"所在单位：{d.rng.choice(d.orgs)}")
    else:
        fields = (f"Applicant name: {d.name()}", f"Date of application: {d.date()}",
                  f"Reference number: {d.rng.choice('ABCDEFGH')}{d.rng.randint(100000, 999999)}",
                  f"Organisation: {d.rng.choice(d.orgs)}")
    d.add(ListBlock(items=fields, ordered=True), True)
    d.add(d.src.heading(2, "声明" if d.zh else "Declaration"), False)
    d.para(fact=False, footnote=True)


def _invoice(d: _Draft) -> None:
    rng = d.rng
    if d.zh:
        d.add(Paragraph(f"付款方：**{d.name()}**，{rng.choice(d.orgs)}。开具日期{d.date()}；"
                        f"请于{rng.choice([14, 30, 45])}天内付款。"), True)
    else:
        d.add(Paragraph(f"Billed to **{d.name()}**, {rng.choice(d.orgs)}. Issued {d.date()}; "
                        f"payment due within {rng.choice([14, 30, 45])} days."), True)
    if d.suite != "table":
        d.add(generate_table(rng, "borderless", max_cols=d.max_cols), True)
    if d.zh:
        d.add(Paragraph(f"应付总额：**{rng.uniform(200, 9000):,.2f} 元**。银行参考号"
                        f"{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}。"), True)
    else:
        d.add(Paragraph(f"Total due: **{rng.uniform(200, 9000):,.2f} EUR**. Bank reference "
                        f"{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}."), True)


def _paper(d: _Draft) -> None:
    if d.zh:
        d.add(Paragraph(f"{d.name()}、{d.name()}，{d.rng.choice(d.orgs)}"), True)
    else:
        d.add(Paragraph(f"{d.name()} and {d.name()}, {d.rng.choice(d.orgs)}"), True)
    d.add(Heading("摘要" if d.zh else "Abstract", level=2), True)
    d.para(fact=True)
    d.add(Heading("1 引言" if d.zh else "1 Introduction", level=2), False)
    d.para(footnote=True)
    d.add(d.src.figure(), False)


LAYOUT_BUILDERS: dict[str, Callable[[_Draft], None]] = {
    "report": _report, "slides": _slides, "blog": _blog, "infographic": _infographic,
    "newspaper": _newspaper, "form": _form, "invoice": _invoice, "paper": _paper,
}


def _cycle(rng: random.Random, categories: tuple[str, ...]) -> list[str]:
    """The categories in a seeded order (a page draws them round-robin, so each appears once before
    any repeats)."""
    cats = list(categories)
    rng.shuffle(cats)
    return cats


def _suite_blocks(d: _Draft, layout: str) -> list[tuple[Block, bool]]:
    """The suite's structure (formulas, tables), inserted after the page's opening blocks; the
    required part must fit every layout, the optional part is kept where there is room.

    Formula suite: a paragraph with two inline formulas and one display formula per category (five),
    then another inline paragraph: >= 8 formulas where the page has room, of every category. Table
    suite: two tables of different categories. Layout suite: one table or formula, kept where it fits.
    """
    rng = d.rng
    extra: list[tuple[Block, bool]] = []
    required = 1 if layout == "slides" else 2 if d.columns > 1 or layout == "infographic" else 3
    if d.suite == "formula":
        p, _ = d.src.paragraph(inline_math=True, fact=False)
        extra.append((p, True))
        for k in range(len(d.formula_cats)):
            extra.append((d.formula(), k < required))
        p, _ = d.src.paragraph(inline_math=True, fact=False)
        extra.append((p, False))
    elif d.suite == "table" and layout == "slides":  # a 16:9 slide holds one table: a large one
        extra.append((d.large_table(), True))
        extra.append((d.table(), False))
    elif d.suite == "table":
        for k in range(2):
            extra.append((d.table(), k == 0))
    elif rng.random() < 0.5:
        extra.append((d.formula(), False))
    else:
        extra.append((d.table(), False))
    return extra


# How much a page's body is filled up to, in estimated room (``_cost``): about 1.3x what the layout
# holds (measured: the mean the HTML renderer kept, ``benchmarks/synth.py``), so that the renderer
# can fill the page and trim what does not fit without typesetting much it throws away.
_BUDGET = {"report": 5600, "paper": 12000, "newspaper": 14000, "invoice": 6400, "form": 6400,
           "slides": 3300, "blog": 5200, "infographic": 4800}
# Form fields the filler adds: (English label, Chinese label, kind of value).
_FORM_FIELDS = (("Telephone", "电话", "phone"), ("Email", "电子邮箱", "email"), ("Supervisor", "负责人", "name"),
                ("Start date", "开始日期", "date"), ("End date", "结束日期", "date"),
                ("Budget code", "预算代码", "code"), ("Department", "部门", "org"), ("Witness", "见证人", "name"))


def _field_value(d: _Draft, kind: str) -> str:
    rng = d.rng
    if kind == "phone":
        return f"+{rng.randint(30, 49)} {rng.randint(100, 999)} {rng.randint(1000, 9999)} {rng.randint(100, 999)}"
    if kind == "email":
        return f"{rng.choice(_LAST).lower()}{rng.randint(1, 99)}@example.org"
    if kind == "name":
        return d.name()
    if kind == "date":
        return d.date()
    if kind == "code":
        return f"{rng.choice('ABCDEFGH')}{rng.choice('KLMNPR')}-{rng.randint(1000, 9999)}"
    return rng.choice(d.orgs)


def _fill_section(d: _Draft, layout: str, k: int) -> list[Block]:
    """One section of filler for ``layout`` (text in the layout's manner) plus the suite's structure."""
    rng, src = d.rng, d.src
    out: list[Block] = []
    if layout == "paper" and rng.random() < 0.35:
        out.append(Heading(f"{k + 2} {rng.choice(_ZH_HEADINGS if d.zh else _SECTION_HEADINGS)}", level=2))
    elif layout in ("report", "blog", "invoice", "form") and rng.random() < 0.35:
        out.append(src.heading(2 if layout != "form" else 3))
    elif layout in ("slides", "infographic") and rng.random() < 0.6:
        out.append(src.heading(2 if layout == "slides" else 3))
    elif layout == "newspaper" and rng.random() < 0.2:
        out.append(src.heading(3))
    if d.suite in ("formula", "table") and layout == "slides":  # bullets: short enough for a column's gap
        out.append(src.list_block(ordered=False, n=rng.randint(2, 3)))
        out.append(d.formula() if d.suite == "formula" else d.table())
        return out
    if d.suite == "formula":
        out.append(src.paragraph(inline_math=rng.random() < 0.6, fact=False)[0])
        out.append(d.formula())
        return out
    if d.suite == "table":
        out.append(src.paragraph()[0])
        out.append(d.table())
        return out
    if layout == "slides":
        out.append(src.list_block(ordered=False, n=rng.randint(2, 3)))
    elif layout == "form":
        # a label shown twice with two values would make "what is the Telephone?" ambiguous (synth.fields)
        unused = [f for f in _FORM_FIELDS if f[0] not in d.form_labels]
        if unused:
            fields = rng.sample(unused, min(3, len(unused)))
            d.form_labels.update(en for en, _, _ in fields)
            out.append(ListBlock(items=tuple(f"{zh}：{_field_value(d, kind)}" if d.zh
                                             else f"{en}: {_field_value(d, kind)}" for en, zh, kind in fields),
                                 ordered=False))
        out.append(src.paragraph(fact=False)[0])
    elif layout == "infographic":
        out.append(src.list_block(ordered=rng.random() < 0.3, n=rng.randint(2, 3)) if rng.random() < 0.5
                   else src.paragraph(fact=True)[0])
    else:
        out.append(src.paragraph()[0])
        roll = rng.random()
        if roll < 0.2 and layout != "newspaper":
            out.append(src.list_block())
        elif roll < 0.3 and layout == "invoice":
            out.append(generate_table(rng, "borderless", max_cols=d.max_cols))
        elif roll < 0.36 and not d.has_filler_figure:
            out.append(src.figure(2))
            d.flags.add("figure")
    return out


def _fill(d: _Draft, layout: str) -> None:
    """Optional filler after the layout's blocks, up to about 1.3x the room the layout has (``_BUDGET``)."""
    budget = _BUDGET[layout]
    total = sum(_cost(b, d.zh) for b, _ in d.body)
    k = 0
    while total < budget:
        for block in _fill_section(d, layout, k):
            d.add(block, False)
            total += _cost(block, d.zh)
        k += 1


def _cut_optional(body: list[tuple[Block, bool]], max_blocks: int | None) -> list[tuple[Block, bool]]:
    """The body, optional blocks dropped from the end until at most ``max_blocks`` remain."""
    if max_blocks is not None:
        while len(body) > max_blocks and any(not req for _, req in body):
            del body[max(i for i, (_, req) in enumerate(body) if not req)]
    return body


def make_page_spec(layout: str, suite: str, seed: int, id: str | None = None, *,
                   density: float = 1.0, max_blocks: int | None = None, language: str = "en",
                   fill: bool = True) -> PageSpec:
    """One page of ``layout`` for ``suite`` in ``language`` (en | zh); the same arguments always give
    an identical spec.

    With ``fill`` the body continues with optional filler (``PlacedBlock.optional``) past what the
    page holds; a filling renderer (``synth.render_html``) keeps what fits and returns that spec.
    """
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; expected one of {list(LANGUAGES)}")
    zh = language == "zh"
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {list(LAYOUTS)}")
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {list(SUITES)}")
    rng = random.Random(f"page:{layout}:{suite}:{seed}" + (":zh" if zh else ""))
    src = ContentSource(rng, density, language)
    org = rng.choice(_ZH_ORGS if zh else _ORGS)
    theme = page_theme(layout, seed, language)  # its own rng: fonts, colours, margins, columns, page size
    if layout == "slides" and suite == "formula":  # >= 8 formulas need both halves of a slide
        theme = replace(theme, columns=2)
    columns = theme.columns
    furniture = _furniture_zh(rng, layout, org) if zh else _furniture(rng, layout, org)
    title = _title_zh(rng, layout, src) if zh else _title(rng, layout, src, org)
    draft = _Draft(rng, src, language, suite, columns, body=[(Heading(title, level=1), True)],
                   formula_cats=_cycle(rng, FORMULA_CATEGORIES), table_cats=_cycle(rng, TABLE_CATEGORIES))
    LAYOUT_BUILDERS[layout](draft)
    at = min(len(draft.body), 3)
    draft.body[at:at] = _suite_blocks(draft, layout)
    if fill:
        _fill(draft, layout)
    body = _cut_optional(draft.body, max_blocks)
    if zh:  # tables and formulas are generated in English; their words are put in Chinese here
        body = [(localize_table(b, language) if isinstance(b, Table) else
                 localize_formula(b, language) if isinstance(b, Formula) else b, req) for b, req in body]
    # Footnote markers sit in required paragraphs only, so every note's marker is on the page.
    return PageSpec(
        id=id or f"synth-{layout}-{suite}-{seed}",
        layout=layout, suite=suite, language=language, columns=columns,
        furniture=furniture, blocks=tuple(_place(body + [(n, True) for n in draft.notes], columns)),
        license="cc0-1.0", seed=seed, sources=src.sources(),
        width_px=theme.width_px, height_px=theme.height_px, theme=theme,
    )


def without_optional(spec: PageSpec) -> PageSpec:
    """``spec`` with its optional blocks left out and the rest placed again (for a renderer that does
    not fill pages itself)."""
    if not any(pb.optional for pb in spec.blocks):
        return spec
    body = [(pb.block, True) for pb in spec.blocks if not pb.optional]
    return replace(spec, blocks=tuple(_place(body, spec.columns)))


def sources_shown(spec: PageSpec) -> tuple[str, ...]:
    """``spec.sources`` less the snippets none of whose text or title is on the page (a filled page
    leaves filler out; its provenance names only what it shows)."""
    parts: list[str] = []
    for pb in spec.blocks:
        b = pb.block
        if isinstance(b, ListBlock):
            parts.extend(b.items)
        elif isinstance(b, (Paragraph, Heading)):
            parts.append(b.text)
    shown = re.sub(r"\*\*|\[\^[^\]\s]+\]", "", "\n".join(parts))  # bold marks and footnote markers
    snippets = {f"{s.title} ({s.license}, {s.source})": s for s in load_snippets(spec.language)}
    return tuple(label for label in spec.sources if label not in snippets or snippets[label].title in shown
                 or any(sentence in shown for sentence in _sentences(snippets[label].text)))


def _weight(block: Block) -> int:
    if isinstance(block, Paragraph):
        return len(block.text)
    if isinstance(block, Heading):
        return 60
    if isinstance(block, ListBlock):
        return sum(len(i) + 30 for i in block.items)
    if isinstance(block, Table):
        return 60 * len(block.rows)
    if isinstance(block, Formula):
        return 120
    if isinstance(block, Figure):
        return 300
    return len(getattr(block, "text", "")) + 20


def _cost(block: Block, zh: bool) -> int:
    """About how much room a block takes, in characters of body text (for the filler's budget)."""
    if isinstance(block, Figure):
        return 1500
    if isinstance(block, Formula):
        return 250
    if isinstance(block, Table):
        return 110 * len(block.rows)
    return _weight(block) * (2 if zh and not isinstance(block, Heading) else 1)


def _place(body: list[tuple[Block, bool]], columns: int) -> list[PlacedBlock]:
    """Split the reading order into ``columns`` runs of about equal weight (footnotes go last); a
    block's flag says whether it is required."""
    if columns <= 1:
        return [PlacedBlock(b, 0, not req) for b, req in body]
    main = [(b, req) for b, req in body if not isinstance(b, Footnote)]
    notes = [b for b, _ in body if isinstance(b, Footnote)]
    total = sum(_weight(b) for b, _ in main) or 1
    placed: list[PlacedBlock] = []
    acc = 0
    for b, req in main:
        col = min(columns - 1, int(columns * (acc + _weight(b) / 2) / total))
        if placed:
            col = max(col, placed[-1].column)
        placed.append(PlacedBlock(b, col, not req))
        acc += _weight(b)
    last = placed[-1].column if placed else 0
    placed.extend(PlacedBlock(n, last) for n in notes)
    return placed
