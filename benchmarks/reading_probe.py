"""Issue 22: does a checkpoint read a word, or recognise it at the one size and place it was trained on?

    python benchmarks/reading_probe.py --checkpoint out/model/sft-alignment [--pages 40]

Greedy-decodes ``--pages`` pages of each probe, drawn with the curriculum's renderer (``synth.curriculum``)
from a seed no corpus uses, and prints one JSON line a probe: the share of object words (the long words
that carry the ``present`` tests) and of names that appear in the prediction, and three examples.

- ``l0``: level 0 with an object word (x = 12, 32-36 px, 280 x 56): what the model was trained on;
- ``l0-27px``: the same page with the word at 26-28 px, level 1's size;
- ``l0-random-x``: the word at 32-36 px at a random x of a 448 px wide page;
- ``l1``: level 1 (two ``<Name> <object>`` lines, 26-28 px; objects start after names of any width);
- ``l1-objects-only``: level 1's page with an object alone on each line, at x = 12.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import synth.curriculum as cur  # noqa: E402

PROBE_LEVEL = 99  # a level number of no corpus: the probe's pages are registered under it one probe at a time


class ShiftedWord(cur.PILRenderer):
    """One line at a random x (the renderer's own RNG), font 32-36 px, vertically centred."""

    def render(self, spec):
        from PIL import Image, ImageDraw, ImageFont

        font = ImageFont.truetype(str(cur.FONT_DIR / cur.FONTS[self.rng.randrange(2)]), self.rng.randint(32, 36))
        text = spec.blocks[0].block.text
        image = Image.new("L", (spec.width_px, spec.height_px), 255)
        draw = ImageDraw.Draw(image)
        x = self.rng.randint(12, int(spec.width_px - draw.textlength(text, font=font)) - 6)
        draw.text((x, 11), text, fill=0, font=font)
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        return cur.RenderedCurriculumPage(buf.getvalue(), "", spec.width_px, spec.height_px)


PROBES = {
    "l0": (cur.LEVELS[0], lambda rng: [rng.choice(cur.OBJECTS)]),
    "l0-27px": (replace(cur.LEVELS[0], font_px=(26, 28)), lambda rng: [rng.choice(cur.OBJECTS)]),
    "l0-random-x": (replace(cur.LEVELS[0], size=(448, 56)), lambda rng: [rng.choice(cur.OBJECTS)]),
    "l1": (cur.LEVELS[1], lambda rng: [f"{rng.choice(cur.NAMES)} {rng.choice(cur.OBJECTS)}" for _ in range(2)]),
    "l1-objects-only": (cur.LEVELS[1], lambda rng: [rng.choice(cur.OBJECTS) for _ in range(2)]),
}


def probe_rows(name: str, pages: int) -> list[dict]:
    level, draw = PROBES[name]
    renderer, drawn = cur.PILRenderer, cur._drawn
    rows = []
    try:
        cur.LEVELS[PROBE_LEVEL] = level
        if name == "l0-random-x":
            cur.PILRenderer = ShiftedWord
        for i in range(pages):
            lines = draw(random.Random(f"reading-probe:{name}:{i}"))
            cur._drawn = lambda level, seed, index, n, lines=lines: list(lines)
            row = cur.make_record(PROBE_LEVEL, 7, i, "eval").to_row()
            if isinstance(row.get("image"), dict):
                row["image"] = row["image"]["bytes"]
            rows.append(row)
    finally:
        cur.PILRenderer, cur._drawn = renderer, drawn
        cur.LEVELS.pop(PROBE_LEVEL, None)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--pages", type=int, default=40)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from model.data import DataConfig, SampleSource
    from model.eval import greedy_batch
    from model.models import load

    loaded = load(args.checkpoint)
    for name in PROBES:
        rows = probe_rows(name, args.pages)
        samples = list(SampleSource(loaded.processor, DataConfig(path="-", eval_fraction=0.0), "eval",
                                    records=iter(rows)))
        preds: list[str] = []
        for k in range(0, len(samples), 20):
            outs = greedy_batch(loaded, [s.encoded for s in samples[k:k + 20]], 24)
            preds += [loaded.processor.decode(o).replace("<|im_end|>", "").strip() for o in outs]
        objects = names = n_objects = n_names = 0
        for sample, pred in zip(samples, preds):
            words = pred.split()
            for line in filter(None, (ln.split() for ln in sample.response.split("\n"))):
                n_objects += 1
                objects += line[-1] in words
                if len(line) > 1:
                    n_names += 1
                    names += line[0] in words
        print(json.dumps({"probe": name, "pages": len(samples), "objects_read": round(objects / max(1, n_objects), 3),
                          "names_read": round(names / n_names, 3) if n_names else None,
                          "examples": [[s.response.strip(), p] for s, p in zip(samples[:3], preds[:3])]}), flush=True)


if __name__ == "__main__":
    main()
