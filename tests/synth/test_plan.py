"""synth.plan: the pages a run makes, shared by ``python -m synth`` and the corpus source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from synth.plan import plan

REPO = Path(__file__).resolve().parents[2]


def test_plan_cycles_layouts_and_suites_with_seeded_ids():
    assert plan(9, 3, "all", "mixed") == [
        ("report", "layout", 3000009, "synth-layout-report-s3-00000"),
        ("paper", "formula", 3000010, "synth-formula-paper-s3-00001"),
        ("newspaper", "table", 3000011, "synth-table-newspaper-s3-00002"),
        ("invoice", "layout", 3000012, "synth-layout-invoice-zh-s3-00003"),
        ("form", "formula", 3000013, "synth-formula-form-s3-00004"),
        ("slides", "table", 3000014, "synth-table-slides-s3-00005"),
        ("blog", "layout", 3000015, "synth-layout-blog-s3-00006"),
        ("infographic", "formula", 3000016, "synth-formula-infographic-zh-s3-00007"),
        ("report", "table", 3000017, "synth-table-report-s3-00008"),
    ]
    assert plan(2, 0, "table") == [("report", "table", 0, "synth-table-report-s0-00000"),
                                   ("paper", "table", 1, "synth-table-paper-s0-00001")]
    # LaTeX runs plan the same pages under ids of their own
    assert plan(2, 0, "table", renderer="latex") == [("report", "table", 0, "synth-latex-table-report-s0-00000"),
                                                     ("paper", "table", 1, "synth-latex-table-paper-s0-00001")]


def test_planning_needs_no_renderer():
    """Planning (the CLI, the corpus source, the contact sheet) imports no renderer: no Chromium, no LaTeX."""
    code = "import sys, synth.plan; print(sorted(m for m in sys.modules if m.startswith(('synth', 'playwright'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout
    assert out.strip() == "['synth', 'synth.blocks', 'synth.plan', 'synth.themes']"
