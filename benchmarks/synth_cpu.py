"""CPU time per synthetic page, HTML and LaTeX: ``python benchmarks/synth_cpu.py [--pages 24] [--seed 0]``.

Wall-clock rates mean little on a shared machine, so this counts CPU seconds: the Python process's
own time, plus its descendants' (Chromium's processes, live for the whole run, read with psutil;
each pdflatex job, waited for, from ``RUSAGE_CHILDREN``). ``pages_per_cpu_s`` is pages per second
per core (targets: HTML >= 8, LaTeX >= 2). Warm-up pages are left out (``warm_up``: one per page
size, of another seed: browser start, the renderer's offline page per size, fonts, first pdflatex
format load); pages are planned as ``python -m synth`` plans them, with their
themes, pictures and charts.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections import Counter
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])

import psutil  # noqa: E402

from schemas.deadletter import RecordError  # noqa: E402
from synth.pages import page_spec, synthesize_page  # noqa: E402
from synth.plan import plan  # noqa: E402


def cpu_seconds() -> float:
    """CPU seconds of this process, its live descendants and its waited-for children.

    A live descendant counts with the children it has reaped (``children_user``/``children_system``):
    Chromium's renderer or GPU process that exits mid-run is reaped by Chromium, not by us, and its
    CPU would otherwise drop out (and what it had used before the run would be subtracted)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:4])
        except psutil.Error:
            pass
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + kids.ru_utime + kids.ru_stime


def warm_up(renderer, seed: int, language: str = "en", renderer_name: str = "html") -> int:
    """Render one page of each page size (letter, 16:9 slides) from another seed's plan: what a worker pays
    once (the HTML renderer opens one offline page per size, ~0.5 CPU-s each), kept out of per-page figures.
    Returns the number of pages rendered."""
    from synth.plan import page_language

    sizes: set[tuple[int, int]] = set()
    for i, job in enumerate(plan(16, seed + 1_000_003, "all", language, renderer=renderer_name)):
        spec = page_spec(*job, page_language(i, language))
        if (spec.width_px, spec.height_px) in sizes:
            continue
        sizes.add((spec.width_px, spec.height_px))
        try:
            synthesize_page(spec, renderer)
        except RecordError:
            pass
    return len(sizes)


def measure(renderer_name: str, pages: int, seed: int) -> dict[str, object]:
    if renderer_name == "latex":
        from synth.render_latex import LatexRenderer as Renderer
    else:
        from synth.render_html import HtmlRenderer as Renderer  # type: ignore[assignment]
    jobs = plan(pages, seed, "all", renderer=renderer_name)
    rejected: Counter[str] = Counter()
    with Renderer() as r:
        warm_up(r, seed, renderer_name=renderer_name)
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        for job in jobs:
            try:
                synthesize_page(page_spec(*job), r)
            except RecordError as exc:
                rejected[exc.reason] += 1
        cpu, wall = cpu_seconds() - cpu0, time.perf_counter() - wall0
    return {"renderer": renderer_name, "pages": pages, "rejected": dict(rejected),
            "cpu_s_per_page": round(cpu / pages, 3), "pages_per_cpu_s": round(pages / cpu, 2),
            "wall_s_per_page": round(wall / pages, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--renderer", choices=["html", "latex", "both"], default="both")
    args = ap.parse_args()
    names = ["html", "latex"] if args.renderer == "both" else [args.renderer]
    load = psutil.getloadavg()
    results = [measure(n, args.pages, args.seed) for n in names]
    print(json.dumps({"load_avg_1_5_15": [round(x, 2) for x in load], "cores": psutil.cpu_count(),
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
