"""RemoteRetriever against real servers on loopback: ours, a Search-R1-only one, slow, down, throttled, killed."""

from __future__ import annotations

import asyncio
import email.utils
import json
import pickle
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from servers import free_port, serve_in_thread, spawn_server

from searchenv.corpus import Corpus
from searchenv.http.retry import parse_retry_after
from searchenv.retrievers import make_retriever
from searchenv.retrievers.random_retriever import RandomRetriever
from searchenv.retrievers.remote.retriever import FailedResults, RemoteRetriever, RetrievalUnavailable
from searchenv.retrievers.remote.wire import content_id
from searchenv.retrievers.server.app import ServerConfig, create_app

QUERIES = ["who wrote hamlet", "capital of peru", "who wrote hamlet", "largest moon of saturn"]


@pytest.fixture(scope="module")
def corpus_path(shared_data: Path) -> Path:
    return shared_data / "corpus" / "hotpotqa_hipporag.jsonl"


@pytest.fixture(scope="module")
def engine(corpus_path: Path) -> RandomRetriever:
    return RandomRetriever(Corpus.from_jsonl(corpus_path), seed=7)


@pytest.fixture(scope="module")
def url(engine: RandomRetriever) -> Iterator[str]:
    with serve_in_thread(create_app(ServerConfig(max_queries=8, token=None), retriever=engine)) as base:
        yield base


class SearchR1Handler(BaseHTTPRequestHandler):
    """Speaks only Search-R1's ``/retrieve``: a ``queries`` list, and ``return_scores`` must be true."""

    server: SearchR1Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self.server.times.append(time.monotonic())
        time.sleep(self.server.delay)
        if self.server.script is not None:
            scripted = self.server.script(len(self.server.bodies))
            if scripted is not None:
                status, headers = scripted
                return self._reply(status, {"detail": "scripted"}, headers)
        if not isinstance(body.get("queries"), list):
            return self._reply(422, {"detail": [{"loc": ["body", "queries"], "msg": "Field required"}]})
        if not body.get("return_scores"):
            return self._reply(500, {"detail": "Internal Server Error"})  # what Search-R1 does here
        hits = self.server.engine.search(body["queries"], body.get("topk") or 3)
        if self.server.store_raw:  # an index built with --storeRaw: title/text/contents, no id
            docs = [[{"title": p.title, "text": p.text, "contents": p.contents} for p in h] for h in hits]
        else:
            docs = [[{"id": p.id, "contents": p.contents} for p in h] for h in hits]
        result = [[{"document": d, "score": p.score} for d, p in zip(ds, h)] for ds, h in zip(docs, hits)]
        return self._reply(200, {"result": result})

    def _reply(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = self.server.override if self.server.override is not None else json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class SearchR1Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, engine: RandomRetriever):
        super().__init__(("127.0.0.1", 0), SearchR1Handler)
        self.engine = engine
        self.bodies: list[dict[str, object]] = []
        self.times: list[float] = []  # server-side arrival time of each request
        self.delay = 0.0
        self.override: bytes | None = None
        self.store_raw = False
        #: request number (1-based) → (status, headers) to answer instead, or None to answer normally
        self.script: Callable[[int], tuple[int, dict[str, str]] | None] | None = None


@pytest.fixture
def search_r1(engine: RandomRetriever) -> Iterator[SearchR1Server]:
    server = SearchR1Server(engine)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def base_of(server: SearchR1Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_results_equal_the_engine_for_both_url_forms(url: str, engine: RandomRetriever) -> None:
    for address in (url, f"{url}/", f"{url}/retrieve"):
        with RemoteRetriever(address) as remote:
            assert remote.search(QUERIES, 3) == engine.search(QUERIES, 3)
            assert remote.search([], 3) == []
            assert remote.requests == 1 and remote.failures == 0


def test_make_retriever_builds_a_remote_client(url: str, engine: RandomRetriever) -> None:
    remote = make_retriever(url, None, timeout=5, on_error="empty")
    assert isinstance(remote, RemoteRetriever) and remote.on_error == "empty"
    assert remote.search(QUERIES[:1], 2) == engine.search(QUERIES[:1], 2)
    assert remote.health()["ready"] is True


def test_talks_to_a_search_r1_only_server(search_r1: SearchR1Server, engine: RandomRetriever) -> None:
    remote = RemoteRetriever(base_of(search_r1) + "/retrieve")
    assert remote.search(QUERIES, 3) == engine.search(QUERIES, 3)
    assert search_r1.bodies == [{"queries": QUERIES, "topk": 3, "return_scores": True}]  # one batched request


def test_asearch_does_not_block_the_event_loop(search_r1: SearchR1Server, engine: RandomRetriever) -> None:
    search_r1.delay = 0.2
    remote = RemoteRetriever(base_of(search_r1))

    async def main() -> tuple[list[object], int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(remote.asearch([q], 2) for q in QUERIES))
        done.set()
        await tick_task
        return results, ticks

    results, ticks = asyncio.run(main())
    assert results == [engine.search([q], 2) for q in QUERIES]
    assert ticks > 1  # the loop kept running while four requests were in flight
    assert len(search_r1.bodies) == 4
    assert asyncio.run(remote.asearch(QUERIES[:1], 1)) == engine.search(QUERIES[:1], 1)  # any later event loop
    remote.close()
    assert remote.search(QUERIES[:1], 1) == engine.search(QUERIES[:1], 1)  # reopens after close()


def test_slow_server_times_out_then_recovers(search_r1: SearchR1Server, engine: RandomRetriever) -> None:
    search_r1.delay = 1.0
    strict = RemoteRetriever(base_of(search_r1), timeout=0.2, retries=1, backoff=0.0)
    with pytest.raises(RetrievalUnavailable) as caught:
        strict.search(QUERIES, 3)
    error = caught.value
    assert error.kind == "timeout" and error.attempts == 2 and error.retryable
    assert "timed out after 0.2s" in error.detail and f"{base_of(search_r1)}/retrieve" in error.detail
    assert base_of(search_r1) not in str(error) and "searchenv serve" not in str(error)  # nothing for the model

    lenient = RemoteRetriever(base_of(search_r1), timeout=0.2, retries=0, on_error="empty")
    empty = lenient.search(QUERIES, 3)
    assert empty == [[], [], [], []] and isinstance(empty, FailedResults)  # empty, and says it failed
    assert empty.retrieval_error.kind == "timeout"
    assert lenient.failures == 1 and "timeout" in lenient.last_errors[-1]
    results, error = lenient.search_or_error(QUERIES[:1], 3)
    assert results == [[]] and isinstance(error, RetrievalUnavailable) and lenient.failures == 2

    search_r1.delay = 0.0
    found = lenient.search(QUERIES, 3)
    assert found == engine.search(QUERIES, 3) and not isinstance(found, FailedResults)  # same client, no restart
    assert lenient.failures == 2


def test_service_down_raise_or_empty() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    strict = RemoteRetriever(dead, retries=2, backoff=0.01)
    with pytest.raises(RetrievalUnavailable, match="retrieval unreachable after 3 attempts") as caught:
        strict.search(["q"], 3)
    assert dead in caught.value.detail and dead not in str(caught.value) and "ConnectError" in caught.value.reason
    assert strict.failures == 1 and strict.retried == 2

    lenient = RemoteRetriever(dead, retries=0, on_error="empty")
    assert lenient.search(["a", "b"], 3) == [[], []]
    assert asyncio.run(lenient.asearch(["c"], 3)) == [[]]
    assert lenient.failures == 2 and len(lenient.last_errors) == 2


def test_the_retry_window_bounds_the_attempts() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    remote = RemoteRetriever(dead, retry_window=0.3, backoff=0.05, max_backoff=0.05, seed=0)
    with pytest.raises(RetrievalUnavailable) as caught:
        remote.search(["q"], 3)
    assert 3 <= caught.value.attempts <= 12  # several tries within 0.3 s of 25–50 ms waits, then it gave up


def test_default_retry_window_outlasts_a_server_restart() -> None:
    assert RemoteRetriever("http://127.0.0.1:1").policy.window >= 30  # Search-R1's restart: 10–15 s measured


def test_retry_after_is_honoured(search_r1: SearchR1Server, engine: RandomRetriever) -> None:
    """The server answers 503 + Retry-After: 1 for its first 2 s, then normally."""
    first: list[float] = []

    def unavailable_for_two_seconds(n: int) -> tuple[int, dict[str, str]] | None:
        if not first:
            first.append(search_r1.times[0])
        return (503, {"Retry-After": "1"}) if search_r1.times[-1] - first[0] < 2.0 else None

    search_r1.script = unavailable_for_two_seconds
    remote = RemoteRetriever(base_of(search_r1), backoff=0.01, seed=0)
    assert remote.search(QUERIES, 3) == engine.search(QUERIES, 3)
    assert len(search_r1.times) == 3  # 503, 503, then the answer: no attempt wasted inside the Retry-After wait
    gaps = [b - a for a, b in zip(search_r1.times, search_r1.times[1:])]
    assert all(gap >= 1.0 for gap in gaps), gaps  # measured on the server: the client waited as asked
    assert remote.retried == 2 and remote.failures == 0


@pytest.mark.parametrize(
    ("status", "retried", "kind"),
    [
        (400, False, "refused"),
        (401, False, "unauthorized"),
        (404, False, "refused"),
        (422, False, "refused"),
        (500, False, "server_error"),
        (502, True, "unreachable"),  # a proxy in front of a dead server: the service is away
        (503, True, "overloaded"),
        (504, True, "timeout"),
        (429, True, "overloaded"),
    ],
)
def test_only_what_can_succeed_later_is_retried(
    search_r1: SearchR1Server, status: int, retried: bool, kind: str
) -> None:
    search_r1.script = lambda n: (status, {})
    remote = RemoteRetriever(base_of(search_r1), retries=2, backoff=0.01, max_backoff=0.01)
    with pytest.raises(RetrievalUnavailable) as caught:
        remote.search(["q"], 3)
    assert caught.value.kind == kind and caught.value.attempts == (3 if retried else 1)
    assert len(search_r1.bodies) == caught.value.attempts


def test_parse_retry_after_reads_seconds_and_http_dates() -> None:
    now = time.time()
    assert parse_retry_after("2") == 2.0 and parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("nan") is None


def test_passages_without_ids_get_stable_ids_and_one_warning(
    search_r1: SearchR1Server, engine: RandomRetriever
) -> None:
    search_r1.store_raw = True
    remote = RemoteRetriever(base_of(search_r1))
    with pytest.warns(UserWarning, match="without an 'id'"):
        first = remote.search(QUERIES, 3)
    expected = engine.search(QUERIES, 3)
    assert [[p.id for p in hits] for hits in first] == [[content_id(p.contents) for p in hits] for hits in expected]
    assert all(p.id.startswith("sha1:") and len(p.id) == 21 for hits in first for p in hits)
    assert [[(p.title, p.text) for p in hits] for hits in first] == [[(p.title, p.text) for p in h] for h in expected]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per client
        assert remote.search(QUERIES, 3) == first  # stable across calls


def test_refused_requests_are_not_retried(url: str) -> None:
    remote = RemoteRetriever(url, retries=5, backoff=1.0)
    with pytest.raises(RetrievalUnavailable) as caught:
        remote.search([f"q{i}" for i in range(9)], 3)  # the server allows 8 per request
    assert caught.value.kind == "refused" and "HTTP 413" in caught.value.reason
    assert "too_many_queries" in caught.value.reason
    assert caught.value.attempts == 1 and not caught.value.retryable and remote.retried == 0


def test_bearer_token_is_sent(engine: RandomRetriever) -> None:
    with serve_in_thread(create_app(ServerConfig(token="tok"), retriever=engine)) as base:
        assert RemoteRetriever(base, token="tok").search(["x"], 1) == engine.search(["x"], 1)
        with pytest.raises(RetrievalUnavailable, match="retrieval unauthorized after 1 attempt$"):
            RemoteRetriever(base, token="nope").search(["x"], 1)


@pytest.mark.parametrize(
    "reply",
    [
        b"<html>oops</html>",
        b'{"result": [[]]}',
        b'{"answers": []}',
        b'{"result": [[{"document": 3}]] }',
        # a document whose contents are null (or not text) would be shown to the model as "Doc 1(Title: None)"
        b'{"result": [[{"document": {"id": "1", "contents": null}}], []]}',
        b'{"result": [[{"document": {"id": "1", "contents": 7}}], []]}',
        b'{"result": [[{"document": {"id": "1", "title": "t"}}], []]}',
        b'{"result": [[{"document": {"id": "1", "contents": "t"}, "score": "high"}], []]}',
    ],
)
def test_malformed_responses_are_clear_errors(search_r1: SearchR1Server, reply: bytes) -> None:
    search_r1.override = reply
    with pytest.raises(RetrievalUnavailable) as caught:
        RemoteRetriever(base_of(search_r1), retries=3).search(["a", "b"], 2)
    assert caught.value.kind == "bad_response" and caught.value.attempts == 1
    assert "not JSON" in caught.value.reason or "not Search-R1's format" in caught.value.reason


def test_bad_arguments_are_rejected_with_the_fix() -> None:
    with pytest.raises(ValueError, match="on_error must be"):
        RemoteRetriever("http://127.0.0.1:1", on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="http://host:port"):
        RemoteRetriever("127.0.0.1:8000")
    remote = RemoteRetriever("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="positive integer"):
        remote.search(["q"], 0)
    with pytest.raises(TypeError, match="wrap a single query"):
        remote.search("q", 3)


def test_pickled_client_reconnects(url: str, engine: RandomRetriever) -> None:
    remote = RemoteRetriever(url, on_error="empty")
    remote.search(["warm"], 1)  # holds a live connection pool now
    copy = pickle.loads(pickle.dumps(remote))
    assert copy.search(QUERIES, 2) == engine.search(QUERIES, 2) and copy.on_error == "empty"


SLOW_ENGINE = """
import pathlib, time
from searchenv.retrievers.random_retriever import RandomRetriever


class Slow(RandomRetriever):
    compute_only = False  # it waits: no warm-up search at start-up (that one would sleep and touch the marker)

    def __init__(self, corpus, delay=0.0, marker=None, **options):
        super().__init__(corpus, **options)
        self.delay, self.marker = delay, marker

    def search(self, queries, k):
        if self.marker:
            pathlib.Path(self.marker).touch()
        time.sleep(self.delay)
        return super().search(queries, k)
"""


def test_server_killed_mid_batch_and_restarted(tmp_path: Path, engine: RandomRetriever, corpus_path: Path) -> None:
    (tmp_path / "slow_engine.py").write_text(SLOW_ENGINE)
    marker = tmp_path / "searching"
    common = ["--corpus", str(corpus_path), "--option", "seed=7"]
    slow = ["--retriever", "slow_engine:Slow", "--option", "delay=60", "--option", f"marker={marker}"]
    first, base = spawn_server([*slow, *common], env={"PYTHONPATH": str(tmp_path)})
    port = int(base.rsplit(":", 1)[1])
    client = RemoteRetriever(base, timeout=30, retry_window=60, backoff=0.05, max_backoff=0.5, on_error="empty", seed=0)
    outcome: dict[str, object] = {}
    worker = threading.Thread(target=lambda: outcome.update(result=client.search_or_error(QUERIES, 3)))
    second = None
    try:
        worker.start()
        for _ in range(600):
            if marker.exists():
                break
            time.sleep(0.01)
        assert marker.exists(), "the batch never reached the server"
        first.kill()  # mid-batch: the engine is inside search()
        first.wait(timeout=10)

        probe = RemoteRetriever(base, retries=0, on_error="empty")  # while down: empty results, failure recorded
        assert probe.search(["down?"], 3) == [[]] and probe.failures == 1
        assert "unreachable" in probe.last_errors[-1]

        second, _ = spawn_server(["--retriever", "random", *common], port=port)
        worker.join(timeout=30)
        assert not worker.is_alive()
        results, error = outcome["result"]  # type: ignore[misc]
        assert error is None and results == engine.search(QUERIES, 3)  # the batch finished after retries
        assert client.retried >= 1 and client.failures == 0 and client.last_errors  # the outage is on record
        assert client.search(["after restart"], 2) == engine.search(["after restart"], 2)  # same client
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=10)


def test_a_url_nobody_answers_fails_at_construction_with_the_fix() -> None:
    """Without the check each search stalled for the whole retry window (~55 s) before the model saw "unavailable"."""
    import gymnasium as gym

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(
        ConnectionError, match=r"no retrieval service answers at http://127\.0\.0\.1:\d+/retrieve"
    ) as caught:
        gym.make("SearchQA-v0", retriever=url)
    assert "searchenv serve" in str(caught.value)  # a ConnectionError from the one check, not the retry window's error


def test_a_live_service_passes_the_construction_check(engine: RandomRetriever) -> None:
    import gymnasium as gym

    with serve_in_thread(create_app(ServerConfig(), retriever=engine)) as base:
        env = gym.make("SearchQA-v0", retriever=base)
        env.reset(seed=0)
        assert "<information>" in env.step("<search> capital of peru </search>")[0]
