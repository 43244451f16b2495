"""Shared fixtures: sample inputs built fresh under a temporary folder (helpers: ``tests/helpers.py``)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def serve_overlays(tmp_path_factory) -> Path:
    """The local VLM server's prepared checkpoint copies (``relabel.serve.OVERLAY_ENV``) go under this
    session's temporary folder, for the servers the tests start and the CLIs they run: the tests'
    checkpoint has a new path each session, so in the system's temporary folder each run would add one."""
    from relabel.serve import OVERLAY_ENV

    folder = tmp_path_factory.mktemp("serve-overlays")
    previous = os.environ.get(OVERLAY_ENV)
    os.environ[OVERLAY_ENV] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop(OVERLAY_ENV, None)
    else:
        os.environ[OVERLAY_ENV] = previous


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

