"""Corpus readers, one module per published layout. ``build_source`` maps a config ``kind`` to one."""

from __future__ import annotations

import importlib

from pipelines.sources.base import Row, Source, SourcePage, SourceSettings

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
}


def build_source(settings: SourceSettings) -> Source:
    try:
        target = SOURCE_KINDS[settings.kind]
    except KeyError:
        raise ValueError(
            f"source {settings.name!r}: unknown kind {settings.kind!r}; known: {sorted(SOURCE_KINDS)}"
        ) from None
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(settings)


__all__ = ["Row", "Source", "SourcePage", "SourceSettings", "SOURCE_KINDS", "build_source"]
