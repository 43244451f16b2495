"""Reading page shards for extraction (row group by row group, images as views) and failing pages that live in
another corpus than the one the classifiers train on (``make retrieve`` after ``make train``)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.retrieval_pool import plain_page
from classifiers.extract import extract_shard, iter_rows
from classifiers.train import TrainConfig, train
from model.records import assigned_split
from schemas.page import PAGE_SCHEMA


def test_rows_stream_by_row_group_with_image_views_and_dead_letters(tmp_path):
    recs = [plain_page(i, 7, 0.0, width=306, height=396)[0] for i in range(7)]
    rows = [r.to_row() for r in recs]
    rows[5]["image"] = {"bytes": b"not a png", "path": None}
    rows[6]["image"] = None
    path = tmp_path / "pages.parquet"
    pq.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA), path, row_group_size=2)
    assert pq.ParquetFile(path).num_row_groups == 4
    got = list(iter_rows(str(path), batch_size=1))
    assert [r["id"] for r in got] == [r.id for r in recs]
    assert isinstance(got[0]["image"], memoryview) and bytes(got[0]["image"]) == recs[0].image
    assert got[6]["image"] is None and got[0]["domain"] == "benchpool"
    result = extract_shard(str(path), str(tmp_path / "features.parquet"))
    assert (result["input"], result["out"]) == (7, 5)
    assert {d["id"]: d["message"] for d in result["dead"]} == {recs[5].id: "image bytes cannot be decoded",
                                                               recs[6].id: "record has no image bytes"}


def test_failing_pages_from_the_models_corpus_join_as_positives(small_world, tmp_path):
    other = [plain_page(i, 9, 1.0, width=612, height=792)[0] for i in range(6)]
    (tmp_path / "model-corpus").mkdir()
    pq.write_table(pa.Table.from_pylist([r.to_row() for r in other], PAGE_SCHEMA),
                   tmp_path / "model-corpus" / "pages.parquet")
    failing = [r.id for r in other[:5]]
    errors = {"failure_modes": [{"name": "present@elsewhere", "test_type": "present", "domain": "elsewhere",
                                 "example_ids": failing}]}
    (tmp_path / "errors.json").write_text(json.dumps(errors))
    corpus = str(small_world["root"] / "corpus")
    common = {"corpus": corpus, "errors": str(tmp_path / "errors.json"), "folds": 2, "boosted_iter": 5,
              "min_positives": 4}
    alone = train(TrainConfig(**common, out=str(tmp_path / "alone")))
    assert "skipped" in alone["modes"][0] and alone["modes"][0]["positives"] == 0
    joined = train(TrainConfig(**common, failing_corpus=str(tmp_path / "model-corpus"), out=str(tmp_path / "clf")))
    (mode,) = joined["modes"]
    assert "skipped" not in mode and mode["positives"] == 5 and mode["seeds"] == 5
    assert joined["training_pages"] == 40 + 5  # the failing pages only, not the rest of the model's corpus
    # the training mix is the model's corpus (failing_corpus: the model trained on it), not the classifiers' corpus
    mix = pq.read_table(tmp_path / "clf" / "training_mix.parquet").column("id").to_pylist()
    assert not set(mix) & set(small_world["corpus"])
    assert set(mix) == {r.id for r in other if assigned_split(r.id, "train", 0.1) == "train"}
