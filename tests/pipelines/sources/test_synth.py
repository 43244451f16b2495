"""The ``jinaocrsynth`` source: HTML and LaTeX paths, ids, provenance, verified tests, determinism."""

from __future__ import annotations

import pytest

from pipelines.sources.base import SourceSettings
from pipelines.sources.synth import SynthSource
from schemas.unit_tests import unit_test_from_json


def _source(**options) -> SynthSource:
    return SynthSource(SourceSettings(name="synth-test", kind="jinaocrsynth", paths=(), license="cc0-1.0",
                                      domain="synthetic", options=options))


def test_paths_name_renderer_and_suite():
    src = _source(pages=5, seed=2, pages_per_unit=2)
    assert list(src.plan("synth://latex-table")) == [("latex", "table", 0, 2), ("latex", "table", 2, 4),
                                                     ("latex", "table", 4, 5)]
    assert list(src.plan("synth://"))[0] == ("html", "all", 0, 2)
    for bad in ("synth://latex-tables", "synth://pdf-all", "file://x", "latex-all"):
        with pytest.raises(ValueError, match="synth://latex-<suite>"):
            list(src.plan(bad))


def test_latex_pages_are_latex_rendered_verified_and_deterministic():
    src = _source(pages=2, seed=1, pages_per_unit=2)
    (unit,) = src.plan("synth://latex-all")
    rows = list(src.read(unit))
    again = list(_source(pages=2, seed=1, pages_per_unit=2).read(unit))
    assert [r.source_id for r in rows] == ["synth-latex-layout-report-s1-00000", "synth-latex-formula-paper-s1-00001"]
    kept = [r for r in rows if r.pages]
    assert kept, [r.error for r in rows]
    for row, other in zip(rows, again):
        assert [p.payload for p in row.pages] == [p.payload for p in other.pages]  # same seed, same bytes
    for row in kept:
        (page,) = row.pages
        assert page.payload.startswith(b"\x89PNG")
        assert page.provenance[0].stage == "synth:latex"
        assert page.metadata["renderer"] == "latex" and page.metadata["theme"]["latex_serif"]
        assert page.unit_tests
        for line in page.unit_tests:
            passed, why = unit_test_from_json(line).check(page.response)
            assert passed, (row.source_id, why)
