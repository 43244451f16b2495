"""The corpus DAG reading every sample source from a Hugging Face Hub dataset repo (``hf://``).

The real Hub cannot be reached from tests, so the repo is served by ``tests/hub_server.py``, a fake
of the Hub's HTTP API on 127.0.0.1 in its own process; everything between the pipeline and it is
real: ``huggingface_hub.HfFileSystem`` (tree listings, followed page by page, and ranged reads) in
the launcher and in the multi-processing SDK workers, over HTTP. Every sample source with files is
read over ``hf://``: parquet files, olmOCR tarballs, FinePDFs WARC files, the NARA, LoC and NCSE
image mirrors, the olmOCR training folder and the local folder (``jinaocrsynth`` has no files). The
output is a local folder (``pipelines.io`` only reads ``hf://``), and its shards must hold the same
rows as a run on local paths.

Pipelines run as subprocesses: ``huggingface_hub`` reads ``HF_ENDPOINT`` (and ``HF_HOME``,
``HF_HUB_OFFLINE``, ...) once, when it is imported, which has already happened in this process; the
SDK workers inherit the subprocess's environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from pipelines import corpus, io
from pipelines.config import load_config
from schemas.manifest import RunManifest
from tests.helpers import IN_MEMORY, REPO, sample_config
from tests.hub_server import hub_server
from tests.object_stores import assert_same_rows, free_port

REPO_ID = "pagemill/samples"
ROOT = f"hf://datasets/{REPO_ID}/"
PAGE_SIZE = 4  # tree entries per page (the Hub: 1,000), so that the sources' listings are paginated


@dataclass(frozen=True)
class Hub:
    endpoint: str
    log: Path  # the server's request log
    env: dict[str, str]  # this process's environment, pointed at the server


def hub_env(endpoint: str, hf_home: Path) -> dict[str, str]:
    """This process's environment pointed at the fake Hub, with no token and no telemetry."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    return env | {"HF_ENDPOINT": endpoint, "HF_HOME": str(hf_home), "HF_HUB_CACHE": str(hf_home / "hub"),
                  "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.fixture(scope="module")
def hub(samples_root, tmp_path_factory) -> Iterator[Hub]:
    """The samples "uploaded" to dataset repo ``REPO_ID`` on a Hub API server on 127.0.0.1."""
    tmp = tmp_path_factory.mktemp("hub")
    shutil.copytree(samples_root, tmp / "repo")
    with hub_server(tmp / "repo", REPO_ID, free_port(), tmp / "server.log", page_size=PAGE_SIZE) as endpoint:
        yield Hub(endpoint, tmp / "server.log", hub_env(endpoint, tmp / "hf"))


def logged_requests(log: Path, since: int = 0) -> list[tuple[str, str, int]]:
    """(method, path, status) of every request the server logged after byte ``since`` of its log."""
    found = re.findall(r'"(GET|POST|HEAD|PUT|DELETE) (\S+)" (\d{3}) ', log.read_text()[since:])
    return [(method, path, int(status)) for method, path, status in found]


def hub_config(local_config: Path, samples_root: Path, tmp_path: Path, output: Path) -> Path:
    """The local sample config with every sample path (inputs and options) moved into the repo."""
    raw = yaml.safe_load(local_config.read_text().replace(f"{samples_root}/", ROOT))
    raw["run"]["output"] = str(output)
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


MATCH_PATTERNS = ["olmocr-mix-1025/*.parquet", "finepdfs/data/*/train/*.parquet", "local/*", "local/**",
                  "local/**/*.md", "nara/mirror/**/images/*/0000[12].jpg", "olmocr-train", "local/report.md",
                  "local/nope.md", "nope/**"]


def test_match_and_exists_on_the_hub_agree_with_local_paths(hub, samples_root):
    # Files only (no folders), "**/" matching no folder too, and nothing for a missing path.
    script = ("import json, sys; from pipelines import io; "
              "print(json.dumps([[io.match(p), io.exists(p)] for p in sys.argv[1:]]))")
    run = subprocess.run([sys.executable, "-c", script, *(ROOT + p for p in MATCH_PATTERNS)], cwd=REPO,
                         env=hub.env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-5000:]
    for pattern, (matched, exists) in zip(MATCH_PATTERNS, json.loads(run.stdout.splitlines()[-1]), strict=True):
        local = str(samples_root / pattern)
        assert [m.replace(ROOT, f"{samples_root}/") for m in matched] == io.match(local), pattern
        if not any(c in pattern for c in "*?["):
            assert exists == io.exists(local), pattern
    assert io.join(ROOT, "a/", "/b") == ROOT + "a/b"


def test_sources_on_the_hub_match_a_local_run(hub, samples_root, tmp_path):
    (tmp_path / "local").mkdir()
    local_cfg = load_config(sample_config(samples_root, tmp_path / "local"))
    local = corpus.run(local_cfg, IN_MEMORY)

    out = tmp_path / "hub"
    config = hub_config(tmp_path / "local" / "corpus.yaml", samples_root, tmp_path, out)
    assert all(p.startswith(ROOT) for s in load_config(config).sources if s.kind != "jinaocrsynth" for p in s.paths)
    since = hub.log.stat().st_size
    run = subprocess.run([sys.executable, "-m", "pipelines.corpus", "--config", str(config),
                          "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
                         cwd=REPO, env=hub.env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    manifest = RunManifest.from_json((out / "manifest.json").read_text())
    assert manifest.imbalances() == []
    assert manifest.records_in == local.records_in and manifest.records_written == local.records_written
    assert_same_rows(out / "data", Path(local_cfg.run.output) / "data")

    # Every source's files came from the server: listed (page by page), and read, ranged or whole.
    requests = logged_requests(hub.log, since)
    resolve = f"/datasets/{REPO_ID}/resolve/main/"
    read = {path[len(resolve):]: status for method, path, status in requests
            if method == "GET" and path.startswith(resolve) and status in (200, 206)}
    for folder in ("olmocr-mix-1025/pdf_tarballs/", "olmocr-mix-0225/pdf_tarballs/", "olmocr-train/",
                   "finepdfs/data/", "finepdfs/warc/", "nara/mirror/", "loc/mirror/", "ncse/mirror/",
                   "europeana/", "local/"):
        assert any(p.startswith(folder) for p in read), f"nothing under {folder} was read from the Hub"
    for suffix in (".parquet", ".tar.gz", ".warc.gz"):
        assert any(p.endswith(suffix) and s == 206 for p, s in read.items()), f"no ranged read of a {suffix}"
    assert any("/tree/main" in path and "cursor=" in path for _, path, _ in requests), "no paginated listing"
