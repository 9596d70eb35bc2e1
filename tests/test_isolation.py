"""One episode's failure stays one episode's: a bad query or a broken engine answer fails only its own search.

Real parts: the embedded world with its native BM25 index, and a loopback ``searchenv serve`` app for the HTTP
client. The engines below wrap the real BM25 retriever and count their calls, so the tests see how many searches
the isolation costs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import gymnasium as gym
import pytest
from servers import free_port, serve_in_thread

import searchenv  # noqa: F401 - registers SearchQA-v0
from searchenv import Passage, SearchQAEnv, step_batch
from searchenv.env.stepping import step_batch_async
from searchenv.retrievers.remote.retriever import RemoteRetriever
from searchenv.retrievers.server.app import ServerConfig, create_app

POISON = "poison"


@pytest.fixture(scope="module")
def world_env() -> SearchQAEnv:
    """The zero-argument environment: the embedded world and its native BM25 index (built once per module)."""
    return SearchQAEnv()


class Poisoned:
    """A custom engine over the real BM25 index that raises when any query of a call holds the word ``poison``."""

    def __init__(self, engine: object):
        self.engine = engine
        self.calls: list[list[str]] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls.append(list(queries))
        if any(POISON in q for q in queries):
            raise ValueError("the engine cannot parse this query")
        return self.engine.search(queries, k)  # type: ignore[attr-defined]


class Down:
    """An engine whose backend is away: every call raises ``ConnectionError``."""

    def __init__(self) -> None:
        self.calls = 0

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls += 1
        raise ConnectionError("backend at 10.0.0.1:9200 refused the connection")


def episodes(world_env: SearchQAEnv, retriever: object, n: int, **kwargs: object) -> list[SearchQAEnv]:
    envs = [SearchQAEnv(retriever=retriever, **kwargs) for _ in range(n)]  # type: ignore[arg-type]
    for i, env in enumerate(envs):
        env.reset(options={"index": i})
    return envs


def questions(envs: Sequence[SearchQAEnv]) -> list[str]:
    return [env.episode.example.question for env in envs]


@pytest.mark.parametrize("bad", [[5], [0, 7], [2, 3, 4]])
def test_a_query_that_makes_the_engine_raise_fails_only_its_episode(world_env: SearchQAEnv, bad: list[int]) -> None:
    engine = Poisoned(world_env.retriever)
    envs = episodes(world_env, engine, 8)
    queries = [f"{POISON} {q}" if i in bad else q for i, q in enumerate(questions(envs))]
    results = step_batch(envs, [f"<search>{q}</search>" for q in queries])
    expected = world_env.retriever.search([q for i, q in enumerate(queries) if i not in bad], world_env.topk)
    good = [r for i, r in enumerate(results) if i not in bad]
    assert [r.info["passage_ids"] for r in good] == [[p.id for p in hits] for hits in expected]
    for i, result in enumerate(results):
        if i in bad:
            assert result.observation == envs[i].protocol.format_error()
            assert "cannot parse this query" in result.info["retrieval_error"]
            assert envs[i].episode.num_searches == 0
        else:
            assert "retrieval_error" not in result.info and envs[i].episode.num_searches == 1
    assert len(engine.calls) <= 1 + 2 * len(bad) * 3  # one batched call, then O(bad · log2 8) halves


def test_a_batch_without_failures_keeps_one_call(world_env: SearchQAEnv) -> None:
    engine = Poisoned(world_env.retriever)
    envs = episodes(world_env, engine, 8)
    step_batch(envs, [f"<search>{q}</search>" for q in questions(envs)])
    assert len(engine.calls) == 1


def test_the_async_step_isolates_too(world_env: SearchQAEnv) -> None:
    engine = Poisoned(world_env.retriever)
    envs = episodes(world_env, engine, 6)
    queries = questions(envs)
    queries[4] = f"{POISON} {queries[4]}"
    results = asyncio.run(step_batch_async(envs, [f"<search>{q}</search>" for q in queries]))
    assert ["retrieval_error" in r.info for r in results] == [False] * 4 + [True, False]
    assert all(len(r.info["passage_ids"]) == 3 for i, r in enumerate(results) if i != 4)


def test_raise_mode_keeps_raising_the_first_failure(world_env: SearchQAEnv) -> None:
    engine = Poisoned(world_env.retriever)
    envs = episodes(world_env, engine, 4, on_retrieval_error="raise")
    queries = questions(envs)
    queries[1] = POISON
    with pytest.raises(ValueError, match="cannot parse"):
        step_batch(envs, [f"<search>{q}</search>" for q in queries])
    assert len(engine.calls) == 1 and all(env.episode.turns == [] for env in envs)  # nothing applied


def test_a_service_that_is_down_fails_the_call_once(world_env: SearchQAEnv) -> None:
    engine = Down()
    envs = episodes(world_env, engine, 8)
    results = step_batch(envs, [f"<search>{q}</search>" for q in questions(envs)])
    assert engine.calls == 1  # not searched again query by query
    assert all("refused the connection" in r.info["retrieval_error"] for r in results)


@pytest.fixture(scope="module")
def server_url(world_env: SearchQAEnv) -> Iterator[str]:
    """A loopback ``searchenv serve`` app over the world's native BM25 index."""
    with serve_in_thread(create_app(ServerConfig(max_queries=64, token=None), retriever=world_env.retriever)) as url:
        yield url


def test_a_lone_surrogate_through_the_http_client_fails_only_its_episode(
    world_env: SearchQAEnv, server_url: str
) -> None:
    with RemoteRetriever(server_url, retry_window=0) as client:
        envs = episodes(world_env, client, 8)
        queries = questions(envs)
        queries[3] = "who founded \ud800 the guild"
        results = step_batch(envs, [f"<search>{q}</search>" for q in queries])
        direct = world_env.retriever.search(queries[:3] + queries[4:], world_env.topk)
        assert [r.info["passage_ids"] for i, r in enumerate(results) if i != 3] == [
            [p.id for p in hits] for hits in direct
        ]
        assert "surrogates not allowed" in results[3].info["retrieval_error"]
        assert client.requests <= 1 + 2 * 3


def test_the_vector_env_over_http_isolates_a_bad_query(server_url: str) -> None:
    venv = gym.make_vec("SearchQA-v0", num_envs=4, retriever=server_url)
    _, infos = venv.reset(seed=0)
    queries = list(infos["question"])
    queries[2] = "\udfff"
    _, _, _, _, step_infos = venv.step([f"<search>{q}</search>" for q in queries])
    assert list(step_infos["_retrieval_error"]) == [False, False, True, False]
    assert [n for n in step_infos["num_searches"]] == [1, 1, 0, 1]
    venv.close()


@pytest.mark.parametrize("on_error", ["raise", "empty"])
def test_a_dead_http_service_is_not_retried_query_by_query(world_env: SearchQAEnv, on_error: str) -> None:
    client = RemoteRetriever(f"http://127.0.0.1:{free_port()}", retry_window=0, on_error=on_error)  # type: ignore[arg-type]
    envs = episodes(world_env, client, 8)
    results = step_batch(envs, [f"<search>{q}</search>" for q in questions(envs)])
    assert client.requests == 1
    assert all("retrieval unreachable" in r.info["retrieval_error"] for r in results)


def bad_gateway_app(requests: list[int]) -> object:
    """What a proxy in front of a dead retrieval server answers: 502 Bad Gateway to every request (counted)."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def retrieve(request: object) -> PlainTextResponse:
        requests.append(1)
        return PlainTextResponse("502 Bad Gateway", status_code=502)

    return Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"])])


def test_a_502_outage_is_the_service_down_not_split_query_by_query(world_env: SearchQAEnv) -> None:
    requests: list[int] = []
    with serve_in_thread(bad_gateway_app(requests)) as url:
        client = RemoteRetriever(url, retry_window=0.3, backoff=0.02, max_backoff=0.02, seed=0)
        envs = episodes(world_env, client, 16)
        results = step_batch(envs, [f"<search>{q}</search>" for q in questions(envs)])
    attempts = client.requests
    assert len(requests) == attempts and client.failures == 1  # one call's attempts: the batch was not split
    assert all("retrieval unreachable" in r.info["retrieval_error"] for r in results)
    assert all("HTTP 502" in r.info["retrieval_error"] for r in results)


class Returns:
    """A custom engine that breaks the contract for the queries holding ``bad``: it returns ``wrong`` for them."""

    def __init__(self, engine: object, wrong: object):
        self.engine, self.wrong = engine, wrong

    def search(self, queries: Sequence[str], k: int) -> list[object]:
        found: list[object] = list(self.engine.search(queries, k))  # type: ignore[attr-defined]
        return [self.wrong if "bad" in q else hits for q, hits in zip(queries, found)]


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        ([{"id": "1", "title": "t", "text": "x"}], "Returns.search returned a dict for the query 'bad one'"),
        ([Passage("1", "t", None)], "a Passage whose text is NoneType"),  # type: ignore[arg-type]
        ([Passage(1, "t", "x")], "a Passage whose id is int"),  # type: ignore[arg-type]
        ("1 2 3", "Returns.search returned a str for the query 'bad one'"),
        (None, "returned a NoneType"),
    ],
)
def test_a_contract_breach_is_a_failed_search_of_that_query(world_env: SearchQAEnv, wrong: object, says: str) -> None:
    envs = episodes(world_env, Returns(world_env.retriever, wrong), 3)
    results = step_batch(envs, ["<search>good one</search>", "<search>bad one</search>", "<search>good</search>"])
    error = results[1].info["retrieval_error"]
    assert says in error and "it must return searchenv.Passage objects (id, title, text as str)" in error
    assert results[1].observation == envs[1].protocol.format_error()
    assert [len(results[i].info["passage_ids"]) for i in (0, 2)] == [3, 3]
    single = SearchQAEnv(retriever=Returns(world_env.retriever, wrong))
    single.reset(options={"index": 0})
    assert says in single.step("<search>bad one</search>")[4]["retrieval_error"]  # not an AttributeError
    strict = SearchQAEnv(retriever=Returns(world_env.retriever, wrong), on_retrieval_error="raise")
    strict.reset(options={"index": 0})
    with pytest.raises(TypeError, match="it must return searchenv.Passage objects"):
        strict.step("<search>bad one</search>")


@pytest.mark.parametrize("answer", [{"a": []}, [], [[], []], "passages"])
def test_an_answer_of_the_wrong_shape_fails_every_query_of_the_call(world_env: SearchQAEnv, answer: object) -> None:
    class Shapeless:
        def search(self, queries: Sequence[str], k: int) -> object:
            return answer

    envs = episodes(world_env, Shapeless(), 3)
    results = step_batch(envs, ["<search>a</search>"] * 3)
    for result in results:
        assert "Shapeless.search returned" in result.info["retrieval_error"]
        assert "it must return one list per query" in result.info["retrieval_error"]
