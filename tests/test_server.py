"""The retrieval service over real HTTP on loopback: wire format, limits, auth, cache, batching, processes."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from servers import serve_in_thread, spawn_server

from searchenv.cli.serve import add_serve_parser, config_from_args
from searchenv.corpus import Corpus
from searchenv.retrievers.random_retriever import RandomRetriever
from searchenv.retrievers.remote.retriever import RemoteRetriever
from searchenv.retrievers.server.app import ServerConfig, create_app
from searchenv.types import Passage


@pytest.fixture(scope="module")
def corpus_path(shared_data: Path) -> Path:
    return shared_data / "corpus" / "hotpotqa_hipporag.jsonl"


@pytest.fixture(scope="module")
def corpus(corpus_path: Path) -> Corpus:
    return Corpus.from_jsonl(corpus_path)


@pytest.fixture(scope="module")
def engine(corpus: Corpus) -> RandomRetriever:
    return RandomRetriever(corpus, seed=7)


@pytest.fixture(scope="module")
def url(engine: RandomRetriever, corpus_path: Path) -> Iterator[str]:
    config = ServerConfig(corpus=str(corpus_path), max_queries=64, max_query_chars=200, max_body_bytes=20_000)
    with serve_in_thread(create_app(config, retriever=engine)) as base:
        yield base


def post(base: str, body: object | bytes, **kwargs: object) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(f"{base}/retrieve", content=body, **kwargs)  # type: ignore[arg-type]
    return httpx.post(f"{base}/retrieve", json=body, **kwargs)  # type: ignore[arg-type]


def as_wire(passages: list[Passage]) -> list[dict[str, object]]:
    return [{"document": {"id": p.id, "contents": p.contents}, "score": p.score} for p in passages]


def test_search_r1_body_gets_search_r1_answer(url: str, engine: RandomRetriever) -> None:
    queries = ["who wrote hamlet", "capital of peru"]
    response = post(url, {"queries": queries, "topk": 3, "return_scores": True})
    assert response.status_code == 200
    assert response.json() == {"result": [as_wire(hits) for hits in engine.search(queries, 3)]}
    contents = response.json()["result"][0][0]["document"]["contents"]
    assert contents.startswith('"') and '"\n' in contents


def test_without_scores_items_are_bare_documents(url: str, engine: RandomRetriever) -> None:
    queries = ["a", "b"]  # Search-R1's own server answers exactly this case with HTTP 500 or wrong data
    response = post(url, {"queries": queries, "topk": 2, "return_scores": False})
    expected = [[{"id": p.id, "contents": p.contents} for p in hits] for hits in engine.search(queries, 2)]
    assert response.json() == {"result": expected}


@pytest.mark.parametrize("key", ["topk", "top_k", "k"])
def test_single_query_and_k_aliases(url: str, engine: RandomRetriever, key: str) -> None:
    response = post(url, {"query": "skyrl style", key: 2, "return_scores": True})
    assert response.json() == {"result": [as_wire(engine.search(["skyrl style"], 2)[0])]}


def test_default_k_and_empty_batch(url: str) -> None:
    assert [len(hits) for hits in post(url, {"queries": ["x", "y"]}).json()["result"]] == [3, 3]
    assert post(url, {"queries": []}).json() == {"result": []}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"\xff\xfe", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_body"),
        ({"topk": 3}, 422, "missing_queries"),
        ({"query": "a", "queries": ["b"]}, 422, "missing_queries"),
        ({"queries": "one string"}, 422, "invalid_queries"),
        ({"queries": ["ok", 5]}, 422, "invalid_queries"),
        ({"query": ["list"]}, 422, "invalid_queries"),
        ({"queries": ["a"], "topk": 0}, 422, "invalid_topk"),
        ({"queries": ["a"], "topk": 101}, 422, "invalid_topk"),
        ({"queries": ["a"], "topk": "3"}, 422, "invalid_topk"),
        ({"queries": ["a"], "topk": True}, 422, "invalid_topk"),
        ({"queries": ["a"], "topk": 3, "k": 4}, 422, "conflicting_topk"),
        ({"queries": ["a"], "return_scores": "yes"}, 422, "invalid_return_scores"),
        ({"queries": ["q"] * 65}, 413, "too_many_queries"),
        ({"queries": ["x" * 201]}, 413, "query_too_long"),
        ({"queries": ["y" * 150] * 200}, 413, "body_too_large"),
    ],
)
def test_bad_requests_get_clear_4xx_and_server_keeps_serving(url: str, body: object, status: int, code: str) -> None:
    response = post(url, body)
    assert response.status_code == status
    assert response.json()["error"] == code
    assert response.json()["detail"]  # says what to fix
    assert post(url, {"queries": ["still alive"]}).status_code == 200


def test_chunked_body_over_limit_is_refused(url: str) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while streaming
        yield b'{"queries": ["'
        for _ in range(30):
            yield b"z" * 1000
        yield b'"]}'

    response = httpx.post(f"{url}/retrieve", content=chunks())
    assert response.status_code == 413 and response.json()["error"] == "body_too_large"


def test_garbage_on_the_socket_does_not_kill_the_server(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"\x00\x01 NOT HTTP AT ALL\r\n\r\n")
        sock.recv(1024)
    assert post(url, {"queries": ["after garbage"]}).status_code == 200


def test_health_reports_engine_corpus_and_cache_hits(url: str, corpus: Corpus) -> None:
    before = httpx.get(f"{url}/health").json()
    assert before["ready"] and before["engine"] == "random" and before["corpus"]["size"] == len(corpus)
    group = ["same grpo question"] * 8  # a GRPO group repeats one query
    post(url, {"queries": group, "topk": 3})
    post(url, {"queries": group, "topk": 3})
    after = httpx.get(f"{url}/health").json()
    assert after["cache"]["hits"] - before["cache"]["hits"] == 8  # the whole second request
    assert after["batching"]["queries"] - before["batching"]["queries"] == 1  # repeats searched once
    assert 0 < after["cache"]["hit_rate"] <= 1


class SlowRetriever:
    """A real engine made slow (and breakable on one query) to observe batching and isolation."""

    name = "slow-random"

    def __init__(self, inner: RandomRetriever, delay: float):
        self.inner, self.delay, self.calls = inner, delay, []
        self.corpus = inner.corpus

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls.append(list(queries))
        time.sleep(self.delay)
        if "boom" in queries:
            raise ValueError("cannot search 'boom'")
        return self.inner.search(queries, k)


async def _concurrent(base: str, bodies: list[dict[str, object]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await asyncio.gather(*(client.post(f"{base}/retrieve", json=b) for b in bodies))


def test_concurrent_requests_are_merged_and_a_bad_query_fails_only_its_request(engine: RandomRetriever) -> None:
    slow = SlowRetriever(engine, delay=0.1)
    config = ServerConfig(cache_size=0, batch_wait_ms=20)
    with serve_in_thread(create_app(config, retriever=slow)) as base:
        bodies: list[dict[str, object]] = [{"queries": [f"q{i}", "shared"], "topk": 2} for i in range(12)]
        bodies.append({"queries": ["boom"], "topk": 2})
        responses = asyncio.run(_concurrent(base, bodies))
        health = httpx.get(f"{base}/health").json()
    for body, response in zip(bodies[:-1], responses[:-1], strict=True):
        expected = [[{"id": p.id, "contents": p.contents} for p in hits] for hits in engine.search(body["queries"], 2)]
        assert response.json() == {"result": expected}
    assert responses[-1].status_code == 500
    assert "cannot search 'boom'" in responses[-1].json()["detail"]
    assert health["batching"]["requests"] == 13
    assert health["batching"]["batches"] < 13  # requests that waited on a running batch were merged
    assert health["batching"]["inline_requests"] == 0  # an engine that does not say it only computes never is
    merged = [call for call in slow.calls if len(call) > 2]
    assert merged and all(call.count("shared") == 1 for call in merged)  # duplicates searched once


class ThreadRecordingRetriever(SlowRetriever):
    """A slow engine that says it only computes, and records the thread each search ran on."""

    compute_only = True

    def __init__(self, inner: RandomRetriever, delay: float):
        super().__init__(inner, delay)
        self.threads: list[str] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.threads.append(threading.current_thread().name)
        return super().search(queries, k)


def test_lone_requests_are_searched_on_the_event_loop_and_bursts_still_merge(engine: RandomRetriever) -> None:
    recording = ThreadRecordingRetriever(engine, delay=0.03)
    config = ServerConfig(cache_size=0, inline_budget_ms=200)
    with serve_in_thread(create_app(config, retriever=recording)) as base:
        for i in range(4):  # one client, a pause between requests: the engine is idle each time one arrives
            assert post(base, {"queries": [f"lone {i}"]}).status_code == 200
            time.sleep(0.1)
        lone = httpx.get(f"{base}/health").json()["batching"]
        bodies: list[dict[str, object]] = [{"queries": [f"burst {i}"]} for i in range(12)]
        responses = asyncio.run(_concurrent(base, bodies))
        burst = httpx.get(f"{base}/health").json()["batching"]
        bad = post(base, {"queries": ["boom"]})  # a failing search on the loop fails its request only
        after = post(base, {"queries": ["after boom"]})
    assert recording.calls[0] == ["searchenv warm-up"]  # searched once before the server said it was ready
    loop_thread = recording.threads[2]
    assert recording.threads[1].startswith("searchenv-retrieve")  # the first request: its duration was unknown
    assert recording.threads[2:5] == [loop_thread] * 3 and loop_thread == "searchenv-uvicorn"
    assert lone["inline_requests"] == 3 and lone["batches"] == 4
    assert all(r.status_code == 200 for r in responses)
    merged = burst["batches"] - lone["batches"]
    assert merged < 12 and burst["requests"] - lone["requests"] == 12  # requests that met a busy engine queued
    assert any(len(call) > 1 for call in recording.calls)
    assert bad.status_code == 500 and "cannot search 'boom'" in bad.json()["detail"]
    assert after.status_code == 200


def test_answers_are_the_same_searched_on_the_event_loop_or_on_the_worker_thread(engine: RandomRetriever) -> None:
    bodies: list[dict[str, object]] = [
        {"queries": [f"question {i}"], "topk": 1 + i % 4, "return_scores": i % 2 == 0} for i in range(8)
    ]
    answers, inline = [], []
    for budget_ms in (1000.0, 0.0):
        config = ServerConfig(cache_size=0, inline_budget_ms=budget_ms)
        with serve_in_thread(create_app(config, retriever=engine)) as base:
            answers.append([])
            for body in bodies:
                answers[-1].append(post(base, body).content)
                time.sleep(0.05)  # the engine sits idle far longer than a search takes
            inline.append(httpx.get(f"{base}/health").json()["batching"]["inline_requests"])
    assert inline[0] >= len(bodies) // 2 and inline[1] == 0  # (the first call, of unknown duration, is not inlined)
    assert answers[0] == answers[1]  # byte for byte


def test_retrieve_answers_wrong_methods_and_engine_bugs_with_json(engine: RandomRetriever) -> None:
    class Broken:
        compute_only = True

        def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
            if queries == ["bug"]:
                return [["not a passage"]]  # type: ignore[list-item]
            return engine.search(queries, k)

    with serve_in_thread(create_app(ServerConfig(cache_size=0), retriever=Broken())) as base:
        wrong_method = httpx.get(f"{base}/retrieve")
        bug = post(base, {"queries": ["bug"]})
        fine = post(base, {"queries": ["fine"]})
        missing = httpx.get(f"{base}/nowhere")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert wrong_method.json()["error"] == "method_not_allowed"
    assert bug.status_code == 500 and bug.json()["error"] == "internal_error" and "AttributeError" in bug.text
    assert fine.status_code == 200 and len(fine.json()["result"][0]) == 3
    assert missing.status_code == 404  # every other path is FastAPI's


def test_bearer_token(engine: RandomRetriever) -> None:
    with serve_in_thread(create_app(ServerConfig(token="s3cret"), retriever=engine)) as base:
        assert post(base, {"queries": ["a"]}).status_code == 401
        assert post(base, {"queries": ["a"]}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert post(base, {"queries": ["a"]}, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert httpx.get(f"{base}/health").json()["auth"] is True


def test_app_reports_an_engine_that_cannot_be_built(corpus_path: Path) -> None:
    config = ServerConfig(retriever="random", corpus=str(corpus_path), options={"no_such_option": 1})
    with serve_in_thread(create_app(config)) as base:
        for _ in range(200):
            health = httpx.get(f"{base}/health")
            if health.json()["status"] != "loading":
                break
            time.sleep(0.02)
        assert health.status_code == 503 and "no_such_option" in health.json()["error"]
        refused = post(base, {"queries": ["a"]})
        assert refused.status_code == 503 and refused.json()["error"] == "retriever_failed"


@pytest.mark.slow
def test_serve_exits_non_zero_with_the_cause_when_the_engine_cannot_be_built(corpus_path: Path) -> None:
    server = [sys.executable, "-m", "searchenv.retrievers.server", "--corpus", str(corpus_path), "--port", "0"]
    # refused by the checks before anything loads: one error line, exit 2 (as `searchenv serve`)
    for options, cause in (
        (["--option", "no_such_option=1"], "no option 'no_such_option'"),
        (["--retriever", "nosuchmodule:factory"], "no module 'nosuchmodule'"),
    ):
        done = subprocess.run([*server, *options], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and cause in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    # a factory's own options are its business: it fails when built, and the server exits 1 with the cause
    factory = ["--retriever", "searchenv.retrievers.random_retriever:RandomRetriever", "--option", "no_such_option=1"]
    done = subprocess.run([*server, *factory], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "could not build retriever" in done.stderr and "no_such_option" in done.stderr


def test_requests_wait_for_an_engine_that_is_still_loading(tmp_path: Path, corpus_path: Path) -> None:
    (tmp_path / "slow_loading.py").write_text(SLOW_LOADING_ENGINE)
    sys.path.insert(0, str(tmp_path))
    try:
        config = ServerConfig(retriever="slow_loading:build", corpus=str(corpus_path), options={"delay": 1.0})
        with serve_in_thread(create_app(config)) as base:
            response = post(base, {"queries": ["held"], "topk": 2}, timeout=30)  # sent while the engine loads
            assert response.status_code == 200 and len(response.json()["result"][0]) == 2
        config.hold_while_loading_s = 0.05
        with serve_in_thread(create_app(config)) as base:
            response = post(base, {"queries": ["not held long"]}, timeout=30)
            assert response.status_code == 503 and response.headers["Retry-After"] == "1"
            assert response.json()["error"] == "loading"
    finally:
        sys.path.remove(str(tmp_path))


SLOW_LOADING_ENGINE = """
import time
from searchenv.retrievers.random_retriever import RandomRetriever
from searchenv.retrievers.remote.retriever import RemoteRetriever


def build(corpus, delay):
    time.sleep(delay)
    return RandomRetriever(corpus, seed=1)
"""


def test_contents_are_returned_exactly_as_the_corpus_stores_them(shared_data: Path) -> None:
    union = shared_data / "corpus" / "union.jsonl"  # wiki-18 rows (no quotes) and HippoRAG rows (quoted titles)
    stored = {}
    for line in union.open(encoding="utf-8"):
        row = json.loads(line)
        stored[row["id"]] = row["contents"]
    corpus = Corpus.from_jsonl(union)
    engine = RandomRetriever(corpus, seed=3)
    queries = [f"q{i}" for i in range(60)]
    with serve_in_thread(create_app(ServerConfig(corpus=str(union)), retriever=engine)) as base:
        result = post(base, {"queries": queries, "topk": 5, "return_scores": True}).json()["result"]
        remote = RemoteRetriever(base).search(queries, 5)
    documents = [item["document"] for hits in result for item in hits]
    assert documents and all(doc["contents"] == stored[doc["id"]] for doc in documents)
    quoted = {doc["contents"].startswith('"') for doc in documents}
    assert quoted == {True, False}  # both layouts were served, each as stored
    # an environment behind the service shows each title line as stored, quotes or none, not re-quoted
    assert [[p.contents for p in hits] for hits in remote] == [[d["document"]["contents"] for d in r] for r in result]


def test_cli_arguments_default_to_loopback_and_reject_missing_corpus(tmp_path: Path, corpus_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    args = parser.parse_args(
        ["serve", "--retriever", "bm25", "--corpus", str(corpus_path), "--option", "k1=0.8", "--engine", "bm25s"]
    )
    assert args.host == "127.0.0.1" and args.handler.__name__ == "run_serve"
    config = config_from_args(args)
    assert config.options == {"k1": 0.8, "engine": "bm25s"} and config.token is None
    with pytest.raises(ValueError, match="retriever 'random' has no option 'k1'"):  # checked before any index loads
        config_from_args(parser.parse_args(["serve", "--corpus", str(corpus_path), "--option", "k1=0.8"]))
    missing = parser.parse_args(["serve", "--corpus", str(tmp_path / "nope.jsonl")])
    with pytest.raises(SystemExit, match="corpus file not found"):
        config_from_args(missing)
    with pytest.raises(SystemExit, match="needs --corpus"):
        config_from_args(parser.parse_args(["serve", "--retriever", "bm25"]))
    assert config_from_args(parser.parse_args(["serve", "--retriever", "web"])).corpus == ""  # the web needs none
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--corpus", str(corpus_path), "--option", "noequals"])
    for flag, value in (("--inline-budget-ms", "-1"), ("--batch-wait-ms", "nan")):
        with pytest.raises(SystemExit, match=f"{flag} must be 0 or more"):
            config_from_args(parser.parse_args(["serve", "--corpus", str(corpus_path), flag, value]))
    assert config_from_args(parser.parse_args(["serve", "--corpus", str(corpus_path)])).inline_budget_ms == 1.0


def _post_when_loaded(client: httpx.Client, body: dict, deadline_s: float = 60.0) -> httpx.Response:
    """POST like a well-behaved client: a worker that is still loading answers 503 + Retry-After; wait and retry."""
    deadline = time.monotonic() + deadline_s
    while True:
        response = client.post("/retrieve", json=body)
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        time.sleep(float(response.headers.get("Retry-After", "0.2")) / 5)


def test_worker_processes_serve_one_index(engine: RandomRetriever, corpus_path: Path) -> None:
    process, base = spawn_server(
        ["--retriever", "random", "--corpus", str(corpus_path), "--option", "seed=7", "--workers", "2"]
    )
    try:
        queries = [f"worker query {i}" for i in range(6)]
        expected = [[{"id": p.id, "contents": p.contents} for p in hits] for hits in engine.search(queries, 3)]
        for _ in range(6):  # fresh connections land on either worker; all must answer identically
            with httpx.Client(base_url=base, timeout=10) as client:
                assert _post_when_loaded(client, {"queries": queries}).json() == {"result": expected}
                assert client.post("/retrieve", content=b'{"queries": [1]}').status_code == 422
        assert process.poll() is None
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_bm25_engine_over_http_matches_in_process(corpus: Corpus, shared_data: Path) -> None:
    from searchenv.retrievers import bm25

    engine = bm25.BM25Retriever(corpus, show_progress=False)
    questions = [json.loads(line)["question"] for line in (shared_data / "qa" / "hotpotqa_100.jsonl").open()][:20]
    with serve_in_thread(create_app(ServerConfig(), retriever=engine)) as base:
        got = post(base, {"queries": questions, "topk": 3, "return_scores": True}).json()["result"]
    want = engine.search(questions, 3)
    assert got == [as_wire(hits) for hits in want]  # ids, contents and exact float scores survive the wire


def test_in_thread_server_stops_cleanly(engine: RandomRetriever) -> None:
    with serve_in_thread(create_app(ServerConfig(), retriever=engine)) as base:
        assert httpx.get(f"{base}/health").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/health")
