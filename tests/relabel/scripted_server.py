"""A small scripted HTTP server on 127.0.0.1, for what neither the real server nor the fault proxy does: a
model list that is not one, a body of tens of megabytes, a compressed body, a request that never gets an
answer, a second host a redirect points to.

``ScriptedServer(answer)``: ``answer(exchange)`` writes the reply with ``exchange.json``, ``exchange.raw``,
``exchange.stream`` or ``exchange.hang``. The server records every request (``log``: method, path, headers)
and counts the body bytes its streamed replies managed to write (``streamed``), which is how a test sees
that the client stopped reading, without timing anything.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Iterable

from tests.helpers import loopback_server


def completion(content: Any = "ok", usage: Any = "default", finish: str = "stop") -> dict:
    """A chat completion answering ``content`` (``usage`` None: no usage; "default": 10 + 5 tokens)."""
    doc: dict = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                              "finish_reason": finish}]}
    if usage == "default":
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if usage is not None:
        doc["usage"] = usage
    return doc


MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "x"}]}


class Exchange:
    """One request (``method``, ``path``, ``headers``, ``body``) and the ways to answer it."""

    def __init__(self, server: ScriptedServer, handler: BaseHTTPRequestHandler, method: str, body: bytes):
        self.server, self.handler, self.method, self.body = server, handler, method, body
        self.path = handler.path
        self.headers = {k.lower(): v for k, v in handler.headers.items()}

    def raw(self, status: int, body: bytes, headers: dict[str, str] | None = None,
            content_type: str = "application/json") -> None:
        h = self.handler
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def json(self, doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.raw(status, json.dumps(doc).encode(), headers)

    def stream(self, chunks: Iterable[bytes], length: int | None = None, headers: dict[str, str] | None = None) -> None:
        """A 200 written chunk by chunk: with ``Content-Length: length``, or chunked when ``length`` is None.
        Stops when the client goes away; ``server.streamed`` counts the body bytes written."""
        h = self.handler
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        if length is None:
            h.send_header("Transfer-Encoding", "chunked")
        else:
            h.send_header("Content-Length", str(length))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.close_connection = True
        try:
            for chunk in chunks:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if length is None else chunk)
                h.wfile.flush()
                with self.server.lock:
                    self.server.streamed += len(chunk)
            if length is None:
                h.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client stopped reading and closed the connection
            pass

    def hang(self) -> None:
        """No answer until the server closes."""
        self.server.release.wait()
        self.handler.close_connection = True


class ScriptedServer:
    def __init__(self, answer: Callable[[Exchange], None]):
        self.answer = answer
        self.log: list[tuple[str, str, dict[str, str]]] = []
        self.streamed = 0
        self.busy = 0
        self.lock = threading.Condition()
        self.release = threading.Event()
        self.server = loopback_server(self._handler())
        self.port = self.server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def requests(self, method: str | None = None) -> list[str]:
        """The paths requested (with ``method`` only)."""
        with self.lock:
            return [path for m, path, _ in self.log if method in (None, m)]

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Whether every reply was finished within a generous ``timeout_s`` (a bound, not a measurement)."""
        with self.lock:
            return self.lock.wait_for(lambda: self.busy == 0, timeout_s)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _serve(self, method: str):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server.lock:
                    server.log.append((method, self.path, dict(self.headers)))
                    server.busy += 1
                try:
                    server.answer(Exchange(server, self, method, body))
                except OSError:
                    self.close_connection = True
                finally:
                    with server.lock:
                        server.busy -= 1
                        server.lock.notify_all()

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        return Handler


def models_or(chat: Callable[[Exchange], None]) -> Callable[[Exchange], None]:
    """An ``answer`` listing model ``m`` on GET /models and answering everything else with ``chat``."""

    def answer(exchange: Exchange) -> None:
        if exchange.method == "GET" and exchange.path.rstrip("/").endswith("/models"):
            exchange.json(MODELS)
        else:
            chat(exchange)

    return answer
