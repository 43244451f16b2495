"""Quiet corpus runs: without ``--verbose`` a run prints progress lines and the summary, nothing of
Beam's own logging (workers' INFO lines, the apitools notice, relayed worker warnings)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from samples.make.pdfs import text_pdf
from schemas.manifest import RunManifest

REPO = Path(__file__).resolve().parents[2]
PROGRESS = re.compile(r"^\[\w+ pid \d+\] \d+ records, [\d.]+/s$")


def test_a_small_run_prints_only_progress_and_the_summary(tmp_path):
    folder = tmp_path / "pdfs"
    folder.mkdir()
    for i in range(3):
        (folder / f"doc{i}.pdf").write_bytes(text_pdf([[f"Document {i} page {j}."] for j in range(2)]))
    config = tmp_path / "small.yaml"
    config.write_text(json.dumps({
        "run": {"output": str(tmp_path / "out"), "progress_every": 1},
        "clean": {"stages": [], "dedup": {"enabled": False}},
        "sources": [{"name": "small", "kind": "local_folder", "paths": [str(folder)]}],
    }))
    done = subprocess.run([sys.executable, "-m", "pipelines.corpus", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    stderr = done.stderr.splitlines()
    assert stderr and all(PROGRESS.match(line) for line in stderr), done.stderr
    manifest = RunManifest.from_json((tmp_path / "out" / "manifest.json").read_text())
    assert manifest.records_written == 6
    assert done.stdout == (f"{manifest.summary_table()}\n\nwrote {tmp_path / 'out'}: 1 shard(s), manifest.json, "
                           "0 dead-letter file(s)\n")


def test_quiet_stderr_drops_beams_log_lines_of_children_and_keeps_the_rest():
    script = r"""
import subprocess, sys
from pipelines.quiet import quiet_stderr
child = ("import sys; w = sys.stderr.write; w('INFO:__main__:Python sdk harness exiting.\\n'); "
         "w('WARNING:root:apitools not found, and bigquery client libraries are not available\\n'); "
         "w('INFO:apache_beam.runners.worker.sdk_worker:Done consuming work.\\n'); "
         "w('[render pid 7] 25 records, 3.0/s\\n'); w('ERROR:apache_beam.x:a real failure\\n'); "
         "w('Traceback (most recent call last):\\n'); w('WARNING:pypdf:kept\\n')")
with quiet_stderr():
    subprocess.run([sys.executable, "-c", child], check=True)
    print("INFO:apache_beam.runners.portability.fn_api_runner:from this process", file=sys.stderr)
print("after the block", file=sys.stderr)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stderr.splitlines() == ["[render pid 7] 25 records, 3.0/s", "ERROR:apache_beam.x:a real failure",
                                        "Traceback (most recent call last):", "WARNING:pypdf:kept",
                                        "after the block"]
