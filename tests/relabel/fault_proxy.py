"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the real ``transformers serve``, for what the
server will not do by itself: 429 with Retry-After, 408, 500, stalls, answers trickled a byte at a time,
dropped connections, garbage bodies, going down, a redirect to another host (``redirect_to``). It counts
every chat request it receives (so tests can assert that a rerun sends none), records their
``X-Request-ID`` headers (``request_ids``), sums the ``usage`` of the answers it returns (``prompt_tokens``,
``completion_tokens``: what the run spent, as the server reported it) and can rewrite the content of a
real answer (``rewrite``), which is how tests get labels and judge verdicts a random-weight model never
writes.

``faults`` is a list consumed one entry per chat request, in order; ``None`` forwards.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Callable

from tests.helpers import loopback_server

CHAT = "/v1/chat/completions"


class FaultProxy:
    def __init__(self, upstream_port: int, stall_s: float = 3.0):
        self.upstream_port = upstream_port
        self.stall_s = stall_s
        self.trickle_s = 0.2
        self.faults: list[str | None] = []
        # request JSON -> new content (None: keep; any JSON value, to test answers that are not text)
        self.rewrite: Callable[[dict], object] | None = None
        self.chat_requests = 0
        self.forwarded = 0
        self.down_after: int | None = None  # refuse every chat request after this many (a dead server)
        self.redirect_to = ""  # where fault "redirect" points (a 307)
        self.request_ids: list[str] = []
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.lock = threading.Lock()
        self.server = loopback_server(self._handler())
        self.port = self.server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _next_fault(self, request_id: str | None) -> str | None:
        with self.lock:
            self.chat_requests += 1
            if request_id is not None:
                self.request_ids.append(request_id)
            if self.down_after is not None and self.chat_requests > self.down_after:
                return "drop"
            return self.faults.pop(0) if self.faults else None

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _forward(self, method: str, body: bytes | None) -> tuple[int, dict, bytes]:
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                conn.request(method, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                kept = {k: v for k, v in response.getheaders()
                        if k.lower() in ("x-request-id", "retry-after")}
                conn.close()
                return response.status, kept, data

            def do_GET(self):
                status, headers, data = self._forward("GET", None)
                self._reply(status, data, headers)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != CHAT:
                    status, headers, data = self._forward("POST", body)
                    return self._reply(status, data, headers)
                fault = proxy._next_fault(self.headers.get("X-Request-ID"))
                if fault == "429":
                    return self._reply(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "1"})
                if fault == "429date":  # Retry-After as an HTTP-date (RFC 9110), 2 s ahead
                    when = email.utils.formatdate(time.time() + 2, usegmt=True)
                    return self._reply(429, b'{"error": {"message": "slow down"}}', {"Retry-After": when})
                if fault == "redirect":
                    return self._reply(307, b"", {"Location": proxy.redirect_to})
                if fault == "500":
                    return self._reply(500, b'{"error": {"message": "injected failure"}}')
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault == "stall":
                    time.sleep(proxy.stall_s)
                    self.close_connection = True
                    return
                if fault == "garbage":
                    return self._reply(200, b'{"choices": [{"message": garbage')
                if fault == "408":
                    return self._reply(408, b'{"error": {"message": "request timeout"}}')
                if fault == "trickle":  # headers at once, then the body a byte every trickle_s
                    data = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "slow"}, ' \
                           b'"finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(proxy.trickle_s)
                    except OSError:  # the client gave up
                        pass
                    self.close_connection = True
                    return
                status, headers, data = self._forward("POST", body)
                with proxy.lock:
                    proxy.forwarded += 1
                if status == 200 and proxy.rewrite is not None:
                    content = proxy.rewrite(json.loads(body))
                    if content is not None:
                        doc = json.loads(data)
                        doc["choices"][0]["message"]["content"] = content
                        doc["choices"][0]["finish_reason"] = "stop"
                        data = json.dumps(doc).encode()
                if status == 200:
                    usage = json.loads(data).get("usage") or {}
                    with proxy.lock:
                        proxy.prompt_tokens += usage.get("prompt_tokens") or 0
                        proxy.completion_tokens += usage.get("completion_tokens") or 0
                self._reply(status, data, headers)

        return Handler


def prompt_text(request: dict) -> str:
    """The text part of a chat request's user turn."""
    return " ".join(part.get("text", "") for m in request["messages"] for part in m["content"]
                    if isinstance(part, dict) and part.get("type") == "text")
