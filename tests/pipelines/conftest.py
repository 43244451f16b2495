"""Fixtures of the pipelines tests: a small corpus run shared by the refresh and report tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import SMALL_CORPUS_SAMPLES, run_small_corpus


@pytest.fixture(scope="session")
def subset_samples(samples_root, tmp_path_factory) -> Path:
    """A private copy of the sample inputs of ``SMALL_CORPUS_SOURCES`` (tests copy it before changing it)."""
    copy = tmp_path_factory.mktemp("subset_run") / "samples"
    for name in SMALL_CORPUS_SAMPLES:
        shutil.copytree(samples_root / name, copy / name)
    return copy


@pytest.fixture(scope="session")
def subset_run(subset_samples, tmp_path_factory):
    """(manifest, output folder) of one full run over ``subset_samples``."""
    return run_small_corpus(subset_samples, tmp_path_factory.mktemp("small_corpus_run"))
