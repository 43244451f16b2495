"""relabel.serve: the prepared folder, the missing-checkpoint message, and (slow) the CLI and a server killed
mid-run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from relabel.serve import EXPORT_COMMAND, ServeError, main, needs_overlay, prepare, resolve_checkpoint


def test_missing_checkpoint_names_the_command_that_builds_it(tmp_path, capsys):
    with pytest.raises(ServeError, match="python -m model.checkpoint --export-tiny"):
        resolve_checkpoint(str(tmp_path / "none"))
    assert main(["--checkpoint", str(tmp_path / "none")]) == 2
    assert EXPORT_COMMAND.format(path=str(tmp_path / "none")) in capsys.readouterr().err


def test_prepared_folder_adds_the_image_only_processor_and_sampling(tiny_checkpoint, tmp_path):
    assert needs_overlay(tiny_checkpoint)
    served = prepare(tiny_checkpoint, tmp_path)
    assert prepare(tiny_checkpoint, tmp_path) == served  # stable: the model name is part of every cache key
    assert json.loads((served / "generation_config.json").read_text())["do_sample"] is True
    processor = json.loads((served / "processor_config.json").read_text())
    assert processor["auto_map"]["AutoProcessor"].startswith("processing_imageonly.")
    assert (served / "model.safetensors").resolve() == (tiny_checkpoint / "model.safetensors").resolve()


def test_session_server_is_healthy_and_lists_its_model(relabel_server):
    import urllib.request

    with urllib.request.urlopen(f"{relabel_server.base_url}/models", timeout=10) as response:
        assert [m["id"] for m in json.load(response)["data"]] == [relabel_server.model]


def test_the_served_copy_is_prepared_where_the_environment_says(relabel_server, serve_overlays):
    """``PAGEMILL_SERVE_DIR`` (this session's folder, set by tests/conftest.py) holds the prepared copy,
    not the system's temporary folder."""
    assert Path(relabel_server.model).is_relative_to(serve_overlays)


@pytest.mark.slow
def test_the_server_keeps_its_temporary_files_in_its_work_folder(relabel_server):
    """The running server process's TMPDIR is inside the folder ``stop()`` removes, so what it leaves
    there (Python's multiprocessing sockets, for one) does not pile up in the system's."""
    environ = Path(f"/proc/{relabel_server.process.pid}/environ").read_bytes().split(b"\0")
    tmpdir = next(item.split(b"=", 1)[1].decode() for item in environ if item.startswith(b"TMPDIR="))
    assert Path(tmpdir).is_dir() and Path(tmpdir).is_relative_to(relabel_server.work)


def test_cli_runs_a_command_against_the_server_and_stops_it(tiny_checkpoint, serve_overlays):
    code = ("import os, urllib.request; u = os.environ['OPENAI_BASE_URL']; "
            "print(urllib.request.urlopen(u + '/models').status, os.environ['PAGEMILL_RELABEL_MODEL']); "
            "raise SystemExit(3)")
    done = subprocess.run([sys.executable, "-m", "relabel.serve", "--checkpoint", str(tiny_checkpoint), "--",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 3 and "200 " in done.stdout and "base_url=http://127.0.0.1:" in done.stdout
    assert f"200 {serve_overlays}/" in done.stdout  # the model name: the copy prepared in PAGEMILL_SERVE_DIR


@pytest.mark.slow
def test_server_killed_mid_run_dead_letters_then_a_restarted_server_finishes_from_the_cache(tiny_checkpoint, tmp_path):
    from relabel.client import ClientConfig
    from relabel.serve import LocalServer
    from relabel.stages import RelabelConfig, RelabelStage
    from tests.helpers import page_record

    recs = [page_record(id=f"k{i}", instruction=f"Page {i}.") for i in range(8)]
    server = LocalServer(str(tiny_checkpoint), startup_timeout_s=300).start()
    port = server.port
    cfg = RelabelConfig(client=ClientConfig(base_url=server.base_url, max_attempts=2, backoff_s=0.05, concurrency=1),
                        cache_path=str(tmp_path / "c.sqlite"), max_tokens=4, tasks=())
    stage = RelabelStage(cfg)
    first = stage.run_batch(recs[:3])
    server.kill()
    rest = stage.run_batch(recs[3:])
    killed = server.work
    server.stop()  # what is left of a killed server: its work folder
    assert not killed.exists()
    assert all(isinstance(r, list) for r in first)
    assert all(getattr(r, "reason", "") == "request_connection_failed" for r in rest)
    log = tmp_path / "server.log"
    server = LocalServer(str(tiny_checkpoint), port=port, startup_timeout_s=300, log_path=str(log)).start()
    work = server.work
    try:
        again = RelabelStage(cfg)
        results = again.run_batch(recs)
        assert all(isinstance(r, list) for r in results)
        assert again.client.stats.attempts == 5  # the three answered before the kill came from the cache
    finally:
        server.stop()
    assert log.stat().st_size > 0 and not work.exists()  # the log asked for stays, the work folder goes
