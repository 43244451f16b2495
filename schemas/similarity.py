"""Deterministic reference-vs-candidate metrics for OCR transcriptions (Jina-OCR-v1 Table 4).

Every metric returns a score in [0, 1] (1 = perfect) with its formula in the docstring, and is
registered in ``METRICS`` as ``name -> fn(reference, candidate) -> (score | None, details)`` so
GRPO rewards, audits and evaluation can iterate them. ``None`` means "n/a": the reference has no
structure of that kind (no table for the table metrics, no formula for the formula metrics).

* content: ``text_similarity`` = 1 - normalized edit distance (OmniDocBench convention:
  Levenshtein / max length).
* formula string matching: ``normalize_formula`` then 1 - normalized edit distance, exact match.
* tables: TEDS and TEDS-S (PubTabNet), and a table edit distance over canonical HTML.
* structural validity: brace balance, HTML tag closure, table integrity (rectangular grids).
* HTML conformance: only allow-listed tags and attributes.

Tables are parsed once by ``schemas.tables`` (HTML and Markdown pipe tables); tree edit distance
comes from ``schemas.tree_edit``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from html.parser import HTMLParser
from typing import Any

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from schemas.tables import Table, parse_tables
from schemas.tree_edit import table_tree_distance

Details = dict[str, Any]
MetricResult = tuple[float | None, Details]

MAX_PROBLEMS = 50  # problems listed per metric; the count is always complete


# --------------------------------------------------------------------------- edit distance


def normalized_edit_distance(a: str | Sequence[Any], b: str | Sequence[Any]) -> float:
    """Levenshtein(a, b) / max(len(a), len(b)), in [0, 1]; 0.0 for two empty inputs.

    The OmniDocBench text convention (``Edit_dist``), on characters of a string or items of a
    sequence. No normalisation is applied here; callers normalise first.
    """
    return float(Levenshtein.normalized_distance(a, b))


def text_similarity(a: str | Sequence[Any], b: str | Sequence[Any]) -> float:
    """1 - normalized_edit_distance(a, b) = 1 - Levenshtein(a, b) / max(len(a), len(b))."""
    return 1.0 - normalized_edit_distance(a, b)


def collapse_whitespace(text: str) -> str:
    """Runs of whitespace -> one space, ends stripped."""
    return " ".join(text.split())


def _distance_matrix(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Normalized edit distances between every string of ``a`` and of ``b``, each distinct
    string computed once."""
    ua: dict[str, int] = {}
    ub: dict[str, int] = {}
    ia = np.array([ua.setdefault(s, len(ua)) for s in a], dtype=np.int64)
    ib = np.array([ub.setdefault(s, len(ub)) for s in b], dtype=np.int64)
    if not ua or not ub:
        return np.zeros((len(a), len(b)))
    m = process.cdist(list(ua), list(ub), scorer=Levenshtein.normalized_distance, dtype=np.float64)
    return m[np.ix_(ia, ib)]


# --------------------------------------------------------------------------- tables: TEDS


def _cell_labels(table: Table) -> list[tuple[str, int, int]]:
    return [("th" if c.header else "td", c.rowspan, c.colspan) for row in table.rows for c in row]


def table_node_count(table: Table) -> int:
    """Nodes of the TEDS tree below the root: rows + cells (PubTabNet's ``len(table.xpath('.//*'))``
    after OmniDocBench's unwrapping of thead/tbody and inline tags)."""
    return len(table.rows) + sum(len(row) for row in table.rows)


def table_ted(a: Table, b: Table, structure_only: bool = False) -> float:
    """Tree edit distance between the TEDS trees of two parsed tables.

    Tree: ``table`` -> ``tr`` per row -> one leaf per cell, labelled (tag, rowspan, colspan) with
    tag ``th`` for header cells (``<th>``, cells inside ``<thead>``, a Markdown header row) and
    ``td`` otherwise, carrying the cell text (whitespace collapsed, inline tags dropped).
    Costs (PubTabNet ``CustomConfig``): insert/delete 1; rename 1 when tag, rowspan or colspan
    differ, else the normalized edit distance of the two contents (0 under ``structure_only``).
    """
    labels_a, labels_b = _cell_labels(a), _cell_labels(b)
    ids: dict[tuple[str, int, int], int] = {}
    la = np.array([ids.setdefault(x, len(ids)) for x in labels_a], dtype=np.int64)
    lb = np.array([ids.setdefault(x, len(ids)) for x in labels_b], dtype=np.int64)
    same = la[:, None] == lb[None, :]
    if structure_only:
        cost = np.where(same, 0.0, 1.0)
    else:
        texts_a = [c.text for row in a.rows for c in row]
        texts_b = [c.text for row in b.rows for c in row]
        cost = np.where(same, _distance_matrix(texts_a, texts_b), 1.0)
    return table_tree_distance([len(r) for r in a.rows], [len(r) for r in b.rows], cost)


def table_teds(a: Table, b: Table, structure_only: bool = False) -> float:
    """TEDS(a, b) = 1 - TED(a, b) / max(n_a, n_b), clamped to [0, 1].

    n = ``table_node_count`` (nodes below the root, as PubTabNet counts them). The clamp matters
    only for pathological pairs (e.g. one row of k cells against k rows of one differing cell), where
    the raw PubTabNet value goes negative. Two tables without any row score 1.
    """
    n = max(table_node_count(a), table_node_count(b))
    if n == 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - table_ted(a, b, structure_only) / n))


def _parse(text: Any, role: str) -> tuple[list[Table] | None, str | None]:
    if not isinstance(text, str):
        return None, f"{role} is {type(text).__name__}, not text"
    try:
        return parse_tables(text), None
    except Exception as exc:  # parse_tables recovers from bad HTML; this guards the unforeseen
        return None, f"{role} could not be parsed: {exc.__class__.__name__}: {exc}"


def _paired_table_metric(reference: Any, candidate: Any,
                         score_pair: Callable[[Table, Table], float]) -> MetricResult:
    """Pair the i-th candidate table with the i-th reference table (document order); the score
    is the sum of pair scores / max(tables in reference, tables in candidate), so a missing or
    an extra table counts 0. None when the reference has no table."""
    ref_tables, error = _parse(reference, "reference")
    if ref_tables is None:
        return None, {"reason": error}
    if not ref_tables:
        return None, {"reason": "reference has no table"}
    cand_tables, error = _parse(candidate, "candidate")
    if cand_tables is None:
        return 0.0, {"reason": error, "reference_tables": len(ref_tables)}
    details: Details = {"reference_tables": len(ref_tables), "candidate_tables": len(cand_tables)}
    if not cand_tables:
        details["reason"] = "candidate has no table"
        return 0.0, details
    try:
        per_table = [score_pair(c, r) for c, r in zip(cand_tables, ref_tables, strict=False)]
    except Exception as exc:
        details["reason"] = f"scoring failed: {exc.__class__.__name__}: {exc}"
        return 0.0, details
    details["per_table"] = [round(s, 6) for s in per_table]
    problems = [f"candidate table {i + 1}: {p}" for i, t in enumerate(cand_tables) for p in t.problems]
    if problems:
        details["problems"] = problems[:MAX_PROBLEMS]
    if len(cand_tables) != len(ref_tables):
        details["reason"] = "table counts differ; unpaired tables score 0"
    return sum(per_table) / max(len(ref_tables), len(cand_tables)), details


def teds_details(pred: Any, ref: Any, structure_only: bool = False) -> MetricResult:
    """TEDS (or TEDS-S) between every table of ``pred`` and of ``ref``, with details.

    Tables are HTML ``<table>`` or Markdown pipe tables anywhere in the text. Per pair
    ``table_teds``; over a page, tables are paired in document order and the score is
    Σ TEDS(pair) / max(#ref tables, #pred tables). Never raises: a reference without tables gives
    ``(None, {"reason": ...})``; a prediction without tables, or input that is not text, 0.
    """
    return _paired_table_metric(ref, pred, lambda c, r: table_teds(c, r, structure_only))


def teds(pred: Any, ref: Any, structure_only: bool = False) -> float:
    """TEDS as a plain float: ``teds_details`` with n/a and failures mapped to 0.0."""
    score, _ = teds_details(pred, ref, structure_only)
    return 0.0 if score is None else score


def table_to_html(table: Table) -> str:
    """Canonical HTML of a parsed table: ``<table><tr><td colspan="2">text</td>...</tr></table>``,
    ``th`` for header cells, spans only when > 1, text HTML-escaped and whitespace-collapsed."""
    out = ["<table>"]
    for row in table.rows:
        out.append("<tr>")
        for cell in row:
            tag = "th" if cell.header else "td"
            attrs = "".join(f' {k}="{v}"' for k, v in (("rowspan", cell.rowspan), ("colspan", cell.colspan)) if v > 1)
            out.append(f"<{tag}{attrs}>{html.escape(cell.text, quote=False)}</{tag}>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def table_edit_similarity(reference: Any, candidate: Any) -> MetricResult:
    """Table edit distance as a score: 1 - normalized_edit_distance(table_to_html(ref),
    table_to_html(cand)) per table pair (canonical HTML, so attribute order, whitespace and
    thead/tbody wrappers do not count), tables paired in order as in ``teds_details``."""
    return _paired_table_metric(
        reference, candidate, lambda c, r: text_similarity(table_to_html(r), table_to_html(c)))


def table_integrity(text: str) -> MetricResult:
    """Per table: filled / total positions of its occupancy grid (``Table.grid()``; holes come
    from ragged rows or spans that overrun), halved when the parser reported other problems
    (unclosed ``<table>``, cells outside ``<tr>``). Score = mean over tables; 1 with no table."""
    tables, error = _parse(text, "text")
    if tables is None:
        return 0.0, {"reason": error}
    if not tables:
        return 1.0, {"tables": 0}
    scores: list[float] = []
    problems: list[str] = []
    for i, table in enumerate(tables, start=1):
        grid = table.grid()
        total = sum(len(r) for r in grid)
        filled = sum(c is not None for r in grid for c in r)
        score = filled / total if total else 1.0
        if filled < total:
            problems.append(f"table {i}: {total - filled} of {total} grid positions empty")
        other = [p for p in table.problems if "rectangle" not in p and "different numbers" not in p]
        if other:
            score *= 0.5
            problems += [f"table {i}: {p}" for p in other]
        scores.append(score)
    details: Details = {"tables": len(tables), "per_table": [round(s, 6) for s in scores]}
    if problems:
        details["problems"] = problems[:MAX_PROBLEMS]
    return sum(scores) / len(scores), details


# --------------------------------------------------------------------------- formulas

_MATH = re.compile(
    r"\$\$(?P<display>.+?)\$\$"
    r"|\\\[(?P<bracket>.+?)\\\]"
    r"|\\\((?P<paren>.+?)\\\)"
    r"|(?P<env>\\begin\{(?P<envname>equation|align|gather|multline|eqnarray|displaymath)\*?\}.+?\\end\{(?P=envname)\*?\})"
    r"|(?<![\\$])\$(?P<inline>(?:[^$\\\n]|\\.)+?)\$",
    re.DOTALL,
)


def find_math(text: str) -> list[tuple[int, int, str]]:
    """Every formula in a Markdown/LaTeX text: (start, end, body) in document order.

    Delimiters: ``$$..$$``, ``\\[..\\]``, ``\\(..\\)``, ``\\begin{equation|align|gather|multline|
    eqnarray|displaymath}..\\end{..}`` (body kept whole) and single-line ``$..$`` (not ``\\$``)."""
    spans = []
    for m in _MATH.finditer(text):
        body = next(g for g in (m.group("display"), m.group("bracket"), m.group("paren"),
                                m.group("env"), m.group("inline")) if g is not None)
        spans.append((m.start(), m.end(), body))
    return spans


def extract_formulas(text: str) -> list[str]:
    """The bodies of ``find_math(text)``."""
    return [body for _, _, body in find_math(text)]


_TOKEN = re.compile(r"\\[a-zA-Z]+|\\.|\s+|.", re.DOTALL)

# Equivalent spellings, mapped to one form before comparing.
FORMULA_MACROS: dict[str, str] = {
    r"\dfrac": r"\frac", r"\tfrac": r"\frac", r"\cfrac": r"\frac",
    r"\dbinom": r"\binom", r"\tbinom": r"\binom",
    r"\bm": r"\boldsymbol",
    r"\mbox": r"\text", r"\hbox": r"\text", r"\textrm": r"\text",
    r"\to": r"\rightarrow", r"\gets": r"\leftarrow",
    r"\le": r"\leq", r"\ge": r"\geq", r"\ne": r"\neq",
    r"\leqslant": r"\leq", r"\geqslant": r"\geq",
    r"\lt": "<", r"\gt": ">",
    r"\lbrace": r"\{", r"\rbrace": r"\}", r"\lbrack": "[", r"\rbrack": "]",
    r"\vert": "|", r"\lvert": "|", r"\rvert": "|", r"\mid": "|",
    r"\Vert": r"\|", r"\lVert": r"\|", r"\rVert": r"\|",
    r"\land": r"\wedge", r"\lor": r"\vee", r"\lnot": r"\neg",
    r"\implies": r"\Longrightarrow", r"\impliedby": r"\Longleftarrow", r"\iff": r"\Longleftrightarrow",
    r"\dots": r"\ldots", r"\dotsc": r"\ldots", r"\dotsb": r"\cdots", r"\cdotp": r"\cdot",
    r"\ast": "*", r"\owns": r"\ni",
}

# Declarative font switches -> the command form over the rest of the group:
# {\bf x} -> \mathbf{x}, a \rm b c -> a\mathrm{bc}.
FORMULA_DECLARATIVE: dict[str, str] = {
    r"\bf": r"\mathbf", r"\rm": r"\mathrm", r"\it": r"\mathit", r"\cal": r"\mathcal",
    r"\sf": r"\mathsf", r"\tt": r"\mathtt",
}

# Tokens that change only size or spacing: dropped.
FORMULA_DROPPED: frozenset[str] = frozenset({
    r"\left", r"\right", r"\middle",
    r"\big", r"\Big", r"\bigg", r"\Bigg", r"\bigl", r"\bigr", r"\Bigl", r"\Bigr",
    r"\biggl", r"\biggr", r"\Biggl", r"\Biggr", r"\bigm", r"\Bigm", r"\biggm", r"\Biggm",
    r"\displaystyle", r"\textstyle", r"\scriptstyle", r"\scriptscriptstyle",
    r"\limits", r"\nolimits", r"\nonumber", r"\notag",
    r"\,", r"\;", r"\:", r"\!", "\\ ", "~", r"\quad", r"\qquad", r"\enspace", r"\thinspace",
    r"\medspace", r"\thickspace", r"\negthinspace", r"\negmedspace", r"\negthickspace",
})

_SIZED_DELIMITER = frozenset(
    t for t in FORMULA_DROPPED if t.startswith((r"\left", r"\right", r"\middle", r"\big", r"\Big")))

# Dropped together with their braced argument.
FORMULA_DROPPED_WITH_ARG: frozenset[str] = frozenset({r"\tag", r"\label", r"\hspace", r"\vspace"})

# Number of mandatory arguments; single-token arguments get braces (x^2 -> x^{2}).
FORMULA_ARITY: dict[str, int] = {
    "^": 1, "_": 1, r"\frac": 2, r"\binom": 2, r"\sqrt": 1,
    r"\mathbf": 1, r"\mathrm": 1, r"\mathit": 1, r"\mathcal": 1, r"\mathbb": 1, r"\mathsf": 1,
    r"\mathtt": 1, r"\mathfrak": 1, r"\mathscr": 1, r"\boldsymbol": 1, r"\text": 1, r"\operatorname": 1,
    r"\hat": 1, r"\bar": 1, r"\tilde": 1, r"\vec": 1, r"\dot": 1, r"\ddot": 1, r"\check": 1,
    r"\breve": 1, r"\acute": 1, r"\grave": 1, r"\overline": 1, r"\underline": 1,
    r"\widehat": 1, r"\widetilde": 1, r"\overrightarrow": 1, r"\overleftarrow": 1,
}

_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_WRAPPER_ENV = re.compile(r"^\\begin\{(equation|displaymath|math)\*?\}(.*)\\end\{\1\*?\}$", re.DOTALL)


def _strip_delimiters(s: str) -> str:
    s = s.strip()
    changed = True
    while changed:
        changed = False
        for left, right in _DELIMITERS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left):len(s) - len(right)].strip()
                changed = True
                break
        m = _WRAPPER_ENV.match(s)
        if m:
            s, changed = m.group(2).strip(), True
    return s


def _group_end(tokens: list[str], i: int) -> tuple[int, bool]:
    """Index just past the brace group opening at ``tokens[i] == "{"``, and whether it closes
    (an unclosed group runs to the end)."""
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j] == "{":
            depth += 1
        elif tokens[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1, True
    return len(tokens), False


def _declaratives(tokens: list[str]) -> list[str]:
    """``\\bf x y`` -> ``\\mathbf{x y}`` up to the end of the enclosing group."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        command = FORMULA_DECLARATIVE.get(tokens[i])
        if command is None:
            out.append(tokens[i])
            i += 1
            continue
        depth, j = 0, i + 1
        while j < len(tokens) and not (tokens[j] == "}" and depth == 0):
            depth += {"{": 1, "}": -1}.get(tokens[j], 0)
            j += 1
        out += [command, "{", *_declaratives(tokens[i + 1:j]), "}"]
        i = j
    return out


def _optional_end(tokens: list[str], i: int) -> int:
    """Past a ``[...]`` optional argument at ``i`` (``\\sqrt[3]``), else ``i``."""
    if i < len(tokens) and tokens[i] == "[":
        return tokens.index("]", i) + 1 if "]" in tokens[i:] else len(tokens)
    return i


def _is_atom(tokens: list[str]) -> bool:
    """One symbol, or one command with exactly its braced arguments (``\\mathbf{x}``)."""
    if not tokens:
        return False
    arity = FORMULA_ARITY.get(tokens[0], 0)
    if tokens[0] in ("^", "_", "{", "}", "&", "\\\\"):
        return False
    i = _optional_end(tokens, 1) if tokens[0] == r"\sqrt" else 1
    for _ in range(arity):
        if i >= len(tokens) or tokens[i] != "{":
            return False
        i, closed = _group_end(tokens, i)
        if not closed:
            return False
    return i == len(tokens)


def _brace_arguments(tokens: list[str]) -> list[str]:
    """Brace single-token arguments (``x^2 -> x^{2}``) and unwrap a free-standing group holding
    one atom (``{\\mathbf{x}} -> \\mathbf{x}``, ``{x} -> x``)."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "{":
            end, closed = _group_end(tokens, i)
            inner = _brace_arguments(tokens[i + 1:end - 1] if closed else tokens[i + 1:end])
            out += inner if closed and _is_atom(inner) else ["{", *inner, *(["}"] if closed else [])]
            i = end
            continue
        out.append(tok)
        i += 1
        if tok == r"\sqrt":
            close = _optional_end(tokens, i)
            out.extend(tokens[i:close])
            i = close
        for _ in range(FORMULA_ARITY.get(tok, 0)):
            if i >= len(tokens) or tokens[i] == "}":
                break
            if tokens[i] == "{":
                end, closed = _group_end(tokens, i)
                out += ["{", *_brace_arguments(tokens[i + 1:end - 1] if closed else tokens[i + 1:end]),
                        *(["}"] if closed else [])]
                i = end
            else:
                out += ["{", tokens[i], "}"]
                i += 1
    return out


def formula_tokens(formula: str) -> list[str]:
    """The normalised token list of one formula (see ``normalize_formula``)."""
    body = _strip_delimiters(formula)
    raw = [t for t in _TOKEN.findall(body) if not t.isspace()]
    tokens: list[str] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        if tok in FORMULA_DROPPED_WITH_ARG:
            i += 1
            if i < len(raw) and raw[i] == "*":
                i += 1
            if i < len(raw) and raw[i] == "{":
                i = _group_end(raw, i)[0]
            continue
        i += 1
        if tok in FORMULA_DROPPED:
            if tok in _SIZED_DELIMITER and i < len(raw) and raw[i] == ".":
                i += 1  # \right. is an empty delimiter
            continue
        tokens.append(FORMULA_MACROS.get(tok, tok))
    tokens = _brace_arguments(_declaratives(tokens))
    while tokens and tokens[-1] in (".", ",", ";"):
        tokens.pop()
    return tokens


def _join_tokens(tokens: list[str]) -> str:
    out: list[str] = []
    for tok in tokens:
        if out and re.fullmatch(r"\\[a-zA-Z]+", out[-1]) and tok[:1].isalpha():
            out.append(" ")
        out.append(tok)
    return "".join(out)


def normalize_formula(formula: str) -> str:
    """Canonical form of a LaTeX formula for string matching.

    1. Strip outer delimiters ``$$..$$``, ``$..$``, ``\\(..\\)``, ``\\[..\\]`` and
       ``\\begin{equation|equation*|displaymath|math}`` wrappers, repeatedly.
    2. Tokenize (control words, control symbols, single characters); drop whitespace.
    3. Drop ``FORMULA_DROPPED`` (``\\left``/``\\right``/``\\middle``, ``\\big``-family sizes, with
       the empty delimiter ``.`` after them, ``\\displaystyle``-family, ``\\limits``,
       ``\\nonumber``, spacing ``\\, \\; \\: \\! \\quad`` ...) and ``FORMULA_DROPPED_WITH_ARG``
       (``\\tag{..}``, ``\\label{..}``, ``\\hspace{..}``).
    4. Map equivalent macros (``FORMULA_MACROS``): ``\\dfrac/\\tfrac/\\cfrac -> \\frac``,
       ``\\bm -> \\boldsymbol``, ``\\mbox/\\hbox/\\textrm -> \\text``, ``\\to -> \\rightarrow``,
       ``\\le -> \\leq``, ``\\ge -> \\geq``, ``\\ne -> \\neq``, ``\\lbrace -> \\{``, ``\\vert -> |``,
       ``\\dots -> \\ldots``, ...
    5. Declarative font switches become commands over the rest of their group
       (``FORMULA_DECLARATIVE``): ``{\\bf x} -> \\mathbf{x}``, ``\\rm d x -> \\mathrm{dx}``.
       Then brace single-token arguments of scripts and of ``FORMULA_ARITY`` commands
       (``x^2 -> x^{2}``, ``\\frac12 -> \\frac{1}{2}``, ``\\mathbf x -> \\mathbf{x}``) and unwrap
       free-standing groups holding one atom (``{x} -> x``, ``{\\mathbf{x}} -> \\mathbf{x}``);
       each pair renders alike.
    6. Drop trailing ``.``, ``,``, ``;``.
    7. Join, with a space only between a control word and a following letter.
    """
    return _join_tokens(formula_tokens(formula))


def formula_similarity(reference: str, candidate: str) -> float:
    """1 - normalized_edit_distance(normalize_formula(reference), normalize_formula(candidate))."""
    return text_similarity(normalize_formula(reference), normalize_formula(candidate))


def formula_exact_match(reference: str, candidate: str) -> bool:
    """normalize_formula(reference) == normalize_formula(candidate)."""
    return normalize_formula(reference) == normalize_formula(candidate)


def _formula_matching(reference: str, candidate: str) -> tuple[float, float, Details] | None:
    from scipy.optimize import linear_sum_assignment

    ref = [normalize_formula(f) for f in extract_formulas(reference)]
    if not ref:
        return None
    cand = [normalize_formula(f) for f in extract_formulas(candidate)]
    details: Details = {"reference_formulas": len(ref), "candidate_formulas": len(cand)}
    denominator = max(len(ref), len(cand))
    if not cand:
        details["reason"] = "candidate has no formula"
        return 0.0, 0.0, details
    similarity = 1.0 - _distance_matrix(ref, cand)
    rows, cols = linear_sum_assignment(similarity, maximize=True)
    matched = similarity[rows, cols]
    exact = sum(ref[r] == cand[c] for r, c in zip(rows, cols, strict=True))
    details["exact"] = int(exact)
    worst = sorted(zip(matched, rows, cols, strict=True))[:3]
    details["worst"] = [{"reference": ref[r], "candidate": cand[c], "similarity": round(float(s), 6)}
                        for s, r, c in worst if s < 1.0]
    return float(matched.sum()) / denominator, exact / denominator, details


def formula_match(reference: str, candidate: str) -> MetricResult:
    """Formula string matching over a page.

    The formulas of each text (``extract_formulas``) are normalised (``normalize_formula``) and
    matched one-to-one maximising total similarity (Hungarian); score = Σ over matched pairs of
    (1 - normalized edit distance) / max(#reference formulas, #candidate formulas), so missing
    and extra formulas count 0. None when the reference has no formula.
    """
    result = _formula_matching(reference, candidate)
    if result is None:
        return None, {"reason": "reference has no formula"}
    return result[0], result[2]


def formula_exact(reference: str, candidate: str) -> MetricResult:
    """Exact formula matches (after ``normalize_formula``) among the pairs ``formula_match``
    chooses / max(#reference formulas, #candidate formulas). None without reference formulas."""
    result = _formula_matching(reference, candidate)
    if result is None:
        return None, {"reason": "reference has no formula"}
    return result[1], result[2]


# --------------------------------------------------------------------------- structural validity


def _mask_spans(text: str, spans: Sequence[tuple[int, int]]) -> str:
    chars = list(text)
    for start, end in spans:
        for k in range(start, end):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars)


def _problem_list(problems: list[str]) -> Details:
    return {"problems": problems[:MAX_PROBLEMS], "problem_count": len(problems)} if problems else {}


_ENV = re.compile(r"\\(begin|end)\s*\{([^{}]*)\}")


def brace_balance(text: str) -> MetricResult:
    """LaTeX balance: ``{``/``}`` (``\\{``, ``\\}`` and anything after a backslash ignored) and
    ``\\begin{env}``/``\\end{env}`` pairs, checked separately inside each formula
    (``find_math``) and in the text outside formulas.

    score = 1 - unmatched / total, where total counts every brace and every begin/end and
    unmatched counts closers without an opener plus openers never closed; 1 when there are none.
    """
    spans = find_math(text)
    segments = [(f"formula {i + 1}", text[s:e]) for i, (s, e, _) in enumerate(spans)]
    segments.append(("text", _mask_spans(text, [(s, e) for s, e, _ in spans])))
    total = unmatched = 0
    problems: list[str] = []
    for name, segment in segments:
        depth = 0
        i = 0
        while i < len(segment):
            ch = segment[i]
            if ch == "\\":
                i += 2
                continue
            if ch == "{":
                total += 1
                depth += 1
            elif ch == "}":
                total += 1
                if depth == 0:
                    unmatched += 1
                    problems.append(f"{name}: unmatched '}}' at {i}")
                else:
                    depth -= 1
            i += 1
        if depth:
            unmatched += depth
            problems.append(f"{name}: {depth} unclosed '{{'")
        stack: list[str] = []
        for m in _ENV.finditer(segment):
            total += 1
            kind, env = m.group(1), m.group(2).strip()
            if kind == "begin":
                stack.append(env)
            elif stack and stack[-1] == env:
                stack.pop()
            elif env in stack:
                while stack[-1] != env:
                    unmatched += 1
                    problems.append(f"{name}: \\begin{{{stack.pop()}}} closed by \\end{{{env}}}")
                stack.pop()
            else:
                unmatched += 1
                problems.append(f"{name}: \\end{{{env}}} without \\begin")
        unmatched += len(stack)
        problems += [f"{name}: \\begin{{{env}}} never ended" for env in stack]
    return (1.0 - unmatched / total if total else 1.0), {"delimiters": total, "unmatched": unmatched,
                                                         **_problem_list(problems)}


VOID_TAGS: frozenset[str] = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
})


class _TagEvents(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.events: list[tuple[str, str, list[tuple[str, str | None]], tuple[int, int]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.events.append(("start", tag, attrs, self.getpos()))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.events.append(("startend", tag, attrs, self.getpos()))

    def handle_endtag(self, tag: str) -> None:
        self.events.append(("end", tag, [], self.getpos()))


def _tag_events(text: str) -> list[tuple[str, str, list[tuple[str, str | None]], tuple[int, int]]]:
    """HTML tag events outside formulas (so ``$a<b$`` is not a tag)."""
    parser = _TagEvents()
    parser.feed(_mask_spans(text, [(s, e) for s, e, _ in find_math(text)]))
    parser.close()
    return parser.events


def tag_closure(text: str) -> MetricResult:
    """Every non-void HTML tag is closed, in order (strict: optional HTML end tags such as
    ``</td>`` are still required; ``<x/>`` counts as closed).

    score = 1 - errors / (non-void opening tags + stray closing tags), where errors are opening
    tags never closed or closed out of order, plus closing tags with no open counterpart;
    1 when the text has no tags.
    """
    stack: list[tuple[str, tuple[int, int]]] = []
    opened = stray = errors = 0
    problems: list[str] = []
    for kind, tag, _, pos in _tag_events(text):
        where = f"line {pos[0]} col {pos[1] + 1}"
        if kind == "startend" or (kind == "start" and tag in VOID_TAGS):
            continue
        if kind == "start":
            opened += 1
            stack.append((tag, pos))
        elif tag in VOID_TAGS:
            continue  # </br> is read as <br> by browsers; conformance, not closure
        elif stack and stack[-1][0] == tag:
            stack.pop()
        elif any(t == tag for t, _ in stack):
            while stack[-1][0] != tag:
                inner, p = stack.pop()
                errors += 1
                problems.append(f"<{inner}> (line {p[0]}) closed out of order by </{tag}> at {where}")
            stack.pop()
        else:
            stray += 1
            errors += 1
            problems.append(f"stray </{tag}> at {where}")
    for tag, p in stack:
        errors += 1
        problems.append(f"<{tag}> (line {p[0]} col {p[1] + 1}) never closed")
    total = opened + stray
    return (1.0 - errors / total if total else 1.0), {"tags": total, "errors": errors, **_problem_list(problems)}


# Allowed tags and, per tag, allowed attributes.
ALLOWED_HTML: dict[str, frozenset[str]] = {
    **{t: frozenset() for t in ("table", "thead", "tbody", "tfoot", "caption", "tr", "br", "sup", "sub",
                                 "b", "i", "em", "strong", "u", "s", "del")},
    "td": frozenset({"colspan", "rowspan"}),
    "th": frozenset({"colspan", "rowspan"}),
    "img": frozenset({"src", "alt", "width", "height"}),
}
_SPAN_ATTRS = ("colspan", "rowspan")


def html_conformance(text: str, allowed: Mapping[str, Collection[str]] = ALLOWED_HTML) -> MetricResult:
    """HTML conformance: every opening tag is in ``allowed`` (tag -> allowed attribute names;
    default ``ALLOWED_HTML``) with only allowed attributes, and colspan/rowspan values are
    positive integers. Tags inside formulas are ignored.

    score = 1 - violating opening tags / opening tags; 1 when the text has no tags.
    """
    tags = bad = 0
    problems: list[str] = []
    for kind, tag, attrs, pos in _tag_events(text):
        if kind == "end":
            continue
        tags += 1
        where = f"line {pos[0]} col {pos[1] + 1}"
        issues: list[str] = []
        if tag not in allowed:
            issues.append(f"tag <{tag}> not allowed")
        else:
            for name, value in attrs:
                if name not in allowed[tag]:
                    issues.append(f"attribute {name!r} not allowed on <{tag}>")
                elif name in _SPAN_ATTRS and not re.fullmatch(r"\s*[1-9][0-9]*\s*", value or ""):
                    issues.append(f"{name}={value!r} is not a positive integer")
        if issues:
            bad += 1
            problems += [f"{issue} at {where}" for issue in issues]
    return (1.0 - bad / tags if tags else 1.0), {"tags": tags, "violations": bad, **_problem_list(problems)}


# --------------------------------------------------------------------------- registry


def content_similarity(reference: str, candidate: str) -> MetricResult:
    """Content: 1 - normalized edit distance over the whole mixed Markdown/LaTeX/HTML text, after
    collapsing whitespace runs to one space (layout whitespace is not content)."""
    ref, cand = collapse_whitespace(reference), collapse_whitespace(candidate)
    return text_similarity(ref, cand), {"reference_chars": len(ref), "candidate_chars": len(cand)}


def _teds_metric(reference: str, candidate: str) -> MetricResult:
    """TEDS (PubTabNet): see ``teds_details``."""
    return teds_details(candidate, reference)


def _teds_s_metric(reference: str, candidate: str) -> MetricResult:
    """TEDS-S: TEDS on structure only (cell contents ignored); see ``teds_details``."""
    return teds_details(candidate, reference, structure_only=True)


def _table_integrity_metric(reference: str, candidate: str) -> MetricResult:
    """``table_integrity(candidate)``; None when the reference has no table."""
    if not parse_tables(reference):
        return None, {"reason": "reference has no table"}
    return table_integrity(candidate)


def structural_validity(reference: str, candidate: str) -> MetricResult:
    """Mean of ``brace_balance``, ``tag_closure`` and, when the candidate has a table,
    ``table_integrity`` of the candidate (the reference is not consulted)."""
    parts = {"brace_balance": brace_balance(candidate)[0], "tag_closure": tag_closure(candidate)[0]}
    if parse_tables(candidate):
        parts["table_integrity"] = table_integrity(candidate)[0]
    return sum(parts.values()) / len(parts), {k: round(v, 6) for k, v in parts.items()}


def _brace_balance_metric(reference: str, candidate: str) -> MetricResult:
    """``brace_balance(candidate)``."""
    return brace_balance(candidate)


def _tag_closure_metric(reference: str, candidate: str) -> MetricResult:
    """``tag_closure(candidate)``."""
    return tag_closure(candidate)


def _html_conformance_metric(reference: str, candidate: str) -> MetricResult:
    """``html_conformance(candidate)`` with the default allow-list."""
    return html_conformance(candidate)


Metric = Callable[[str, str], MetricResult]

METRICS: dict[str, Metric] = {
    "content": content_similarity,
    "formula": formula_match,
    "formula_exact": formula_exact,
    "teds": _teds_metric,
    "teds_s": _teds_s_metric,
    "table_edit": table_edit_similarity,
    "brace_balance": _brace_balance_metric,
    "tag_closure": _tag_closure_metric,
    "table_integrity": _table_integrity_metric,
    "structural_validity": structural_validity,
    "html_conformance": _html_conformance_metric,
}


def score_all(reference: str, candidate: str) -> dict[str, MetricResult]:
    """Every metric of ``METRICS``; a metric that raises scores 0 with the error as its reason."""
    out: dict[str, MetricResult] = {}
    for name, fn in METRICS.items():
        try:
            score, details = fn(reference, candidate)
        except Exception as exc:  # a reward loop must never die on one odd page
            score, details = 0.0, {"reason": f"{exc.__class__.__name__}: {exc}"}
        out[name] = (None if score is None else float(score), details)
    return out
