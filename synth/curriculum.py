"""A learnable curriculum of synthetic pages: large clean text a tiny VLM can learn to read on a CPU.

The full JinaOCRSynth pages (``synth.pages``: Chromium, 1024 px, dense multi-block layouts) are far
beyond what a few-million-parameter model learns in minutes. This suite is the ``shakespeare_char``
of page reading: few lines of large text in a handful of fonts, on small images (448 px wide), with
short responses, in levels a curriculum steps through:

========  =====  ============  ==========  ==================================================
level     lines  font size px  image px    text of a line, extra
========  =====  ============  ==========  ==================================================
0         1      32-36         280 x 56    one word of the vocabulary; 2 fonts
1         2      26-28         336 x 112   ``<Name> <object>``; 2 fonts
2         2      24-26         448 x 128   a sentence; 2 fonts, black on white
3         3      20-24         448 x 168   sentences; 4 fonts
4         4      18-22         448 x 196   4 fonts, a heading line, slight grey/jitter
5         4      18-22         448 x 196   as 4, then one ``synth.augment`` degradation
6         1      26-36         336 x 56    one word at a random x (between 0 and 1; numbered last)
========  =====  ============  ==========  ==================================================

A sentence is ``<Name> <verb> the <object>.`` drawn from a fixed vocabulary (24 names, 16 verbs, 40
objects: ~15k sentences, so held-out pages show sentences never trained on, made of
known words). The page is a ``synth.blocks.PageSpec`` of ``Paragraph`` (and ``Heading``) blocks, so
its reference Markdown (``synth.reference``) and its unit tests (``synth.tests_from_blocks``, built
and verified through ``schemas.unit_tests``) are exactly those of every synthetic page: ``order``
for line pairs, ``present`` for the long object words, ``format`` for the heading, ``baseline``.

Rendering is PIL (``ImageDraw.text`` with TrueType fonts): a line of text on a white page needs no
browser, and a page costs about a millisecond instead of Chromium's ~0.5 s, so the whole suite is
rebuilt in seconds and cached under ``out/curriculum`` (``python -m synth.curriculum``). Train pages
come from ``--seed``, eval pages (split ``eval``) from ``--eval-seed``; each record's domain is
``curriculum-l<level>`` so evaluation reports per level. Levels 0 and 1 exist because a from-scratch
model first has to learn that the page decides the answer: on sentence pages (level 2) the tiny model
learns the sentence template long before it looks at the image (issue 22's sweep, docs/training.md).
Level 6 measures whether a model reads a word wherever it stands: level 0 puts every word at x = 12, and a
model trained on it reads 90% of level-0 objects but 2.5% of the same words at another x (docs/training.md);
it is numbered last so that the other levels keep their numbers.
"""

from __future__ import annotations

import argparse
import io
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from schemas.config import bounded_arg
from schemas.page import PAGE_SCHEMA, PageRecord
from synth.blocks import Heading, PageSpec, Paragraph, PlacedBlock
from synth.pages import synthesize_page, to_page_record

SOURCE = "curriculum"
FONT_DIR = Path("/usr/share/fonts/truetype")
FONTS = ("dejavu/DejaVuSans.ttf", "liberation/LiberationSerif-Regular.ttf", "dejavu/DejaVuSerif.ttf",
         "liberation/LiberationSans-Regular.ttf")

NAMES = ("Marta", "Oskar", "Helen", "Bruno", "Clara", "Diego", "Fiona", "Irene", "Jonas", "Karla", "Lucas",
         "Nadia", "Pablo", "Rita", "Simon", "Tomas", "Vera", "Walter", "Yusuf", "Zora", "Emil", "Greta", "Anton",
         "Lena")
VERBS = ("painted", "carried", "found", "opened", "watched", "cleaned", "bought", "moved", "sold", "fixed",
         "drew", "lost", "kept", "built", "saw", "took")
OBJECTS = ("telescope", "lighthouse", "blueprint", "newspaper", "umbrellas", "sandwiches", "paintings",
           "documents", "saxophone", "waterfall", "bookshelf", "staircase", "submarine", "sunflowers",
           "raincoats", "harmonica", "necklaces", "container", "butterfly", "envelopes", "lanterns", "windmill",
           "pineapple", "carousel", "microscope", "typewriter", "chocolate", "blanket", "notebook", "camera",
           "bicycle", "compass", "kettle", "ladder", "mirror", "piano", "teapot", "violin", "wagon", "clock")
HEADINGS = ("Morning notes", "Daily report", "Field diary", "Workshop log", "Market list", "Harbour news")


@dataclass(frozen=True)
class Level:
    lines: int
    font_px: tuple[int, int]
    size: tuple[int, int]
    fonts: int
    heading: bool = False
    jitter: bool = False
    degrade: bool = False
    text: str = "sentence"  # a line is a "word", a "pair" (<Name> <object>) or a "sentence"
    random_x: bool = False  # lines start at a random x instead of 12 px
    train_pages: int = 600  # default train pages of the level (the first levels are trained on longest)


LEVELS: dict[int, Level] = {
    0: Level(1, (32, 36), (280, 56), 2, text="word", train_pages=2000),
    1: Level(2, (26, 28), (336, 112), 2, text="pair", train_pages=2000),
    2: Level(2, (24, 26), (448, 128), 2),
    3: Level(3, (20, 24), (448, 168), 4),
    4: Level(4, (18, 22), (448, 196), 4, heading=True, jitter=True),
    5: Level(4, (18, 22), (448, 196), 4, heading=True, jitter=True, degrade=True),
    6: Level(1, (26, 36), (336, 56), 2, text="word", random_x=True, train_pages=2000),
}


@dataclass
class RenderedCurriculumPage:
    png: bytes
    html: str
    width: int
    height: int


class PILRenderer:
    """Draws a curriculum page's blocks as lines of text; ``fills_pages`` is False (nothing optional)."""

    fills_pages = False

    def __init__(self, level: Level, rng: random.Random):
        self.level, self.rng = level, rng

    def render(self, spec: PageSpec) -> RenderedCurriculumPage:
        lv, rng = self.level, self.rng
        font_file = FONT_DIR / FONTS[rng.randrange(lv.fonts)]
        size = rng.randint(*lv.font_px)
        font = ImageFont.truetype(str(font_file), size)
        bold = ImageFont.truetype(str(font_file), size + 2)
        width, height = spec.width_px, spec.height_px
        ink = rng.randint(0, 60) if lv.jitter else 0
        paper = rng.randint(235, 255) if lv.jitter else 255
        image = Image.new("L", (width, height), paper)
        draw = ImageDraw.Draw(image)
        lines = [(b.block.text, bold if isinstance(b.block, Heading) else font) for b in spec.blocks]
        step = (height - 16) // len(lines)
        widest = max(draw.textlength(text, font=f) for text, f in lines)
        if lv.random_x:
            x0 = rng.randint(12, max(12, int(width - widest) - 6))
        else:
            x0 = rng.randint(6, max(6, int(width - widest) - 6)) if lv.jitter else 12
        for i, (text, f) in enumerate(lines):
            if draw.textlength(text, font=f) > width - x0 - 2:
                raise ValueError(f"curriculum: line {text!r} does not fit {width} px at {size} px")
            y = 8 + i * step + (step - size) // 2 + (rng.randint(-2, 2) if lv.jitter else 0)
            draw.text((x0, y), text, fill=ink, font=f)
        buf = io.BytesIO()
        image.save(buf, format="PNG", optimize=False)
        return RenderedCurriculumPage(buf.getvalue(), f"<!-- PIL {font_file.name} {size}px -->", width, height)


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(NAMES)} {rng.choice(VERBS)} the {rng.choice(OBJECTS)}."


def page_spec(level: int, seed: int, index: int) -> tuple[PageSpec, random.Random]:
    """The spec of page ``index`` of ``level`` under ``seed``, and the RNG its renderer continues."""
    lv = LEVELS[level]
    rng = random.Random(f"curriculum:{level}:{seed}:{index}")
    blocks: list[PlacedBlock] = []
    if lv.heading:
        blocks.append(PlacedBlock(Heading(rng.choice(HEADINGS), level=2)))
    blocks += [PlacedBlock(Paragraph(s)) for s in _drawn(level, seed, index, lv.lines)]
    width, height = lv.size
    spec = PageSpec(id=f"curriculum-l{level}-s{seed}-{index:05d}", layout="curriculum", suite="layout",
                    width_px=width, height_px=height, blocks=tuple(blocks), seed=seed,
                    sources=("curriculum vocabulary (synth/curriculum.py), cc0-1.0",))
    return spec, rng


def _drawn(level: int, seed: int, index: int, n: int) -> list[str]:
    """``n`` distinct sentences in draw order (their own RNG, so the text does not depend on the look)."""
    rng = random.Random(f"curriculum-text:{level}:{seed}:{index}")
    kind = LEVELS[level].text
    if kind == "word":
        return [rng.choice(NAMES + VERBS + OBJECTS) for _ in range(n)]
    out: list[str] = []
    while len(out) < n:
        s = f"{rng.choice(NAMES)} {rng.choice(OBJECTS)}" if kind == "pair" else sentence(rng)
        if s not in out:
            out.append(s)
    return out


def make_record(level: int, seed: int, index: int, split: str = "train") -> PageRecord:
    """One curriculum page as a corpus row: PIL-rendered, reference and unit tests from its blocks."""
    spec, rng = page_spec(level, seed, index)
    page = synthesize_page(spec, PILRenderer(LEVELS[level], rng))
    page.renderer = "pil"
    applied: list[dict] = []
    if LEVELS[level].degrade:
        import numpy as np

        from synth.augment import degrade, degraded_elements

        original = Image.open(io.BytesIO(page.png))
        degraded, applied = degrade(original, np.random.default_rng(rng.randrange(2**32)))
        buf = io.BytesIO()
        degraded.save(buf, format="PNG")
        page.png = buf.getvalue()
        # a shrink or a quarter turn changes the size, and every geometric op moves the boxes
        page.width, page.height = degraded.size
        page.elements = degraded_elements(page.elements, applied, original.size)
    record = to_page_record(page, spec)
    quality = {**record.quality, "augment": {"applied": applied}} if applied else record.quality
    return replace(record, source=SOURCE, id=f"{SOURCE}-{spec.id}", domain=f"curriculum-l{level}", split=split,
                   metadata={**record.metadata, "level": level}, quality=quality)


ROW_GROUP_ROWS = 64


def build(out: str | Path, levels: tuple[int, ...] = tuple(LEVELS), train_per_level: int | None = None,
          eval_per_level: int = 40, seed: int = 0, eval_seed: int = 1) -> dict:
    """Write ``out/data/{train,eval}-00000-of-00001.parquet`` and ``out/manifest.json``; returns the manifest.

    ``train_per_level``: train pages of every level (None: each level's ``train_pages``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    levels = tuple(levels)
    if not levels or len(set(levels)) != len(levels) or any(lv not in LEVELS for lv in levels):
        raise ValueError(f"levels {list(levels)}: distinct levels of {sorted(LEVELS)}, at least one")
    if (train_per_level is not None and train_per_level < 0) or eval_per_level < 0:
        raise ValueError(f"pages per level must be >= 0 (train {train_per_level}, eval {eval_per_level})")
    out = Path(out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    counts: dict[str, dict[str, int]] = {}
    tests: dict[str, int] = {}
    for split, s in (("train", seed), ("eval", eval_seed)):
        n = {lv: eval_per_level if split == "eval" else
             LEVELS[lv].train_pages if train_per_level is None else train_per_level for lv in levels}
        rows: list[dict] = []
        # a row group at a time, as it is made: memory does not grow with the page count
        with pq.ParquetWriter(out / "data" / f"{split}-00000-of-00001.parquet", PAGE_SCHEMA) as writer:
            for i in range(max(n.values())):  # levels interleaved, so the first k eval pages cover every level
                for level in (lv for lv in levels if i < n[lv]):
                    record = make_record(level, s, i, split)
                    rows.append(record.to_row())
                    for t in record.unit_tests:
                        kind = json.loads(t)["type"]
                        tests[kind] = tests.get(kind, 0) + 1
                    if len(rows) == ROW_GROUP_ROWS:
                        writer.write_table(pa.Table.from_pylist(rows, schema=PAGE_SCHEMA))
                        rows = []
            if rows:
                writer.write_table(pa.Table.from_pylist(rows, schema=PAGE_SCHEMA))
        counts[split] = {f"curriculum-l{level}": n[level] for level in levels}
    manifest = {"source": SOURCE, "levels": list(levels), "seed": seed, "eval_seed": eval_seed, "pages": counts,
                "unit_tests": tests}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _levels_arg(text: str) -> tuple[int, ...]:
    """``--levels``: comma-separated distinct known levels, at least one, in the order given."""
    try:
        levels = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of levels of "
                                         f"{sorted(LEVELS)}") from None
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown levels {bad}; known: {sorted(LEVELS)}")
    repeated = sorted({lv for lv in levels if levels.count(lv) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"levels {repeated} given more than once (each would write its pages "
                                         "twice under one id)")
    return levels


_COUNT = bounded_arg(int, 0, None, "a page count (an integer >= 0)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m synth.curriculum", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out/curriculum", help="folder for data/*.parquet and manifest.json")
    ap.add_argument("--levels", type=_levels_arg, default=tuple(LEVELS),
                    help=f"comma-separated distinct levels of {sorted(LEVELS)} (default: all)")
    ap.add_argument("--train", type=_COUNT, help="train pages per level, >= 0 (default: the level's own count, "
                    + ", ".join(f"{k}: {v.train_pages}" for k, v in LEVELS.items()) + ")")
    ap.add_argument("--eval", type=_COUNT, default=40, help="eval pages per level, >= 0")
    ap.add_argument("--seed", type=int, default=0, help="seed of the train pages")
    ap.add_argument("--eval-seed", type=int, default=1, help="seed of the eval pages (must differ from --seed)")
    args = ap.parse_args(argv)
    if args.seed == args.eval_seed:
        ap.error("--eval-seed must differ from --seed: eval pages are held out by seed")
    manifest = build(args.out, args.levels, args.train, args.eval, args.seed, args.eval_seed)
    print(json.dumps(manifest))


if __name__ == "__main__":
    main()
