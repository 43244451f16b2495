"""Math-check throughput: olmOCR-Bench-style formula comparisons per second, cold and cached.

    python benchmarks/math_checks.py [--pairs 200] [--seed 0]

Builds ``--pairs`` (reference, candidate) LaTeX pairs with distinct formulas: respellings that
render alike (braced one-character scripts, a trailing thin space), formulas embedded in larger
ones, small edits that must fail (a superscript made a subscript, an operator changed), and
formulas KaTeX rejects. Then, with an empty cache folder:

1. cold: `formulas_match` pair by pair, every formula rendered in Chromium (browser start-up
   timed separately);
2. cold, batched: a fresh cache, all formulas rendered in one `render_many` call, then compared;
3. cached: a new renderer on the cache of run 1 (no browser at all), the same pairs again.

Prints checks/s for each and the outcome counts, which must agree between the runs.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schemas.browser import shared_browser  # noqa: E402
from schemas.math_render import KatexRenderer, compare_rendered, formulas_match  # noqa: E402

ATOMS = ["x", "y", "z", "a", "b", "n", "k", r"\alpha", r"\beta", r"\theta", r"\lambda", r"\pi", "1", "2", "3"]
OPS = ["+", "-", "=", r"\cdot", r"\leq", r"\times"]


def _term(rng: random.Random, depth: int = 0) -> str:
    kind = rng.randrange(7 if depth < 2 else 3)
    a = rng.choice(ATOMS)
    if kind == 0:
        return a
    if kind == 1:
        return f"{a}^{rng.choice('23n')}"
    if kind == 2:
        return f"{a}_{rng.choice('ijk0')}"
    if kind == 3:
        return rf"\frac{{{_expr(rng, depth + 1)}}}{{{_expr(rng, depth + 1)}}}"
    if kind == 4:
        return rf"\sqrt{{{_expr(rng, depth + 1)}}}"
    if kind == 5:
        return rf"\sum_{{i=1}}^{{{rng.choice('nNm')}}} {_term(rng, depth + 1)}"
    return rf"\left( {_expr(rng, depth + 1)} \right)"


def _expr(rng: random.Random, depth: int = 0) -> str:
    parts = [_term(rng, depth)]
    for _ in range(rng.randrange(1, 4)):
        parts += [rng.choice(OPS), _term(rng, depth)]
    return " ".join(parts)


def build_pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(kind, reference, candidate) triples over distinct formulas."""
    rng = random.Random(seed)
    seen: set[str] = set()
    pairs: list[tuple[str, str, str]] = []
    kinds = ["respelled", "embedded", "edited", "rejected"]
    while len(pairs) < n:
        ref = _expr(rng)
        kind = kinds[len(pairs) % len(kinds)]
        if kind == "respelled":
            cand = re.sub(r"([_^])([A-Za-z0-9])", r"\1{\2}", ref) + r"\,"
        elif kind == "embedded":
            cand = rf"{rng.choice(ATOMS)} = {ref} + {rng.choice(ATOMS)}"
        elif kind == "edited":  # a superscript made a subscript, else one operator changed
            cand = re.sub(r"\^([A-Za-z0-9])", r"_\1", ref, count=1)
            if cand == ref:
                cand = re.sub(r" (\+|-|=) ", lambda m: " - " if m.group(1) != "-" else " + ", ref, count=1)
        else:
            cand = ref.replace("}", "", 1) if "}" in ref else ref + r"\frac{"
        if ref in seen or cand in seen or cand == ref:
            continue
        seen.update((ref, cand))
        pairs.append((kind, ref, cand))
    return pairs


def run_pairs(renderer: KatexRenderer, pairs: list[tuple[str, str, str]]) -> tuple[float, Counter]:
    outcomes: Counter = Counter()
    start = time.perf_counter()
    for kind, ref, cand in pairs:
        ok, _ = formulas_match(ref, cand, renderer)
        outcomes[(kind, ok)] += 1
    return time.perf_counter() - start, outcomes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pairs = build_pairs(args.pairs, args.seed)
    n_formulas = len({f for _, r, c in pairs for f in (r, c)})

    t0 = time.perf_counter()
    shared_browser()
    launch_s = time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as cold_dir, tempfile.TemporaryDirectory() as batch_dir:
        with KatexRenderer(cold_dir) as cold:
            t0 = time.perf_counter()
            cold.render("x")  # opens the page and loads KaTeX and its fonts
            page_s = time.perf_counter() - t0
            cold.render_count = 0
            cold_s, cold_out = run_pairs(cold, pairs)
            rendered = cold.render_count

        with KatexRenderer(batch_dir) as batch:
            batch.render("x")
            t0 = time.perf_counter()
            renders = batch.render_many([f for _, r, c in pairs for f in (r, c)])
            batch_out: Counter = Counter()
            for (kind, _, _), ref, cand in zip(pairs, renders[0::2], renders[1::2], strict=True):
                batch_out[(kind, compare_rendered(ref, cand)[0])] += 1
            batch_s = time.perf_counter() - t0

        with KatexRenderer(cold_dir) as cached:
            cached_s, cached_out = run_pairs(cached, pairs)
            assert cached.render_count == 0 and not cached.page_open

    assert cold_out == cached_out == batch_out, (cold_out, cached_out, batch_out)
    print(f"pairs: {len(pairs)} ({n_formulas} distinct formulas, {rendered} rendered cold)")
    print(f"browser launch: {launch_s:.2f} s; page + KaTeX + fonts: {page_s:.2f} s (once per process)")
    print(f"cold:          {len(pairs) / cold_s:8.1f} checks/s  ({cold_s:.2f} s, one pair at a time)")
    print(f"cold, batched: {len(pairs) / batch_s:8.1f} checks/s  ({batch_s:.2f} s, one render_many call)")
    print(f"cached:        {len(pairs) / cached_s:8.1f} checks/s  ({cached_s:.3f} s, no browser)")
    print("outcomes (kind: passed/total):", ", ".join(
        f"{k}: {cold_out[(k, True)]}/{cold_out[(k, True)] + cold_out[(k, False)]}"
        for k in ("respelled", "embedded", "edited", "rejected")))


if __name__ == "__main__":
    main()
