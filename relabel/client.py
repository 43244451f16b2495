"""The OpenAI chat-completions client every relabel stage uses: bounded concurrency, timeouts, retries
classified by the project, images as ``data:`` URIs, token counts.

``ChatClient.complete(request)`` sends one ``ChatRequest`` through ``openai.AsyncOpenAI`` and returns an
``Answer`` (text, ``finish_reason``, token counts) or raises ``RequestFailed``, whose ``reason`` becomes
the record's dead-letter reason. The openai client's own retries are off (``max_retries=0``): the
decision is made here, once, so the numbers of attempts are exact and deterministic failures are not
retried blindly:

- 429 and 503: back off, honouring ``Retry-After`` (capped at ``max_retry_after_s``);
- other 5xx, 408, timeouts, dropped connections, bodies that are not a chat completion (a message whose
  content is neither text nor a list of text parts included): back off and retry;
- 400, 401/403/404, 422: fail at once with the server's message (``request_rejected``);
- ``timeout_s`` bounds the whole answer, not just each read: a server that trickles its answer a byte at
  a time is a timeout too (one attempt, connecting included, is bounded by ``timeout_s +
  connect_timeout_s``);
- an answer whose text is not valid Unicode (a lone surrogate) or is longer than ``max_tokens`` could
  give (``MAX_CHARS_PER_TOKEN`` a token, at least ``MIN_ANSWER_CHARS``) is not a chat completion: retried,
  never cached;
- the same failure ``max_attempts`` times in a row: fail (``server_error``, ``rate_limited``,
  ``timeout``, ``connection_failed``, ``bad_response``) with the last message: a dead letter, never an
  endless loop.

Only standard fields are sent (``model``, ``messages``, ``max_tokens``, ``temperature``, ``seed``), so
the same requests work against vLLM, SGLang and ``transformers serve``; k candidates are k requests
with k seeds (``n`` is ignored by some servers). ``X-Request-ID`` carries the caller's id (the record
id and the request's role), which servers echo into their logs.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import email.utils
import io
import json
import os
import random
from dataclasses import dataclass, field
from typing import Any

from schemas.config import option

MODEL_ENV = "PAGEMILL_RELABEL_MODEL"
RETRY_STATUSES_BACKOFF = (429, 503)
NO_RETRY_STATUSES = (400, 401, 403, 404, 413, 422)


class RelabelError(Exception):
    """A relabel failure with a short ``reason`` (a dead-letter reason) and a message."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class ServerUnavailable(RelabelError, ConnectionError):
    """The endpoint does not answer at start-up: raised before any record is processed."""


class RequestFailed(RelabelError):
    """One request failed for good (rejected, or the same failure ``max_attempts`` times)."""

    def __init__(self, reason: str, message: str, attempts: int = 1):
        super().__init__(reason, message)
        self.attempts = attempts


@dataclass(frozen=True)
class ClientConfig:
    """Where the OpenAI-compatible endpoint is and how hard to push it."""

    base_url: str = option("", help="the endpoint's /v1 URL; empty: $OPENAI_BASE_URL (python -m relabel.serve "
                                    "sets it for the command it runs)")
    api_key_env: str = option("OPENAI_API_KEY", help="environment variable holding the API key (keys never go in "
                                                     "configs); unset: the placeholder 'unused'")
    model: str = option("", help="model name sent with every request; empty: $PAGEMILL_RELABEL_MODEL, else the "
                                 "server's only model from /v1/models")
    concurrency: int = option(32, help="requests in flight at most, per worker")
    timeout_s: float = option(120.0, help="seconds one request may take once connected (the whole answer, not "
                                          "one read) before it is retried")
    connect_timeout_s: float = option(5.0, help="seconds to open a connection")
    max_attempts: int = option(4, help="a request failing the same way this many times in a row is dead-lettered")
    backoff_s: float = option(0.5, help="first backoff; doubles per failed attempt, with jitter")
    max_backoff_s: float = option(8.0, help="longest backoff between attempts")
    max_retry_after_s: float = option(60.0, help="longest Retry-After honoured; longer ones are cut to this")
    max_image_side: int = option(0, help="re-encode page images whose longer side exceeds this (0: send as stored)")
    startup_timeout_s: float = option(10.0, help="seconds the start-up check waits for /v1/models")

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("timeout_s and connect_timeout_s must be > 0")


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion: a user turn of an optional page image and a text, plus sampling params."""

    text: str
    image: bytes | None = None  # encoded page image (PNG/JPEG/WebP) or None for a text-only turn
    max_tokens: int = 1024
    temperature: float = 0.0
    seed: int = 0
    request_id: str = ""

    def params(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}


@dataclass
class Answer:
    text: str
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    attempts: int = 1

    def to_json(self) -> str:
        return json.dumps({"text": self.text, "finish_reason": self.finish_reason,
                           "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens})

    @classmethod
    def from_json(cls, blob: str) -> Answer:
        return cls(**json.loads(blob), cached=True)


@dataclass
class ClientStats:
    """What this client sent: attempts (HTTP requests made), failures by kind."""

    attempts: int = 0
    answered: int = 0
    failures: dict[str, int] = field(default_factory=dict)


def image_mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"RIFF"):
        return "image/webp"
    return "application/octet-stream"


def image_data_uri(data: bytes, max_side: int = 0) -> str:
    """``data:`` URI of the page image: the stored bytes, or a PNG re-encoded to ``max_side``."""
    if max_side:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            if max(img.size) > max_side:
                scale = max_side / max(img.size)
                small = img.convert("RGB").resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))))
                buf = io.BytesIO()
                small.save(buf, format="PNG")
                data = buf.getvalue()
    return f"data:{image_mime(data)};base64,{base64.b64encode(data).decode('ascii')}"


def messages_for(request: ChatRequest, max_side: int = 0) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if request.image is not None:
        content.append({"type": "image_url", "image_url": {"url": image_data_uri(request.image, max_side)}})
    content.append({"type": "text", "text": request.text})
    return [{"role": "user", "content": content}]


def message_text(content: Any) -> str:
    """A chat answer's ``message.content`` as text: a string, or the text parts of a list of parts (the
    request's own format, which some servers answer in). Anything else is not a chat answer: TypeError,
    which ``_failure`` counts as ``bad_response``."""
    if content is None or isinstance(content, str):
        text = content or ""
    elif isinstance(content, list) and all(isinstance(part, dict) and part.get("type") == "text"
                                           and isinstance(part.get("text"), str) for part in content):
        text = "".join(part["text"] for part in content)
    else:
        raise TypeError(f"message content is a {type(content).__name__}, not text: {str(content)[:120]}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # JSON's "\ud800": no file or shard could hold it
        raise ValueError(f"answer text is not valid Unicode ({exc.reason} at {exc.start})") from None
    return text


# A token is a few characters; an answer far longer than ``max_tokens`` could give is not one (a misbehaving
# server): refused before it is cached or used. Never below MIN_ANSWER_CHARS, so a short request is not
# held to a few characters.
MAX_CHARS_PER_TOKEN = 32
MIN_ANSWER_CHARS = 65_536


def _failure(exc: BaseException) -> tuple[str, bool, float | None, str]:
    """(kind, retryable, retry-after seconds, message) of one failed attempt."""
    import openai

    if isinstance(exc, TimeoutError):  # asyncio.wait_for: the whole request took longer than timeout_s
        return "timeout", True, None, "no complete answer within timeout_s"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", True, None, str(exc)
    if isinstance(exc, openai.APIConnectionError):
        return "connection_failed", True, None, f"{exc}: {exc.__cause__!r}"
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = f"HTTP {status}: {_body_text(exc)}"
        if status in NO_RETRY_STATUSES:
            return "request_rejected", False, None, message
        if status == 408:  # the server timed the request out: as a timeout of ours
            return "timeout", True, None, message
        if status == 429:
            return "rate_limited", True, _retry_after(exc), message
        if status >= 500:
            return "server_error", True, _retry_after(exc) if status == 503 else None, message
        return "request_rejected", False, None, message
    if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, ValueError, KeyError,
                        TypeError, AttributeError, IndexError, RecursionError)):
        return "bad_response", True, None, f"{type(exc).__name__}: {exc}"
    raise exc


def _body_text(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        return str(body.get("message") or body.get("detail") or body)[:500]
    if body is not None:
        return str(body)[:500]
    return str(exc)[:500]


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                pass
            try:  # RFC 9110 also allows an HTTP-date
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=datetime.timezone.utc)
            return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())
    return None


class ChatClient:
    """``AsyncOpenAI`` with the project's retry rules; one per event loop (the connection pool is bound
    to the loop that first uses it)."""

    def __init__(self, cfg: ClientConfig = ClientConfig()):
        self.cfg = cfg
        self.base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL", "")
        if not self.base_url:
            raise ServerUnavailable("no_endpoint", "relabel: no endpoint: set base_url in the stage config or "
                                                   "$OPENAI_BASE_URL (python -m relabel.serve -- CMD sets it)")
        self.model = cfg.model or os.environ.get(MODEL_ENV, "")
        self.stats = ClientStats()
        self._client: Any = None
        self._semaphore: asyncio.Semaphore | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=os.environ.get(self.cfg.api_key_env) or "unused", max_retries=0,
                timeout=openai.Timeout(self.cfg.timeout_s, connect=self.cfg.connect_timeout_s))
        return self._client

    async def check(self) -> str:
        """The model name to use; ``ServerUnavailable`` when the endpoint does not list models in time."""
        import openai

        try:
            listed = await self.client.with_options(timeout=self.cfg.startup_timeout_s, max_retries=1).models.list()
        except openai.OpenAIError as exc:
            raise ServerUnavailable("server_unavailable", f"relabel: endpoint {self.base_url} does not answer "
                                                          f"GET /models: {exc!r}") from exc
        names = [m.id for m in listed.data]
        if not self.model:
            if len(names) != 1:
                raise ServerUnavailable("no_model", f"relabel: set model: the endpoint {self.base_url} serves "
                                                    f"{names}")
            self.model = names[0]
        return self.model

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _gate(self) -> asyncio.Semaphore:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.cfg.concurrency)
        return self._semaphore

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        return {"model": self.model, "messages": messages_for(request, self.cfg.max_image_side), **request.params()}

    async def complete(self, request: ChatRequest) -> Answer:
        """The answer, or ``RequestFailed`` (see the module doc for what is retried)."""
        payload = self.payload(request)
        headers = {"X-Request-ID": request.request_id} if request.request_id else {}
        last_kind, streak, attempt = "", 0, 0
        while True:
            attempt += 1
            async with self._gate():
                self.stats.attempts += 1
                try:
                    completion = await asyncio.wait_for(
                        self.client.chat.completions.create(**payload, extra_headers=headers),
                        self.cfg.timeout_s + self.cfg.connect_timeout_s)
                    choice = completion.choices[0]
                    usage = completion.usage
                    answer = Answer(message_text(choice.message.content), str(choice.finish_reason or ""),
                                    int(getattr(usage, "prompt_tokens", 0) or 0),
                                    int(getattr(usage, "completion_tokens", 0) or 0), attempts=attempt)
                    limit = max((payload.get("max_tokens") or 0) * MAX_CHARS_PER_TOKEN, MIN_ANSWER_CHARS)
                    if payload.get("max_tokens") and len(answer.text) > limit:
                        raise ValueError(f"answer of {len(answer.text)} characters for max_tokens "
                                         f"{payload['max_tokens']}: not an answer to this request")
                    self.stats.answered += 1
                    return answer
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # classified below; anything unknown is re-raised by _failure
                    kind, retryable, wait, message = _failure(exc)
            self.stats.failures[kind] = self.stats.failures.get(kind, 0) + 1
            streak = streak + 1 if kind == last_kind else 1
            last_kind = kind
            # the same failure max_attempts times in a row, or mixed failures twice that many times: give up
            if not retryable or streak >= self.cfg.max_attempts or attempt >= 2 * self.cfg.max_attempts:
                raise RequestFailed(kind, f"{request.request_id or 'request'}: {message} "
                                          f"(attempt {attempt})", attempt)
            if wait is None:
                wait = min(self.cfg.max_backoff_s, self.cfg.backoff_s * 2 ** (streak - 1)) * random.uniform(0.75, 1)
            await asyncio.sleep(min(wait, self.cfg.max_retry_after_s))


__all__ = ["Answer", "ChatClient", "ChatRequest", "ClientConfig", "ClientStats", "RelabelError", "RequestFailed",
           "ServerUnavailable", "image_data_uri", "message_text", "messages_for"]
