"""Seeded generator of ``Formula`` blocks for JinaOCRSynth's formula suite (Jina-OCR-v1 section 4.2).

The suite targets the confusions OCR models make on formulas:

* ``accent``: ``\\hat`` vs ``\\widehat``, ``\\bar`` vs ``\\overline``, ``\\tilde`` vs ``\\widetilde``,
  ``\\vec``, ``\\dot``;
* ``font``: ``\\mathbf`` vs ``\\boldsymbol``, ``\\mathcal`` vs ``\\mathscr`` (KaTeX supports
  ``\\mathscr`` for capital letters only, so it is only applied to capitals), ``\\mathbb``,
  ``\\mathrm``;
* ``matrix``: ``pmatrix``, ``bmatrix``, ``vmatrix``, ``array``, ``cases``, ``aligned``;
* ``macro``: ``\\operatorname``, ``\\mathrm{d}`` differentials, ``\\left``/``\\right`` delimiters;
* ``unicode``: Greek letters and operators written as Unicode glyphs (``α``, ``≤``, ``∑``) rather
  than macros, which KaTeX renders identically.

Every formula is built from a template with random symbols, so the same ``random.Random`` state
gives the same formula. On Chinese pages ``localize_formula`` writes the ``\\text{}`` words in Chinese.
Row breaks are written ``\\\\ `` followed by a space so that a row starting
with a bracket can never read as a ``\\(`` or ``\\[`` delimiter in the reference Markdown.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import replace

from synth.blocks import Formula

CATEGORIES: tuple[str, ...] = ("accent", "font", "matrix", "macro", "unicode")

_LATIN = "abcdefghkmnpqrstuvwxyz"
_CAPS = "ABCDEFGHKLMNPRSTUVWXYZ"
_GREEK = ("alpha", "beta", "gamma", "delta", "theta", "lambda", "mu", "sigma", "phi", "omega", "rho", "tau")
_GREEK_UNICODE = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "theta": "θ", "lambda": "λ",
                  "mu": "μ", "sigma": "σ", "phi": "φ", "omega": "ω", "rho": "ρ", "tau": "τ"}
_FUNCS = ("sin", "cos", "exp", "log", "tan")


def _var(rng: random.Random) -> str:
    return rng.choice(_LATIN)


def _greek(rng: random.Random) -> str:
    return "\\" + rng.choice(_GREEK)


def _num(rng: random.Random, lo: int = 2, hi: int = 9) -> str:
    return str(rng.randint(lo, hi))


def _entry(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        return str(rng.randint(-9, 12))
    if kind < 0.7:
        return f"{_var(rng)}_{{{rng.randint(1, 3)}{rng.randint(1, 3)}}}"
    if kind < 0.85:
        return f"\\frac{{{rng.randint(1, 5)}}}{{{rng.randint(2, 9)}}}"
    return _greek(rng)


# -- categories -----------------------------------------------------------------------------------

def _accent(rng: random.Random) -> str:
    x, y = _var(rng), _var(rng)
    g = _greek(rng)
    narrow, wide = rng.choice([("\\hat", "\\widehat"), ("\\bar", "\\overline"), ("\\tilde", "\\widetilde")])
    n = _num(rng)
    templates = [
        f"{narrow}{{{x}}}_{{{n}}} = {wide}{{{x}{y}}} + {narrow}{{{g}}}",
        f"{wide}{{{x} + {y}}} \\neq {narrow}{{{x}}} + {narrow}{{{y}}}",
        f"\\vec{{{x}}} \\cdot \\vec{{{y}}} = \\lVert \\vec{{{x}}} \\rVert \\, \\lVert \\vec{{{y}}} \\rVert \\cos {g}",
        f"\\dot{{{x}}}(t) = -{n}\\,{narrow}{{{x}}}(t) + \\ddot{{{y}}}(t)",
        f"{narrow}{{{g}}}_{{{x}}} = \\frac{{1}}{{{n}}} \\sum_{{i=1}}^{{{n}}} {wide}{{{x}_i {y}_i}}",
    ]
    return rng.choice(templates)


def _font(rng: random.Random) -> str:
    a, b = rng.sample(_CAPS, 2)
    x = _var(rng)
    g = _greek(rng)
    bold = rng.choice(["\\mathbf", "\\boldsymbol"])
    script = rng.choice(["\\mathcal", "\\mathscr"])
    n = _num(rng)
    templates = [
        f"{bold}{{{x}}} = {bold}{{{a}}}\\,{bold}{{{x}}} + \\boldsymbol{{{g}}}",
        f"{script}{{{a}}} \\subseteq {script}{{{b}}} \\times \\mathbb{{R}}^{{{n}}}",
        f"\\mathbf{{{a}}}^{{\\top}} \\boldsymbol{{{x}}} = \\boldsymbol{{{g}}} \\in \\mathbb{{R}}^{{{n}}}",
        f"\\mathcal{{{a}}}({x}) = \\mathscr{{{b}}}({x}) + \\mathrm{{{a}{b}}}_{{{n}}}",
        f"\\Pr_{{{script}{{{a}}}}}\\left[ {bold}{{{x}}} \\in \\mathbb{{Z}} \\right] \\leq \\frac{{1}}{{{n}}}",
    ]
    return rng.choice(templates)


def _matrix(rng: random.Random) -> str:
    env = rng.choice(["pmatrix", "bmatrix", "vmatrix", "array", "cases", "aligned"])
    x = _var(rng)
    if env in ("pmatrix", "bmatrix", "vmatrix"):
        size = rng.choice([2, 3])
        rows = [" & ".join(_entry(rng) for _ in range(size)) for _ in range(size)]
        body = " \\\\ ".join(rows)
        lhs = rng.choice(["A", "M", "\\Sigma", "J"])
        return f"{lhs} = \\begin{{{env}}} {body} \\end{{{env}}}"
    if env == "array":
        cols = rng.choice([2, 3])
        spec = rng.choice(["c" * cols, "r" * cols, "l|" + "c" * (cols - 1)])
        rows = [" & ".join(_entry(rng) for _ in range(cols)) for _ in range(rng.choice([2, 3]))]
        body = " \\\\ ".join(rows)
        return f"\\left( \\begin{{array}}{{{spec}}} {body} \\end{{array}} \\right)"
    if env == "cases":
        n = _num(rng)
        return (f"f({x}) = \\begin{{cases}} {x}^{{{n}}} & \\text{{if }} {x} \\geq 0 \\\\ "
                f"-{x} & \\text{{otherwise}} \\end{{cases}}")
    a, b = _num(rng), _num(rng)
    y = _var(rng)
    return (f"\\begin{{aligned}} {x} + {y} &= {a} \\\\ {a}{x} - {y} &= {b} \\\\ "
            f"{x} &= \\frac{{{int(a) + int(b)}}}{{{int(a) + 1}}} \\end{{aligned}}")


def _macro(rng: random.Random) -> str:
    x = _var(rng)
    n = _num(rng)
    op = rng.choice(["rank", "tr", "sgn", "argmax", "diag", "Var", "Cov"])
    f = rng.choice(_FUNCS)
    templates = [
        f"\\operatorname{{{op}}}(A) \\leq {n}",
        f"\\int_{{0}}^{{{n}}} \\{f}({x}) \\, \\mathrm{{d}}{x} = F({n}) - F(0)",
        f"\\frac{{\\mathrm{{d}}}}{{\\mathrm{{d}}{x}}} \\left( {x}^{{{n}}} \\right) = {n}{x}^{{{int(n) - 1}}}",
        (f"\\left\\lvert \\sum_{{k=1}}^{{{n}}} a_k \\right\\rvert \\leq "
         f"\\left( \\sum_{{k=1}}^{{{n}}} \\lvert a_k \\rvert^2 \\right)^{{1/2}}"),
        (f"\\operatorname{{{op}}}\\left[ {x} \\right] = "
         f"\\mathbb{{E}}\\left[ {x}^2 \\right] - \\left( \\mathbb{{E}}[{x}] \\right)^2"),
        f"\\lim_{{{x} \\to 0}} \\frac{{\\{f}({n}{x})}}{{{x}}} = L",
    ]
    return rng.choice(templates)


def _unicode(rng: random.Random) -> str:
    g1, g2 = rng.sample(_GREEK, 2)
    u1, u2 = _GREEK_UNICODE[g1], _GREEK_UNICODE[g2]
    x = _var(rng)
    n = _num(rng)
    templates = [
        f"{u1} + {u2} ≤ {n}{x}",
        f"∑_{{i=1}}^{{{n}}} {x}_i ≥ {u1}",
        f"{x} ∈ ℝ^{{{n}}}, \\quad {u1} → ∞",
        f"{u1}_{{{x}}} × {u2} ≠ 0",
        f"∀ {x} ∈ A : \\ {u1}({x}) ≤ {u2}({x})",
    ]
    return rng.choice(templates)


_GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "accent": _accent, "font": _font, "matrix": _matrix, "macro": _macro, "unicode": _unicode,
}


def generate_formula(rng: random.Random, category: str | None = None, *, display: bool = True) -> Formula:
    """One formula of ``category`` (random category when ``None``)."""
    if category is None:
        category = rng.choice(CATEGORIES)
    if category not in _GENERATORS:
        raise ValueError(f"unknown formula category {category!r}; expected one of {list(CATEGORIES)}")
    return Formula(latex=_GENERATORS[category](rng), display=display, category=category)


def generate_formulas(seed: int, n: int, categories: tuple[str, ...] = CATEGORIES) -> list[Formula]:
    """``n`` display formulas cycling through ``categories`` in a seeded order."""
    rng = random.Random(f"formulas:{seed}")
    cats = list(categories)
    rng.shuffle(cats)
    return [generate_formula(rng, cats[i % len(cats)]) for i in range(n)]


def inline_formula(rng: random.Random) -> str:
    """A short formula for inline math inside a paragraph (no delimiters)."""
    x, y = rng.sample(_LATIN, 2)
    g = _greek(rng)
    n = _num(rng)
    return rng.choice([
        f"{x}^{{{n}}}",
        f"{g} = {rng.randint(1, 9)}.{rng.randint(0, 9)}{rng.randint(0, 9)}",
        f"\\hat{{{x}}}_{{{n}}}",
        f"{x} \\leq {y}",
        f"\\mathbf{{{x}}} \\in \\mathbb{{R}}^{{{n}}}",
        f"O({x} \\log {x})",
        f"\\bar{{{x}}} \\pm {n}{g}",
    ])


# -- Chinese pages ---------------------------------------------------------------------------------
_ZH_TEXT = {"if ": "若 ", "otherwise": "其他情况"}
_TEXT_RE = re.compile(r"\\text\{([^{}]*)\}")
_ZH_NOTES = ("（对所有样本成立）", "（单位：米）", "（由实验测得）", "（$n$ 为样本数）", "（见上文定义）", "（近似值）")


def localize_formula(formula: Formula, language: str) -> Formula:
    """The formula with its words in ``language`` (``zh``: ``\\text{}`` words in Simplified Chinese, and
    about half the display formulas gain a Chinese ``\\text{}`` note, chosen by a hash of the source so
    no RNG is drawn); ``en`` returns it as is."""
    if language != "zh":
        return formula
    latex = _TEXT_RE.sub(lambda m: "\\text{" + _ZH_TEXT.get(m.group(1), m.group(1)) + "}", formula.latex)
    h = hashlib.sha256(formula.latex.encode("utf-8")).digest()
    if formula.display and "\\text{" not in latex and h[0] % 2 == 0 and "aligned" not in latex:
        note = _ZH_NOTES[h[1] % len(_ZH_NOTES)].replace("$n$", "n")
        latex = f"{latex} \\quad \\text{{{note}}}"
    return replace(formula, latex=latex)
