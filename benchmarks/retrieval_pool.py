"""A cheap page generator for the retrieval benchmark's pool (made another way than synth/'s Chromium pages).

PIL draws US-letter-shaped pages of filler text in 1-3 columns with headings; a share of them carry a
ruled table of numbers (and their label an HTML table). ~20 ms a page, against ~300 ms for a Chromium
page on this machine, so the pool can hold mostly pages without the target structures (a realistic low
prevalence) without hours of rendering. Pages are ``PageRecord``s (source ``benchpool``).
"""

from __future__ import annotations

import hashlib
import io
import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas.page import PAGE_SCHEMA, PageRecord, ProvenanceStep, page_id  # noqa: E402

FONTS = ["/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
         "/usr/share/fonts/truetype/liberation/LiberationSerif-Regular.ttf",
         "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf"]
WORDS = ("the of and to in is was for on that with as by at from this which be are an or have it not were has "
         "report council market annual figure river history county survey method sample result section growth "
         "energy public water policy school trade north village station league season review market").split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def plain_page(i: int, seed: int = 0, table_share: float = 0.05, width: int = 1020, height: int = 1320) -> tuple[
        PageRecord, bool]:
    """Page ``i``: (record, has_table)."""
    rng = random.Random(seed * 1_000_003 + i)
    font = ImageFont.truetype(rng.choice(FONTS), rng.choice([15, 17, 19, 21]))
    bold = ImageFont.truetype(FONTS[1], 26)
    img = Image.new("L", (width, height), 255)
    d = ImageDraw.Draw(img)
    cols = rng.choice([1, 1, 2, 2, 3])
    margin, gutter = 70, 30
    colw = (width - 2 * margin - gutter * (cols - 1)) // cols
    line_h = int(font.size * 1.45)
    md = []
    title = _text(rng, 5).title()
    d.text((margin, 50), title, font=bold, fill=0)
    md.append(f"# {title}\n")
    has_table = rng.random() < table_share
    table_top = height
    if has_table:
        rows, ncols = rng.randint(4, 10), rng.randint(3, 6)
        tw, rh = width - 2 * margin, 34
        top = rng.randint(150, height - 150 - rows * rh)
        cw = tw // ncols
        cells = [[f"{rng.randint(0, 9999)}" if r else _text(rng, 1).title() for _ in range(ncols)] for r in range(rows)]
        for r in range(rows + 1):
            d.line([(margin, top + r * rh), (margin + ncols * cw, top + r * rh)], fill=0, width=2)
        for c in range(ncols + 1):
            d.line([(margin + c * cw, top), (margin + c * cw, top + rows * rh)], fill=0, width=2)
        for r in range(rows):
            for c in range(ncols):
                d.text((margin + c * cw + 8, top + r * rh + 8), cells[r][c], font=font, fill=0)
        table_top, table_bottom = top, top + rows * rh
        md.append("<table>" + "".join("<tr>" + "".join(f"<td>{v}</td>" for v in row) + "</tr>" for row in cells)
                  + "</table>\n")
    for c in range(cols):
        x = margin + c * (colw + gutter)
        y = 110
        while y < height - 80:
            if has_table and table_top - line_h <= y <= table_bottom + 10:
                y = table_bottom + 20
                continue
            if rng.random() < 0.06:
                y += line_h // 2
                head = _text(rng, 3).title()
                d.text((x, y), head, font=bold, fill=0)
                md.append(f"## {head}\n")
                y += int(bold.size * 1.6)
                continue
            chars = max(8, colw // int(font.size * 0.55))
            words = _text(rng, chars // 6)
            d.text((x, y), words[:chars], font=font, fill=rng.randint(0, 60))
            md.append(words[:chars])
            y += line_h
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    png = buf.getvalue()
    sid = f"benchpool-s{seed}-{i:06d}"
    rec = PageRecord(
        id=page_id("benchpool", sid, 1), source="benchpool", source_id=sid, page_number=1, domain="benchpool",
        language="en", license="cc0", image=png, image_sha256=hashlib.sha256(png).hexdigest(), width=width,
        height=height, task="parse_page", instruction="Convert the page to Markdown.", response="\n".join(md),
        provenance=[ProvenanceStep("bench:pool", "1", "0")], metadata={"has_table": has_table, "columns": cols})
    return rec, has_table


def render_synth(path: Path, pages: int, seed: int, suite: str, strip: tuple[type, ...] = (),
                 chunk: int = 50) -> Path:
    """``pages`` synth/ pages of ``suite`` (``all`` cycles the suites) rendered by Chromium into one Parquet
    shard at ``path`` (kept if present: rendering costs ~0.3-1 s a page). ``strip``: block types left out of
    every page before rendering (e.g. ``(Table, Formula)`` for layout pages that are clean negatives); the
    page's ``metadata.stripped`` names them. Rejected pages are left out. Written a chunk at a time."""
    from dataclasses import replace

    from schemas.deadletter import RecordError
    from synth.pages import page_spec, synthesize_page, to_page_record
    from synth.plan import page_language, plan
    from synth.render_html import HtmlRenderer

    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(path) + ".tmp")
    rows: list[dict] = []
    with HtmlRenderer(path.parent / f".work-{path.stem}") as renderer, pq.ParquetWriter(tmp, PAGE_SCHEMA) as w:
        for i, (layout, s, page_seed, pid) in enumerate(plan(pages, seed, suite)):
            spec = page_spec(layout, s, page_seed, pid, page_language(i, "en"))
            if strip:
                spec = replace(spec, blocks=tuple(b for b in spec.blocks if not isinstance(b.block, strip)))
            try:
                page = synthesize_page(spec, renderer)
            except RecordError:
                continue
            rec = to_page_record(page, spec)
            if strip:
                rec.metadata["stripped"] = sorted(t.__name__ for t in strip)
            rows.append(rec.to_row())
            if len(rows) >= chunk:
                w.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA))
                rows = []
        if rows:
            w.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA))
    tmp.rename(path)
    return path


def plain_shard(path: Path, n: int, seed: int, table_share: float = 0.05) -> Path:
    """``n`` PIL pages (``plain_page``) in one Parquet shard at ``path`` (kept if present)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        with pq.ParquetWriter(str(path) + ".tmp", PAGE_SCHEMA) as w:
            for i in range(n):
                rec, _ = plain_page(i, seed, table_share)
                rows.append(rec.to_row())
                if len(rows) == 100:
                    w.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA))
                    rows = []
            if rows:
                w.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA))
        Path(str(path) + ".tmp").rename(path)
    return path


# The benchmark's pages: (file under the cache folder, what, how many, seed). Corpus: the labelled pages the
# classifiers train on (seeds come from it). Pool: ~10% table-suite pages, ~10% formula-suite pages, layout-suite
# pages with their tables and formulas stripped (hard negatives: columns, figures, lists, forms) and PIL pages
# (2% with a ruled table: positives made another way).
PARTS = {
    "corpus": [("corpus/html-all-s11.parquet", "all", 300, 11), ("corpus/html-all-s15.parquet", "all", 300, 15),
               ("corpus/plain-s100.parquet", "plain", 200, 100)],
    "pool": [("pool/html-table-s12.parquet", "table", 240, 12), ("pool/html-formula-s13.parquet", "formula", 240, 13),
             ("pool/html-layout-stripped-s14.parquet", "layout-stripped", 300, 14),
             ("pool/plain-s200.parquet", "plain", 1500, 200)],
}
PLAIN_TABLE_SHARE = {"corpus": 0.05, "pool": 0.02}


def build(cache: Path, log: bool = True) -> dict[str, list[Path]]:
    """Render (once) and return the corpus and pool shards under ``cache``."""
    import time

    from synth.blocks import Formula, Table

    out: dict[str, list[Path]] = {}
    for part, items in PARTS.items():
        out[part] = []
        for name, what, n, seed in items:
            path = cache / name
            t = time.perf_counter()
            fresh = not path.exists()
            if what == "plain":
                plain_shard(path, n, seed, PLAIN_TABLE_SHARE[part])
            elif what == "layout-stripped":
                render_synth(path, n, seed, "layout", strip=(Table, Formula))
            else:
                render_synth(path, n, seed, what)
            if log and fresh:
                print(f"{name}: {pq.ParquetFile(path).metadata.num_rows} pages in {time.perf_counter() - t:.0f} s",
                      flush=True)
            out[part].append(path)
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="render the retrieval benchmark's pages once (cached)")
    ap.add_argument("--cache", type=Path, default=Path("out/retrieval-bench-pages"))
    build(ap.parse_args().cache)
