"""Contact sheet of synthetic pages: ``python -m synth.sheet [--out sheet.png] [--pages 24 --seed 0]``.

Renders the pages of a ``synth.plan`` plan (suite ``all``) and lays their thumbnails
out in a grid, each labelled with layout, suite and status, so a person can judge at a glance
whether they look like real documents of their kind. Rejected pages show as a labelled blank tile.
"""

from __future__ import annotations

import argparse
import io
import math
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from schemas.deadletter import RecordError
from synth.pages import page_spec
from synth.plan import plan
from synth.render_html import HtmlRenderer

THUMB_H = 420
LABEL_H = 26
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def make_sheet(pages: int = 24, seed: int = 0, columns: int = 6, work_dir: Path | None = None) -> Image.Image:
    tiles: list[tuple[Image.Image | None, str]] = []
    with HtmlRenderer(work_dir) as renderer:
        for layout, suite, page_seed, pid in plan(pages, seed, "all"):
            spec = page_spec(layout, suite, page_seed, pid)
            try:
                img = Image.open(io.BytesIO(renderer.render(spec).png)).convert("RGB")
                tiles.append((img, f"{layout} / {suite}"))
            except RecordError as exc:
                tiles.append((None, f"{layout} / {suite}: {exc.reason}"))
    tile_w = max(int(THUMB_H * (img.width / img.height)) for img, _ in tiles if img is not None) if any(
        img for img, _ in tiles) else THUMB_H
    rows = math.ceil(len(tiles) / columns)
    pad = 14
    sheet = Image.new("RGB", (columns * (tile_w + pad) + pad, rows * (THUMB_H + LABEL_H + pad) + pad), "#d8d8d8")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.truetype(FONT, 15)
    for i, (img, label) in enumerate(tiles):
        x = pad + (i % columns) * (tile_w + pad)
        y = pad + (i // columns) * (THUMB_H + LABEL_H + pad)
        if img is not None:
            thumb = img.copy()
            thumb.thumbnail((tile_w, THUMB_H), Image.Resampling.LANCZOS)
            sheet.paste(thumb, (x + (tile_w - thumb.width) // 2, y + (THUMB_H - thumb.height) // 2))
        else:
            draw.rectangle((x, y, x + tile_w, y + THUMB_H), fill="#f4dede")
        draw.text((x, y + THUMB_H + 4), label, fill="#111", font=font)
    return sheet


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m synth.sheet", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("sheet.png"))
    ap.add_argument("--pages", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--columns", type=int, default=6)
    args = ap.parse_args(argv)
    sheet = make_sheet(args.pages, args.seed, args.columns)
    sheet.save(args.out, optimize=False)
    print(f"wrote {args.out} ({sheet.width}x{sheet.height})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
