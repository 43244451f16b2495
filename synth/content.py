"""Seeded page content for JinaOCRSynth: text blocks and whole ``PageSpec``s per layout and suite.

Text comes from the bundled snippets (``synth/data/snippets.json``: short CC0 paragraphs, each with
its title and licence, recorded in ``PageSpec.sources``) plus procedurally generated names,
numbers and dates. ``make_page_spec(layout, suite, seed, id)`` fills one page:

* layout kinds: ``LAYOUTS`` (report, slides, blog, infographic, newspaper (2-3 columns), form,
  invoice, paper (2 columns));
* suites: ``layout`` (mixed blocks), ``formula`` (>= 2 display formulas from ``synth.formulas``
  plus inline math), ``table`` (>= 1 table from ``synth.tables``);
* page furniture (running header, footer, page number), never part of the reference.

Conventions the renderers rely on (paragraph, list-item and footnote text):

* inline math is written ``\\( ... \\)``; emphasis as ``**bold**`` / ``*italic*``;
* a footnote marker is written ``[^m]`` in the text and should be drawn as a superscript ``m``;
  the matching ``Footnote(marker=m)`` block is its note (draw it at the foot of the column/page).

Blocks are in reading order, column by column (``PlacedBlock.column`` never decreases), so
``synth.reference`` can emit them as they come. The amount of content is modest so that a page
fits; ``max_blocks`` caps the body and ``density`` (0.5-1.5) scales optional text.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from synth.blocks import (
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
from synth.formulas import generate_formula, inline_formula
from synth.tables import generate_table

LAYOUTS: tuple[str, ...] = ("report", "slides", "blog", "infographic", "newspaper", "form", "invoice", "paper")
SUITES: tuple[str, ...] = ("layout", "formula", "table")
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


@dataclass(frozen=True)
class Snippet:
    title: str
    text: str
    license: str
    source: str
    topic: str


@lru_cache(maxsize=1)
def load_snippets() -> tuple[Snippet, ...]:
    """The bundled openly licensed paragraphs (title, text, licence, source, topic)."""
    data = json.loads((DATA_DIR / "snippets.json").read_text(encoding="utf-8"))
    return tuple(Snippet(s["title"], s["text"], s["license"], s["source"], s["topic"]) for s in data["snippets"])


# -- procedural values ---------------------------------------------------------------------------

def person_name(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def date_text(rng: random.Random) -> str:
    return f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} {rng.randint(2015, 2025)}"


def number_text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        return f"{rng.randint(1200, 98000):,}"
    if kind < 0.7:
        return f"{rng.uniform(1, 99):.1f}%"
    return f"{rng.uniform(10, 9999):,.2f}"


def fact_sentence(rng: random.Random) -> str:
    """A sentence carrying generated names, numbers and dates (good ``present`` targets)."""
    org = rng.choice(_ORGS)
    return rng.choice([
        f"The {org} recorded {number_text(rng)} observations between {date_text(rng)} and {date_text(rng)}.",
        f"{person_name(rng)} led the survey, which covered {rng.randint(12, 480)} sites in {rng.randint(3, 40)} districts.",
        f"According to {person_name(rng)}, the budget for {rng.randint(2016, 2026)} was set at {number_text(rng)}.",
        f"A follow-up review on {date_text(rng)} confirmed a change of {rng.uniform(1, 40):.1f}% over the period.",
    ])


# -- text blocks -----------------------------------------------------------------------------------

class ContentSource:
    """Draws text blocks from the snippets without repeating one on a page; records what it used."""

    def __init__(self, rng: random.Random, density: float = 1.0):
        self.rng = rng
        self.density = max(0.5, min(1.5, density))
        self._pool = list(load_snippets())
        rng.shuffle(self._pool)
        self.used: list[Snippet] = []
        self._footnotes = 0

    def snippet(self) -> Snippet:
        s = self._pool[len(self.used) % len(self._pool)]
        self.used.append(s)
        return s

    def heading(self, level: int = 2, text: str | None = None) -> Heading:
        if text is None:
            text = self.rng.choice(_SECTION_HEADINGS) if self.rng.random() < 0.5 else self._pool[
                (len(self.used)) % len(self._pool)].title
        return Heading(text=text, level=level)

    def paragraph(self, *, bold: bool = False, inline_math: bool = False, fact: bool | None = None,
                  footnote: bool = False) -> tuple[Paragraph, Footnote | None]:
        s = self.snippet()
        sentences = _sentences(s.text)
        keep = max(1, round(len(sentences) * min(1.0, self.density)))
        sentences = sentences[:keep]
        if bold:
            sentences[0] = _embolden(self.rng, sentences[0])
        note: Footnote | None = None
        if footnote:
            self._footnotes += 1
            marker = str(self._footnotes)
            first = sentences[0]
            sentences[0] = first[:-1] + f"[^{marker}]" + first[-1] if first[-1] in ".!?" else first + f"[^{marker}]"
            note = Footnote(marker=marker, text=self.footnote_text())
        if inline_math:
            a, b = inline_formula(self.rng), inline_formula(self.rng)
            sentences.append(f"In the fitted model \\( {a} \\), and the bound \\( {b} \\) holds for every site.")
        if fact if fact is not None else self.rng.random() < 0.5 * self.density:
            sentences.append(fact_sentence(self.rng))
        return Paragraph(" ".join(sentences)), note

    def footnote_text(self) -> str:
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
            if kind < 0.4:
                items.append(_sentences(self.snippet().text)[0])
            elif kind < 0.7:
                items.append(f"{self.rng.choice(_SECTION_HEADINGS)}: {number_text(self.rng)} by {date_text(self.rng)}")
            else:
                items.append(f"Contact {person_name(self.rng)} at the {self.rng.choice(_ORGS)}")
        return ListBlock(items=tuple(items), ordered=self.rng.random() < 0.5 if ordered is None else ordered)

    def figure(self, n: int = 1) -> Figure:
        s = self.rng.choice(self._pool)
        caption = self.rng.choice([
            f"Figure {n}: {s.title} at {self.rng.randint(3, 40)} monitoring sites, {self.rng.randint(2015, 2025)}.",
            f"Figure {n}. Share of {s.topic} records by quarter ({number_text(self.rng)} in total).",
        ])
        return Figure(caption=caption, kind=self.rng.choice(["placeholder", "chart"]))

    def sources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f"{s.title} ({s.license}, {s.source})" for s in self.used))


def _sentences(text: str) -> list[str]:
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch in ".!?" and (i + 1 == len(text) or text[i + 1] == " "):
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


# -- pages -----------------------------------------------------------------------------------------

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
        "paper": f"Journal of Applied {rng.choice(['Survey', 'Field', 'Systems', 'Measurement'])} Studies, Vol. {rng.randint(2, 40)}",
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


def make_page_spec(layout: str, suite: str, seed: int, id: str | None = None, *,
                   density: float = 1.0, max_blocks: int | None = None) -> PageSpec:
    """One page of ``layout`` for ``suite``; the same arguments always give an identical spec."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {list(LAYOUTS)}")
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {list(SUITES)}")
    rng = random.Random(f"page:{layout}:{suite}:{seed}")
    src = ContentSource(rng, density)
    org = rng.choice(_ORGS)
    columns = {"newspaper": rng.choice([2, 3]), "paper": 2}.get(layout, 1)
    max_cols = 4 if columns > 1 else 7
    furniture = _furniture(rng, layout, org)
    title = _title(rng, layout, src, org)

    # (block, required): required blocks survive ``max_blocks``; optional ones are cut from the end.
    body: list[tuple[Block, bool]] = [(Heading(title, level=1), True)]
    notes: list[Footnote] = []

    def para(**kw: bool) -> None:
        p, note = src.paragraph(**kw)
        body.append((p, True))
        if note is not None:
            notes.append(note)

    if layout == "report":
        para(bold=True)
        body.append((src.heading(2), False))
        para(footnote=True)
        body.append((src.list_block(), False))
        body.append((src.figure(), False))
    elif layout == "slides":
        body.append((src.list_block(ordered=False, n=3), True))
        body.append((src.heading(2), False))
        para(fact=False, bold=True)
    elif layout == "blog":
        body.append((Paragraph(f"By **{person_name(rng)}** · {date_text(rng)}"), True))
        para()
        body.append((src.heading(2), False))
        para(footnote=rng.random() < 0.5)
        body.append((src.figure(), False))
    elif layout == "infographic":
        para(fact=True)
        body.append((src.list_block(ordered=False), True))
        body.append((src.figure(), False))
        body.append((src.heading(3), False))
        body.append((src.list_block(ordered=True, n=3), False))
    elif layout == "newspaper":
        body.append((Paragraph(f"By {person_name(rng)}, {rng.choice(['Staff Reporter', 'Science Editor', 'Correspondent'])}"), True))
        para(bold=True)
        para(fact=True)
        body.append((src.heading(2), False))
        para(footnote=True)
        if columns == 3:
            para()
        body.append((src.figure(), False))
    elif layout == "form":
        para(fact=False)
        fields = (f"Applicant name: {person_name(rng)}", f"Date of application: {date_text(rng)}",
                  f"Reference number: {rng.choice('ABCDEFGH')}{rng.randint(100000, 999999)}",
                  f"Organisation: {rng.choice(_ORGS)}")
        body.append((ListBlock(items=fields, ordered=True), True))
        body.append((src.heading(2, "Declaration"), False))
        para(fact=False, footnote=True)
    elif layout == "invoice":
        body.append((Paragraph(f"Billed to **{person_name(rng)}**, {rng.choice(_ORGS)}. Issued {date_text(rng)}; "
                               f"payment due within {rng.choice([14, 30, 45])} days."), True))
        if suite != "table":
            body.append((generate_table(rng, "borderless", max_cols=max_cols), True))
        body.append((Paragraph(f"Total due: **{rng.uniform(200, 9000):,.2f} EUR**. Bank reference "
                               f"{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}."), True))
    elif layout == "paper":
        body.append((Paragraph(f"{person_name(rng)} and {person_name(rng)}, {rng.choice(_ORGS)}"), True))
        body.append((Heading("Abstract", level=2), True))
        para(fact=True)
        body.append((Heading("1 Introduction", level=2), False))
        para(footnote=True)
        body.append((src.figure(), False))

    # Suite structure, inserted after the opening blocks.
    at = min(len(body), 3)
    extra: list[tuple[Block, bool]] = []
    if suite == "formula":
        p, _ = src.paragraph(inline_math=True, fact=False)
        extra.append((p, True))
        for _ in range(rng.choice([2, 2, 3])):
            extra.append((generate_formula(rng), True))
    elif suite == "table":
        for _ in range(1 if layout in ("slides", "infographic") or columns > 1 else rng.choice([1, 1, 2])):
            extra.append((generate_table(rng, max_cols=max_cols), True))
    elif rng.random() < 0.3:
        extra.append((generate_formula(rng) if rng.random() < 0.5 else generate_table(rng, max_cols=max_cols), False))
    body[at:at] = extra

    if max_blocks is not None:
        while len(body) > max_blocks and any(not req for _, req in body):
            idx = max(i for i, (_, req) in enumerate(body) if not req)
            del body[idx]
    blocks = [b for b, _ in body]
    # Keep only the notes whose marker survived (paragraphs are required, so all do today).
    blocks.extend(notes)
    placed = _place(blocks, columns)
    return PageSpec(
        id=id or f"synth-{layout}-{suite}-{seed}",
        layout=layout, suite=suite, language="en", columns=columns,
        furniture=furniture, blocks=tuple(placed), license="cc0-1.0", seed=seed, sources=src.sources(),
    )


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


def _place(blocks: list[Block], columns: int) -> list[PlacedBlock]:
    """Split the reading order into ``columns`` runs of about equal weight (footnotes go last)."""
    if columns <= 1:
        return [PlacedBlock(b, 0) for b in blocks]
    body = [b for b in blocks if not isinstance(b, Footnote)]
    notes = [b for b in blocks if isinstance(b, Footnote)]
    total = sum(_weight(b) for b in body) or 1
    placed, acc = [], 0
    for b in body:
        col = min(columns - 1, int(columns * (acc + _weight(b) / 2) / total))
        if placed:
            col = max(col, placed[-1].column)
        placed.append(PlacedBlock(b, col))
        acc += _weight(b)
    last = placed[-1].column if placed else 0
    placed.extend(PlacedBlock(n, last) for n in notes)
    return placed
