"""Seeded, text-free charts drawn with matplotlib (Agg) for ``Figure(kind="chart")`` blocks.

The reference Markdown of a figure is only its caption, so the chart carries no text at all: no
tick labels, axis labels, titles or legends (anything legible in the image would be unlabelled
text). Bytes are deterministic for a given seed: fixed size and dpi, and no ``Software`` metadata.
"""

from __future__ import annotations

import io
import random

CHART_KINDS: tuple[str, ...] = ("bar", "line", "pie", "donut", "scatter", "area", "hbar", "stacked", "histogram",
                                 "step")
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf")


def chart_png(seed: int | str, kind: str | None = None, *, width_in: float = 6.0, height_in: float = 3.0,
              dpi: int = 100) -> bytes:
    """A chart of ``kind`` (one of ``CHART_KINDS``; drawn from the seed when ``None``) as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure as MplFigure

    rng = random.Random(f"chart:{seed}")
    kind = kind or rng.choice(CHART_KINDS)
    if kind not in CHART_KINDS:
        raise ValueError(f"unknown chart kind {kind!r}; expected one of {list(CHART_KINDS)}")
    fig = MplFigure(figsize=(width_in, height_in), dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    n = rng.randint(4, 9)
    colors = list(_PALETTE)
    rng.shuffle(colors)
    if kind in ("pie", "donut"):
        values = [rng.uniform(1, 10) for _ in range(min(n, 6))]
        wedge = {"edgecolor": "white", "linewidth": 1.5}
        if kind == "donut":
            wedge["width"] = rng.uniform(0.3, 0.5)
        ax.pie(values, colors=colors[: len(values)], startangle=rng.randint(0, 359), wedgeprops=wedge)
        ax.set_aspect("equal")
        ax.axis("off")
    else:
        series = rng.choice([1, 1, 2]) if kind in ("line", "area", "step", "scatter") else 1
        xs = list(range(n))
        if kind == "stacked":
            bottom = [0.0] * n
            for s in range(rng.randint(2, 4)):
                ys = [rng.uniform(5, 40) for _ in xs]
                ax.bar(xs, ys, bottom=bottom, color=colors[s], width=0.7)
                bottom = [b + y for b, y in zip(bottom, ys)]
        elif kind == "histogram":
            mu, sd = rng.uniform(-1, 1), rng.uniform(0.5, 2)
            ax.hist([rng.gauss(mu, sd) for _ in range(400)], bins=rng.randint(10, 30), color=colors[0],
                    edgecolor="white", linewidth=0.6)
        for s in range(series if kind not in ("stacked", "histogram") else 0):
            ys = [rng.uniform(10, 100) for _ in xs]
            if kind == "bar":
                ax.bar(xs, ys, color=colors[s], width=0.7)
            elif kind == "hbar":
                ax.barh(xs, ys, color=colors[s], height=0.7)
            elif kind == "area":
                ax.fill_between(xs, ys, color=colors[s], alpha=0.55, linewidth=0)
                ax.plot(xs, ys, color=colors[s], linewidth=2)
            elif kind == "step":
                ax.step(xs, ys, where="mid", color=colors[s], linewidth=2.5)
            elif kind == "scatter":
                pts = rng.randint(20, 80)
                slope = rng.uniform(-1.5, 1.5)
                px = [rng.uniform(0, 10) for _ in range(pts)]
                ax.scatter(px, [slope * x + rng.gauss(0, 2.5) for x in px], color=colors[s],
                           s=rng.uniform(12, 40), alpha=0.8, linewidths=0)
            else:
                ax.plot(xs, ys, color=colors[s], linewidth=2.5, marker=rng.choice("os^D"), markersize=5)
        ax.grid(axis="x" if kind == "hbar" else "y", color="#e4e4e4", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.tick_params(labelbottom=False, labelleft=False, length=0)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.subplots_adjust(left=0.04, right=0.98, top=0.96, bottom=0.06)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()
