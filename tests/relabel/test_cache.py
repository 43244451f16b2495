"""The SQLite answer cache: keys, concurrent writers, and a killed writer keeps what it committed."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3

import pytest

from relabel.cache import MODEL_DIGEST_ENV, AnswerCache, request_key
from relabel.client import Answer, ChatRequest


def _put_many(path: str, start: int, n: int, kill_after: int = 0) -> None:
    cache = AnswerCache(path)
    for i in range(start, start + n):
        cache.put(f"k{i}", "m", "v", "", "{}", Answer(f"text {i}", "stop", 3, 4))
        if kill_after and i - start + 1 == kill_after:
            os._exit(9)  # no close, no cleanup: what a kill -9 leaves


def test_key_depends_on_model_prompt_version_image_text_and_sampling():
    base = ChatRequest("Transcribe.", b"png-bytes", 64, 0.0, 0)
    key = request_key("m", "v1", base)[0]
    assert request_key("m", "v1", ChatRequest("Transcribe.", b"png-bytes", 64, 0.0, 0))[0] == key
    others = [request_key("m2", "v1", base), request_key("m", "v2", base),
              request_key("m", "v1", ChatRequest("Transcribe.", b"other", 64, 0.0, 0)),
              request_key("m", "v1", ChatRequest("Other.", b"png-bytes", 64, 0.0, 0)),
              request_key("m", "v1", ChatRequest("Transcribe.", b"png-bytes", 32, 0.0, 0)),
              request_key("m", "v1", ChatRequest("Transcribe.", b"png-bytes", 64, 0.7, 0)),
              request_key("m", "v1", ChatRequest("Transcribe.", b"png-bytes", 64, 0.0, 1))]
    assert len({k for k, _, _ in others} | {key}) == 8


def test_key_depends_on_the_image_size_limit_and_is_unchanged_without_one():
    request = ChatRequest("Transcribe.", b"png-bytes", 64, 0.0, 0)
    as_stored = request_key("m", "v1", request)[0]
    assert request_key("m", "v1", request, max_image_side=0)[0] == as_stored
    assert len({as_stored, request_key("m", "v1", request, 768)[0], request_key("m", "v1", request, 1024)[0]}) == 3
    text_only = ChatRequest("Say hi.", None, 64, 0.0, 0)  # no image, nothing resized: the limit does not matter
    assert request_key("m", "v1", text_only, 768)[0] == request_key("m", "v1", text_only)[0]


def test_key_depends_on_the_model_digest_and_is_unchanged_without_one(monkeypatch):
    """The same model name (relabel.serve's: the served path) with other content behind it is asked again."""
    request = ChatRequest("Transcribe.", b"png-bytes", 64, 0.0, 0)
    monkeypatch.delenv(MODEL_DIGEST_ENV, raising=False)
    plain = request_key("/tmp/ck", "v1", request)[0]
    assert request_key("/tmp/ck", "v1", request, model_digest="")[0] == plain
    monkeypatch.setenv(MODEL_DIGEST_ENV, "")  # empty: as unset
    assert request_key("/tmp/ck", "v1", request)[0] == plain
    monkeypatch.setenv(MODEL_DIGEST_ENV, "digest-a")
    first = request_key("/tmp/ck", "v1", request)[0]
    assert request_key("/tmp/ck", "v1", request, model_digest="digest-a")[0] == first
    monkeypatch.setenv(MODEL_DIGEST_ENV, "digest-b")  # the checkpoint at that path was rewritten
    assert len({plain, first, request_key("/tmp/ck", "v1", request)[0]}) == 3


def test_two_processes_writing_one_cache_do_not_corrupt_it(tmp_path):
    path = str(tmp_path / "c.sqlite")
    AnswerCache(path)
    ctx = mp.get_context("spawn")
    workers = [ctx.Process(target=_put_many, args=(path, start, 150)) for start in (0, 100)]  # 50 keys overlap
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    cache = AnswerCache(path)
    assert len(cache) == 250 and cache.get("k120").text == "text 120" and cache.get("k120").cached
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_killed_writer_keeps_every_answer_it_committed(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ctx = mp.get_context("spawn")
    worker = ctx.Process(target=_put_many, args=(path, 0, 50, 17))
    worker.start()
    worker.join(120)
    assert worker.exitcode == 9
    assert len(AnswerCache(path)) == 17


def test_an_object_store_path_is_refused():
    with pytest.raises(ValueError, match="POSIX"):
        AnswerCache("gs://bucket/cache.sqlite")
