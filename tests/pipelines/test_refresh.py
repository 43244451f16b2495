"""Incremental refresh end to end (pipelines/refresh.py, the ReuseUnchanged step of pipelines/corpus.py):
a run against a previous run reads only new or changed input units, carries the rest over, and
writes what a full run over the same inputs writes."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from pipelines import corpus, refresh
from pipelines.config import drop_missing_source_names, load_config
from schemas.manifest import RunManifest
from tests.helpers import IN_MEMORY, SMALL_CORPUS_SOURCES, run_small_corpus, small_corpus_config

SOURCES = SMALL_CORPUS_SOURCES


def run(samples: Path, work: Path, previous: Path | None = None, edit=None) -> tuple[RunManifest, Path]:
    manifest, out = run_small_corpus(samples, work, previous, edit)
    assert manifest.imbalances() == []
    return manifest, out


def run_dag(samples: Path, work: Path, previous: Path | None = None, edit=None) -> tuple[RunManifest, Path]:
    """A run through the Beam DAG even when nothing changed (the fast path off)."""
    cfg = load_config(small_corpus_config(samples, work, edit))
    manifest = corpus.run(cfg, IN_MEMORY, previous=str(previous) if previous else None, fast=False)
    assert manifest.imbalances() == []
    return manifest, Path(cfg.run.output)


def digests(out: Path, folder: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / folder).glob("*.parquet"))}


def counts(manifest: RunManifest) -> str:
    return manifest.summary_table()  # every stage's in/out/dropped/dead by source and reason, no timings


@pytest.fixture(scope="module")
def samples(subset_samples) -> Path:
    return subset_samples


@pytest.fixture(scope="module")
def first(subset_run) -> tuple[RunManifest, Path]:
    return subset_run


def test_a_full_run_writes_the_units_table_and_stamps_pages(first):
    manifest, out = first
    units = pq.read_table(out / refresh.UNITS_FILE).to_pylist()
    assert {u["source"] for u in units} == set(SOURCES)
    assert manifest.run["refresh"]["processed_by_reason"] == {"no previous run": len(units)}
    pages = pq.read_table(out / "data", columns=["metadata"]).column("metadata").to_pylist()
    assert {json.loads(m)[refresh.UNIT_FIELD] for m in pages} <= {u["key"] for u in units}
    # dedup's losers are kept in full, so a later run can carry their units
    losers = pq.read_table(out / refresh.LOSER_PAGES_FOLDER)
    assert losers.num_rows == manifest.totals("dedup").n_dropped > 0


def test_units_are_counted_once_each_and_old_tables_get_their_count(first):
    manifest, out = first
    units = pq.read_table(out / refresh.UNITS_FILE).to_pylist()
    for row in units:  # the reader's one ``units`` count per unit rides in the table, for carrying
        assert [c for c in json.loads(row["counts"]) if c[1] == "units"] == [["read", "units", "", 1]]
    old = {**units[0], "counts": json.dumps([c for c in json.loads(units[0]["counts"]) if c[1] != "units"])}
    assert ("read", old["source"], "units", "", 1) in refresh.carried_events(old)
    assert sorted(refresh.carried_events(units[0])) == sorted(refresh.carried_events(old))


def test_unchanged_rerun_reads_nothing_and_writes_identical_shards(first, samples, tmp_path):
    """Through the DAG (the fast path off): every unit carried, write and dedup run over them again."""
    manifest, out = first
    again, out2 = run_dag(samples, tmp_path, previous=out)
    summary = again.run["refresh"]
    assert summary["units_processed"] == 0 and summary["units_removed"] == 0 and "fast_path" not in summary
    assert summary["units_reused"] == len(pq.read_table(out / refresh.UNITS_FILE))
    assert "read" not in {s for s in again.stages if any(c.seconds for c in again.stages[s].values())}
    for folder in ("data", "dead_letter", "dropped", refresh.LOSER_PAGES_FOLDER):
        assert digests(out2, folder) == digests(out, folder), folder
    assert counts(again) == counts(manifest)
    assert digests(out2, "refresh") == digests(out, "refresh")  # the units table too


def test_an_unchanged_rerun_takes_the_fast_path(first, samples, tmp_path):
    """Nothing changed: the previous run's files are copied (Beam is not started) and the manifest
    says every unit was reused; its counts are the full run's and it balances."""
    manifest, out = first
    stale = tmp_path / "out" / "data" / "train-00009-of-00010.parquet"  # left by an earlier run into the folder
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    again, out2 = run(samples, tmp_path, previous=out)
    summary = again.run["refresh"]
    assert out2 == stale.parent.parent and not stale.exists()
    assert summary["fast_path"] is True
    assert summary["units_processed"] == 0 and summary["units_removed"] == 0
    assert summary["units_reused"] == len(pq.read_table(out / refresh.UNITS_FILE))
    assert summary["pages_carried"] == manifest.totals("read").emitted
    for folder in ("data", "dead_letter", "dropped", refresh.LOSER_PAGES_FOLDER, "refresh"):
        assert digests(out2, folder) == digests(out, folder), folder
    written = json.loads((out2 / "manifest.json").read_text())
    assert written["balanced"] is True and written["run"]["refresh"] == summary
    assert RunManifest.from_json((out2 / "manifest.json").read_text()).imbalances() == []
    assert counts(again) == counts(manifest)
    assert (again.shards, again.dead_letter_files, again.dropped_sample_files) == (
        manifest.shards, manifest.dead_letter_files, manifest.dropped_sample_files)
    assert all(c.seconds == 0 for per in again.stages.values() for c in per.values())  # no stage did work
    # a fast-path run is a previous run like any other
    third, out3 = run(samples, tmp_path / "third", previous=out2)
    assert third.run["refresh"]["fast_path"] is True and digests(out3, "data") == digests(out, "data")


def test_the_fast_path_declines_on_any_doubt(first, tmp_path):
    """Another write fingerprint, a unit more or less, a missing file: nothing is written, the DAG runs."""
    _, out = first
    previous = refresh.PreviousRun.load(str(out))
    infos = [refresh.UnitInfo(**{k: row[k] for k in refresh.UnitInfo._fields}) for row in previous.units.values()]
    fingerprint = json.loads((out / "manifest.json").read_text())["run"]["refresh"]["write_fingerprint"]

    def carry(units, print_=fingerprint, previous_run=out):
        target = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        return refresh.carry_whole(units, str(previous_run), str(target), print_, {}, 0.0), target

    assert carry(infos)[0] is not None  # the baseline: all the same
    for result, target in (carry(infos, print_="another"), carry(infos[1:]),
                           carry(infos + [infos[0]._replace(key="0" * 32)])):
        assert result is None and not target.exists()
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    next((broken / "dead_letter").glob("*.parquet")).unlink()
    result, target = carry(infos, previous_run=broken)
    assert result is None and not target.exists()


def test_a_changed_write_setting_runs_the_dag(first, samples, tmp_path):
    """Write settings are in no unit key: the units are carried, but write runs again and the shards
    are a full run's with the new setting, not copies."""
    _, out = first

    def small_row_groups(raw):
        raw.setdefault("write", {})["row_group_rows"] = 7

    incremental, out2 = run(samples, tmp_path / "inc", previous=out, edit=small_row_groups)
    summary = incremental.run["refresh"]
    assert "fast_path" not in summary and summary["units_processed"] == 0
    full, out3 = run(samples, tmp_path / "full", edit=small_row_groups)
    assert digests(out2, "data") == digests(out3, "data") != digests(out, "data")
    assert counts(incremental) == counts(full)


@pytest.mark.slow
def test_a_moved_checkout_reprocesses_nothing(first, samples, tmp_path):
    _, out = first
    moved = tmp_path / "elsewhere" / "samples"
    shutil.copytree(samples, moved)
    again, out2 = run(moved, tmp_path / "run", previous=out)
    assert again.run["refresh"]["units_processed"] == 0
    assert digests(out2, "data") == digests(out, "data")


def add_tarball(mix: Path) -> None:
    """One more olmOCR-mix-1025 tarball (one new PDF) and its row in the subset's parquet file."""
    import random

    import pandas as pd

    from samples.make.olmocr import write_tar
    from samples.make.pdfs import paragraphs, text_pdf

    rng = random.Random(2026)
    paras = paragraphs(rng, 6, (60, 90))
    text = "\n\n".join(paras)
    write_tar(mix / "pdf_tarballs" / "00_documents_train_00001.tar.gz", [("rg_200/new.pdf", text_pdf([paras]))])
    frame = pd.read_parquet(mix / "00_documents_train.parquet")
    row = frame.iloc[[0]].copy()
    row.index = pd.Index(["rg_200/new"], name=frame.index.name)
    row["pdf_relpath"] = "pdf_tarballs/00_documents_train_00001.tar.gz:rg_200/new.pdf"
    row["natural_text"] = text
    pd.concat([frame, row]).to_parquet(mix / "00_documents_train.parquet")


def test_adding_one_tarball_reads_only_it(first, samples, tmp_path):
    _, out = first
    grown = tmp_path / "samples"
    shutil.copytree(samples, grown)
    add_tarball(grown / "olmocr-mix-1025")
    incremental, out2 = run(grown, tmp_path / "inc", previous=out)
    summary = incremental.run["refresh"]
    assert summary["processed_by_reason"] == {"added": 1}  # the parquet changed, its other units did not
    assert "fast_path" not in summary
    assert incremental.totals("read").inputs == 1 + first[0].totals("read").inputs
    full, out3 = run(grown, tmp_path / "full")
    assert digests(out2, "data") == digests(out3, "data")
    assert digests(out2, "dead_letter") == digests(out3, "dead_letter")
    assert counts(incremental) == counts(full)


@pytest.mark.slow
def test_one_new_input_unit_is_the_only_one_read(first, samples, tmp_path):
    _, out = first
    grown = tmp_path / "samples"
    shutil.copytree(samples, grown)
    shutil.copy(grown / "local" / "report.pdf", grown / "local" / "report-copy.pdf")
    shutil.copy(grown / "local" / "report.md", grown / "local" / "report-copy.md")
    incremental, out2 = run(grown, tmp_path / "inc", previous=out)
    summary = incremental.run["refresh"]
    assert summary["processed_by_reason"] == {"added": 1}
    assert incremental.totals("read").inputs == 1 + first[0].totals("read").inputs
    full, out3 = run(grown, tmp_path / "full")
    assert digests(out2, "data") == digests(out3, "data")
    assert counts(incremental) == counts(full)
    # the carried-over units sit beside the new one in the new units table
    assert len(pq.read_table(out2 / refresh.UNITS_FILE)) == summary["units_reused"] + 1


@pytest.mark.slow
def test_a_stage_config_change_reprocesses_what_it_touches(first, samples, tmp_path):
    _, out = first

    def more_metadata(raw):  # a read option of one source: only that source's units are read again
        europeana = next(s for s in raw["sources"] if s["name"] == "europeana-newspapers")
        europeana["options"]["metadata_columns"] = ["iiif_url", "date"]

    incremental, out2 = run(samples, tmp_path / "inc", previous=out, edit=more_metadata)
    summary = incremental.run["refresh"]
    europeana_units = sum(1 for u in pq.read_table(out / refresh.UNITS_FILE).to_pylist()
                          if u["source"] == "europeana-newspapers")
    assert summary["processed_by_reason"] == {"config changed: read": europeana_units}
    full, out3 = run(samples, tmp_path / "full", edit=more_metadata)
    assert digests(out2, "data") == digests(out3, "data")
    assert counts(incremental) == counts(full)

    def shorter(raw):  # a clean stage every record passes: every unit is read again
        next(s for s in raw["clean"]["stages"] if s["name"] == "short")["min_tokens"] = 8

    again, _ = run(samples, tmp_path / "short", previous=out, edit=shorter)
    assert again.run["refresh"]["processed_by_reason"] == {
        "config changed: short": len(pq.read_table(out / refresh.UNITS_FILE))}


def test_removed_units_are_listed_and_their_duplicates_come_back(first):
    """A reused unit whose dedup loser lost to a page of a removed unit is read again."""
    _, out = first
    previous = refresh.PreviousRun.load(str(out))
    infos = [refresh.UnitInfo(**{k: row[k] for k in refresh.UnitInfo._fields}) for row in previous.units.values()]
    lost_to = refresh._lost_to(previous)
    loser_unit, kept_units = next(iter(lost_to.items()))
    gone = next(iter(kept_units - {loser_unit}), None)
    if gone is None:
        pytest.fail("the samples' duplicate pair lies in one unit; this test needs it across two")
    decision = refresh.decide([i for i in infos if i.key != gone], previous)
    assert (loser_unit, "kept duplicate gone") in decision.process
    assert [r["key"] for r in decision.removed] == [gone]
    assert decision.summary(str(out))["units_removed"] == 1


@pytest.mark.slow
def test_releases_root_keeps_versions_side_by_side_with_a_latest_pointer(samples, tmp_path, capsys):
    config = small_corpus_config(samples, tmp_path)
    releases = tmp_path / "releases"
    assert corpus.main(["--config", str(config), "--releases", str(releases), "--version", "v1", *IN_MEMORY]) == 0
    assert (releases / refresh.LATEST).read_text() == "v1"
    assert corpus.main(["--config", str(config), "--releases", str(releases),
                        "--version", "manual__2026-12-03T10:00:00+00:00", *IN_MEMORY]) == 0
    version = "manual__2026-12-03T10-00-00-00-00"
    assert (releases / refresh.LATEST).read_text() == version
    second = json.loads((releases / version / "manifest.json").read_text())
    assert second["run"]["refresh"]["units_processed"] == 0
    assert second["run"]["refresh"]["previous"] == str(releases / "v1")
    assert digests(releases / "v1", "data") == digests(releases / version, "data")


# --- what a refresh trusts of its inputs and of the previous run --------------------------------------


def europeana_config(samples: Path, root: Path) -> Path:
    """``root/configs/x.yaml`` with the europeana source under ``root/samples`` named by relative paths."""
    raw = yaml.safe_load(small_corpus_config(samples, root / "work").read_text())
    raw["sources"] = [s for s in raw["sources"] if s["name"] == "europeana-newspapers"]
    drop_missing_source_names(raw)
    for source in raw["sources"]:
        source["paths"] = [p.replace(f"{samples}/", "samples/") for p in source["paths"]]
    shutil.copytree(samples / "europeana", root / "samples" / "europeana")
    (root / "configs").mkdir()
    (root / "configs" / "x.yaml").write_text(yaml.safe_dump(raw))
    return root / "configs" / "x.yaml"


def test_a_relative_config_path_still_hashes_the_input_files(samples, tmp_path, monkeypatch):
    """``--config configs/x.yaml`` (what the Airflow DAG passes) once made the inputs' base ``.``: their
    paths stayed relative, no file was hashed and an edited input was reused (stale pages)."""
    from pipelines import io

    europeana_config(samples, tmp_path)
    monkeypatch.chdir(tmp_path)
    cfg = load_config("configs/x.yaml")
    assert all(Path(p).is_absolute() and p.startswith(str(tmp_path)) for s in cfg.sources for p in s.paths)
    before = {info.name: info.content for _, _, info in corpus.plan_in_process(cfg)}
    shard = next((tmp_path / "samples" / "europeana").rglob("*.parquet"))
    table = pq.read_table(shard)
    pq.write_table(table.slice(0, table.num_rows - 1), shard)
    io.content_id.cache_clear()
    after = {info.name: info.content for _, _, info in corpus.plan_in_process(cfg)}
    assert set(after) == set(before) and all(after[n] != before[n] for n in before)


def test_relative_unit_files_are_hashed_and_units_whose_files_are_gone_are_read(samples, tmp_path, monkeypatch):
    from pipelines import io

    cfg = load_config(europeana_config(samples, tmp_path))
    settings = cfg.sources[0]
    monkeypatch.chdir(tmp_path)
    shard = next(Path("samples/europeana").rglob("*.parquet"))
    fingerprints = refresh.stage_fingerprints(cfg)[settings.name]
    info = refresh.describe_unit(settings, str(shard), fingerprints)
    pq.write_table(pq.read_table(shard).slice(1), shard)
    io.content_id.cache_clear()
    assert refresh.describe_unit(settings, str(shard), fingerprints).content != info.content
    # a unit naming files that cannot be found is never hashed as nothing: its content is unknown, it is read
    gone = refresh.describe_unit(settings, "samples/europeana/gone/x.parquet", fingerprints)
    assert gone.content.startswith(refresh.UNHASHED)
    previous = refresh.PreviousRun("", {gone.key: {**gone._asdict(), "counts": "[]"}}, None)
    decision = refresh.decide([gone], previous)
    assert decision.reused == {} and decision.process == [(gone.key, "input files not found")]


def test_a_reader_class_version_is_in_the_refresh_key(samples, tmp_path, monkeypatch):
    """A module may hold several readers, each with its own ``VERSION`` (olmocr_mix's train-dir reader)."""
    from pipelines.sources import source_class

    cfg = load_config(small_corpus_config(samples, tmp_path))
    before = refresh.stage_fingerprints(cfg)
    monkeypatch.setattr(source_class("local_folder"), "VERSION", "99", raising=False)
    after = refresh.stage_fingerprints(cfg)
    kinds = {s.name: s.kind for s in cfg.sources}
    assert {n for n in before if before[n]["read"] != after[n]["read"]} == {
        n for n, kind in kinds.items() if kind == "local_folder"} != set()


def copy_run(out: Path, target: Path) -> Path:
    shutil.copytree(out, target, ignore=shutil.ignore_patterns(".lock"))
    return target


def test_an_interrupted_run_leaves_no_manifest_and_is_no_previous_run(first, samples, tmp_path, monkeypatch):
    """A rerun into a finished run's folder removes its manifest.json before anything there is replaced (the
    DAG's ``Decide`` step, which every writing step follows), so a run stopped midway never leaves the old
    manifest and units table over new shards."""
    from pipelines import release
    from schemas.manifest import ManifestError

    _, out = first
    rerun = copy_run(out, tmp_path / "work" / "out")

    def killed_midway(*args):  # the first shard write fails: the run stops while it writes
        raise RuntimeError(f"killed midway; the old manifest there: {(rerun / 'manifest.json').exists()}")

    monkeypatch.setattr(corpus, "write_planned_shard", killed_midway)
    cfg = load_config(small_corpus_config(samples, tmp_path / "work"))
    with pytest.raises(Exception, match="killed midway; the old manifest there: False"):
        corpus.run(cfg, IN_MEMORY)
    monkeypatch.undo()
    assert not (rerun / "manifest.json").exists() and (rerun / refresh.UNITS_FILE).exists()
    with pytest.raises(refresh.PreviousRunError, match="no manifest.json"):
        corpus.run(load_config(small_corpus_config(samples, tmp_path / "next")), IN_MEMORY, previous=str(rerun))
    with pytest.raises(ManifestError):
        release.build_release(str(rerun), str(tmp_path / "rel"))


def test_a_previous_run_whose_shards_are_not_its_manifests_is_refused(first, samples, tmp_path, capsys):
    """Same rows, another file (what an interrupted rerun into the folder can leave): neither the fast path
    nor the DAG carries pages from it."""
    _, out = first
    previous = copy_run(out, tmp_path / "previous")
    shard = next((previous / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    pq.write_table(table, shard, row_group_size=3)
    with pytest.raises(refresh.PreviousRunError, match="sha256|bytes"):
        run(samples, tmp_path / "a", previous=previous)
    infos = [refresh.UnitInfo(**{k: row[k] for k in refresh.UnitInfo._fields})
             for row in refresh.PreviousRun.load(str(previous)).units.values()]
    fingerprint = json.loads((previous / "manifest.json").read_text())["run"]["refresh"]["write_fingerprint"]
    with pytest.raises(refresh.PreviousRunError):
        refresh.carry_whole(infos, str(previous), str(tmp_path / "b"), fingerprint, {}, 0.0)
    assert not (tmp_path / "b").exists()
    config = small_corpus_config(samples, tmp_path / "c")
    assert corpus.main(["--config", str(config), "--previous", str(previous), *IN_MEMORY]) == 2
    assert "its shards are not the ones its manifest.json lists" in capsys.readouterr().err


def test_runs_into_one_output_folder_never_overlap_and_sweep_what_killed_runs_left(samples, tmp_path, capsys):
    """A second run into a folder another run is writing is refused (exit 2). A run holding the lock removes
    what killed runs left: their spills under ``_tmp/`` (~1.5x the corpus each) and half-written shards, which
    readers of ``data/`` took for shards (``datasets`` failed, ``pq.read_table`` read every page twice)."""
    config = small_corpus_config(samples, tmp_path)
    cfg = load_config(config)
    with corpus.output_lock(cfg.run.output):  # (pipelines.write.output_lock)
        assert corpus.main(["--config", str(config), *IN_MEMORY]) == 2
        assert "is being written by another run" in capsys.readouterr().err
        assert not (Path(cfg.run.output) / "manifest.json").exists()
    manifest, out = run(samples, tmp_path)
    killed = out / "_tmp" / "killedrun" / "spill.arrow"
    killed.parent.mkdir(parents=True)
    killed.write_bytes(b"spilled")
    shard = next((out / "data").glob("*.parquet"))
    (out / "data" / f"{shard.name}.tmp-0badc0de").write_bytes(shard.read_bytes())  # killed before its rename
    (out / "dead_letter" / "x.parquet.tmp").write_bytes(b"")
    run(samples, tmp_path)
    assert not (out / "_tmp").exists()
    assert sorted(p.name for p in out.rglob("*.tmp*")) == []
    assert pq.read_table(out / "data").num_rows == sum(s["rows"] for s in manifest.shards)


def test_releases_take_no_output_and_no_version_made_of_dots(samples, tmp_path, capsys):
    config = small_corpus_config(samples, tmp_path)
    releases = tmp_path / "releases"
    assert corpus.main(["--config", str(config), "--releases", str(releases), "--version", "v2",
                        "--output", str(tmp_path / "elsewhere"), *IN_MEMORY]) == 2
    assert "does not take --output" in capsys.readouterr().err
    for version in ("..", ".", "a/b"):
        assert corpus.main(["--config", str(config), "--releases", str(releases), "--version", version,
                            *IN_MEMORY]) == 2
        assert "--version" in capsys.readouterr().err
    assert not releases.exists() and not (tmp_path / "elsewhere").exists()
    with pytest.raises(ValueError):
        refresh.version_name("..")


def test_another_relabel_model_or_prompt_version_is_another_refresh_key(samples, tmp_path, monkeypatch):
    """The relabel stages take their endpoint and model from the environment when the config leaves them
    empty (as configs/corpus.yaml does under relabel.serve): another model must not carry the old answers."""
    import dataclasses

    import pipelines.relabel_stages as relabel_stages
    from relabel.cache import MODEL_DIGEST_ENV
    from relabel.client import MODEL_ENV

    cfg = load_config(small_corpus_config(samples, tmp_path))
    stages = [{"name": "relabel"}, {"name": "audit"}]
    cfg = dataclasses.replace(cfg, clean=dataclasses.replace(cfg.clean, stages=stages))

    def keys() -> dict[str, str]:
        fingerprints = refresh.stage_fingerprints(cfg)[cfg.sources[0].name]
        return {stage: fingerprints[stage] for stage in ("relabel", "audit")}

    monkeypatch.delenv(MODEL_DIGEST_ENV, raising=False)  # (a LocalServer started earlier in this process sets it)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv(MODEL_ENV, "model-a")
    first = keys()
    monkeypatch.setenv(MODEL_ENV, "model-b")
    second = keys()
    assert all(first[s] != second[s] for s in first)
    monkeypatch.setattr(relabel_stages, "VERSION", relabel_stages.VERSION + "-next")
    assert all(keys()[s] != second[s] for s in first)
    monkeypatch.setattr(relabel_stages, "VERSION", relabel_stages.VERSION.removesuffix("-next"))
    assert keys() == second
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:10/v1")
    third = keys()
    assert all(third[s] != second[s] for s in first)
    # relabel.serve exports the served weights' digest: a retrained checkpoint at the same path asks again, and
    # the port, new at every start, no longer counts (every unit was read again at each `make corpus`)
    monkeypatch.setenv(MODEL_DIGEST_ENV, "0" * 64)
    served = keys()
    assert all(served[s] != third[s] for s in first)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11/v1")
    assert keys() == served
    monkeypatch.setenv(MODEL_DIGEST_ENV, "1" * 64)
    assert all(keys()[s] != served[s] for s in first)


def test_planning_again_in_one_process_sees_a_file_edited_and_a_label_added_since(samples, tmp_path):
    """A launcher that runs twice, or a Dask worker that described the previous run's units: content ids and
    folder listings were cached per process for good (tests cleared them by hand), so an edited input and a
    label added beside a page were taken for what they were at the first plan."""
    shutil.copytree(samples / "local", tmp_path / "samples" / "local")
    cfg = load_config(small_corpus_config(tmp_path / "samples", tmp_path / "work", lambda raw: raw.__setitem__(
        "sources", [s for s in raw["sources"] if s["name"] == "local-pdfs"])))
    before = {info.name: info.content for _, _, info in corpus.plan_in_process(cfg)}
    report = tmp_path / "samples" / "local" / "report.md"
    report.write_text(report.read_text() + "\nA line added after the first plan.\n")
    (tmp_path / "samples" / "local" / "unlabelled.md").write_text("A label added after the first plan.\n")
    after = {info.name: info.content for _, _, info in corpus.plan_in_process(cfg)}
    assert set(after) == set(before)
    changed = sorted(name for name in before if after[name] != before[name])
    assert len(changed) == 2 and any("report" in n for n in changed) and any("unlabelled" in n for n in changed)


def test_latest_never_names_a_version_being_replaced(samples, tmp_path, monkeypatch, capsys):
    """An Airflow retry of the version LATEST names, killed midway, left LATEST naming a folder without a
    manifest: every later version was refused until that one was rerun. A retry that never starts (no
    scheduler) leaves the version and LATEST as they were."""
    config = small_corpus_config(samples, tmp_path)
    releases = tmp_path / "releases"
    args = ["--config", str(config), "--releases", str(releases), "--version", "v1", *IN_MEMORY]
    assert corpus.main(args) == 0
    assert (releases / "LATEST").read_text() == "v1"

    def never_started(*args, **kwargs):
        raise ConnectionError("no scheduler")  # as RunnerUnavailable

    def killed(*args, **kwargs):
        (releases / "v1" / "manifest.json").unlink()  # the DAG's first step removes it, then the kill
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(corpus, "run", never_started)
        assert corpus.main(args) == 2
    assert (releases / "LATEST").read_text() == "v1"
    with monkeypatch.context() as patch:
        patch.setattr(corpus, "run", killed)
        with pytest.raises(KeyboardInterrupt):
            corpus.main(args)
    assert not (releases / "LATEST").exists()
    assert corpus.main(["--config", str(config), "--releases", str(releases), "--version", "v2", *IN_MEMORY]) == 0
    assert (releases / "LATEST").read_text() == "v2"


def test_a_killed_first_run_as_previous_is_named_unfinished(samples, tmp_path):
    folder = tmp_path / "killed"
    (folder / "data").mkdir(parents=True)  # shards begun, no units table, no manifest
    with pytest.raises(refresh.PreviousRunError, match="did not finish"):
        refresh.check_previous(str(folder))
    with pytest.raises(ValueError, match="no refresh/units.parquet"):
        refresh.check_previous(str(tmp_path))  # not a run at all


def test_reordering_the_clean_stages_changes_the_refresh_key(samples, tmp_path):
    """A stage's counts depend on the stages before it: a refresh after moving `short` past `repeats` reused
    every unit with the old order's counts, and its manifest did not balance."""
    cfg = load_config(small_corpus_config(samples, tmp_path / "a"))
    names = [spec["name"] for spec in cfg.clean.stages]
    i = names.index("repeats")

    def swap(raw):
        stages = raw["clean"]["stages"]
        stages[i], stages[i + 1] = stages[i + 1], stages[i]

    swapped = load_config(small_corpus_config(samples, tmp_path / "b", swap))
    before, after = refresh.stage_fingerprints(cfg), refresh.stage_fingerprints(swapped)
    source = next(iter(before))
    changed = {name for name in names if before[source][name] != after[source][name]}
    assert {names[i], names[i + 1]} <= changed and names[0] not in changed  # the first stage's key stays


def test_a_fifo_named_like_a_label_changes_its_units_identity(samples, tmp_path):
    """The local-folder reader takes any non-folder entry beside a page as its label (and dead-letters a FIFO);
    the folder listing the refresh key hashed kept regular files only, so adding one took the fast path."""
    import os

    shutil.copytree(samples / "local", tmp_path / "samples" / "local")
    cfg = load_config(small_corpus_config(tmp_path / "samples", tmp_path / "work", lambda raw: raw.__setitem__(
        "sources", [s for s in raw["sources"] if s["name"] == "local-pdfs"])))
    before = {info.name: info.content for _, _, info in corpus.plan_in_process(cfg)}
    os.mkfifo(tmp_path / "samples" / "local" / "unlabelled.md")
    after = {info.name: info.content for _, _, info in corpus.plan_in_process(cfg)}
    assert [name for name in before if after[name] != before[name]] == [n for n in before if "unlabelled" in n]


def test_a_refresh_with_dedup_off_drops_the_carried_pages_dedup_keys(first, samples, tmp_path):
    _, previous = first
    _, out = run(samples, tmp_path, previous, lambda raw: raw["clean"]["dedup"].update(enabled=False))
    quality = [json.loads(q) for q in pq.read_table(out / "data", columns=["quality"]).column("quality").to_pylist()]
    assert quality and not any("dedup" in q for q in quality)  # as a full run with dedup off writes them
    assert any("dedup" in json.loads(q) for q in pq.read_table(previous / "data", columns=["quality"])
               .column("quality").to_pylist())  # (the previous run's pages had them)


def test_a_failed_rerun_of_latests_version_leaves_latest_unset(samples, tmp_path, capsys):
    """An Airflow retry of LATEST's version that finishes and fails its dead-letter rate (exit 3) wrote its
    own manifest: LATEST was put back, naming the failed run. And LATEST naming a deleted version is
    named as such (it read as a missing units table, with --previous advice)."""
    config = small_corpus_config(samples, tmp_path)
    releases = tmp_path / "releases"
    args = ["--config", str(config), "--releases", str(releases), "--version", "v1", *IN_MEMORY]
    assert corpus.main(args) == 0 and (releases / "LATEST").read_text() == "v1"
    assert corpus.main([*args, "--max-dead-letter-rate", "0"]) == 3  # the sample has dead letters
    assert not (releases / "LATEST").exists()
    assert corpus.main(args) == 0 and (releases / "LATEST").read_text() == "v1"
    shutil.rmtree(releases / "v1")
    with pytest.raises(refresh.PreviousRunError, match="LATEST names v1, which does not exist"):
        refresh.check_previous(str(releases))


def test_katex_installed_or_not_is_in_the_formula_render_refresh_key(samples, tmp_path, monkeypatch):
    """A run without KaTeX dead-letters every formula record; a refresh after installing it carried those
    letters for good (the stage's key did not change)."""
    from schemas import math_render

    cfg = load_config(small_corpus_config(samples, tmp_path))
    before = refresh.stage_fingerprints(cfg)

    def missing(*args, **kwargs):
        raise RuntimeError("KaTeX is not installed")

    monkeypatch.setattr(math_render, "katex_version", missing)
    after = refresh.stage_fingerprints(cfg)
    source = next(iter(before))
    # (and the stages re-checking math tests on a rewritten label; a stage rendering nothing keeps its key)
    assert all(before[source][name] != after[source][name] for name in ("formula_render", "conventions", "instruct"))
    assert before[source]["repeats"] == after[source]["repeats"]
