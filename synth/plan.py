"""Which pages a synth run makes: (layout, suite, page seed, id) for each page, in order.

Shared by the CLI (``python -m synth``) and the corpus source (``pipelines.sources.synth``), so both
make the same pages from the same arguments. Page ``i`` gets layout ``LAYOUTS[i % 8]``, suite
``SUITES[i % 3]`` under suite ``all``, seed ``seed * 1_000_003 + i`` and, under language ``mixed``,
Chinese when ``i % 4 == 3``. LaTeX runs (``renderer="latex"``) plan the same pages with ids
``synth-latex-...``.
"""

from __future__ import annotations

from synth.blocks import LAYOUTS, SUITES

__all__ = ["LANGUAGE_CHOICES", "LAYOUTS", "SUITES", "page_language", "plan"]

LANGUAGE_CHOICES: tuple[str, ...] = ("en", "zh", "mixed")


def page_language(i: int, language: str) -> str:
    """The language of page ``i`` under ``--language`` (mixed: every 4th page zh)."""
    if language == "mixed":
        return "zh" if i % 4 == 3 else "en"
    return language


def plan(pages: int, seed: int, suite: str, language: str = "en",
         renderer: str = "html") -> list[tuple[str, str, int, str]]:
    """(layout, suite, page seed, id) for each page of a run; page ``i``'s language is
    ``page_language(i, language)`` (non-en pages carry it in their id), and LaTeX pages carry
    ``latex`` in theirs (``synth-latex-<suite>-...``), so they never share an id with HTML pages."""
    out = []
    kind = "" if renderer == "html" else f"{renderer}-"
    for i in range(pages):
        s = SUITES[i % len(SUITES)] if suite == "all" else suite
        layout = LAYOUTS[i % len(LAYOUTS)]
        lang = page_language(i, language)
        tag = "" if lang == "en" else f"-{lang}"
        out.append((layout, s, seed * 1_000_003 + i, f"synth-{kind}{s}-{layout}{tag}-s{seed}-{i:05d}"))
    return out
