"""Shared fixtures: sample inputs built fresh under a temporary folder, and PDF makers."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def samples_root(tmp_path_factory) -> Path:
    """Every sample layout, built by the same builders as ``samples/`` (``python -m samples.make``)."""
    import importlib

    root = tmp_path_factory.mktemp("samples")
    for name in ("olmocr", "finepdfs", "historical", "local"):
        try:
            module = importlib.import_module(f"samples.make.{name}")
        except ModuleNotFoundError:
            continue
        module.build(root)
    return root


@pytest.fixture
def rng() -> random.Random:
    return random.Random(7)


def zero_page_pdf() -> bytes:
    """A syntactically valid PDF whose page tree is empty."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
