"""relabel.serve: the prepared folder (private, made again each start, no checkpoint code), the missing-checkpoint
message, code in a checkpoint folder never running, the model digest, and (slow) the CLI and a server killed
mid-run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from relabel.cache import MODEL_DIGEST_ENV
from relabel.serve import (
    EXPORT_COMMAND,
    PROCESSOR_CLASS,
    SERVER_FLAG,
    LocalServer,
    ServeError,
    checkpoint_digest,
    main,
    needs_overlay,
    prepare,
    private_folder,
    resolve_checkpoint,
)

EVIL = """import pathlib
pathlib.Path({marker!r}).write_text("code from the checkpoint folder ran")
"""


def plant_code(folder: Path, marker: Path) -> None:
    """What a checkpoint from a hub or a user can carry: ``evil.py``, which writes ``marker`` when imported, named
    by an ``auto_map`` in every config file there (transformers imports it under ``trust_remote_code``)."""
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    maps = {"config.json": {"AutoConfig": "evil.EvilConfig", "AutoModelForImageTextToText": "evil.EvilModel"},
            "tokenizer_config.json": {"AutoTokenizer": ["evil.EvilTokenizer", None]},
            "preprocessor_config.json": {"AutoImageProcessor": "evil.EvilImageProcessor"},
            "processor_config.json": {"AutoProcessor": "evil.EvilProcessor"}}
    for name, auto_map in maps.items():
        if (folder / name).is_file():
            config = json.loads((folder / name).read_text())
            (folder / name).unlink()  # a prepared copy's file may be a link
            (folder / name).write_text(json.dumps({**config, "auto_map": auto_map}))


def copy_checkpoint(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=False)  # links followed: a folder of plain files
    return dst


def serve_and_chat(checkpoint: Path) -> tuple[str | None, ServeError | None]:
    """Serves ``checkpoint`` and asks it one question: (answer, None), or (None, the error) if it did not start."""
    try:
        with LocalServer(str(checkpoint), startup_timeout_s=300) as server:
            return chat(server), None
    except ServeError as exc:
        return None, exc


def chat(server: LocalServer) -> str:
    body = json.dumps({"model": server.model, "max_tokens": 2,
                       "messages": [{"role": "user", "content": "Say hi."}]}).encode()
    request = urllib.request.Request(f"{server.base_url}/chat/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def test_missing_checkpoint_names_the_command_that_builds_it(tmp_path, capsys):
    with pytest.raises(ServeError, match="python -m model.checkpoint --export-tiny"):
        resolve_checkpoint(str(tmp_path / "none"))
    assert main(["--checkpoint", str(tmp_path / "none")]) == 2
    assert EXPORT_COMMAND.format(path=str(tmp_path / "none")) in capsys.readouterr().err


@pytest.mark.parametrize("port,message", [("99999", "99999 is not a port, 0-65535"), ("65536", "65536 is not a port"),
                                          ("-1", "-1 is not a port"), ("http", "'http' is not a port")])
def test_a_port_out_of_range_is_a_usage_error_before_any_server_starts(tmp_path, capsys, monkeypatch, port, message):
    import relabel.serve as serve

    monkeypatch.setattr(serve, "LocalServer", lambda *a, **k: pytest.fail("a server was started"))
    with pytest.raises(SystemExit) as exited:
        main(["--checkpoint", str(tmp_path), f"--port={port}"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"argument --port: {message}" in err and "Traceback" not in err


@pytest.mark.parametrize("port", ["0", "65535"])
def test_ports_0_to_65535_are_taken(tmp_path, capsys, port):
    # past argument parsing: the missing checkpoint is what stops it
    assert main(["--checkpoint", str(tmp_path / "none"), "--port", port]) == 2
    assert EXPORT_COMMAND.format(path=str(tmp_path / "none")) in capsys.readouterr().err


def test_prepared_folder_adds_the_image_only_processor_and_sampling(tiny_checkpoint, tmp_path):
    assert needs_overlay(tiny_checkpoint)
    served = prepare(tiny_checkpoint, tmp_path)
    assert prepare(tiny_checkpoint, tmp_path) == served  # stable: the model name is part of every cache key
    assert json.loads((served / "generation_config.json").read_text())["do_sample"] is True
    processor = json.loads((served / "processor_config.json").read_text())
    assert processor["processor_class"] == PROCESSOR_CLASS and "auto_map" not in processor  # registered, not code
    assert not list(served.glob("*.py"))
    assert (served / "model.safetensors").resolve() == (tiny_checkpoint / "model.safetensors").resolve()


def test_prepared_copy_has_no_auto_map_and_no_code_of_the_checkpoint(tiny_checkpoint, tmp_path):
    """A model/ checkpoint carrying code named by ``auto_map``: its copy links no ``*.py`` and its config files
    name no code (a server that trusted remote code would find none to run)."""
    ck = copy_checkpoint(tiny_checkpoint, tmp_path / "ck")
    plant_code(ck, tmp_path / "MARKER")
    served = prepare(ck, tmp_path / "serve")
    assert not (served / "evil.py").exists() and not list(served.glob("*.py"))
    for name in ("config.json", "tokenizer_config.json", "processor_config.json"):
        assert "auto_map" not in json.loads((served / name).read_text()), name
    assert not (served / "preprocessor_config.json").exists()  # its settings are in processor_config.json
    assert json.loads((served / "config.json").read_text())["model_type"] == "qwen2_5_vl"


def test_prepared_copy_is_in_a_private_folder_not_the_old_predictable_one(tiny_checkpoint, tmp_path):
    """Another user pre-creates the folder the copy used to go to (``pagemill-serve-<hash of the path>``, in a
    shared temporary folder) with their config.json and code: none of it is served."""
    root = tmp_path / "shared-tmp"
    predictable = f"pagemill-serve-{hashlib.sha256(str(tiny_checkpoint).encode()).hexdigest()[:12]}"
    old = root / predictable / tiny_checkpoint.name
    old.mkdir(parents=True)
    (tmp_path / "theirs.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "auto_map": {"AutoConfig": "x.Y"}}))
    (old / "config.json").symlink_to(tmp_path / "theirs.json")
    (old / "x.py").write_text("raise SystemExit('their code')\n")
    served = prepare(tiny_checkpoint, root)
    assert not served.is_relative_to(old.parent)
    assert json.loads((served / "config.json").read_text()) == json.loads((tiny_checkpoint / "config.json").read_text())
    assert not (served / "config.json").is_symlink() and not (served / "x.py").exists()
    private = private_folder(root)
    assert served.is_relative_to(private) and private.name == f"pagemill-serve-{os.getuid()}"
    assert (private.stat().st_mode & 0o777) == 0o700 and private.stat().st_uid == os.getuid()


def test_prepared_copy_is_made_again_at_each_start(tiny_checkpoint, tmp_path):
    """Links and files of an earlier copy are not trusted: each is made again, and what the checkpoint does not
    have is removed."""
    served = prepare(tiny_checkpoint, tmp_path)
    (tmp_path / "other.safetensors").write_bytes(b"not the weights")
    (served / "model.safetensors").unlink()
    (served / "model.safetensors").symlink_to(tmp_path / "other.safetensors")
    (served / "config.json").unlink()  # (a link to the checkpoint's own in a copy that linked it)
    (served / "config.json").write_text(json.dumps({"auto_map": {"AutoConfig": "stale.Config"}}))
    (served / "stale.py").write_text("")
    (served / "processing_imageonly.py").write_text("")  # what the copy held when it ran code
    assert prepare(tiny_checkpoint, tmp_path) == served
    assert (served / "model.safetensors").resolve() == (tiny_checkpoint / "model.safetensors").resolve()
    assert "auto_map" not in json.loads((served / "config.json").read_text())
    assert not (served / "stale.py").exists() and not (served / "processing_imageonly.py").exists()


def test_a_private_folder_open_to_others_is_emptied_and_made_private(tiny_checkpoint, tmp_path):
    private = tmp_path / f"pagemill-serve-{os.getuid()}"
    planted = private / "planted" / "config.json"
    planted.parent.mkdir(parents=True)
    planted.write_text("{}")
    private.chmod(0o777)
    served = prepare(tiny_checkpoint, tmp_path)
    assert served.is_relative_to(private) and (private.stat().st_mode & 0o777) == 0o700
    assert not planted.parent.exists()


def test_a_serve_folder_of_another_user_or_a_link_is_refused(tiny_checkpoint, tmp_path, monkeypatch):
    """In a shared temporary folder another user can create ``pagemill-serve-<uid>`` first (theirs), or a link
    there: refused, nothing written there."""
    import relabel.serve

    theirs = tmp_path / "a" / f"pagemill-serve-{os.getuid() + 1}"  # a folder at our name that is not ours
    theirs.mkdir(parents=True)
    monkeypatch.setattr(relabel.serve.os, "getuid", lambda: os.geteuid() + 1)
    with pytest.raises(ServeError, match="not a folder of this user's"):
        prepare(tiny_checkpoint, tmp_path / "a")
    assert not any(theirs.iterdir())
    monkeypatch.undo()
    (tmp_path / "b").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "b" / f"pagemill-serve-{os.getuid()}").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ServeError, match="PAGEMILL_SERVE_DIR"):
        prepare(tiny_checkpoint, tmp_path / "b")
    assert not any((tmp_path / "elsewhere").iterdir())


def test_the_server_entry_refuses_trust_remote_code(capsys):
    assert main([SERVER_FLAG, "/some/folder", "--trust-remote-code", "--port", "1"]) == 2
    assert "never runs" in capsys.readouterr().err


def test_code_in_a_served_checkpoint_folder_never_runs(relabel_server, tmp_path):
    """A released-layout folder (served as is) whose config files name ``evil.py`` in ``auto_map``: the server
    loads and answers, and the code is not imported."""
    ck = copy_checkpoint(Path(relabel_server.model), tmp_path / "released")  # the prepared copy: a released layout
    assert not needs_overlay(ck)
    marker = tmp_path / "MARKER"
    plant_code(ck, marker)
    answer, error = serve_and_chat(ck)
    assert not marker.exists()  # checked first: a server that trusts the folder's code runs it, whatever follows
    assert error is None and isinstance(answer, str), error


@pytest.mark.slow
def test_code_in_a_model_checkpoint_folder_never_runs(tiny_checkpoint, tmp_path):
    """The same for a folder written by model/ (served through the prepared copy)."""
    ck = copy_checkpoint(tiny_checkpoint, tmp_path / "ck")
    marker = tmp_path / "MARKER"
    plant_code(ck, marker)
    answer, error = serve_and_chat(ck)
    assert not marker.exists()  # checked first: a server that trusts the folder's code runs it, whatever follows
    assert error is None and isinstance(answer, str), error


def test_model_digest_follows_the_checkpoint_content_not_its_path(tiny_checkpoint, tmp_path):
    digest = checkpoint_digest(tiny_checkpoint)
    ck = copy_checkpoint(tiny_checkpoint, tmp_path / "ck")
    assert checkpoint_digest(ck) == digest  # the same model elsewhere
    (ck / "trainer_state.json").write_text("{}")  # model/'s training state and code are not served
    (ck / "evil.py").write_text("")
    assert checkpoint_digest(ck) == digest
    weights = bytearray((ck / "model.safetensors").read_bytes())
    weights[-1] ^= 0xFF  # other weights, same size and header: retrained
    (ck / "model.safetensors").write_bytes(bytes(weights))
    retrained = checkpoint_digest(ck)
    assert retrained != digest
    config = json.loads((ck / "config.json").read_text())
    config["tie_word_embeddings"] = not config.get("tie_word_embeddings")
    (ck / "config.json").write_text(json.dumps(config))
    assert checkpoint_digest(ck) not in (digest, retrained)


def test_the_server_puts_its_model_digest_in_the_environment(relabel_server, tiny_checkpoint):
    """What the relabel cache keys include for stages run in this process (the CLI passes it to its command)."""
    assert relabel_server.digest == checkpoint_digest(tiny_checkpoint)
    assert os.environ[MODEL_DIGEST_ENV] == relabel_server.digest


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
            f"print('digest', os.environ['{MODEL_DIGEST_ENV}']); "
            "raise SystemExit(3)")
    done = subprocess.run([sys.executable, "-m", "relabel.serve", "--checkpoint", str(tiny_checkpoint), "--",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 3 and "200 " in done.stdout and "base_url=http://127.0.0.1:" in done.stdout
    assert f"200 {serve_overlays}/" in done.stdout  # the model name: the copy prepared in PAGEMILL_SERVE_DIR
    assert f"digest {checkpoint_digest(tiny_checkpoint)}\n" in done.stdout  # the model digest, for the cache keys


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


def _server_child(launcher: subprocess.Popen, within_s: float = 120.0):
    """The transformers-serve process ``launcher`` (python -m relabel.serve) started, once it exists."""
    import psutil

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            if "--transformers-serve" in " ".join(child.cmdline()):
                return child
        time.sleep(0.05)
    raise AssertionError("relabel.serve started no server")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_signal_while_the_server_starts_runs_no_command_and_leaves_no_server(tiny_checkpoint, tmp_path, how):
    """SIGTERM (Ctrl-C, an Airflow stop) during the start-up used to wait it out and run the command anyway;
    a SIGKILLed launcher left transformers serve running, holding its port and the model."""
    import psutil

    marker = tmp_path / "ran"
    launcher = subprocess.Popen([sys.executable, "-m", "relabel.serve", "--checkpoint", str(tiny_checkpoint), "--",
                                 "touch", str(marker)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server = _server_child(launcher)
    launcher.send_signal(getattr(signal, how))
    launcher.communicate(timeout=120)
    assert launcher.returncode == (128 + signal.SIGTERM if how == "SIGTERM" else -signal.SIGKILL)
    assert not marker.exists()
    try:
        server.wait(timeout=60)  # gone with its launcher, whichever way the launcher ended
    except psutil.TimeoutExpired:
        server.kill()
        raise AssertionError(f"the server outlived relabel.serve ({how})") from None
