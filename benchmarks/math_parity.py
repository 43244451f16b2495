"""Agreement of pagemill's math check with olmOCR-Bench's own, run from an olmOCR checkout as the reference.

    git clone https://github.com/allenai/olmocr /tmp/olmocr    # any checkout; only its code is run
    pip install beautifulsoup4 lxml fuzzysearch                 # what olmOCR's bench code imports
    python benchmarks/math_parity.py --olmocr /tmp/olmocr [--katex {pagemill,olmocr}] [--no-edits]

Two sets, each judged by both checkers:

1. **sample**: every `math` test in the JSONL files of olmOCR's `olmocr/bench/sample_data` on every
   candidate transcription there (`<folder>/<pdfbase>_pg{N}_repeat{K}.md`): olmOCR's
   `MathTest.run` against `schemas.unit_tests` `MathTest.check`.
2. **edits** (made another way: the sample's reference formulas edited by fixed rules, not
   transcriptions): each reference formula against respellings that render alike, faces
   (`\\mathcal`, `\\mathrm`, `\\mathbf` ...), a subscript made a superscript, a changed symbol, a
   dropped term, extra spacing, an embedding in a larger formula, a negated relation (`\\neq`,
   `\\notin`), a decoration on a letter (`\\bar`, `\\sqrt`, `\\overline`, `\\cancel`), a fraction bar
   dropped (`\\atop`); olmOCR's `compare_rendered_equations` (after its exact-string shortcut) against
   `formulas_match`. pagemill fails every negation and decoration on purpose (docs/judging.md, Math);
   olmOCR-Bench passes most decorations (it ignores rules and SVG, and what is drawn over the glyphs it
   maps) and fails the negations, by its neighbour rule (the overlay glyph competes as a neighbour).

Prints each disagreement and the agreement per set and per edit kind. olmOCR's renderer is run as
it is, except that it gets Debian's Chromium (`schemas.browser.launch_chromium`) instead of
Playwright's download and a fresh equation cache in a temporary folder; pagemill's renderer also
starts with an empty cache. `--katex olmocr` renders pagemill's side with the KaTeX build olmOCR
ships (`olmocr/bench/katex/katex.min.js`, with pagemill's KaTeX fonts), to see what the KaTeX
version changes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schemas import math_render  # noqa: E402
from schemas.browser import launch_chromium, shared_browser  # noqa: E402
from schemas.math_render import KATEX_DIR, KatexRenderer, formulas_match  # noqa: E402
from schemas.unit_tests import unit_test_from_dict  # noqa: E402


def load_olmocr(checkout: Path, cache_db: Path):  # noqa: ANN201 - olmOCR's modules, typed there
    """Import olmOCR's bench code from `checkout`, its renderer pointed at Debian's Chromium and a fresh cache."""
    if not (checkout / "olmocr" / "bench" / "katex" / "render.py").is_file():
        sys.exit(f"{checkout} is not an allenai/olmocr checkout (no olmocr/bench/katex/render.py)")
    sys.path.insert(0, str(checkout))
    try:
        from olmocr.bench import tests as olm_tests
        from olmocr.bench.katex import render as olm_render
    except ImportError as exc:
        sys.exit(f"olmOCR's bench code does not import ({exc}); pip install beautifulsoup4 lxml fuzzysearch")

    local = threading.local()

    class _Owner:  # what olmOCR's `_get_thread_local_browser` returns: an object with `.browser`
        def __init__(self) -> None:
            self.handle = launch_chromium()
            self.browser = self.handle.browser

    def thread_browser() -> _Owner:
        owner = getattr(local, "owner", None)
        if owner is None:
            owner = local.owner = _Owner()
        return owner

    olm_render._get_thread_local_browser = thread_browser
    olm_render.equation_cache = olm_render.EquationCache(str(cache_db))
    return olm_tests, olm_render


def olmocr_katex_dir(checkout: Path, into: Path) -> Path:
    """A KaTeX package folder holding olmOCR's KaTeX build and pagemill's KaTeX fonts."""
    src = checkout / "olmocr" / "bench" / "katex"
    js = (src / "katex.min.js").read_text(encoding="utf-8")
    found = re.search(r'version:"([0-9.]+)"', js)
    dist = into / "dist"
    dist.mkdir(parents=True)
    (dist / "katex.min.js").write_text(js, encoding="utf-8")
    (dist / "katex.min.css").write_text((src / "katex.min.css").read_text(encoding="utf-8"), encoding="utf-8")
    (dist / "fonts").symlink_to((KATEX_DIR / "dist" / "fonts").resolve())
    version = found.group(1) if found else "unknown"
    (into / "package.json").write_text(json.dumps({"name": "katex", "version": f"{version}-olmocr"}))
    return into


# -- set 1: olmOCR's sample data ---------------------------------------------------------------


def sample_cases(sample: Path) -> Iterator[tuple[dict, Path]]:
    """(test line, candidate .md) for every math test and every transcription of its page."""
    folders = [d for d in sorted(sample.iterdir()) if d.is_dir() and d.name != "pdfs"]
    for jsonl in sorted(sample.glob("*.jsonl")):
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            data = json.loads(line)
            if data.get("type") != "math":
                continue
            stem = Path(data["pdf"]).stem
            for folder in folders:
                for md in sorted(folder.rglob(f"{stem}_pg{data['page']}_repeat*.md")):
                    yield data, md


# -- set 2: edits of the reference formulas ------------------------------------------------------

_LETTER = re.compile(r"(?<![\\A-Za-z{])([A-Za-z])(?![A-Za-z])")


def _first(pattern: str, repl: str | Callable[[re.Match[str]], str]) -> Callable[[str], str | None]:
    rx = re.compile(pattern)

    def edit(f: str) -> str | None:
        out = rx.sub(repl, f, count=1)
        return out if out != f else None

    return edit


def _face(command: str) -> Callable[[str], str | None]:
    return _first(_LETTER.pattern, lambda m: f"{command}{{{m.group(1)}}}")


def _unbrace_scripts(f: str) -> str | None:
    out = re.sub(r"([_^])\{([A-Za-z0-9])\}", r"\1\2", f)
    return out if out != f else None


def _drop_last_term(f: str) -> str | None:
    cut = max(f.rfind("+"), f.rfind("="))
    return f[:cut] if cut > 0 else None


_ARG = r"\{((?:[^{}]|\{[^{}]*\})*)\}"  # a braced argument, one level of braces inside


def _frac_to_atop(f: str) -> str | None:
    out = re.sub(r"\\frac" + _ARG + _ARG, r"{\1 \\atop \2}", f, count=1)
    return out if out != f else None


EDITS: dict[str, tuple[str, Callable[[str], str | None]]] = {
    # kind: (what olmOCR-Bench's rule is meant to say about it, edit)
    "unbraced scripts": ("same", _unbrace_scripts),
    "spaces": ("same", lambda f: " ".join(re.findall(r"\\[A-Za-z]+|\\.|\S", f))),  # math mode: no \text
    "embedded": ("same", lambda f: f"y = {f} + 1"),
    "no \\left/\\right": ("same", lambda f: (re.sub(r"\\(left|right)(?![A-Za-z])", "", f) or None)
                          if "\\left" in f else None),
    "\\frac -> \\dfrac": ("same", _first(r"\\frac(?![A-Za-z])", r"\\dfrac")),
    "\\mathcal": ("face", _face(r"\mathcal")),
    "\\mathrm": ("face", _face(r"\mathrm")),
    "\\mathbb": ("face", _first(r"(?<![\\A-Za-z{])([A-Z])(?![A-Za-z])", lambda m: rf"\mathbb{{{m.group(1)}}}")),
    "\\mathbf": ("bold", _face(r"\mathbf")),
    "\\boldsymbol": ("bold", _face(r"\boldsymbol")),
    "sub -> sup": ("different", _first(r"_", "^")),
    "sup -> sub": ("different", _first(r"\^", "_")),
    "letter changed": ("different", _first(_LETTER.pattern, lambda m: "q" if m.group(1) != "q" else "w")),
    "+ -> -": ("different", _first(r"\+", "-")),
    "term dropped": ("different", _drop_last_term),
    "\\quad after =": ("spacing", _first(r"=", r"= \\quad ")),
    "= -> \\neq": ("negated", _first(r"=", r"\\neq ")),
    "\\in -> \\notin": ("negated", _first(r"\\in(?![A-Za-z])", r"\\notin")),
    "\\bar": ("decorated", _face(r"\bar")),
    "\\sqrt": ("decorated", _face(r"\sqrt")),
    "\\overline": ("decorated", _face(r"\overline")),
    "\\cancel": ("decorated", _face(r"\cancel")),
    "\\frac -> \\atop": ("different", _frac_to_atop),
}


def edit_pairs(references: list[str]) -> Iterator[tuple[str, str, str]]:
    """(kind, reference, candidate) for each edit that changes a reference."""
    for ref in references:
        for kind, (_, edit) in EDITS.items():
            cand = edit(ref)
            if cand is not None and cand != ref:
                yield kind, ref, cand


# -- main ----------------------------------------------------------------------------------------


def _report(title: str, rows: list[tuple[str, bool, bool]]) -> None:
    agree = sum(o == p for _, o, p in rows)
    both = Counter((o, p) for _, o, p in rows)
    print(f"\n{title}: {agree}/{len(rows)} agree ({100 * agree / max(1, len(rows)):.1f}%); "
          f"olmOCR pass {sum(o for _, o, _ in rows)}, pagemill pass {sum(p for _, _, p in rows)}, "
          f"olmOCR-only pass {both[(True, False)]}, pagemill-only pass {both[(False, True)]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--olmocr", type=Path, required=True, help="an allenai/olmocr checkout (the reference's code)")
    ap.add_argument("--sample-data", type=Path, help="default: <olmocr>/olmocr/bench/sample_data")
    ap.add_argument("--katex", choices=("pagemill", "olmocr"), default="pagemill",
                    help="KaTeX build for pagemill's side (default: pagemill's pinned one)")
    ap.add_argument("--no-edits", action="store_true", help="only the sample data")
    args = ap.parse_args()
    sample = args.sample_data or args.olmocr / "olmocr" / "bench" / "sample_data"

    with tempfile.TemporaryDirectory(prefix="math-parity-") as tmp:
        olm_tests, olm_render = load_olmocr(args.olmocr.resolve(), Path(tmp) / "olmocr-equations.db")
        katex_dir = olmocr_katex_dir(args.olmocr, Path(tmp) / "katex") if args.katex == "olmocr" else KATEX_DIR
        renderer = KatexRenderer(Path(tmp) / "pagemill-cache", browser=shared_browser(), katex_dir=katex_dir)
        math_render.default_renderer = lambda: renderer  # MathTest.check renders through this one
        print(f"olmOCR checkout {args.olmocr}; pagemill KaTeX {renderer.version}")
        start = time.perf_counter()

        rows: list[tuple[str, bool, bool]] = []
        for data, md in sample_cases(sample):
            markdown = md.read_text(encoding="utf-8")
            olm_ok, olm_why = olm_tests.load_single_test(dict(data)).run(markdown)
            pm_ok, pm_why = unit_test_from_dict(data).check(markdown)
            name = f"{data['id']} on {md.relative_to(sample)}"
            rows.append((name, olm_ok, pm_ok))
            if olm_ok != pm_ok:
                print(f"DIFF {name}: olmOCR {olm_ok} ({olm_why[:100]}), pagemill {pm_ok} ({pm_why[:200]})")
        _report("sample (math tests x transcriptions)", rows)

        if not args.no_edits:
            references = list(dict.fromkeys(data["math"] for data, _ in sample_cases(sample)))
            by_kind: dict[str, list[tuple[str, bool, bool]]] = defaultdict(list)
            for kind, ref, cand in edit_pairs(references):
                ref_render = olm_render.render_equation(ref)
                olm_ok = cand == ref
                if not olm_ok:
                    hyp_render = olm_render.render_equation(cand)
                    olm_ok = bool(hyp_render and not hyp_render.error and ref_render and not ref_render.error
                                  and olm_render.compare_rendered_equations(ref_render, hyp_render))
                pm_ok, _ = formulas_match(ref, cand, renderer)
                by_kind[kind].append((f"{ref} | {cand}", olm_ok, pm_ok))
                if olm_ok != pm_ok:
                    print(f"DIFF [{kind}] {ref!r} vs {cand!r}: olmOCR {olm_ok}, pagemill {pm_ok}")
            print(f"\n{'edit kind':18} {'meant':10} {'pairs':>5} {'olmOCR':>6} {'pagemill':>8} {'agree':>5}")
            for kind, kind_rows in by_kind.items():
                print(f"{kind:18} {EDITS[kind][0]:10} {len(kind_rows):5d} {sum(o for _, o, _ in kind_rows):6d} "
                      f"{sum(p for _, _, p in kind_rows):8d} {sum(o == p for _, o, p in kind_rows):5d}")
            everything = [row for kind_rows in by_kind.values() for row in kind_rows]
            _report("edits (all kinds)", everything)
            meant_same = [r for k, rs in by_kind.items() if EDITS[k][0] in ("same", "face") for r in rs]
            _report("edits that render the same formula (respellings, faces)", meant_same)
            changed = [r for k, rs in by_kind.items() if EDITS[k][0] in ("negated", "decorated") for r in rs]
            _report("edits that negate a relation or decorate a letter (pagemill fails these on purpose)", changed)
        print(f"\n{time.perf_counter() - start:.0f} s")
        renderer.close()


if __name__ == "__main__":
    main()
