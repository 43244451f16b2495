"""Targets per failure mode: every failing page of a model.errors report, and formula crops as display formulas."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.retrieval_pool import plain_page
from classifiers.extract import ALL_FEATURES
from classifiers.train import CorpusPages, TrainConfig, mode_targets, modes_from_errors, read_corpus
from model.errors import analyze, write_report
from schemas.page import PAGE_SCHEMA


def _pages(ids: list[str], domain: str = "d") -> CorpusPages:
    n = len(ids)
    return CorpusPages(ids, [domain] * n, np.zeros((n, len(ALL_FEATURES)), np.float32), np.zeros((n, 4), np.float32),
                       [None] * n, None)


def test_every_failing_page_of_a_model_errors_report_is_a_positive_once(tmp_path):
    failing = [f"page{i}" for i in range(8)]
    rows = [{"id": i, "source": "s", "domain": "synthetic-formula", "task": "transcribe_formula", "prediction": "p",
             "reference": "r", "edit_distance": 0.5, "tests": [{"type": "present", "passed": False}]}
            for i in failing]
    write_report(analyze(rows), tmp_path / "errors.json")
    (mode,) = modes_from_errors(str(tmp_path / "errors.json"))
    assert sorted(mode["failing_ids"]) == failing  # not only the 3 example ids, and each id once
    y, rule = mode_targets(mode, _pages(failing + ["other1", "other2"], domain="elsewhere"))
    assert int(y.sum()) == 8 and rule == "8 failing pages + domain synthetic-formula"
    # a hand-written report naming ids in both lists still lists each once
    (tmp_path / "hand.json").write_text(json.dumps({"failure_modes": [
        {"name": "m@d", "test_type": "x", "domain": "d", "example_ids": ["a", "b"], "failing_ids": ["b", "c"]}]}))
    assert modes_from_errors(str(tmp_path / "hand.json"))[0]["failing_ids"] == ["a", "b", "c"]


def test_formula_crops_with_bare_latex_labels_carry_the_math_weak_label(tmp_path):
    recs = [plain_page(i, 5, 0.0, width=306, height=396)[0] for i in range(8)]
    crops = {0: r"\frac{a}{b}+\sqrt{x_{1}}", 1: r"x^{2}+y^{2}=r^{2}", 2: r"\alpha\beta\gamma"}
    for i, latex in crops.items():
        recs[i] = dataclasses.replace(recs[i], task="transcribe_formula", response=latex, response_format="latex",
                                      metadata={"instruct": {"convention": "latex_formula"}})
    path = tmp_path / "corpus/data/train-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([r.to_row() for r in recs], PAGE_SCHEMA), path)
    pages = read_corpus(TrainConfig(corpus=str(tmp_path / "corpus"), errors=None, out=str(tmp_path / "clf")))
    mode = {"name": "math@synthetic-formula", "test_type": "math", "domain": "synthetic-formula",
            "failing_ids": [recs[3].id]}
    y, rule = mode_targets(mode, pages)
    assert {i for i, t in zip(pages.ids, y) if t} == {recs[0].id, recs[1].id, recs[2].id, recs[3].id}
    assert rule == "1 failing pages + weak label display_formula"
