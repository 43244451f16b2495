"""Per-page look of JinaOCRSynth pages: fonts, colour scheme, margins, columns and page size, seeded.

``page_theme(layout, seed, language)`` draws a ``Theme`` from its own RNG (``theme:<layout>:<seed>:
<language>``), so the look varies page by page without touching the content's draws, and the same
page always gets the same theme. The HTML templates apply it through ``Theme.css`` (CSS variables
that ``page.css`` and the layouts read: font stacks, ``--accent``, ``--ink``, ``--paper``,
``--margin``); ``synth.render_latex`` through its font packages, ``xcolor`` accent and margins. The
page's ``PageRecord`` carries ``Theme.as_dict()`` in ``metadata["theme"]`` and hashes it into its
provenance step.

Fonts are Debian packages (``scripts/install_browser_assets.sh``): fonts-dejavu-core,
fonts-liberation, fonts-freefont-ttf, fonts-urw-base35 (Nimbus, P052, C059, URW Bookman, URW Gothic),
fonts-crosextra-carlito, fonts-lmodern (Latin Modern, with TeX Live), and for Chinese
fonts-wqy-microhei, fonts-wqy-zenhei and fonts-arphic-uming. Each stack falls back to DejaVu and
WenQuanYi Micro Hei, so a missing family changes the look but never drops glyphs. LaTeX fonts are
the psnfss packages of texlive-latex-base/-fonts-recommended and lmodern.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

# CSS family -> the LaTeX package that sets a similar face (pdflatex pages use the package).
SERIF_FONTS: dict[str, str] = {
    "Liberation Serif": "mathptmx", "Nimbus Roman": "mathptmx", "FreeSerif": "mathptmx", "P052": "mathpazo",
    "C059": "newcent", "URW Bookman": "bookman", "DejaVu Serif": "charter", "Latin Modern Roman": "lmodern",
}
SANS_FONTS: dict[str, str] = {
    "DejaVu Sans": "lmodern", "Liberation Sans": "helvet", "Nimbus Sans": "helvet", "FreeSans": "helvet",
    "Carlito": "lmodern", "URW Gothic": "avant", "Latin Modern Sans": "lmodern",
}
MONO_FONTS: tuple[str, ...] = ("DejaVu Sans Mono", "Liberation Mono", "Nimbus Mono PS", "FreeMono")
CJK_FONTS: tuple[str, ...] = ("WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "AR PL UMing CN")

# name -> (accent, ink, paper). Ink and paper stay neutral grey but in ``sepia`` and ``amber`` (printed-on-cream
# looks): a page whose pixels are all grey is stored as an 8-bit grey PNG, a third of the bytes to encode.
PALETTES: dict[str, tuple[str, str, str]] = {
    "navy": ("#1f4e79", "#1b1b1b", "#ffffff"), "crimson": ("#8a1c3c", "#1b1b1b", "#ffffff"),
    "forest": ("#0b6e4f", "#1b1b1b", "#ffffff"), "teal": ("#1d6f7a", "#222222", "#ffffff"),
    "plum": ("#5b2a86", "#1b1b1b", "#ffffff"), "amber": ("#a4530b", "#221c16", "#fffdf8"),
    "slate": ("#334155", "#111111", "#ffffff"), "mono": ("#222222", "#111111", "#ffffff"),
    "sepia": ("#7a4b22", "#2b2118", "#fbf7ee"), "ocean": ("#005f99", "#1b1b1b", "#ffffff"),
    "rust": ("#b23a1e", "#1e1e1e", "#ffffff"), "olive": ("#5a6b1f", "#1b1b1b", "#fafafa"),
}

# Column counts a layout may take, drawn uniformly (repeats weight a choice).
COLUMNS: dict[str, tuple[int, ...]] = {
    "report": (1, 1, 1, 2), "paper": (2, 2, 2, 1), "newspaper": (2, 3, 3), "invoice": (1,), "form": (1, 1, 1, 2),
    "slides": (1, 1, 1, 2), "blog": (1,), "infographic": (1, 1, 2),
}
PORTRAIT_SIZE: tuple[int, int] = (1024, 1325)  # US letter (A4 was tried: +10% CPU per page for little variety)
SLIDE_SIZE: tuple[int, int] = (1280, 720)  # 16:9
MARGIN_RANGE: tuple[float, float] = (0.8, 1.25)


@dataclass(frozen=True)
class Theme:
    """The look of one page (every field recorded in the page's metadata)."""

    palette: str
    accent: str
    ink: str
    paper: str
    serif: str
    sans: str
    mono: str
    cjk: str
    latex_serif: str
    latex_sans: str
    margin: float  # scale of the layout's page margins
    columns: int
    width_px: int
    height_px: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def css(self) -> str:
        """CSS custom properties for ``page.css`` and the layout templates (appended after a layout's style)."""
        def stack(first: str, default: str, generic: str) -> str:
            fams = [first, default, self.cjk, "WenQuanYi Micro Hei"]
            return ", ".join(f'"{f}"' for f in dict.fromkeys(fams)) + f", {generic}"

        return (f":root {{ --serif: {stack(self.serif, 'DejaVu Serif', 'serif')}; "
                f"--sans: {stack(self.sans, 'DejaVu Sans', 'sans-serif')}; "
                f"--mono: {stack(self.mono, 'DejaVu Sans Mono', 'monospace')}; "
                f"--accent: {self.accent}; --ink: {self.ink}; --paper: {self.paper}; --margin: {self.margin}; }}")


def page_theme(layout: str, seed: int, language: str = "en") -> Theme:
    """The seeded theme of page (layout, seed, language); independent of the content's RNG."""
    rng = random.Random(f"theme:{layout}:{seed}:{language}")
    palette = rng.choice(sorted(PALETTES))
    accent, ink, paper = PALETTES[palette]
    serif = rng.choice(sorted(SERIF_FONTS))
    sans = rng.choice(sorted(SANS_FONTS))
    width, height = SLIDE_SIZE if layout == "slides" else PORTRAIT_SIZE
    return Theme(
        palette=palette, accent=accent, ink=ink, paper=paper, serif=serif, sans=sans,
        mono=rng.choice(MONO_FONTS), cjk=rng.choice(CJK_FONTS),
        latex_serif=SERIF_FONTS[serif], latex_sans=SANS_FONTS[sans],
        margin=round(rng.uniform(*MARGIN_RANGE), 2), columns=rng.choice(COLUMNS.get(layout, (1,))),
        width_px=width, height_px=height,
    )


__all__ = ["CJK_FONTS", "COLUMNS", "MONO_FONTS", "PALETTES", "SANS_FONTS", "SERIF_FONTS", "Theme", "page_theme"]
