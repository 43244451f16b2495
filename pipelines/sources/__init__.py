"""Corpus readers, one module per published layout. ``build_source`` maps a config ``kind`` to one.

Each reader class declares the keys of its ``options:`` mapping as a frozen dataclass ``Options``
(``source_options_type(kind)``), which ``pipelines.config.load_config`` checks at start-up.
"""

from __future__ import annotations

import importlib

from pipelines.sources.base import Row, Source, SourcePage, SourceSettings
from schemas.config import ConfigError

# kind -> "module:Class"; imported lazily so a worker only imports the readers it runs.
SOURCE_KINDS = {
    "olmocr_mix": "pipelines.sources.olmocr_mix:OlmOcrMixSource",
    "olmocr_mix_0225": "pipelines.sources.olmocr_mix:OlmOcrMix0225Source",
    "olmocr_train_dir": "pipelines.sources.olmocr_mix:OlmOcrTrainDirSource",
    "finepdfs": "pipelines.sources.finepdfs:FinePdfsSource",
    "nara": "pipelines.sources.historical:NaraSource",
    "loc": "pipelines.sources.historical:LocSource",
    "historical": "pipelines.sources.historical:MappedHistoricalSource",
    "local_folder": "pipelines.sources.local_folder:LocalFolderSource",
    "jinaocrsynth": "pipelines.sources.synth:SynthSource",
    "olmocr_synthmix": "pipelines.sources.synthmix:OlmOcrSynthmixSource",
    "formula_lines": "pipelines.sources.formula_lines:FormulaLinesSource",
    "mmtab": "pipelines.sources.mmtab:MmtabSource",
    "synthchartnet": "pipelines.sources.elements:SynthChartNetSource",
    "commonforms": "pipelines.sources.elements:CommonFormsSource",
    "rvl_cdip": "pipelines.sources.elements:RvlCdipSource",
}


def source_class(kind: str, path: str = "source kind") -> type:
    """The reader class of ``kind``; ``ConfigError`` naming ``path`` and the known kinds when there is none."""
    try:
        module_name, class_name = SOURCE_KINDS[kind].split(":")
    except (KeyError, TypeError):
        raise ConfigError(f"{path}: unknown kind {kind!r}; known kinds: {', '.join(sorted(SOURCE_KINDS))}") from None
    return getattr(importlib.import_module(module_name), class_name)


def source_options_type(kind: str, path: str = "source kind") -> type:
    """The ``Options`` dataclass of source ``kind``: the keys its ``options:`` mapping may hold."""
    return source_class(kind, path).Options


def build_source(settings: SourceSettings) -> Source:
    return source_class(settings.kind, f"source {settings.name!r}: kind")(settings)


__all__ = ["Row", "Source", "SourcePage", "SourceSettings", "SOURCE_KINDS", "build_source", "source_class",
           "source_options_type"]
