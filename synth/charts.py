"""Seeded, text-free charts for ``Figure(kind="chart")`` blocks: one drawing, as SVG or as PNG.

The reference Markdown of a figure is only its caption, so a chart carries no text at all: no tick
labels, axis labels, titles or legends (anything legible would be unlabelled text). ``make_chart``
draws a ``Chart`` (kind and colours, recorded with the page) from a seed; ``chart_shapes`` turns it
into plain shapes (rectangles, polylines, polygons, circles, lines) in a 600x300 box, their data
drawn from the same seed. The HTML renderer inlines them as SVG (``chart_svg``: Chromium draws
them, nothing is rasterised in Python); the LaTeX renderer includes them as a PNG that Pillow
draws from the same shapes (``chart_png``: 2x supersampled, then reduced). Both are deterministic:
a function of the ``Chart`` only.
"""

from __future__ import annotations

import io
import math
import random
from dataclasses import dataclass
from functools import lru_cache

CHART_KINDS: tuple[str, ...] = ("bar", "line", "pie", "donut", "scatter", "area", "hbar", "stacked", "histogram",
                                 "step")
PALETTES: dict[str, tuple[str, ...]] = {
    "tab": ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf"),
    "muted": ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#64b5cd"),
    "dark": ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"),
    "pastel": ("#8dd3c7", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5"),
    "blues": ("#08306b", "#2171b5", "#6baed6", "#9ecae1", "#4292c6", "#08519c", "#c6dbef"),
    "warm": ("#b2182b", "#ef8a62", "#fddbc7", "#d6604d", "#f4a582", "#67001f", "#e08214"),
}
WIDTH, HEIGHT = 600, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 24.0, 588.0, 12.0, 282.0  # the plot area (as the matplotlib charts had)
_GRID, _AXIS = "#e4e4e4", "#333333"
_MARKERS = ("circle", "square", "triangle", "diamond")


@dataclass(frozen=True)
class Chart:
    """A chart to draw: its kind, its colours (in series order) and the seed of its data."""

    kind: str
    colors: tuple[str, ...]
    seed: str
    palette: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "palette": self.palette, "colors": list(self.colors)}


def make_chart(seed: int | str, kind: str | None = None) -> Chart:
    """The chart a seed names: ``kind`` (one of ``CHART_KINDS``, drawn from the seed when ``None``) and a
    seeded, shuffled palette."""
    rng = random.Random(f"chart:{seed}")
    kind = kind or rng.choice(CHART_KINDS)
    if kind not in CHART_KINDS:
        raise ValueError(f"unknown chart kind {kind!r}; expected one of {list(CHART_KINDS)}")
    name = rng.choice(sorted(PALETTES))
    colors = list(PALETTES[name])
    rng.shuffle(colors)
    return Chart(kind=kind, colors=tuple(colors), seed=str(seed), palette=name)


# A shape: (tag, geometry, style). Tags: rect (x, y, w, h), line (x1, y1, x2, y2), polyline and polygon
# (points), circle (cx, cy, r). Style keys: fill, stroke, width (stroke width), opacity.
Shape = tuple[str, tuple, dict]


def _scale(lo: float, hi: float, top: float = _TOP, bottom: float = _BOTTOM):
    span = (hi - lo) or 1.0
    return lambda v: bottom - (v - lo) / span * (bottom - top)


def _axes(rng: random.Random, horizontal: bool) -> list[Shape]:
    shapes: list[Shape] = []
    k = rng.randint(3, 6)
    for i in range(1, k + 1):  # grid lines across the values' axis
        if horizontal:
            x = _LEFT + i * (_RIGHT - _LEFT) / k
            shapes.append(("line", (x, _TOP, x, _BOTTOM), {"stroke": _GRID, "width": 1.0}))
        else:
            y = _BOTTOM - i * (_BOTTOM - _TOP) / k
            shapes.append(("line", (_LEFT, y, _RIGHT, y), {"stroke": _GRID, "width": 1.0}))
    shapes.append(("line", (_LEFT, _TOP, _LEFT, _BOTTOM), {"stroke": _AXIS, "width": 1.2}))
    shapes.append(("line", (_LEFT, _BOTTOM, _RIGHT, _BOTTOM), {"stroke": _AXIS, "width": 1.2}))
    return shapes


def _marker(kind: str, x: float, y: float, r: float, color: str) -> Shape:
    if kind == "circle":
        return ("circle", (x, y, r), {"fill": color})
    if kind == "square":
        return ("polygon", ((x - r, y - r), (x + r, y - r), (x + r, y + r), (x - r, y + r)), {"fill": color})
    if kind == "triangle":
        return ("polygon", ((x, y - r * 1.2), (x + r * 1.1, y + r * 0.8), (x - r * 1.1, y + r * 0.8)), {"fill": color})
    return ("polygon", ((x, y - r * 1.3), (x + r, y), (x, y + r * 1.3), (x - r, y)), {"fill": color})


def _wedges(rng: random.Random, colors: tuple[str, ...], donut: bool) -> list[Shape]:
    values = [rng.uniform(1, 10) for _ in range(rng.randint(3, 6))]
    total = sum(values)
    cx, cy, r = WIDTH / 2, HEIGHT / 2, (_BOTTOM - _TOP) / 2
    inner = r * (1 - rng.uniform(0.3, 0.5)) if donut else 0.0
    angle = math.radians(rng.randint(0, 359))
    shapes: list[Shape] = []
    for i, v in enumerate(values):
        sweep = 2 * math.pi * v / total
        steps = max(2, int(sweep / 0.05))
        arc = [angle + sweep * j / steps for j in range(steps + 1)]
        outer = [(cx + r * math.cos(a), cy - r * math.sin(a)) for a in arc]
        back = [(cx + inner * math.cos(a), cy - inner * math.sin(a)) for a in reversed(arc)] if donut else [(cx, cy)]
        shapes.append(("polygon", tuple(outer + back), {"fill": colors[i % len(colors)], "stroke": "#ffffff",
                                                        "width": 1.5}))
        angle += sweep
    return shapes


def chart_shapes(chart: Chart) -> list[Shape]:
    """The chart as shapes in a ``WIDTH`` x ``HEIGHT`` box, back to front."""
    rng = random.Random(f"chart-data:{chart.seed}:{chart.kind}")
    kind, colors = chart.kind, chart.colors
    if kind in ("pie", "donut"):
        return _wedges(rng, colors, kind == "donut")
    shapes = _axes(rng, kind == "hbar")
    n = rng.randint(4, 9)
    slot = (_RIGHT - _LEFT) / n
    xs = [_LEFT + slot * (i + 0.5) for i in range(n)]
    if kind in ("bar", "stacked", "histogram"):
        if kind == "histogram":
            mu, sd, bins = rng.uniform(-1, 1), rng.uniform(0.5, 2), rng.randint(10, 30)
            samples = [rng.gauss(mu, sd) for _ in range(400)]
            lo, hi = min(samples), max(samples)
            counts = [0] * bins
            for s in samples:
                counts[min(bins - 1, int((s - lo) / ((hi - lo) or 1) * bins))] += 1
            series, width, gap = [[float(c) for c in counts]], (_RIGHT - _LEFT) / bins, 0.0
        else:
            series = [[rng.uniform(5, 40) if kind == "stacked" else rng.uniform(10, 100) for _ in range(n)]
                      for _ in range(rng.randint(2, 4) if kind == "stacked" else 1)]
            width, gap = slot, 0.15 * slot
        top = max(sum(col) for col in zip(*series)) * rng.uniform(1.02, 1.15)
        y = _scale(0, top)
        base = [0.0] * len(series[0])
        for s, ys in enumerate(series):
            for i, v in enumerate(ys):
                x = _LEFT + width * i + gap
                style = {"fill": colors[s % len(colors)]}
                if kind == "histogram":
                    style |= {"stroke": "#ffffff", "width": 0.8}
                shapes.append(("rect", (x, y(base[i] + v), width - 2 * gap, y(base[i]) - y(base[i] + v)), style))
                base[i] += v
        return shapes
    if kind == "hbar":
        ys = [rng.uniform(10, 100) for _ in range(n)]
        band = (_BOTTOM - _TOP) / n
        right = max(ys) * rng.uniform(1.02, 1.15)
        for i, v in enumerate(ys):
            shapes.append(("rect", (_LEFT, _BOTTOM - band * (i + 0.85), v / right * (_RIGHT - _LEFT), band * 0.7),
                           {"fill": colors[0]}))
        return shapes
    for s in range(rng.choice([1, 1, 2])):
        color = colors[s % len(colors)]
        if kind == "scatter":
            pts = rng.randint(20, 80)
            slope = rng.uniform(-1.5, 1.5)
            px = [rng.uniform(0, 10) for _ in range(pts)]
            py = [slope * x + rng.gauss(0, 2.5) for x in px]
            y = _scale(min(py) - 1, max(py) + 1, _TOP + 8, _BOTTOM - 8)
            r = math.sqrt(rng.uniform(12, 40)) / 1.2
            shapes.extend(("circle", (_LEFT + 8 + x / 10 * (_RIGHT - _LEFT - 16), y(v), r),
                           {"fill": color, "opacity": 0.8}) for x, v in zip(px, py))
            continue
        ys = [rng.uniform(10, 100) for _ in xs]
        y = _scale(0, 110)
        line = [(x, y(v)) for x, v in zip(xs, ys)]
        if kind == "area":
            ground = [(xs[-1], _BOTTOM), (xs[0], _BOTTOM)]
            shapes.append(("polygon", tuple(line + ground), {"fill": color, "opacity": 0.55}))
        elif kind == "step":  # steps half-way between points (matplotlib's where="mid")
            pts = [(_LEFT, line[0][1])]
            for (x0, y0), (_, y1) in zip(line, line[1:]):
                pts += [(x0 + slot / 2, y0), (x0 + slot / 2, y1)]
            line = pts + [(_RIGHT, line[-1][1])]
        shapes.append(("polyline", tuple(line), {"stroke": color, "width": 2.5 if kind != "area" else 2.0}))
        if kind == "line":
            marker = rng.choice(_MARKERS)
            shapes.extend(_marker(marker, x, v, 4.5, color) for x, v in line)
    return shapes


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _points(pts: tuple) -> str:
    return " ".join(f"{_num(x)},{_num(y)}" for x, y in pts)


def _svg_shape(tag: str, geo: tuple, style: dict) -> str:
    attrs = {"rect": lambda: f'x="{_num(geo[0])}" y="{_num(geo[1])}" width="{_num(geo[2])}" height="{_num(geo[3])}"',
             "line": lambda: f'x1="{_num(geo[0])}" y1="{_num(geo[1])}" x2="{_num(geo[2])}" y2="{_num(geo[3])}"',
             "polyline": lambda: f'points="{_points(geo)}"',
             "polygon": lambda: f'points="{_points(geo)}"',
             "circle": lambda: f'cx="{_num(geo[0])}" cy="{_num(geo[1])}" r="{_num(geo[2])}"'}[tag]()
    fill = style.get("fill", "none")
    paint = f' fill="{fill}"'
    if "stroke" in style:
        paint += f' stroke="{style["stroke"]}" stroke-width="{_num(style["width"])}"'
        if tag == "polyline":
            paint += ' stroke-linejoin="round" stroke-linecap="round"'
    if "opacity" in style:
        paint += f' fill-opacity="{_num(style["opacity"])}"'
    return f"<{tag} {attrs}{paint}/>"


def chart_svg(chart: Chart) -> str:
    """The chart as an inline ``<svg>`` element (class ``chart``; scales to its container's width)."""
    body = "".join(_svg_shape(*shape) for shape in chart_shapes(chart))
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg" role="img">'
            f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>{body}</svg>')


def _rgba(color: str, opacity: float = 1.0) -> tuple[int, int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16), round(255 * opacity)


@lru_cache(maxsize=64)
def chart_png(chart: Chart, scale: int = 2) -> bytes:
    """The chart as ``WIDTH`` x ``HEIGHT`` PNG bytes, drawn by Pillow from ``chart_shapes`` at ``scale``x and
    reduced (LaTeX pages include it as a file); cached, as a LaTeX page may be drawn more than once."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (WIDTH * scale, HEIGHT * scale), "#ffffff")
    draw = ImageDraw.Draw(image, "RGBA")

    def pts(seq: tuple) -> list[tuple[float, float]]:
        return [(x * scale, y * scale) for x, y in seq]

    for tag, geo, style in chart_shapes(chart):
        fill = _rgba(style["fill"], style.get("opacity", 1.0)) if "fill" in style else None
        stroke = _rgba(style["stroke"]) if "stroke" in style else None
        width = max(1, round(style.get("width", 0) * scale))
        if tag == "rect":
            x, y, w, h = (v * scale for v in geo)
            draw.rectangle((x, y, x + w, y + h), fill=fill, outline=stroke, width=width if stroke else 0)
        elif tag == "line":
            draw.line(pts((geo[:2], geo[2:])), fill=stroke, width=width)
        elif tag == "polyline":
            draw.line(pts(geo), fill=stroke, width=width, joint="curve")
        elif tag == "polygon":
            draw.polygon(pts(geo), fill=fill)
            if stroke is not None:
                draw.line(pts(geo + geo[:1]), fill=stroke, width=width, joint="curve")
        else:
            cx, cy, r = (v * scale for v in geo)
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    image = image.reduce(scale)  # a box filter: each pixel the mean of its scale x scale samples
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


__all__ = ["CHART_KINDS", "PALETTES", "Chart", "chart_png", "chart_shapes", "chart_svg", "make_chart"]
