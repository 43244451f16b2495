"""Per-record stages by name (cleaning, and the optional ``augment`` degradations), built from the ``clean.stages`` list of the config.

Each entry of ``clean.stages`` is ``{name: <stage>, <option>: <value>, ...}``; the options are
the fields of the stage's config dataclass (the annotated first argument of its constructor), so
a typo is rejected by name at start-up.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from typing import Any, Callable

STAGES = {
    "conventions": "pipelines.clean.conventions:LabelConventions",
    "repeats": "pipelines.clean.repeats:RepeatFilter",
    "short": "pipelines.clean.short:ShortSampleFilter",
    "decontam": "pipelines.clean.decontam:Decontaminate",
    # robustness degradations (Jina 5.2); off by default, seeded per record id
    "augment": "synth.augment:DegradeStage",
}


def stage_class(name: str) -> type:
    try:
        module_name, class_name = STAGES[name].split(":")
    except KeyError:
        raise ValueError(f"clean stage {name!r} is unknown; known: {sorted(STAGES)}") from None
    return getattr(importlib.import_module(module_name), class_name)


def build_stage(spec: dict[str, Any]) -> Callable:
    """The stage named by ``spec["name"]``, configured by the rest of ``spec``."""
    options = {k: v for k, v in spec.items() if k != "name"}
    cls = stage_class(spec["name"])
    params = [p for p in typing.get_type_hints(cls.__init__).items() if p[0] != "return"]
    if not params:
        if options:
            raise ValueError(f"clean stage {spec['name']!r} takes no options, got {sorted(options)}")
        return cls()
    config_type = params[0][1]
    if typing.get_origin(config_type) is typing.Union:  # Optional[Config]
        config_type = next(t for t in typing.get_args(config_type) if t is not type(None))
    known = {f.name for f in dataclasses.fields(config_type)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"clean stage {spec['name']!r}: unknown options {unknown}; known: {sorted(known)}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return cls(config_type(**values))
