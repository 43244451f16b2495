"""The corpus pipeline's configuration: frozen dataclasses with defaults in code, loaded from YAML.

``configs/corpus.yaml`` is the embedded default (the bundled ``samples/``). ``load_config`` checks
the whole run before any work, through ``schemas.config.load``: every section, every
``clean.stages`` entry against its stage's config (without building the stage), ``clean.dedup``,
and every source's keys and its kind's ``options``. An unknown key or a wrong type fails naming
its path (``sources[2].options.warc_roott: unknown key; known keys: ...``). ``sources`` must name at least
one source, and the source names used in stage options (``sources`` of relabel/audit/preference, instruct's
``assign`` keys) and in ``clean.dedup.source_priority`` must be among them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pipelines.clean.dedup_config import DedupConfig
from pipelines.clean.registry import stage_config
from pipelines.render import RenderConfig
from pipelines.sources import source_options_type
from pipelines.sources.base import SourceSettings
from pipelines.write import WriteConfig
from schemas.config import ConfigError, check_names, load, option, read_yaml

# Source options that name files; relative values are resolved like ``paths``.
PATH_OPTIONS = ("root", "warc_root", "mirror", "cache_dir", "tarballs", "images")
# Clean-stage options that name files, resolved the same way.
STAGE_PATH_OPTIONS = ("folder", "tokenizer_path")
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "corpus.yaml"


@dataclass(frozen=True)
class RunConfig:
    """Where the run writes and how it runs."""

    output: str = option("out/corpus", help="output folder or gs:// / s3:// URI")
    max_dead_letter_rate: float = option(0.5, help="fail the run when more than this share of its records "
                                                   "(inputs and the pages or records stages fan out to) is "
                                                   "dead-lettered")
    progress_every: int = option(25, help="pages between progress lines per worker; 0 disables")
    beam_args: tuple[str, ...] = option(
        ("--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=0"),
        help="Apache Beam pipeline options")

    def __post_init__(self) -> None:
        if not 0 <= self.max_dead_letter_rate <= 1:  # a share; NaN is refused by the loader (finite floats)
            raise ValueError(f"max_dead_letter_rate: must be in [0, 1], got {self.max_dead_letter_rate}")


def _default_clean_stages() -> tuple[dict[str, Any], ...]:
    return ({"name": "conventions"}, {"name": "repeats"}, {"name": "short"})


@dataclass(frozen=True)
class CleanConfig:
    """Cleaning: the per-record stages in order, the dedup grouping stage, dropped samples kept."""

    stages: tuple[dict[str, Any], ...] = option(
        default_factory=_default_clean_stages,
        help="per-record stages in order, each {name, ...options} (pipelines/clean/registry.py); the options "
             "are the fields of the stage's config")
    dedup: DedupConfig = option(default_factory=DedupConfig, help="exact and near duplicates, after write")
    save_dropped: int = option(20, help="dropped records kept per stage and reason under dropped/ (0: none)")


@dataclass(frozen=True)
class CorpusConfig:
    """A whole corpus run (``configs/corpus.yaml``)."""

    run: RunConfig = option(default_factory=RunConfig, help="where the run writes and how it runs")
    render: RenderConfig = option(default_factory=RenderConfig, help="how pages become images")
    write: WriteConfig = option(default_factory=WriteConfig, help="shards and spill files")
    clean: CleanConfig = option(default_factory=CleanConfig, help="cleaning stages and dedup")
    sources: tuple[SourceSettings, ...] = option((), help="the inputs, one entry per source")


def _resolver(base: Path):
    """Relative input paths are relative to the repository (the config's parent folder)."""
    def resolve(p: str) -> str:
        return p if "://" in p or Path(p).is_absolute() else str(base / p)
    return resolve


def _source(values: Any, index: int, base: Path) -> SourceSettings:
    path = f"sources[{index}]"
    if isinstance(values, Mapping):  # YAML shorthands: one path as a string, an empty options key
        values = {**values, "paths": [values["paths"]]} if isinstance(values.get("paths"), str) else values
        values = {k: v for k, v in values.items() if not (k == "options" and v is None)}
    settings = load(SourceSettings, values, path)
    # checked here, before any work; readers load them again from the raw mapping
    load(source_options_type(settings.kind, f"{path}.kind"), settings.options, f"{path}.options")
    resolve = _resolver(base)
    options = {k: resolve(v) if k in PATH_OPTIONS and isinstance(v, str) else v for k, v in settings.options.items()}
    return dataclasses.replace(settings, paths=tuple(resolve(p) for p in settings.paths), options=options)


def _clean(cfg: CleanConfig, base: Path) -> CleanConfig:
    resolve = _resolver(base)
    stages = []
    for i, spec in enumerate(cfg.stages):
        stage_config(spec, f"clean.stages[{i}]")
        stages.append({k: resolve(v) if k in STAGE_PATH_OPTIONS and isinstance(v, str) else v
                       for k, v in spec.items()})
    return dataclasses.replace(cfg, stages=tuple(stages))


def _check_source_names(cfg: CleanConfig, source_names: list[str]) -> None:
    """The source names a stage (``sources`` of relabel, audit, preference; ``assign`` keys of instruct) and
    ``clean.dedup.source_priority`` use are among the config's sources: a misspelt one would match no record and
    switch its setting off silently."""
    named = {f"clean.stages[{i}]": [*(getattr(stage, "sources", None) or ()), *(getattr(stage, "assign", None) or {})]
             for i, stage in enumerate(stage_config(spec) for spec in cfg.stages)}
    named["clean.dedup.source_priority"] = [name for name, _ in cfg.dedup.source_priority]
    for path, names in named.items():
        try:
            check_names("sources", names, source_names)
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc}") from None


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> CorpusConfig:
    """Load a YAML config (default: ``configs/corpus.yaml``); ``overrides`` patch top-level sections."""
    # absolute: relative input paths are made absolute from the config's folder, never from the working
    # directory (a relative ``--config configs/x.yaml``, as the Airflow DAG passes, gave a base of ``.``);
    # not resolved, so a config reached through a symlink takes its paths from the link's folder
    path = Path(os.path.abspath(path)) if path else DEFAULT_CONFIG
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, got {type(raw).__name__}")
    for section, values in (overrides or {}).items():
        current = raw.get(section)
        if current is None:  # `run:` with every key commented out: the section's defaults
            current = {}
        if not isinstance(current, Mapping):
            raise ConfigError(f"{section}: expected a mapping, got {type(current).__name__} {current!r:.80}")
        raw[section] = {**current, **values}
    base = path.parent.parent if path.parent.name == "configs" else path.parent
    cfg = load(CorpusConfig, {k: v for k, v in raw.items() if k != "sources"}, "")
    cfg = dataclasses.replace(cfg, clean=_clean(cfg.clean, base))  # every stage's options checked
    entries = raw.get("sources") or []
    if not isinstance(entries, list):
        raise ConfigError(f"sources: expected a list of sources, got {type(entries).__name__}")
    sources = tuple(_source(values, i, base) for i, values in enumerate(entries))
    if not sources:  # the run would write an empty corpus and exit 0
        raise ConfigError("sources: no sources configured; add at least one entry {name, kind, paths, license}")
    names = [s.name for s in sources]
    if len(names) != len(set(names)):
        raise ConfigError(f"sources: source names must be unique, got {names}")
    _check_source_names(cfg.clean, names)
    return dataclasses.replace(cfg, sources=sources)


def drop_missing_source_names(raw: dict) -> dict:
    """``raw`` (a parsed corpus config cut to some of its sources, as tests and benchmarks cut the bundled
    one) without the names of the sources it left out in stage ``sources`` / ``assign`` and
    ``clean.dedup.source_priority``: ``load_config`` refuses an unknown name. A stage left with none of
    its sources is left out."""
    names = {s["name"] for s in raw["sources"]}
    stages = []
    for stage in raw["clean"].get("stages") or []:
        if stage.get("sources"):  # a stage left with none of its sources is left out (empty: every source)
            stage["sources"] = [n for n in stage["sources"] if n in names]
            if not stage["sources"]:
                continue
        stages.append(stage)
        if isinstance(stage.get("assign"), dict):
            stage["assign"] = {n: v for n, v in stage["assign"].items() if n in names}
    raw["clean"]["stages"] = stages
    dedup = raw["clean"].get("dedup") or {}
    if isinstance(dedup.get("source_priority"), dict):
        dedup["source_priority"] = {n: v for n, v in dedup["source_priority"].items() if n in names}
    return raw
