"""Retrieval on real PDF pages (made another way than the synthetic pool): the classifiers of a
``benchmarks/retrieval.py`` run, trained on synthetic pages, retrieve tables and formulas from real pages.

    .venv/bin/python benchmarks/retrieval_real.py --classifiers out/bench-retrieval/clf [--pdfs DIR]

Pages: every page of the PDFs under ``--pdfs`` (default: olmOCR's 64 test PDFs, 591 pages), rendered as the corpus
renders PDF pages (``schemas.pdf_pages``, longest side 1288 px, grey when achromatic, ``schemas.images``
encoding) with their text layer, cached under ``--cache``. Truth comes from the PDF itself, never from the
classifier's inputs (the synthetic training pages have no text layer, so the text-layer features carry no
weight in the classifiers):

* formula: >= ``--math-chars`` characters of the page drawn in math fonts (TeX's CMMI/CMSY/CMEX/MSBM, Cambria
  Math, STIX, KaTeX math, Symbol, ...), read per character with pdfium;
* table: >= 4 consecutive lines of ``pdftotext -layout`` with >= 3 cells (runs of text separated by >= 2
  spaces) each.

Both are proxies, so the script also writes a contact sheet of each mode's top pages
(``OUT/top-<mode>.png``) to judge by eye. Prints p@10/20/50 of retrieval (candidates from the index as
``classifiers.retrieve`` takes them, budget scaled to the pool) and of scoring every page, against prevalence.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas.images import ImageEncoding, encode_image  # noqa: E402
from schemas.page import PAGE_SCHEMA, PageRecord, ProvenanceStep, page_id  # noqa: E402
from schemas.pdf_pages import pdf_page_count, render_pdf_page  # noqa: E402

MATH_FONT = re.compile(r"^(CMMI|CMSY|CMEX|CMBSY|MSBM|MSAM|EUFM|EUSM|RSFS|LMMath|LatinModernMath|CambriaMath|"
                       r"STIX|XITSMath|KaTeX_(Math|Size|AMS)|PazoMath|MathematicalPi|FdSymbol|MathJax|txsy|txex|"
                       r"pxsy|pxex|Symbol)", re.I)
CELL_GAP = re.compile(r"\S(?:\s?\S)*")  # runs of text with single spaces inside: layout cells


def math_chars(path: str, index: int) -> int:
    """Characters of page ``index`` drawn in a math font (font names without their subset prefix)."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    pdf = pdfium.PdfDocument(path)
    try:
        page = pdf[index]
        tp = page.get_textpage()
        buf, flags, n = ctypes.create_string_buffer(256), ctypes.c_int(), 0
        for c in range(raw.FPDFText_CountChars(tp.raw)):
            if raw.FPDFText_GetFontInfo(tp.raw, c, buf, 256, ctypes.byref(flags)):
                name = buf.value.decode("latin-1").split("+")[-1]
                n += bool(MATH_FONT.match(name))
        tp.close()
        page.close()
        return n
    finally:
        pdf.close()


def table_run(path: str, index: int) -> int:
    """The longest run of consecutive ``pdftotext -layout`` lines holding >= 3 cells (text runs >= 2 spaces
    apart)."""
    out = subprocess.run(["pdftotext", "-layout", "-f", str(index + 1), "-l", str(index + 1), path, "-"],
                         capture_output=True, text=True, errors="replace").stdout
    best = run = 0
    for line in out.splitlines():
        cells = [c for c in re.split(r"\s{2,}", line.strip()) if c]
        run = run + 1 if len(cells) >= 3 else 0
        best = max(best, run)
    return best


def build(pdfs: str, cache: Path, longest_side: int = 1288) -> Path:
    """Render every page of the PDFs under ``pdfs`` into one Parquet shard (kept if present); truth in metadata."""
    path = cache / "real.parquet"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    enc = ImageEncoding()
    rows: list[dict] = []
    writer = pq.ParquetWriter(str(path) + ".tmp", PAGE_SCHEMA)
    for f in sorted(glob.glob(f"{pdfs}/**/*.pdf", recursive=True)):
        data = Path(f).read_bytes()
        try:
            n = pdf_page_count(data)
        except Exception as exc:  # a PDF pdfium cannot open is left out, and said
            print(f"skip {f}: {exc}")
            continue
        for i in range(n):
            try:
                pixels, _, text, _ = render_pdf_page(data, i, longest_side, with_text=True, grey_when_achromatic=True)
            except Exception as exc:
                print(f"skip {f} page {i + 1}: {exc}")
                continue
            png = encode_image(pixels, enc, flat=True)
            sid = f"{Path(f).relative_to(pdfs)}#{i + 1}"
            rec = PageRecord(
                id=page_id("realpdf", sid, i + 1), source="realpdf", source_id=sid, page_number=i + 1,
                domain="realpdf", language="en", license="apache-2.0", image=png,
                image_sha256=hashlib.sha256(png).hexdigest(), width=pixels.shape[1], height=pixels.shape[0],
                task="parse_page", instruction="", response="", text_layer=text,
                provenance=[ProvenanceStep("bench:real", "1", "0")],
                metadata={"math_chars": math_chars(f, i), "table_run": table_run(f, i)})
            rows.append(rec.to_row())
            if len(rows) == 64:  # 64-page row groups, written as they fill
                writer.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA))
                rows = []
    if rows:
        writer.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA))
    writer.close()
    Path(str(path) + ".tmp").rename(path)
    return path


def contact_sheet(shard: Path, ids: list[str], out: Path, cols: int = 8) -> None:
    """The pages ``ids`` (in order) as 160-px thumbnails in a grid, numbered."""
    want = {i: k for k, i in enumerate(ids)}
    tiles = [None] * len(ids)
    t = pq.read_table(shard, columns=["id", "image"])
    for pid, img in zip(t.column("id").to_pylist(), t.column("image").to_pylist()):
        if pid in want:
            g = cv2.imdecode(np.frombuffer(img["bytes"], np.uint8), cv2.IMREAD_GRAYSCALE)
            g = cv2.resize(g, (160, 207), interpolation=cv2.INTER_AREA)
            cv2.putText(g, str(want[pid] + 1), (4, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.6, 0, 2)
            tiles[want[pid]] = cv2.copyMakeBorder(g, 2, 2, 2, 2, cv2.BORDER_CONSTANT, value=128)
    tiles = [x for x in tiles if x is not None]
    while len(tiles) % cols:
        tiles.append(np.full_like(tiles[0], 255))
    rows = [np.hstack(tiles[r:r + cols]) for r in range(0, len(tiles), cols)]
    cv2.imwrite(str(out), np.vstack(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pdfs", default="/work/shared/real-pdfs")
    ap.add_argument("--cache", type=Path, default=Path("out/retrieval-real-pages"))
    ap.add_argument("--classifiers", required=True, help="the clf/ folder of a benchmarks/retrieval.py run")
    ap.add_argument("--out", type=Path, default=Path("out/bench-retrieval-real"))
    ap.add_argument("--math-chars", type=int, default=20)
    ap.add_argument("--nn-per-seed", type=int, default=5)
    ap.add_argument("--head-k", type=int, default=100)
    ap.add_argument("--sheet", type=int, default=24, help="pages on each mode's contact sheet")
    args = ap.parse_args()

    from classifiers.index import IndexConfig
    from classifiers.retrieve import RetrieveConfig, retrieve

    shard = build(args.pdfs, args.cache)
    t = pq.read_table(shard, columns=["id", "metadata"])
    meta = {i: json.loads(m) for i, m in zip(t.column("id").to_pylist(), t.column("metadata").to_pylist())}
    truth = {"table": {i: m["table_run"] >= 4 for i, m in meta.items()},
             "math": {i: m["math_chars"] >= args.math_chars for i, m in meta.items()}}
    n = len(meta)
    summary = retrieve(RetrieveConfig(corpus=str(shard), classifiers=args.classifiers, out=str(args.out), k=n,
                                      nn_per_seed=args.nn_per_seed, head_k=args.head_k, exhaustive=True,
                                      index=IndexConfig(kind="flat")))
    lines = [f"real PDF pages: {n} ({args.pdfs}); classifiers {args.classifiers}; candidates <= "
             f"{args.nn_per_seed} per seed + head {args.head_k}", "",
             "| mode | truth (proxy) | positives | prevalence | candidates | retrieval p@10 / p@20 / p@50 | "
             "exhaustive p@10 / p@20 / p@50 |", "|---|---|---|---|---|---|---|"]
    for mode, m in summary["modes"].items():
        kind = "table" if mode.startswith("table") else "math"
        tr = truth[kind]
        slug = mode.replace("/", "_")
        got = {}
        for which in ("", ".exhaustive"):
            p = args.out / f"{slug}{which}.jsonl"
            ids = [json.loads(x)["id"] for x in p.read_text().splitlines()] if p.exists() else []
            got[which] = ids
            if which == "":
                contact_sheet(shard, ids[:args.sheet], args.out / f"top-{slug}.png")
        prec = {w: " / ".join(f"{sum(tr.get(i, False) for i in ids[:k]) / k:.2f}" for k in (10, 20, 50))
                for w, ids in got.items()}
        pos = sum(tr.values())
        what = "table run >= 4 lines" if kind == "table" else f">= {args.math_chars} math-font chars"
        lines.append(f"| {mode} | {what} | {pos} | {pos / n:.3f} | {m.get('candidates', '?')} | {prec['']} | "
                     f"{prec['.exhaustive']} |")
    print("\n".join(lines))
    (args.out / "report.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
