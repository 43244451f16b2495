"""A local OpenAI-compatible VLM server: ``transformers serve`` on 127.0.0.1 over a checkpoint folder.

    python -m relabel.serve [--checkpoint DIR] [--port N] [--threads N]            # serve until SIGTERM
    python -m relabel.serve [--checkpoint DIR] -- CMD [ARGS...]                    # serve while CMD runs

It starts ``transformers serve DIR --host 127.0.0.1 --port N --device cpu`` (a free port unless ``--port``),
waits for ``GET /health``, prints ``base_url=http://127.0.0.1:N/v1``, ``model=...`` and ``model_digest=...``,
and stops the server on SIGTERM/SIGINT. With a command after ``--`` it runs the command with
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``PAGEMILL_RELABEL_MODEL`` and ``PAGEMILL_RELABEL_MODEL_DIGEST`` set
(what the relabel stages read), stops the server when the command ends and exits with its status:
``make corpus`` runs the corpus DAG this way.

No code from the checkpoint folder runs: the server is started without ``--trust-remote-code`` (an
``auto_map`` in the folder's config files naming a ``*.py`` of the folder is not imported), through this
module (``python -m relabel.serve --transformers-serve ...``), which registers the image-only processor class
below with ``AutoProcessor`` in the server's processes and then runs the ``transformers serve`` command line.

The default checkpoint is ``out/relabel/tiny-checkpoint``, a random-weight tiny VLM that model/'s own
code writes (``python -m model.checkpoint --export-tiny out/relabel/tiny-checkpoint``; ``make corpus``
does it first). Any checkpoint folder in the transformers layout works. A folder written by model/
(``pagemill_processor.json``, no ``processor_config.json``) is served through a prepared copy: symlinks
to its files (not its ``*.py``), its ``config.json`` without ``auto_map``, the project's image-only Qwen2.5-VL
processor (transformers' own refuses to load without torchvision, which cannot be installed beside this
torch), its chat template, and ``generation_config.json`` with ``do_sample: true`` so that a request's
``temperature`` samples.

Environment of the server: ``OMP_NUM_THREADS`` (``--threads``, default 1: several OpenMP threads on a
busy CPU made requests ~7x slower), ``HF_HUB_OFFLINE=1`` (nothing is fetched).

The prepared copy lives in ``$PAGEMILL_SERVE_DIR`` (default: the system's temporary folder) under
``pagemill-serve-<uid>/``, a folder of this user's only (mode 0700; one that is not this user's, or is a
symlink, is refused; one of this user's that others could write to is emptied and made private), one folder
per checkpoint path, whose entries are made again at every start (links and files replaced, anything else
removed). It is kept after the server stops: the served model's name is its path, a restarted server must
serve under the same name (the relabel cache keys include it), and another server of the same checkpoint
may be serving from it.

The model digest (``checkpoint_digest``): sha256 over the name, size and full sha256 of every file of the
checkpoint folder the server may read (not ``*.py``, hidden files, nor model/'s training state
``trainer_state.json``/``optimizer.safetensors``), computed while the server starts. A checkpoint rewritten
at the same path has a new digest, which the relabel cache keys include (``relabel.cache.MODEL_DIGEST_ENV``):
its answers are asked again. ``LocalServer.start`` also sets it in this process's environment (for stages
run in-process, as the tests do; ``stop`` puts back what was there).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from relabel.cache import MODEL_DIGEST_ENV
from schemas.config import bounded_arg

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CHECKPOINT = "out/relabel/tiny-checkpoint"
EXPORT_COMMAND = "python -m model.checkpoint --export-tiny {path}"
OVERLAY_ENV = "PAGEMILL_SERVE_DIR"  # where prepared copies go (default: the system's temporary folder)
PROCESSOR_CLASS = "ImageOnlyQwen2_5_VLProcessor"
SERVER_FLAG = "--transformers-serve"  # python -m relabel.serve --transformers-serve ARGS: `transformers serve ARGS`
# the prepared copy's files written here, config files without their `auto_map` (the image processor's settings
# go into processor_config.json)
WRITTEN = ("config.json", "tokenizer_config.json", "generation_config.json", "processor_config.json",
           "chat_template.jinja")
REWRITTEN = (*WRITTEN, "preprocessor_config.json")  # not linked into a prepared copy
# model/checkpoint.py's training state: a served model never reads it (and the optimizer is twice the weights)
NOT_SERVED = ("trainer_state.json", "optimizer.safetensors")


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


def private_folder(work: Path) -> Path:
    """``work/pagemill-serve-<uid>``: a folder of this user's that no one else can write to. Created 0700; one
    that is a symlink, not a folder or another user's is refused (another user can create it first in a shared
    temporary folder: then set ``$PAGEMILL_SERVE_DIR``); one of this user's open to others is emptied and made
    0700 (what is in it cannot be trusted)."""
    uid = os.getuid()
    folder = work / f"pagemill-serve-{uid}"
    work.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            folder.mkdir(mode=0o700)
            created = True
        except FileExistsError:
            created = False
        info = os.lstat(folder)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            raise ServeError(f"relabel.serve: {folder} is not a folder of this user's (uid {uid}): it may have been "
                             f"planted there; remove it, or set ${OVERLAY_ENV} to a folder of your own")
        if created or not info.st_mode & 0o077:
            if stat.S_IMODE(info.st_mode) != 0o700:
                os.chmod(folder, 0o700)
            return folder
        try:  # this user's, but others could write to it: what is in it cannot be trusted
            shutil.rmtree(folder)
        except OSError as exc:
            raise ServeError(f"relabel.serve: {folder} is open to other users and cannot be emptied ({exc}): "
                             f"remove it, or set ${OVERLAY_ENV} to a folder of your own") from exc
    raise ServeError(f"relabel.serve: {folder} keeps being re-created open to other users: set ${OVERLAY_ENV}")


def _private_subfolder(folder: Path) -> Path:
    """``folder`` (in ``private_folder``) as a real folder: a symlink or file there is replaced by one."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def served_files(folder: Path) -> list[Path]:
    """The files of a checkpoint folder a server may read: regular files (or links to them), not ``*.py``
    (never run), hidden files, nor model/'s training state (``NOT_SERVED``), by name."""
    return [item for item in sorted(folder.iterdir())
            if item.is_file() and item.suffix != ".py" and not item.name.startswith(".")
            and item.name not in NOT_SERVED]


def checkpoint_digest(folder: Path) -> str:
    """sha256 (hex) of the JSON list of [name, size, sha256 of the content] of ``served_files(folder)``: the
    full content, read once (weights and all, ~1 GB/s on this machine's CPU; the server reads them too)."""
    manifest = []
    for item in served_files(folder):
        with open(item, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            manifest.append([item.name, size, hashlib.file_digest(f, "sha256").hexdigest()])
    return hashlib.sha256(json.dumps(manifest).encode()).hexdigest()


def _without_auto_map(path: Path) -> dict:
    config = json.loads(path.read_text())
    config.pop("auto_map", None)  # names code of the checkpoint's (never run; transformers would want trust)
    return config


def prepare(folder: Path, work: Path) -> Path:
    """The folder to serve: ``folder`` itself, or for a model/ checkpoint a copy of symlinks plus the
    processor files ``transformers serve`` needs (see the module doc), in ``private_folder(work)``: one folder per
    checkpoint path (the served model's name is this path, and it is part of every cache key, so a restarted
    server must serve under the same name), its entries made again each time (concurrent preparers of one
    checkpoint write the same bytes, each entry replaced whole)."""
    if not needs_overlay(folder):
        return folder
    root = private_folder(work)
    out = _private_subfolder(_private_subfolder(root / hashlib.sha256(str(folder).encode()).hexdigest()[:12])
                             / folder.name)
    linked = {item.name: item.resolve() for item in served_files(folder) if item.name not in REWRITTEN}
    for name, target in linked.items():
        tmp = out / f".{name}.{os.getpid()}.link"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, out / name)
    meta = json.loads((folder / "pagemill_processor.json").read_text())
    _write(out / "config.json", json.dumps(_without_auto_map(folder / "config.json"), indent=2))
    _write(out / "chat_template.jinja", meta["chat_template"])
    image_processor = _without_auto_map(folder / "preprocessor_config.json")
    image_processor["image_processor_type"] = "Qwen2VLImageProcessorPil"  # PIL backend: no torchvision
    _write(out / "processor_config.json", json.dumps(
        {"image_processor": image_processor, "processor_class": PROCESSOR_CLASS}, indent=2))
    tokenizer = _without_auto_map(folder / "tokenizer_config.json")
    tokenizer["processor_class"] = PROCESSOR_CLASS
    _write(out / "tokenizer_config.json", json.dumps(tokenizer, indent=2))
    generation = json.loads((folder / "generation_config.json").read_text()) \
        if (folder / "generation_config.json").is_file() else {}
    generation["do_sample"] = True  # else the server decodes greedily whatever temperature is asked
    _write(out / "generation_config.json", json.dumps(generation, indent=2))
    for entry in out.iterdir():  # what an earlier preparer left that this checkpoint does not have
        if entry.name in linked or entry.name in WRITTEN or entry.name.startswith("."):  # ".": others' temps
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return out


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def register_processor() -> None:
    """Registers the image-only Qwen2.5-VL processor (``PROCESSOR_CLASS``, what a prepared copy's
    ``processor_config.json`` names) with ``AutoProcessor`` in this process: Qwen2.5-VL's processor without its
    video half (which needs torchvision). Imports transformers."""
    from transformers import AutoProcessor, Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    AutoProcessor.register(Qwen2_5_VLConfig, ImageOnlyQwen2_5_VLProcessor, exist_ok=True)


def transformers_serve(args: list[str]) -> int:
    """``transformers serve ARGS`` in this process, the image-only processor registered first (the model's process
    that it spawns registers it too: it runs this module as its main module, see the end of the file). Never with
    ``--trust-remote-code``: code in a checkpoint folder does not run."""
    if any(arg.startswith("--trust-remote-code") for arg in args):
        print("relabel.serve: --trust-remote-code is refused: code in a checkpoint folder never runs", file=sys.stderr)
        return 2
    register_processor()
    from transformers.cli.transformers import main as transformers_cli

    sys.argv = ["transformers", "serve", *args]
    try:
        transformers_cli()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


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
        self.digest = ""  # checkpoint_digest of the served checkpoint, once started
        self._digest_set = False  # this server set $MODEL_DIGEST_ENV in os.environ (stop puts back what was there)
        self._digest_before: str | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def env(self) -> dict[str, str]:
        assert self.work is not None
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)  # for -m relabel.serve
        return {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads),
                "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
                "HF_MODULES_CACHE": str(self.work / "modules"), "PYTHONPATH": path,
                # its temporary files (Python's multiprocessing sockets among them) go with the work folder
                "TMPDIR": str(self.work / "tmp")}

    def start(self) -> LocalServer:
        self.work = Path(tempfile.mkdtemp(prefix="relabel-serve-"))
        (self.work / "tmp").mkdir()
        try:
            served = prepare(self.checkpoint, overlay_root())
        except (ServeError, OSError, ValueError) as exc:
            self.stop()
            if isinstance(exc, ServeError):
                raise
            raise ServeError(f"relabel.serve: cannot prepare {self.checkpoint} to serve: {exc}") from exc
        self.model = str(served)
        # -P: the caller's folder is not put on the server's import path (relabel comes from PYTHONPATH)
        command = [sys.executable, "-P", "-m", "relabel.serve", SERVER_FLAG, str(served),
                   "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu"]
        log = open(self.log_path or self.work / "server.log", "ab")
        self.process = subprocess.Popen(command, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=_end_with_parent if sys.platform == "linux" else None)
        log.close()
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            self.digest = checkpoint_digest(self.checkpoint)  # while the server loads
        except OSError as exc:
            self.stop()
            raise ServeError(f"relabel.serve: cannot read the checkpoint {self.checkpoint}: {exc}") from exc
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise ServeError(f"relabel.serve: transformers serve exited with {self.process.returncode}:\n{tail}")
            if healthy(self.root, timeout=max(0.1, min(2.0, deadline - time.monotonic()))):  # within the budget
                self._digest_set, self._digest_before = True, os.environ.get(MODEL_DIGEST_ENV)
                os.environ[MODEL_DIGEST_ENV] = self.digest  # for stages run in this process
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
        if self._digest_set:
            if os.environ.get(MODEL_DIGEST_ENV) == self.digest:  # not another server's since
                if self._digest_before is None:
                    os.environ.pop(MODEL_DIGEST_ENV, None)
                else:
                    os.environ[MODEL_DIGEST_ENV] = self._digest_before
            self._digest_set = False

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


_PORT = bounded_arg(int, 0, 65535, "a port, 0-65535 (0: a free one)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [SERVER_FLAG]:  # the server process LocalServer starts
        return transformers_serve(argv[1:])
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(prog="python -m relabel.serve", description=__doc__.split("\n\n")[0],
                                 epilog="with -- CMD: run CMD against the server, then stop it")
    ap.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                    help=f"checkpoint folder to serve (default {DEFAULT_CHECKPOINT})")
    ap.add_argument("--port", type=_PORT, default=0,
                    help="port on 127.0.0.1, 0-65535 (default 0: a free one)")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the server (default 1)")
    ap.add_argument("--startup-timeout", type=float, default=180.0, help="seconds to wait for /health (180)")
    ap.add_argument("--log", help="server log file (default: a temporary file, shown on failure)")
    args = ap.parse_args(argv)
    try:
        server = LocalServer(args.checkpoint, args.port, args.threads, args.startup_timeout, args.log)
    except ServeError as exc:
        print(exc, file=sys.stderr)
        return 2
    stop: dict = {"now": False, "signum": 0, "starting": True}

    def on_signal(signum, _frame):
        stop.update(now=True, signum=signum)
        if stop["starting"]:  # still starting the server: stop now, never run the command
            raise _Stopped(signum)
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    child: subprocess.Popen | None = None
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    try:
        server.start()
        stop["starting"] = False
    except ServeError as exc:
        print(exc, file=sys.stderr)
        return 1
    except _Stopped as stopped:
        server.stop()
        print(f"relabel.serve: stopped by signal {stopped.signum} while the server started", file=sys.stderr)
        return 128 + stopped.signum
    try:
        print(f"base_url={server.base_url}\nmodel={server.model}\nmodel_digest={server.digest}\n"
              f"(ready in {time.monotonic() - started:.1f} s)", flush=True)
        if not command:
            while not stop["now"] and server.process.poll() is None:
                time.sleep(0.2)
            return 0 if stop["now"] else 1
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url,
               "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "unused"), "PAGEMILL_RELABEL_MODEL": server.model,
               MODEL_DIGEST_ENV: server.digest}
        child = subprocess.Popen(command, env=env)
        if stop["now"] and child.poll() is None:  # a signal between the start and `child` naming it
            child.send_signal(stop["signum"])
        while child.poll() is None:
            try:
                child.wait(0.5)
            except subprocess.TimeoutExpired:
                pass
        return child.returncode
    finally:
        server.stop()


class _Stopped(Exception):
    """SIGTERM/SIGINT while ``main`` starts the server: stop it and exit 128 + signum, running no command."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _end_with_parent() -> None:
    """In the server's process, before it runs: Linux sends it SIGTERM when the process that started it ends,
    even by SIGKILL, so a killed ``relabel.serve`` leaves no server holding its port and the model's memory."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


if __name__ == "__mp_main__":
    # transformers serve's model process (multiprocessing "spawn") runs the main module of the server, this one,
    # under this name before it loads the model: the processor class must be registered there too
    register_processor()

if __name__ == "__main__":
    sys.exit(main())
