"""One overall deadline per HTTP request, for every client: a real loopback server that drips its answer a byte at a
time (each byte well inside any read timeout) must not hold the remote retriever, a web backend or the judge past
their ``timeout`` (it held them 104 s, 107 s and 69 s with ``timeout=2``). Bounds are 10x the deadline: a behaviour
bound, not a timing measurement."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from searchenv.http.clients import async_http_client, http_client
from searchenv.http.deadline import deadline

#: The drip: one byte every GAP seconds, long enough (BYTES x GAP = 30 s) that a per-read timeout never ends it.
GAP, BYTES = 0.1, 300


@pytest.fixture
def dripping_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT``: every connection gets an HTTP answer, status line and headers included, one byte
    per :data:`GAP` seconds, until the client hangs up."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()
    body = b'{"result": [[]]}'.ljust(BYTES, b" ")
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    def drip(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            for byte in answer:
                if stop.wait(GAP):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:  # the client gave up: that is the point
                    return

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=drip, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


def _seconds(call) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def test_the_shared_clients_end_a_dripping_request_at_its_deadline(dripping_url: str) -> None:
    import httpx

    with http_client(timeout=0.5) as client:
        with pytest.raises(httpx.TimeoutException):
            client.get(dripping_url)

    async def fetch() -> None:
        async with async_http_client(timeout=0.5) as client:
            await client.get(dripping_url)

    def run_async() -> None:
        with pytest.raises(httpx.TimeoutException):
            asyncio.run(fetch())

    assert _seconds(run_async) < 5.0
    with http_client(timeout=30) as client, deadline(0.5):  # an enclosing deadline that ends sooner holds
        started = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            client.get(dripping_url)
        assert time.monotonic() - started < 5.0


def test_the_remote_retriever_ends_within_its_timeout_and_retry_window(dripping_url: str) -> None:
    from searchenv.retrievers.remote.retriever import RemoteRetriever

    remote = RemoteRetriever(dripping_url, timeout=0.5, retry_window=1.0, backoff=0.05, on_error="empty")
    results: list = []
    took = _seconds(lambda: results.append(remote.search_or_error(["q"], 1)))
    assert took < 10 * (1.0 + 0.5)  # the window starts no attempt past its end; each attempt ends at its deadline
    [(passages, error)] = results
    assert passages == [[]] and error is not None and error.kind == "timeout"


def test_a_web_backend_ends_within_its_timeout(dripping_url: str) -> None:
    from searchenv.http.retry import RetrievalUnavailable
    from searchenv.retrievers import make_retriever

    serper = make_retriever("serper", None, url=dripping_url, api_key="k", timeout=0.5, retries=0)
    started = time.monotonic()
    with pytest.raises(RetrievalUnavailable, match="timeout"):
        serper.search(["q"], 1)
    assert time.monotonic() - started < 5.0


def test_the_judge_ends_within_its_timeout(dripping_url: str) -> None:
    from searchenv.reward_specs import Rollout, load_reward

    spec = load_reward(
        {"base": "judge", "url": dripping_url, "model": "m", "timeout": 0.5, "retries": 0, "check_on_start": False}
    )
    rollout = Rollout.from_text("<answer>Tesk Mallor</answer>", ["Tesk Mallor"], question="Who?")
    started = time.monotonic()
    [scored] = spec.score_batch([rollout])
    assert time.monotonic() - started < 5.0
    assert scored.parts["judge_fallback"] == 1.0 and scored.notes["judge_fallback"].startswith("timeout")
