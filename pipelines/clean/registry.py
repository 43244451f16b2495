"""Per-record stages by name (cleaning, and the optional ``augment`` degradations), built from the ``clean.stages`` list of the config.

Each entry of ``clean.stages`` is ``{name: <stage>, <option>: <value>, ...}``; the options are
the fields of the stage's config dataclass (the annotated first argument of its constructor), so
a typo is rejected by name at start-up.
"""

from __future__ import annotations

import importlib
import types
import typing
from typing import Any, Callable

from schemas.config import ConfigError, load

STAGES = {
    "conventions": "pipelines.clean.conventions:ConventionsStage",
    "repeats": "pipelines.clean.repeats:RepeatsStage",
    "short": "pipelines.clean.short:ShortStage",
    "decontam": "pipelines.clean.decontam:DecontamStage",
    # robustness degradations (Jina 5.2); off by default, seeded per record id
    "augment": "synth.augment:AugmentStage",
}


def stage_class(name: str) -> type:
    try:
        module_name, class_name = STAGES[name].split(":")
    except KeyError:
        raise ConfigError(f"clean stage {name!r} is unknown; known: {', '.join(sorted(STAGES))}") from None
    return getattr(importlib.import_module(module_name), class_name)


def stage_config_type(name: str) -> type | None:
    """The config dataclass of stage ``name`` (the annotated first argument of its constructor), or None."""
    cls = stage_class(name)
    params = [p for p in typing.get_type_hints(cls.__init__).items() if p[0] != "return"]
    if not params:
        return None
    config_type = params[0][1]
    if typing.get_origin(config_type) in (typing.Union, types.UnionType):  # Optional[Config]
        config_type = next(t for t in typing.get_args(config_type) if t is not type(None))
    return config_type


def build_stage(spec: dict[str, Any], path: str = "clean.stages[?]") -> Callable:
    """The stage named by ``spec["name"]``, configured by the rest of ``spec`` through ``schemas.config.load``."""
    options = {k: v for k, v in spec.items() if k != "name"}
    if "name" not in spec:
        raise ConfigError(f"{path}: each stage is a mapping with a 'name'; known: {', '.join(sorted(STAGES))}")
    cls = stage_class(spec["name"])
    config_type = stage_config_type(spec["name"])
    if config_type is None:
        if options:
            raise ConfigError(f"{path}: stage {spec['name']!r} takes no options, got {sorted(options)}")
        return cls()
    return cls(load(config_type, options, path))
