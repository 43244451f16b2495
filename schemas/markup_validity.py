"""Structural validity of a transcription: LaTeX brace and environment balance, HTML tag closure,
and HTML conformance to an allow-list of tags and attributes.

Formulas (``schemas.formula_metrics.find_math``) are checked apart from the text around them, and
tags inside formulas are ignored. Each metric returns a ``schemas.edit_distance.MetricResult``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from html.parser import HTMLParser

from schemas.edit_distance import MetricResult, mask_spans, problem_details
from schemas.formula_metrics import find_math

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
    segments.append(("text", mask_spans(text, [(s, e) for s, e, _ in spans])))
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
                                                         **problem_details(problems)}


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
    parser.feed(mask_spans(text, [(s, e) for s, e, _ in find_math(text)]))
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
    return (1.0 - errors / total if total else 1.0), {"tags": total, "errors": errors, **problem_details(problems)}


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
    return (1.0 - bad / tags if tags else 1.0), {"tags": tags, "violations": bad, **problem_details(problems)}
