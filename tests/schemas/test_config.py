"""The one config loader: unknown keys, types, nesting, overrides and help, by path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import pytest

from schemas.config import ConfigError, describe, load, merge, option, parse_sets, to_dict


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
