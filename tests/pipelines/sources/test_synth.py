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


@pytest.mark.parametrize("path", ["synth://layout", "synth://latex-layout"])
def test_renderer_files_stay_in_the_scratch_folder_and_go_with_close(path, tmp_path, monkeypatch):
    """With ``scratch(folder)`` (the corpus DAG's, inside the run) a renderer's files are made there, not
    in the system's temporary folder; ``close()`` releases the renderers and removes what they made."""
    import tempfile

    system = tmp_path / "system-tmp"
    system.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    scratch = tmp_path / "run" / "_tmp" / "scratch" / "synth-test"
    src = _source(pages=1, seed=0, pages_per_unit=1)
    src.scratch(str(scratch))
    (unit,) = src.plan(path)
    rows = list(src.read(unit))
    assert rows and all(r.pages or r.error for r in rows)
    assert list(system.iterdir()) == []
    if path == "synth://layout":  # the HTML renderer keeps its shell document while it is open
        assert [p.name.startswith("synth-html-") for p in scratch.iterdir()] == [True]
    src.close()
    assert list(scratch.iterdir()) == []
    assert list(system.iterdir()) == []
