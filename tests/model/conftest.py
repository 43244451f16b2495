"""Fixtures for model/ tests."""

from __future__ import annotations

import random

import pytest

from tests.helpers import corpus_record, write_records


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> str:
    """40 short pages over three domains; enough for a few optimizer steps and an eval split."""
    layout = [("docs", "docs-a", 20), ("news", "news-a", 10), ("formula", "synth", 10)]
    records = [corpus_record(s, d, n) for d, s, k in layout for n in range(k)]
    random.Random(0).shuffle(records)
    return write_records(tmp_path_factory.mktemp("small_corpus"), records)
