"""Do a synthetic page's tests catch edits that change its content? ``python benchmarks/synth_edits.py
[--pages 48] [--seed 0] [--latex-pages 12] [--latex-seed 1] [--language en] [--out DIR] [--reuse]``.

Renders pages with ``python -m synth`` (HTML, and LaTeX when ``--latex-pages`` > 0), loads each page's
reference Markdown and its tests from ``bench_data``, and edits the reference, one edit per kind and page
(RNG seeded by ``--edit-seed``, the page id and the kind):

* content-changing edits, which a page's tests should catch (some test fails):
  ``swap_sentences`` (two adjacent sentences of one paragraph), ``delete_sentence`` (one sentence of a
  paragraph, list item or caption; the paragraph when it was its only sentence), ``swap_paragraphs`` (two
  text paragraphs), ``change_number_in_prose`` (a 1-2 digit number of a paragraph, list item or caption,
  outside math and footnote markers, changed to another), and, for the record, ``duplicate_sentence`` and
  ``repeat_first_heading_at_end``, which no olmOCR-Bench test type can catch (nothing counts occurrences);
* content-preserving edits, which should fail no test: whitespace, line ends, NFD, NBSP, typographic
  quotes, apostrophes as ``&#39;``, doubled blank lines, math delimiters padded.

Prints, per content-changing kind, caught/applicable (pages where the edit applies and at least one test
fails), reference failures (tests failing on their own reference), tests per page (mean, max, by type)
and, per content-preserving edit, the tests it fails. ``--reuse`` keeps pages already rendered in
``--out`` (their tests are then those of the code that rendered them).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import subprocess
import sys
import tempfile
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from schemas.unit_tests import UnitTest, check_all, load_tests  # noqa: E402

CHANGING = ("swap_sentences", "delete_sentence", "swap_paragraphs", "change_number_in_prose",
            "duplicate_sentence", "repeat_first_heading_at_end")
UNCATCHABLE = ("duplicate_sentence", "repeat_first_heading_at_end")

_INLINE_MATH = re.compile(r"\\\(.+?\\\)", re.S)
_MARKER = re.compile(r"\[\^[^\]\s]+\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？])")
_LIST_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
_SMALL_NUMBER = re.compile(r"(?<![\w.,])\d{1,2}(?![\w]|[.,]\d)")


# ---------------------------------------------------------------- rendering and loading
def render(out: Path, pages: int, seed: int, renderer: str, language: str) -> None:
    cmd = [sys.executable, "-m", "synth", "--pages", str(pages), "--seed", str(seed), "--out", str(out),
           "--renderer", renderer, "--language", language]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def load_pages(out: Path) -> dict[str, tuple[str, list[UnitTest]]]:
    by_pdf: dict[str, list[UnitTest]] = defaultdict(list)
    for path in sorted((out / "bench_data").glob("*.jsonl")):
        for test in load_tests(path):
            by_pdf[test.pdf].append(test)
    return {Path(pdf).stem: ((out / "reference" / f"{Path(pdf).stem}.md").read_text(encoding="utf-8"), tests)
            for pdf, tests in sorted(by_pdf.items())}


# ---------------------------------------------------------------- the reference's text units
def _is_text_paragraph(par: str) -> bool:
    head = par.lstrip()
    return bool(head) and not head.startswith(("#", "<", "|", "\\[", "[^", "```", "!["))


def _masked(text: str) -> str:
    """``text`` with inline math and footnote markers replaced by NULs of the same length (offsets kept)."""
    for pattern in (_INLINE_MATH, _MARKER):
        text = pattern.sub(lambda m: "\0" * len(m.group()), text)
    return text


def text_spans(md: str) -> list[list[tuple[int, int]]]:
    """Per text unit (a paragraph, each item of a list), its sentences as (start, end) offsets into ``md``."""
    units: list[list[tuple[int, int]]] = []
    pos = 0
    for par in md.split("\n\n"):
        start = pos
        pos += len(par) + 2
        if not _is_text_paragraph(par):
            continue
        lines = par.rstrip("\n").split("\n")
        if all(_LIST_ITEM.match(line) for line in lines):
            off = start
            for line in lines:
                m = _LIST_ITEM.match(line)
                units.append([(off + m.end(), off + len(line))])
                off += len(line) + 1
            continue
        masked = _masked(par)
        sents, last = [], 0
        for m in _SENTENCE_END.finditer(masked):
            sents.append((start + last, start + m.start()))
            last = m.end()
        sents.append((start + last, start + len(par.rstrip())))
        units.append([(a, b) for a, b in sents if b > a])
    return [u for u in units if u]


def _has_words(md: str, span: tuple[int, int]) -> bool:
    text = md[span[0]:span[1]]
    return len(text) >= 20 and sum(ch.isalpha() for ch in _masked(text)) >= 10


# ---------------------------------------------------------------- content-changing edits
def changing_edits(md: str, rng: random.Random) -> dict[str, str]:
    units = text_spans(md)
    out: dict[str, str] = {}
    pairs = [(u[k], u[k + 1]) for u in units if len(u) >= 2 for k in range(len(u) - 1)
             if _has_words(md, u[k]) and _has_words(md, u[k + 1])
             and md[u[k][0]:u[k][1]] != md[u[k + 1][0]:u[k + 1][1]]]
    if pairs:
        (a0, a1), (b0, b1) = rng.choice(pairs)
        out["swap_sentences"] = md[:a0] + md[b0:b1] + md[a1:b0] + md[a0:a1] + md[b1:]
    sentences = [(s, len(u)) for u in units for s in u if _has_words(md, s)]
    if sentences:
        (s0, s1), n = rng.choice(sentences)
        if n == 1:  # the unit's only sentence: the unit goes (with its line or paragraph break)
            end = s1 + (1 if md[s1:s1 + 1] == "\n" else 0)
            out["delete_sentence"] = md[:s0] + md[end:] if md[s1:s1 + 2] != "\n\n" else md[:s0] + md[s1 + 2:]
        else:
            end = s1
            while end < len(md) and md[end] == " ":
                end += 1
            out["delete_sentence"] = md[:s0] + md[end:]
        (d0, d1), _ = rng.choice(sentences)
        out["duplicate_sentence"] = md[:d1] + " " + md[d0:d1] + md[d1:]
    pars = md.split("\n\n")
    prose = [i for i, p in enumerate(pars) if _is_text_paragraph(p) and not _LIST_ITEM.match(p)
             and sum(ch.isalpha() for ch in _masked(p)) >= 20]
    distinct = [(i, j) for i in prose for j in prose if i < j and pars[i] != pars[j]]
    if distinct:
        i, j = rng.choice(distinct)
        swapped = list(pars)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        out["swap_paragraphs"] = "\n\n".join(swapped)
    numbers = []
    for unit in units:
        a, b = unit[0][0], unit[-1][1]
        masked = _masked(md[a:b])
        numbers.extend((a + m.start(), a + m.end()) for m in _SMALL_NUMBER.finditer(masked))
    if numbers:
        n0, n1 = rng.choice(numbers)
        old = int(md[n0:n1])
        new = rng.choice([v for v in range(0, 100) if v != old and len(str(v)) == len(str(old))] or [old + 1])
        out["change_number_in_prose"] = md[:n0] + str(new) + md[n1:]
    heading = next((p for p in pars if p.startswith("#")), None)
    if heading:
        out["repeat_first_heading_at_end"] = md.rstrip("\n") + "\n\n" + heading + "\n"
    return out


# ---------------------------------------------------------------- content-preserving edits
def preserving_edits(md: str) -> dict[str, str]:
    outside_tags = re.compile(r"(<[^>]*>)|(?<=[a-z]) (?=[a-z])")
    outside_tags_quote = re.compile(r"(<[^>]*>)|'")
    return {
        "double_spaces": md.replace(" ", "  "),
        "crlf": md.replace("\n", "\r\n"),
        "trailing_spaces": md.replace("\n", "  \n"),
        "nfd": unicodedata.normalize("NFD", md),
        "nbsp_between_words": outside_tags.sub(lambda m: m.group(1) or "\u00a0", md),
        "smart_quotes": md.replace("'", "\u2019"),
        "entity_apostrophe": outside_tags_quote.sub(lambda m: m.group(1) or "&#39;", md),
        "blank_lines_doubled": md.replace("\n\n", "\n\n\n\n"),
        "math_inner_spaces": re.sub(r"\\\((.+?)\\\)", lambda m: "\\(  " + m.group(1) + "  \\)", md),
    }


# ---------------------------------------------------------------- the report
def evaluate(pages: dict[str, tuple[str, list[UnitTest]]], edit_seed: int) -> dict:
    caught: Counter[str] = Counter()
    applicable: Counter[str] = Counter()
    missed: dict[str, list[str]] = defaultdict(list)
    ref_failures: list[tuple[str, str]] = []
    preserving: Counter[str] = Counter()
    preserving_examples: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    per_page: list[int] = []
    by_type: Counter[str] = Counter()
    for page_id, (md, tests) in pages.items():
        per_page.append(len(tests))
        by_type.update(t.type for t in tests)
        verdicts = check_all(tests, md)
        ref_failures += [(page_id, t.id) for t, ok, _ in verdicts if not ok]
        passing = [t for t, ok, _ in verdicts if ok]
        for kind in CHANGING:
            edited = changing_edits(md, random.Random(f"{edit_seed}:{page_id}:{kind}")).get(kind)
            if edited is None or edited == md:
                continue
            applicable[kind] += 1
            if all(ok for _, ok, _ in check_all(passing, edited)):
                missed[kind].append(page_id)
            else:
                caught[kind] += 1
        for kind, edited in preserving_edits(md).items():
            for t, ok, why in check_all(passing, edited):
                if not ok:
                    preserving[kind] += 1
                    preserving_examples[kind].append((page_id, t.id, why))
    return {"caught": caught, "applicable": applicable, "missed": missed, "ref_failures": ref_failures,
            "preserving": preserving, "preserving_examples": preserving_examples, "per_page": per_page,
            "by_type": by_type}


def report(title: str, r: dict) -> None:
    print(f"== {title}: {len(r['per_page'])} pages")
    print("  content-changing edit           caught/applicable")
    for kind in CHANGING:
        n, c = r["applicable"][kind], r["caught"][kind]
        share = f"{100 * c / n:5.1f}%" if n else "    -"
        note = "  (no olmOCR test type can catch it)" if kind in UNCATCHABLE else ""
        print(f"  {kind:30s} {c:3d}/{n:3d} {share}{note}")
        if kind not in UNCATCHABLE and r["missed"][kind]:
            print(f"      missed: {', '.join(r['missed'][kind][:4])}")
    print(f"  reference failures: {len(r['ref_failures'])} {r['ref_failures'][:4]}")
    pp = r["per_page"]
    if pp:
        print(f"  tests per page: mean {statistics.mean(pp):.1f}, max {max(pp)}; by type "
              f"{dict(sorted(r['by_type'].items()))}")
    print("  content-preserving edit        tests failed")
    for kind in preserving_edits(""):
        print(f"  {kind:30s} {r['preserving'][kind]:4d}")
        for ex in r["preserving_examples"][kind][:2]:
            print(f"      e.g. {ex[0]} {ex[1]}: {ex[2][:140]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--pages", type=int, default=48, help="HTML pages")
    ap.add_argument("--seed", type=int, default=0, help="seed of the HTML pages")
    ap.add_argument("--language", default="en", help="language of the HTML pages (en, zh, mixed)")
    ap.add_argument("--latex-pages", type=int, default=12, help="LaTeX pages (English only)")
    ap.add_argument("--latex-seed", type=int, default=1, help="seed of the LaTeX pages")
    ap.add_argument("--edit-seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="where pages are rendered (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true", help="keep pages already rendered under --out")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="synth-edits-") as tmp:
        out = args.out or Path(tmp)
        sets = [("html", args.pages, args.seed, args.language), ("latex", args.latex_pages, args.latex_seed, "en")]
        everything: dict[str, tuple[str, list[UnitTest]]] = {}
        for renderer, n, seed, language in sets:
            if n <= 0:
                continue
            where = out / f"{renderer}-{language}-s{seed}-n{n}"
            if not (args.reuse and (where / "summary.json").exists()):
                render(where, n, seed, renderer, language)
            pages = load_pages(where)
            everything.update(pages)
            report(f"{renderer} pages, --seed {seed} --language {language}", evaluate(pages, args.edit_seed))
        if len([s for s in sets if s[1] > 0]) > 1:
            report("all pages", evaluate(everything, args.edit_seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
