"""Instruction coverage figures (issue 20): ``python benchmarks/instruct.py [boxes|conventions|throughput|corpus]``.

* ``boxes``: synthetic HTML pages are printed to PDF by the same Chromium page that laid them out
  (screen media, the page's own size, no margins); every glyph box pdfium finds in that PDF is
  assigned to the smallest DOM element box (``PageRecord.elements``) holding its centre. Figures: the
  share of elements whose glyphs all lie inside their box within 2 px (goal 100%), the share of glyphs
  inside, glyphs in no element box, and reading order: pages whose body elements follow the
  reference order, and consecutive element pairs whose first glyphs come in order in the PDF's text.
* ``conventions``: per response convention, the share of a page's tests of the kept types that pass
  on the rewrite (``checkable``; before the stage's filtering) and pages where all pass.
* ``throughput``: CPU seconds per page of the added stages: DOM geometry (``GEOMETRY_JS`` plus
  ``synth.geometry``, browser processes included), the instruct stage, PDF line boxes; pages/s/core.
* ``corpus``: CPU seconds (this process's children: Beam workers, Chromium, pdflatex) and wall of
  ``python -m pipelines.corpus`` for this tree and for ``--base`` (a commit, checked out with
  ``git archive`` into a temporary folder), alternating, ``--repeats`` times each.

CPU time, not wall time, is the figure on a shared machine; ``--pages`` and ``--language`` pick the
pages (``mixed``: every 4th page Chinese, pages made another way than the English ones).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.synth_cpu import cpu_seconds  # noqa: E402


def synth_pages(n: int, seed: int, language: str):
    """(spec, SynthPage, record, renderer) for the first ``n`` planned pages that render."""
    from schemas.deadletter import RecordError
    from synth.pages import page_spec, synthesize_page, to_page_record
    from synth.plan import page_language, plan
    from synth.render_html import HtmlRenderer

    renderer = HtmlRenderer()
    for i, (layout, suite, page_seed, pid) in enumerate(plan(n, seed, "all", language)):
        spec = page_spec(layout, suite, page_seed, pid, language=page_language(i, language))
        try:
            page = synthesize_page(spec, renderer)
        except RecordError:
            continue
        yield spec, page, to_page_record(page, spec), renderer
    renderer.close()


def glyph_boxes(pdf: bytes, width_px: int) -> list[tuple[str, float, float, float, float]]:
    """(char, x0, y0, x1, y1) in page pixels for every non-space glyph of the PDF's first page."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    page = doc[0]
    w, h = page.get_size()
    scale = width_px / w
    tp = page.get_textpage()
    out = []
    for i in range(tp.count_chars()):
        ch = tp.get_text_range(i, 1)
        if not ch or ch.isspace():
            continue
        left, bottom, right, top = tp.get_charbox(i)
        if right > left and top > bottom:
            out.append((ch, left * scale, (h - top) * scale, right * scale, (h - bottom) * scale))
    tp.close()
    page.close()
    doc.close()
    return out


def boxes(args) -> dict:
    tol = 2.0
    n_el = el_ok = n_glyph = glyph_in = orphans = 0
    pages = order_pages = pairs = pairs_ok = 0
    for spec, page, record, renderer in synth_pages(args.pages, args.seed, args.language):
        pw = renderer._page
        pw.emulate_media(media="screen")
        pdf = pw.pdf(width=f"{page.width}px", height=f"{page.height}px", print_background=True,
                     margin={"top": "0", "right": "0", "bottom": "0", "left": "0"}, page_ranges="1")
        glyphs = glyph_boxes(pdf, page.width)
        els = [e for e in page.elements if e.cls != "picture"]
        assigned: dict[int, list] = {}
        for k, (ch, x0, y0, x1, y1) in enumerate(glyphs):
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            holders = [i for i, e in enumerate(els)
                       if e.x0 - tol <= cx <= e.x1 + tol and e.y0 - tol <= cy <= e.y1 + tol]
            if not holders:
                orphans += 1
                continue
            i = min(holders, key=lambda j: (els[j].x1 - els[j].x0) * (els[j].y1 - els[j].y0))
            assigned.setdefault(i, []).append((k, x0, y0, x1, y1))
        n_glyph += len(glyphs)
        for i, e in enumerate(els):
            mine = assigned.get(i, [])
            inside = [g for g in mine if g[1] >= e.x0 - tol and g[2] >= e.y0 - tol and g[3] <= e.x1 + tol
                      and g[4] <= e.y1 + tol]
            glyph_in += len(inside)
            n_el += 1
            el_ok += len(inside) == len(mine)
        # reading order: body elements follow the reference; their first glyphs come in PDF text order
        pages += 1
        pos, ok = 0, True
        for e in page.elements:
            if e.cls in ("page_header", "page_footer", "picture"):
                continue
            at = page.reference.find(e.text.strip(), pos)
            ok, pos = ok and at >= 0, max(pos, at)
        order_pages += ok
        firsts = [min(g[0] for g in assigned[i]) for i, e in enumerate(els)
                  if assigned.get(i) and not e.cls.startswith("page_")]
        pairs += max(0, len(firsts) - 1)
        pairs_ok += sum(a < b for a, b in zip(firsts, firsts[1:]))
    return {"pages": pages, "elements": n_el, "elements_containing_all_glyphs": el_ok / max(1, n_el),
            "glyphs": n_glyph, "glyphs_inside_their_element": glyph_in / max(1, n_glyph),
            "glyphs_in_no_element": orphans / max(1, n_glyph), "pages_in_reference_order": order_pages / max(1, pages),
            "element_pairs_in_pdf_text_order": pairs_ok / max(1, pairs), "tolerance_px": tol}


def conventions(args) -> dict:
    from pipelines.instruct.conventions import CONVENTIONS, adapt_test, applicable, checkable, rewrite
    from schemas.unit_tests import unit_test_from_json

    stats = {c: Counter() for c in CONVENTIONS}
    for spec, page, record, _ in synth_pages(args.pages, args.seed, args.language):
        for c in CONVENTIONS:
            if not applicable(c, record.response, record.elements):
                continue
            out = rewrite(c, record.response, record.elements, record.width, record.height)
            text = checkable(c, out.response)
            tests = [t for t in (adapt_test(c, x) for x in record.unit_tests) if t is not None]
            passed = sum(unit_test_from_json(t).check(text)[0] for t in tests)
            stats[c].update(pages=1, tests=len(tests), passed=passed, all_pass=passed == len(tests))
    return {c: {"pages": s["pages"], "kept_tests": s["tests"], "pass_rate": s["passed"] / max(1, s["tests"]),
                "pages_all_pass": s["all_pass"] / max(1, s["pages"])} for c, s in stats.items()}


def throughput(args) -> dict:
    import glob

    from pipelines.instruct.conventions import CONVENTIONS
    from pipelines.instruct.stage import InstructConfig, InstructStage
    from schemas.pdf_pages import pdf_line_boxes, pdf_page_count
    from synth.geometry import page_elements
    from synth.render_html import GEOMETRY_JS

    stage = InstructStage(InstructConfig(conventions={c: 1 for c in CONVENTIONS}, dynamic_share=0.2,
                                         zh_prompt_share=0.2))
    geo_cpu = inst_cpu = 0.0
    n = outputs = 0
    records = []
    for spec, page, record, renderer in synth_pages(args.pages + 1, args.seed, args.language):
        records.append(record)
        if len(records) == 1:
            continue  # warm-up
        t = cpu_seconds()
        for _ in range(5):
            geometry = renderer._page.evaluate(GEOMETRY_JS)
            page_elements(page.spec, geometry, page.width, page.height)
        geo_cpu += (cpu_seconds() - t) / 5
        n += 1
    t = time.process_time()
    for record in records[1:]:
        outputs += len(stage(record))
    inst_cpu = time.process_time() - t
    pdfs = sorted(glob.glob(str(ROOT / "tests/data/real_pdfs/**/*.pdf"), recursive=True)) + \
        [str(ROOT / "samples/local/report.pdf")]
    pdf_pages, pdf_cpu = 0, 0.0
    for f in pdfs:
        data = Path(f).read_bytes()
        try:
            k = pdf_page_count(data)
        except Exception:
            continue
        for i in range(min(k, 4)):
            t = time.process_time()
            pdf_line_boxes(data, i, 1288)
            pdf_cpu += time.process_time() - t
            pdf_pages += 1
    return {"geometry": {"pages": n, "cpu_s_per_page": geo_cpu / max(1, n), "pages_per_cpu_s": n / max(geo_cpu, 1e-9)},
            "instruct_stage": {"pages": n, "records_out": outputs, "cpu_s_per_page": inst_cpu / max(1, n),
                               "pages_per_cpu_s": n / max(inst_cpu, 1e-9)},
            "pdf_line_boxes": {"pages": pdf_pages, "cpu_s_per_page": pdf_cpu / max(1, pdf_pages),
                               "pages_per_cpu_s": pdf_pages / max(pdf_cpu, 1e-9)}}


def _run_corpus(tree: Path, out: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipelines.corpus", "--output", str(out)], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(tree)})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def corpus(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-instruct-"))
    base = tmp / "base"
    base.mkdir()
    archive = subprocess.run(["git", "archive", args.base], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    katex = ROOT / "assets" / "katex" / "node_modules"
    (base / "assets" / "katex" / "node_modules").symlink_to(katex.resolve())
    runs: dict[str, list[tuple[float, float]]] = {"base": [], "this": []}
    for r in range(args.repeats):
        for name, tree in (("base", base), ("this", ROOT)):
            runs[name].append(_run_corpus(tree, tmp / f"{name}-{r}"))
    out = {name: {"cpu_s": [round(c, 2) for c, _ in v], "wall_s": [round(w, 2) for _, w in v],
                  "cpu_s_median": statistics.median(c for c, _ in v)} for name, v in runs.items()}
    out["cpu_ratio"] = out["this"]["cpu_s_median"] / out["base"]["cpu_s_median"]
    out["base_commit"] = args.base
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="*", default=["boxes", "conventions", "throughput"],
                        choices=["boxes", "conventions", "throughput", "corpus"])
    parser.add_argument("--pages", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--language", default="en", choices=["en", "zh", "mixed"])
    parser.add_argument("--base", default="13142eb", help="corpus: the commit to compare with")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {}
    for what in args.what:
        results[what] = globals()[what](args)
        print(json.dumps({what: results[what]}, indent=1))
    print(f"load average {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
