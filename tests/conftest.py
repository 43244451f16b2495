"""Shared fixtures: sample inputs built fresh under a temporary folder (helpers: ``tests/helpers.py``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def samples_root(tmp_path_factory) -> Path:
    """Every sample layout, built by the same builders as ``samples/`` (``python -m samples.make``)."""
    import importlib

    root = tmp_path_factory.mktemp("samples")
    for name in ("olmocr", "finepdfs", "historical", "local", "elements"):
        try:
            module = importlib.import_module(f"samples.make.{name}")
        except ModuleNotFoundError:
            continue
        module.build(root)
    return root


@pytest.fixture
def rng() -> random.Random:
    return random.Random(7)

