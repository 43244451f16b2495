"""Per-source read + render throughput of the element, form and multilingual readers (one process).

    python benchmarks/sources.py [--passes 20] [--sources mmtab,unimer,...] [--config configs/corpus.yaml]

Builds the samples (``samples/make/elements.py``) in a temporary folder, takes each named source's
entry from the config (default: the Table 2 sources issue 21 added), and reads every one of its
inputs ``--passes`` times, rendering each page with the config's render settings, as the DAG's
``read`` and ``render`` stages do but without a runner. Per source it prints the pages rendered per
pass, the first (cold) pass's pages/s (olmOCR-synthmix's first pass starts Chromium and renders its
math tests into an empty KaTeX cache) and the steady pages/s of the later passes, split into read and
render seconds per page. Rows that end as drops or dead letters are read (their cost counts) but are
not pages. The samples are a few small images each, so the figures are per-record costs of the
readers and the render stage, not of I/O on large files.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NEW_SOURCES = ("olmocr-synthmix", "latex-ocr", "unimer", "mmtab", "synthchartnet", "commonforms", "rvl-cdip", "jssoda")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--sources", default=",".join(NEW_SOURCES))
    parser.add_argument("--config", default=str(REPO / "configs" / "corpus.yaml"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PAGEMILL_CACHE"] = str(Path(tmp) / "cache")  # a cold KaTeX cache for the first pass
        from pipelines.config import drop_missing_source_names, load_config
        from pipelines.render import render_page
        from pipelines.sources import build_source
        from samples.make import elements

        root = Path(tmp) / "samples"
        elements.build(root)
        text = Path(args.config).read_text().replace("samples/", f"{root}/")
        raw = yaml.safe_load(text)
        wanted = args.sources.split(",")
        raw["sources"] = [s for s in raw["sources"] if s["name"] in wanted]
        drop_missing_source_names(raw)
        config = Path(tmp) / "c.yaml"
        config.write_text(yaml.safe_dump(raw, allow_unicode=True))
        cfg = load_config(config)

        print(f"{'source':<16} {'pages/pass':>10} {'cold p/s':>9} {'steady p/s':>11} {'read ms/p':>10} "
              f"{'render ms/p':>12}")
        for settings in cfg.sources:
            source = build_source(settings)
            units = [u for pattern in settings.paths for uri in sorted(glob.glob(pattern))
                     for u in source.plan(uri)]
            times = []
            for _ in range(args.passes):
                read_s = render_s = 0.0
                pages = 0
                for unit in units:
                    started = time.perf_counter()
                    rows = list(source.read(unit))
                    read_s += time.perf_counter() - started
                    for row in rows:
                        for page in row.pages if row.error is None else ():
                            started = time.perf_counter()
                            try:
                                render_page(page, cfg.render)
                                pages += 1
                            except Exception:  # noqa: BLE001 - a bad image is a dead letter, not a page
                                pass
                            render_s += time.perf_counter() - started
                times.append((pages, read_s, render_s))
            pages = times[0][0]
            cold = pages / (times[0][1] + times[0][2])
            steady = times[1:] or times
            total_pages = sum(p for p, _, _ in steady)
            read_ms = 1000 * sum(r for _, r, _ in steady) / total_pages
            render_ms = 1000 * sum(r for _, _, r in steady) / total_pages
            print(f"{settings.name:<16} {pages:>10} {cold:>9.1f} {1000 / (read_ms + render_ms):>11.1f} "
                  f"{read_ms:>10.2f} {render_ms:>12.2f}")


if __name__ == "__main__":
    main()
