"""The corpus DAG end to end on every sample source, with Beam's DirectRunner and DaskRunner."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import apache_beam as beam
import datasets
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import PipelineVisitor

from pipelines import corpus
from pipelines.accounting import Envelope, Kind
from pipelines.config import load_config
from pipelines.local_runner import LocalRunner, discard
from schemas.manifest import RunManifest
from schemas.page import PAGE_SCHEMA, PageRecord, validate
from tests.helpers import IN_MEMORY, sample_config


def shard_digests(out: Path) -> dict[str, str]:
    """Every output file's sha256 (pages, dead letters, dropped samples and duplicates, dedup losers) and the
    manifest without what a run's timing and arguments make differ: what must not depend on the runner."""
    digests = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
               for folder in ("data", "dead_letter", "dropped", "refresh/dedup_losers")
               for p in sorted((out / folder).glob("*.parquet"))}
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["run"]
    for per in manifest["stages"].values():
        for counts in per.values():
            del counts["seconds"]
    digests["manifest.json"] = json.dumps(manifest)  # its key order included
    return digests


@pytest.fixture(scope="module")
def direct_run(samples_root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("direct")
    cfg = load_config(sample_config(samples_root, tmp))
    manifest = corpus.run(cfg, IN_MEMORY)
    return cfg, manifest, Path(cfg.run.output)


def test_manifest_balances_and_accounts_every_source(direct_run):
    cfg, manifest, out = direct_run
    assert manifest.imbalances() == []
    assert set(manifest.sources) == {s.name for s in cfg.sources}
    on_disk = RunManifest.from_json((out / "manifest.json").read_text())
    assert on_disk.records_written == manifest.records_written > 0
    for source in manifest.sources:
        read = manifest.stages["read"][source]
        assert read.inputs == read.out + read.n_dropped + read.n_dead
        assert manifest.stages["write"][source].out > 0, f"{source} wrote nothing"
    # every planned input unit was finished by the reader, each counted once
    units = manifest.run["units"]
    assert units["planned"] == units["finished"] == manifest.totals("read").units > len(cfg.sources)
    assert units["missing"] == []


def test_datasets_reads_image_column(direct_run):
    _, manifest, out = direct_run
    ds = datasets.load_dataset("parquet", data_dir=str(out / "data"), split="train")
    assert isinstance(ds.features["image"], datasets.Image)
    assert len(ds) == manifest.records_written
    first = ds[0]
    assert first["image"].mode in ("L", "RGB") and max(first["image"].size) <= 1288  # grey pages: L
    assert pq.read_schema(next((out / "data").glob("*.parquet"))).metadata == PAGE_SCHEMA.metadata


def test_written_records_are_valid_sorted_and_unique(direct_run):
    _, _, out = direct_run
    table = pq.read_table(out / "data")
    ids = table.column("id").to_pylist()
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    for row in table.slice(0, 20).to_pylist():
        assert validate(PageRecord.from_row(row)) == []
    sources = set(table.column("source").to_pylist())
    assert {"olmocr-mix-1025", "finepdfs", "nara-pension-files", "loc-chronicling-america"} <= sources


def test_dead_letters_name_record_stage_and_reason(direct_run):
    _, manifest, out = direct_run
    rows = pq.read_table(out / "dead_letter").to_pylist()
    assert len(rows) == manifest.records_dead
    stages = sorted({r["stage"] for r in rows})  # one shard per stage at this size, Hub-style names
    assert manifest.dead_letter_files == [f"dead_letter/{stage}-00000-of-00001.parquet" for stage in stages]
    reasons = {(r["stage"], r["reason"]) for r in rows}
    for expected in [("read", "missing_tar_member"), ("read", "unsafe_tar_member"), ("read", "invalid_utf8"),
                     ("read", "invalid_front_matter"), ("read", "warc_not_pdf"), ("read", "bad_response_json"),
                     ("render", "image_too_large"), ("render", "corrupt_pdf")]:
        assert expected in reasons
    escape = next(r for r in rows if r["reason"] == "unsafe_tar_member")
    assert escape["source"] == "olmocr-mix-1025" and escape["source_id"] == "rg_901/escape"
    assert "../../escape.pdf" in escape["message"] and escape["error_class"] == "RecordError"


def test_rerun_gives_identical_shards(direct_run, samples_root, tmp_path):
    cfg, _, out = direct_run
    again = load_config(sample_config(samples_root, tmp_path))
    corpus.run(again, IN_MEMORY)
    assert shard_digests(Path(again.run.output)) == shard_digests(out)


def test_small_shards_use_hub_names_and_keep_every_row(direct_run, samples_root, tmp_path):
    _, manifest, _ = direct_run
    cfg = load_config(sample_config(samples_root, tmp_path, shard_bytes=400_000, row_group_bytes=100_000))
    small = corpus.run(cfg, IN_MEMORY)
    names = sorted(p.name for p in (Path(cfg.run.output) / "data").glob("*.parquet"))
    n = len(names)
    assert n > 1
    assert names == [f"train-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
    assert small.records_written == manifest.records_written
    assert pq.ParquetFile(Path(cfg.run.output) / "data" / names[0]).metadata.num_row_groups > 1


def test_cli_fails_past_max_dead_letter_rate(samples_root, tmp_path, capsys):
    config = sample_config(samples_root, tmp_path)
    code = corpus.main(["--config", str(config), "--max-dead-letter-rate", "0.01", *IN_MEMORY])
    captured = capsys.readouterr()
    assert code == 3
    assert "exceeds --max-dead-letter-rate" in captured.err
    assert "balanced yes" in captured.out  # the summary table is printed before failing
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["balanced"] is True


def test_multiprocessing_direct_runner_matches(direct_run, samples_root, tmp_path, monkeypatch):
    """Same shards with two worker processes; and the files the workers' sources made while reading (the
    synthetic pages' renderers) were in the run's temporary folder, gone with it, not in the system's
    (workers end without tearing their DoFns down, so nothing else would remove them)."""
    import tempfile

    # A short path: Chromium puts a Unix socket in the temporary folder, and a socket path has ~107 bytes.
    system = Path(tempfile.mkdtemp(prefix="pm-tmp-"))
    monkeypatch.setenv("TMPDIR", str(system))
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    try:
        _, _, out = direct_run
        cfg = load_config(sample_config(samples_root, tmp_path))
        corpus.run(cfg, ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
        assert shard_digests(Path(cfg.run.output)) == shard_digests(out)
        assert [p.name for p in system.iterdir() if p.name.startswith("synth-")] == []
        assert not (Path(cfg.run.output) / "_tmp").exists()
    finally:
        # The workers' browsers may still be removing their profiles from it: try again until it is gone.
        for _ in range(100):
            shutil.rmtree(system, ignore_errors=True)
            if not system.exists():
                break
            time.sleep(0.1)


def test_dask_runner_on_local_cluster_matches(direct_run, samples_root, tmp_path):
    from dask.distributed import LocalCluster

    _, _, out = direct_run
    cfg = load_config(sample_config(samples_root, tmp_path))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        manifest = corpus.run(cfg, ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                                    f"--dask_client_address={cluster.scheduler_address}",
                                    "--dask_npartitions=4"])
    assert manifest.imbalances() == []
    assert shard_digests(Path(cfg.run.output)) == shard_digests(out)


class StepLabels(PipelineVisitor):
    def __init__(self):
        self.labels: list[str] = []

    def enter_composite_transform(self, node):
        self.labels.append(node.full_label)

    def visit_transform(self, node):
        self.labels.append(node.full_label)


@pytest.fixture
def unrun():
    """New in-memory pipelines to build and inspect, not run: Beam removes the temporary folder each
    ``Pipeline`` makes only when it runs, so this removes those it handed out."""
    made = []

    def new() -> beam.Pipeline:
        made.append(beam.Pipeline(runner=LocalRunner(), options=PipelineOptions(IN_MEMORY)))
        return made[-1]

    yield new
    for p in made:
        discard(p)


def test_dag_reads_top_to_bottom_as_named_steps(samples_root, tmp_path, unrun):
    cfg = load_config(sample_config(samples_root, tmp_path))
    p = unrun()
    corpus.build_pipeline(p, cfg, IN_MEMORY, previous=str(tmp_path / "previous"))
    steps = StepLabels()
    p.visit(steps)
    assert [s for s in steps.labels if s and "/" not in s] == [
        "PlanUnits", "ReuseUnchanged", "ReadRenderValidate", "Clean", "SpillPages", "SpillCarried", "WithCarried",
        "Dedup",
        "SumCounts", "UnitTable", "WritePages", "WriteDeadLetters", "WriteDuplicates", "WriteDroppedSamples",
        "WriteManifest"]
    assert [s for s in steps.labels if s.count("/") == 1 and s.startswith("Clean/")] == [
        "Clean/conventions", "Clean/formula_render", "Clean/repeats", "Clean/short", "Clean/instruct"]


def test_branches_that_could_carry_nothing_are_not_built(samples_root, tmp_path, unrun):
    """No previous run: nothing is carried; dedup off: no losers. Each empty branch would still cost
    Beam's local runner a round trip per step."""
    config = sample_config(samples_root, tmp_path)
    on = load_config(config)
    off = load_config(config, {"clean": {"dedup": {"enabled": False}}})
    for cfg, wanted in ((on, {"WriteDuplicates"}), (off, set())):
        p = unrun()
        corpus.build_pipeline(p, cfg, IN_MEMORY)
        steps = StepLabels()
        p.visit(steps)
        top = {s for s in steps.labels if s and "/" not in s}
        assert [s for s in steps.labels if "Carr" in s] == ["WithCarried"]  # no carry files, no SpillCarried
        assert top & {"WriteDuplicates"} == wanted
        assert {"PlanUnits", "SpillPages", "WritePages", "WriteDroppedSamples", "WriteManifest"} <= top


def test_pages_are_spilled_in_the_fused_step_that_renders_them(samples_root, tmp_path, unrun):
    """No fusion break between rendering and spilling: there a runner moves and buffers every page
    (the FnApiRunner behind the DirectRunner holds a whole step's output in memory), which cost half the
    ingest throughput on real PDFs. Fusion as Beam's portable runners plan it (the FnApiRunner's phases)."""
    from apache_beam.runners.portability.fn_api_runner import translations as t

    cfg = load_config(sample_config(samples_root, tmp_path))
    p = unrun()
    corpus.build_pipeline(p, cfg, IN_MEMORY, previous=str(tmp_path / "previous"))
    phases = [t.annotate_downstream_side_inputs, t.annotate_stateful_dofns_as_roots, t.fix_side_input_pcoll_coders,
              t.pack_combiners, t.lift_combiners, t.expand_sdf, t.expand_gbk, t.sink_flattens, t.greedily_fuse,
              t.read_to_impulse, t.impulse_to_input, t.sort_stages]
    _, stages = t.create_and_optimize_stages(p.to_runner_api(), phases=phases, known_runner_urns=frozenset())
    fused = {name: [s.name for s in stages if any(tr.unique_name == name for tr in s.transforms)]
             for name in ("ReadRenderValidate/Render", "SpillPages/Spill",
                          "ReuseUnchanged/ReadCarried", "SpillCarried/Spill")}
    assert all(len(found) == 1 for found in fused.values()), fused
    assert fused["ReadRenderValidate/Render"] == fused["SpillPages/Spill"]
    assert fused["ReuseUnchanged/ReadCarried"] == fused["SpillCarried/Spill"]


def test_corpus_module_defines_no_element_types():
    # `python -m pipelines.corpus` makes this module __main__; elements are pickled by class
    # reference, so a payload class defined here would not unpickle on a worker.
    defined = [v for v in vars(corpus).values() if isinstance(v, type) and v.__module__ == corpus.__name__]
    assert defined and all(issubclass(v, beam.PTransform) for v in defined)


def test_finalize_refuses_an_unknown_envelope_kind_and_writes_nothing(tmp_path):
    cfg = load_config(None, {"run": {"output": str(tmp_path / "out")}})
    shard = {"file": "data/train-00000-of-00001.parquet", "rows": 1}
    with pytest.raises(ValueError, match="unexpected envelope kind 'loser'"):
        corpus.finalize([Envelope(Kind.SHARD, shard), Envelope(Kind.LOSER, "id")], cfg, 0.0, [])
    with pytest.raises(ValueError, match="unexpected envelope kind 'shards'"):
        corpus.finalize([("shards", shard)], cfg, 0.0, [])
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_unit_the_runner_lost_unbalances_the_manifest_and_is_named(tmp_path):
    """A runner that drops a unit leaves every per-record count balanced (its records never
    existed), so only planned units against finished ones can tell: the manifest must."""
    from pipelines.refresh import UnitInfo
    from schemas.manifest import CountEvent

    cfg = load_config(None, {"run": {"output": str(tmp_path / "out")}})
    infos = [UnitInfo(f"k{i}", f"unit-{i}", "s", "c", "{}", "{}") for i in range(3)]
    finished = ["k0", "k2"]  # k1 was planned but never read
    events = [CountEvent("read", "s", "in", "", 1, k) for k in finished] + [
        CountEvent("read", "s", kind, "", 1, k) for k in finished for kind in ("out", "emitted", "units")]
    items = [Envelope(Kind.UNIT_INFO, info) for info in infos]
    items += [Envelope(Kind.COUNT, e._replace(unit="")) for e in events]
    items += [Envelope(Kind.UNIT_COUNT, (e.unit, e.stage, e.kind, e.reason, e.value)) for e in events]
    corpus.finalize(items, cfg, 0.0, [])
    manifest = RunManifest.from_json((tmp_path / "out" / "manifest.json").read_text())
    assert manifest.run["units"] == {"planned": 3, "finished": 2, "missing": ["k1"]}
    problems = manifest.imbalances()
    assert any("2 of 3 planned input units" in p and "k1" in p for p in problems), problems
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["balanced"] is False


def test_shard_planner_refuses_an_unknown_envelope_kind():
    cfg = load_config(None, {})
    with pytest.raises(ValueError, match="unexpected envelope kind 'dead'.*stat, file, excluded, loser_file"):
        list(corpus.plan_and_count([Envelope(Kind.DEAD, None)], cfg, dedup_on=True))


def test_unknown_config_keys_are_rejected(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: {outptu: x}\n")
    with pytest.raises(ValueError, match="outptu"):
        load_config(bad)


def test_cleaning_stages_and_dedup_are_in_the_manifest(direct_run):
    cfg, manifest, out = direct_run
    assert manifest.stage_order == ["read", "render", "validate", "conventions", "formula_render", "repeats", "short",
                                    "instruct",
                                    "write", "dedup"]
    assert manifest.totals("short").dropped.get("short_response", 0) > 0
    # one olmOCR sample label carries "$a+b,c+d$" and \\textbf{...}: the rewrites are counted
    assert manifest.totals("conventions").counters == {"split_formulas": 1, "inline_delimiters": 1, "bold": 1,
                                                       "formula_spacing": 5}  # LaTeX-OCR and UniMER labels
    # samples/make/olmocr.py plants one page twice (olmOCR-mix-1025 and -0225): exactly one goes
    assert manifest.totals("dedup").dropped == {"duplicate_image": 1}
    assert "dropped/dedup-duplicates-00000-of-00001.parquet" in manifest.dropped_sample_files
    dups = pq.read_table(out / "dropped" / "dedup-duplicates-00000-of-00001.parquet").to_pylist()
    assert len(dups) == 1 and dups[0]["reason"] == "duplicate_image" and dups[0]["kept"] != dups[0]["id"]
    written = set(pq.read_table(out / "data", columns=["id"]).column("id").to_pylist())
    assert dups[0]["kept"] in written and dups[0]["id"] not in written
    samples = pq.read_table(out / "dropped" / "short-short_response.parquet")
    assert 0 < samples.num_rows <= cfg.clean.save_dropped
    assert samples.column("id").to_pylist() == sorted(samples.column("id").to_pylist())


def test_synthetic_pages_carry_unit_tests_that_pass_on_their_response(direct_run):
    from pipelines.instruct.conventions import checkable
    from schemas.unit_tests import unit_test_from_json

    _, _, out = direct_run
    rows = [r for r in pq.read_table(out / "data").to_pylist()
            if r["source"].startswith("jinaocrsynth") and r["task"] == "parse_page"]
    html = [r for r in rows if r["source"] == "jinaocrsynth"]
    latex = [r for r in rows if r["source"] == "jinaocrsynth-latex"]
    assert len(html) == 3 and len(latex) >= 2  # the LaTeX source of configs/corpus.yaml is in the corpus
    assert all(r["source_id"].startswith("synth-latex-") and r["provenance"][0]["stage"] == "synth:latex"
               for r in latex)
    for row in rows:
        convention = json.loads(row["metadata"])["instruct"]["convention"]
        assert row["unit_tests"] or convention == "nemotron_bbox_cls", row["source_id"]  # boxes only: no text
        for line in row["unit_tests"]:  # the tests kept for the record's convention pass on its text
            passed, why = unit_test_from_json(line).check(checkable(convention, row["response"]))
            assert passed, (row["source_id"], why)


def test_the_corpus_holds_every_task_and_convention(direct_run):
    _, manifest, out = direct_run
    rows = pq.read_table(out / "data", columns=["task", "metadata", "elements", "source"]).to_pylist()
    tasks = {r["task"] for r in rows}
    # three synthetic pages here (report, paper, newspaper): no invoice or form, so no KIE (make corpus has it)
    assert {"parse_page", "transcribe_table", "transcribe_formula", "caption", "vqa"} <= tasks
    conventions = {json.loads(r["metadata"]).get("instruct", {}).get("convention") for r in rows}
    assert {"markdown", "plain", "nemotron_plain_bbox"} <= conventions  # the rest need more synthetic pages
    assert all(r["elements"] for r in rows if r["source"] == "jinaocrsynth" and r["task"] == "parse_page")
    counters = manifest.totals("instruct").counters
    assert counters["task:parse_page"] > 0 and counters["task:vqa"] >= 1 and counters["prompt:en"] > 0


def test_table2_element_sources_reach_the_corpus_with_their_tasks(direct_run):
    from schemas.unit_tests import unit_test_from_json

    _, manifest, out = direct_run
    assert manifest.totals("read").counters == {"tests_kept": 8, "tests_failed_reference": 1, "tests_invalid": 1}
    assert manifest.totals("formula_render").dropped == {"katex_error": 1}
    rows = pq.read_table(out / "data").to_pylist()
    tasks = {(r["source"], r["task"], r["response_format"]) for r in rows}
    assert {("latex-ocr", "transcribe_formula", "latex"), ("unimer", "transcribe_formula", "latex"),
            ("mmtab", "transcribe_table", "html"), ("synthchartnet", "chart_to_table", "html"),
            ("commonforms", "kie", "json"), ("rvl-cdip", "kie", "json"), ("jssoda", "parse_page", "text"),
            ("olmocr-synthmix", "parse_page", "markdown")} <= tasks
    assert {r["language"] for r in rows if r["source"] == "jssoda"} == {"ja"}
    synthmix = [r for r in rows if r["source"] == "olmocr-synthmix" and r["task"] == "parse_page"]
    assert len(synthmix) == 2 and all(r["unit_tests"] for r in synthmix)
    for row in synthmix:
        assert all(unit_test_from_json(t).check(row["response"])[0] for t in row["unit_tests"])


# --- a corpus of mostly duplicates: the losers are counted, written and excluded, never gathered --


_PLAN_AND_COUNT = corpus.plan_and_count


def recording_planner(items, cfg, dedup_on: bool):
    """``corpus.plan_and_count``, first writing what it was handed (each input's kind and payload
    type) under ``$PAGEMILL_TEST_PLANNER_LOG`` (the in-memory runner runs it in this process)."""
    import os
    import uuid

    items = list(items)
    seen = [[str(kind), type(payload).__name__, type(getattr(payload, "stat", None)).__name__]
            for kind, payload in items]
    log = Path(os.environ["PAGEMILL_TEST_PLANNER_LOG"]) / f"{'dedup' if dedup_on else 'plain'}-{uuid.uuid4().hex}.json"
    log.write_text(json.dumps(seen))
    yield from _PLAN_AND_COUNT(items, cfg, dedup_on)


def duplicate_folder(root: Path, groups: int = 4, copies: int = 12, text_only: int = 3) -> dict[str, list[str]]:
    """``groups`` distinct pages (image and label) written ``copies`` times each under different
    names, plus ``text_only`` distinct images labelled like group 0; the file stems of each group."""
    import io
    import random

    from PIL import Image, ImageDraw

    def image(seed: int) -> bytes:
        rng = random.Random(seed)
        page = Image.new("L", (160, 200), 255)
        draw = ImageDraw.Draw(page)
        for _ in range(40):
            x, y = rng.randrange(150), rng.randrange(190)
            draw.rectangle((x, y, x + rng.randrange(4, 40), y + rng.randrange(2, 12)), fill=rng.randrange(0, 160))
        buf = io.BytesIO()
        page.save(buf, format="PNG")
        return buf.getvalue()

    def label(seed: int) -> str:
        rng = random.Random(1000 + seed)
        return " ".join(f"w{rng.randrange(10_000)}" for _ in range(80)) + "\n"

    root.mkdir(parents=True)
    stems: dict[str, list[str]] = {}
    for g in range(groups):
        png, text = image(g), label(g)
        for c in range(copies):
            stem = f"g{g}-copy{c:02d}"
            (root / f"{stem}.png").write_bytes(png)
            (root / f"{stem}.md").write_text(text)
            stems.setdefault(f"image{g}", []).append(stem)
    for t in range(text_only):
        stem = f"t{t}"
        (root / f"{stem}.png").write_bytes(image(100 + t))
        (root / f"{stem}.md").write_text(label(0))
        stems.setdefault("text_only", []).append(stem)
    return stems


def test_a_corpus_of_mostly_duplicates_drops_them_without_gathering_the_losers(tmp_path, monkeypatch):
    from schemas.page import page_id

    stems = duplicate_folder(tmp_path / "pages")
    raw = {
        "run": {"output": str(tmp_path / "out")},
        "clean": {"stages": [], "dedup": {"enabled": True}},
        # tiny plan buckets and shards: the losers spread over several buckets and page shards
        "write": {"shard_bytes": 2_000, "row_group_bytes": 10_000, "buckets": 4, "plan_buckets": 16,
                  "spill_buffer_bytes": 4_000},
        "sources": [{"name": "pages", "kind": "local_folder", "paths": [str(tmp_path / "pages")],
                     "license": "cc0-1.0", "domain": "documents"}],
    }
    (tmp_path / "corpus.yaml").write_text(json.dumps(raw))  # JSON is YAML
    cfg = load_config(tmp_path / "corpus.yaml")
    log_dir = tmp_path / "planner"
    log_dir.mkdir()
    monkeypatch.setenv("PAGEMILL_TEST_PLANNER_LOG", str(log_dir))
    monkeypatch.setattr(corpus, "plan_and_count", recording_planner)
    manifest = corpus.run(cfg, IN_MEMORY)

    # what should go, worked out from the groups alone: one keeper per group (smallest id, equal
    # ranks); the text-only pages share group 0's label, so that text component keeps one of all
    ids = {stem: page_id("pages", f"{stem}.png", 1) for group in stems.values() for stem in group}
    image_groups = [[ids[s] for s in group] for name, group in stems.items() if name.startswith("image")]
    text_group = [ids[s] for s in stems["image0"] + stems["text_only"]]
    expected: dict[str, tuple[str, str]] = {}
    for group in image_groups:
        expected.update({i: ("duplicate_image", min(group)) for i in group if i != min(group)})
    for i in text_group:
        if i != min(text_group) and i not in expected:
            expected[i] = ("near_duplicate_text", min(text_group))
    total = len(ids)
    assert total == 51 and len(expected) >= 44

    assert manifest.imbalances() == []
    dedup = manifest.stages["dedup"]["pages"]
    assert dedup.inputs == total and dedup.out == total - len(expected) == manifest.records_written
    assert dedup.dropped == {reason: sum(1 for r, _ in expected.values() if r == reason)
                             for reason in {r for r, _ in expected.values()}}
    out = Path(cfg.run.output)
    written = pq.read_table(out / "data", columns=["id"]).column("id").to_pylist()
    assert sorted(written) == sorted(set(ids.values()) - set(expected))
    assert len(manifest.shards) > 1  # several page shards, each leaving out the losers of its range
    assert len([f for f in manifest.dropped_sample_files if "dedup-duplicates" in f]) > 1
    dup_files = sorted(f for f in manifest.dropped_sample_files if f.startswith("dropped/dedup-duplicates-"))
    assert dup_files == [f"dropped/dedup-duplicates-{i:05d}-of-{len(dup_files):05d}.parquet"
                         for i in range(len(dup_files))]
    rows = [row for f in dup_files for row in pq.read_table(out / f).to_pylist()]
    assert [r["id"] for r in rows] == sorted(expected)
    assert {r["id"]: (r["reason"], r["kept"]) for r in rows} == expected
    assert {r["source"] for r in rows} == {"pages"}

    # the planners were handed sums and file names only: no loser, no id, and fewer "excluded"
    # sums than losers (one per (split, plan bucket) holding any)
    logs = {p.name.split("-")[0]: json.loads(p.read_text()) for p in log_dir.glob("*.json")}
    # the pages' planner and the duplicates table's (no dead letters: that one never runs)
    assert len(list(log_dir.glob("*.json"))) == 2 and set(logs) == {"dedup", "plain"}
    assert {kind for kind, _, _ in logs["plain"]} == {"stat", "file"}
    pages_planner = logs["dedup"]
    kinds = {kind for kind, _, _ in pages_planner}
    assert kinds == {"stat", "file", "excluded", "loser_file"}
    for kind, payload, stat in pages_planner:
        if kind in ("stat", "excluded"):
            assert (payload, stat) == ("SpillTotal", "SpillStat")
        else:
            assert payload == "tuple"  # (split, path) of a spill file
    n_excluded = sum(1 for kind, _, _ in pages_planner if kind == "excluded")
    assert n_excluded <= cfg.write.plan_buckets < len(expected)


def test_an_input_that_plans_no_units_is_an_empty_balanced_run(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    raw = {"run": {"output": str(tmp_path / "out")}, "clean": {"stages": [], "dedup": {"enabled": False}},
           "sources": [{"name": "pages", "kind": "local_folder", "paths": [str(tmp_path / "empty")],
                        "license": "cc0-1.0", "domain": "documents"}]}
    (tmp_path / "corpus.yaml").write_text(json.dumps(raw))
    assert corpus.main(["--config", str(tmp_path / "corpus.yaml"), *IN_MEMORY]) == 0
    assert "in 0  written 0" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["balanced"] is True and manifest["shards"] == [] and manifest["run"]["units"]["planned"] == 0
