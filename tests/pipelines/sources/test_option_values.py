"""Source option values no record could be read with fail at start-up (``load_config``), by path, instead of
dead-lettering every record (a misspelt ``response_format``, ``batch_size: 0``) or making an empty run
(``pages: -3``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.config import load_config
from pipelines.sources import SOURCE_KINDS, source_options_type
from schemas.config import ConfigError, describe
from schemas.page import RESPONSE_FORMATS

REQUIRED_OPTIONS: dict[str, dict[str, Any]] = {
    "finepdfs": {"warc_root": "warc"},
    "historical": {"columns": {"text": "text", "image_bytes": "image"}},
}
KIND_TASKS = {"commonforms": "kie", "rvl_cdip": "kie", "formula_lines": "transcribe_formula",
              "mmtab": "transcribe_table", "synthchartnet": "chart_to_table"}
# option -> (a value out of its range, the smallest value in it)
RANGES: dict[str, tuple[Any, Any]] = {
    "batch_size": (0, 1), "pages": (-3, 1), "pages_per_unit": (-1, 0), "retries": (-1, 0), "max_bytes": (0, 1),
    "timeout_s": (0, 0.5), "http_retries": (-1, 0), "http_timeout_s": (-2.0, 0.5), "name_width": (-1, 0),
    "max_pdf_bytes": (0, 1),
}
MINIMUMS = {"pages_per_unit": {"jinaocrsynth": 1}}  # 0 is a local folder's "one unit per file"


def entry(kind: str, **options) -> dict[str, Any]:
    paths = ["synth://all"] if kind == "jinaocrsynth" else ["inputs/*.parquet"]
    e = {"name": f"{kind}-src", "kind": kind, "paths": paths, "options": {**REQUIRED_OPTIONS.get(kind, {}), **options}}
    return e | ({"task": KIND_TASKS[kind]} if kind in KIND_TASKS else {})


def load_sources(tmp_path: Path, *entries: dict[str, Any]):
    path = tmp_path / "configs" / "corpus.yaml"
    path.parent.mkdir(exist_ok=True)
    first = {**entry("local_folder"), "name": "first"}  # errors name the entry's index
    path.write_text(yaml.safe_dump({"sources": [first, *entries]}))
    return load_config(path)


def load_error(tmp_path: Path, *entries: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        load_sources(tmp_path, *entries)
    return str(err.value)


CASES = [(kind, f.name) for kind in sorted(SOURCE_KINDS) for f in dataclasses.fields(source_options_type(kind))
         if f.name in RANGES]


def test_every_numeric_option_with_a_range_is_covered():
    kinds = {kind for kind, _ in CASES}
    assert {"historical", "nara", "loc", "finepdfs", "jinaocrsynth", "local_folder", "formula_lines"} <= kinds
    assert ("historical", "batch_size") in CASES and ("finepdfs", "batch_size") in CASES
    assert ("jinaocrsynth", "pages") in CASES and ("nara", "retries") in CASES


@pytest.mark.parametrize("kind,name", CASES)
def test_an_option_out_of_its_range_fails_at_start_up_naming_the_source_and_the_key(tmp_path, kind, name):
    bad, _ = RANGES[name]
    low = MINIMUMS.get(name, {}).get(kind)
    if low is not None:
        bad = low - 1
    error = load_error(tmp_path, entry(kind, **{name: bad}))
    assert error.startswith(f"sources[1].options: {name} must be "), error
    assert f"got {bad!r}" in error


@pytest.mark.parametrize("kind,name", CASES)
def test_the_smallest_value_in_range_loads(tmp_path, kind, name):
    low = MINIMUMS.get(name, {}).get(kind, RANGES[name][1])
    (_, settings) = load_sources(tmp_path, entry(kind, **{name: low})).sources
    assert settings.options[name] == low


@pytest.mark.parametrize("name,value,known", [
    ("response_format", "latx", RESPONSE_FORMATS),
    ("text_origin", "human", ("machine_ocr", "human_transcription")),
])
def test_a_misspelt_historical_choice_fails_at_start_up_naming_the_known_ones(tmp_path, name, value, known):
    error = load_error(tmp_path, entry("historical", **{name: value}))
    assert error.startswith(f"sources[1].options.{name}: expected one of {', '.join(map(repr, known))}, got "), error
    assert repr(value) in error


@pytest.mark.parametrize("name,value", [("response_format", v) for v in RESPONSE_FORMATS]
                         + [("text_origin", "machine_ocr"), ("text_origin", "human_transcription")])
def test_every_documented_historical_choice_loads(tmp_path, name, value):
    (_, settings) = load_sources(tmp_path, entry("historical", **{name: value})).sources
    assert settings.options[name] == value


def test_the_historical_choices_are_listed_in_the_help():
    lines = "\n".join(describe(source_options_type("historical")))
    assert all(f in lines for f in RESPONSE_FORMATS) and "human_transcription" in lines


def test_a_reader_built_without_start_up_checks_refuses_the_value_too():
    from pipelines.sources import build_source
    from pipelines.sources.base import SourceSettings

    settings = SourceSettings(name="syn", kind="jinaocrsynth", paths=("synth://all",), options={"pages": -3})
    with pytest.raises(ConfigError, match=r"sources\[syn\]\.options: pages must be >= 1, got -3"):
        build_source(settings)
