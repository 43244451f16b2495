"""Seeded procedural pictures for ``Figure`` blocks: text-free images a model cannot memorise.

A page's reference Markdown holds only a figure's caption, so a picture must carry no text. Instead
of one fixed drawing, each figure gets a picture generated from its seed: one of ``PICTURE_KINDS``

* ``landscape``: a gradient sky, a sun or moon, two to four ridges (seeded random walks), ground;
* ``shapes``: translucent ellipses, rectangles, triangles and polygons over a gradient;
* ``gradient``: linear or radial gradients of two to four stops with soft blobs;
* ``texture``: stripes, rings, checks, plasma or value noise in a seeded palette;
* ``mosaic``: Voronoi cells (nearest of a few seeded points), optionally with cell borders;

with its colours, geometry and aspect drawn from the seed. numpy computes pixel fields and Pillow
draws shapes (2x supersampled, then reduced, for smooth edges). The same seed always gives the same
PNG bytes (Pillow's encoder writes no timestamps).
"""

from __future__ import annotations

import colorsys
import hashlib
import io
import math
import random

import numpy as np
from PIL import Image, ImageDraw

PICTURE_KINDS: tuple[str, ...] = ("landscape", "shapes", "gradient", "texture", "mosaic")
TEXTURES: tuple[str, ...] = ("stripes", "rings", "checks", "plasma", "noise")


def _colour(rng: random.Random, *, sat: tuple[float, float] = (0.25, 0.8),
            light: tuple[float, float] = (0.3, 0.8), hue: float | None = None) -> tuple[int, int, int]:
    h = rng.random() if hue is None else hue % 1.0
    r, g, b = colorsys.hls_to_rgb(h, rng.uniform(*light), rng.uniform(*sat))
    return int(r * 255), int(g * 255), int(b * 255)


def _palette(rng: random.Random, n: int) -> list[tuple[int, int, int]]:
    """``n`` colours around a seeded base hue (analogous, complementary or triadic)."""
    base = rng.random()
    step = rng.choice([0.06, 0.1, 0.33, 0.5])
    return [_colour(rng, hue=base + step * i + rng.uniform(-0.03, 0.03)) for i in range(n)]


def _np_rng(rng: random.Random) -> np.random.Generator:
    return np.random.default_rng(rng.getrandbits(64))


def _lerp_stops(t: np.ndarray, colours: list[tuple[int, int, int]]) -> np.ndarray:
    """Colour ramp: ``t`` in [0, 1] -> RGB through evenly spaced ``colours``."""
    stops = np.asarray(colours, dtype=np.float32)
    pos = np.clip(t, 0.0, 1.0) * (len(colours) - 1)
    i = np.minimum(pos.astype(np.int32), len(colours) - 2)
    f = (pos - i)[..., None]
    return stops[i] * (1 - f) + stops[i + 1] * f


def _grid(w: int, h: int) -> tuple[np.ndarray, np.ndarray]:
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    return xs / max(w - 1, 1), ys / max(h - 1, 1)


def _linear(w: int, h: int, rng: random.Random, colours: list[tuple[int, int, int]]) -> np.ndarray:
    x, y = _grid(w, h)
    a = rng.uniform(0, 2 * math.pi)
    t = x * math.cos(a) + y * math.sin(a)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    return _lerp_stops(t, colours)


def _value_noise(w: int, h: int, nrng: np.random.Generator, cells: int) -> np.ndarray:
    """Smooth noise in [0, 1]: a coarse random grid, bilinearly enlarged by Pillow."""
    coarse = nrng.random((max(2, cells * h // w + 1), cells + 1)).astype(np.float32)
    img = Image.fromarray((coarse * 255).astype(np.uint8), "L").resize((w, h), Image.Resampling.BICUBIC)
    return np.asarray(img, dtype=np.float32) / 255.0


def _landscape(w: int, h: int, rng: random.Random) -> Image.Image:
    night = rng.random() < 0.2
    sky = [_colour(rng, light=(0.1, 0.25), sat=(0.3, 0.6)), _colour(rng, light=(0.25, 0.4))] if night else \
        [_colour(rng, light=(0.55, 0.75), sat=(0.3, 0.7), hue=rng.uniform(0.5, 0.65)),
         _colour(rng, light=(0.8, 0.92), sat=(0.2, 0.6))]
    x, y = _grid(w, h)
    img = Image.fromarray(_lerp_stops(y, sky).astype(np.uint8), "RGB")
    s = 2
    big = img.resize((w * s, h * s), Image.Resampling.NEAREST)
    d = ImageDraw.Draw(big, "RGBA")
    r = rng.uniform(0.05, 0.1) * h * s
    cx, cy = rng.uniform(0.1, 0.9) * w * s, rng.uniform(0.12, 0.4) * h * s
    d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=(245, 240, 215, 255) if not night else (230, 230, 240, 255))
    hue = rng.random()
    n = rng.randint(2, 4)
    for k in range(n):
        base = h * s * (0.45 + 0.45 * k / n + rng.uniform(-0.05, 0.05))
        pts, yy = [], base
        steps = rng.randint(6, 18)
        for i in range(steps + 1):
            yy = min(h * s, max(h * s * 0.2, yy + rng.uniform(-0.12, 0.12) * h * s))
            pts.append((i * w * s / steps, yy))
        shade = _colour(rng, hue=hue + rng.uniform(-0.05, 0.05), light=(0.55 - 0.12 * k, 0.65 - 0.12 * k),
                        sat=(0.15, 0.45))
        d.polygon(pts + [(w * s, h * s), (0, h * s)], fill=shade + (255,))
    return big.resize((w, h), Image.Resampling.LANCZOS)


def _shapes(w: int, h: int, rng: random.Random) -> Image.Image:
    bg = _linear(w, h, rng, [_colour(rng, light=(0.82, 0.95)), _colour(rng, light=(0.7, 0.9))])
    s = 2
    big = Image.fromarray(bg.astype(np.uint8), "RGB").resize((w * s, h * s), Image.Resampling.NEAREST)
    d = ImageDraw.Draw(big, "RGBA")
    colours = _palette(rng, rng.randint(3, 6))
    for _ in range(rng.randint(8, 28)):
        c = rng.choice(colours) + (rng.randint(110, 235),)
        cx, cy = rng.uniform(0, w * s), rng.uniform(0, h * s)
        size = rng.uniform(0.04, 0.25) * h * s
        kind = rng.choice(["ellipse", "rect", "triangle", "polygon", "ring"])
        if kind == "ellipse":
            d.ellipse((cx - size, cy - size * rng.uniform(0.5, 1.2), cx + size, cy + size * rng.uniform(0.5, 1.2)),
                      fill=c)
        elif kind == "ring":
            d.ellipse((cx - size, cy - size, cx + size, cy + size), outline=c, width=max(2, int(size * 0.2)))
        elif kind == "rect":
            d.rectangle((cx - size, cy - size * 0.6, cx + size * rng.uniform(0.4, 1.6), cy + size * 0.6), fill=c)
        else:
            k = 3 if kind == "triangle" else rng.randint(5, 8)
            a0 = rng.uniform(0, 2 * math.pi)
            d.polygon([(cx + size * rng.uniform(0.6, 1.0) * math.cos(a0 + 2 * math.pi * i / k),
                        cy + size * rng.uniform(0.6, 1.0) * math.sin(a0 + 2 * math.pi * i / k)) for i in range(k)],
                      fill=c)
    return big.resize((w, h), Image.Resampling.LANCZOS)


def _gradient(w: int, h: int, rng: random.Random) -> Image.Image:
    colours = _palette(rng, rng.randint(2, 4))
    if rng.random() < 0.5:
        arr = _linear(w, h, rng, colours)
    else:
        x, y = _grid(w, h)
        cx, cy = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9)
        t = np.sqrt(((x - cx) * w / h) ** 2 + (y - cy) ** 2)
        arr = _lerp_stops(t / max(float(t.max()), 1e-6), colours)
    x, y = _grid(w, h)
    for _ in range(rng.randint(0, 4)):  # soft blobs of light or shade
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.08, 0.35)
        g = np.exp(-(((x - cx) * w / h) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None]
        target = np.asarray(_colour(rng, light=(0.15, 0.95)), dtype=np.float32)
        arr = arr * (1 - 0.7 * g) + target * 0.7 * g
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def _texture(w: int, h: int, rng: random.Random) -> Image.Image:
    kind = rng.choice(TEXTURES)
    x, y = _grid(w, h)
    x = x * w / h  # square units
    a = rng.uniform(0, math.pi)
    u = x * math.cos(a) + y * math.sin(a)
    freq = rng.uniform(4, 18)
    if kind == "stripes":
        t = 0.5 + 0.5 * np.sin(2 * math.pi * freq * u)
        if rng.random() < 0.5:
            t = (t > 0.5).astype(np.float32)
    elif kind == "rings":
        cx, cy = rng.uniform(0, w / h), rng.uniform(0, 1)
        t = 0.5 + 0.5 * np.sin(2 * math.pi * freq * np.sqrt((x - cx) ** 2 + (y - cy) ** 2))
    elif kind == "checks":
        v = -x * math.sin(a) + y * math.cos(a)
        n = freq / 2
        t = ((np.floor(u * n) + np.floor(v * n)) % 2).astype(np.float32)
    elif kind == "plasma":
        t = np.zeros_like(x)
        for _ in range(rng.randint(2, 4)):
            b = rng.uniform(0, 2 * math.pi)
            t += np.sin(2 * math.pi * rng.uniform(1, 6) * (x * math.cos(b) + y * math.sin(b)) + rng.uniform(0, 6))
        t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    else:
        nrng = _np_rng(rng)
        t = 0.6 * _value_noise(w, h, nrng, rng.randint(4, 10)) + 0.4 * _value_noise(w, h, nrng, rng.randint(16, 40))
    return Image.fromarray(_lerp_stops(t, _palette(rng, rng.randint(2, 3))).astype(np.uint8), "RGB")


def _mosaic(w: int, h: int, rng: random.Random) -> Image.Image:
    k = rng.randint(6, 24)
    nrng = _np_rng(rng)
    pts = nrng.random((k, 2)).astype(np.float32) * np.array([w, h], dtype=np.float32)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    d2 = (xs[..., None] - pts[:, 0]) ** 2 + (ys[..., None] - pts[:, 1]) ** 2
    colours = np.asarray([_colour(rng) for _ in range(k)], dtype=np.uint8)
    if rng.random() < 0.6:  # cell borders where the two nearest points are about equally far
        d_near = np.partition(d2, 1, axis=-1)[..., :2]
        arr = colours[np.argmin(d2, axis=-1)]
        edge = (np.sqrt(d_near[..., 1]) - np.sqrt(d_near[..., 0])) < rng.uniform(1.5, 4.0)
        arr[edge] = _colour(rng, light=(0.1, 0.95), sat=(0.0, 0.2))
    else:
        arr = colours[np.argmin(d2, axis=-1)]
    return Image.fromarray(arr, "RGB")


_DRAW = {"landscape": _landscape, "shapes": _shapes, "gradient": _gradient, "texture": _texture, "mosaic": _mosaic}


def picture_png(seed: int | str, kind: str | None = None, *, width: int = 384, height: int | None = None) -> bytes:
    """A seeded text-free picture (``kind`` from ``PICTURE_KINDS``, drawn from the seed when ``None``) as
    PNG bytes; ``height`` defaults to a seeded 0.4-0.6 of the width."""
    digest = hashlib.sha256(f"picture:{seed}".encode("utf-8")).hexdigest()
    rng = random.Random(digest)
    kind = kind or rng.choice(PICTURE_KINDS)
    if kind not in _DRAW:
        raise ValueError(f"unknown picture kind {kind!r}; expected one of {list(PICTURE_KINDS)}")
    h = height or int(width * rng.uniform(0.4, 0.6))
    image = _DRAW[kind](width, h, rng)
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


__all__ = ["PICTURE_KINDS", "TEXTURES", "picture_png"]
