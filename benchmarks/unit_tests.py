"""Throughput of the unit-test checks (``schemas/unit_tests.py``): checks per second, one process.

Generates ~8 KB Markdown pages (headings, bold/italic, footnotes, an HTML table with spans and a
Markdown table) and a mix of non-math tests drawn from each page (present/absent with and without
edits, order, table, format, footnote, baseline), then runs every test on its page, page by page as
``schemas.bench`` does (so per-page caches count as they would in a real run).

    python benchmarks/unit_tests.py [--tests 5000] [--page-bytes 8000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import string
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from schemas.unit_tests import (
    BaselineTest,
    FootnoteTest,
    FormatTest,
    OrderTest,
    PresenceTest,
    TableTest,
    UnitTest,
)


def _words(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 10))) for _ in range(n)]


def make_page(rng: random.Random, vocab: list[str], size: int) -> tuple[str, dict]:
    """One page of Markdown plus the facts tests are drawn from."""
    parts: list[str] = []
    facts: dict = {"sentences": [], "bold": [], "italic": [], "headings": [], "footnotes": []}
    title = " ".join(rng.choices(vocab, k=4)).title()
    parts.append(f"# {title}\n")
    facts["headings"].append(title)

    rows, cols = 6, 5
    head = [f"H{c} {rng.choice(vocab)}" for c in range(cols)]
    html = ["<table><thead><tr>"] + [f"<th>{h}</th>" for h in head] + ["</tr></thead>"]
    grid = []
    for r in range(rows):
        cells = [f"{rng.choice(vocab)} {rng.randint(0, 999)}" for _ in range(cols)]
        grid.append(cells)
        if r == 0:
            html.append(f'<tr><td rowspan="2">{cells[0]}</td>' + "".join(f"<td>{c}</td>" for c in cells[1:]) + "</tr>")
        elif r == 1:
            html.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells[1:]) + "</tr>")
        else:
            html.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    html.append("</table>")
    md_header = [f"K{c}" for c in range(4)]
    md_rows = [[f"{rng.choice(vocab)}{r}{c}" for c in range(4)] for r in range(4)]
    md_table = ["| " + " | ".join(md_header) + " |", "|---|---|---|---|"]
    md_table += ["| " + " | ".join(r) + " |" for r in md_rows]
    facts["html"], facts["html_head"], facts["md"] = grid, head, (md_header, md_rows)

    body_budget = size - len("\n".join(html)) - len("\n".join(md_table))
    paragraphs = []
    used = 0
    marker = 1
    while used < body_budget:
        sentences = []
        for _ in range(rng.randint(3, 6)):
            words = rng.choices(vocab, k=rng.randint(6, 16))
            sentence = " ".join(words).capitalize() + "."
            facts["sentences"].append(sentence)
            if rng.random() < 0.2:
                span = " ".join(words[1:3])
                facts["bold"].append(span)
                sentence = sentence.replace(span, f"**{span}**", 1)
            elif rng.random() < 0.2:
                span = " ".join(words[2:4])
                facts["italic"].append(span)
                sentence = sentence.replace(span, f"*{span}*", 1)
            if rng.random() < 0.05:
                facts["footnotes"].append((str(marker), sentence.rstrip(".")[-20:]))
                sentence = sentence.rstrip(".") + f"[^{marker}]."
                marker += 1
            sentences.append(sentence)
        paragraph = " ".join(sentences)
        if rng.random() < 0.15:
            heading = " ".join(rng.choices(vocab, k=3)).title()
            facts["headings"].append(heading)
            paragraph = f"## {heading}\n\n{paragraph}"
        paragraphs.append(paragraph)
        used += len(paragraph) + 2
    half = len(paragraphs) // 2
    footnotes = [f"[^{m}]: Note {m} {rng.choice(vocab)}." for m, _ in facts["footnotes"]]
    blocks = parts + paragraphs[:half] + ["\n".join(html)] + paragraphs[half:] + ["\n".join(md_table)] + footnotes
    page = "\n\n".join(blocks)
    return page, facts


def _typo(rng: random.Random, text: str) -> str:
    i = rng.randrange(len(text))
    return text[:i] + rng.choice(string.ascii_lowercase) + text[i + 1:]


def make_tests(rng: random.Random, pdf: str, facts: dict, vocab: list[str], n: int) -> list[UnitTest]:
    tests: list[UnitTest] = [BaselineTest(pdf=pdf, page=1, id=f"{pdf}-baseline")]
    sentences = facts["sentences"]
    k = 0
    while len(tests) < n:
        k += 1
        tid = f"{pdf}-{k}"
        kind = rng.choice(["present", "present", "absent", "order", "order", "table", "table", "format", "footnote"])
        s = rng.choice(sentences)
        if kind == "present":
            words = s.split()
            start = rng.randrange(max(1, len(words) - 4))
            text = " ".join(words[start:start + rng.randint(2, 5)])
            diffs = rng.choice([0, 0, 1, 2]) if len(text) > 8 else 0
            tests.append(PresenceTest(pdf=pdf, page=1, id=tid, type="present", max_diffs=diffs,
                                      text=_typo(rng, text) if diffs else text, case_sensitive=rng.random() < 0.8,
                                      first_n=rng.choice([None] * 8 + [2000]), last_n=rng.choice([None] * 8 + [2000])))
        elif kind == "absent":
            text = " ".join(rng.choices(vocab, k=3))
            tests.append(PresenceTest(pdf=pdf, page=1, id=tid, type="absent", text=text, max_diffs=rng.choice([0, 1])))
        elif kind == "order":
            a, b = sorted(rng.sample(range(len(sentences)), 2))
            before, after = sentences[a], sentences[b]
            diffs = round(0.02 * max(len(before), len(after)))
            tests.append(OrderTest(pdf=pdf, page=1, id=tid, type="order", before=before, after=after, max_diffs=diffs))
        elif kind == "table":
            if rng.random() < 0.6:
                grid = facts["html"]
                r, c = rng.randrange(2, len(grid)), rng.randrange(1, len(grid[0]) - 1)
                tests.append(TableTest(pdf=pdf, page=1, id=tid, type="table", cell=grid[r][c], up=grid[r - 1][c],
                                       right=grid[r][c + 1], top_heading=rng.choice(["", facts["html_head"][c]]),
                                       ignore_markdown_tables=True))
            else:
                header, rows = facts["md"]
                r, c = rng.randrange(1, len(rows)), rng.randrange(1, len(header))
                tests.append(TableTest(pdf=pdf, page=1, id=tid, type="table", cell=rows[r][c], left=rows[r][c - 1],
                                       top_heading=header[c], left_heading=rows[r][0], max_diffs=rng.choice([0, 1])))
        elif kind == "format":
            options = [("bold", facts["bold"]), ("italic", facts["italic"]), ("heading", facts["headings"])]
            fmt, spans = rng.choice([o for o in options if o[1]])
            tests.append(FormatTest(pdf=pdf, page=1, id=tid, type="format", format=fmt, text=rng.choice(spans)))
        elif kind == "footnote" and facts["footnotes"]:
            marker, before = rng.choice(facts["footnotes"])
            tests.append(FootnoteTest(pdf=pdf, page=1, id=tid, type="footnote", marker=marker,
                                      appears_before_marker=before.strip() or None))
    return tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=5000, help="number of tests (default 5000)")
    parser.add_argument("--per-page", type=int, default=20, help="tests per page (default 20)")
    parser.add_argument("--page-bytes", type=int, default=8000, help="approximate page size (default 8000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    vocab = _words(rng, 5000)
    pages: list[tuple[str, list[UnitTest]]] = []
    total = 0
    while total < args.tests:
        pdf = f"doc{len(pages):05d}.pdf"
        page, facts = make_page(rng, vocab, args.page_bytes)
        tests = make_tests(rng, pdf, facts, vocab, min(args.per_page, args.tests - total))
        pages.append((page, tests))
        total += len(tests)
    mean_bytes = sum(len(p.encode()) for p, _ in pages) / len(pages)

    per_type_time: dict[str, float] = defaultdict(float)
    per_type_count: dict[str, int] = defaultdict(int)
    per_type_pass: dict[str, int] = defaultdict(int)
    clock = time.perf_counter
    start = clock()
    for page, tests in pages:
        for test in tests:
            t0 = clock()
            passed, _ = test.check(page)
            per_type_time[test.type] += clock() - t0
            per_type_count[test.type] += 1
            per_type_pass[test.type] += passed
    elapsed = clock() - start

    print(f"{total} checks over {len(pages)} pages (mean {mean_bytes / 1000:.1f} KB), one process")
    print(f"{'type':<10} {'checks':>7} {'passed':>7} {'us/check':>9}")
    for kind in sorted(per_type_count):
        n = per_type_count[kind]
        print(f"{kind:<10} {n:>7} {per_type_pass[kind]:>7} {1e6 * per_type_time[kind] / n:>9.1f}")
    print(f"total: {elapsed:.2f} s, {total / elapsed:,.0f} checks/s (target >= 2,000/s per core)")


if __name__ == "__main__":
    main()
