"""pipelines.config.load_config: every block of a corpus run is checked at start-up, by path."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.clean.dedup_config import DedupConfig, MinHashConfig
from pipelines.clean.registry import STAGES, stage_config_type
from pipelines.config import DEFAULT_CONFIG, load_config
from pipelines.sources import SOURCE_KINDS, build_source, source_options_type
from schemas.config import ConfigError, describe
from schemas.page import params_hash

REPO = Path(__file__).resolve().parents[2]
# The options a kind cannot do without; everything else has a default.
REQUIRED_OPTIONS: dict[str, dict[str, Any]] = {
    "finepdfs": {"warc_root": "warc"},
    "historical": {"columns": {"id": "page_id", "text": "ocr_text", "image_url": "url"}},
}


def bundled() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_CONFIG.read_text())


def write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "configs" / "corpus.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(raw))
    return path


# readers that make one task only refuse an entry without it
KIND_TASKS = {"commonforms": "kie", "rvl_cdip": "kie", "formula_lines": "transcribe_formula",
              "mmtab": "transcribe_table", "synthchartnet": "chart_to_table"}


def source_entry(kind: str, **options) -> dict[str, Any]:
    paths = ["synth://all"] if kind == "jinaocrsynth" else ["inputs/*.parquet"]
    options = {**REQUIRED_OPTIONS.get(kind, {}), **options}
    entry = {"name": f"{kind}-src", "kind": kind, "paths": paths, "options": options}
    return entry | ({"task": KIND_TASKS[kind]} if kind in KIND_TASKS else {})


def load_error(tmp_path: Path, raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, raw))
    return str(err.value)


def test_bundled_config_loads_typed_and_keeps_raw_source_options():
    cfg = load_config()
    assert isinstance(cfg.clean.dedup, DedupConfig) and cfg.clean.dedup.enabled
    assert isinstance(cfg.clean.dedup.minhash, MinHashConfig)
    assert [s["name"] for s in cfg.clean.stages] == ["conventions", "formula_render", "repeats", "short", "relabel",
                                                     "audit", "instruct"]
    [short] = [s for s in cfg.clean.stages if s["name"] == "short"]
    assert short["tokenizer_path"] == str(REPO / "assets/tokenizer/tokenizer.json")
    raw = {s["name"]: s.get("options") or {} for s in bundled()["sources"]}
    assert {s.kind for s in cfg.sources} == set(SOURCE_KINDS)  # the bundled config exercises every kind
    for settings in cfg.sources:
        # provenance hashes the user's mapping: no defaults filled in, lists stay lists, paths resolved
        assert type(settings.options) is dict and set(settings.options) == set(raw[settings.name])
    europeana = next(s for s in cfg.sources if s.name == "europeana-newspapers")
    assert europeana.options["quality_columns"] == ["mean_ocr", "std_ocr"]
    finepdfs = next(s for s in cfg.sources if s.kind == "finepdfs")
    assert finepdfs.options["warc_root"] == str(REPO / "samples/finepdfs/warc")
    source = build_source(finepdfs)
    assert source._provenance.params_hash == params_hash({"warc_root": str(REPO / "samples/finepdfs/warc")})


@pytest.mark.parametrize("patch, message", [
    ({"runn": {}}, "runn: unknown key; known keys: clean, render, run, sources, write"),
    ({"run": {"outptu": "x"}}, "run.outptu: unknown key; known keys: beam_args, max_dead_letter_rate, output,"),
    ({"render": {"longest_sid": 9}}, "render.longest_sid: unknown key; known keys: image_format,"),
    ({"write": {"shard_byte": 9}}, "write.shard_byte: unknown key; known keys: buckets, compression,"),
    ({"clean": {"save_droped": 1}}, "clean.save_droped: unknown key; known keys: dedup, save_dropped, stages"),
    ({"clean": {"dedup": {"exact_imag": True}}}, "clean.dedup.exact_imag: unknown key; known keys: enabled,"),
    ({"clean": {"dedup": {"minhash": {"bandz": 3}}}}, "clean.dedup.minhash.bandz: unknown key; known keys: bands,"),
    ({"clean": {"stages": [{"name": "repeats"}, {"name": "short", "min_tokns": 3}]}},
     "clean.stages[1].min_tokns: unknown key; known keys: cap_split_chars, max_count_chars, min_tokens, tasks, "
     "tokenizer_path"),
    ({"clean": {"stages": [{"name": "repets"}]}}, "clean.stages[0].name: unknown stage 'repets'; known stages:"),
    ({"clean": {"stages": [{"min_tokens": 3}]}}, "clean.stages[0]: each stage is a mapping with a 'name'"),
])
def test_a_typo_in_any_block_names_its_path(tmp_path, patch, message):
    raw = bundled()
    for section, values in patch.items():
        if isinstance(raw.get(section), dict):
            raw[section].update(values)
        else:
            raw[section] = values
    assert load_error(tmp_path, raw).startswith(message)


@pytest.mark.parametrize("name", sorted(STAGES))
def test_every_stage_options_are_checked_without_building_the_stage(tmp_path, name):
    known = ", ".join(f.name for f in sorted(dataclasses.fields(stage_config_type(name)), key=lambda f: f.name))
    # decontam without its benchmark folder could not be built: checking its options does not build it
    error = load_error(tmp_path, {"clean": {"stages": [{"name": "conventions"}, {"name": name, "thresold": 1}]}})
    assert error == f"clean.stages[1].thresold: unknown key; known keys: {known}"
    load_config(write(tmp_path, {"clean": {"stages": [{"name": name}]}, "sources": [source_entry("local_folder")]}))


@pytest.mark.parametrize("kind", sorted(SOURCE_KINDS))
def test_every_source_kind_options_are_checked(tmp_path, kind):
    fields = dataclasses.fields(source_options_type(kind))
    assert all(f.metadata.get("help") for f in fields), f"{kind}: every option has its help"
    first = {**source_entry("local_folder"), "name": "first"}  # the error names the entry's index
    good = {"sources": [first, source_entry(kind)]}
    (_, settings) = load_config(write(tmp_path, good)).sources
    assert settings.kind == kind and build_source(settings).settings is settings
    error = load_error(tmp_path, {"sources": [first, source_entry(kind, warc_roott="x")]})
    known = ", ".join(sorted(f.name for f in fields))
    assert error == f"sources[1].options.warc_roott: unknown key; known keys: {known}"


def test_source_keys_and_kinds_are_checked(tmp_path):
    entry = {**source_entry("local_folder"), "licence": "cc0-1.0"}
    assert load_error(tmp_path, {"sources": [entry]}).startswith("sources[0].licence: unknown key; known keys: domain,")
    entry = {**source_entry("local_folder"), "kind": "local_foldr"}
    assert load_error(tmp_path, {"sources": [entry]}).startswith(
        "sources[0].kind: unknown kind 'local_foldr'; known kinds: commonforms, finepdfs, formula_lines, historical,")
    entry = source_entry("local_folder")
    del entry["name"]
    assert load_error(tmp_path, {"sources": [entry]}).startswith("sources[0].name: required key is missing")
    entry = source_entry("historical")
    del entry["options"]["columns"]["text"]
    assert load_error(tmp_path, {"sources": [entry]}).startswith(
        "sources[0].options.columns.text: required key is missing")
    entry = source_entry("historical", columns={"id": "i", "text": "t"})
    assert "exactly one of columns.image_url / image_bytes" in load_error(tmp_path, {"sources": [entry]})
    twice = [source_entry("local_folder"), source_entry("local_folder")]
    assert load_error(tmp_path, {"sources": twice}).startswith("sources: source names must be unique")


@pytest.mark.parametrize("raw, message", [
    ({"render": {"longest_side": "big"}}, "render.longest_side: expected int, got str 'big'"),
    ({"render": {"image_format": "jpeg"}}, "render.image_format: expected one of 'png', 'webp', got str 'jpeg'"),
    ({"run": {"beam_args": "--runner=DirectRunner"}}, "run.beam_args: expected a list, got str"),
    ({"clean": {"stages": [{"name": "short", "min_tokens": "64"}]}},
     "clean.stages[0].min_tokens: expected int, got str '64'"),
    ({"clean": {"stages": [{"name": "conventions", "inline": "$$"}]}},
     "clean.stages[0].inline: expected one of '\\\\(', '$', got str '$$'"),
    ({"clean": {"dedup": {"minhash": {"verify_jaccard": "high"}}}},
     "clean.dedup.minhash.verify_jaccard: expected float, got str 'high'"),
    ({"sources": [source_entry("finepdfs", batch_size=1.5)]}, "sources[0].options.batch_size: expected int, got float"),
    ({"sources": [source_entry("loc", image_column="ocr_url")]},
     "sources[0].options.image_column: expected one of 'pdf_url', 'thumbnail_url', 'jpeg2000_url'"),
    ({"sources": [source_entry("nara", allow_http="yes")]}, "sources[0].options.allow_http: expected bool, got str"),
    ({"sources": [{**source_entry("local_folder"), "paths": 3}]}, "sources[0].paths: expected a list, got int"),
])
def test_a_wrong_type_names_path_and_expected_type(tmp_path, raw, message):
    assert load_error(tmp_path, raw).startswith(message)


def test_dedup_block_is_typed_and_switchable(tmp_path):
    sources = [{**source_entry("local_folder"), "name": name} for name in ("a", "b")]
    cfg = load_config(write(tmp_path, {"clean": {"dedup": {"enabled": False, "minhash": {"bands": 7},
                                                           "source_priority": {"b": 2, "a": 1}}},
                                       "sources": sources}))
    assert cfg.clean.dedup == DedupConfig(enabled=False, minhash=MinHashConfig(bands=7),
                                          source_priority=(("a", 1.0), ("b", 2.0)))
    from pipelines.corpus import stage_order

    assert stage_order(cfg)[-1] == "write"
    assert stage_order(load_config(write(tmp_path, {"sources": sources})))[-1] == "dedup"


def test_every_config_field_has_help():
    from pipelines.config import CleanConfig, CorpusConfig, RunConfig
    from pipelines.render import RenderConfig
    from pipelines.sources.base import SourceSettings
    from pipelines.write import WriteConfig

    types = [CorpusConfig, RunConfig, RenderConfig, WriteConfig, CleanConfig, DedupConfig, MinHashConfig,
             SourceSettings, *(stage_config_type(name) for name in STAGES)]
    for cls in types:
        missing = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("help")]
        assert missing == [], f"{cls.__name__}: fields without help"
    assert "clean.dedup.minhash.bands (int, default 14): LSH bands (one mh key each)" in describe(CorpusConfig)


def test_the_cli_stops_before_any_work_naming_what_is_wrong(tmp_path, capsys, monkeypatch):
    """A missing config, a key typo, a --previous that is no run, no relabel endpoint, a source matching no
    input, an option neither this command nor Beam defines, a runner Beam does not know: exit 2 with one line
    (no traceback), and no output folder."""
    from pipelines.corpus import main

    out = tmp_path / "out"
    typo = tmp_path / "typo.yaml"
    typo.write_text("run: {outptu: x}\n")
    plain = tmp_path / "plain.yaml"  # no relabel stage: the --previous check is what stops it
    plain.write_text(yaml.safe_dump({"clean": {"stages": [], "dedup": {"enabled": False}},
                                     "sources": [{"name": "s", "kind": "local_folder", "paths": [str(tmp_path)],
                                                  "license": "unknown"}]}))
    tab = tmp_path / "tab.yaml"  # a YAML syntax error: one line naming the file and line, no PyYAML traceback
    tab.write_text("run:\n\toutput: x\n")
    nothing = tmp_path / "nothing.yaml"  # a source whose paths match no file
    nothing.write_text(yaml.safe_dump({"clean": {"stages": [], "dedup": {"enabled": False}},
                                       "sources": [{"name": "pdfs", "kind": "local_folder", "license": "unknown",
                                                    "paths": [str(tmp_path / "no" / "such" / "*.pdf")]}]}))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    cases = [
        (["--config", str(tmp_path / "none.yaml")], "No such file or directory"),
        (["--config", str(typo)], "run.outptu: unknown key"),
        (["--config", str(tab)], f"{tab}: line 2, column 1: found character"),
        (["--config", str(plain), "--max-dead-letter-rate", "nan"], "run.max_dead_letter_rate: expected a finite"),
        (["--config", str(plain), "--previous", str(tmp_path / "nothing")], "no refresh/units.parquet"),
        (["--config", str(DEFAULT_CONFIG)], "relabel: no endpoint"),  # the bundled config relabels
        (["--config", str(nothing)], "source 'pdfs': no input matches"),
        # a Beam option typo: the local runner would ignore it and run with one worker per core
        (["--config", str(plain), "--direct_num_worker=1"], "--direct_num_worker (did you mean --direct_num_workers?)"),
        (["--config", str(plain), "--runner=DaskRunnr"], "Unexpected pipeline runner: DaskRunnr"),
    ]
    import tempfile

    temp = Path(tempfile.gettempdir())
    before = set(temp.glob("beam-pipeline-temp*"))
    for args, message in cases:
        assert main([*args, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("pipelines.corpus: ") and message in err and "Traceback" not in err
        assert not out.exists()
    assert set(temp.glob("beam-pipeline-temp*")) == before  # the graph that failed to build left no folder


def test_a_yaml_syntax_error_or_a_key_given_twice_names_the_file_and_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("run:\n\toutput: x\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: line 2, column 1: found character '\\t' that cannot start"):
        load_config(config)
    config.write_text("run:\n  output: a\n  output: b\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: output: key given twice \(lines 2 and 3\)$"):
        load_config(config)


@pytest.mark.parametrize("text", ["run:\nrender:\n", "run:\n  # output: x\n"])
def test_a_section_left_empty_takes_its_defaults_under_overrides_too(tmp_path, text):
    config = tmp_path / "c.yaml"
    config.write_text(text + yaml.safe_dump({"sources": [source_entry("local_folder")]}))
    cfg = load_config(config, {"run": {"output": "elsewhere"}, "render": {}})
    assert cfg.run.output == "elsewhere" and cfg.run.max_dead_letter_rate == 0.5


def test_a_section_that_is_not_a_mapping_fails_under_overrides(tmp_path):
    config = write(tmp_path, {"run": [1], "sources": [source_entry("local_folder")]})
    with pytest.raises(ConfigError, match=r"^run: expected a mapping, got list \[1\]$"):
        load_config(config, {"run": {"output": "x"}})


@pytest.mark.parametrize("rate, message", [
    (float("nan"), "run.max_dead_letter_rate: expected a finite float, got float nan"),
    (float("inf"), "run.max_dead_letter_rate: expected a finite float, got float inf"),
    (1.5, "run: max_dead_letter_rate: must be in [0, 1], got 1.5"),
    (-0.1, "run: max_dead_letter_rate: must be in [0, 1], got -0.1"),
])
def test_the_dead_letter_rate_is_a_finite_share(tmp_path, rate, message):
    # rate > nan is False: a NaN limit would switch the dead-letter gate off
    config = write(tmp_path, {"sources": [source_entry("local_folder")]})
    with pytest.raises(ConfigError) as err:
        load_config(config, {"run": {"max_dead_letter_rate": rate}})
    assert str(err.value) == message
    assert load_config(config, {"run": {"max_dead_letter_rate": 1}}).run.max_dead_letter_rate == 1.0


@pytest.mark.parametrize("codec, ok", [("zstd", True), ("ZSTD", True), ("none", True), ("snappy", True),
                                       ("zstdd", False), ("bz2", False)])  # bz2: an Arrow codec, not a Parquet one
def test_the_compression_codec_is_checked_at_load(tmp_path, codec, ok):
    raw = {"write": {"compression": codec}, "sources": [source_entry("local_folder")]}
    if ok:
        assert load_config(write(tmp_path, raw)).write.compression == codec
    else:
        assert load_error(tmp_path, raw) == (f"write: compression: unknown or unavailable Parquet codec {codec!r}; "
                                             "known: none, snappy, gzip, brotli, lz4, lz4_raw, zstd")


def test_a_config_without_sources_fails(tmp_path):
    message = "sources: no sources configured; add at least one entry {name, kind, paths, license}"
    assert load_error(tmp_path, {}) == message
    assert load_error(tmp_path, {"sources": []}) == message


@pytest.mark.parametrize("clean, path", [
    ({"stages": [{"name": "conventions"}, {"name": "relabel", "sources": ["train", "trian"]}]}, "clean.stages[1]"),
    ({"stages": [{"name": "audit", "sources": ["trian"]}]}, "clean.stages[0]"),
    ({"stages": [{"name": "preference", "sources": ["trian"]}]}, "clean.stages[0]"),
    ({"stages": [{"name": "instruct", "assign": {"trian": "plain"}}]}, "clean.stages[0]"),
    ({"stages": [], "dedup": {"source_priority": {"train": 2, "trian": 1}}}, "clean.dedup.source_priority"),
])
def test_source_names_in_stage_options_and_dedup_priority_are_checked(tmp_path, clean, path):
    sources = [{**source_entry("local_folder"), "name": name} for name in ("train", "eval")]
    assert load_error(tmp_path, {"clean": clean, "sources": sources}) == \
        f"{path}: unknown sources ['trian']; known: train, eval"
    fixed = yaml.safe_load(yaml.safe_dump(clean).replace("trian", "eval"))
    load_config(write(tmp_path, {"clean": fixed, "sources": sources}))
