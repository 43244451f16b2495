"""CPU time per synthetic page, HTML and LaTeX: ``python benchmarks/synth_cpu.py [--pages 24] [--seed 0]``.

Wall-clock rates mean little on a shared machine, so this counts CPU seconds: the Python process's
own time, plus its descendants' (Chromium's processes, live for the whole run, read with psutil;
each pdflatex job, waited for, from ``RUSAGE_CHILDREN``). ``pages_per_cpu_s`` is pages per second
per core (targets: HTML >= 8, LaTeX >= 2). One warm-up page per renderer is left out (browser start,
fonts, first pdflatex format load); pages are planned as ``python -m synth`` plans them, with their
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


def measure(renderer_name: str, pages: int, seed: int) -> dict[str, object]:
    if renderer_name == "latex":
        from synth.render_latex import LatexRenderer as Renderer
    else:
        from synth.render_html import HtmlRenderer as Renderer  # type: ignore[assignment]
    jobs = plan(pages + 1, seed, "all", renderer=renderer_name)
    rejected: Counter[str] = Counter()
    with Renderer() as r:
        try:
            synthesize_page(page_spec(*jobs[0]), r)  # warm-up
        except RecordError:
            pass
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        for job in jobs[1:]:
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
