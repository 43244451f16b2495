"""Benchmark of JinaOCRSynth HTML pages: ``python benchmarks/synth.py [--pages 48] [--fresh 6]``.

Reports pages per second per worker for HTML pages with tests (spec -> HTML -> Chromium PNG ->
reference -> verified tests, one worker process with one shared browser; target >= 8), the
speed-up over launching one browser per page, the share of formula-suite pages with >= 1 ``math``
test and of table-suite pages with >= 1 ``table`` test, and tests per page by type.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[0] = str(Path(__file__).resolve().parents[1])

# The repo's packages import only after the sys.path fix above (hence E402).
from schemas.browser import launch_chromium, shared_browser  # noqa: E402
from schemas.deadletter import RecordError  # noqa: E402
from synth.pages import page_spec, synthesize_page  # noqa: E402
from synth.plan import plan  # noqa: E402
from synth.render_html import HtmlRenderer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=48)
    ap.add_argument("--fresh", type=int, default=6, help="pages rendered with one browser launch each")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="synth-bench-"))
    jobs = plan(args.pages, args.seed, "all")
    specs = [page_spec(*job) for job in jobs]
    # One Playwright driver per thread at a time: the per-page launches run before the shared browser.
    t0 = time.perf_counter()
    for spec in specs[: args.fresh]:
        with launch_chromium() as browser, HtmlRenderer(work, browser=browser) as r:
            try:
                synthesize_page(spec, r)
            except RecordError:
                pass
    fresh_s = time.perf_counter() - t0
    shared_browser()  # launch outside the timed loop: one launch per worker process
    types: Counter[str] = Counter()
    has = {"formula": [0, 0], "table": [0, 0]}
    rejected: Counter[str] = Counter()
    with HtmlRenderer(work) as r:
        synthesize_page(specs[0], r)  # warm-up: page, KaTeX fonts
        t0 = time.perf_counter()
        kept = 0
        for spec in specs:
            try:
                page = synthesize_page(spec, r)
            except RecordError as exc:
                rejected[exc.reason] += 1
                continue
            kept += 1
            kinds = Counter(t.type for t in page.tests)
            types.update(kinds)
            if spec.suite in has:
                has[spec.suite][1] += 1
                has[spec.suite][0] += kinds["math" if spec.suite == "formula" else "table"] > 0
        shared_s = time.perf_counter() - t0
    shared_rate = len(specs) / shared_s
    fresh_rate = args.fresh / fresh_s
    result = {
        "pages": len(specs), "kept": kept, "rejected": dict(rejected),
        "pages_per_s_per_worker_shared_browser": round(shared_rate, 2),
        "pages_per_s_browser_per_page": round(fresh_rate, 2),
        "speedup_shared_vs_per_page": round(shared_rate / fresh_rate, 1),
        "formula_pages_with_math_test": f"{has['formula'][0]}/{has['formula'][1]}",
        "table_pages_with_table_test": f"{has['table'][0]}/{has['table'][1]}",
        "tests_per_page_by_type": {k: round(v / max(kept, 1), 2) for k, v in sorted(types.items())},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
