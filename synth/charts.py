"""Seeded, text-free charts drawn with matplotlib (Agg) for ``Figure(kind="chart")`` blocks.

The reference Markdown of a figure is only its caption, so the chart carries no text at all: no
tick labels, axis labels, titles or legends (anything legible in the image would be unlabelled
text). Bytes are deterministic for a given seed: fixed size and dpi, and no ``Software`` metadata.
"""

from __future__ import annotations

import io
import random

CHART_KINDS: tuple[str, ...] = ("bar", "line", "pie")
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf")


def chart_png(seed: int | str, kind: str | None = None, *, width_in: float = 6.0, height_in: float = 3.0,
              dpi: int = 100) -> bytes:
    """A bar, line or pie chart (``kind``; drawn from the seed when ``None``) as PNG bytes."""
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
    if kind == "pie":
        values = [rng.uniform(1, 10) for _ in range(min(n, 6))]
        ax.pie(values, colors=colors[: len(values)], startangle=rng.randint(0, 359),
               wedgeprops={"edgecolor": "white", "linewidth": 1.5})
        ax.set_aspect("equal")
        ax.axis("off")
    else:
        series = rng.choice([1, 1, 2]) if kind == "line" else 1
        xs = list(range(n))
        for s in range(series):
            ys = [rng.uniform(10, 100) for _ in xs]
            if kind == "bar":
                ax.bar(xs, ys, color=colors[s], width=0.7)
            else:
                ax.plot(xs, ys, color=colors[s], linewidth=2.5, marker="o", markersize=5)
        ax.grid(axis="y", color="#e4e4e4", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.tick_params(labelbottom=False, labelleft=False, length=0)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.subplots_adjust(left=0.04, right=0.98, top=0.96, bottom=0.06)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()
