"""Contracts every pagemill package shares; imports no other project package (docs/architecture.md).

- ``page``: ``PageRecord``, ``PAGE_SCHEMA`` (with Hugging Face features) and ``validate``.
- ``deadletter``: ``DeadLetter`` and its schema; ``Dropped`` (a filter decision), ``RecordError`` (bad input).
- ``manifest``: ``CountEvent`` and ``RunManifest``: per stage and source, in == out + dropped + dead.
- ``config``: the one config loader (``option``, ``load``, ``describe``, ``--set`` overrides).
- ``images``: page image encoding (PNG, grey pages as 8-bit grey, WebP), shared by pipelines and synth.
- ``prompts``: the instruction bank, one default prompt per task and language.
- Judging a transcription (docs/judging.md): ``unit_tests`` (olmOCR-Bench tests), ``text`` (their
  normalisation), ``tables`` (HTML and Markdown table parsing), ``math_render`` and ``browser`` (KaTeX in
  offline Chromium), ``similarity`` (edit distance, TEDS, formula and structure metrics), ``tree_edit``
  (tree edit distance), ``teds_pubtabnet`` (TEDS as PubTabNet defines it), ``bench`` and ``score``
  (their command lines).
"""
