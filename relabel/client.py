"""The OpenAI chat-completions client every relabel stage uses: bounded concurrency, timeouts, retries
classified by the project, images as ``data:`` URIs, token counts.

``ChatClient.complete(request)`` sends one ``ChatRequest`` through ``openai.AsyncOpenAI`` and returns an
``Answer`` (text, ``finish_reason``, token counts, and in ``spent`` what every attempt of it cost) or raises
``RequestFailed`` (with the same ``spent``), whose ``reason`` becomes the record's dead-letter reason. The
openai client's own retries are off (``max_retries=0``): the decision is made here, once, so the numbers of
attempts are exact and deterministic failures are not retried blindly:

- 429 and 503: back off, honouring ``Retry-After`` (capped at ``max_retry_after_s``);
- other 5xx, 408, timeouts, dropped connections, bodies that are not a chat completion (a message whose
  content is neither text nor a list of text parts included; ``usage`` token counts that are not
  non-negative integers): back off and retry (``bad_response``);
- 400, 401/403/404, 422: fail at once with the server's message (``request_rejected``); so does a
  redirect (3xx): requests go to the configured endpoint and nowhere else, never to where a redirect
  points (the HTTP client does not follow redirects);
- ``timeout_s`` bounds the whole answer, not just each read: a server that trickles its answer a byte at
  a time is a timeout too (one attempt, connecting included, is bounded by ``timeout_s +
  connect_timeout_s``);
- an answer whose text is not valid Unicode (a lone surrogate) or is longer than ``max_tokens`` could
  give (``MAX_CHARS_PER_TOKEN`` a token, at least ``MIN_ANSWER_CHARS``) is not a chat completion: retried,
  never cached. The body is read as it arrives and given up (``bad_response``) once it is longer than
  such an answer could be in JSON (``body_limit``; a ``Content-Length`` above it is refused before any
  of it is read), so a huge body never sits in memory;
- the same failure ``max_attempts`` times in a row: fail (``server_error``, ``rate_limited``,
  ``timeout``, ``connection_failed``, ``bad_response``) with the last message: a dead letter, never an
  endless loop;
- a request that cannot be encoded here (text that is not valid Unicode) is never sent and never blamed
  on the server: ``invalid_request``, at once, no attempt counted.

Only standard fields are sent (``model``, ``messages``, ``max_tokens``, ``temperature``, ``seed``), so
the same requests work against vLLM, SGLang and ``transformers serve``; k candidates are k requests
with k seeds (``n`` is ignored by some servers). ``X-Request-ID`` carries the caller's id (the record
id and the request's role, percent-encoded as UTF-8 where it is not plain ASCII: header values are
ASCII), which servers echo into their logs.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import datetime
import email.utils
import functools
import io
import json
import math
import os
import random
import urllib.parse
import zlib
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


@dataclass
class Spent:
    """What one request cost, over all its attempts: HTTP requests sent and the tokens the server reported
    for them (also for attempts whose answer was refused; an attempt without a usable ``usage`` adds none)."""

    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class RequestFailed(RelabelError):
    """One request failed for good (rejected, or the same failure ``max_attempts`` times); ``spent`` is what
    its attempts cost."""

    def __init__(self, reason: str, message: str, attempts: int = 1, spent: Spent | None = None):
        super().__init__(reason, message)
        self.attempts = attempts
        self.spent = spent if spent is not None else Spent(attempts)


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
    startup_timeout_s: float = option(10.0, help="seconds the start-up check waits for /v1/models, all told (one "
                                                 "request, no retry)")

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
    # every attempt of the request, failed ones included (not cached: an answer from the cache cost nothing)
    spent: Spent = field(default_factory=Spent, compare=False, repr=False)

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
# The body of an answer that long: JSON may spell one character as up to 12 bytes ("\\ud83d\\ude00"), plus room
# for the rest of the completion. A body longer than this is not read to the end (``bad_response``). Other
# answers (the model list, error bodies) are held to DEFAULT_BODY_BYTES.
MAX_BODY_BYTES_PER_CHAR = 12
BODY_OVERHEAD_BYTES = 1 << 20
DEFAULT_BODY_BYTES = 8 << 20
# A usage count above this is not one request's tokens (and would not sum into the manifest's int64).
MAX_USAGE_TOKENS = 2**31 - 1
# ``X-Request-ID``: ASCII that needs no escaping is sent as is, anything else percent-encoded (UTF-8).
_REQUEST_ID_SAFE = "!$&'()*+,;=:@/"


def answer_limit(max_tokens: int) -> int:
    """The longest answer text (characters) a request for ``max_tokens`` tokens can get."""
    return max((max_tokens or 0) * MAX_CHARS_PER_TOKEN, MIN_ANSWER_CHARS)


def body_limit(max_tokens: int) -> int:
    """The longest response body (bytes) read for a request for ``max_tokens`` tokens."""
    return answer_limit(max_tokens) * MAX_BODY_BYTES_PER_CHAR + BODY_OVERHEAD_BYTES


def request_id_header(request_id: str) -> str:
    """``X-Request-ID`` for ``request_id``: header values are ASCII, so anything else (and ``%``) is
    percent-encoded as UTF-8 (``página-1`` -> ``p%C3%A1gina-1``)."""
    return urllib.parse.quote(request_id, safe=_REQUEST_ID_SAFE, errors="surrogatepass")


def usage_tokens(usage: Any) -> tuple[int, int]:
    """(prompt, completion) tokens of a completion's ``usage``: none when it has none; each count must be a
    finite integer from 0 to ``MAX_USAGE_TOKENS``, else ``ValueError`` (``bad_response``)."""
    if usage is None:
        return 0, 0
    import openai

    if isinstance(usage, dict):
        get = usage.get
    elif isinstance(usage, openai.BaseModel):
        def get(name: str) -> Any:
            return getattr(usage, name, None)
    else:
        raise ValueError(f"usage is a {type(usage).__name__}, not an object: {str(usage)[:120]}")
    counts = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = get(name)
        if value is None:
            counts.append(0)
            continue
        whole = isinstance(value, int) or isinstance(value, float) and math.isfinite(value) and value.is_integer()
        if isinstance(value, bool) or not whole or not 0 <= value <= MAX_USAGE_TOKENS:
            raise ValueError(f"usage.{name} is {str(value)[:40]}, not a token count")
        counts.append(int(value))
    return counts[0], counts[1]


class BodyTooLarge(ValueError):
    """A response body longer than this request's answer could be (``body_limit``): ``bad_response``."""


class BadEncoding(ValueError):
    """A response body in a content coding that cannot be read here: ``bad_response``."""


# The body limit of the request being sent: set by ``ChatClient.complete`` around each attempt, read by the
# transport (the openai client gives no per-request hook into its HTTP client's responses).
_BODY_LIMIT: contextvars.ContextVar[int] = contextvars.ContextVar("relabel_body_limit", default=DEFAULT_BODY_BYTES)


def _http() -> Any:
    """The HTTP library the installed openai client is built on: httpx2 (openai 3) or httpx (earlier)."""
    import openai._base_client as base

    module = getattr(base, "httpx2", None) or getattr(base, "httpx", None)
    if module is None:  # pragma: no cover - an openai without either
        import httpx as module
    return module


@functools.lru_cache(maxsize=None)
def _capped_types() -> tuple[type, type]:
    """(CappedStream, CappedTransport) over the HTTP library openai uses (built once)."""
    http = _http()

    class CappedStream(http.AsyncByteStream):
        """``stream``'s bytes (gzip/deflate decoded), ``BodyTooLarge`` once more than ``limit`` arrived or came
        out of the decoder (a small compressed body can decode to gigabytes)."""

        def __init__(self, stream: Any, limit: int, coding: str):
            self.stream, self.limit, self.coding = stream, limit, coding

        async def __aiter__(self):
            limit = self.limit
            decoder = zlib.decompressobj(32 + zlib.MAX_WBITS) if self.coding else None  # a gzip or zlib header
            raw = out = 0
            async for chunk in self.stream:
                raw += len(chunk)
                if raw > limit:
                    raise BodyTooLarge(f"response body longer than {limit} bytes: not an answer to this request")
                if decoder is None:
                    yield chunk
                    continue
                try:
                    data = decoder.decompress(chunk, limit - out + 1)
                except zlib.error as exc:
                    raise BadEncoding(f"{self.coding} body does not decode: {exc}") from None
                out += len(data)
                if out > limit or decoder.unconsumed_tail:
                    raise BodyTooLarge(f"decoded response body longer than {limit} bytes: not an answer to "
                                       "this request")
                if data:
                    yield data
            if decoder is not None:
                data = decoder.flush()
                if out + len(data) > limit:
                    raise BodyTooLarge(f"decoded response body longer than {limit} bytes: not an answer to "
                                       "this request")
                if data:
                    yield data

        async def aclose(self) -> None:
            await self.stream.aclose()

    class CappedTransport(http.AsyncHTTPTransport):
        """A connection pool (no proxy: requests go to the endpoint itself) whose response bodies are held to
        the current request's ``_BODY_LIMIT`` while they arrive."""

        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            limit = _BODY_LIMIT.get()
            coding = response.headers.get("content-encoding", "").strip().lower()
            headers = response.headers
            try:
                if coding in ("", "identity"):
                    coding = ""
                elif coding in ("gzip", "x-gzip", "deflate"):  # decoded here, under the limit
                    headers = [(k, v) for k, v in response.headers.raw
                               if k.lower() not in (b"content-encoding", b"content-length")]
                else:
                    raise BadEncoding(f"response body in content coding {coding[:40]!r}, which was not asked for")
                declared = response.headers.get("content-length", "").strip()
                if declared.isdigit() and int(declared) > limit:
                    raise BodyTooLarge(f"response body of {declared} bytes (Content-Length) is longer than "
                                       f"{limit} bytes: not an answer to this request")
            except BaseException:
                await response.aclose()
                raise
            return http.Response(status_code=response.status_code, headers=headers,
                                 stream=CappedStream(response.stream, limit, coding), extensions=response.extensions)

    return CappedStream, CappedTransport


def _failure(exc: BaseException) -> tuple[str, bool, float | None, str]:
    """(kind, retryable, retry-after seconds, message) of one failed attempt."""
    import openai

    if isinstance(exc, UnicodeEncodeError):  # encoding the request here (a header, the JSON body): never sent
        return "invalid_request", False, None, f"the request cannot be encoded: {exc}"
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
        if 300 <= status < 400:  # redirects are not followed: nothing goes anywhere but the endpoint
            where = getattr(getattr(exc, "response", None), "headers", {}).get("location", "")
            return "request_rejected", False, None, (f"HTTP {status}: a redirect to {where[:200]!r}, not followed "
                                                     "(requests go to the configured endpoint only)")
        if status == 429:
            return "rate_limited", True, _retry_after(exc), message
        if status >= 500:
            return "server_error", True, _retry_after(exc) if status == 503 else None, message
        return "request_rejected", False, None, message
    if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, ValueError, KeyError,
                        TypeError, AttributeError, IndexError, RecursionError, OverflowError)):
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

            http = _http()
            timeout = openai.Timeout(self.cfg.timeout_s, connect=self.cfg.connect_timeout_s)
            # our own HTTP client: redirects are not followed (openai's default follows them, to any host),
            # bodies are read under a limit, and no proxy from the environment is used; openai's pool limits
            transport = _capped_types()[1](limits=http.Limits(max_connections=1000, max_keepalive_connections=100))
            http_client = http.AsyncClient(transport=transport, follow_redirects=False, trust_env=False,
                                           timeout=timeout, headers={"Accept-Encoding": "identity"})
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=os.environ.get(self.cfg.api_key_env) or "unused", max_retries=0,
                timeout=timeout, http_client=http_client)
        return self._client

    async def _list_models(self) -> list[str]:
        listed = await self.client.with_options(timeout=self.cfg.startup_timeout_s, max_retries=0).models.list()
        data = getattr(listed, "data", None)
        if not isinstance(data, list):
            raise TypeError(f"the answer has no list of models ('data' is {type(data).__name__})")
        names = [getattr(m, "id", None) for m in data]
        if not all(isinstance(name, str) and name for name in names):
            raise TypeError(f"a listed model has no name: {str(data)[:200]}")
        return names

    async def check(self) -> str:
        """The model name to use; ``ServerUnavailable`` naming the URL when the endpoint does not list its models
        within ``startup_timeout_s`` (one request, no retry): not up, no answer in time, a redirect, or an
        answer that is not an OpenAI model list."""
        url = f"{self.base_url.rstrip('/')}/models"
        try:
            names = await asyncio.wait_for(self._list_models(), self.cfg.startup_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # whatever it was, the endpoint is not one to work with
            why = f"no answer within startup_timeout_s={self.cfg.startup_timeout_s:g} s" \
                if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {str(exc)[:300]}"
            raise ServerUnavailable("server_unavailable", f"relabel: endpoint {self.base_url} does not answer "
                                                          f"GET {url} with a model list: {why}") from exc
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
        name = request.request_id or "request"
        spent = Spent()
        for part, text in (("text", request.text), ("model name", self.model)):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:  # no JSON body can carry it: a fault of the record, not the server
                raise RequestFailed("invalid_request", f"{name}: the request's {part} is not valid Unicode "
                                                       f"({exc.reason} at {exc.start}); not sent", 0, spent) from None
        payload = self.payload(request)
        headers = {"X-Request-ID": request_id_header(request.request_id)} if request.request_id else {}
        limit = answer_limit(request.max_tokens)
        last_kind, streak, attempt = "", 0, 0
        while True:
            attempt += 1
            async with self._gate():
                self.stats.attempts += 1
                spent.attempts += 1
                body = _BODY_LIMIT.set(body_limit(request.max_tokens))  # the transport's limit for this attempt
                try:
                    completion = await asyncio.wait_for(
                        self.client.chat.completions.create(**payload, extra_headers=headers),
                        self.cfg.timeout_s + self.cfg.connect_timeout_s)
                    prompt_tokens, completion_tokens = usage_tokens(getattr(completion, "usage", None))
                    spent.prompt_tokens += prompt_tokens  # spent, whether or not the answer is usable
                    spent.completion_tokens += completion_tokens
                    choice = completion.choices[0]
                    answer = Answer(message_text(choice.message.content), str(choice.finish_reason or ""),
                                    prompt_tokens, completion_tokens, attempts=attempt, spent=spent)
                    if len(answer.text) > limit:
                        raise ValueError(f"answer of {len(answer.text)} characters for max_tokens "
                                         f"{request.max_tokens}: not an answer to this request")
                    self.stats.answered += 1
                    return answer
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # classified below; anything unknown is re-raised by _failure
                    kind, retryable, wait, message = _failure(exc)
                finally:
                    _BODY_LIMIT.reset(body)
            if kind == "invalid_request":  # failed while encoding the request: it never left
                self.stats.attempts -= 1
                spent.attempts -= 1
            self.stats.failures[kind] = self.stats.failures.get(kind, 0) + 1
            streak = streak + 1 if kind == last_kind else 1
            last_kind = kind
            # the same failure max_attempts times in a row, or mixed failures twice that many times: give up
            if not retryable or streak >= self.cfg.max_attempts or attempt >= 2 * self.cfg.max_attempts:
                raise RequestFailed(kind, f"{name}: {message} (attempt {attempt})", spent.attempts, spent)
            if wait is None:
                wait = min(self.cfg.max_backoff_s, self.cfg.backoff_s * 2 ** (streak - 1)) * random.uniform(0.75, 1)
            await asyncio.sleep(min(wait, self.cfg.max_retry_after_s))


__all__ = ["Answer", "BadEncoding", "BodyTooLarge", "ChatClient", "ChatRequest", "ClientConfig", "ClientStats",
           "RelabelError", "RequestFailed", "ServerUnavailable", "Spent", "answer_limit", "body_limit",
           "image_data_uri", "message_text", "messages_for", "request_id_header", "usage_tokens"]
