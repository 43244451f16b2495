"""Label conventions: rewrite Markdown/text labels toward one formatting convention (Jina-OCR-v1 5.2).

"Labels are then rewritten toward one formatting convention, so that equations appear individually
delimited as ``$x+y$,$t+v$`` instead of comma-separated as ``$x+y,t+v$``, which keeps formatting
variation from dominating the loss." Three rewrites, each counted in
``record.quality["conventions"]["counters"]`` (a rewritten label keeps only the unit tests that still
pass on it; the others are counted as ``tests_dropped``):

``split_formulas``
    An inline formula that is a comma-separated list of independent expressions becomes one
    formula per expression, joined by ``", "``: ``$x+y,t+v$`` -> ``\\(x+y\\), \\(t+v\\)``. The
    rule (``split_points``/``should_split``): split only at commas at nesting depth 0, where depth
    counts ``{}``, ``()``, ``[]``, ``\\{ \\}``, ``\\langle \\rangle`` and ``\\begin``/``\\end``
    (so ``f(x,y)``, ``\\{1,2\\}``, ``x_{i,j}``, ``[a,b]``, ``1{,}5`` stay whole) and never at a comma
    between two digits (``1,000``); ``\\,`` is a space command, not a comma. The formula then stays
    whole when any part is empty, when every part is a number (a number list), when a part is an
    ellipsis (``x_1, \\dots, x_n`` is one sequence), or when only the last part holds a relation
    (``a, b \\in A``, ``x, y > 0``: the relation binds the whole list). Display formulas are never
    split (their commas usually separate an equation from its condition).
``inline_delimiters`` / ``display_delimiters``
    Math delimiters are rewritten to the configured convention: inline ``\\( \\)`` or ``$ $``,
    display ``\\[ \\]`` or ``$$ $$`` (default ``\\( \\)`` and ``\\[ \\]``, as olmOCR-mix-1025 labels
    use). Counted once per source formula whose delimiters changed. ``$`` follows a stricter Pandoc rule:
    an opening ``$`` is followed by a non-space; the next unescaped ``$`` closes when a non-space
    precedes it and no digit or ``$`` follows, else there is no formula (so ``costs $5 and $10``
    is text); no blank line inside; ``\\$`` is a literal dollar. ``\\[...\\]`` and ``\\(...\\)``
    around nothing but numbers (``\\[12\\]``, ``\\[3, 5-7\\]``, ``\\(1\\)``) are Markdown-escaped
    brackets of a citation or an equation number, not math, and are left alone.
``bold`` / ``italic``
    Outside math, ``\\textbf{x}`` -> ``**x**`` and ``\\textit{x}``/``\\emph{x}`` -> ``*x*`` (nested
    commands too; whitespace at the ends of the argument moves outside the markers; an argument
    spanning a blank line is left alone, as Markdown emphasis cannot cross paragraphs).

``formula_delimiters`` / ``formula_spacing`` (``response_format: latex``, formula crops)
    A bare-formula label loses delimiters around the whole of it (``$..$``, ``$$..$$``, ``\\(..\\)``,
    ``\\[..\\]``, ``\\begin{equation}..\\end{equation}``, starred too) and the token spacing of
    im2latex-style labels (``\\frac { a } { b }`` -> ``\\frac{a}{b}``): in math mode TeX ignores
    spaces except one that ends a control word before a letter (``\\alpha b``), which is kept, as is
    the spacing inside text-mode arguments (``\\text{..}``, ``\\mbox{..}``, ...), collapsed to one space.
    The rendered formula is unchanged (tests/pipelines/clean/test_conventions.py renders both).

Never touched: fenced code blocks (``` and ~~~), inline code spans, ``<code>``/``<pre>`` elements
(indented code blocks are not recognised: OCR labels indent ordinary text). Only labels with
``response_format`` ``markdown`` or ``text`` are rewritten (``latex`` by the formula rewrites only);
others pass through with ``skipped`` in quality.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any, Literal

from schemas.config import option
from schemas.deadletter import RecordError
from schemas.math_unit_tests import katex_inputs, run_cache_dir
from schemas.page import PageRecord, ProvenanceStep, params_hash
from schemas.unit_tests import passing_tests

VERSION = "2"  # 2: a rewritten response keeps only the unit tests that pass on it
COUNTERS = ("split_formulas", "inline_delimiters", "display_delimiters", "bold", "italic")
FORMATS = ("markdown", "text")
INLINE = {"\\(": ("\\(", "\\)"), "$": ("$", "$")}
DISPLAY = {"\\[": ("\\[", "\\]"), "$$": ("$$", "$$")}


@dataclass(frozen=True)
class ConventionsConfig:
    """Which rewrites run and toward which delimiters (olmOCR-mix-1025 uses ``\\( \\)`` and ``\\[ \\]``)."""

    inline: Literal["\\(", "$"] = option("\\(", help="inline math delimiters: \\( \\) or $ $")
    display: Literal["\\[", "$$"] = option("\\[", help="display math delimiters: \\[ \\] or $$ $$")
    split_formulas: bool = option(True, help="split inline comma-separated lists of independent formulas")
    normalize_delimiters: bool = option(True, help="rewrite math delimiters to inline / display")
    markdown_emphasis: bool = option(True, help="\\textbf{x} -> **x**, \\textit{x} / \\emph{x} -> *x* outside math")
    formulas: bool = option(True, help="latex labels (formula crops): strip outer delimiters, drop token spacing")
    max_arg_chars: int = option(10_000, help="longest \\textbf{...} argument searched for its closing brace "
                                             "(keeps unbalanced input linear)")


# ---------------------------------------------------------------------------------------------
# Protected regions: code
# ---------------------------------------------------------------------------------------------

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*$", re.MULTILINE)
_HTML_CODE = re.compile(r"<(pre|code)\b[^>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_BACKTICKS = re.compile(r"`+")
# Placeholders stand in for code and math while emphasis is rewritten; NUL never occurs in a
# valid response (schemas.page.validate rejects it), and the text is checked for it first.
_PLACEHOLDER = re.compile(r"\x00([CM])(\d+)\x00")


def _protect_code(text: str, saved: list[str]) -> str:
    """Replace code fences, HTML code elements and inline code spans by ``\\x00C<i>\\x00``."""

    def keep(chunk: str) -> str:
        saved.append(chunk)
        return f"\x00C{len(saved) - 1}\x00"

    out: list[str] = []
    pos = 0
    while True:
        m = _FENCE_OPEN.search(text, pos)
        if m is None:
            break
        fence = m.group(1)
        # an info string may not contain backticks for a backtick fence (CommonMark)
        if fence[0] == "`" and "`" in text[m.end(1): m.end()]:
            out.append(text[pos: m.end()])
            pos = m.end()
            continue
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        c = close.search(text, m.end())
        end = c.end() if c else len(text)  # an unclosed fence runs to the end of the document
        out.append(text[pos: m.start()])
        out.append(keep(text[m.start(): end]))
        pos = end
    out.append(text[pos:])
    text = "".join(out)
    text = _HTML_CODE.sub(lambda m: keep(m.group(0)), text)

    out, pos = [], 0
    no_close_from: dict[int, int] = {}  # run length -> position after which no closing run exists
    while True:
        m = _BACKTICKS.search(text, pos)
        if m is None:
            break
        n = len(m.group(0))
        if m.start() > 0 and text[m.start() - 1] == "\\" and n == 1:  # \` is a literal backtick
            out.append(text[pos: m.end()])
            pos = m.end()
            continue
        end = -1
        if no_close_from.get(n, len(text) + 1) > m.end():
            closer = re.compile(rf"(?<!`)`{{{n}}}(?!`)")
            c = closer.search(text, m.end())
            if c is None:
                no_close_from[n] = m.end()
            else:
                end = c.end()
        if end < 0:
            out.append(text[pos: m.end()])
            pos = m.end()
            continue
        out.append(text[pos: m.start()])
        out.append(keep(text[m.start(): end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Math
# ---------------------------------------------------------------------------------------------

@dataclass
class Formula:
    display: bool
    opener: str  # the source delimiter: \( \[ $ $$
    body: str


_ESCAPED_BRACKETS = re.compile(r"[\d\s,;\-\u2013]*\d[\d\s,;\-\u2013]*")
_MATH_START = re.compile(r"\\[\\$()\[\]]|\$\$|\$")


def _find_backslash_close(text: str, start: int, closer: str) -> int:
    """Index of the next unescaped ``\\)`` / ``\\]`` at or after ``start``, or -1."""
    i = text.find(closer, start)
    while i >= 0:
        run = 0
        j = i - 1
        while j >= start and text[j] == "\\":
            run += 1
            j -= 1
        if run % 2 == 0:  # the closer's backslash is not itself escaped
            return i
        i = text.find(closer, i + 1)
    return -1


def _escaped(text: str, i: int) -> bool:
    run = 0
    j = i - 1
    while j >= 0 and text[j] == "\\":
        run += 1
        j -= 1
    return run % 2 == 1


def _find_dollar_close(text: str, start: int) -> int:
    """Index of the ``$`` closing inline math whose body starts at ``start``, or -1.

    Pandoc's rule, made stricter: the first unescaped ``$`` after the body's first character
    decides. It closes when a non-space precedes it and neither a digit nor ``$`` follows;
    otherwise there is no formula (``costs $5 and $10``, ``$a$$b$`` stay text), as there is
    none across a blank line."""
    i = text.find("$", start + 1)
    while i >= 0 and _escaped(text, i):
        i = text.find("$", i + 1)
    if i < 0:
        return -1
    after = text[i + 1] if i + 1 < len(text) else ""
    if text[i - 1].isspace() or after.isdigit() or after == "$" or _BLANK_LINE.search(text, start, i):
        return -1
    return i


def _protect_math(text: str, formulas: list[Formula]) -> str:
    """Replace every delimited formula by ``\\x00M<i>\\x00`` and record it in ``formulas``."""
    out: list[str] = []
    pos = 0
    scan = 0
    # delimiter -> position after which its closer was already searched for in vain; with it each
    # kind of unclosed delimiter costs one search, so the scan stays linear on hostile input
    failed: dict[str, int] = {}
    n = len(text)
    while True:
        m = _MATH_START.search(text, scan)
        if m is None:
            break
        token = m.group(0)
        start, body_start = m.start(), m.end()
        end = -1
        if token in ("\\(", "\\["):
            closer = "\\)" if token == "\\(" else "\\]"
            if failed.get(token, n + 1) > body_start:
                c = _find_backslash_close(text, body_start, closer)
                if c < 0:
                    failed[token] = body_start
                elif _ESCAPED_BRACKETS.fullmatch(text, body_start, c):
                    pass  # Markdown-escaped brackets of a citation or number: \[12\], \(3\)
                else:
                    formulas.append(Formula(token == "\\[", token, text[body_start:c]))
                    end = c + 2
        elif token == "$$":
            if failed.get(token, n + 1) > body_start:
                c = text.find("$$", body_start)
                while c >= 0 and _escaped(text, c):
                    c = text.find("$$", c + 1)
                if c < 0:
                    failed[token] = body_start
                elif c > body_start:
                    formulas.append(Formula(True, "$$", text[body_start:c]))
                    end = c + 2
        elif token == "$" and body_start < n and not text[body_start].isspace():
            c = _find_dollar_close(text, body_start)
            if c >= 0:
                formulas.append(Formula(False, "$", text[body_start:c]))
                end = c + 1
        # else: an escape (\\, \$, \), \]) -- literal text
        if end < 0:
            scan = m.end()
            continue
        out.append(text[pos:start])
        out.append(f"\x00M{len(formulas) - 1}\x00")
        pos = scan = end
    out.append(text[pos:])
    return "".join(out)


_TOKEN = re.compile(r"\\(?:begin|end)\b|\\(?:langle|rangle|lbrace|rbrace)\b|\\[{}]|\\[A-Za-z]+|\\.|[{}()\[\],]",
                    re.DOTALL)
_OPENERS = {"{", "(", "[", "\\{", "\\langle", "\\lbrace", "\\begin"}
_CLOSERS = {"}", ")", "]", "\\}", "\\rangle", "\\rbrace", "\\end"}


def find_formulas(text: str) -> list[Formula]:
    """The formulas of ``text`` as ``rewrite`` decides what is math: code spans left out, escaped
    citation brackets (``\\[12\\]``) not math; each with its ``display`` flag."""
    return mask_code_and_math(text)[2]


def mask_code_and_math(text: str) -> tuple[str, list[str], list[Formula]]:
    """``(masked, code, formulas)``: ``text`` with its code (fences, ``<code>`` elements, inline spans)
    replaced by ``\\x00C<i>\\x00`` and then every formula by ``\\x00M<i>\\x00``, so that a pass over
    the prose (emphasis, tags) touches neither; ``unmask`` puts them back. ``text`` must hold no NUL
    (``schemas.page.validate`` rejects it in a response)."""
    code: list[str] = []
    formulas: list[Formula] = []
    return _protect_math(_protect_code(text, code), formulas), code, formulas


def unmask(masked: str, code: list[str], formulas: list[str]) -> str:
    """``masked`` (from ``mask_code_and_math``) with each code placeholder back as it was and each
    formula placeholder replaced by ``formulas[i]`` (the formula as the caller writes it)."""
    def restore(m: re.Match[str]) -> str:
        return code[int(m.group(2))] if m.group(1) == "C" else formulas[int(m.group(2))]

    # math bodies may hold code placeholders (`$a `b` c$`), so substitute until none is left
    result = _PLACEHOLDER.sub(restore, masked)
    while _PLACEHOLDER.search(result):
        result = _PLACEHOLDER.sub(restore, result)
    return result


def split_points(body: str) -> list[int]:
    """Indices of the commas in ``body`` that separate top-level expressions (see module doc)."""
    depth = 0
    points = []
    for m in _TOKEN.finditer(body):
        tok = m.group(0)
        if tok in _OPENERS:
            depth += 1
        elif tok in _CLOSERS:
            depth = max(0, depth - 1)
        elif tok == "," and depth == 0:
            i = m.start()
            if 0 < i < len(body) - 1 and body[i - 1].isdigit() and body[i + 1].isdigit():
                continue  # 1,000 or a decimal comma
            points.append(i)
    return points


_NUMBER = re.compile(r"[+-]?\d+(?:[.,]\d+)*")
_ELLIPSIS = re.compile(r"(?:\\[lcdv]?dots[a-z]*|\\ldots|\.\.\.|\u2026)")
_RELATION = re.compile(
    r"=|<|>|\\(?:in|notin|le|leq|ge|geq|lt|gt|ne|neq|equiv|approx|sim|simeq|subset|subseteq|"
    r"supset|supseteq|to|mapsto|rightarrow|leftarrow|Rightarrow|Leftrightarrow|iff|perp|mid|propto)\b"
)
# spacing commands that only pad a part: \, \; \: \! \quad \qquad and "\ "
_SPACING = re.compile(r"^(?:\s|\\[,;:! ]|\\q?quad\b)+|(?:\s|\\[,;:! ]|\\q?quad\b)+$")


def should_split(parts: list[str]) -> bool:
    """Whether comma-separated ``parts`` are independent expressions (see module doc)."""
    if len(parts) < 2 or any(not p for p in parts):
        return False
    if all(_NUMBER.fullmatch(p) for p in parts):
        return False
    if any(_ELLIPSIS.fullmatch(p) for p in parts):
        return False
    has_relation = [bool(_RELATION.search(p)) for p in parts]
    return not (has_relation[-1] and not any(has_relation[:-1]))


def split_formula(body: str) -> list[str] | None:
    """The independent expressions of an inline formula body, or None to keep it whole."""
    points = split_points(body)
    if not points:
        return None
    bounds = [-1, *points, len(body)]
    parts = [_SPACING.sub("", body[a + 1: b]) for a, b in pairwise(bounds)]
    return parts if should_split(parts) else None


def _render_formula(f: Formula, cfg: ConventionsConfig, counters: dict[str, int]) -> str:
    source = DISPLAY[f.opener] if f.display else INLINE[f.opener]
    if cfg.normalize_delimiters:
        target = DISPLAY[cfg.display] if f.display else INLINE[cfg.inline]
    else:
        target = source
    parts = split_formula(f.body) if cfg.split_formulas and not f.display else None
    if target != source:
        counters["display_delimiters" if f.display else "inline_delimiters"] += 1
    left, right = target
    if parts is None:
        body = f.body.strip() if left == "$" and not f.display else f.body
        return f"{left}{body}{right}"
    counters["split_formulas"] += 1
    return ", ".join(f"{left}{p}{right}" for p in parts)


# ---------------------------------------------------------------------------------------------
# Emphasis
# ---------------------------------------------------------------------------------------------

_EMPHASIS = re.compile(r"\\(textbf|textit|emph)\s*\{")
_BRACE = re.compile(r"\\.|[{}]", re.DOTALL)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_MARK = {"textbf": ("**", "bold"), "textit": ("*", "italic"), "emph": ("*", "italic")}


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of each ``{`` -> index of its ``}``, in one pass (escaped braces skipped)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text):
        tok = m.group(0)
        if tok == "{":
            stack.append(m.start())
        elif tok == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _emphasis(text: str, cfg: ConventionsConfig, counters: dict[str, int]) -> str:
    if not _EMPHASIS.search(text):
        return text
    return _emphasis_range(text, 0, len(text), _brace_pairs(text), cfg, counters, 0)


def _emphasis_range(text: str, begin: int, end: int, pairs: dict[int, int], cfg: ConventionsConfig,
                    counters: dict[str, int], depth: int) -> str:
    """``text[begin:end]`` with its emphasis commands rewritten (arguments recursively)."""
    out: list[str] = []
    pos = search = begin
    while depth <= 16:  # deeper nesting is left as it is
        m = _EMPHASIS.search(text, search, end)
        if m is None:
            break
        close = pairs.get(m.end() - 1, -1)
        if (close < 0 or close >= end or close - m.end() > cfg.max_arg_chars or _escaped(text, m.start())
                or _BLANK_LINE.search(text, m.end(), close)):
            search = m.end()
            continue
        marker, kind = _MARK[m.group(1)]
        inner = _emphasis_range(text, m.end(), close, pairs, cfg, counters, depth + 1)
        stripped = inner.strip()
        lead = inner[: len(inner) - len(inner.lstrip())]
        trail = inner[len(inner.rstrip()):]
        out.append(text[pos: m.start()])
        out.append(f"{lead}{marker}{stripped}{marker}{trail}" if stripped else inner)
        counters[kind] += 1
        pos = search = close + 1
    out.append(text[pos:end])
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# The rewrite and the stage
# ---------------------------------------------------------------------------------------------

def rewrite(text: str, cfg: ConventionsConfig = ConventionsConfig()) -> tuple[str, dict[str, int]]:
    """``text`` rewritten to the convention, and the count of each rewrite kind."""
    counters = dict.fromkeys(COUNTERS, 0)
    if "\x00" in text:
        raise RecordError("nul_in_response", "response contains NUL characters")
    masked, code, formulas = mask_code_and_math(text)
    if cfg.markdown_emphasis:
        masked = _emphasis(masked, cfg, counters)
    return unmask(masked, code, [_render_formula(f, cfg, counters) for f in formulas]), counters


FORMULA_COUNTERS = ("formula_delimiters", "formula_spacing")
_WRAPPERS = (
    re.compile(r"^\$\$(.*)\$\$$", re.DOTALL), re.compile(r"^\$(.*)\$$", re.DOTALL),
    re.compile(r"^\\\((.*)\\\)$", re.DOTALL), re.compile(r"^\\\[(.*)\\\]$", re.DOTALL),
    re.compile(r"^\\begin\{(equation\*?|displaymath|math)\}(.*)\\end\{\1\}$", re.DOTALL),
)
_TEX_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|\s+|.", re.DOTALL)
_TEXT_COMMANDS = {"\\text", "\\mbox", "\\hbox", "\\textrm", "\\textbf", "\\textit", "\\textsf", "\\texttt",
                  "\\textnormal", "\\textup", "\\textsc", "\\textsl", "\\emph"}


def strip_formula_delimiters(latex: str) -> str:
    """``latex`` without delimiters enclosing all of it (repeatedly: ``$$\\[x\\]$$`` -> ``x``)."""
    text = latex.strip()
    while True:
        for wrapper in _WRAPPERS:
            m = wrapper.match(text)
            if m and m.group(m.lastindex).strip():
                inner = m.group(m.lastindex).strip()
                # "$a$ + $b$" is not wrapped in one pair: the inside must not close and reopen it
                if wrapper.pattern.startswith("^\\$") and "$" in inner.replace("\\$", ""):
                    continue
                text = inner
                break
        else:
            return text


def compact_formula_spacing(latex: str) -> str:
    """Math-mode spaces TeX ignores removed (see the module doc); text-mode arguments keep one space."""
    tokens = _TEX_TOKEN.findall(latex)
    out: list[str] = []
    depth = 0  # brace depth
    text_until: list[int] = []  # brace depths at which text-mode arguments close
    pending_text = False
    for i, tok in enumerate(tokens):
        in_text = bool(text_until)
        if tok.isspace():
            prev = out[-1] if out else ""
            nxt = next((t for t in tokens[i + 1:] if not t.isspace()), "")
            if in_text:
                if out and not out[-1].isspace():
                    out.append(" ")
            elif re.fullmatch(r"\\[A-Za-z]+", prev) and nxt[:1].isalpha():
                out.append(" ")
            continue
        if tok == "{":
            depth += 1
            if pending_text:
                text_until.append(depth)
                pending_text = False
        elif tok == "}":
            if text_until and text_until[-1] == depth:
                text_until.pop()
            depth = max(0, depth - 1)
        else:
            pending_text = tok in _TEXT_COMMANDS
        out.append(tok)
    return "".join(out).strip()


def rewrite_formula(latex: str, cfg: ConventionsConfig = ConventionsConfig()) -> tuple[str, dict[str, int]]:
    """A bare formula label in the convention (outer delimiters off, token spacing compacted), and counts."""
    counters = dict.fromkeys(FORMULA_COUNTERS, 0)
    text = strip_formula_delimiters(latex)
    if text != latex.strip():
        counters["formula_delimiters"] += 1
    compact = compact_formula_spacing(text)
    if compact != " ".join(text.split()):
        counters["formula_spacing"] += 1
    return compact, counters


class ConventionsStage:
    """Rewrites Markdown/text responses to one convention; counts each rewrite kind."""

    name = "conventions"

    def __init__(self, cfg: ConventionsConfig = ConventionsConfig()):
        if cfg.inline not in INLINE:
            raise ValueError(f"conventions: inline must be one of {sorted(INLINE)}, got {cfg.inline!r}")
        if cfg.display not in DISPLAY:
            raise ValueError(f"conventions: display must be one of {sorted(DISPLAY)}, got {cfg.display!r}")
        self.cfg = cfg
        self._provenance = ProvenanceStep(f"clean:{self.name}", VERSION, params_hash(asdict(cfg)))
        self._katex_cache: str | None = None  # bind_output: the run's; None: the default cache

    resolved_inputs = staticmethod(katex_inputs)  # the installed KaTeX: math tests re-checked on a rewrite

    def bind_output(self, output: str) -> None:
        """Renders of the labels' formulas (``math`` tests checked after a rewrite) are cached in the run's
        output (``schemas.math_unit_tests.run_cache_dir``), never the user's home. Called before any record."""
        if output:
            self._katex_cache = run_cache_dir(output)

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        if not isinstance(record.response, str):
            raise RecordError("bad_response", f"response must be a string, got {type(record.response).__name__}")
        finding: dict[str, Any]
        if record.response_format == "latex" and self.cfg.formulas:
            text, counters = rewrite_formula(record.response, self.cfg)
            finding = {"changed": text != record.response, "counters": counters}
            record.response = text
        elif record.response_format not in FORMATS:
            finding = {"skipped": f"response_format {record.response_format}", "counters": dict.fromkeys(COUNTERS, 0)}
        else:
            text, counters = rewrite(record.response, self.cfg)
            finding = {"changed": text != record.response, "counters": counters}
            record.response = text
        if finding.get("changed") and record.unit_tests:
            # e.g. a math test of `\(a=1, b=2\)` fails once the list is split into one formula per item
            kept = passing_tests(record.unit_tests, record.response, self._katex_cache)
            finding["counters"] = {**finding["counters"], "tests_dropped": len(record.unit_tests) - len(kept)}
            record.unit_tests = kept
        record.quality[self.name] = finding
        record.provenance.append(self._provenance)
        return [record]
