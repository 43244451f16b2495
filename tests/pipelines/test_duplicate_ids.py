"""Page ids are unique in what a run writes: dedup's exclusions and refresh key records by id. A page
read twice from one input is dead-lettered ``duplicate_id``; two inputs naming one page make the
manifest not balance, naming the id (the run exits 2)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipelines import corpus
from pipelines.write import repeated_ids
from schemas.manifest import RunManifest
from tests.helpers import IN_MEMORY


def config(tmp_path: Path, inputs: Path) -> Path:
    raw = {"run": {"output": str(tmp_path / "out")}, "render": {"longest_side": 320},
           "clean": {"stages": [], "dedup": {"enabled": True}},
           "sources": [{"name": "mix", "kind": "olmocr_mix_0225", "paths": [f"{inputs}/*.parquet"],
                        "license": "odc-by", "domain": "documents"}]}
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def inputs(samples_root: Path, tmp_path: Path) -> tuple[Path, pa.Table]:
    folder = tmp_path / "in"
    shutil.copytree(samples_root / "olmocr-mix-0225", folder)
    [parquet] = folder.glob("*.parquet")
    return parquet, pq.read_table(parquet)


def test_a_row_repeated_in_one_input_is_dead_lettered(samples_root, tmp_path, capsys):
    parquet, table = inputs(samples_root, tmp_path)
    pq.write_table(pa.concat_tables([table, table.slice(1, 1)]), parquet)
    assert corpus.main(["--config", str(config(tmp_path, parquet.parent)), *IN_MEMORY]) == 0
    manifest = RunManifest.from_json((tmp_path / "out" / "manifest.json").read_text())
    assert manifest.totals("read").dead.get("duplicate_id") == 1 and not manifest.imbalances()
    ids = pq.read_table(tmp_path / "out" / "data", columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == manifest.records_written
    letters = pq.read_table(tmp_path / "out" / "dead_letter").to_pylist()
    assert any(d["reason"] == "duplicate_id" and d["source_id"] == table.column("id")[1].as_py() for d in letters)


def test_two_inputs_naming_one_page_do_not_balance(samples_root, tmp_path, capsys):
    parquet, table = inputs(samples_root, tmp_path)
    shutil.copy(parquet, parquet.with_name("train-copy.parquet"))  # the same ids in a second file
    assert corpus.main(["--config", str(config(tmp_path, parquet.parent)), *IN_MEMORY]) == 2
    err = capsys.readouterr().err
    assert "manifest does not balance" in err and "ids held by more than one written record" in err
    manifest = RunManifest.from_json((tmp_path / "out" / "manifest.json").read_text())
    [problem] = manifest.imbalances()
    assert all(i in problem for s in manifest.shards for i in s["repeated_ids"]) and manifest.shards[0]["repeated_ids"]


def test_repeated_ids_reads_sorted_ids():
    assert repeated_ids(pa.array(["a", "b", "b", "c", "d", "d", "d"])) == ["b", "d"]
    assert repeated_ids(pa.chunked_array([["a", "b"], ["b"]])) == ["b"] and repeated_ids(pa.array(["a"])) == []
    assert repeated_ids(pa.array([f"{i:03d}" for i in range(30) for _ in (0, 1)]), limit=3) == ["000", "001", "002"]
