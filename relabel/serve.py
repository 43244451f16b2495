"""A local OpenAI-compatible VLM server: ``transformers serve`` on 127.0.0.1 over a checkpoint folder.

    python -m relabel.serve [--checkpoint DIR] [--port N] [--threads N]            # serve until SIGTERM
    python -m relabel.serve [--checkpoint DIR] -- CMD [ARGS...]                    # serve while CMD runs

It starts ``transformers serve DIR --trust-remote-code --host 127.0.0.1 --port N --device cpu`` (a free
port unless ``--port``), waits for ``GET /health``, prints ``base_url=http://127.0.0.1:N/v1`` and
``model=...``, and stops the server on SIGTERM/SIGINT. With a command after ``--`` it runs the command
with ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``PAGEMILL_RELABEL_MODEL`` set (what the relabel
stages read), stops the server when the command ends and exits with its status: ``make corpus`` runs
the corpus DAG this way.

The default checkpoint is ``out/relabel/tiny-checkpoint``, a random-weight tiny VLM that model/'s own
code writes (``python -m model.checkpoint --export-tiny out/relabel/tiny-checkpoint``; ``make corpus``
does it first). Any checkpoint folder in the transformers layout works. A folder written by model/
(``pagemill_processor.json``, no ``processor_config.json``) is served through a prepared copy: symlinks
to its files plus an image-only Qwen2.5-VL processor (transformers' own refuses to load without
torchvision, which cannot be installed beside this torch), its chat template, and
``generation_config.json`` with ``do_sample: true`` so that a request's ``temperature`` samples.

Environment of the server: ``OMP_NUM_THREADS`` (``--threads``, default 1: several OpenMP threads on a
busy CPU made requests ~7x slower), ``HF_HUB_OFFLINE=1`` (nothing is fetched), ``HF_MODULES_CACHE`` in
the prepared folder (``--trust-remote-code`` copies the processor module there).

The prepared copy lives in ``$PAGEMILL_SERVE_DIR`` (default: the system's temporary folder), one
folder per checkpoint path, kept between runs: the served model's name is its path, and a restarted
server must serve under the same name (the relabel cache keys include it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CHECKPOINT = "out/relabel/tiny-checkpoint"
EXPORT_COMMAND = "python -m model.checkpoint --export-tiny {path}"
OVERLAY_ENV = "PAGEMILL_SERVE_DIR"  # where prepared copies go (default: the system's temporary folder)
PROCESSOR_MODULE = "processing_imageonly"
PROCESSOR_CLASS = "ImageOnlyQwen2_5_VLProcessor"
PROCESSOR_SOURCE = '''"""Qwen2.5-VL's processor without its video half (which needs torchvision); by relabel.serve."""

from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
from transformers.processing_utils import ProcessorMixin


class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
'''
REWRITTEN = ("tokenizer_config.json", "generation_config.json", "preprocessor_config.json")


class ServeError(RuntimeError):
    """The server cannot start: a missing checkpoint, a port, a process that died or never got healthy."""


def resolve_checkpoint(path: str) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_absolute():
        folder = Path.cwd() / folder
    if not (folder / "config.json").is_file():
        raise ServeError(f"relabel.serve: no checkpoint at {folder} (no config.json); build the tiny one with: "
                         f"{EXPORT_COMMAND.format(path=path)}")
    return folder


def needs_overlay(folder: Path) -> bool:
    """A model/ checkpoint (its processor in pagemill_processor.json) rather than a released one."""
    return (folder / "pagemill_processor.json").is_file() and not (folder / "processor_config.json").is_file()


def overlay_root() -> Path:
    """Where ``start`` prepares a model/ checkpoint's served copy: ``$PAGEMILL_SERVE_DIR`` or the temporary folder."""
    return Path(os.environ.get(OVERLAY_ENV) or tempfile.gettempdir())


def prepare(folder: Path, work: Path) -> Path:
    """The folder to serve: ``folder`` itself, or for a model/ checkpoint a copy of symlinks plus the
    processor files ``transformers serve`` needs (see the module doc)."""
    if not needs_overlay(folder):
        return folder
    # A stable folder per checkpoint: the served model's name is this path, and it is part of every cache key,
    # so a restarted server must serve under the same name. Concurrent preparers write the same bytes.
    out = work / f"pagemill-serve-{hashlib.sha256(str(folder).encode()).hexdigest()[:12]}" / folder.name
    out.mkdir(parents=True, exist_ok=True)
    for item in folder.iterdir():
        link = out / item.name
        if item.name not in REWRITTEN and not link.is_symlink():
            try:
                link.symlink_to(item.resolve())
            except FileExistsError:
                pass
    meta = json.loads((folder / "pagemill_processor.json").read_text())
    _write(out / f"{PROCESSOR_MODULE}.py", PROCESSOR_SOURCE)
    _write(out / "chat_template.jinja", meta["chat_template"])
    image_processor = json.loads((folder / "preprocessor_config.json").read_text())
    image_processor["image_processor_type"] = "Qwen2VLImageProcessorPil"  # PIL backend: no torchvision
    auto_map = {"AutoProcessor": f"{PROCESSOR_MODULE}.{PROCESSOR_CLASS}"}
    _write(out / "processor_config.json", json.dumps(
        {"image_processor": image_processor, "processor_class": PROCESSOR_CLASS, "auto_map": auto_map}, indent=2))
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer.update(processor_class=PROCESSOR_CLASS, auto_map=auto_map)
    _write(out / "tokenizer_config.json", json.dumps(tokenizer, indent=2))
    generation = json.loads((folder / "generation_config.json").read_text()) \
        if (folder / "generation_config.json").is_file() else {}
    generation["do_sample"] = True  # else the server decodes greedily whatever temperature is asked
    _write(out / "generation_config.json", json.dumps(generation, indent=2))
    return out


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(base: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


class LocalServer:
    """``transformers serve`` over a checkpoint on 127.0.0.1; a context manager (``start``/``stop``).

    ``base_url`` ends in ``/v1``; ``model`` is the name requests must send (the served folder's path)."""

    def __init__(self, checkpoint: str = DEFAULT_CHECKPOINT, port: int = 0, threads: int = 1,
                 startup_timeout_s: float = 180.0, log_path: str | None = None):
        self.checkpoint = resolve_checkpoint(checkpoint)
        self.port = port or free_port()
        self.threads = threads
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.work: Path | None = None
        self.model = ""

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def env(self) -> dict[str, str]:
        assert self.work is not None
        return {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads),
                "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
                "HF_MODULES_CACHE": str(self.work / "modules"),
                # its temporary files (Python's multiprocessing sockets among them) go with the work folder
                "TMPDIR": str(self.work / "tmp")}

    def start(self) -> LocalServer:
        self.work = Path(tempfile.mkdtemp(prefix="relabel-serve-"))
        (self.work / "tmp").mkdir()
        served = prepare(self.checkpoint, overlay_root())
        self.model = str(served)
        command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(served), "--trust-remote-code",
                   "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu"]
        log = open(self.log_path or self.work / "server.log", "ab")
        self.process = subprocess.Popen(command, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise ServeError(f"relabel.serve: transformers serve exited with {self.process.returncode}:\n{tail}")
            if healthy(self.root, timeout=max(0.1, min(2.0, deadline - time.monotonic()))):  # within the budget
                return self
            time.sleep(0.25)
        tail = self.log_tail()
        self.stop()
        raise ServeError(f"relabel.serve: no /health answer within {self.startup_timeout_s:.0f} s:\n{tail}")

    def log_tail(self, lines: int = 20) -> str:
        path = Path(self.log_path) if self.log_path else (self.work / "server.log" if self.work else None)
        if path is None or not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL the server's process group (tests: a server that dies mid-run)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; the work folder (its log unless ``log_path``, its temporary
        files) is removed. Also after ``kill``."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.work is not None:  # a log_path lies outside it and stays
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(prog="python -m relabel.serve", description=__doc__.split("\n\n")[0],
                                 epilog="with -- CMD: run CMD against the server, then stop it")
    ap.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                    help=f"checkpoint folder to serve (default {DEFAULT_CHECKPOINT})")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the server (default 1)")
    ap.add_argument("--startup-timeout", type=float, default=180.0, help="seconds to wait for /health (180)")
    ap.add_argument("--log", help="server log file (default: a temporary file, shown on failure)")
    args = ap.parse_args(argv)
    try:
        server = LocalServer(args.checkpoint, args.port, args.threads, args.startup_timeout, args.log)
    except ServeError as exc:
        print(exc, file=sys.stderr)
        return 2
    stop = {"now": False}

    def on_signal(signum, _frame):
        stop["now"] = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    child: subprocess.Popen | None = None
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    try:
        server.start()
    except ServeError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        print(f"base_url={server.base_url}\nmodel={server.model}\n(ready in {time.monotonic() - started:.1f} s)",
              flush=True)
        if not command:
            while not stop["now"] and server.process.poll() is None:
                time.sleep(0.2)
            return 0 if stop["now"] else 1
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url,
               "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "unused"), "PAGEMILL_RELABEL_MODEL": server.model}
        child = subprocess.Popen(command, env=env)
        while child.poll() is None:
            try:
                child.wait(0.5)
            except subprocess.TimeoutExpired:
                pass
        return child.returncode
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
