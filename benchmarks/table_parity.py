"""Agreement of pagemill's ``table`` unit test with olmOCR-Bench's own code, run as the reference.

    git --git-dir=<mirror of allenai/olmocr> archive HEAD olmocr | tar x -C /tmp/olmocr_ref
    python benchmarks/table_parity.py --olmocr /tmp/olmocr_ref [--docs 600] [--seed 0] [--show 5]

``--olmocr`` is a folder holding olmOCR's ``olmocr`` package (its ``bench/tests.py`` must import:
it needs ``bs4``, ``rapidfuzz``, ``fuzzysearch``, ``tqdm`` and ``playwright`` installed; nothing is
rendered). Three measurements:

1. **Parse structure.** Seeded documents (Markdown pipe tables written with OCR-like damage: no
   separator row, separators in odd places, missing outer pipes, ragged rows, ``\\|`` escapes,
   pipes in prose, CRLF, tabs; HTML tables with spans, ``rowspan="0"``, ``<br>``, entities, and a
   damaged share: unclosed cells, nested tables, cells outside ``<tr>``) are parsed by both. For
   every table: each cell's normalised text, whether it is a heading, its up/down/left/right
   neighbours and its top/left heading walks. A document agrees when every table agrees.
2. **Test outcomes.** On the same documents, ``table`` tests drawn from olmOCR's parse (true and
   false neighbours and headings, typos with ``max_diffs``, ``ignore_markdown_tables``) run through
   both ``TableTest``s; the figure is the share of equal pass/fail outcomes.
3. **olmOCR's sample data.** The ``table`` tests of ``olmocr/bench/sample_data/dataset.jsonl`` on
   the olmOCR pipeline's transcriptions, as given and with their separator rows (then also their
   outer pipes) removed.

The generators are written from the formats, not from either parser, and are not the hand-made
cases of ``tests/schemas/test_tables.py``. Prints agreement per kind and the first ``--show``
disagreements of each; exits 1 if a clean (undamaged) kind disagrees anywhere.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schemas.table_unit_tests import TableTest, _html_table_views, _markdown_table_views  # noqa: E402
from schemas.text import normalize_text  # noqa: E402

WORDS = ("Total", "2023", "2024", "n/a", "12.5", "Revenue", "Model", "**Score**", "_mean_", "a b", "±0.4", "—",
         "x", "Δ", "95%", "cost", "Q1", "*net* sales", "3,423", "$138", "季度", "")
PIPE_WORDS = ("x \\| y", "$|x|$", "`a|b`")
SEPARATOR_CELLS = ("---", ":---", "---:", ":-:", "-", " - ", "----------")


# ------------------------------------------------------------------------------------- Markdown


def _md_line(rng: random.Random, cells: list[str], outer: str) -> str:
    pad = rng.choice((" ", " ", "", "  ", "\t", "\u00a0"))
    body = f"{pad}|{pad}".join(cells)
    left = f"|{pad}" if outer in ("both", "left") else ""
    right = f"{pad}|" if outer in ("both", "right") else ""
    return rng.choice(("", "", " ", "  ")) + left + body + right + rng.choice(("", "", " ", "\t"))


def md_table(rng: random.Random) -> str:
    n_rows, n_cols = rng.randint(1, 7), rng.randint(1, 6)
    outer = rng.choice(("both", "both", "both", "none", "left", "right"))
    lines = []
    for _ in range(n_rows):
        width = n_cols
        if rng.random() < 0.2:  # ragged: a row one cell short or long
            width = max(1, n_cols + rng.choice((-1, 1, -2)))
        cells = [rng.choice(WORDS) for _ in range(width)]
        if rng.random() < 0.1:
            cells[rng.randrange(width)] = rng.choice(PIPE_WORDS)
        lines.append(_md_line(rng, cells, outer if rng.random() < 0.9 else rng.choice(("both", "none"))))
    sep = _md_line(rng, [rng.choice(SEPARATOR_CELLS) for _ in range(n_cols)], outer)
    where = rng.random()
    if where < 0.55:
        lines.insert(1, sep)
    elif where < 0.65:
        lines.insert(rng.randint(0, len(lines)), sep)
    elif where < 0.7:
        lines[1:1] = [sep, sep]
    elif where < 0.75:
        lines.insert(1, rng.choice(("|===|===|", "| |", "||", "|  |  |", "| -- | x |", "|:|:|", "| : |")))
    # else: no separator at all, as OCR output often has it
    return "\n".join(lines)


def md_doc(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.7:
            parts.append(rng.choice(("Intro text.", "Revenue | costs are shown below.", "A line with no pipe",
                                     "# Heading", "- item one", "Note: see table.")))
        parts.append(md_table(rng))
    joiner = rng.choice(("\n\n", "\n\n", "\n", "\n\n\n"))
    text = joiner.join(parts)
    if rng.random() < 0.1:
        text = text.replace("\n", "\r\n")
    return rng.choice(("", "\n", "  \n")) + text + rng.choice(("", "\n", "\n\n  "))


# ----------------------------------------------------------------------------------------- HTML

HTML_WORDS = ("Total", "2023", "a&amp;b", "x&nbsp;y", "<b>bold</b>", "line<br>break", "two\nlines", "12.5", "Q1",
              "*a\nb*", "&lt;5", "  spaced  ", "", "Δ")


def html_table(rng: random.Random, damaged: bool) -> str:
    n_rows = rng.randint(1, 6)
    out = ["<table>"]
    head = rng.random() < 0.5
    for r in range(n_rows):
        if r == 0 and head:
            out.append("<thead>")
        if r == 1 and head:
            out.append("</thead><tbody>")
        out.append("<tr>")
        for _ in range(rng.randint(1, 5)):
            tag = "th" if (r == 0 and head and rng.random() < 0.8) or rng.random() < 0.1 else "td"
            attrs = ""
            if rng.random() < 0.2:
                attrs += f' rowspan="{rng.choice((2, 3, "0", " 2 ", "x"))}"'
            if rng.random() < 0.2:
                attrs += f" colspan={rng.choice((2, 3))}"
            text = rng.choice(HTML_WORDS)
            close = f"</{tag}>" if not (damaged and rng.random() < 0.15) else ""
            out.append(f"<{tag}{attrs}>{text}{close}")
        out.append("</tr>" if not (damaged and rng.random() < 0.15) else "")
    if head and n_rows > 1:
        out.append("</tbody>")
    elif head:
        out.append("</thead>")
    out.append("</table>")
    if damaged and rng.random() < 0.3:  # a nested table in some cell
        i = rng.choice([k for k, s in enumerate(out) if s.startswith("<td") or s.startswith("<th")] or [0])
        out.insert(i + 1, "<table><tr><td>in</td><td>ner</td></tr></table>")
    if damaged and rng.random() < 0.2:
        out.insert(1, "<td>stray</td>")
    return "\n".join(out)


def html_doc(rng: random.Random, damaged: bool) -> str:
    return "\n\n".join(rng.choice(("Some text.", html_table(rng, damaged))) for _ in range(rng.randint(1, 3))) + (
        "\n\n" + html_table(rng, damaged))


# ---------------------------------------------------------------------------------- comparisons


def _olm_signature(tables) -> list:
    sig = []
    for t in tables:
        rows = []
        for pos in sorted(t.cell_text):
            rows.append((pos, normalize_text(t.cell_text[pos]), pos in t.heading_cells,
                         sorted(t.up_relations[pos]), sorted(t.down_relations[pos]), sorted(t.left_relations[pos]),
                         sorted(t.right_relations[pos]), sorted(t.top_heading_relations(*pos)),
                         sorted(t.left_heading_relations(*pos))))
        sig.append(rows)
    return sig


def _our_signature(views) -> list:
    sig = []
    for v in views:
        rows = []
        for pos in sorted(v.cells):
            rows.append((pos, v.text[pos], pos in v.headings,
                         sorted(v.neighbours("up", pos)), sorted(v.neighbours("down", pos)),
                         sorted(v.neighbours("left", pos)), sorted(v.neighbours("right", pos)),
                         sorted(v.heading_cells("up", pos)), sorted(v.heading_cells("left", pos))))
        sig.append(rows)
    return sig


def _typo(rng: random.Random, text: str) -> str:
    if len(text) < 2:
        return text
    i = rng.randrange(len(text))
    return text[:i] + rng.choice("xz0") + text[i + 1:]


def draw_tests(rng: random.Random, doc: str, olm_tables, n: int) -> list[dict]:
    """``table`` test fields drawn from olmOCR's own parse of ``doc``: true and false relations."""
    tests: list[dict] = []
    tables = [t for t in olm_tables if t.cell_text]
    for _ in range(n if tables else 0):
        t = rng.choice(tables)
        pos = rng.choice(sorted(t.cell_text))
        every = [s for s in t.cell_text.values() if s]
        test: dict = {"cell": t.cell_text[pos], "max_diffs": 0}
        if rng.random() < 0.2:
            test["cell"], test["max_diffs"] = _typo(rng, test["cell"]), rng.choice((1, 2))
        related = {"up": t.up_relations[pos], "down": t.down_relations[pos], "left": t.left_relations[pos],
                   "right": t.right_relations[pos], "top_heading": t.top_heading_relations(*pos),
                   "left_heading": t.left_heading_relations(*pos)}
        for name, others in related.items():
            if rng.random() < 0.3:
                true = [t.cell_text[o] for o in others if t.cell_text[o]]
                pool = true if true and rng.random() < 0.7 else every
                if pool:
                    test[name] = rng.choice(pool)
        if rng.random() < 0.15:
            test["ignore_markdown_tables"] = True
        tests.append(test)
    return tests


def run_pair(olm_cls, fields: dict, doc: str) -> tuple[bool | None, bool | None]:
    """(olmOCR outcome, ours); None where that side rejects the test as invalid."""
    base = {"pdf": "doc.pdf", "page": 1, "id": "t", "type": "table"}
    try:
        ref_test = olm_cls(**base, **fields)
    except Exception:
        ref = None
    else:
        try:
            ref = ref_test.run(doc)[0]
        except IndexError:  # olmOCR's benchmark counts a test that raises as failed
            ref = False
    try:
        ours = TableTest(**base, **fields).check(doc)[0]
    except ValueError:
        ours = None
    return ref, ours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--olmocr", type=Path, required=True, help="folder holding olmOCR's olmocr package")
    parser.add_argument("--docs", type=int, default=600, help="documents per kind")
    parser.add_argument("--tests-per-doc", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=3, help="disagreements printed per kind")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.olmocr.resolve()))
    from olmocr.bench.table_parsing import parse_html_tables, parse_markdown_tables
    from olmocr.bench.tests import TableTest as OlmTableTest

    rng = random.Random(args.seed)
    kinds = {
        "markdown": lambda: md_doc(rng),
        "html": lambda: html_doc(rng, damaged=False),
        "html-damaged": lambda: html_doc(rng, damaged=True),
        "mixed": lambda: md_doc(rng) + "\n\n" + html_doc(rng, damaged=False),
    }
    failed = False
    print(f"{'kind':<14} {'docs':>5} {'raises':>6} {'structure':>10} {'tests':>6} {'outcomes':>9}  "
          "rejected (both/ours/olmOCR)")
    for kind, make in kinds.items():
        same_docs = raised = 0
        outcomes = Counter()
        shown: list[str] = []
        for _ in range(args.docs):
            doc = make()
            olm_md = parse_markdown_tables(doc)
            ours_html = _html_table_views(doc)
            try:
                olm_html = parse_html_tables(doc)
                ok = (_olm_signature(olm_md) == _our_signature(_markdown_table_views(doc))
                      and _olm_signature(olm_html) == _our_signature(ours_html))
            except IndexError:  # olmOCR's parser raises on a rowspan cut short; ours must flag the table
                olm_html, ok = [], any(v.reference_raises for v in ours_html)
                raised += 1
            same_docs += ok
            if not ok and len(shown) < args.show:
                shown.append(f"structure differs on {doc!r}")
            for fields in draw_tests(rng, doc, olm_md + olm_html, args.tests_per_doc):
                ref, ours = run_pair(OlmTableTest, fields, doc)
                if ref is None or ours is None:
                    outcomes["rejected by both" if ref is ours else "rejected by ours only" if ours is None
                             else "rejected by olmOCR only"] += 1
                    continue
                outcomes["same" if ref == ours else "differs"] += 1
                if ref != ours and len(shown) < 2 * args.show:
                    shown.append(f"outcome olmOCR={ref} ours={ours} for {fields} on {doc!r}")
        n_tests = outcomes["same"] + outcomes["differs"]
        invalid = "/".join(str(outcomes[f"rejected by {w}"]) for w in ("both", "ours only", "olmOCR only"))
        print(f"{kind:<14} {args.docs:>5} {raised:>6} {same_docs / args.docs:>10.2%} {n_tests:>6} "
              f"{outcomes['same'] / max(1, n_tests):>9.2%}  {invalid}")
        for line in shown:
            print("    " + line[:400])
        if kind != "html-damaged" and (same_docs < args.docs or outcomes["differs"]):
            failed = True

    sample = args.olmocr / "olmocr" / "bench" / "sample_data"
    tests = [json.loads(line) for line in (sample / "dataset.jsonl").read_text().splitlines() if line.strip()]
    tests = [t for t in tests if t["type"] == "table"]
    separator = re.compile(r"^\s*\|?[\s:|-]*-[\s:|-]*\|?\s*$", re.M)
    variants = {
        "as given": lambda md: md,
        "no separator": lambda md: separator.sub("", md).replace("\n\n|", "\n|"),
        "no separator, no outer pipes": lambda md: re.sub(r"^\| ?| ?\|$", "", separator.sub("", md),
                                                          flags=re.M).replace("\n\n", "\n"),
    }
    print(f"\nolmOCR sample data: {len(tests)} table tests on the olmocr_pipeline transcriptions")
    for name, change in variants.items():
        same, passes = 0, Counter()
        for t in tests:
            md_path = sample / "olmocr_pipeline" / (Path(t["pdf"]).stem + f"_pg{t['page']}_repeat1.md")
            doc = change(md_path.read_text())
            fields = {k: v for k, v in t.items() if k not in ("pdf", "page", "id", "type")}
            ref, ours = run_pair(OlmTableTest, fields, doc)
            same += ref == ours
            passes["olmOCR"] += bool(ref)
            passes["ours"] += bool(ours)
        print(f"  {name:<30} agree {same}/{len(tests)}   pass: olmOCR {passes['olmOCR']}, ours {passes['ours']}")
        failed |= same != len(tests)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
