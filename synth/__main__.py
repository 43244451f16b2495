"""CLI: ``python -m synth --pages N --seed S --out DIR [--suite layout|formula|table|all] [--renderer html]
[--language en|zh|mixed]``.

Writes, for each kept page, ``DIR/pages/<id>.png``, ``DIR/html/<id>.html`` and
``DIR/reference/<id>.md``; per suite ``DIR/bench_data/<suite>.jsonl`` (olmOCR-Bench tests whose
``pdf`` is ``<id>.pdf``, so the bench runner looks for candidates ``<id>_pg1_repeat<K>.md``);
``DIR/records/synth-00000.parquet`` (``PageRecord`` rows, ``schemas.page.PAGE_SCHEMA``, sorted by
id); and ``DIR/summary.json`` (pages kept, rejected by reason, tests kept and dropped by type).
Pages are planned by ``synth.plan``: page ``i`` gets layout ``LAYOUTS[i % 8]``, suite ``SUITES[i % 3]``
under ``--suite all``, and seed ``S * 1_000_003 + i``; ``--language mixed`` makes every 4th page
(``i % 4 == 3``) Chinese (ids ``...-zh-...``); the same arguments give byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.deadletter import RecordError
from schemas.page import PAGE_SCHEMA, PageRecord
from schemas.unit_tests import dump_tests
from synth.blocks import PageSpec
from synth.pages import page_spec, synthesize_page, to_page_record
from synth.plan import LANGUAGE_CHOICES, SUITES, page_language, plan
from synth.render_html import HtmlRenderer
from synth.render_latex import LatexRenderer


def run(pages: int, seed: int, out: Path, suite: str = "all", renderer_name: str = "html",
        log: bool = True, language: str = "en") -> dict:
    if renderer_name not in ("html", "latex"):
        raise SystemExit(f"renderer {renderer_name!r} is not available here (html or latex)")
    for sub in ("pages", "html", "reference", "bench_data", "records"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    records: list[PageRecord] = []
    tests_by_suite: dict[str, list] = {}
    rejected: Counter[str] = Counter()
    kept_types: Counter[str] = Counter()
    dropped_types: Counter[str] = Counter()
    examples: dict[str, str] = {}
    make_renderer = LatexRenderer if renderer_name == "latex" else HtmlRenderer
    with make_renderer(out / ".work") as renderer:
        for i, (layout, s, page_seed, pid) in enumerate(plan(pages, seed, suite, language, renderer_name)):
            spec: PageSpec = page_spec(layout, s, page_seed, pid, page_language(i, language))
            try:
                page = synthesize_page(spec, renderer)
                page.renderer = renderer_name
            except RecordError as exc:
                rejected[exc.reason] += 1
                examples.setdefault(exc.reason, str(exc)[:300])
                if log:
                    print(f"rejected {pid}: {exc.reason}: {str(exc)[:160]}", file=sys.stderr)
                continue
            (out / "pages" / f"{spec.id}.png").write_bytes(page.png)
            source_ext = "tex" if renderer_name == "latex" else "html"
            (out / "html" / f"{spec.id}.{source_ext}").write_text(page.html, encoding="utf-8")
            (out / "reference" / f"{spec.id}.md").write_text(page.reference, encoding="utf-8")
            tests_by_suite.setdefault(s, []).extend(page.tests)
            kept_types.update(t.type for t in page.tests)
            dropped_types.update(page.dropped)
            records.append(to_page_record(page, spec))
    (out / ".work").rmdir() if (out / ".work").exists() and not any((out / ".work").iterdir()) else None
    for s, tests in sorted(tests_by_suite.items()):
        dump_tests(tests, out / "bench_data" / f"{s}.jsonl")
    records.sort(key=lambda r: r.id)
    table = pa.Table.from_pylist([r.to_row() for r in records], schema=PAGE_SCHEMA)
    pq.write_table(table, out / "records" / "synth-00000.parquet", compression="zstd")
    summary = {
        "pages_requested": pages, "kept": len(records), "rejected": dict(sorted(rejected.items())),
        "rejected_examples": dict(sorted(examples.items())),
        "tests_kept_by_type": dict(sorted(kept_types.items())),
        "tests_dropped_by_reason": dict(sorted(dropped_types.items())),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m synth", description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, required=True, help="pages to make (at least 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--suite", choices=(*SUITES, "all"), default="all")
    ap.add_argument("--renderer", choices=("html", "latex"), default="html")
    ap.add_argument("--language", choices=LANGUAGE_CHOICES, default="en")
    args = ap.parse_args(argv)
    if args.pages < 1:
        ap.error(f"--pages must be at least 1, got {args.pages}")
    summary = run(args.pages, args.seed, args.out, args.suite, args.renderer, language=args.language)
    print(f"kept {summary['kept']}/{summary['pages_requested']} pages; rejected {summary['rejected'] or 'none'}")
    print(f"tests kept {summary['tests_kept_by_type']}; dropped {summary['tests_dropped_by_reason']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
