"""What the three stages share: asking through the cache, per-record counters, and running many records'
coroutines on one event loop.

``RequestStage`` is the base of the relabel, audit and preference stages. Its subclasses write one
coroutine, ``async handle(record, ask) -> list[PageRecord]`` (raising ``Dropped``/``RecordError`` like
any stage). The base gives them:

- ``__call__(record)``: the usual per-record stage (``python -m pipelines.stage``, ``apply_stage``);
- ``run_batch(records)``: every record's coroutine at once on the stage's event loop, bounded by the
  client's ``concurrency``; returns per record its outputs or its exception, in order, which the Beam
  wrapper (``pipelines/relabel_stages.py``) accounts for as ``apply_stage`` does;
- the start-up check: the endpoint must list its models when the stage is built, before any work.

The event loop runs in a daemon thread of the worker, created on first use (also after unpickling), so
the HTTP connection pool survives from batch to batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable

from relabel.cache import AnswerCache, request_key
from relabel.client import Answer, ChatClient, ChatRequest, ClientConfig, RequestFailed, Spent
from schemas.deadletter import Dropped, RecordError
from schemas.math_unit_tests import run_cache_dir
from schemas.page import PageRecord

LoopDetector = Callable[[str], "str | None"]  # label -> the kind of degeneration loop at its end, or None


@dataclass
class Tally:
    """One record's requests: counted into ``quality[stage]["counters"]`` (summed per source in the manifest).
    ``requests`` are HTTP requests sent (every attempt, retries included), the tokens those the server reported
    for all of them (failed attempts included), ``cache_hits`` answers taken from the cache (nothing sent)."""

    requests: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed: dict[str, int] = field(default_factory=dict)

    def spend(self, spent: Spent) -> None:
        self.requests += spent.attempts
        self.prompt_tokens += spent.prompt_tokens
        self.completion_tokens += spent.completion_tokens

    def counters(self) -> dict[str, int]:
        return {"requests": self.requests, "cache_hits": self.cache_hits, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


class Asker:
    """Ask one request for one record: from the cache when answered before, else from the server, stored
    before it is returned."""

    def __init__(self, client: ChatClient, cache: AnswerCache, tally: Tally):
        self.client, self.cache, self.tally = client, cache, tally

    async def __call__(self, request: ChatRequest, prompt_version: str) -> Answer:
        key, image_sha, params = request_key(self.client.model, prompt_version, request, self.client.cfg.max_image_side)
        cached = self.cache.get(key)
        if cached is not None:
            self.tally.cache_hits += 1
            return cached
        try:
            answer = await self.client.complete(request)
        except RequestFailed as exc:
            self.tally.spend(exc.spent)  # what the failed attempts cost rides on the dead letter
            raise RecordError(f"request_{exc.reason}", str(exc)) from exc
        self.tally.spend(answer.spent)  # every attempt, the failed ones before this answer too
        self.cache.put(key, self.client.model, prompt_version, image_sha, params, answer)
        return answer


class _LoopThread:
    """An asyncio loop in a daemon thread: ``run(coro)`` blocks until the coroutine is done."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="relabel-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


def image_sha(record: PageRecord) -> str:
    return record.image_sha256 or hashlib.sha256(record.image).hexdigest()


def selected(record: PageRecord, sources: Iterable[str], domains: Iterable[str], tasks: Iterable[str]) -> bool:
    """Whether a record is one a stage works on: each non-empty filter must contain the record's value."""
    sources, domains, tasks = tuple(sources), tuple(domains), tuple(tasks)
    return ((not sources or record.source in sources) and (not domains or record.domain in domains)
            and (not tasks or record.task in tasks))


class RequestStage:
    """Base of the stages that ask a model (see the module doc). Subclasses set ``name`` and implement
    ``wants(record)`` and ``async handle(record, ask)``."""

    name = "request"

    def __init__(self, client_cfg: ClientConfig, cache_path: str, loop_detector: LoopDetector | None = None,
                 check: bool = True):
        self.client_cfg = client_cfg
        self.cache_path = cache_path
        self.loop_detector = loop_detector
        self.model = ""
        self._runtime: tuple[_LoopThread, ChatClient] | None = None
        self._cache: AnswerCache | None = None
        self.katex_cache: str | None = None  # bind_output: the run's; None: the default cache
        if check:
            self.model = self._runner()[0].run(self._runner()[1].check())

    # -- pickling: Beam ships the stage to workers; loop, client and connection are per process ----------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_runtime"], state["_cache"] = None, None
        return state

    def bind_output(self, output: str) -> None:
        """Put the cache under the run's output folder when ``cache_path`` is empty (called by the DAG and by
        ``python -m pipelines.stage`` before any record); and renders of formulas the stage checks
        (``math`` unit tests) in ``<output>/_katex`` (``run_cache_dir``), never the user's home."""
        self.katex_cache = run_cache_dir(output)
        if not self.cache_path:
            if "://" in output:
                raise ValueError(f"{self.name}: the run's output {output!r} is an object store, where the SQLite "
                                 "cache cannot live; set cache_path to a local or shared folder")
            self.cache_path = f"{output.rstrip('/')}/_relabel/cache.sqlite"
        self.cache  # opened now: a bad path fails before any work

    @property
    def cache(self) -> AnswerCache:
        if self._cache is None:
            if not self.cache_path:
                raise ValueError(f"{self.name}: cache_path is empty and no run output was bound")
            self._cache = AnswerCache(self.cache_path)
        return self._cache

    def _runner(self) -> tuple[_LoopThread, ChatClient]:
        if self._runtime is None:
            client = ChatClient(self.client_cfg)
            if self.model:
                client.model = self.model
            self._runtime = (_LoopThread(), client)
        return self._runtime

    @property
    def client(self) -> ChatClient:
        return self._runner()[1]

    # -- what subclasses implement ------------------------------------------------------------------
    def wants(self, record: PageRecord) -> bool:
        raise NotImplementedError

    async def handle(self, record: PageRecord, ask: Asker) -> list[PageRecord]:
        raise NotImplementedError

    # -- running ------------------------------------------------------------------------------------
    async def _one(self, record: PageRecord) -> list[PageRecord] | BaseException:
        if not self.wants(record):
            return [record]
        tally = Tally()
        try:
            outputs = await self.handle(record, Asker(self.client, self.cache, tally))
        except (Dropped, RecordError) as exc:  # accounted by the caller, with what the record's requests cost
            exc.counters = tally.counters()
            return exc
        except Exception as exc:  # a bug: raised by the caller
            return exc
        if outputs:  # on the first output only: apply_stage sums the counters of every output
            finding = outputs[0].quality.setdefault(self.name, {})
            if isinstance(finding, dict):
                finding["counters"] = tally.counters()
        return outputs

    async def _many(self, records: list[PageRecord]) -> list[list[PageRecord] | BaseException]:
        return list(await asyncio.gather(*(self._one(r) for r in records)))

    def run_batch(self, records: list[PageRecord]) -> list[list[PageRecord] | BaseException]:
        """Per record, in order: its outputs, or the exception its handling raised."""
        loop, _ = self._runner()
        return loop.run(self._many(list(records)))

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        result = self.run_batch([record])[0]
        if isinstance(result, BaseException):
            raise result
        return result


__all__ = ["Asker", "LoopDetector", "RequestStage", "Tally", "image_sha", "selected"]
