"""local_folder: files that are not regular files (a FIFO named page.pdf) are dead-lettered, never opened.

Opening a FIFO blocks until a writer comes, so every check runs in a child process with a timeout: the
timeout only keeps a regression from hanging the test run, it is not what the tests assert.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from samples.make.pdfs import text_pdf

REPO = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 120

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")

# Plans the folder as a corpus run does (parts, then plan per part), describes each unit for refresh (which
# hashes the unit's files), reads every unit, and prints what came out.
_CHILD = r"""
import json, sys
import os
from pipelines.io import content_id
from pipelines.refresh import describe_unit
from pipelines.sources.base import SourceSettings
from pipelines.sources.local_folder import LocalFolderSource

folder = sys.argv[1]
settings = SourceSettings(name="local", kind="local_folder", paths=(folder,), instruction="Read the page.",
                          domain="office", license="cc-by-4.0", language="en", options={})
source = LocalFolderSource(settings)
units = [u for part in source.parts(folder) for u in source.plan(part)]
assert units == list(source.plan(folder)), "plan(folder) and plan(part) disagree"
digests = {}
for unit in units:
    describe_unit(settings, unit, {})
    digests[unit.rel] = content_id(os.path.join(folder, unit.rel))
rows = {}
for unit in units:
    for row in source.read(unit):
        rows[row.source_id] = {"pages": len(row.pages), "reason": row.error.reason if row.error else None,
                               "message": str(row.error) if row.error else None}
print(json.dumps({"units": [u.rel for u in units], "digests": digests, "rows": rows}))
"""


def _run(folder: Path) -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(folder)], cwd=REPO, capture_output=True,
                              text=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the reader blocked on a special file (no result after {HANG_GUARD_S}s)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_fifo_named_like_a_pdf_is_dead_lettered_not_opened(tmp_path: Path) -> None:
    (tmp_path / "good.pdf").write_bytes(text_pdf([["One."], ["Two."]]))
    os.mkfifo(tmp_path / "page.pdf")
    os.mkdir(tmp_path / "scans")
    os.mkfifo(tmp_path / "scans" / "pipe.png")
    out = _run(tmp_path)
    # planned (accounted for), one unit each, nothing read at planning
    assert out["units"] == ["good.pdf", "page.pdf", "scans/pipe.png"]
    # refresh hashes a regular file as usual and takes a fixed digest for a FIFO, never opening it (pipelines.io)
    assert len(out["digests"].pop("good.pdf")) == 64
    assert out["digests"] == {"page.pdf": "not a regular file: FIFO", "scans/pipe.png": "not a regular file: FIFO"}
    rows = out["rows"]
    assert rows["good.pdf"] == {"pages": 2, "reason": None, "message": None}
    for rel in ("page.pdf", "scans/pipe.png"):
        assert rows[rel]["pages"] == 0 and rows[rel]["reason"] == "unsafe_path"
        assert rel in rows[rel]["message"] and "not a regular file (a FIFO)" in rows[rel]["message"]


def test_fifo_label_fails_its_files_row(tmp_path: Path) -> None:
    (tmp_path / "doc.pdf").write_bytes(text_pdf([["One."]]))
    os.mkfifo(tmp_path / "doc.md")  # a sidecar label that would block on open
    (tmp_path / "other.pdf").write_bytes(text_pdf([["Other."]]))
    (tmp_path / "other.md").write_text("Other.")
    rows = _run(tmp_path)["rows"]
    assert rows["doc.pdf"]["reason"] == "unsafe_path" and "doc.md is not a regular file" in rows["doc.pdf"]["message"]
    assert rows["other.pdf"] == {"pages": 1, "reason": None, "message": None}


def test_symlink_to_a_regular_file_inside_the_folder_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "real.pdf").write_bytes(text_pdf([["One."]]))
    os.symlink("real.pdf", tmp_path / "alias.pdf")
    rows = _run(tmp_path)["rows"]
    assert rows["alias.pdf"] == rows["real.pdf"] == {"pages": 1, "reason": None, "message": None}

