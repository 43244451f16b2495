"""CLI: ``python -m synth --pages N --seed S --out DIR [--suite layout|formula|table|all] [--renderer html]
[--language en|zh|mixed]``.

Writes, for each kept page, ``DIR/pages/<id>.png``, ``DIR/html/<id>.html`` and
``DIR/reference/<id>.md``; per suite ``DIR/bench_data/<suite>.jsonl`` (olmOCR-Bench tests whose
``pdf`` is ``<id>.pdf``, so the bench runner looks for candidates ``<id>_pg1_repeat<K>.md``);
``DIR/records/synth-00000.parquet`` (``PageRecord`` rows, ``schemas.page.PAGE_SCHEMA``, sorted by
id, in row groups of ``RECORDS_PER_ROW_GROUP``); and ``DIR/summary.json`` (pages kept, rejected by
reason, tests kept and dropped by type).
Pages are planned by ``synth.plan``: page ``i`` gets layout ``LAYOUTS[i % 8]``, suite ``SUITES[i % 3]``
under ``--suite all``, and seed ``S * 1_000_003 + i``; ``--language mixed`` makes every 4th page
(``i % 4 == 3``) Chinese (ids ``...-zh-...``); the same arguments give byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.deadletter import RecordError
from schemas.page import PAGE_SCHEMA
from schemas.unit_tests import unit_test_to_json
from synth.blocks import PageSpec
from synth.pages import page_spec, synthesize_page, to_page_record
from synth.plan import LANGUAGE_CHOICES, SUITES, page_language, plan
from synth.render_html import HtmlRenderer
from synth.render_latex import LatexRenderer

# Records read back from the spill and written at once: one Parquet row group (~0.25 MB a record, ~8 MB a group;
# writing a group takes about 7 times its size on top)
RECORDS_PER_ROW_GROUP = 32


def run(pages: int, seed: int, out: Path, suite: str = "all", renderer_name: str = "html",
        log: bool = True, language: str = "en") -> dict:
    """Make the pages of ``plan`` one at a time: each kept page's files are written and its tests appended to
    its suite's JSONL as it is made, and its record goes to a spill file (an Arrow IPC record batch per page)
    that ``write_records`` writes out sorted by id, a row group at a time. Memory is one page and one row
    group, plus the kept pages' ids, whatever ``pages`` is."""
    if renderer_name not in ("html", "latex"):
        raise SystemExit(f"renderer {renderer_name!r} is not available here (html or latex)")
    for sub in ("pages", "html", "reference", "bench_data", "records", ".work"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    kept_ids: list[str] = []  # the record id of each spilled batch, in order
    rejected: Counter[str] = Counter()
    kept_types: Counter[str] = Counter()
    dropped_types: Counter[str] = Counter()
    examples: dict[str, str] = {}
    make_renderer = LatexRenderer if renderer_name == "latex" else HtmlRenderer
    with tempfile.TemporaryDirectory(prefix="records-", dir=out / ".work") as spill_dir:
        spill_path = Path(spill_dir) / "records.arrow"
        with make_renderer(out / ".work") as renderer, pa.OSFile(str(spill_path), "wb") as sink, \
                pa.ipc.new_file(sink, PAGE_SCHEMA) as spill, ExitStack() as open_files:
            suite_files: dict[str, TextIO] = {}  # bench_data/<suite>.jsonl, opened at the suite's first kept page
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
                if s not in suite_files:
                    suite_files[s] = open_files.enter_context(
                        open(out / "bench_data" / f"{s}.jsonl", "w", encoding="utf-8"))
                suite_files[s].writelines(unit_test_to_json(t) + "\n" for t in page.tests)  # as dump_tests
                kept_types.update(t.type for t in page.tests)
                dropped_types.update(page.dropped)
                record = to_page_record(page, spec)
                spill.write_batch(pa.RecordBatch.from_pylist([record.to_row()], schema=PAGE_SCHEMA))
                kept_ids.append(record.id)
                del page, record
        write_records(spill_path, kept_ids, out / "records" / "synth-00000.parquet")
    (out / ".work").rmdir() if (out / ".work").exists() and not any((out / ".work").iterdir()) else None
    summary = {
        "pages_requested": pages, "kept": len(kept_ids), "rejected": dict(sorted(rejected.items())),
        "rejected_examples": dict(sorted(examples.items())),
        "tests_kept_by_type": dict(sorted(kept_types.items())),
        "tests_dropped_by_reason": dict(sorted(dropped_types.items())),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return summary


def write_records(spill_path: Path, ids: list[str], path: Path) -> None:
    """Write the records spilled to ``spill_path`` (one record batch per record, ``ids[k]`` the id of batch
    ``k``) to the Parquet file ``path`` sorted by id, ``RECORDS_PER_ROW_GROUP`` records per row group: each
    group's batches are read back from the spill alone (a plain file, not a memory map, so what was read is
    freed with the group). A run that keeps at most one group's records writes the bytes a single
    ``pq.write_table(..., compression="zstd")`` of them all would; one that keeps none, the schema alone."""
    order = sorted(range(len(ids)), key=ids.__getitem__)
    with pa.OSFile(str(spill_path)) as source, pq.ParquetWriter(str(path), PAGE_SCHEMA, compression="zstd") as writer:
        reader = pa.ipc.open_file(source)
        if not order:
            writer.write_table(PAGE_SCHEMA.empty_table())
        step = RECORDS_PER_ROW_GROUP
        for start in range(0, len(order), step):
            group = pa.Table.from_batches([reader.get_batch(k) for k in order[start:start + step]], schema=PAGE_SCHEMA)
            writer.write_table(group.combine_chunks())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m synth", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Synthetic JinaOCRSynth pages with olmOCR-Bench unit tests: page images, HTML, references, "
                    "bench JSONL per suite, PageRecord Parquet and a summary (docs/synth.md).")
    ap.add_argument("--pages", type=int, required=True, help="pages to make (at least 1)")
    ap.add_argument("--seed", type=int, default=0, help="run seed: page i gets seed S * 1_000_003 + i")
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--suite", choices=(*SUITES, "all"), default="all", help="which unit-test suite's pages")
    ap.add_argument("--renderer", choices=("html", "latex"), default="html", help="Chromium HTML or pdflatex")
    ap.add_argument("--language", choices=LANGUAGE_CHOICES, default="en",
                    help="page language; mixed: every 4th page Chinese")
    args = ap.parse_args(argv)
    if args.pages < 1:
        ap.error(f"--pages must be at least 1, got {args.pages}")
    summary = run(args.pages, args.seed, args.out, args.suite, args.renderer, language=args.language)
    print(f"kept {summary['kept']}/{summary['pages_requested']} pages; rejected {summary['rejected'] or 'none'}")
    print(f"tests kept {summary['tests_kept_by_type']}; dropped {summary['tests_dropped_by_reason']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
