"""Per-record stages by name (cleaning, and the optional ``augment`` degradations), from ``clean.stages``.

Each entry of ``clean.stages`` is ``{name: <stage>, <option>: <value>, ...}``; the options are
the fields of the stage's config dataclass (the annotated first argument of its constructor), loaded
through ``schemas.config.load``, so a typo is rejected by its path at start-up
(``pipelines.config.load_config`` checks every entry with ``stage_config`` before any work).
"""

from __future__ import annotations

import importlib
import types
import typing
from typing import Any, Callable, Mapping

from schemas.config import ConfigError, load

STAGES = {
    "conventions": "pipelines.clean.conventions:ConventionsStage",
    "repeats": "pipelines.clean.repeats:RepeatsStage",
    "short": "pipelines.clean.short:ShortStage",
    "decontam": "pipelines.clean.decontam:DecontamStage",
    "formula_render": "pipelines.clean.formula_render:FormulaRenderStage",
    # robustness degradations (Jina 5.2); off by default, seeded per record id
    "augment": "synth.augment:AugmentStage",
    # VLM relabel, audit and preference pairs over an OpenAI-compatible endpoint (relabel/, docs/relabel.md)
    "relabel": "pipelines.relabel_stages:RelabelStage",
    "audit": "pipelines.relabel_stages:AuditStage",
    "preference": "pipelines.relabel_stages:PreferenceStage",
    # prompts, response conventions and derived task records (Jina 4.3); put it last
    "instruct": "pipelines.instruct.stage:InstructStage",
}


def stage_class(name: str, path: str = "clean stage") -> type:
    try:
        module_name, class_name = STAGES[name].split(":")
    except (KeyError, TypeError):
        raise ConfigError(f"{path}: unknown stage {name!r}; known stages: {', '.join(sorted(STAGES))}") from None
    return getattr(importlib.import_module(module_name), class_name)


def stage_config_type(name: str, path: str = "clean stage") -> type | None:
    """The config dataclass of stage ``name`` (the annotated first argument of its constructor), or None."""
    cls = stage_class(name, path)
    params = [p for p in typing.get_type_hints(cls.__init__).items() if p[0] != "return"]
    if not params:
        return None
    config_type = params[0][1]
    if typing.get_origin(config_type) in (typing.Union, types.UnionType):  # Optional[Config]
        config_type = next(t for t in typing.get_args(config_type) if t is not type(None))
    return config_type


def stage_config(spec: Mapping[str, Any], path: str = "clean.stages[?]") -> Any:
    """The loaded config of the stage ``spec`` names (None for a stage without options), without building
    the stage: unknown names, unknown options and wrong types fail naming ``path``."""
    if not isinstance(spec, Mapping) or "name" not in spec:
        raise ConfigError(f"{path}: each stage is a mapping with a 'name'; known stages: {', '.join(sorted(STAGES))}")
    options = {k: v for k, v in spec.items() if k != "name"}
    config_type = stage_config_type(spec["name"], f"{path}.name")
    if config_type is None:
        if options:
            raise ConfigError(f"{path}: stage {spec['name']!r} takes no options, got {sorted(options)}")
        return None
    return load(config_type, options, path)


def build_stage(spec: Mapping[str, Any], path: str = "clean.stages[?]") -> Callable:
    """The stage named by ``spec["name"]``, configured by the rest of ``spec`` through ``schemas.config.load``."""
    config = stage_config(spec, path)
    cls = stage_class(spec["name"], f"{path}.name")
    return cls() if config is None else cls(config)
