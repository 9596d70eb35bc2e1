"""The Brave retriever against a real HTTP server on loopback that speaks Brave's Web Search wire format.

The server checks what Brave checks (the ``X-Subscription-Token`` header, ``q`` and ``count``) and answers what
Brave answers: a ``WebSearchApiResponse`` with ``web.results``, 401 for a wrong key, 429 with ``Retry-After`` when
throttled, 500s, a body that is not JSON, or nothing in time.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from servers import serve_in_thread

from searchenv.http.retry import RetrievalUnavailable
from searchenv.retrievers import make_retriever
from searchenv.retrievers.server.app import ServerConfig, create_app
from searchenv.retrievers.web.brave import KEY_ENV, BraveSearchRetriever

KEY = "test-key-d41d8cd98f00b204"


def brave_results(query: str, count: int) -> dict[str, object]:
    """A Brave-shaped answer: ``web.results`` with title, url and a decorated description per hit."""
    results = [
        {
            "type": "search_result",
            "title": f"{query} &amp; result {i}",
            "url": f"https://example.org/{query.replace(' ', '-')}/{i}",
            "description": f"About <strong>{query}</strong>: fact number {i}.",
            "language": "en",
        }
        for i in range(count)
    ]
    results.append(dict(results[0]))  # the same URL twice: kept once
    return {"type": "search", "query": {"original": query}, "web": {"type": "search", "results": results}}


class BraveHandler(BaseHTTPRequestHandler):
    server: BraveServer

    def do_GET(self) -> None:
        self.server.times.append(time.monotonic())
        self.server.headers_seen.append(dict(self.headers))
        parts = urlsplit(self.path)
        if parts.path != "/res/v1/web/search":
            return self._reply(404, b'{"type": "ErrorResponse", "error": {"code": "NOT_FOUND"}}')
        params = {key: values[0] for key, values in parse_qs(parts.query).items()}
        self.server.params.append(params)
        if self.headers.get("X-Subscription-Token") != KEY:
            body = b'{"type": "ErrorResponse", "error": {"status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID"}}'
            return self._reply(401, body)
        scripted = self.server.script(len(self.server.params)) if self.server.script else None
        if scripted is not None:
            status, headers, body = scripted
            if status == 0:  # no answer in time
                time.sleep(1.0)
                status = 200
            return self._reply(status, body, headers)
        count = int(params.get("count", 20))
        self._reply(200, json.dumps(brave_results(params["q"], count)).encode())

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
            pass

    def log_message(self, *args: object) -> None:
        pass


class BraveServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), BraveHandler)
        self.times: list[float] = []
        self.params: list[dict[str, str]] = []
        self.headers_seen: list[dict[str, str]] = []
        #: request number (1-based, among authorised ones) → (status, headers, body), or None to answer normally
        self.script: Callable[[int], tuple[int, dict[str, str], bytes] | None] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/res/v1/web/search"


@pytest.fixture
def brave() -> Iterator[BraveServer]:
    server = BraveServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def with_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def test_results_become_passages_with_url_ids(brave: BraveServer, with_key: None) -> None:
    web = make_retriever("web", None, endpoint=brave.endpoint)
    results = web.search(["who wrote hamlet", "", "capital of peru"], 3)
    assert [len(hits) for hits in results] == [3, 0, 3]  # a blank query costs no request
    first = results[0][0]
    assert first.id == "https://example.org/who-wrote-hamlet/0"
    assert first.title == "who wrote hamlet & result 0" and first.text == "About who wrote hamlet: fact number 0."
    assert len({p.id for p in results[0]}) == 3
    assert sorted(p["q"] for p in brave.params) == ["capital of peru", "who wrote hamlet"]
    assert all(p["count"] == "3" and p["text_decorations"] == "false" for p in brave.params)
    assert all(h["X-Subscription-Token"] == KEY and h["Accept"] == "application/json" for h in brave.headers_seen)


def test_long_queries_are_clipped_to_the_api_limits(brave: BraveServer, with_key: None) -> None:
    web = BraveSearchRetriever(endpoint=brave.endpoint)
    web.search([" ".join(f"word{i}" for i in range(80))], 25)
    sent = brave.params[-1]
    assert len(sent["q"].split()) == 50 and len(sent["q"]) <= 400 and sent["count"] == "20"


def test_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ValueError, match=f"set \\${KEY_ENV}"):
        make_retriever("web")


def test_wrong_key_is_refused_without_retry_and_never_echoed(
    brave: BraveServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "wrong-key-0123456789"
    monkeypatch.setenv(KEY_ENV, wrong)
    web = BraveSearchRetriever(endpoint=brave.endpoint, retries=3, backoff=0.01)
    with caplog.at_level(logging.DEBUG), pytest.raises(RetrievalUnavailable) as caught:
        web.search(["q"], 3)
    assert caught.value.kind == "unauthorized" and caught.value.attempts == 1 and len(brave.times) == 1
    for text in (str(caught.value), caught.value.detail, caplog.text, repr(web)):
        assert wrong not in text and KEY not in text


def test_429_retry_after_is_honoured(brave: BraveServer, with_key: None) -> None:
    brave.script = lambda n: (429, {"Retry-After": "1"}, b'{"type": "ErrorResponse"}') if n == 1 else None
    web = BraveSearchRetriever(endpoint=brave.endpoint, backoff=0.01, seed=0)
    assert len(web.search(["throttled"], 2)[0]) == 2
    assert len(brave.times) == 2 and brave.times[1] - brave.times[0] >= 1.0  # waited as asked, server-side


def test_429_rate_limit_reset_header_is_read_when_retry_after_is_absent(brave: BraveServer, with_key: None) -> None:
    reset = {"X-RateLimit-Limit": "1, 2000", "X-RateLimit-Reset": "1, 1419704"}
    brave.script = lambda n: (429, reset, b"{}") if n == 1 else None
    web = BraveSearchRetriever(endpoint=brave.endpoint, backoff=0.01, seed=0)
    assert len(web.search(["throttled"], 2)[0]) == 2
    assert brave.times[1] - brave.times[0] >= 1.0


@pytest.mark.parametrize(
    ("script", "kind", "attempts"),
    [
        ((500, {}, b'{"type": "ErrorResponse"}'), "server_error", 1),  # the API failed on this request
        ((503, {}, b"{}"), "overloaded", 3),
        ((200, {}, b"<html>not json</html>"), "bad_response", 1),
        ((200, {}, b'{"web": {"results": "nope"}}'), "bad_response", 1),
        ((0, {}, b"{}"), "timeout", 3),  # the server answers after 1 s; the client waits 0.2 s
    ],
)
def test_error_responses(
    brave: BraveServer, with_key: None, script: tuple[int, dict[str, str], bytes], kind: str, attempts: int
) -> None:
    brave.script = lambda n: script
    web = BraveSearchRetriever(endpoint=brave.endpoint, timeout=0.2, retries=2, backoff=0.01, max_backoff=0.01)
    with pytest.raises(RetrievalUnavailable) as caught:
        web.search(["q"], 3)
    assert caught.value.kind == kind and caught.value.attempts == attempts
    assert KEY not in caught.value.detail and brave.endpoint in caught.value.detail


def test_min_interval_spaces_requests(brave: BraveServer, with_key: None) -> None:
    web = BraveSearchRetriever(endpoint=brave.endpoint, min_interval=0.3, concurrency=1)
    web.search(["warm"], 1)  # builds the client and connects, so the arrivals below are not skewed by that
    web.search(["a", "b", "c"], 1)  # without the interval these would arrive within milliseconds
    starts = brave.times[1:]
    assert all(b - a >= 0.25 for a, b in zip(starts, starts[1:])), starts


def test_served_through_searchenv_serve(brave: BraveServer, with_key: None) -> None:
    config = ServerConfig(retriever="web", options={"endpoint": brave.endpoint, "retries": 0})
    with serve_in_thread(create_app(config)) as base:
        answer = httpx.post(f"{base}/retrieve", json={"queries": ["over http"], "topk": 2}, timeout=30)
        assert answer.status_code == 200
        docs = answer.json()["result"][0]
        assert [d["id"] for d in docs] == [f"https://example.org/over-http/{i}" for i in range(2)]
        assert docs[0]["contents"] == '"over http & result 0"\nAbout over http: fact number 0.'
        brave.script = lambda n: (503, {}, b"{}")
        down = httpx.post(f"{base}/retrieve", json={"queries": ["down"], "topk": 2}, timeout=30)
        assert down.status_code == 503 and down.json()["error"] == "backend_overloaded"  # a client retries this
