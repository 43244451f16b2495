"""A reader whose planning raises on one input does not stop the run: that input becomes one dead letter
naming it (``PlanFailure``), the other inputs are read, and the manifest balances.

The failing reader is a test double: ``local_folder``'s reader with a planning bug injected for one file
name (every bundled reader now plans its bad inputs into dead letters itself, so none fails for real);
the run, the rest of the reader and the inputs are real."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from pipelines import corpus, sources
from pipelines.accounting import Kind
from pipelines.sources.base import PlanFailure, SourceSettings
from pipelines.sources.local_folder import LocalFolderSource
from pipelines.transforms import ReadUnits, input_parts, plan_units
from schemas.manifest import RunManifest
from tests.helpers import IN_MEMORY

REPO = Path(__file__).resolve().parents[2]


class PlanBug(LocalFolderSource):
    """``local_folder`` with a bug: planning a file named ``bug.pdf`` raises after planning nothing."""

    def plan(self, uri):
        if getattr(uri, "rel", "").endswith("bug.pdf"):
            raise TypeError("argument of type 'int' is not iterable")
        yield from super().plan(uri)


class ListBug(LocalFolderSource):
    """``local_folder`` whose file listing fails after the first file."""

    def parts(self, uri):
        yield next(iter(super().parts(uri)))
        raise OSError("the folder went away")


def folder(tmp_path: Path) -> Path:
    root = tmp_path / "in"
    root.mkdir()
    shutil.copy(REPO / "samples" / "local" / "report.pdf", root / "good.pdf")
    shutil.copy(REPO / "samples" / "local" / "report.pdf", root / "bug.pdf")
    return root


def settings(root: Path, kind: str = "plan_bug") -> SourceSettings:
    return SourceSettings(name="local", kind=kind, paths=(str(root),), license="cc0", domain="documents")


def test_a_planning_error_becomes_a_unit_read_as_one_dead_letter_naming_the_input(tmp_path, monkeypatch):
    monkeypatch.setitem(sources.SOURCE_KINDS, "plan_bug", f"{__name__}:PlanBug")
    s = settings(folder(tmp_path))
    units = [u for part in input_parts((s, str(tmp_path / "in"))) for _, u in plan_units(part)]
    failures = [u for u in units if isinstance(u, PlanFailure)]
    assert len(failures) == 1 and failures[0].reason == "unplannable_input"
    assert "bug.pdf" in failures[0].uri and "TypeError: argument of type 'int'" in failures[0].message
    out = list(ReadUnits().process((s, failures[0])))
    [letter] = [p for k, p in out if k == Kind.DEAD]
    assert (letter.source_id, letter.reason) == (failures[0].uri, "unplannable_input")
    assert len(units) - 1 == len([u for u in units if getattr(u, "rel", "") == "good.pdf"])  # good.pdf planned


def test_a_listing_error_keeps_the_files_listed_before_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sources.SOURCE_KINDS, "list_bug", f"{__name__}:ListBug")
    root = folder(tmp_path)
    s = settings(root, "list_bug")
    parts = [p for _, p in input_parts((s, str(root)))]
    assert getattr(parts[0], "rel", None) == "bug.pdf" and isinstance(parts[1], PlanFailure) and len(parts) == 2
    assert "OSError: the folder went away" in parts[1].message
    assert [u for _, u in plan_units((s, parts[1]))] == [parts[1]]  # passed on to be read as a dead letter


def test_the_run_goes_on_and_balances(tmp_path, monkeypatch):
    monkeypatch.setitem(sources.SOURCE_KINDS, "plan_bug", f"{__name__}:PlanBug")
    root = folder(tmp_path)
    raw = {"run": {"output": str(tmp_path / "out")}, "render": {"longest_side": 320},
           "clean": {"stages": [], "dedup": {"enabled": False}},
           "sources": [{"name": "local", "kind": "plan_bug", "paths": [str(root)], "license": "cc0",
                        "domain": "documents"}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    assert corpus.main(["--config", str(tmp_path / "c.yaml"), *IN_MEMORY]) == 0
    manifest = RunManifest.from_json((tmp_path / "out" / "manifest.json").read_text())
    assert not manifest.imbalances() and manifest.totals("read").dead == {"unplannable_input": 1}
    assert manifest.records_written == pq.read_metadata(root / ".." / "out" / manifest.shards[0]["file"]).num_rows > 0
    letters = pq.read_table(tmp_path / "out" / "dead_letter").to_pylist()
    assert [(d["reason"], d["source_id"].endswith("bug.pdf")) for d in letters] == [("unplannable_input", True)]
