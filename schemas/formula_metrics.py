"""Formula metrics: find the formulas of a Markdown/LaTeX text, normalise their LaTeX (equivalent
spellings, size and spacing commands, braces), and match them by edit distance or exactly.

Each metric returns a ``schemas.edit_distance.MetricResult``; ``None`` when the reference has no
formula.
"""

from __future__ import annotations

import re

from schemas.edit_distance import Details, MetricResult, distance_matrix, text_similarity

_OPENER = re.compile(r"\$|\\[\[(]|\\begin\{")
_ENV_BEGIN = re.compile(r"\\begin\{(equation|align|gather|multline|eqnarray|displaymath)\*?\}")
_INLINE_BODY = re.compile(r"(?:[^$\\\n]|\\.)+", re.DOTALL)
_PAIRED = {"$$": "$$", "\\[": "\\]", "\\(": "\\)"}


def _find(text: str, closer: str, start: int, dead: set[str]) -> int:
    """``text.find(closer, start)``, remembering in ``dead`` a closer that is not there (nor, as
    ``start`` only grows, later)."""
    if closer in dead:
        return -1
    k = text.find(closer, start)
    if k < 0:
        dead.add(closer)
    return k


def find_math(text: str) -> list[tuple[int, int, str]]:
    """Every formula in a Markdown/LaTeX text: (start, end, body) in document order.

    Delimiters: ``$$..$$``, ``\\[..\\]``, ``\\(..\\)``, ``\\begin{equation|align|gather|multline|
    eqnarray|displaymath}..\\end{..}`` (body kept whole) and single-line ``$..$`` (not ``\\$``).

    Left to right, at each position the first of those that closes wins (in the order above); a
    body is never empty and ends at the first closer after it, as the lazy regular expression
    ``$$(.+?)$$|...`` would match. Linear time: each closer is looked up with ``str.find``, and a
    closer that does not occur after an opener is not looked up again.
    """
    spans: list[tuple[int, int, str]] = []
    dead: set[str] = set()  # closers that do not occur after the current position
    n = len(text)
    i = 0
    while (m := _OPENER.search(text, i)) is not None:
        i = m.start()
        found: tuple[int, int, str] | None = None
        opener = text[i:i + 2]
        if opener in _PAIRED and (close := _find(text, _PAIRED[opener], i + 3, dead)) >= 0:
            found = (i, close + 2, text[i + 2:close])
        if found is None and opener == "\\b" and (env := _ENV_BEGIN.match(text, i)) is not None:
            name = env.group(1)
            ends = [(k, len(closer)) for closer in (f"\\end{{{name}}}", f"\\end{{{name}*}}")
                    if (k := _find(text, closer, env.end() + 1, dead)) >= 0]
            if ends:
                close, length = min(ends)
                found = (i, close + length, text[i:close + length])
        if found is None and text[i] == "$" and (i == 0 or text[i - 1] not in "\\$"):
            body = _INLINE_BODY.match(text, i + 1)
            if body is not None and body.end() < n and text[body.end()] == "$":
                found = (i, body.end() + 1, body.group())
        if found is None:
            i += 1
        else:
            spans.append(found)
            i = found[1]
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


def _normalized_or_none(formula: str) -> str | None:
    """``normalize_formula(formula)``, or None for a formula nested too deep to normalise (its
    brace groups are handled recursively: ~1000 nested ``{`` exceed Python's recursion limit)."""
    try:
        return normalize_formula(formula)
    except RecursionError:
        return None


def _formula_matching(reference: str, candidate: str) -> tuple[float, float, Details] | None:
    from scipy.optimize import linear_sum_assignment

    ref_norm = [_normalized_or_none(f) for f in extract_formulas(reference)]
    if not ref_norm:
        return None
    cand_norm = [_normalized_or_none(f) for f in extract_formulas(candidate)]
    details: Details = {"reference_formulas": len(ref_norm), "candidate_formulas": len(cand_norm)}
    too_deep = sum(f is None for f in ref_norm + cand_norm)
    if too_deep:
        details["too_deep"] = too_deep  # each such formula scores 0 against every other
    ref, cand = [f or "" for f in ref_norm], [f or "" for f in cand_norm]
    denominator = max(len(ref), len(cand))
    if not cand:
        details["reason"] = "candidate has no formula"
        return 0.0, 0.0, details
    similarity = 1.0 - distance_matrix(ref, cand)
    for r, f in enumerate(ref_norm):
        if f is None:
            similarity[r, :] = 0.0
    for c, f in enumerate(cand_norm):
        if f is None:
            similarity[:, c] = 0.0
    rows, cols = linear_sum_assignment(similarity, maximize=True)
    matched = similarity[rows, cols]
    exact = sum(ref_norm[r] is not None and ref_norm[r] == cand_norm[c] for r, c in zip(rows, cols, strict=True))
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
    and extra formulas count 0. A formula nested too deep to normalise (~1000 nested braces)
    scores 0 against any other (``details["too_deep"]`` counts them); the page is still scored.
    None when the reference has no formula.
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
