"""JinaOCRSynth: synthetic pages with verified unit tests (Jina-OCR-v1 4.2); uses ``schemas`` only.

``plan`` gives page ``i`` its layout, suite and seed; ``content`` (with ``formulas``, ``tables``,
``charts`` and the typed ``blocks``) fills a page spec; ``render_html`` (Chromium) or ``render_latex``
(pdflatex) renders it; ``reference`` writes its Markdown and ``tests_from_blocks`` its unit tests, kept
only when they pass; ``pages`` runs one page end to end into a ``PageRecord``. ``augment`` holds the
robustness degradations (``AugmentStage``). ``python -m synth`` writes pages, ``python -m synth.sheet`` a
contact sheet. See docs/synth.md and docs/architecture.md.
"""
