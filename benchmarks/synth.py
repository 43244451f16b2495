"""Benchmark of JinaOCRSynth HTML pages: ``python benchmarks/synth.py [--pages 48] [--fresh 6] [--seed 0]
[--language en|zh|mixed]``.

Reports, for HTML pages with tests (spec -> HTML -> Chromium PNG -> reference -> verified tests, one
worker process with one shared browser):

* pages per second per worker (target >= 8) and the CPU seconds per page of this process plus its
  Chromium and Playwright's driver (what a core pays, whatever the machine's load; ``cpu_seconds``),
  making each page's spec included as the corpus source pays it (``spec_cpu_s_per_page`` apart), and
  the speed-up over launching one browser per page (those browsers and their drivers have exited and
  been reaped before the timed loop starts, so none of their CPU enters its figures);
* the filled share of the text area (median and p10), measured from the DOM boxes of the rendered
  page: per column, the bottom of its last block over the column's height, averaged over columns;
* rejections by reason; tests per page by suite and type; formulas (math tests) per formula-suite
  page and tables (and their cells) per table-suite page, with the shares meeting the density goals
  (>= 8 formulas; >= 2 tables or one of >= 30 cells).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import psutil

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[0] = str(Path(__file__).resolve().parents[1])

# The repo's packages import only after the sys.path fix above (hence E402).
from benchmarks.synth_cpu import cpu_seconds, warm_up  # noqa: E402  (process tree + waited-for children)
from schemas.browser import launch_chromium, shared_browser  # noqa: E402
from schemas.deadletter import RecordError  # noqa: E402
from synth.blocks import Formula, Table  # noqa: E402
from synth.content import LARGE_TABLE_CELLS  # noqa: E402
from synth.pages import page_spec, synthesize_page  # noqa: E402
from synth.plan import page_language, plan  # noqa: E402
from synth.reference import reading_order  # noqa: E402
from synth.render_html import FILL_JS, HtmlRenderer  # noqa: E402


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _tree_cpu(procs: list[psutil.Process]) -> float:
    """CPU seconds of the given processes (no walk of /proc for the tree, unlike ``cpu_seconds``: cheap
    enough to bracket one round trip)."""
    total = 0.0
    for proc in procs:
        try:
            total += sum(proc.cpu_times()[:4])
        except psutil.Error:
            pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=48)
    ap.add_argument("--fresh", type=int, default=6, help="pages rendered with one browser launch each")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--language", choices=("en", "zh", "mixed"), default="en")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="synth-bench-"))
    jobs = [(job, page_language(i, args.language))
            for i, job in enumerate(plan(args.pages, args.seed, "all", args.language))]
    # One Playwright driver per thread at a time: the per-page launches run before the shared browser.
    t0 = time.perf_counter()
    for job, language in jobs[: args.fresh]:
        spec = page_spec(*job, language)
        with launch_chromium() as browser, HtmlRenderer(work, browser=browser) as r:
            try:
                synthesize_page(spec, r)
            except RecordError:
                pass
    fresh_s = time.perf_counter() - t0
    shared_browser()  # launch outside the timed loop: one launch per worker process
    types: dict[str, Counter[str]] = defaultdict(Counter)
    suite_pages: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    fills: list[float] = []
    fills_by_layout: dict[str, list[float]] = defaultdict(list)
    formulas: list[int] = []
    dense_table_pages = [0, 0]
    tables_per_page: list[int] = []
    formula_cats: list[int] = []  # display-formula categories per formula-suite page
    table_cats: Counter[str] = Counter()  # tables by category over the table-suite pages
    layout_structure = [0, 0]  # layout-suite pages with a table or a formula
    with HtmlRenderer(work) as r:
        warm_up(r, args.seed, args.language)  # one page per page size (its offline page, KaTeX fonts), another seed
        tree = [psutil.Process(), *psutil.Process().children(recursive=True)]  # Chromium's, after the warm-up
        t0, c0 = time.perf_counter(), cpu_seconds()
        measure_s = measure_cpu_s = spec_cpu_s = 0.0
        kept = 0
        for job, language in jobs:
            s0 = time.process_time()
            spec = page_spec(*job, language)
            spec_cpu_s += time.process_time() - s0
            try:
                page = synthesize_page(spec, r)
            except RecordError as exc:
                rejected[exc.reason] += 1
                continue
            # Measuring the fill is the benchmark's, not the page's: its round trip (~4 ms of CPU in Python,
            # Playwright's driver, the browser and the renderer) is left out of the wall and CPU figures.
            m0, mc0 = time.perf_counter(), _tree_cpu(tree)
            fill = r._page.evaluate(FILL_JS)  # the page the renderer just drew is still in the DOM
            measure_s += time.perf_counter() - m0
            measure_cpu_s += _tree_cpu(tree) - mc0
            kept += 1
            fills.append(fill)
            fills_by_layout[spec.layout].append(fill)
            kinds = Counter(t.type for t in page.tests)
            types[spec.suite].update(kinds)
            suite_pages[spec.suite] += 1
            final = getattr(page, "spec", None) or spec
            blocks = reading_order(final)
            if spec.suite == "formula":
                formulas.append(kinds["math"])
                formula_cats.append(len({b.category for b in blocks if isinstance(b, Formula)}))
            elif spec.suite == "layout":
                layout_structure[0] += any(isinstance(b, (Formula, Table)) for b in blocks)
                layout_structure[1] += 1
            if spec.suite == "table":
                tables = [b for b in blocks if isinstance(b, Table)]
                table_cats.update(t.category for t in tables)
                tables_per_page.append(len(tables))
                cells = max((t.cell_count for t in tables), default=0)
                dense_table_pages[0] += len(tables) >= 2 or cells >= LARGE_TABLE_CELLS
                dense_table_pages[1] += 1
        shared_s = time.perf_counter() - t0 - measure_s
        cpu_s = cpu_seconds() - c0 - measure_cpu_s
    n = len(jobs)
    shared_rate = n / shared_s
    fresh_rate = args.fresh / fresh_s if args.fresh else float("nan")
    result = {
        "pages": n, "kept": kept, "rejected": dict(rejected),
        "load_average_1m": round(psutil.getloadavg()[0], 2), "cpus": psutil.cpu_count(),
        "pages_per_s_per_worker_shared_browser": round(shared_rate, 2),
        "cpu_s_per_page_incl_chromium": round(cpu_s / n, 3),
        "pages_per_cpu_s": round(n / cpu_s, 2),
        "spec_cpu_s_per_page": round(spec_cpu_s / n, 4),
        "fill_measure_cpu_s_per_page": round(measure_cpu_s / n, 4),  # left out of cpu_s_per_page_incl_chromium
        "pages_per_s_browser_per_page": round(fresh_rate, 2),
        "speedup_shared_vs_per_page": round(shared_rate / fresh_rate, 1),
        "filled_share_median": round(statistics.median(fills), 3) if fills else None,
        "filled_share_p10": round(_quantile(fills, 0.1), 3),
        "filled_share_median_by_layout": {
            k: round(statistics.median(v), 3) for k, v in sorted(fills_by_layout.items())},
        "math_tests_per_formula_page": {"min": min(formulas, default=0), "median": statistics.median(formulas or [0]),
                                        "pages_ge_8": f"{sum(f >= 8 for f in formulas)}/{len(formulas)}",
                                        "pages_with_all_5_categories": f"{sum(c >= 5 for c in formula_cats)}/"
                                                                       f"{len(formula_cats)}"},
        "tables_per_table_page": {"min": min(tables_per_page, default=0),
                                  "median": statistics.median(tables_per_page or [0]),
                                  "pages_ge_2_or_ge_30_cells": f"{dense_table_pages[0]}/{dense_table_pages[1]}",
                                  "tables_by_category": dict(sorted(table_cats.items()))},
        "layout_pages_with_table_or_formula": f"{layout_structure[0]}/{layout_structure[1]}",
        "tests_per_page_by_suite_and_type": {
            s: {k: round(v / suite_pages[s], 2) for k, v in sorted(c.items())} | {
                "total": round(sum(c.values()) / suite_pages[s], 2)}
            for s, c in sorted(types.items())},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
