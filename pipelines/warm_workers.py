"""SDK worker processes started before the pipeline is built, so that their start-up overlaps the launcher's.

Beam's FnApiRunner (the DirectRunner's ``multi_processing`` mode) starts its SDK worker processes when it
runs the first stage: after the launcher has imported Beam and built and translated the graph (~1.7 s for
the corpus DAG here). Each worker then imports Beam and the stage modules (~1.1 s of CPU, on the cores the
launcher and the other workers need too) before it takes a bundle. At the end the runner stops its
workers one after the other, and each stop waits for that process's whole interpreter teardown (~0.3 s).

``WarmWorkers.start`` starts the processes as soon as the launcher knows it will need them: forked from
the launcher (nothing left to import) when that is safe, else fresh interpreters (``serve``). Each binds
a Unix socket in a private folder, imports the SDK harness and the given modules, and waits. The runner
is given ``command()`` (``python -I .../warm_workers.py attach FOLDER``) instead of Beam's own worker
command line. An ``attach`` process claims a waiting worker, hands it the environment Beam set for the
worker (control and logging addresses, pipeline options, worker id), and exits with the worker's exit
code, which the worker sends as soon as its harness returns; the worker then ends without the
interpreter's teardown. An ``attach`` that finds no waiting worker (all claimed, or one that died)
becomes Beam's own worker, so a run never depends on the pool.

A waiting worker whose launcher has gone exits by itself; ``close`` stops the ones never claimed.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

BEAM_WORKER_MODULE = "apache_beam.runners.worker.sdk_worker_main"
# Beam's own command line for a multi-processing worker (FnApiRunner.run_pipeline builds the same string).
BEAM_WORKER_COMMAND = f"{sys.executable} -m {BEAM_WORKER_MODULE}"
WARM_ENV = "PAGEMILL_WARM_WORKER"  # set in a warm worker's environment: which slot it serves
CONNECT_WAIT_S = 30.0  # how long ``attach`` waits for a just-started worker to open its socket
GRPC_THREADS = ("grpc", "event_engine", "lifeguard")  # what gRPC's core names its threads (Linux thread names)
# pipelines.quiet's stderr pump: it reads a pipe and writes with os.write, no lock a worker needs
SAFE_THREADS = ("quiet-stderr",)
PARENT_CHECK_S = 0.5  # how often a waiting worker checks that its launcher is still there
CLOSE_WAIT_S = 10.0  # how long ``close`` waits for a claimed worker to exit before it kills it


class WarmWorkers:
    """``count`` waiting SDK worker processes that import ``modules`` while they wait.

    ``fork``: fork them from this process, which has imported Beam and the stage modules already, so they
    start with nothing to import; only where ``can_fork`` says it is safe (a worker forked after gRPC was
    used here hangs on its first call). Otherwise they are fresh interpreters (``python -m
    pipelines.warm_workers serve``), which still start before the graph is built.
    """

    def __init__(self, folder: Path, processes: list):
        self.folder = folder
        self.processes = processes  # subprocess.Popen or _Forked: each has pid, kill() and wait()

    @classmethod
    def start(cls, count: int, modules: tuple[str, ...] = (), fork: bool = False) -> WarmWorkers:
        folder = Path(tempfile.mkdtemp(prefix="pagemill-workers-"))  # mode 0700: only this user connects
        parent = os.getpid()
        processes: list = []
        sys.stdout.flush()
        sys.stderr.flush()
        for slot in range(count):
            (folder / f"{slot}.slot").touch()
            sock = str(folder / f"{slot}.sock")
            if fork:
                processes.append(_Forked.start(sock, parent, modules, slot))
            else:
                command = [sys.executable, "-m", "pipelines.warm_workers", "serve", sock, str(parent), *modules]
                processes.append(subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                                  env={**os.environ, WARM_ENV: str(slot)}))
        pool = cls(folder, processes)
        atexit.register(pool.close)
        return pool

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def command(self) -> str:
        """The worker command line for the runner: attach to a waiting worker of this pool. This file run as a
        script in isolated mode (``-I``): the attach needs only the standard library, so it starts in ~20 ms
        and finds this file whatever the working directory and ``sys.path`` are."""
        return (f"{shlex.quote(sys.executable)} -I {shlex.quote(os.path.abspath(__file__))} attach "
                f"{shlex.quote(str(self.folder))}")

    def close(self) -> None:
        """Stop the workers no runner claimed and reap them all. A claimed one exits as soon as its harness
        returns, which is before its runner's run ends, even a failed one (the runner closes its workers'
        channels either way); one still running ``CLOSE_WAIT_S`` later is killed."""
        for slot, process in enumerate(self.processes):
            if _claim(self.folder, slot):
                process.kill()
            try:
                process.wait(timeout=CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes = []
        shutil.rmtree(self.folder, ignore_errors=True)
        atexit.unregister(self.close)


class _Forked:
    """A worker forked from this process."""

    def __init__(self, pid: int):
        self.pid = pid

    @classmethod
    def start(cls, sock: str, parent: int, modules: tuple[str, ...], slot: int) -> _Forked:
        pid = os.fork()
        if pid:
            return cls(pid)
        # the worker: it never returns into the launcher's code, nor runs the exit handlers it inherited
        code = 1
        try:
            os.environ[WARM_ENV] = str(slot)
            code = serve(sock, parent, modules)
        except BaseException:  # noqa: BLE001 - reported; the attach then falls back to Beam's own worker
            traceback.print_exc()
        finally:
            os._exit(code)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> None:
        """Reap the worker; ``subprocess.TimeoutExpired`` if it is still running after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(f"warm SDK worker {self.pid}", timeout)
                time.sleep(0.01)


def can_fork() -> bool:
    """Whether forking workers from this process is safe: Linux, called from the main thread, no other
    Python thread but ``SAFE_THREADS`` (a lock another thread holds at the fork, such as ``sys.stderr``'s
    while it writes, stays held forever in the child), and no gRPC thread (its state does not survive a
    fork). The caller also knows whether it has run a pipeline before."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    main = threading.main_thread()
    if threading.current_thread() is not main or any(
            t is not main and t.name not in SAFE_THREADS for t in threading.enumerate()):
        return False
    try:
        names = [Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in os.listdir("/proc/self/task")]
    except OSError:
        return False
    return not any(name.startswith(GRPC_THREADS) for name in names)


def _claim(folder: Path, slot: int) -> bool:
    try:
        os.close(os.open(folder / f"{slot}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False
    except FileNotFoundError:  # the pool is closed
        return False


def _remove_slot(sock: Path) -> None:
    """A worker's files in its pool's folder (``<slot>.sock``, ``.slot``, ``.claim``) removed, and the
    folder with them once it is empty: what ``WarmWorkers.close`` would have done, had its launcher lived."""
    slot = sock.name.removesuffix(".sock")
    for suffix in (".sock", ".slot", ".claim"):
        with contextlib.suppress(FileNotFoundError):
            (sock.parent / f"{slot}{suffix}").unlink()
    with contextlib.suppress(OSError):  # another worker's files are still there: the last one out removes it
        sock.parent.rmdir()


def serve(sock_path: str, parent: int, modules: tuple[str, ...]) -> int:
    """A waiting worker: listen at once, import, then run as Beam's worker in the environment handed over.

    Its caller ends the process with ``os._exit``: every bundle's outputs are with the runner and its files
    committed (a bundle ends durable), so the interpreter's teardown (~0.3 s of CPU a worker here, while the
    launcher finishes on the same cores) and the launcher's exit handlers, which a forked child inherits,
    have nothing to do."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(1)
    harness = importlib.import_module(BEAM_WORKER_MODULE)
    for name in modules:
        importlib.import_module(name)
    server.settimeout(PARENT_CHECK_S)
    while True:
        try:
            conn, _ = server.accept()
            break
        except TimeoutError:
            if os.getppid() != parent:  # the launcher is gone: nobody will attach, nor clean its folder up
                server.close()
                _remove_slot(Path(sock_path))
                return 0
        except KeyboardInterrupt:  # Ctrl-C in the launcher's terminal reaches its whole process group
            return 130
    server.close()
    conn.settimeout(None)
    os.environ.update(json.loads(_read_all(conn)))
    try:
        harness.main(sys.argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as Beam's worker would: a traceback and exit code 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    conn.sendall(str(code).encode())
    conn.close()
    logging.shutdown()
    return code


def attach(folder: str) -> int:
    """Hand this process's environment to a waiting worker and wait for its exit code; with none left,
    become Beam's worker."""
    slots = sorted(int(p.stem) for p in Path(folder).glob("*.slot"))
    for slot in slots:
        if not _claim(Path(folder), slot):
            continue
        conn = _connect(os.path.join(folder, f"{slot}.sock"))
        if conn is None:
            continue
        conn.sendall(json.dumps(dict(os.environ)).encode())
        conn.shutdown(socket.SHUT_WR)
        reply = _read_all(conn)
        if not reply:
            print(f"warm SDK worker {slot} ended without an exit code", file=sys.stderr)
            return 1
        return int(reply)
    os.execv(sys.executable, [sys.executable, "-m", BEAM_WORKER_MODULE])
    return 1  # not reached


def _connect(path: str) -> socket.socket | None:
    """A connection to the worker at ``path``; None if it never opens its socket or no longer listens."""
    deadline = time.monotonic() + CONNECT_WAIT_S
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except FileNotFoundError:  # not bound yet
            conn.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)
        except ConnectionRefusedError:  # it died after binding
            conn.close()
            return None


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"] and len(argv) >= 3:
        code = serve(argv[1], int(argv[2]), tuple(argv[3:]))
        os._exit(code)  # see serve
    if argv[:1] == ["attach"] and len(argv) == 2:
        return attach(argv[1])
    print("usage: python -m pipelines.warm_workers serve SOCKET PARENT_PID [MODULE...] | attach FOLDER",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
