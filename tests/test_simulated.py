"""The simulated search engine: a model writes the results. A loopback stand-in speaking OpenAI's wire format for
the rules (which documents are noisy, the schedule, the cache, the golds, failures, the env's clipping), a real
``transformers serve`` and a local SmolLM2 for the model (slow)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from servers import openai_chat_app, serve_in_thread

from searchenv.retrievers import CORPUS_FREE, RETRIEVER_OPTIONS, check_retriever_options, make_retriever
from searchenv.retrievers.simulated.engine import SimulatedRetriever
from searchenv.types import Passage


def _writer(prompt: str) -> str:
    """A stand-in model: says which kind of document it was asked for, and echoes the query line."""
    if "Query: " not in prompt:
        return "ready"  # the one-token check the composition root makes when it builds the engine
    kind = "NOISY" if "does not contain the answer" in prompt else "USEFUL"
    query = prompt.split("Query: ")[1].split("\n")[0]
    return f"{kind} passage about {query}.\n\nignored after the stop"


def test_options_are_checked_before_anything_loads() -> None:
    assert "simulated" in CORPUS_FREE and "p_noisy" in RETRIEVER_OPTIONS["simulated"]
    with pytest.raises(ValueError, match="needs 'model'"):
        check_retriever_options("simulated", {"url": "http://127.0.0.1:9"})
    with pytest.raises(ValueError, match="p_noisy must be a number in"):
        check_retriever_options("simulated", {"url": "http://x", "model": "m", "p_noisy": [[10, 0.1], [5, 0.2]]})
    with pytest.raises(ValueError, match="has no option 'p'"):
        check_retriever_options("simulated", {"url": "http://x", "model": "m", "p": 0.5})
    with pytest.raises(ValueError, match="temperature"):
        check_retriever_options("simulated", {"url": "http://x", "model": "m", "temperature": -1.0})


def test_noisy_documents_follow_p_and_its_schedule_reproducibly() -> None:
    engine = SimulatedRetriever("http://127.0.0.1:9", "m", p_noisy=[[0, 0.0], [100, 1.0]], seed=3)
    assert engine.noisy_flags("q", 50) == [False] * 50
    engine.set_step(50)
    half = engine.noisy_flags("q", 50)
    assert 10 < sum(half) < 40 and half == engine.noisy_flags("q", 50)  # a pure function of (seed, query)
    engine.set_step(75)
    more = engine.noisy_flags("q", 50)
    assert all(m or not h for h, m in zip(half, more)) and sum(more) > sum(half)  # a superset as p rises
    engine.set_step(100)
    assert engine.noisy_flags("q", 50) == [True] * 50
    other = SimulatedRetriever("http://127.0.0.1:9", "m", p_noisy=0.5, seed=4)
    assert other.noisy_flags("q", 50) != SimulatedRetriever("http://127.0.0.1:9", "m", p_noisy=0.5).noisy_flags("q", 50)
    with pytest.raises(ValueError, match="non-negative integer"):
        engine.set_step(-1)


def test_documents_are_passages_one_per_prompt() -> None:
    asked: list[str] = []
    with serve_in_thread(openai_chat_app(_writer, asked)) as url:
        engine = make_retriever("simulated", url=url, model="writer", p_noisy=0.5, seed=1)
        first = engine.search(["who founded orvane abbey", "capital of x"], 4)
        assert len(asked) == 8 and all(len(found) == 4 for found in first)
        assert all(isinstance(p, Passage) and p.title == "who founded orvane abbey" for p in first[0])
        assert all(p.text.endswith("about who founded orvane abbey.") for p in first[0])  # stop string honoured
        flags = engine.noisy_flags("who founded orvane abbey", 4)
        assert [p.text.startswith("NOISY") for p in first[0]] == flags and any(flags) and not all(flags)
        assert len({p.id for p in first[0] + first[1]}) == 8
        assert engine.search(["capital of x", "who founded orvane abbey"], 4) == first[::-1] and len(asked) == 16
        engine.search(["who founded orvane abbey"], 4, golds=[["Tesk Mallor"]])  # golds steer both kinds
        steered = asked[16:]
        assert len(steered) == 4 and all('"Tesk Mallor"' in p for p in steered)
        assert any("answer is" in p for p in steered) and any("Do not mention" in p for p in steered)


def test_a_simulated_run_recorded_replays_with_the_endpoint_down(tmp_path) -> None:
    asked: list[str] = []
    cache = str(tmp_path / "simulated.sqlite")
    actions = ["<search>who founded orvane abbey</search>", "<search>capital of x</search>", "<answer>x</answer>"]

    def play(options: dict) -> list:
        with gym.make("SearchQA-v0", retriever="simulated", retriever_options=options, topk=2) as env:
            env.reset(seed=0)
            return [env.step(action)[:4] for action in actions]

    with serve_in_thread(openai_chat_app(_writer, asked)) as url:
        recorded = play({"url": url, "model": "writer", "p_noisy": 0.5, "cache": cache, "cache_mode": "record"})
        documents = [prompt for prompt in asked if "Query: " in prompt]
        assert len(documents) == 4 and asked[0] == "Hello"  # the engine was checked when gym.make built it
        cached = play({"url": url, "model": "writer", "p_noisy": 0.5, "cache": cache})  # cache_mode "cached"
        assert cached == recorded and asked[5:] == ["Hello"]  # a check, then every document from the file
    replayed = play({"url": url, "model": "writer", "p_noisy": 0.5, "cache": cache, "cache_mode": "replay"})
    assert replayed == recorded and len(asked) == 6  # the endpoint is gone: every document came from the record
    engine = make_retriever("simulated", url=url, model="writer", cache=cache, cache_mode="replay")
    with pytest.raises(RuntimeError, match="not in the record simulated.sqlite"):
        engine.search(["never searched"], 1)


def test_a_failed_document_fails_the_search_naming_the_query() -> None:
    with serve_in_thread(openai_chat_app(lambda prompt: 503 if "bad query" in prompt else "fine")) as url:
        engine = SimulatedRetriever(url, "m", retries=0)
        assert engine.search(["good query"], 2)[0][0].text == "fine"
        with pytest.raises(RuntimeError, match="no document for query 'bad query'"):
            engine.search(["good query", "bad query"], 2)


def test_the_env_shows_simulated_documents_clipped_like_any_engine() -> None:
    long_text = " ".join(f"w{i}" for i in range(400))
    with serve_in_thread(openai_chat_app(lambda prompt: 503 if "broken" in prompt else long_text)) as url:
        options = {"url": url, "model": "m", "retries": 0}
        with gym.make(
            "SearchQA-v0", retriever="simulated", retriever_options=options, topk=3, max_information_words=50
        ) as env:
            env.reset(seed=0)
            observation, _, _, _, info = env.step("<search>who founded it</search>")
            _, _, _, _, failed = env.step("<search>broken</search>")
    assert info["information_clipped"] and len(info["passage_ids"]) == 3  # the 50 words are shared: 17, 17, 16
    assert "w16 …" in observation and "w15 …" in observation and "w17" not in observation
    assert "<information>" in observation
    assert "no document for query 'broken'" in failed["retrieval_error"]  # a failure, never a result


@pytest.mark.slow
def test_simulated_engine_against_transformers_serve(transformers_server, smollm2_dir) -> None:
    engine = make_retriever("simulated", url=transformers_server, model=str(smollm2_dir), words=20, p_noisy=0.5)
    found = engine.search(["who founded orvane abbey"], 2)
    assert len(found[0]) >= 1 and all(p.text.strip() for p in found[0])
    assert engine.search(["who founded orvane abbey"], 2) == found  # greedy: the same documents again


@pytest.mark.slow
def test_simulated_engine_with_a_local_model(smollm2_dir) -> None:
    engine = SimulatedRetriever(model=str(smollm2_dir), words=16, device="cpu", seed=2)
    found = engine.search(["capital of france"], 2, golds=[["Paris"]])
    again = SimulatedRetriever(model=str(smollm2_dir), words=16, device="cpu", seed=2).search(
        ["capital of france"], 2, golds=[["Paris"]]
    )
    assert found == again and all(p.text for p in found[0])  # greedy: the same documents in a new engine
