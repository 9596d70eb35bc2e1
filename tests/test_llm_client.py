"""The LLM client (``searchenv.llm``) against a real HTTP/1.1 server on loopback that speaks OpenAI's
chat-completions wire format and counts its TCP connections: one pooled connection set per event loop, the one
retry policy's ``Retry-After`` (an HTTP date too), a 502 as the service being away, and the prompter's failures
and answer store."""

from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from searchenv.answer_store import AnswerStore
from searchenv.llm.client import EndpointClient, EndpointUnavailable
from searchenv.llm.prompter import Prompter, PromptFailure


class Chat(ThreadingHTTPServer):
    """``POST /v1/chat/completions``; ``script(n, prompt)`` gives the reply text, or ``(status, headers)``."""

    daemon_threads = True

    def __init__(self, script: Callable[[int, str], object]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script, self.requests, self.connections = script, 0, 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection serves many requests
    server: Chat

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests += 1
            n = self.server.requests
        answer = self.server.script(n, body["messages"][-1]["content"])
        status, headers = (200, {}) if isinstance(answer, str) else answer  # type: ignore[misc]
        payload = {"choices": [{"message": {"role": "assistant", "content": answer}}]} if status == 200 else {}
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def serve(script: Callable[[int, str], object]) -> Iterator[Chat]:
    server = Chat(script)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def echo() -> Iterator[Chat]:
    yield from serve(lambda n, prompt: f"re: {prompt}")


def test_a_batch_and_the_next_reuse_one_pooled_connection_set(echo: Chat) -> None:
    prompter = Prompter(echo.url, "m", concurrency=2)
    prompts = [f"q{i}" for i in range(8)]

    async def two_batches() -> list:
        return [await prompter.aask(prompts), await prompter.aask([p + "!" for p in prompts])]

    first, second = asyncio.run(two_batches())
    assert first == [f"re: {p}" for p in prompts] and second[0] == "re: q0!"
    assert echo.requests == 16 and echo.connections <= 2  # keep-alive across the batch and the next one
    assert prompter.ask(["again"]) == ["re: again"] and echo.connections <= 3  # a new loop: its own pool


def test_retry_after_is_read_as_an_http_date_within_the_window() -> None:
    def overloaded_once(n: int, prompt: str) -> object:
        soon = email.utils.formatdate(time.time() + 1, usegmt=True)
        return (503, {"Retry-After": soon}) if n == 1 else "fine"

    def overloaded_for_an_hour(n: int, prompt: str) -> object:
        return 503, {"Retry-After": email.utils.formatdate(time.time() + 3600, usegmt=True)}

    for server in serve(overloaded_once):
        client = EndpointClient(server.url, "m", retry_window=10, backoff=0.01)
        assert client.complete("q").text == "fine" and server.requests == 2
    for server in serve(overloaded_for_an_hour):
        client = EndpointClient(server.url, "m", retry_window=10, backoff=0.01)
        with pytest.raises(EndpointUnavailable) as caught:
            client.complete("q")
        assert caught.value.kind == "overloaded" and server.requests == 1  # the wait ends past the window: give up


def test_a_502_is_the_endpoint_being_away_and_a_failure_is_that_prompts_own(tmp_path) -> None:
    def gateway(n: int, prompt: str) -> object:
        return (502, {}) if prompt == "down" else (400, {}) if prompt == "bad" else "ok"

    for server in serve(gateway):
        store = AnswerStore(tmp_path / "answers.sqlite", "record")
        prompter = Prompter(server.url, "m", retries=1, retry_window=5, backoff=0.01, store=store, store_kind="t")
        ok, down, bad = prompter.ask(["fine", "down", "bad"])
        assert ok == "ok" and isinstance(down, PromptFailure) and isinstance(bad, PromptFailure)
        assert (down.kind, bad.kind) == ("unreachable", "refused") and "HTTP 502" in down.reason
        assert server.requests == 1 + 2 + 1  # the 502 retried once, the refusal not
    replay = Prompter(server.url, "m", store=AnswerStore(tmp_path / "answers.sqlite", "replay"), store_kind="t")
    ok, down = replay.ask(["fine", "down"])  # the server is gone
    assert ok == "ok" and isinstance(down, PromptFailure) and down.kind == "not_recorded"  # failures never stored


def test_the_endpoint_check_names_the_cause(echo: Chat) -> None:
    EndpointClient(echo.url, "m").check()
    for server in serve(lambda n, prompt: (404, {})):
        with pytest.raises(ConnectionError, match=r"rejected the request for model 'm'.*HTTP 404.*GET /v1/models"):
            EndpointClient(server.url, "m").check()
    with pytest.raises(ConnectionError, match="no OpenAI-compatible server answers at http://127.0.0.1:9"):
        EndpointClient("http://127.0.0.1:9/v1", "m").check(timeout=2)
