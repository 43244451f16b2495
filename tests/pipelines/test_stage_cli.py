"""``python -m pipelines.stage``: every per-record stage run as a real subprocess over PageRecord
Parquet, with the accounting, the stage's effect, the outputs read back, help and option errors."""

from __future__ import annotations

import hashlib
import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from schemas.page import PAGE_SCHEMA, PageRecord, ProvenanceStep, page_id

REPO = Path(__file__).resolve().parents[2]
STAGE_NAMES = ("conventions", "repeats", "short", "decontam", "augment", "validate")
WORDS = ("the results of the analysis are shown in table two and the model was trained on data from "
         "several sources while the committee reported that prices increased during the year").split()
BENCH_WORDS = ("quartz lantern meadow orbit saffron glacier velvet harbor cobalt thistle ember willow "
               "falcon prism marble canyon").split()
LOOP_TAIL = "The cat sat on the mat. " * 80
FORMULA = "where $a,b$ are the sides."


def prose(seed: int, words: tuple[str, ...] | list[str] = WORDS, n: int = 140) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(words) for _ in range(n)) + ".\n\n"


BENCH_TEXT = prose(99, BENCH_WORDS, 90).strip()


def image(seed: int) -> bytes:
    rng = random.Random(seed)
    img = Image.new("RGB", (96, 80), (255, 255, 255))
    for _ in range(300):
        img.putpixel((rng.randrange(96), rng.randrange(80)), (rng.randrange(256),) * 3)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def record(source_id: str, source: str, response: str, seed: int, **overrides) -> PageRecord:
    data = image(seed)
    values = dict(
        id=page_id(source, source_id, 1), source=source, source_id=source_id, page_number=1, domain="documents",
        language="en", license="odc-by", image=data, image_sha256=hashlib.sha256(data).hexdigest(), width=96,
        height=80, task="parse_page", instruction="Convert to Markdown.", response=response,
        provenance=[ProvenanceStep("read:test", "1", "abc")],
    )
    values.update(overrides)
    return PageRecord(**values)


RECORDS = [
    record("clean", "alpha", prose(1), 1),
    record("loop", "alpha", prose(2) + LOOP_TAIL, 2),
    record("short", "beta", "Hello there.", 3),
    record("formula", "beta", FORMULA + " " + prose(4), 4, split="eval"),
    record("bad", "beta", prose(5), 5, language="English!"),  # breaks the PageRecord contract
    record("bench", "alpha", BENCH_TEXT, 6),  # a benchmark page's text
]
# what each stage removes (dropped or dead-lettered): source_id -> reason
REMOVED = {
    "conventions": {},
    "repeats": {"loop": "repeat_loop_exact"},
    "short": {"short": "short_response"},
    "decontam": {"bench": "contaminated_text"},
    "augment": {},
    "validate": {"bad": "schema_violation"},
}


def command(*args: str, module: str = "pipelines.stage") -> list[str]:
    return [sys.executable, "-m", module, *args]


def cli(*args: str, module: str = "pipelines.stage") -> subprocess.CompletedProcess:
    return subprocess.run(command(*args, module=module), cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A corpus-like input: data/ with two PageRecord files (rows 0-2 and 3-5), row groups of 2,
    and a benchmark folder whose one item is BENCH_TEXT."""
    root = tmp_path_factory.mktemp("stage_cli")
    data = root / "in" / "data"
    data.mkdir(parents=True)
    for i, part in enumerate((RECORDS[:3], RECORDS[3:])):
        table = pa.Table.from_pylist([r.to_row() for r in part], schema=PAGE_SCHEMA)
        pq.write_table(table, data / f"train-{i:05d}-of-00002.parquet", row_group_size=2)
    (root / "bench").mkdir()
    (root / "bench" / "page.md").write_text(BENCH_TEXT)
    (root / "decontam.yaml").write_text(f"name: decontam\nfolder: {root / 'bench'}\n")
    return root


STAGE_ARGS = {
    "augment": ["--set", "probability=1.0", "--set", "seed=5", "--set", "min_side=8"],
    "decontam": ["--config", "{root}/decontam.yaml"],
    "repeats": ["--batch-rows", "2"],
}


@pytest.fixture(scope="module")
def runs(corpus) -> dict[str, Path]:
    """Each stage run once over ``in/data`` into ``out-<stage>`` (the runs at the same time)."""
    outputs, running = {}, {}
    for name in STAGE_NAMES:
        outputs[name] = corpus / f"out-{name}"
        extra = [a.format(root=corpus) for a in STAGE_ARGS.get(name, [])]
        args = command(name, "--input", str(corpus / "in" / "data"), "--output", str(outputs[name]), *extra)
        running[name] = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, f"{name}: {stderr}"
        assert "balanced yes" in stdout
    return outputs


def read_pages(out: Path) -> list[PageRecord]:
    """The records under ``out/data``, in input order (one file per split)."""
    files = sorted((out / "data").glob("*.parquet"))
    rows = [PageRecord.from_row(r) for f in files for r in pq.read_table(f).to_pylist()]
    order = [r.source_id for r in RECORDS]
    return sorted(rows, key=lambda r: order.index(r.source_id))


@pytest.mark.parametrize("name", STAGE_NAMES)
def test_every_record_is_out_dropped_or_dead(runs, name):
    out = runs[name]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["balanced"] and manifest["stage_order"] == [name]
    removed = REMOVED[name]
    for source in ("alpha", "beta"):
        counts = manifest["stages"][name][source]
        mine = [r for r in RECORDS if r.source == source]
        gone = [r for r in mine if r.source_id in removed]
        n_removed = sum(counts["dropped"].values()) + sum(counts["dead"].values())
        assert counts["inputs"] == len(mine) == counts["out"] + n_removed
        by_reason = {**counts["dropped"], **counts["dead"]}
        assert by_reason == {reason: 1 for sid, reason in removed.items() if sid in {r.source_id for r in gone}}
    kept = [r.source_id for r in RECORDS if r.source_id not in removed]
    pages = read_pages(out)
    assert [r.source_id for r in pages] == kept  # nothing lost, nothing added
    # relative order within each split file is the input order
    for f in (out / "data").glob("*.parquet"):
        ids = pq.read_table(f, columns=["source_id"]).column("source_id").to_pylist()
        assert ids == [i for i in kept if i in ids]
        assert pq.read_schema(f).metadata == PAGE_SCHEMA.metadata
    assert sorted(p.name for p in (out / "data").glob("*.parquet")) == [
        "eval-00000-of-00001.parquet", "train-00000-of-00001.parquet"]
    dropped = pq.read_table(out / "dropped.parquet").to_pylist()
    dead = pq.read_table(out / "dead_letter.parquet").to_pylist()
    assert {(d["source_id"], d["stage"], d["reason"]) for d in dropped + dead} == {
        (sid, name, reason) for sid, reason in removed.items()}
    assert manifest["totals"]["written"] == len(kept)


def test_repeats_drops_the_looping_response_with_its_finding(runs):
    (row,) = pq.read_table(runs["repeats"] / "dropped.parquet").to_pylist()
    record = PageRecord.from_row(row)
    assert row["reason"].startswith("repeat_loop_") and record.source_id == "loop"
    assert record.quality["repeats"]["loop"] and record.quality["repeats"]["period"] == len("The cat sat on the mat. ")
    kept = read_pages(runs["repeats"])
    assert all(r.quality["repeats"]["loop"] is False for r in kept)
    assert all(r.provenance[-1].stage == "clean:repeats" for r in kept)


def test_short_drops_the_short_response(runs):
    (row,) = pq.read_table(runs["short"] / "dropped.parquet").to_pylist()
    assert (row["source_id"], row["reason"]) == ("short", "short_response")
    assert json.loads(row["quality"])["short"]["token_count"] < 64


def test_conventions_splits_the_comma_joined_formula(runs):
    pages = {r.source_id: r for r in read_pages(runs["conventions"])}
    assert pages["formula"].response.startswith(r"where \(a\), \(b\) are the sides.")
    assert pages["formula"].quality["conventions"]["counters"]["split_formulas"] == 1
    assert pages["clean"].response == RECORDS[0].response
    manifest = json.loads((runs["conventions"] / "manifest.json").read_text())
    assert manifest["stages"]["conventions"]["beta"]["counters"]["split_formulas"] == 1


def test_validate_dead_letters_the_bad_record(runs):
    (letter,) = pq.read_table(runs["validate"] / "dead_letter.parquet").to_pylist()
    assert (letter["source"], letter["source_id"], letter["stage"]) == ("beta", "bad", "validate")
    assert letter["reason"] == "schema_violation" and "language must be" in letter["message"]
    assert pq.read_table(runs["validate"] / "dropped.parquet").num_rows == 0


def test_decontam_drops_the_benchmark_page(runs):
    (row,) = pq.read_table(runs["decontam"] / "dropped.parquet").to_pylist()
    assert (row["source_id"], row["reason"]) == ("bench", "contaminated_text")
    assert json.loads(row["quality"])["decontam"]["match"]["item"] == "page.md"
    manifest = json.loads((runs["decontam"] / "manifest.json").read_text())
    assert manifest["run"]["options"]["folder"].endswith("bench")


def test_augment_changes_images_as_the_stage_does_in_process(runs):
    from pipelines.clean.registry import build_stage

    stage = build_stage({"name": "augment", "probability": 1.0, "seed": 5, "min_side": 8})
    pages = {r.source_id: r for r in read_pages(runs["augment"])}
    for original in RECORDS:
        expected = stage(PageRecord.from_row(original.to_row()))[0]
        got = pages[original.source_id]
        assert got.image != original.image
        assert (got.image, got.image_sha256, got.width, got.height) == (
            expected.image, expected.image_sha256, expected.width, expected.height)
        assert got.quality["augment"] == expected.quality["augment"]


def test_output_reads_back_with_datasets(runs, tmp_path):
    import datasets

    ds = datasets.load_dataset("parquet", data_dir=str(runs["short"] / "data"), cache_dir=str(tmp_path / "hf"))
    # datasets files "eval-*" under its "test" split (its keywords for test include "eval")
    assert {k: len(v) for k, v in ds.items()} == {"train": 4, "test": 1}
    assert isinstance(ds["train"].features["image"], datasets.Image)
    assert ds["test"][0]["source_id"] == "formula" and ds["test"][0]["image"].size == (96, 80)
    dropped = datasets.load_dataset("parquet", data_files=str(runs["short"] / "dropped.parquet"),
                                    cache_dir=str(tmp_path / "hf"), split="train")
    assert dropped[0]["reason"] == "short_response" and isinstance(dropped.features["image"], datasets.Image)


def test_help_lists_stages_and_options():
    done = cli("--help")
    assert done.returncode == 0
    for name in STAGE_NAMES:
        assert f"\n  {name} " in done.stdout
    assert "short_response" in done.stdout  # short's one line
    done = cli("repeats", "--help")
    assert done.returncode == 0
    assert "min_length (int, default 512): labels shorter than this are not inspected; the length is in columns" \
        in done.stdout
    assert "drop (bool, default True): stage: drop records with a loop" in done.stdout


def test_option_typo_exits_2_naming_the_key_before_any_work(corpus):
    out = corpus / "out-typo"
    done = cli("short", "--input", str(corpus / "in" / "data"), "--output", str(out), "--set", "min_tokns=3")
    assert done.returncode == 2
    assert ("short.min_tokns: unknown key; known keys: cap_split_chars, max_count_chars, min_tokens, tasks, "
            "tokenizer_path") in done.stderr
    assert not out.exists()
    done = cli("short", "--input", str(corpus / "in" / "data"), "--output", str(out), "--set", "min_tokens=many")
    assert done.returncode == 2 and "short.min_tokens: expected int" in done.stderr
    done = cli("nosuchstage", "--input", "x", "--output", str(out))
    assert done.returncode == 2 and "known: conventions, repeats" in done.stderr


def test_an_input_that_is_not_parquet_exits_2_naming_the_file(tmp_path):
    bad = tmp_path / "in" / "data" / "train-00000-of-00001.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"<html>not parquet</html>")
    done = cli("short", "--input", str(bad), "--output", str(tmp_path / "out"))
    assert done.returncode == 2
    assert f"--input {bad}: not a Parquet file" in done.stderr
    assert not (tmp_path / "out").exists()


def test_repeats_jsonl_text_form_matches_the_repeats_cli(tmp_path):
    loop_text = prose(18) + "<tr><td></td><td>n/a</td></tr>" * 60
    lines = [json.dumps({"id": "clean", "text": prose(19)}), "{not json", json.dumps({"id": "loop", "text": loop_text}),
             json.dumps({"id": "no-text"})]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    ours, theirs = tmp_path / "stage.jsonl", tmp_path / "repeats.jsonl"
    done = cli("repeats", "--input-format", "jsonl", "--input", str(source), "--output", str(ours),
               "--set", "tail_chars=2048")
    assert done.returncode == 0, done.stderr
    done = cli("--input", str(source), "--output", str(theirs), "--tail-chars", "2048",
               module="pipelines.clean.repeats")
    assert done.returncode == 0, done.stderr
    assert ours.read_bytes() == theirs.read_bytes()
    found = [json.loads(line) for line in ours.read_text().splitlines()]
    assert [f.get("loop") for f in found] == [False, None, True, None] and found[2]["kind"] == "exact"
    done = cli("short", "--input-format", "jsonl", "--input", str(source))
    assert done.returncode == 2 and "no text form" in done.stderr


def test_a_row_that_is_not_a_page_record_is_dead_lettered(tmp_path):
    from pipelines.stage import checked_inputs, run
    from pipelines.validate_stage import validate_record

    rows = [RECORDS[0].to_row(), {**RECORDS[2].to_row(), "quality": "{not json"}]
    pq.write_table(pa.Table.from_pylist(rows, schema=PAGE_SCHEMA), tmp_path / "in.parquet")
    manifest = run("validate", validate_record, checked_inputs(str(tmp_path / "*.parquet")), str(tmp_path / "out"), {})
    assert not manifest.imbalances()
    assert manifest.stages["validate"]["beta"].dead == {"unreadable_row": 1}
    assert manifest.stages["validate"]["alpha"].out == 1
    (letter,) = pq.read_table(tmp_path / "out" / "dead_letter.parquet").to_pylist()
    assert letter["source_id"] == "short" and "in.parquet row 1" in letter["message"]


@pytest.mark.parametrize("field, value, why", [("quality", "[1, 2]", "quality is a JSON list"),
                                               ("metadata", '"text"', "metadata is a JSON str"),
                                               ("source", None, "source is NoneType")])
def test_a_row_with_values_no_page_record_holds_is_dead_lettered_and_the_run_ends(tmp_path, field, value, why):
    from pipelines.stage import checked_inputs, run
    from pipelines.validate_stage import validate_record

    rows = [RECORDS[0].to_row(), {**RECORDS[2].to_row(), field: value}]
    pq.write_table(pa.Table.from_pylist(rows, schema=PAGE_SCHEMA), tmp_path / "in.parquet")
    manifest = run("validate", validate_record, checked_inputs(str(tmp_path / "*.parquet")), str(tmp_path / "out"), {})
    assert not manifest.imbalances() and manifest.totals("validate").dead == {"unreadable_row": 1}
    (letter,) = pq.read_table(tmp_path / "out" / "dead_letter.parquet").to_pylist()
    assert "in.parquet row 1" in letter["message"] and why in letter["message"]


def test_a_sink_writes_a_row_group_every_row_group_rows_whatever_the_rows_estimated_bytes(tmp_path):
    """Small rows are estimated far below their memory (a dict each): the sink must not hold ~100k of them."""

    from pipelines.stage import TableSink

    schema = pa.schema([("id", pa.string())])
    sink = TableSink(str(tmp_path), "t.parquet", schema)
    for i in range(2_500):
        sink.add({"id": f"{i:05d}"}, 1)
    assert len(sink.rows) == 2_500 - 2 * sink.cfg.row_group_rows  # two row groups already written
    entry = sink.close()
    f = pq.ParquetFile(tmp_path / "t.parquet")
    assert entry["rows"] == 2_500 and [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)] == [
        1000, 1000, 500]


def test_a_row_past_the_page_schema_range_is_dead_lettered_and_the_rest_written(tmp_path):
    """A foreign shard whose page_number is int64 holds 2**31: the sink's int32 column failed the whole run."""
    from pipelines.stage import checked_inputs, run
    from pipelines.validate_stage import validate_record

    schema = PAGE_SCHEMA.set(PAGE_SCHEMA.get_field_index("page_number"), pa.field("page_number", pa.int64()))
    rows = [RECORDS[0].to_row(), {**RECORDS[2].to_row(), "page_number": 2**31}, RECORDS[3].to_row()]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "in.parquet")
    manifest = run("validate", validate_record, checked_inputs(str(tmp_path / "*.parquet")), str(tmp_path / "out"), {})
    assert not manifest.imbalances() and manifest.totals("validate").dead == {"unreadable_row": 1}
    assert manifest.totals("validate").out == 2
    (letter,) = pq.read_table(tmp_path / "out" / "dead_letter.parquet").to_pylist()
    assert letter["source_id"] == RECORDS[2].source_id
    assert "in.parquet row 1" in letter["message"] and "page_number" in letter["message"]


def test_a_file_that_breaks_partway_is_dead_lettered_and_the_other_files_written(tmp_path):
    from pipelines.stage import checked_inputs, run
    from pipelines.validate_stage import validate_record

    (tmp_path / "in").mkdir()
    table = pa.Table.from_pylist([r.to_row() for r in RECORDS[:4]], schema=PAGE_SCHEMA)
    pq.write_table(table.slice(0, 2), tmp_path / "in" / "a.parquet")
    pq.write_table(table.slice(2, 2), tmp_path / "in" / "b.parquet", row_group_size=1)
    broken = tmp_path / "in" / "b.parquet"
    data = bytearray(broken.read_bytes())
    metadata = pq.ParquetFile(broken).metadata
    start = metadata.row_group(1).column(0).data_page_offset  # smash the second row group's first page header
    data[start:start + 16] = b"\xff" * 16
    broken.write_bytes(bytes(data))
    manifest = run("validate", validate_record, checked_inputs(str(tmp_path / "in" / "*.parquet")),
                   str(tmp_path / "out"), {}, batch_rows=1)  # one row a batch: b's first row group reads
    totals = manifest.totals("validate")
    assert totals.out == 3 and totals.dead == {"unreadable_parquet": 1}
    (letter,) = pq.read_table(tmp_path / "out" / "dead_letter.parquet").to_pylist()
    assert "b.parquet: read failed after 1 rows" in letter["message"]
    assert sum(s["rows"] for s in manifest.shards) == 3


def test_a_rerun_removes_what_a_killed_run_left_and_a_killed_rerun_is_not_finished(tmp_path, monkeypatch):
    """A kill leaves ``*.parquet.tmp-*`` beside the shards (load_dataset and pq.read_table of data/ then fail or
    read pages twice) and, on a rerun, the old manifest over new files."""
    import pipelines.stage as stage_module
    from pipelines.stage import checked_inputs, run
    from pipelines.validate_stage import validate_record

    pq.write_table(pa.Table.from_pylist([r.to_row() for r in RECORDS[:3]], schema=PAGE_SCHEMA), tmp_path / "in.parquet")
    out = tmp_path / "out"
    files = checked_inputs(str(tmp_path / "in.parquet"))
    run("validate", validate_record, files, str(out), {})
    shard = next((out / "data").glob("*.parquet"))
    (out / "data" / f"{shard.name}.tmp-0badc0de").write_bytes(shard.read_bytes())  # killed before its rename
    (out / "dead_letter.parquet.tmp-0badc0de").write_bytes(b"")  # killed as it opened
    real = stage_module.TableSink.close

    def killed(self):
        raise KeyboardInterrupt  # the rerun dies before its first file is in place

    monkeypatch.setattr(stage_module.TableSink, "close", killed)
    with pytest.raises(KeyboardInterrupt):
        run("validate", validate_record, files, str(out), {})
    assert not (out / "manifest.json").exists()
    monkeypatch.setattr(stage_module.TableSink, "close", real)
    manifest = run("validate", validate_record, files, str(out), {})
    assert sorted(p.name for p in out.rglob("*") if ".tmp-" in p.name) == []
    assert pq.read_table(out / "data").num_rows == manifest.totals("validate").out == 3


def test_a_yaml_syntax_error_in_config_or_set_exits_2_in_one_line_and_floats_need_no_dot(tmp_path, capsys):
    from pipelines.stage import main

    config = tmp_path / "opts.yaml"
    config.write_text("tail_chars:\t2048\n")
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "a", "text": prose(3)}) + "\n")
    stage = ["repeats", "--input-format", "jsonl", "--input", str(source), "--output", str(tmp_path / "out.jsonl")]
    for args, message in ((["--config", str(config)], f"{config}: line 1, column 12: found character '\\t'"),
                          (["--set", "tail_chars=[1,"], "--set 'tail_chars=[1,': line 1, column 4: ")):
        assert main([*stage, *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, err
    assert main([*stage, "--set", "gap_tolerance=1e-1"]) == 0  # YAML 1.1 read 1e-1 as a string
