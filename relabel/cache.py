"""Every answered request on disk before it is used: a rerun sends nothing for answered requests, and
a crash loses only what was in flight.

The cache is one SQLite file (``answers`` table, WAL journal). Why SQLite rather than LMDB or Parquet:

- each answer is committed on its own as it arrives (one small transaction, a few hundred
  microseconds next to a request of 0.1-10 s), so a kill -9 between two answers loses nothing that
  was answered; Parquet is written a file at a time and would lose the open file's rows;
- several workers (Beam's multi-process DirectRunner, two runs of the same stage) write one file
  safely: SQLite serialises writers with its file lock and ``busy_timeout``, and ``INSERT OR IGNORE``
  on the key makes a duplicate answer harmless; LMDB would do too but needs a pre-sized map and a
  package, while ``sqlite3`` ships with Python;
- a lookup is one primary-key read; the file can be inspected with any SQLite client.

The price: SQLite needs a POSIX file lock, so the cache lives on a local or shared POSIX file system
(the run's output folder when that is local, else ``cache_path``), not on ``gs://``/``s3://``: a URI
there is refused at start-up with that message.

The key is the sha256 of the model, the prompt version, the page image's sha256, the prompt text and
the sampling parameters (``max_tokens``, ``temperature``, ``seed``), the client's ``max_image_side`` when
set, and the model's digest ``$PAGEMILL_RELABEL_MODEL_DIGEST`` when set (``python -m relabel.serve`` sets it
to a hash of the served checkpoint's content: a model name is a path there, and a checkpoint rewritten at
that path is another model): a new prompt version, model, model digest, seed or image size asks again;
nothing else does. Failed requests (rejected, timed out, server errors: ``RequestFailed``) are not
cached, so a rerun retries them. Every
answer is cached, also one the stage cannot use (empty, truncated, a verdict that does not parse): the
same request at the same seed would get it again, so a rerun does not ask; a new seed or a deleted cache
file does.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

from relabel.client import Answer, ChatRequest

# the served model's content digest (relabel.serve sets it); part of every cache key when set
MODEL_DIGEST_ENV = "PAGEMILL_RELABEL_MODEL_DIGEST"

SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
  key TEXT PRIMARY KEY,
  model TEXT NOT NULL,
  prompt_version TEXT NOT NULL,
  image_sha256 TEXT NOT NULL,
  params TEXT NOT NULL,
  answer TEXT NOT NULL,
  created REAL NOT NULL
)
"""


def request_key(model: str, prompt_version: str, request: ChatRequest, max_image_side: int = 0,
                model_digest: str | None = None) -> tuple[str, str, str]:
    """(key, image sha256, params JSON) of one request. ``max_image_side``: the client's size limit, which
    changes the image sent (0, sending the image as stored, leaves the key as it was before the limit existed).
    ``model_digest``: the model's content digest, by default ``$PAGEMILL_RELABEL_MODEL_DIGEST`` (empty or unset
    leaves the key as it was before the digest existed)."""
    if model_digest is None:
        model_digest = os.environ.get(MODEL_DIGEST_ENV, "")
    image_sha = hashlib.sha256(request.image).hexdigest() if request.image is not None else ""
    params = {**request.params(), "text_sha256": hashlib.sha256(request.text.encode()).hexdigest()}
    if max_image_side and request.image is not None:
        params["max_image_side"] = max_image_side
    params = json.dumps(params, sort_keys=True)
    blob = json.dumps([model, prompt_version, image_sha, params, *([model_digest] if model_digest else [])])
    return hashlib.sha256(blob.encode()).hexdigest(), image_sha, params


class AnswerCache:
    """The SQLite answer cache at ``path`` (created with its folder). Thread-safe; open one per process
    (the connection is reopened after a fork or unpickling)."""

    def __init__(self, path: str | os.PathLike):
        path = str(path)
        if "://" in path:
            raise ValueError(f"relabel cache {path!r}: SQLite needs a local or shared POSIX path, not an object "
                             "store URI; set cache_path to a local folder")
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.connection()  # create it now: a bad path fails at start-up

    def __getstate__(self) -> dict:
        return {"path": str(self.path)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    def connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA busy_timeout=60000")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed answer survives a process crash
            conn.execute(SCHEMA)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def get(self, key: str) -> Answer | None:
        with self._lock:
            row = self.connection().execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return Answer.from_json(row[0]) if row else None

    def put(self, key: str, model: str, prompt_version: str, image_sha256: str, params: str, answer: Answer) -> None:
        with self._lock:
            self.connection().execute(
                "INSERT OR IGNORE INTO answers VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, model, prompt_version, image_sha256, params, answer.to_json(), time.time()))

    def __len__(self) -> int:
        with self._lock:
            return self.connection().execute("SELECT COUNT(*) FROM answers").fetchone()[0]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


__all__ = ["MODEL_DIGEST_ENV", "AnswerCache", "request_key"]
