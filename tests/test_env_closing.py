"""Closing: an environment, a vector environment, and the engines the composition root built."""

from __future__ import annotations

import threading

import gymnasium as gym
import httpx
import pytest
from servers import serve_in_thread
from toyworld import CORPUS, QUESTIONS, ScriptedRetriever

import searchenv  # noqa: F401 - registers SearchQA-v0
from searchenv import SearchQAEnv, step_batch
from searchenv.components import build_retriever, close_shared
from searchenv.retrievers.bm25.retriever import BM25Retriever
from searchenv.retrievers.random_retriever import RandomRetriever
from searchenv.retrievers.server.app import ServerConfig, create_app


def make_env(**kwargs) -> SearchQAEnv:
    kwargs.setdefault("dataset", QUESTIONS)
    kwargs.setdefault("retriever", ScriptedRetriever())
    return SearchQAEnv(**kwargs)


def test_a_closed_env_refuses_to_step_reset_or_truncate_and_closes_twice():
    env = make_env()
    env.reset(options={"index": 0})
    env.close()
    with pytest.raises(RuntimeError, match="the environment is closed; make a new one"):
        env.step("<search>founder</search>")
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()
    with pytest.raises(RuntimeError, match="closed"):
        env.truncate()
    env.close()  # a second close is fine
    assert env.render() is None  # the episode went with the close


def test_step_batch_refuses_a_closed_env_before_stepping_any():
    retriever = ScriptedRetriever()
    first = make_env(retriever=retriever)
    second = first.sibling()
    first.reset(options={"index": 0})
    second.reset(options={"index": 1})
    second.close()
    with pytest.raises(RuntimeError, match="closed"):
        step_batch([first, second], ["<search>a</search>", "<search>b</search>"])
    assert retriever.calls == [] and first.episode.turns == []  # all or nothing


def test_with_block_closes_the_made_env():
    with gym.make("SearchQA-v0", dataset=QUESTIONS, retriever=ScriptedRetriever()) as env:
        env.reset(seed=0)
        *_, info = env.step("<answer>Quarnessa</answer>")
        assert info["end_reason"] == "answer"
    with pytest.raises(RuntimeError, match="closed"):
        env.unwrapped.reset()


def test_vector_env_close_closes_every_sub_env():
    envs = gym.make_vec("SearchQA-v0", num_envs=3, dataset=QUESTIONS, retriever=ScriptedRetriever())
    envs.reset(seed=0)
    envs.close()
    envs.close()
    for env in envs.unwrapped.envs:
        with pytest.raises(RuntimeError, match="closed"):
            env.reset()


def test_close_shared_closes_the_http_client_the_root_built():
    engine = RandomRetriever(CORPUS, seed=1)
    with serve_in_thread(create_app(ServerConfig(max_queries=8, token=None), retriever=engine)) as url:
        env = gym.make("SearchQA-v0", dataset=QUESTIONS, retriever=url)
        env.reset(seed=0)
        _, _, _, _, info = env.step("<search>founder</search>")
        assert "retrieval_error" not in info and len(info["passage_ids"]) == 3
        retriever = env.unwrapped.retriever
        assert build_retriever(url) is retriever  # the root's shared instance, not the env's own
        client = retriever._client
        assert isinstance(client, httpx.Client) and not client.is_closed
        env.close()
        assert not client.is_closed  # the env does not close what the root built
        close_shared()
        assert client.is_closed
        assert build_retriever(url) is not retriever  # forgotten: the next env gets a fresh client


def test_native_bm25_close_stops_its_search_threads():
    retriever = BM25Retriever(CORPUS, engine="native", threads=2)
    queries = [f"Quarnessa founded {i}" for i in range(64)]  # enough jobs for the helper thread to start

    def helpers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("bm25-native") and t.is_alive()]

    before = helpers()
    found = retriever.search(queries, 2)
    assert found[0][0].id == "p2"
    assert len(helpers()) > len(before)
    retriever.close()
    assert helpers() == before
    assert retriever.search(queries[:1], 2)[0][0].id == "p2"  # a later search starts them again
    retriever.close()
