"""Builds ``tests/data/repeat_loops.jsonl``: the labelled evaluation set of the repeat-loop detector.

    python tests/data/make_repeat_loops.py [--seed 20240604] [--output tests/data/repeat_loops.jsonl]

Each line is ``{"id", "text", "label", "note"}``: ``label`` is ``"exact"``, ``"truncated"``,
``"gapped"``, ``"near"`` or ``null`` (a hard negative), ``note`` says what the case is. Labels are 2 to 16 KB
of mixed natural-ish content (prose in several languages, Markdown headings and lists, HTML and
Markdown tables, LaTeX), generated from a seed so the file is reproducible.

Loops (the failure modes seen in OCR model output) are appended to such a body and run to the end
of the label: repeated table rows (HTML and Markdown, with or without content), formula fragments,
words, sentences and lines, symbol runs, long paragraphs; gapped ones have incrementing numbers,
whitespace or punctuation jitter, or short fillers between copies. Loop lengths are drawn so that
most fill the inspected 1,024-character tail, as loops that run to the token limit do, and about a
third cover 300 to 1,000 characters. Truncated loops are cut at a random character inside the last
copy. The expected period of exact and truncated loops is the primitive period of the unit; gapped
loops are checked here to have no exact periodic suffix of three copies or more, so their label
holds by construction, not by the detector.

Hard negatives end with (or contain) legitimate repetitive structure: tables with many empty or
identical cells, wide separator rows, dot leaders in a table of contents, lists and forms whose
lines share a prefix, numbered blank lines, refrains, repeated running headers and table headers
in multi-column layouts, numeric tables with a year column, LaTeX matrices, bibliographies.

Near-exact loops and their negatives come last and are made another way (see the section
"near-exact loops"): real-ish prose from the synth snippet bank, a piece of the page repeated with
each copy passed through an OCR confusion table (``rn``/``m``, ``l``/``1``, ``e``/``c`` ...; 0-2
substitutions per copy), and as negatives lines that differ in one slot (lettered items, a word
that changes) and OCR-noisy refrains, running headers, forms and prose. They draw from their own
random generator, so the items before them are what they were before this kind was added.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent

EN = (
    "the of and to in is was for on that with as by at from this are be or which an were it has "
    "have not but all their can its more these also been other than into only such one two new "
    "time results method model data analysis table figure section value values sample samples "
    "study effect system report year years total number rate increase decrease average mean "
    "temperature pressure energy water surface during between under after before while where "
    "committee council meeting members court case county state city government public report "
    "letter page volume chapter history church school company market price prices trade "
    "patients treatment clinical group control response observed measured estimated proposed "
    "function equation parameter theorem proof lemma given following shown above below"
).split()
DE = "der die das und ist nicht mit von auf für den dem ein eine werden wurde Jahr Stadt Bericht Ergebnis".split()
FR = "le la les et est dans pour sur avec une des du que qui par pas plus ville rapport année résultat".split()
ES = "el la los las y es en por con una del que para más ciudad informe año resultado".split()
ZH = list(
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质"
)
NAMES = (
    "Smith Müller García Chen Wang Kowalski Dubois Rossi Novak Tanaka Okafor Ivanova Silva "
    "Johansson O'Brien Nguyen Haddad Fischer Moreau Kim"
).split()
TITLES = (
    "Introduction",
    "Background",
    "Related Work",
    "Methods",
    "Data Collection",
    "Results",
    "Discussion",
    "Limitations",
    "Conclusion",
    "Appendix",
    "Acknowledgements",
    "References",
    "Financial Statements",
    "Notes to the Accounts",
    "Risk Factors",
    "Governance",
)


class Gen:
    """Seeded generators of natural-ish OCR label content."""

    def __init__(self, rng: random.Random):
        self.r = rng

    # ------------------------------------------------------------------ pieces
    def word(self, lang: str = "en") -> str:
        pool = {"en": EN, "de": DE, "fr": FR, "es": ES}[lang]
        w = self.r.choice(pool)
        return w.capitalize() if self.r.random() < 0.08 else w

    def number(self) -> str:
        kind = self.r.random()
        if kind < 0.4:
            return str(self.r.randint(0, 999))
        if kind < 0.7:
            return f"{self.r.uniform(0, 100):.{self.r.randint(1, 3)}f}"
        if kind < 0.85:
            return str(self.r.randint(1800, 2025))
        return f"{self.r.randint(1, 99)}%"

    def sentence(self, lang: str = "en") -> str:
        if lang == "zh":
            return "".join(self.r.choice(ZH) for _ in range(self.r.randint(8, 40))) + self.r.choice("。，；！？")
        words = []
        for _ in range(self.r.randint(5, 24)):
            words.append(self.number() if self.r.random() < 0.07 else self.word(lang))
        text = " ".join(words)
        if self.r.random() < 0.2:
            cut = self.r.randint(1, len(words) - 1)
            text = " ".join(words[:cut]) + ", " + " ".join(words[cut:])
        return text[0].upper() + text[1:] + self.r.choice("....!?;:")[:1]

    def paragraph(self) -> str:
        lang = self.r.choices(["en", "de", "fr", "es", "zh"], [70, 8, 8, 6, 8])[0]
        sep = "" if lang == "zh" else " "
        return sep.join(self.sentence(lang) for _ in range(self.r.randint(2, 8)))

    def heading(self) -> str:
        level = self.r.randint(1, 3)
        return (
            "#" * level + " " + (f"{self.r.randint(1, 9)}. " if self.r.random() < 0.5 else "") + self.r.choice(TITLES)
        )

    def bullet_list(self) -> str:
        marker = self.r.choice(["-", "*", "1."])
        lines = []
        for i in range(self.r.randint(2, 7)):
            m = f"{i + 1}." if marker == "1." else marker
            lines.append(f"{m} {self.sentence()}")
        return "\n".join(lines)

    def cell(self) -> str:
        x = self.r.random()
        if x < 0.45:
            return self.number()
        if x < 0.8:
            return " ".join(self.word() for _ in range(self.r.randint(1, 3)))
        if x < 0.9:
            return self.r.choice(NAMES)
        return ""

    def html_table(self, rows: int | None = None, cols: int | None = None, close: bool = True) -> str:
        rows = rows or self.r.randint(2, 10)
        cols = cols or self.r.randint(2, 6)
        nl = self.r.choice(["\n", ""])
        out = ["<table>"]
        out.append("<tr>" + "".join(f"<th>{self.word().capitalize()}</th>" for _ in range(cols)) + "</tr>")
        for _ in range(rows):
            out.append("<tr>" + "".join(f"<td>{self.cell()}</td>" for _ in range(cols)) + "</tr>")
        if close:
            out.append("</table>")
        return nl.join(out)

    def md_table(self, rows: int | None = None, cols: int | None = None) -> str:
        rows = rows or self.r.randint(2, 10)
        cols = cols or self.r.randint(2, 6)
        out = [
            "| " + " | ".join(self.word().capitalize() for _ in range(cols)) + " |",
            "|" + "|".join(self.r.choice(["---", ":---", ":---:", "---:"]) for _ in range(cols)) + "|",
        ]
        for _ in range(rows):
            out.append("| " + " | ".join(self.cell() for _ in range(cols)) + " |")
        return "\n".join(out)

    def formula(self) -> str:
        v = self.r.choice("xyzabtnkuv")
        pieces = [
            f"\\frac{{{self.r.randint(1, 9)}}}{{{self.r.randint(2, 12)}}}",
            f"{v}^{{{self.r.randint(2, 5)}}}",
            f"\\sum_{{i=1}}^{{{self.r.choice('nNmK')}}} {v}_i",
            f"\\int_0^{{\\infty}} e^{{-{v}}} d{v}",
            f"\\alpha_{{{self.r.randint(0, 3)}}}",
            f"\\sqrt{{{v}+{self.r.randint(1, 9)}}}",
            f"{self.r.randint(2, 99)}{v}",
            f"\\log {v}",
            f"\\mathbf{{{v.upper()}}}",
            f"\\left( {v} - {self.r.randint(1, 9)} \\right)",
        ]
        op = self.r.choice(["+", "-", "=", "\\cdot", "\\leq"])
        expr = f" {op} ".join(self.r.choice(pieces) for _ in range(self.r.randint(2, 6)))
        return f"$$\n{expr}\n$$" if self.r.random() < 0.5 else f"The relation ${expr}$ holds for all {v}."

    def block(self) -> str:
        kind = self.r.choices(["para", "heading", "list", "html", "md", "formula"], [50, 10, 10, 8, 8, 14])[0]
        return {
            "para": self.paragraph,
            "heading": self.heading,
            "list": self.bullet_list,
            "html": self.html_table,
            "md": self.md_table,
            "formula": self.formula,
        }[kind]()

    def body(self, size: int) -> str:
        parts: list[str] = []
        total = 0
        while total < size:
            b = self.block()
            parts.append(b)
            total += len(b) + 2
        text = "\n\n".join(parts)
        return text[:size].rstrip() if len(text) > size * 1.3 else text

    def size(self) -> int:
        """Body size: log-uniform in 2-11.6 KB (the loop or structure appended brings labels to 2-16 KB)."""
        return int(2 ** self.r.uniform(11, 13.5))


# ---------------------------------------------------------------------- loops


def primitive_period(unit: str) -> int:
    p = len(unit)
    for d in range(1, p + 1):
        if p % d == 0 and unit[:d] * (p // d) == unit:
            return d
    return p


def exact_periodic_suffix(text: str, min_copies: int = 3, max_period: int = 512) -> int:
    """Smallest period with at least ``min_copies`` back-to-back copies ending ``text`` (0 if none).
    Independent brute force, used to keep gapped loops honest."""
    t = text.rstrip()
    for p in range(1, max_period + 1):
        if p * min_copies > len(t):
            break
        if t[-p:] * min_copies == t[-p * min_copies :]:
            return p
    return 0


def loop_length(g: Gen, unit_len: int) -> int:
    """Characters of loop: ~2/3 fill the 1,024-char tail (up to ~4 KB), the rest cover 300-1,000."""
    if g.r.random() < 0.67:
        return g.r.randint(1100, 4000)
    return max(g.r.randint(300, 1000), 2 * unit_len + 1)


def exact_units(g: Gen) -> list[tuple[str, str]]:
    """(note, unit) candidates of real OCR failure modes; one is chosen per loop."""
    w = g.word
    cells = lambda n, f: "".join(f"<td>{f()}</td>" for _ in range(n))  # noqa: E731
    nl = g.r.choice(["\n", ""])
    return [
        ("html table row with content", f"<tr>{cells(g.r.randint(2, 5), g.cell)}</tr>{nl}"),
        ("html table row of identical values", f"<tr>{cells(g.r.randint(2, 6), lambda: '0.5')}</tr>{nl}"),
        ("html table row of empty cells", f"<tr>{cells(g.r.randint(2, 8), lambda: '')}</tr>{nl}"),
        ("markdown table row", "| " + " | ".join(g.cell() or "-" for _ in range(g.r.randint(2, 5))) + " |\n"),
        ("markdown empty table row", "|" + "  |" * g.r.randint(3, 8) + "\n"),
        (
            "formula fragment",
            g.r.choice(
                [
                    "\\frac{1}{2} + ",
                    "x_{i} + ",
                    "\\alpha \\beta ",
                    "+ \\cdots ",
                    "= 0 ",
                    "\\left( x \\right) ",
                    "a_{n} a_{n} ",
                    "\\\\ \\hline ",
                    "& 0 ",
                    "\\quad ",
                    "\\mathbf{x}^{T} ",
                ]
            ),
        ),
        (
            "repeated word",
            g.r.choice(
                [
                    "the ",
                    "and ",
                    "of the ",
                    "data ",
                    "der ",
                    "la ",
                    "是",
                    "的",
                    "0 ",
                    "Total ",
                    "N/A ",
                    "is ",
                    "value, ",
                ]
            ),
        ),
        ("repeated phrase", " ".join(w() for _ in range(g.r.randint(2, 5))) + g.r.choice([" ", ", ", ". "])),
        ("repeated sentence line", g.sentence() + g.r.choice(["\n", " ", "\n\n"])),
        ("repeated list item", g.r.choice(["- ", "* ", "• "]) + g.sentence() + "\n"),
        ("symbol run", g.r.choice([".", "-", "=", "_", "*", "0", "·", "~"])),
        ("repeated paragraph", g.paragraph()[: g.r.randint(120, 480)].rstrip() + "\n\n"),
        ("repeated heading", g.heading() + "\n\n"),
        (
            "repeated cjk phrase",
            "".join(g.r.choice(ZH) for _ in range(g.r.randint(2, 8))) + g.r.choice(["，", "。", ""]),
        ),
        (
            "latex array row",
            " & ".join(g.r.choice(["0", "1", "x", "\\cdot"]) for _ in range(g.r.randint(2, 6))) + " \\\\\n",
        ),
    ]


def make_exact(g: Gen, truncated: bool, index: int) -> dict:
    while True:
        note, unit = g.r.choice(exact_units(g))
        if len(unit) <= 512 and unit.strip():
            break
    p = primitive_period(unit)
    # a single-symbol run is a truncated loop of nothing: such units are only exact
    if truncated and (p == 1 or len(unit.rstrip()) <= 1):
        return make_exact(g, truncated, index)
    length = loop_length(g, len(unit))
    copies = max(2, length // len(unit))
    loop = unit * copies
    if truncated:
        # cut at a random character inside the last copy, but not on a copy boundary of the
        # primitive period and not just before the unit's own trailing whitespace
        cuts = [r for r in range(1, len(unit)) if r % p and unit[:r].rstrip() != unit.rstrip()]
        loop += unit[: g.r.choice(cuts)]
    lead = g.r.choice(["", "\n\n", "\n", " "])
    if "<tr>" in unit:
        lead = "\n\n" + g.html_table(close=False) + "\n"
    elif unit.startswith("|"):
        lead = "\n\n" + g.md_table() + "\n"
    text = g.body(g.size()) + lead + loop
    kind = "truncated" if truncated else "exact"
    return {
        "id": f"loop-{kind}-{index:04d}",
        "text": text,
        "label": kind,
        "note": f"{note} x{copies}{' cut inside the last copy' if truncated else ''} (period {p})",
    }


def make_gapped(g: Gen, index: int) -> dict:
    """Copies that differ in numbers, whitespace or punctuation, or have short fillers between them."""
    families: list[tuple[str, Callable[[int], str]]] = []
    s = g.sentence()
    words = " ".join(g.word() for _ in range(g.r.randint(2, 4)))
    cols = g.r.randint(1, 4)
    start = g.r.randint(0, 40)
    step = g.r.choice([1, 1, 1, 2, 10])
    families += [
        ("numbered list lines", lambda i: f"{start + i * step}. {s}\n"),
        ("numbered steps", lambda i: f"Step {start + i}: {words}.\n"),
        ("bracketed numbers", lambda i: f"({start + i}) {words} "),
        ("reference numbers", lambda i: f"[{start + i}] {s}\n"),
        (
            "html rows with an incrementing index",
            lambda i: f"<tr><td>{start + i}</td>" + "<td>0.5</td>" * cols + "</tr>\n",
        ),
        ("markdown rows with an incrementing index", lambda i: f"| {start + i} | {words} |" + " n/a |" * cols + "\n"),
        ("formula with incrementing index", lambda i: f"\\frac{{1}}{{{start + i + 2}}} + "),
        ("subscript sequence", lambda i: f"x_{{{start + i}}} + "),
        ("page footer with page numbers", lambda i: f"Page {start + i} of {start + 200}\n"),
        ("dated log lines", lambda i: f"{2000 + (start + i) % 25}-01-01 {words}\n"),
    ]
    ws_variants = [" ", "  ", "\n", " \n", "\t"]
    punct_variants = [", ", ". ", "; ", " ", "! ", ": "]
    filler_variants = ["", " ", " - ", "<br>", " ...", " |", "\n"]
    base_words = s.rstrip(".!?;:")

    def jitter(i: int, variants: list[str], seed_list: list[int]) -> str:
        return variants[seed_list[i]]

    def choice_chain(n: int, k: int) -> list[int]:
        out = [g.r.randrange(k)]
        for _ in range(n - 1):
            out.append(g.r.choice([x for x in range(k) if x != out[-1]]))
        return out

    name, make = None, None
    pick = g.r.random()
    if pick < 0.6:
        name, make = g.r.choice(families)
    elif pick < 0.75:
        seq = choice_chain(2000, len(ws_variants))
        unit_words = base_words.split()[: g.r.randint(2, 8)]
        name = "whitespace jitter between words"
        make = lambda i: " ".join(unit_words[:-1]) + " " + unit_words[-1] + jitter(i, ws_variants, seq)  # noqa: E731
    elif pick < 0.88:
        seq = choice_chain(2000, len(punct_variants))
        phrase = " ".join(base_words.split()[: g.r.randint(1, 5)])
        name = "punctuation jitter"
        make = lambda i: phrase + jitter(i, punct_variants, seq)  # noqa: E731
    else:
        seq = choice_chain(2000, len(filler_variants))
        phrase = g.sentence()[: g.r.randint(20, 80)]
        name = "short fillers between copies"
        make = lambda i: phrase + jitter(i, filler_variants, seq)  # noqa: E731
    unit_len = len(make(1))
    length = loop_length(g, unit_len)
    loop_parts: list[str] = []
    i = 0
    while sum(map(len, loop_parts)) < length or i < 3:
        loop_parts.append(make(i))
        i += 1
    loop = "".join(loop_parts)
    if g.r.random() < 0.3:  # cut anywhere: the kind stays gapped
        loop = loop[: len(loop) - g.r.randint(1, max(1, unit_len - 1))]
    lead = "\n\n" + (
        g.html_table(close=False) + "\n"
        if loop.startswith("<tr>")
        else g.md_table() + "\n"
        if loop.startswith("|")
        else ""
    )
    text = g.body(g.size()) + lead + loop
    return {"id": f"loop-gapped-{index:04d}", "text": text, "label": "gapped", "note": f"{name} x{i}"}


# ---------------------------------------------------------------------- hard negatives


def negative_structures(g: Gen) -> list[tuple[str, Callable[[], str]]]:
    r = g.r

    def empty_html_table() -> str:
        cols = r.randint(3, 8)
        rows = [f"<tr>{''.join(f'<th>{g.word().capitalize()}</th>' for _ in range(cols))}</tr>"]
        for _ in range(r.randint(4, 18)):
            rows.append(
                "<tr>" + "".join(f"<td>{g.cell() if r.random() < 0.15 else ''}</td>" for _ in range(cols)) + "</tr>"
            )
        nl = r.choice(["\n", ""])
        return "<table>" + nl + nl.join(rows) + (nl + "</table>" if r.random() < 0.5 else "")

    def empty_md_table() -> str:
        cols = r.randint(3, 8)
        head = "| " + " | ".join(g.word().capitalize() for _ in range(cols)) + " |\n|" + "---|" * cols
        rows = [
            "| " + " | ".join(g.cell() if r.random() < 0.15 else " " for _ in range(cols)) + " |"
            for _ in range(r.randint(4, 18))
        ]
        return head + "\n" + "\n".join(rows)

    def identical_cells_table() -> str:
        cols = r.randint(3, 7)
        mark = r.choice(["✓", "Yes", "0", "—", "n/a", "x", "0.00", "TBD"])
        head = "| Item | " + " | ".join(f"Q{j + 1}" for j in range(cols)) + " |\n|---|" + "---|" * cols
        rows = [
            f"| {g.word().capitalize()} {g.word()} | "
            + " | ".join(mark if r.random() < 0.85 else g.number() for _ in range(cols))
            + " |"
            for _ in range(r.randint(4, 16))
        ]
        return head + "\n" + "\n".join(rows)

    def identical_html_rows() -> str:
        cols = r.randint(3, 6)
        mark = r.choice(["0", "–", "n.a.", "Yes", "0.0"])
        same = "<tr>" + f"<td>{mark}</td>" * cols + "</tr>"
        rows = [f"<tr>{''.join(f'<td>{g.cell()}</td>' for _ in range(cols))}</tr>" for _ in range(r.randint(1, 5))]
        rows += [same] * r.randint(3, 8)
        return "<table>\n" + "\n".join(rows) + "\n</table>"

    def wide_separator() -> str:
        cols = r.randint(10, 30)
        sep = "|" + "|".join(r.choice(["---", ":---:", "----"]) for _ in range(cols)) + "|"
        head = "| " + " | ".join(str(j) for j in range(cols)) + " |"
        rows = [
            "| " + " | ".join(g.number() if r.random() < 0.6 else "" for _ in range(cols)) + " |"
            for _ in range(r.randint(0, 4))
        ]
        return "\n".join([head, sep] + rows)

    def toc() -> str:
        lines = []
        page = r.randint(1, 20)
        for j in range(r.randint(8, 40)):
            title = (
                f"{j + 1}. {r.choice(TITLES)} {g.word()} {g.word()}"
                if r.random() < 0.7
                else f"{j + 1}.{r.randint(1, 5)} {g.word().capitalize()} {g.word()}"
            )
            page += r.randint(1, 12)
            width = r.choice([60, 72, 80])
            leader = r.choice([".", " .", "·", "_"])
            fill = max(3, (width - len(title) - len(str(page))) // len(leader))
            lines.append(f"{title} {leader * fill} {page}")
        return "\n".join(lines)

    def prefix_list() -> str:
        prefix = r.choice(
            ["Name of applicant:", "- Item:", "Q:", "Answer:", "* Note:", "Address:", "Phone:", "Field", "Member since"]
        )
        return "\n".join(f"{prefix} {g.sentence()[: r.randint(10, 60)]}" for _ in range(r.randint(6, 30)))

    def questionnaire() -> str:
        return "\n".join(
            f"{j + 1}. {g.sentence()[: r.randint(15, 70)].rstrip('.')}? Yes [ ] No [ ]" for j in range(r.randint(6, 25))
        )

    def form() -> str:
        fields = [
            "Name",
            "Date of birth",
            "Address",
            "City",
            "Postcode",
            "Telephone",
            "E-mail",
            "Occupation",
            "Employer",
            "Signature",
            "Date",
            "Witness",
            "Place",
            "Nationality",
            "Passport No.",
        ]
        r.shuffle(fields)
        line = r.choice(["_" * r.randint(15, 40), "." * r.randint(15, 40), "[ ]", "☐ Yes ☐ No"])
        return "\n".join(f"{f}: {line}" for f in fields[: r.randint(5, 15)])

    def numbered_blanks() -> str:
        blank = r.choice(["_" * r.randint(20, 50), "." * r.randint(20, 50), "[   ]"])
        return "\n".join(f"{j + 1}. {blank}" for j in range(r.randint(4, 10)))

    def signature_lines() -> str:
        block = r.choice(
            [
                "Signature: ____________________  Date: ____________",
                "Signed ......................................",
                "Approved by: ________________",
            ]
        )
        return "\n".join([block] * r.randint(2, 3))

    def refrain() -> str:
        chorus = "\n".join(g.sentence()[: r.randint(20, 60)] for _ in range(r.randint(2, 4)))
        parts = []
        for _ in range(r.randint(2, 4)):
            parts.append("\n".join(g.sentence()[: r.randint(20, 60)] for _ in range(r.randint(2, 4))))
            parts.append(chorus)
        if r.random() < 0.5:
            parts.append(chorus)  # chorus sung twice at the end
        return "\n\n".join(parts)

    def short_refrain() -> str:
        bit = r.choice(
            [
                "Na na na na, na na na na, hey hey hey, goodbye",
                "Ha ha ha!",
                "Glory, glory, hallelujah!",
                "Row, row, row your boat",
                "La la la la la",
                "Holy, holy, holy",
                "Ho ho ho",
            ]
        )
        return "\n".join([g.sentence()[:50], bit, g.sentence()[:50], bit, bit])

    def running_headers() -> str:
        header = r.choice(
            [
                f"JOURNAL OF {g.word().upper()} {g.word().upper()}",
                f"{r.choice(NAMES).upper()} ET AL.",
                f"Annual Report {r.randint(1990, 2024)}",
                "THE DAILY HERALD — MONDAY",
            ]
        )
        cols = []
        for _ in range(r.randint(2, 4)):
            cols.append(header + "\n\n" + g.paragraph()[: r.randint(150, 600)])
        return "\n\n".join(cols)

    def repeated_table_headers() -> str:
        cols = r.randint(2, 4)
        head = "| " + " | ".join(["Name", "Score"] * cols) + " |\n|" + "---|" * (2 * cols)
        rows = [
            "| " + " | ".join(f"{r.choice(NAMES)} | {r.randint(0, 100)}" for _ in range(cols)) + " |"
            for _ in range(r.randint(3, 12))
        ]
        return head + "\n" + "\n".join(rows)

    def column_headers_html() -> str:
        cols = r.randint(2, 3)
        head = "<tr>" + "<th>Year</th><th>Value</th>" * cols + "</tr>"
        rows = [
            "<tr>" + "".join(f"<td>{r.randint(1950, 2020)}</td><td>{g.number()}</td>" for _ in range(cols)) + "</tr>"
            for _ in range(r.randint(3, 12))
        ]
        return "<table>\n" + head + "\n" + "\n".join(rows) + ("\n</table>" if r.random() < 0.5 else "")

    def numeric_table() -> str:
        year = r.randint(1950, 2000)
        cols = r.randint(2, 5)
        rows = [
            f"| {year + j} | " + " | ".join(f"{r.uniform(0, 500):.1f}" for _ in range(cols)) + " |"
            for j in range(r.randint(10, 45))
        ]
        return (
            "| Year | "
            + " | ".join(g.word().capitalize() for _ in range(cols))
            + " |\n|---|"
            + "---|" * cols
            + "\n"
            + "\n".join(rows)
        )

    def numeric_html() -> str:
        cols = r.randint(2, 4)
        rows = [
            f"<tr><td>{j + 1}</td>" + "".join(f"<td>{r.randint(0, 9999)}</td>" for _ in range(cols)) + "</tr>"
            for j in range(r.randint(10, 35))
        ]
        return "<table>\n" + "\n".join(rows)

    def zero_matrix() -> str:
        n = r.randint(3, 10)
        rows = [" & ".join("0" if r.random() < 0.9 else "1" for _ in range(n)) for _ in range(n)]
        return "$$\n\\begin{pmatrix}\n" + " \\\\\n".join(rows) + "\n\\end{pmatrix}\n$$"

    def bibliography() -> str:
        return "\n".join(
            f"[{j + 1}] {r.choice(NAMES)}, {r.choice('ABCDEFGHJK')}. ({r.randint(1950, 2024)}). "
            f"{g.sentence()[: r.randint(30, 90)]} Journal of {g.word().capitalize()}, {r.randint(1, 80)}, "
            f"{r.randint(1, 400)}-{r.randint(401, 900)}."
            for j in range(r.randint(5, 20))
        )

    def ledger() -> str:
        return "\n".join(
            f"| 20{r.randint(10, 24)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} | "
            f"{r.choice(['Deposit', 'Withdrawal', 'Fee', 'Transfer'])} | {r.uniform(1, 999):.2f} |"
            for _ in range(r.randint(8, 30))
        )

    def checklist() -> str:
        return "\n".join(f"- [ ] {g.word().capitalize()} {g.word()} {g.word()}" for _ in range(r.randint(6, 25)))

    def code_listing() -> str:
        regs = ["eax", "ebx", "ecx", "edx"]
        return (
            "```\n"
            + "\n".join(
                f"    {r.choice(['mov', 'add', 'push', 'pop'])} {r.choice(regs)}, {r.randint(0, 16)}"
                for _ in range(r.randint(8, 30))
            )
            + "\n```"
        )

    def hr_rules() -> str:
        return "\n\n".join(
            g.paragraph()[:200]
            + "\n\n"
            + r.choice(["---", "***", "___", "=" * r.randint(20, 80), "-" * r.randint(20, 80)])
            for _ in range(r.randint(2, 4))
        )

    def dialogue() -> str:
        return "\n".join(
            f"{r.choice(['Q', 'A'])}: {g.sentence()[: r.randint(20, 80)]}" for _ in range(r.randint(8, 25))
        )

    def latex_table() -> str:
        cols = r.randint(3, 6)
        rows = [
            " & ".join(r.choice(["0", "-", "", g.number()]) for _ in range(cols)) + " \\\\ \\hline"
            for _ in range(r.randint(4, 14))
        ]
        return (
            "\\begin{tabular}{"
            + "|c" * cols
            + "|}\n\\hline\n"
            + "\n".join(rows)
            + ("\n\\end{tabular}" if r.random() < 0.5 else "")
        )

    def times_table() -> str:
        base = r.randint(2, 12)
        return "\n".join(f"{j} × {base} = {j * base}" for j in range(1, r.randint(8, 13)))

    def anaphora() -> str:
        opening = r.choice(["I have a dream that", "We shall fight", "Remember when", "It was the time of", "Because"])
        return "\n".join(f"{opening} {g.sentence()[: r.randint(20, 70)]}" for _ in range(r.randint(4, 12)))

    def chess() -> str:
        pieces = [
            "e4",
            "e5",
            "Nf3",
            "Nc6",
            "Bb5",
            "a6",
            "Ba4",
            "Nf6",
            "O-O",
            "Be7",
            "Re1",
            "b5",
            "Bb3",
            "d6",
            "c3",
            "O-O",
            "h3",
            "Nb8",
            "d4",
            "Nbd7",
        ]
        return " ".join(
            f"{j + 1}. {pieces[(2 * j) % len(pieces)]} {pieces[(2 * j + 1) % len(pieces)]}"
            for j in range(r.randint(10, 40))
        )

    def timetable() -> str:
        stop = r.choice(["Central Station", "Market Square", "Airport", "Harbour"])
        hour, minute = r.randint(5, 8), 0
        lines = []
        for _ in range(r.randint(8, 30)):
            minute += r.choice([10, 15, 20, 30])
            hour, minute = hour + minute // 60, minute % 60
            lines.append(
                f"| {hour:02d}:{minute:02d} | {stop} | {r.choice(['Platform 1', 'Platform 2', 'Platform 4'])} |"
            )
        return "| Time | Stop | Platform |\n|---|---|---|\n" + "\n".join(lines)

    def number_grid() -> str:
        cols = 10
        return "\n".join(
            "| " + " | ".join(str(row * cols + c + 1) for c in range(cols)) + " |" for row in range(r.randint(2, 5))
        )

    def scene_breaks() -> str:
        return "\n\n* * *\n\n".join(g.paragraph()[: r.randint(100, 400)] for _ in range(r.randint(2, 4)))

    def blank_sheet() -> str:
        cols = r.randint(3, 6)
        if r.random() < 0.5:
            head = (
                "| "
                + " | ".join(
                    r.sample(["Name", "Signature", "Date", "Room", "Time in", "Time out", "Initials", "Remarks"], cols)
                )
                + " |"
            )
            return head + "\n|" + "---|" * cols + "\n" + "\n".join(["|" + "  |" * cols] * r.randint(10, 25))
        head = "<tr>" + "".join(f"<th>{g.word().capitalize()}</th>" for _ in range(cols)) + "</tr>"
        nl = r.choice(["\n", ""])
        return (
            "<table>"
            + nl
            + head
            + nl
            + nl.join(["<tr>" + "<td></td>" * cols + "</tr>"] * r.randint(10, 25))
            + nl
            + "</table>"
        )

    return [
        ("blank sign-up sheet", blank_sheet),
        ("multiplication table", times_table),
        ("anaphora in a speech", anaphora),
        ("chess notation", chess),
        ("timetable", timetable),
        ("number grid", number_grid),
        ("scene breaks", scene_breaks),
        ("html table with many empty cells", empty_html_table),
        ("markdown table with many empty cells", empty_md_table),
        ("table with identical cells", identical_cells_table),
        ("html table ending in identical rows", identical_html_rows),
        ("wide table separator row", wide_separator),
        ("table of contents with dot leaders", toc),
        ("list whose lines share a prefix", prefix_list),
        ("questionnaire with a shared answer suffix", questionnaire),
        ("form with blank fields", form),
        ("numbered blank lines", numbered_blanks),
        ("repeated signature lines", signature_lines),
        ("song with a refrain", refrain),
        ("short refrain", short_refrain),
        ("running header repeated per column", running_headers),
        ("table header repeated in multi-column layout", repeated_table_headers),
        ("html multi-column table header", column_headers_html),
        ("numeric table with a year column", numeric_table),
        ("numeric html table with an index column", numeric_html),
        ("latex matrix of zeros", zero_matrix),
        ("bibliography", bibliography),
        ("ledger", ledger),
        ("checklist", checklist),
        ("code listing", code_listing),
        ("horizontal rules", hr_rules),
        ("interview transcript", dialogue),
        ("latex table with hlines", latex_table),
    ]


def make_negative(g: Gen, index: int, structures: list[tuple[str, Callable[[], str]]]) -> dict:
    note, build = structures[index % len(structures)]
    structure = build()
    body = g.body(g.size())
    if g.r.random() < 0.8:  # most end with the structure: that is where the detector looks
        text = body + "\n\n" + structure
    else:
        cut = body.find("\n\n", len(body) // 2)
        cut = cut if cut > 0 else len(body) // 2
        text = body[:cut] + "\n\n" + structure + "\n\n" + body[cut:].lstrip() + "\n\n" + g.paragraph()
        note += " (mid-page)"
    return {"id": f"neg-{index:04d}", "text": text, "label": None, "note": note}


# ---------------------------------------------------------------------- near-exact loops
#
# Made another way than the loops above and than the detector's unit tests: the text is the synth
# snippet bank (``synth/data/snippets.json``, ``snippets_zh.json``: CC0 prose written for pagemill),
# the repeated unit is a piece of that page (often its last sentence: a model loops on what it has
# just written), and each copy passes through an OCR confusion table that substitutes one or two
# characters (some copies none), including confusions that change the length (``rn``/``m``).

SNIPPETS = HERE.parents[1] / "synth" / "data"

OCR_CONFUSIONS: tuple[tuple[str, str], ...] = (
    ("rn", "m"), ("m", "rn"), ("cl", "d"), ("d", "cl"), ("li", "h"), ("h", "li"), ("vv", "w"), ("w", "vv"),
    ("l", "1"), ("1", "l"), ("l", "I"), ("I", "l"), ("i", "l"), ("l", "i"), ("O", "0"), ("0", "O"), ("o", "0"),
    ("e", "c"), ("c", "e"), ("a", "o"), ("o", "a"), ("e", "o"), ("u", "v"), ("v", "u"), ("n", "h"), ("h", "n"),
    ("t", "f"), ("f", "t"), ("S", "5"), ("5", "S"), ("B", "8"), ("g", "q"), ("y", "v"), ("s", "e"), ("fi", "ﬁ"),
    ("é", "e"), ("e", "é"), ("ri", "n"), ("in", "m"), ("nn", "m"), ("c", "o"), ("b", "h"), ("k", "lc"),
)
OCR_CONFUSIONS_ZH: tuple[tuple[str, str], ...] = (
    ("末", "未"), ("未", "末"), ("己", "已"), ("已", "己"), ("士", "土"), ("土", "士"), ("日", "曰"), ("人", "入"),
    ("入", "人"), ("天", "夭"), ("大", "太"), ("太", "大"), ("问", "间"), ("间", "问"), ("王", "玉"), ("石", "右"),
    ("右", "石"), ("鸟", "乌"), ("千", "干"), ("干", "千"), ("力", "刀"), ("的", "白"), ("在", "任"), ("们", "门"),
)


def ocr_noise(r: random.Random, text: str, edits: int) -> str:
    """``text`` with ``edits`` substitutions from the OCR confusion table at random places."""
    table = OCR_CONFUSIONS_ZH if any("\u4e00" <= c <= "\u9fff" for c in text) else OCR_CONFUSIONS
    for _ in range(edits):
        spots = [(i, a, b) for a, b in table for i in _find_all(text, a)]
        if not spots:
            break
        i, a, b = r.choice(spots)
        text = text[:i] + b + text[i + len(a):]
    return text


def _find_all(text: str, piece: str) -> list[int]:
    out, i = [], text.find(piece)
    while i >= 0:
        out.append(i)
        i = text.find(piece, i + 1)
    return out


class Bank:
    """The snippet bank as pages: paragraphs, sentences, titles."""

    def __init__(self, r: random.Random):
        self.r = r
        en = json.loads((SNIPPETS / "snippets.json").read_text(encoding="utf-8"))["snippets"]
        zh = json.loads((SNIPPETS / "snippets_zh.json").read_text(encoding="utf-8"))["snippets"]
        self.en = [(s["title"], s["text"]) for s in en]
        self.zh = [(s["title"], s["text"]) for s in zh]

    def sentences(self, text: str) -> list[str]:
        if any("\u4e00" <= c <= "\u9fff" for c in text):
            return [p + "。" for p in text.split("。") if p]
        parts = [p.strip() for p in text.replace("? ", "?|").replace(". ", ".|").split("|")]
        return [p for p in parts if p]

    def page(self, size: int, zh: bool = False) -> str:
        """Headings, paragraphs, a list or a table from the snippets, ``size`` characters or so."""
        pool = list(self.zh if zh else self.en)
        self.r.shuffle(pool)
        parts: list[str] = []
        while sum(map(len, parts)) < size:
            if not pool:
                pool = list(self.zh if zh else self.en)
                self.r.shuffle(pool)
            title, text = pool.pop()
            x = self.r.random()
            if x < 0.25:
                parts.append(f"{'#' * self.r.randint(1, 3)} {title}")
            if x < 0.12 and not zh:
                parts.append("\n".join(f"- {s}" for s in self.sentences(text)))
            elif x < 0.2 and not zh:
                words = [w.strip(".,;") for w in text.split()]
                rows = ["| " + " | ".join(self.r.sample(words, 3)) + f" | {self.r.randint(1, 999)} |"
                        for _ in range(self.r.randint(2, 6))]
                parts.append("| Item | Use | Place | Count |\n|---|---|---|---|\n" + "\n".join(rows))
            else:
                parts.append(text)
        return "\n\n".join(parts)


def near_units(bank: Bank, body: str, zh: bool) -> list[tuple[str, str, str]]:
    """(note, unit, lead) candidates: what a model repeats, from the page it is writing."""
    r = bank.r
    title, text = r.choice(bank.zh if zh else bank.en)
    sentence = r.choice(bank.sentences(text))
    last = bank.sentences(body.rsplit("\n", 1)[-1].strip())
    if zh:
        return [
            ("cjk sentence", sentence, ""),
            ("cjk clause", sentence[: r.randint(8, 20)] + "，", ""),
            ("last sentence of the page (cjk)", last[-1] if last else sentence, ""),
        ]
    words = text.split()
    start = r.randrange(max(1, len(words) - 8))
    clause = " ".join(words[start: start + r.randint(3, 8)]).rstrip(".,;")
    cells = [w.strip(".,;") for w in r.sample(words, 3)]
    return [
        ("last sentence of the page", (last[-1] if last else sentence) + " ", ""),
        ("sentence", sentence + r.choice([" ", "\n", "\n\n"]), ""),
        ("clause", clause + r.choice([", ", " ", "; "]), ""),
        ("heading", f"## {title}\n\n", "\n\n"),
        ("list item", f"- {sentence}\n", "\n\n"),
        ("paragraph", text + "\n\n", "\n\n"),
        ("markdown table row", "| " + " | ".join(cells) + " |\n", "\n\n| Item | Use | Place |\n|---|---|---|\n"),
        ("html table row", "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>\n",
         "\n\n<table>\n<tr><th>Item</th><th>Use</th><th>Place</th></tr>\n"),
    ]


def make_near(bank: Bank, index: int) -> dict:
    """Copies of a unit back to back, each with 0-2 OCR substitutions, to the end of the label."""
    r = bank.r
    zh = r.random() < 0.12
    body = bank.page(int(2 ** r.uniform(11, 12.9)), zh)
    note, unit, lead = r.choice(near_units(bank, body, zh))
    g = Gen(r)
    length = loop_length(g, len(unit))
    copies: list[str] = []
    while sum(map(len, copies)) < length or len(copies) < 3:
        copies.append(ocr_noise(r, unit, r.choices([0, 1, 2], [10, 50, 40])[0]))
    loop = "".join(copies)
    cut = r.random() < 0.3
    if cut:  # cut inside the last copy: still a near-exact loop
        loop = loop[: len(loop) - r.randint(1, max(1, len(copies[-1]) - 1))]
    return {
        "id": f"loop-near-{index:04d}",
        "text": body + (lead or r.choice([" ", "\n", "\n\n"])) + loop,
        "label": "near",
        "note": f"{note} x{len(copies)}{' cut inside the last copy' if cut else ''}",
    }


def near_negative_structures(bank: Bank) -> list[tuple[str, Callable[[], str]]]:
    """Legitimate near-repeats: lines that differ in one slot, and OCR-noisy refrains and headers."""
    r = bank.r

    def sentence() -> str:
        return r.choice(bank.sentences(r.choice(bank.en)[1]))

    def lettered() -> str:
        item = r.choice(["Not applicable.", "See the note above.", "No change from the previous year.",
                         "Reserved.", "Deleted by amendment."])
        style = r.choice(["({})", "{})", "{}.", "Annex {}:"])
        letters = "abcdefghijklmnopqrstuvwxyz" if "Annex" not in style else "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        return "\n".join(f"{style.format(c)} {item}" for c in letters[: r.randint(8, 26)])

    def one_word_varies() -> str:
        words = r.choice([["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
                          ["north", "south", "east", "west", "upper", "lower"],
                          ["red", "blue", "green", "black", "white", "grey", "brown"]])
        frame = sentence().split()
        slot = r.randrange(len(frame))
        values = [r.choice(words)]
        for _ in range(r.randint(8, 30)):  # no two lines alike in a row: that would be a loop
            values.append(r.choice([w for w in words if w != values[-1]]))
        return "\n".join(" ".join(frame[:slot] + [v] + frame[slot + 1:]) for v in values)

    def weekday_table() -> str:
        place = r.choice(["Market Square", "North Gate", "Harbour Office"])
        return "| Day | Place | Hours |\n|---|---|---|\n" + "\n".join(
            f"| {d} | {place} | closed |" for d in
            ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"] * r.randint(1, 3))

    def noisy_refrain() -> str:
        chorus = " ".join(sentence() for _ in range(2))
        parts = []
        for _ in range(r.randint(2, 4)):
            parts.append(sentence())
            parts.append(ocr_noise(r, chorus, r.randint(1, 2)))
        return "\n\n".join(parts)

    def noisy_running_header() -> str:
        header = r.choice(["JOURNAL OF FIELD NOTES", "Annual Report of the Harbour Board", "THE WEEKLY COURIER"])
        return "\n\n".join(ocr_noise(r, header, r.randint(1, 2)) + "\n\n" + r.choice(bank.en)[1]
                           for _ in range(r.randint(3, 5)))

    def noisy_prose() -> str:
        return "\n\n".join(ocr_noise(r, r.choice(bank.en)[1], r.randint(2, 8)) for _ in range(r.randint(2, 5)))

    def noisy_form() -> str:
        fields = ["Name", "Address", "Parish", "Occupation", "Date of birth", "Signature", "Witness", "Date"]
        return "\n".join(ocr_noise(r, f"{f}: " + "_" * 30, r.randint(0, 1)) for f in fields)

    def noisy_table_headers() -> str:
        head = "| Name | Parish | Name | Parish |\n|---|---|---|---|"
        rows = [f"| {r.choice(NAMES)} | {r.choice(['St Mary', 'St John', 'Holy Cross'])} | {r.choice(NAMES)} | "
                f"{r.choice(['St Mary', 'St John', 'Holy Cross'])} |" for _ in range(r.randint(6, 20))]
        return ocr_noise(r, head, 1) + "\n" + "\n".join(ocr_noise(r, row, r.randint(0, 1)) for row in rows)

    return [
        ("lettered items with the same text", lettered),
        ("lines differing in one word", one_word_varies),
        ("weekday table with the same hours", weekday_table),
        ("refrain with ocr noise", noisy_refrain),
        ("running header with ocr noise", noisy_running_header),
        ("prose with ocr noise", noisy_prose),
        ("form with ocr noise", noisy_form),
        ("repeated table header with ocr noise", noisy_table_headers),
    ]


def make_near_negative(bank: Bank, index: int, structures: list[tuple[str, Callable[[], str]]]) -> dict:
    note, structure = structures[index % len(structures)]
    text = bank.page(int(2 ** bank.r.uniform(11, 12.9))) + "\n\n" + structure()
    return {"id": f"neg-near-{index:04d}", "text": text, "label": None, "note": note}


def build(
    seed: int, n_exact: int = 110, n_truncated: int = 105, n_gapped: int = 110, n_negative: int = 320,
    n_near: int = 120, n_near_negative: int = 96,
) -> list[dict]:
    g = Gen(random.Random(seed))
    items: list[dict] = []
    for i in range(n_exact):
        items.append(make_exact(g, False, i))
    for i in range(n_truncated):
        items.append(make_exact(g, True, i))
    made = 0
    while made < n_gapped:
        item = make_gapped(g, made)
        if exact_periodic_suffix(item["text"][-1100:]):
            continue  # the raw text ends in exact copies: not a gapped case
        items.append(item)
        made += 1
    structures = negative_structures(g)
    for i in range(n_negative):
        items.append(make_negative(g, i, structures))
    # near-exact loops and their negatives draw from their own generator, so the items above stay
    # what they were before this kind was added
    bank = Bank(random.Random(seed + 1))
    made = 0
    while made < n_near:
        item = make_near(bank, made)
        if exact_periodic_suffix(item["text"][-1100:]):
            continue  # no copy carried an edit at the end: an exact loop, not a near-exact one
        items.append(item)
        made += 1
    near_structures = near_negative_structures(bank)
    for i in range(n_near_negative):
        items.append(make_near_negative(bank, i, near_structures))
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=20240604)
    parser.add_argument("--output", type=Path, default=HERE / "repeat_loops.jsonl")
    args = parser.parse_args(argv)
    items = build(args.seed)
    with open(args.output, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for item in items:
        counts[str(item["label"])] = counts.get(str(item["label"]), 0) + 1
    print(f"wrote {len(items)} items to {args.output} ({args.output.stat().st_size / 1e6:.2f} MB): {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
