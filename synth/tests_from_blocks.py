"""olmOCR-Bench unit tests derived from a synthetic page's blocks (JinaOCRSynth, issue 5 item 5).

olmOCR-synthmix mines tests from LLM-written HTML (``../shared/reference/olmocr.md`` section 3);
here the blocks are the ground truth, so tests come straight from them:

* ``absent``: each piece of furniture (header, footer: ``max_diffs = round(0.05 * len)``; page
  number: exact);
* ``table``: tables of at least 3x3; distinctive (unique, non-empty) cells with their up/down/left/
  right neighbours and ``top_heading``/``left_heading`` where defined, ``ignore_markdown_tables``;
* ``order``: sentence pairs from different blocks, earlier before later in reading order, preferring
  pairs in different columns; ``max_diffs = round(0.02 * longer)``; and a chain through the page's
  text: each sentence (paragraph sentence, list item, caption) is quoted by a short fragment
  (``FRAGMENT_MIN``..``FRAGMENT_MAX`` characters, or 6-10 characters of Chinese, occurring once in the
  reference, so ``max_diffs`` is 0) and each fragment must come before the next sentence's, within and
  across blocks: a swapped, deleted or moved sentence or paragraph breaks a link (``MAX_CHAIN`` links);
* ``present``: rare words (long or capitalised mid-sentence, by a frequency-free heuristic), numbers of
  at least 3 digits not quoted otherwise, and each sentence's numbers (of any length) that its chain
  fragment does not quote, with the words around them until the quote occurs once in the reference
  (``MAX_NUMBER_SPANS``);
* ``math``: each display formula and each inline formula of more than 2 characters;
* ``format``: headings and bold spans; ``footnote``: each marker with the words before it;
* one ``baseline``.

Every test is built as a dict through ``schemas.unit_tests.unit_test_from_dict`` and run on the
reference Markdown; only passing tests are kept, the rest are counted in ``dropped`` by reason
(``invalid_<type>``, ``fails_reference_<type>``, ``filtered_<type>``, ``duplicate_<type>``).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

from schemas.tables import parse_html_tables
from schemas.text import normalize_text
from schemas.unit_tests import UnitTest, unit_test_from_dict
from synth.blocks import (
    Block,
    Figure,
    Footnote,
    Formula,
    Heading,
    ListBlock,
    PageSpec,
    Paragraph,
    Table,
)
from synth.reference import reading_order
from synth.tables import table_html

MAX_TABLE_TESTS_PER_TABLE = 12
MAX_ORDER = 6
# The chain of consecutive sentences: one order test a link, at most MAX_CHAIN a page (a seeded subset
# beyond that); fragments of FRAGMENT_MIN..FRAGMENT_MAX characters (round(0.02 * 25) == 0: exact quotes).
MAX_CHAIN = 60
FRAGMENT_MIN, FRAGMENT_MAX = 12, 25
MAX_NUMBER_SPANS = 24
MAX_PRESENT_WORDS = 10
MAX_PRESENT_NUMBERS = 5
MAX_MATH = 50
MAX_FORMAT = 5
MAX_FOOTNOTE = 5

_INLINE_MATH = re.compile(r"\\\((.+?)\\\)", re.DOTALL)
_MARKER = re.compile(r"\[\^([^\]\s]+)\]")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_SUPERSUB = re.compile("[\u00b2\u00b3\u00b9\u2070-\u209f]")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]{4,}")
_NUMBER = re.compile(r"[+-]?\d[\d,.]*\d%?|\d%")
_NUMBER_TOKEN = re.compile(r"\d+(?:[.,:/-]\d+)*%?")
_TOKEN = re.compile(r"\S+")
_SPELLED_TWO_WAYS = frozenset("'\"&<>")  # also written as entities (&#39;, &amp;, ...): not in exact quotes
_COMMON = frozenset([
    "about", "above", "after", "again", "against", "because", "before", "being", "below", "between",
    "could", "during", "every", "first", "found", "further", "however", "little", "might", "other",
    "should", "since", "their", "there", "these", "those", "through", "under", "until", "where",
    "which", "while", "would", "years", "water", "often", "usually", "early", "later", "record",
    "records",
])


def _plain(text: str) -> str:
    """Paragraph text without math, markers and emphasis (what ``order``/``present`` may quote)."""
    text = _INLINE_MATH.sub(" ", text)
    text = _MARKER.sub("", text)
    text = text.replace("**", "").replace("*", "")
    return " ".join(text.split())


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|(?<=[。！？])", text) if s.strip()]


def _text_blocks(spec: PageSpec, order: list[Block]) -> list[tuple[int, int, str]]:
    """(block, column, sentence) in reading order, from paragraphs, list items and figure and table
    captions (no math);
    ``block`` is the block's index in ``order``."""
    columns = {id(p.block): p.column for p in spec.blocks}
    out: list[tuple[int, int, str]] = []
    for k, block in enumerate(order):
        col = columns[id(block)]
        if isinstance(block, Paragraph) and "\\(" not in block.text:
            out.extend((k, col, s) for s in _sentences(_plain(block.text)))
        elif isinstance(block, Paragraph):
            out.extend((k, col, s) for s in _sentences(_plain(block.text)) if "\\" not in s)
        elif isinstance(block, ListBlock):
            out.extend((k, col, _plain(item)) for item in block.items)
        elif isinstance(block, Figure):
            out.append((k, col, block.caption))
        elif isinstance(block, Table) and block.caption.strip():
            out.append((k, col, block.caption.strip()))
    return out


def _absent(spec: PageSpec) -> list[dict[str, Any]]:
    f = spec.furniture
    tests = []
    for text, exact in ((f.header, False), (f.footer, False), (f.page_number, True)):
        text = text.strip()
        if len(text) > 3 or any(ch.isdigit() for ch in text):
            tests.append({"type": "absent", "text": text, "max_diffs": 0 if exact else round(0.05 * len(text))})
    return tests


def _table_tests(rng: random.Random, table: Table) -> list[dict[str, Any]]:
    parsed = parse_html_tables(table_html(table))[0]
    grid = parsed.grid()
    if len(grid) < 3 or (grid and len(grid[0]) < 3):
        return []
    origin: dict[int, tuple[int, int]] = {}
    for r, row in enumerate(grid):
        for c, cell in enumerate(row):
            if cell is not None and id(cell) not in origin:
                origin[id(cell)] = (r, c)
    counts = Counter(cell.text for cell in {id(c): c for row in grid for c in row if c is not None}.values())
    n_rows, n_cols = len(grid), len(grid[0])
    candidates = [(r, c) for (r, c) in origin.values()
                  if grid[r][c].rowspan == 1 and grid[r][c].colspan == 1 and grid[r][c].text
                  and counts[grid[r][c].text] == 1]
    rng.shuffle(candidates)
    tests = []
    for r, c in candidates[:MAX_TABLE_TESTS_PER_TABLE]:
        me = grid[r][c]
        test: dict[str, Any] = {"type": "table", "cell": me.text, "ignore_markdown_tables": True}
        neighbours = {"up": (r - 1, c), "down": (r + 1, c), "left": (r, c - 1), "right": (r, c + 1)}
        relations = list(neighbours)
        rng.shuffle(relations)
        for name in relations[: rng.randint(1, 3)]:
            nr, nc = neighbours[name]
            if 0 <= nr < n_rows and 0 <= nc < n_cols and grid[nr][nc] is not None and grid[nr][nc].text:
                test[name] = grid[nr][nc].text
        if not me.header:
            top = next((grid[k][c].text for k in range(r - 1, -1, -1) if grid[k][c].header and grid[k][c].text), "")
            left = next((grid[r][k].text for k in range(c - 1, -1, -1) if grid[r][k].header and grid[r][k].text), "")
            if top and rng.random() < 0.6:
                test["top_heading"] = top
            if left and rng.random() < 0.6:
                test["left_heading"] = left
        if len(test) > 3:
            tests.append(test)
    return tests


def _order(rng: random.Random, text: list[tuple[int, int, str]]) -> list[dict[str, Any]]:
    # Pairs from different blocks only: two sentences of one block stay in order even when a response
    # reads the blocks in the wrong order, so such a pair tests nothing about reading order.
    items = [(i, col, s, block) for i, (block, col, s) in enumerate(text) if len(s) >= 12]
    pairs = [(a, b) for a in items for b in items if a[0] < b[0] and a[3] != b[3]]
    # Cross-column pairs first (the failure multi-column layouts provoke), then the rest.
    cross = [p for p in pairs if p[0][1] != p[1][1]]
    same = [p for p in pairs if p[0][1] == p[1][1]]
    rng.shuffle(cross)
    rng.shuffle(same)
    tests = []
    for (_, _, before, _), (_, _, after, _) in (cross[: MAX_ORDER // 2] + same)[:MAX_ORDER]:
        before, after = before[:80], after[:80]
        tests.append({"type": "order", "before": before, "after": after,
                      "max_diffs": round(0.02 * max(len(before), len(after)))})
    return tests


def _cjk(sentence: str) -> bool:
    return bool(_CJK_RUN.search(sentence))


def _units(sentence: str) -> list[tuple[int, int]]:
    """What a quote of ``sentence`` is made of: its words, or its characters when it is Chinese."""
    if _cjk(sentence):
        return [(k, k + 1) for k, ch in enumerate(sentence) if not ch.isspace()]
    return [m.span() for m in _TOKEN.finditer(sentence)]


def _fragment(sentence: str, ref: str, cross: int | None = None) -> tuple[int, int] | None:
    """The span of ``sentence`` (normalised) that quotes it in the chain: whole words (Chinese: 6-10
    characters) of FRAGMENT_MIN..FRAGMENT_MAX characters occurring exactly once in ``ref`` (normalised);
    the one quoting most of the sentence's numbers, then the leftmost, then the shortest. With ``cross``,
    only spans over that offset (``sentence`` is then two sentences: a quote over their boundary)."""
    units = _units(sentence)
    lo, hi = (6, 10) if _cjk(sentence) else (FRAGMENT_MIN, FRAGMENT_MAX)
    numbers = [m.span() for m in _NUMBER_TOKEN.finditer(sentence)]
    best: tuple[tuple[int, int, int], tuple[int, int]] | None = None
    for i, (a, _) in enumerate(units):
        for _, b in units[i:]:
            if b - a > hi:
                break
            if b - a < lo or (cross is not None and not a < cross < b):
                continue
            window = sentence[a:b]
            if (not any(ch.isalpha() for ch in window) or any(ch in _SPELLED_TWO_WAYS for ch in window)
                    or ref.count(window) != 1):
                continue
            key = (-sum(a <= x and y <= b for x, y in numbers), a, b - a)
            if best is None or key < best[0]:
                best = (key, (a, b))
    return None if best is None else best[1]


def _quote_around(sentence: str, a: int, b: int, ref: str) -> str | None:
    """``sentence[a:b]`` with a word (Chinese: two characters) either side, widened a unit at a time
    until it occurs once in ``ref``: the narrowest unique quote, else the narrowest that occurs at all."""
    units = _units(sentence)
    first = next((k for k, (_, e) in enumerate(units) if e > a), None)
    last = next((k for k in range(len(units) - 1, -1, -1) if units[k][0] < b), None)
    if first is None or last is None:
        return None
    step = 2 if _cjk(sentence) else 1
    fallback = None
    for grow in range(step, 4 * step + 1, step):
        i, j = max(0, first - grow), min(len(units) - 1, last + grow)
        quote = sentence[units[i][0]:units[j][1]]
        count = ref.count(quote)
        if count == 1 and not any(ch in _SPELLED_TWO_WAYS for ch in quote):
            return quote
        if count and fallback is None:
            fallback = quote
    return fallback


def _chain(rng: random.Random, text: list[tuple[int, int, str]], ref: str) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]]]:
    """Order tests linking each sentence's fragment to the next one's, and present tests quoting the
    numbers the fragments leave out (see the module docstring)."""
    fragments: list[str] = []
    numbers: list[str] = []
    sentences = [normalize_text(raw) for _, _, raw in text]
    for k, sentence in enumerate(sentences):
        span = _fragment(sentence, ref)
        if span is not None:
            fragments.append(sentence[span[0]:span[1]])
        else:
            # Nothing of its own occurs once (a templated sentence around formulas): quote its boundary
            # with the sentence before or after it in the same block, which moves when it moves.
            for j in (k + 1, k - 1):
                if 0 <= j < len(text) and text[j][0] == text[k][0]:
                    first, second = (sentences[j], sentence) if j < k else (sentence, sentences[j])
                    cut = len(first)  # Chinese sentences follow each other without a space
                    joined = first + ("" if "\u3000" <= first[-1:] <= "\uffef" else " ") + second
                    both = _fragment(joined, ref, cross=cut)
                    if both is not None:
                        fragments.append(joined[both[0]:both[1]])
                        break
        left = [(x, y) for x, y in (m.span() for m in _NUMBER_TOKEN.finditer(sentence))
                if span is None or not (span[0] <= x and y <= span[1])]
        if not left:
            continue
        quote = _quote_around(sentence, left[0][0], left[-1][1], ref) if len(left) > 1 else None
        if quote is not None and all(sentence[x:y] in quote for x, y in left):
            numbers.append(quote)
            continue
        for x, y in left:  # one quote for all did not occur (a formula or marker in between): one each
            quote = _quote_around(sentence, x, y, ref)
            if quote is not None:
                numbers.append(quote)
    links = list(zip(fragments, fragments[1:]))
    if len(links) > MAX_CHAIN:
        links = [links[k] for k in sorted(rng.sample(range(len(links)), MAX_CHAIN))]
    numbers = list(dict.fromkeys(numbers))
    if len(numbers) > MAX_NUMBER_SPANS:
        numbers = [numbers[k] for k in sorted(rng.sample(range(len(numbers)), MAX_NUMBER_SPANS))]
    order = [{"type": "order", "before": a, "after": b, "max_diffs": round(0.02 * max(len(a), len(b)))}
             for a, b in links]
    return order, [{"type": "present", "text": q} for q in numbers]


def _present(rng: random.Random, text: list[tuple[int, int, str]],
             quoted: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Rare words and numbers of >= 3 digits; numbers in ``quoted`` (quoted by other tests) are left out."""
    words: dict[str, None] = {}
    numbers: dict[str, None] = {}
    for _, _, sentence in text:
        if _CJK_RUN.search(sentence):
            # No word spaces: quote 4-6 character windows of Chinese runs, and the digit runs.
            for m in _CJK_RUN.finditer(sentence):
                run = m.group()
                size = min(len(run), rng.randint(4, 6))
                start = rng.randint(0, len(run) - size)
                words[run[start:start + size]] = None
            for m in _NUMBER.finditer(sentence):
                if sum(ch.isdigit() for ch in m.group()) >= 3 and m.group() not in quoted:
                    numbers[m.group()] = None
            continue
        tokens = sentence.split()
        for k, tok in enumerate(tokens):
            word = tok.strip(".,;:()!?\"'")
            if re.fullmatch(r"[+-]?\d[\d,.]*%?", word) and sum(ch.isdigit() for ch in word) >= 3:
                if word not in quoted:
                    numbers[word] = None
            elif word.isalpha() and word.lower() not in _COMMON and (
                    len(word) >= 9 or (k > 0 and word[0].isupper() and len(word) >= 5)):
                words[word] = None
    picked_words = list(words)
    picked_numbers = list(numbers)
    rng.shuffle(picked_words)
    rng.shuffle(picked_numbers)
    return ([{"type": "present", "text": w} for w in picked_words[:MAX_PRESENT_WORDS]]
            + [{"type": "present", "text": n} for n in picked_numbers[:MAX_PRESENT_NUMBERS]])


def _math(order: list[Block]) -> list[dict[str, Any]]:
    seen: dict[str, None] = {}
    for block in order:
        if isinstance(block, Formula):
            seen[block.latex.strip()] = None
        elif isinstance(block, (Paragraph, ListBlock)):
            texts = block.items if isinstance(block, ListBlock) else (block.text,)
            for text in texts:
                for m in _INLINE_MATH.findall(text):
                    seen[m.strip()] = None
    return [{"type": "math", "math": m, "ignore_dollar_delimited": True} for m in seen if len(m) > 2][:MAX_MATH]


def _format(order: list[Block]) -> list[dict[str, Any]]:
    tests = []
    for block in order:
        if isinstance(block, Heading):
            tests.append({"type": "format", "text": block.text, "format": "heading"})
        elif isinstance(block, Paragraph):
            tests.extend({"type": "format", "text": m, "format": "bold"} for m in _BOLD.findall(block.text))
    return tests[:MAX_FORMAT]


def _footnotes(spec: PageSpec, order: list[Block]) -> list[dict[str, Any]]:
    markers = {p.block.marker for p in spec.blocks if isinstance(p.block, Footnote)}
    tests = []
    for block in order:
        if not isinstance(block, Paragraph):
            continue
        for m in _MARKER.finditer(block.text):
            if m.group(1) not in markers:
                continue
            before = " ".join(_plain(block.text[: m.start()]).split()[-4:])
            if _CJK_RUN.search(before):  # no word spaces: the last 8 characters
                before = before[-8:].strip()
            test: dict[str, Any] = {"type": "footnote", "marker": m.group(1)}
            if len(before) >= 8:
                test["appears_before_marker"] = before
            tests.append(test)
    return tests[:MAX_FOOTNOTE]


def _filter_reason(data: dict[str, Any]) -> str | None:
    """olmOCR's final filter: text fields need alphanumerics and no math delimiters or super/subscripts."""
    for key in ("text", "before", "after", "cell", "marker", "appears_before_marker"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            continue
        if not any(ch.isalnum() for ch in value) and key != "marker":
            return "no_alnum"
        if "\\(" in value or "\\[" in value or "<sup" in value.lower() or _SUPERSUB.search(value):
            return "markup"
    return None


def unit_tests_for_page(spec: PageSpec, reference_md: str, pdf_name: str, page: int = 1,
                        order: list[Block] | None = None) -> tuple[list[UnitTest], dict[str, int]]:
    """The page's verified tests, and how many candidates were dropped per reason.

    ``order``: the page's ``synth.reference.reading_order`` when the caller has it already (as
    ``synth.pages.synthesize_page`` does, which also made the reference from it)."""
    order = reading_order(spec) if order is None else order
    text = _text_blocks(spec, order)
    rng = random.Random(f"tests:{spec.id}:{spec.seed}")
    candidates: list[dict[str, Any]] = []
    candidates += _absent(spec)
    for block in order:
        if isinstance(block, Table):
            candidates += _table_tests(rng, block)
    candidates += _order(rng, text)
    chain, number_quotes = _chain(rng, text, normalize_text(reference_md))
    candidates += chain
    quoted = frozenset(n for t in chain + number_quotes for key in ("before", "after", "text")
                       for n in _NUMBER_TOKEN.findall(t.get(key, "")))
    candidates += _present(rng, text, quoted)
    candidates += number_quotes
    candidates += _math(order)
    candidates += _format(order)
    candidates += _footnotes(spec, order)
    has_cjk = any("\u3040" <= ch <= "\u9fff" for ch in reference_md)
    candidates.append({"type": "baseline", "max_repeats": 30, "check_disallowed_characters": not has_cjk})
    return verify_tests(candidates, reference_md, pdf_name, page, prefix=spec.id)


def verify_tests(candidates: list[dict[str, Any]], reference_md: str, pdf_name: str, page: int = 1, *,
                 prefix: str = "t") -> tuple[list[UnitTest], dict[str, int]]:
    """Build each candidate dict (``pdf``, ``page``, ``id`` filled in) and keep those passing on the reference."""
    kept: list[UnitTest] = []
    dropped: Counter[str] = Counter()
    seen: set[str] = set()
    per_type: Counter[str] = Counter()
    for data in candidates:
        kind = str(data.get("type"))
        reason = _filter_reason(data)
        if reason is not None:
            dropped[f"filtered_{reason}_{kind}"] += 1
            continue
        key = repr(sorted(data.items()))
        if key in seen:
            dropped[f"duplicate_{kind}"] += 1
            continue
        seen.add(key)
        full = {"pdf": pdf_name, "page": page, "id": f"{prefix}_{kind}_{per_type[kind]:02d}", **data}
        try:
            test = unit_test_from_dict(full)
        except ValueError:
            dropped[f"invalid_{kind}"] += 1
            continue
        try:
            passed, _ = test.check(reference_md)
        except Exception:  # noqa: BLE001 - a test that cannot be checked is dropped, not fatal
            passed = False
        if not passed:
            dropped[f"fails_reference_{kind}"] += 1
            continue
        per_type[kind] += 1
        kept.append(test)
    return kept, dict(dropped)
