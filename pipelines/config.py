"""The corpus pipeline's configuration: frozen dataclasses with defaults in code, loaded from YAML.

``configs/corpus.yaml`` is the embedded default (the bundled ``samples/``). Unknown keys are
rejected with their path named, so a typo fails at start-up rather than silently doing nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.render import RenderConfig
from pipelines.sources.base import SourceSettings
from pipelines.write import WriteConfig
from schemas.prompts import default_instruction

# Source options that name files; relative values are resolved like ``paths``.
PATH_OPTIONS = ("root", "warc_root", "mirror", "cache_dir", "tarballs")
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "corpus.yaml"


@dataclass(frozen=True)
class RunConfig:
    output: str = "out/corpus"
    max_dead_letter_rate: float = 0.5  # fail the run when more than this share of inputs is dead-lettered
    progress_every: int = 25  # pages between progress lines per worker; 0 disables
    beam_args: tuple[str, ...] = (
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=0",
    )


def _default_clean_stages() -> tuple[dict[str, Any], ...]:
    return ({"name": "conventions"}, {"name": "repeats"}, {"name": "short"})


@dataclass(frozen=True)
class CleanConfig:
    """Cleaning: per-record stages in order (each ``{name, ...options}``, see
    ``pipelines/clean/registry.py``), the dedup grouping stage, and how many dropped records to
    keep per stage and reason under ``dropped/`` for inspection (0: none)."""

    stages: tuple[dict[str, Any], ...] = field(default_factory=_default_clean_stages)
    dedup: dict[str, Any] = field(default_factory=lambda: {"enabled": True})
    save_dropped: int = 20


@dataclass(frozen=True)
class CorpusConfig:
    run: RunConfig = field(default_factory=RunConfig)
    render: RenderConfig = field(default_factory=RenderConfig)
    write: WriteConfig = field(default_factory=WriteConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    sources: tuple[SourceSettings, ...] = ()


def _build(cls, values: dict[str, Any], where: str):
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            value = values[f.name]
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**kwargs)


def _source(values: dict[str, Any], index: int) -> SourceSettings:
    where = f"sources[{index}]"
    for key in ("name", "kind", "paths"):
        if key not in values:
            raise ValueError(f"{where}: missing required key {key!r}")
    values = dict(values)
    if isinstance(values["paths"], str):
        values["paths"] = [values["paths"]]
    values.setdefault("domain", "documents")
    values.setdefault("license", "unknown")
    values.setdefault("instruction", default_instruction(values.get("task", "parse_page"), values.get("instruction_language", "en")))
    values.pop("instruction_language", None)
    values["options"] = dict(values.get("options") or {})
    return _build(SourceSettings, values, where)


def _clean(values: dict[str, Any], base: Path) -> CleanConfig:
    cfg = _build(CleanConfig, values, "clean")
    stages = []
    for i, spec in enumerate(cfg.stages):
        if not isinstance(spec, dict) or "name" not in spec:
            raise ValueError(f"clean.stages[{i}]: each stage is a mapping with a 'name'")
        spec = dict(spec)
        for key in ("folder", "tokenizer_path"):  # paths relative to the repository, like source paths
            if isinstance(spec.get(key), str) and "://" not in spec[key] and not Path(spec[key]).is_absolute():
                spec[key] = str(base / spec[key])
        stages.append(spec)
    return dataclasses.replace(cfg, stages=tuple(stages), dedup=dict(cfg.dedup))


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> CorpusConfig:
    """Load a YAML config (default: ``configs/corpus.yaml``); ``overrides`` patch top-level sections."""
    path = Path(path) if path else DEFAULT_CONFIG
    raw = yaml.safe_load(path.read_text()) or {}
    for section, values in (overrides or {}).items():
        raw.setdefault(section, {}).update(values)
    unknown = sorted(set(raw) - {"run", "render", "write", "clean", "sources"})
    if unknown:
        raise ValueError(f"{path}: unknown sections {unknown}")
    base = path.parent.parent if path.parent.name == "configs" else path.parent
    sources = []
    for i, values in enumerate(raw.get("sources") or []):
        settings = _source(values, i)
        # relative input paths are relative to the repository (the config's parent folder)
        resolve = lambda p: p if "://" in p or Path(p).is_absolute() else str(base / p)  # noqa: E731
        paths = tuple(resolve(p) for p in settings.paths)
        options = {k: resolve(v) if k in PATH_OPTIONS and isinstance(v, str) else v
                   for k, v in settings.options.items()}
        sources.append(dataclasses.replace(settings, paths=paths, options=options))
    names = [s.name for s in sources]
    if len(names) != len(set(names)):
        raise ValueError(f"{path}: source names must be unique, got {names}")
    return CorpusConfig(
        run=_build(RunConfig, raw.get("run") or {}, "run"),
        render=_build(RenderConfig, raw.get("render") or {}, "render"),
        write=_build(WriteConfig, raw.get("write") or {}, "write"),
        clean=_clean(raw.get("clean") or {}, base),
        sources=tuple(sources),
    )
