"""Training per failure mode, safe loading, and retrieval over a small pool through the Beam job (DirectRunner)."""

from __future__ import annotations

import json
import logging
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from classifiers.retrieve import RetrieveConfig, retrieve
from classifiers.store import UntrustedModelError, load_model
from classifiers.train import TrainConfig, read_corpus, train, training_mix
from model.data import DataConfig
from model.sampler import DomainSampler
from schemas.config import load
from schemas.page import PAGE_SCHEMA


@pytest.fixture(scope="module")
def trained(small_world):
    root = small_world["root"]
    cfg = TrainConfig(corpus=str(root / "corpus"), errors=str(root / "errors.json"), out=str(root / "clf"),
                      folds=3, boosted_iter=10, eval_fraction=0.0)
    return train(cfg), root / "clf"


def test_max_pages_caps_the_sample_but_never_the_failing_pages(tmp_path):
    from tests.classifiers.conftest import write_pages

    order = list(write_pages(tmp_path / "corpus/data/train-00000-of-00001.parquet", 40, seed=1, table_share=0.3))
    failing = set(order[30:35])  # in the corpus, after the first max_pages rows
    cfg = TrainConfig(corpus=str(tmp_path / "corpus"), errors=None, out=str(tmp_path / "clf"), max_pages=20)
    pages = read_corpus(cfg, failing)
    assert set(order[:20]) <= set(pages.ids)
    assert failing <= set(pages.ids)
    assert len(pages.ids) == 25


def test_one_classifier_per_mode_with_card(trained, small_world):
    manifest, folder = trained
    (mode,) = manifest["modes"]
    assert mode["name"] == "table@benchpool" and "skipped" not in mode
    assert mode["positives"] == sum(small_world["corpus"].values())  # failing pages + weak label html_table
    card = json.loads((folder / "table@benchpool" / "card.json").read_text())
    assert set(card["cv"]) == {"linear", "boosted"}
    assert card["cv"][card["model"]]["average_precision"] > 0.8  # ruled tables are easy to see
    assert "line_crossings" in card["features"] and card["seeds"] == 5
    ids = (folder / "table@benchpool" / "training_ids.txt").read_text().split("\n")
    assert len([i for i in ids if i]) == 40
    model = load_model(folder / "table@benchpool" / "model.skops")
    assert hasattr(model, "predict_proba")


def test_weak_labels_become_modes_without_errors(small_world, tmp_path):
    cfg = TrainConfig(corpus=str(small_world["root"] / "corpus"), errors=None, out=str(tmp_path), folds=2,
                      boosted_iter=5)
    names = {m["name"]: m for m in train(cfg)["modes"]}
    assert set(names) == {"weak:html_table", "weak:display_formula", "weak:many_columns", "weak:historical"}
    assert "skipped" in names["weak:historical"]  # no historical pages: said, not trained


def test_clis_with_missing_inputs_exit_2_naming_them_and_write_nothing(trained, small_world, tmp_path, capsys):
    from classifiers import retrieve as retrieve_cli
    from classifiers import train as train_cli

    _, folder = trained
    corpus = str(small_world["root"] / "corpus")
    empty = tmp_path / "empty" / "train-00000-of-00001.parquet"
    empty.parent.mkdir()
    pq.write_table(pa.Table.from_pylist([], schema=PAGE_SCHEMA), empty)
    calls = [
        (train_cli.main, ["--corpus", str(tmp_path / "none"), "--errors", str(tmp_path / "e.json")],
         f"no parquet shards at '{tmp_path / 'none'}'"),
        (train_cli.main, ["--corpus", corpus, "--set", "fold=2"], "train.fold: unknown key"),
        (retrieve_cli.main, ["--corpus", corpus, "--classifiers", str(tmp_path / "none")],
         f"--classifiers {tmp_path / 'none'}: no trained classifiers there"),
        (retrieve_cli.main, ["--corpus", str(tmp_path / "none"), "--classifiers", str(folder)], "no parquet shards"),
        (retrieve_cli.main, ["--corpus", str(empty.parent), "--classifiers", str(folder)], "(1 shards) has no pages"),
    ]
    for main, args, message in calls:
        with pytest.raises(SystemExit) as exited:
            main([*args, "--out", str(tmp_path / "out")])
        assert exited.value.code == 2 and message in capsys.readouterr().err
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("report,message", [
    ("{not json", "is not JSON"), ("[1, 2]", "failure_modes must be a list of objects with a name"),
    ('{"failure_modes": [{"test_type": "order"}]}', "failure_modes must be a list of objects with a name")])
def test_train_on_an_errors_report_it_cannot_read_exits_2_in_one_line(small_world, tmp_path, capsys, report, message):
    from classifiers import train as train_cli

    (tmp_path / "errors.json").write_text(report)
    with pytest.raises(SystemExit) as exited:
        train_cli.main(["--corpus", str(small_world["root"] / "corpus"), "--errors", str(tmp_path / "errors.json"),
                        "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_train_on_a_corpus_without_readable_pages_writes_nothing(tmp_path, capsys):
    from classifiers import train as train_cli
    from tests.helpers import corpus_record

    (tmp_path / "corpus" / "data").mkdir(parents=True)
    row = corpus_record("s", "documents", 0).to_row()
    table = pa.Table.from_pylist([row], schema=PAGE_SCHEMA).slice(0, 0)  # the schema, no rows
    pq.write_table(table, tmp_path / "corpus" / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(SystemExit) as exited:
        train_cli.main(["--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path / "out")])
    assert exited.value.code == 2 and "no readable pages" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_ivfpq_setting_the_embeddings_cannot_take_is_an_input_error():
    from classifiers import index as ix
    from classifiers.errors import InputError

    with pytest.raises(InputError, match="index.pq_m 16 must divide the embeddings' dimension 44"):
        ix.empty_index("ivfpq", 44, ix.IndexConfig(), np.zeros((300, 44), np.float32), 300)


def test_tampered_model_is_refused(trained, tmp_path):
    _, folder = trained
    good = folder / "table@benchpool" / "model.skops"
    bad = tmp_path / "model.skops"
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "schema.json":
                schema = json.loads(data)
                schema["__module__"], schema["__class__"] = "os", "system"  # what a malicious file would name
                data = json.dumps(schema).encode()
            zout.writestr(item, data)
    with pytest.raises(UntrustedModelError, match="os.system"):
        load_model(bad)


def test_retrieval_on_a_small_pool(trained, small_world, caplog):
    root = small_world["root"]
    out = root / "retrieval"
    # 5 seeds x 30 neighbours reach most of this 60-page pool: the test checks the mechanics and the re-ranking;
    # how well the index alone finds candidates is benchmarks/retrieval.py's question
    cfg = RetrieveConfig(corpus=str(root / "pool"), classifiers=str(root / "clf"), out=str(out), k=10,
                         nn_per_seed=30, exhaustive=True)
    summary = retrieve(cfg)
    assert summary["pool_pages"] == 60 and summary["indexed"] == 60 and summary["index_kind"] == "flat"
    rows = [json.loads(line) for line in (out / "table@benchpool.jsonl").read_text().splitlines()]
    assert len(rows) == 10
    assert [r["rank"] for r in rows] == list(range(10))
    assert all(a["score"] >= b["score"] for a, b in zip(rows, rows[1:]))
    truth = small_world["pool"]
    base_rate = sum(truth.values()) / len(truth)
    assert sum(truth[r["id"]] for r in rows) / 10 >= 3 * base_rate  # retrieval finds tables well above chance
    assert all(r["why"] for r in rows)
    assert not set(r["id"] for r in rows) & set(small_world["corpus"])
    block = yaml.safe_load((out / "mixture.yaml").read_text())
    assert block["upweight"] == {"benchpool": 2.0}
    data = load(DataConfig, {**block, "path": str(root / "pool"), "eval_fraction": 0.0}, "data")
    assert data.upweight == {"benchpool": 2.0}
    # make train takes the block: each listed page counts twice in its sampler stream
    listed = set((out / "table@benchpool.ids").read_text().split())
    sampler = DomainSampler.from_config(data)
    draws = [sampler.next_record()["id"] for _ in range(360)]
    assert sum(d in listed for d in draws) / len(draws) == pytest.approx(20 / 70, abs=0.04)  # 10/60 unweighted
    # listed pages the sampler never sees (held out as eval here) are named, not silently ignored
    held_out = load(DataConfig, {**block, "path": str(root / "pool"), "eval_fraction": 0.5}, "data")
    with caplog.at_level(logging.WARNING, logger="model.sampler"):
        DomainSampler.from_config(held_out)
    assert any("pages listed in `pages` are not in the train split" in m for m in caplog.messages)
    # the Beam job accounted for every pool page and wrote one feature and embedding shard per input shard
    assert len(list((out / "pool" / "features").glob("*.parquet"))) == 2
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in (out / "pool" / "embeddings").glob("*.parquet")) == 60


def test_retrieval_deduplicates_against_the_training_mix(trained, small_world, tmp_path):
    """A pool that is the training corpus itself retrieves nothing: every page is already in the mix."""
    root = small_world["root"]
    cfg = RetrieveConfig(corpus=str(root / "corpus"), classifiers=str(root / "clf"), out=str(tmp_path), k=10)
    summary = retrieve(cfg)
    mode = summary["modes"]["table@benchpool"]
    assert mode["kept"] == 0 and mode["dropped"]["in_training_mix"] == mode["candidates"]


def test_a_model_trained_on_another_corpus_leaves_the_pool_retrievable(small_world, tmp_path):
    """make retrieve after make train: the model trained on its own corpus (out/curriculum, given as
    failing_corpus), the classifiers train on and retrieve from out/corpus. The training mix is the model's corpus's
    train split, so no pool page is dropped as already trained on."""
    from benchmarks.retrieval_pool import plain_page

    root = small_world["root"]
    model_pages = [plain_page(i, 8, 0.3, width=612, height=792)[0].to_row() for i in range(6)]
    model_pages[5]["split"] = "eval"  # held out by the training run: not in the mix
    (tmp_path / "curriculum" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(model_pages, PAGE_SCHEMA),
                   tmp_path / "curriculum" / "data" / "train-00000-of-00001.parquet")
    cfg = TrainConfig(corpus=str(root / "corpus"), errors=str(root / "errors.json"),
                      failing_corpus=str(tmp_path / "curriculum"), out=str(tmp_path / "clf"), folds=3,
                      boosted_iter=10, eval_fraction=0.0)
    manifest = train(cfg)
    mix = pq.read_table(tmp_path / "clf" / "training_mix.parquet")
    assert mix.column("id").to_pylist() == [r["id"] for r in model_pages[:5]]
    assert manifest["training_mix"] == {"corpus": str(tmp_path / "curriculum"), "pages": 5}
    summary = retrieve(RetrieveConfig(corpus=str(root / "corpus"), classifiers=str(tmp_path / "clf"),
                                      out=str(tmp_path / "retrieval"), k=10))
    mode = summary["modes"]["table@benchpool"]
    assert mode["candidates"] > 0 and "in_training_mix" not in mode["dropped"]
    assert mode["kept"] == min(10, mode["candidates"] - sum(mode["dropped"].values()))
    assert mode["kept"] > 0
    # training_corpus names the model's corpus outright, over the failing_corpus default
    named = TrainConfig(corpus=str(tmp_path / "curriculum"), failing_corpus=str(tmp_path / "curriculum"),
                        training_corpus=str(root / "corpus"), eval_fraction=0.0)
    assert set(training_mix(named).column("id").to_pylist()) == set(small_world["corpus"])


@pytest.mark.parametrize("typo", [["--nn-per-seed", "5"], ["--clasifiers", "x"], ["--direct_num_workers=2"]])
def test_retrieve_refuses_an_unknown_option_before_the_beam_separator(monkeypatch, tmp_path, capsys, typo):
    from classifiers import retrieve as retrieve_cli

    monkeypatch.setattr(retrieve_cli, "retrieve", lambda cfg, beam_args=None: pytest.fail("ran with a typo"))
    with pytest.raises(SystemExit) as exited:
        retrieve_cli.main(["--corpus", str(tmp_path), "--classifiers", str(tmp_path), *typo,
                           "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"unrecognized arguments: {' '.join(typo)}" in err
    assert not (tmp_path / "out").exists()


def test_retrieve_hands_only_the_arguments_after_the_separator_to_beam(monkeypatch, tmp_path):
    from classifiers import retrieve as retrieve_cli

    seen = []

    def fake(cfg, beam_args=None):
        seen.append((cfg.k, beam_args))
        return {"modes": {}, "indexed": 0, "index_kind": "flat"}

    monkeypatch.setattr(retrieve_cli, "retrieve", fake)
    common = ["--corpus", str(tmp_path), "--classifiers", str(tmp_path), "--out", str(tmp_path / "out"), "--k", "7"]
    retrieve_cli.main(common)
    retrieve_cli.main([*common, "--"])
    retrieve_cli.main([*common, "--", "--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert seen == [(7, None), (7, None), (7, ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])]


@pytest.mark.parametrize("cli", ["train", "retrieve"])
def test_a_bad_set_value_is_one_line_not_a_traceback(tmp_path, capsys, cli):
    import importlib

    module = importlib.import_module(f"classifiers.{cli}")
    with pytest.raises(SystemExit) as exited:
        module.main(["--corpus", str(tmp_path), "--out", str(tmp_path / "out"), "--set", "k=[1,"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith(f"classifiers.{cli}: ") and err.count("\n") == 1
