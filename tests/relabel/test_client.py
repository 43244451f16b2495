"""The client against the real server, through the fault proxy: what is retried, what is dead-lettered."""

from __future__ import annotations

import asyncio
import gzip
import io
import itertools
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image

from relabel.client import ChatClient, ChatRequest, ClientConfig, RequestFailed, ServerUnavailable, image_data_uri
from tests.relabel.scripted_server import ScriptedServer, completion, models_or


def png(size=(120, 160)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, "white").save(buf, format="PNG")
    return buf.getvalue()


def client_for(url: str, **kw) -> ChatClient:
    cfg = ClientConfig(base_url=url, timeout_s=kw.pop("timeout_s", 30.0), backoff_s=0.05, max_backoff_s=0.2, **kw)
    return ChatClient(cfg)


def run_coroutine(coroutine):
    """``asyncio.run`` on a thread of its own: in the full suite a session-scoped Playwright (sync API) keeps an
    event loop running on the main thread, where ``asyncio.run`` refuses to start (the stages use their own
    loop thread for the same reason)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def ask(client: ChatClient, request: ChatRequest):
    async def go():
        try:
            await client.check()
            return await client.complete(request)
        finally:
            await client.close()

    return run_coroutine(go())


REQUEST = ChatRequest("Transcribe this page.", png(), max_tokens=8, request_id="page-1:relabel")


def test_answer_has_text_finish_reason_and_tokens(proxy):
    client = client_for(proxy.base_url)
    answer = ask(client, REQUEST)
    assert answer.finish_reason in ("length", "stop") and answer.text
    assert answer.prompt_tokens > 10 and 0 < answer.completion_tokens <= 8
    assert proxy.chat_requests == 1 and client.stats.attempts == 1


def test_429_with_retry_after_then_500_then_dropped_connection_are_retried(proxy):
    proxy.faults = ["429", "500", "drop", "garbage"]
    client = client_for(proxy.base_url, max_attempts=3)
    answer = ask(client, REQUEST)
    assert answer.attempts == 5 and proxy.chat_requests == 5 and proxy.forwarded == 1
    assert client.stats.failures == {"rate_limited": 1, "server_error": 1, "connection_failed": 1, "bad_response": 1}


def test_same_failure_max_attempts_times_is_a_dead_letter_with_the_servers_message(proxy):
    proxy.faults = ["500"] * 10
    with pytest.raises(RequestFailed) as err:
        ask(client_for(proxy.base_url, max_attempts=3), REQUEST)
    assert err.value.reason == "server_error" and err.value.attempts == 3 and "injected failure" in str(err.value)
    assert proxy.chat_requests == 3


def test_stall_past_the_timeout_is_retried(proxy):
    proxy.faults = ["stall"]
    proxy.stall_s = 3.0
    client = client_for(proxy.base_url, timeout_s=1.0)
    answer = ask(client, REQUEST)
    assert answer.text and client.stats.failures == {"timeout": 1} and proxy.chat_requests == 2


def test_an_answer_trickled_past_the_timeout_is_retried(proxy):
    proxy.faults = ["trickle"]  # ~150 bytes at 0.2 s each: every read is quick, the whole answer is not
    client = client_for(proxy.base_url, timeout_s=1.0, connect_timeout_s=1.0)
    answer = ask(client, REQUEST)
    assert answer.text and answer.text != "slow" and client.stats.failures == {"timeout": 1}
    assert proxy.chat_requests == 2


def test_a_408_is_retried_as_a_timeout(proxy):
    proxy.faults = ["408"]
    client = client_for(proxy.base_url)
    answer = ask(client, REQUEST)
    assert answer.text and client.stats.failures == {"timeout": 1} and proxy.chat_requests == 2


def test_text_parts_are_joined_and_other_content_is_a_bad_response(proxy):
    proxy.rewrite = lambda request: [{"type": "text", "text": "# Title"}, {"type": "text", "text": "\n\nBody."}]
    assert ask(client_for(proxy.base_url), REQUEST).text == "# Title\n\nBody."
    for content in (42, [{"type": "image_url", "image_url": {"url": "x"}}], {"text": "x"}):
        proxy.rewrite, proxy.chat_requests = (lambda request, c=content: c), 0
        with pytest.raises(RequestFailed) as err:
            ask(client_for(proxy.base_url, max_attempts=2), REQUEST)
        assert err.value.reason == "bad_response" and "not text" in str(err.value) and proxy.chat_requests == 2


def test_answers_no_file_could_hold_or_no_request_could_get_are_bad_responses(proxy):
    """A lone surrogate (valid JSON, no valid UTF-8) and an answer far longer than max_tokens allows: retried
    like any body that is not a chat completion, so never cached as an answer."""
    for content, why in (("A label \ud800 here", "not valid Unicode"), ("word " * 20_000, "not an answer to this")):
        proxy.rewrite, proxy.chat_requests = (lambda request, c=content: c), 0
        with pytest.raises(RequestFailed) as err:
            ask(client_for(proxy.base_url, max_attempts=2), REQUEST)
        assert err.value.reason == "bad_response" and why in str(err.value) and proxy.chat_requests == 2


def test_retry_after_as_an_http_date_is_honoured(proxy, monkeypatch):
    import relabel.client

    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(seconds, *args):  # the real wait, recorded: what the client chose to wait
        waits.append(seconds)
        return await real_sleep(seconds, *args)

    monkeypatch.setattr(relabel.client.asyncio, "sleep", recorded)
    proxy.faults = ["429date"]
    answer = ask(client_for(proxy.base_url, max_attempts=2), REQUEST)
    assert answer.attempts == 2 and len(waits) == 1 and 0.5 < waits[0] <= 2.0  # its own backoff is 0.05 s


def test_a_body_nested_past_the_parsers_depth_is_a_bad_response():
    from relabel.client import _failure

    assert _failure(RecursionError("maximum recursion depth exceeded"))[:2] == ("bad_response", True)


def test_garbage_bodies_every_time_become_bad_response(proxy):
    proxy.faults = ["garbage"] * 5
    with pytest.raises(RequestFailed) as err:
        ask(client_for(proxy.base_url, max_attempts=2), REQUEST)
    assert err.value.reason == "bad_response" and proxy.chat_requests == 2


def test_a_400_is_not_retried(proxy, relabel_server):
    client = client_for(proxy.base_url, model="not-the-served-model")
    with pytest.raises(RequestFailed) as err:
        ask(client, REQUEST)
    assert err.value.reason == "request_rejected" and "400" in str(err.value) and proxy.chat_requests == 1


def test_an_image_the_server_rejects_ends_as_a_dead_letter(proxy):
    bad = ChatRequest("Transcribe.", b"\x89PNG\r\n\x1a\nnot really a png", max_tokens=4)
    with pytest.raises(RequestFailed) as err:
        ask(client_for(proxy.base_url, max_attempts=2), bad)
    # transformers serve 5.25 answers 4xx (5.24 answered 500, which would be retried max_attempts times)
    assert err.value.reason == "request_rejected" and err.value.attempts == 1 and proxy.chat_requests == 1


def test_server_not_up_is_a_clear_error_before_any_request(relabel_server):
    from relabel.serve import free_port

    client = client_for(f"http://127.0.0.1:{free_port()}/v1", startup_timeout_s=1.0)
    with pytest.raises(ServerUnavailable, match="does not answer"):
        run_coroutine(client.check())
    assert client.stats.attempts == 0


def test_images_are_sent_as_stored_or_reencoded_to_the_size_limit():
    data = png((400, 100))
    assert image_data_uri(data).startswith("data:image/png;base64,")
    import base64

    small = base64.b64decode(image_data_uri(data, max_side=100).split(",", 1)[1])
    assert Image.open(io.BytesIO(small)).size == (100, 25)


@pytest.fixture
def scripted():
    """``scripted(answer)``: a ScriptedServer on 127.0.0.1, closed after the test."""
    servers: list[ScriptedServer] = []

    def make(answer) -> ScriptedServer:
        servers.append(ScriptedServer(answer))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_a_redirect_is_not_followed_and_fails_the_request_at_once(proxy, scripted):
    """The page image goes to the configured endpoint and nowhere else: a 307 elsewhere is a failed request."""
    other = scripted(models_or(lambda ex: ex.json(completion("a label written by another host"))))
    proxy.redirect_to = f"{other.base_url}/chat/completions"
    proxy.faults = ["redirect"]
    with pytest.raises(RequestFailed) as err:
        ask(client_for(proxy.base_url), REQUEST)
    assert err.value.reason == "request_rejected" and "307" in str(err.value) and other.base_url in str(err.value)
    assert err.value.attempts == 1 and proxy.chat_requests == 1 and other.requests() == []


def test_the_start_up_check_does_not_follow_a_redirect(scripted):
    other = scripted(models_or(lambda ex: ex.json(completion())))
    redirecting = scripted(lambda ex: ex.raw(307, b"", {"Location": f"{other.base_url}/models"}))
    with pytest.raises(ServerUnavailable, match="307"):
        run_coroutine(client_for(redirecting.base_url, startup_timeout_s=10.0).check())
    assert other.requests() == [] and redirecting.requests() == ["/v1/models"]


HUGE = 64 << 20  # bytes; the limit for REQUEST (max_tokens 8) is under 2 MB
_HEAD = json.dumps(completion("")).split('"content": ""')[0].encode() + b'"content": "'


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_longer_than_any_answer_is_not_read_to_the_end(scripted, declared):
    """The answer limit used to be checked after the whole body sat in memory: now the body is given up as it
    arrives (with a Content-Length above the limit, before any of it is read)."""
    chunks = itertools.chain([_HEAD], itertools.repeat(b"x" * 65536, HUGE // 65536))
    server = scripted(models_or(lambda ex: ex.stream(chunks, len(_HEAD) + HUGE if declared else None)))
    with pytest.raises(RequestFailed) as err:
        ask(client_for(server.base_url, max_attempts=1), REQUEST)
    assert err.value.reason == "bad_response" and "longer than" in str(err.value)
    assert server.wait_idle()
    assert server.streamed < HUGE // 2  # the client stopped reading long before the end (socket buffers aside)


def test_a_compressed_body_is_held_to_the_limit_once_decoded(scripted):
    small = gzip.compress(json.dumps(completion("fine")).encode())
    bomb = gzip.compress(json.dumps(completion("x" * HUGE)).encode())  # ~64 KB on the wire, 64 MB decoded
    bodies = iter([small, bomb])
    server = scripted(models_or(lambda ex: ex.raw(200, next(bodies), {"Content-Encoding": "gzip"})))
    client = client_for(server.base_url, max_attempts=1)
    assert ask(client, REQUEST).text == "fine"
    with pytest.raises(RequestFailed) as err:
        ask(client_for(server.base_url, max_attempts=1), REQUEST)
    assert err.value.reason == "bad_response" and "decoded response body longer than" in str(err.value)
    headers = next(headers for method, _, headers in server.log if method == "POST")
    assert {k.lower(): v for k, v in headers.items()}["accept-encoding"] == "identity"  # none was asked for


@pytest.mark.parametrize("count", ["1e999", "-1000000", '"10"', "1.5", "true", "4294967296"])
def test_usage_that_is_not_a_token_count_is_a_bad_response(scripted, count):
    """1e999 is infinity in JSON (int() of it raised OverflowError, unclassified); negative or fractional
    counts reached the manifest."""
    doc = json.dumps(completion("label", usage={"prompt_tokens": 1, "completion_tokens": 5}))
    body = doc.replace('"prompt_tokens": 1', f'"prompt_tokens": {count}').encode()
    server = scripted(models_or(lambda ex: ex.raw(200, body)))
    with pytest.raises(RequestFailed) as err:
        ask(client_for(server.base_url, max_attempts=2), REQUEST)
    assert err.value.reason == "bad_response" and "usage.prompt_tokens" in str(err.value)
    assert err.value.spent.attempts == 2 and err.value.spent.prompt_tokens == 0  # retried, and counted
    assert server.requests("POST") == ["/v1/chat/completions"] * 2


def test_an_overflow_is_a_bad_response():
    from relabel.client import _failure

    assert _failure(OverflowError("cannot convert float infinity to integer"))[:2] == ("bad_response", True)


def test_a_record_id_that_is_not_ascii_is_sent_percent_encoded(proxy):
    request = ChatRequest("Transcribe this page.", png(), max_tokens=8, request_id="página-1:relabel")
    answer = ask(client_for(proxy.base_url), request)
    assert answer.text and answer.attempts == 1 and proxy.request_ids == ["p%C3%A1gina-1:relabel"]


def test_a_request_that_cannot_be_encoded_is_not_sent_nor_blamed_on_the_server(proxy):
    from relabel.client import _failure

    bad = ChatRequest("Transcribe \ud800 this page.", png(), max_tokens=8, request_id="page-1:relabel")
    client = client_for(proxy.base_url)
    with pytest.raises(RequestFailed) as err:
        ask(client, bad)
    assert err.value.reason == "invalid_request" and err.value.spent.attempts == 0
    assert proxy.chat_requests == 0 and client.stats.attempts == 0
    kind, retryable, _, _ = _failure(UnicodeEncodeError("ascii", "á", 0, 1, "ordinal not in range(128)"))
    assert (kind, retryable) == ("invalid_request", False)


@pytest.mark.parametrize("body, content_type", [
    (b"<html>hi</html>", "text/html"), (b"[1, 2]", "application/json"), (b'{"data": 5}', "application/json"),
    (b'{"data": [', "application/json"), (b'{"data": [{"id": 5}]}', "application/json")],
    ids=["html", "list", "data-not-a-list", "cut-json", "id-not-a-string"])
def test_a_model_list_that_is_not_one_is_server_unavailable_naming_the_url(scripted, body, content_type):
    server = scripted(lambda ex: ex.raw(200, body, content_type=content_type))
    with pytest.raises(ServerUnavailable) as err:
        run_coroutine(client_for(server.base_url).check())
    assert f"{server.base_url}/models" in str(err.value) and err.value.reason == "server_unavailable"


def test_the_start_up_check_is_one_request_bounded_by_startup_timeout_s(scripted):
    """startup_timeout_s was a per-try timeout with a retry and a backoff on top (~3x the setting)."""
    server = scripted(lambda ex: ex.hang())
    with pytest.raises(ServerUnavailable, match="startup_timeout_s=1 s"):
        run_coroutine(client_for(server.base_url, startup_timeout_s=1.0).check())
    assert server.requests() == ["/v1/models"]
