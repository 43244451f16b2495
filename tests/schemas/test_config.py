"""The one config loader: unknown keys, types, nesting, overrides and help, by path."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import pytest
import yaml

from schemas.config import ConfigError, describe, load, merge, option, parse_sets, parse_yaml, read_yaml, to_dict


@dataclass(frozen=True)
class Inner:
    size: int = option(3, help="how many")
    ratio: float = option(0.5, help="a share")


@dataclass(frozen=True)
class Outer:
    name: str = option(help="required name")
    mode: Literal["fast", "slow"] = option("fast", help="speed")
    inner: Inner = option(default_factory=Inner, help="nested block")
    tags: tuple[str, ...] = option((), help="labels")
    limit: int | None = option(None, help="optional cap")
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Floats:
    cap: float | None = option(1.0, help="an optional limit")
    weights: dict[str, float] = option({}, help="name -> weight")


def test_load_converts_lists_nested_and_optional():
    cfg = load(Outer, {"name": "a", "inner": {"size": 7, "ratio": 1}, "tags": ["x", "y"], "limit": 4})
    assert cfg == Outer(name="a", inner=Inner(size=7, ratio=1.0), tags=("x", "y"), limit=4)
    assert isinstance(cfg.inner.ratio, float)


def test_unknown_key_names_full_path_and_known_keys():
    with pytest.raises(ConfigError) as err:
        load(Outer, {"name": "a", "inner": {"sise": 7}}, "train.grpo")
    assert str(err.value) == "train.grpo.inner.sise: unknown key; known keys: ratio, size"


@pytest.mark.parametrize("values, message", [
    ({"name": 3}, "cfg.name: expected str, got int 3"),
    ({"name": "a", "inner": {"size": "7"}}, "cfg.inner.size: expected int, got str '7'"),
    ({"name": "a", "inner": {"size": True}}, "cfg.inner.size: expected int, got bool True"),
    ({"name": "a", "mode": "medium"}, "cfg.mode: expected one of 'fast', 'slow', got str 'medium'"),
    ({"name": "a", "tags": "x"}, "cfg.tags: expected a list, got str 'x'"),
    ({"name": "a", "tags": ["x", 2]}, "cfg.tags[1]: expected str, got int 2"),
    ({"name": "a", "inner": 5}, "cfg.inner: expected a mapping of Inner keys, got int 5"),
    ({}, "cfg.name: required key is missing (required name)"),
])
def test_type_errors_name_path_expected_and_value(values, message):
    with pytest.raises(ConfigError) as err:
        load(Outer, values, "cfg")
    assert str(err.value) == message


def test_parse_sets_and_merge_patch_nested_keys():
    sets = parse_sets(["inner.size=9", "tags=[a, b]", "name=x"])
    assert sets == {"inner": {"size": 9}, "tags": ["a", "b"], "name": "x"}
    merged = merge({"name": "y", "inner": {"ratio": 0.1}}, sets)
    assert load(Outer, merged) == Outer(name="x", inner=Inner(size=9, ratio=0.1), tags=("a", "b"))
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_sets(["novalue"])


def test_describe_lists_every_field_with_help_and_round_trips():
    lines = describe(Outer)
    assert "inner.size (int, default 3): how many" in lines
    assert "mode (Literal['fast', 'slow'], default 'fast'): speed" in lines
    assert any(line.startswith("name (str, default required): required name") for line in lines)
    cfg = load(Outer, {"name": "a", "tags": ["t"]})
    assert load(Outer, to_dict(cfg)) == cfg


@dataclass(frozen=True)
class Abstract:
    weights: Mapping[str, float] = option(default_factory=dict, help="abstract mapping")
    names: Sequence[str] = option((), help="abstract sequence")


def test_abstract_mapping_and_sequence_annotations_are_checked():
    assert load(Abstract, {"weights": {"a": 1}, "names": ["x"]}) == Abstract(weights={"a": 1.0}, names=("x",))
    with pytest.raises(ConfigError, match=r"^cfg.weights.a: expected float, got str 'heavy'$"):
        load(Abstract, {"weights": {"a": "heavy"}}, "cfg")
    with pytest.raises(ConfigError, match=r"^cfg.names: expected a list, got str 'x'$"):
        load(Abstract, {"names": "x"}, "cfg")


def test_a_yaml_syntax_error_is_a_config_error_naming_the_file_or_the_set_item_and_the_line(tmp_path):
    tab = tmp_path / "tab.yaml"
    tab.write_text("run:\n\toutput: x\n")  # a tab cannot indent YAML
    with pytest.raises(ConfigError) as err:
        read_yaml(tab)
    assert str(err.value) == (f"{tab}: line 2, column 1: found character '\\t' that cannot start any token "
                              "(while scanning for the next token)")
    with pytest.raises(ConfigError) as err:
        parse_sets(["tags=[1,"])
    assert str(err.value).startswith("--set 'tags=[1,': line 1, column 4: ") and "\n" not in str(err.value)


def test_a_key_given_twice_fails_naming_it_and_both_lines(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("grpo:\n  steps: 7\n  lr: 1.0e-4\nseed: 0\ngrpo:\n  temperature: 0.5\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(dup)
    assert str(err.value) == f"{dup}: grpo: key given twice (lines 1 and 5)"
    with pytest.raises(ConfigError, match=r"^x: output: key given twice \(lines 2 and 3\)$"):
        parse_yaml("run:\n  output: a\n  output: b\n", "x")
    with pytest.raises(ConfigError, match=r"^--set 'inner=\{size: 1, size: 2\}': size: key given twice"):
        parse_sets(["inner={size: 1, size: 2}"])
    # a YAML merge key is not a duplicate: the mapping's own key overrides the merged one, as YAML says
    assert parse_yaml("base: &b {size: 1, ratio: 0.1}\ninner:\n  <<: *b\n  size: 2\n", "x")["inner"] == \
        {"size": 2, "ratio": 0.1}


def test_floats_are_read_as_yaml_1_2_without_a_dot_too(tmp_path):
    assert parse_sets(["inner.ratio=1e-4", "limit=12", "name=1e", "tags=[5E3, 1.0e4, -2e+3, .5, 1_000]"]) == \
        {"inner": {"ratio": 0.0001}, "limit": 12, "name": "1e", "tags": [5000.0, 10000.0, -2000.0, 0.5, 1000]}
    config = tmp_path / "sci.yaml"
    config.write_text("name: a\ninner: {ratio: 5e-4}\n")
    assert load(Outer, read_yaml(config)).inner.ratio == 0.0005
    assert yaml.safe_load("x: 1e-4") == {"x": "1e-4"}  # PyYAML's own loader is left as it is


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400], ids=["nan", "inf", "-inf", "10**400"])
def test_a_float_must_be_finite(value):
    with pytest.raises(ConfigError, match=r"^cfg\.inner\.ratio: expected a finite float, got "):
        load(Outer, {"name": "a", "inner": {"ratio": value}}, "cfg")
    with pytest.raises(ConfigError, match=r"^cfg\.weights\.x: expected a finite float"):
        load(Floats, {"weights": {"x": value}}, "cfg")
    with pytest.raises(ConfigError, match=r"^cfg\.cap: expected a finite float"):
        load(Floats, {"cap": value}, "cfg")
    assert load(Floats, {"cap": None, "weights": {"x": 2}}) == Floats(cap=None, weights={"x": 2.0})


def test_nan_and_inf_written_in_yaml_are_refused_too():
    with pytest.raises(ConfigError, match=r"^cfg\.inner\.ratio: expected a finite float, got float nan"):
        load(Outer, merge({"name": "a"}, parse_sets(["inner.ratio=.nan"])), "cfg")
    with pytest.raises(ConfigError, match=r"^cfg\.cap: expected a finite float, got float inf"):
        load(Floats, parse_yaml("cap: .inf", "x"), "cfg")


def test_bounded_arg_is_the_one_argparse_range_type():
    import argparse

    from schemas.config import bounded_arg

    fraction = bounded_arg(float, 0.0, 1.0, "a number in [0, 1]")
    assert fraction("0.25") == 0.25 and fraction("1") == 1.0
    for bad, message in (("1.5", r"1.5 is not a number in \[0, 1\]"), ("nan", "nan is not"), ("x", "'x' is not")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            fraction(bad)
    assert bounded_arg(int, 0, None, "a count")("7") == 7
