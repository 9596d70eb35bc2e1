"""``step_async``: step's contract as a coroutine, with the searches of concurrent episodes merged.

Real parts: the embedded world and its native BM25 index. The engines below wrap the real BM25 retriever and
count their calls, so the tests see how many engine calls the concurrent episodes cost.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from searchenv import Passage, SearchQAEnv
from searchenv.env.merged_search import SearchMerger
from searchenv.env.step_rules import StepResult
from searchenv.env.stepping import step_batch_async
from searchenv.retrievers.batching import MicroBatcher

POISON = "poison"


@pytest.fixture(scope="module")
def world_env() -> SearchQAEnv:
    """The zero-argument environment: the embedded world and its native BM25 index (built once per module)."""
    return SearchQAEnv()


class Counting:
    """The real BM25 engine, counting its calls and queries; raises on a call holding the word ``poison``."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.calls = 0
        self.queries = 0
        self.golds: list[tuple[str, list[str]]] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls += 1
        self.queries += len(queries)
        if any(POISON in q for q in queries):
            raise ValueError("the engine cannot parse this query")
        return self.engine.search(queries, k)


class WantsGolds(Counting):
    """Records the gold answers handed with each query (what the ``distractor`` engine reads)."""

    wants_golds = True

    def search(self, queries: Sequence[str], k: int, golds: Sequence[Sequence[str]] = ()) -> list[list[Passage]]:
        self.golds.extend((q, list(g)) for q, g in zip(queries, golds))
        return super().search(queries, k)


def script(env: SearchQAEnv, seed: int) -> list[str]:
    """A seeded episode: one to three searches built from the question, sometimes an invalid turn, then an
    answer; every 17th episode only searches, so the action budget ends it."""
    rng = random.Random(seed)
    words = env.episode.example.question.rstrip("?").split()
    searches = 4 if seed % 17 == 0 else rng.randint(1, 3)
    actions = [f"<search> {' '.join(rng.sample(words, min(len(words), rng.randint(2, 6))))} </search>"]
    actions += [f"<search>{env.episode.example.question}</search>"] * (searches - 1)
    if searches < 3 and rng.random() < 0.3:
        actions.append("I should look this up.")
    if searches < 4:
        answer = env.episode.example.golden_answers[0] if rng.random() < 0.5 else "nobody"
        actions.append(f"<answer>{answer}</answer>")
    return actions


def episodes(retriever: Any, n: int, **kwargs: Any) -> list[SearchQAEnv]:
    first = SearchQAEnv(retriever=retriever, **kwargs)
    envs = [first] + [first.sibling() for _ in range(n - 1)]
    for i, env in enumerate(envs):
        env.reset(options={"index": i})
    return envs


def one_by_one(envs: list[SearchQAEnv]) -> list[list[StepResult]]:
    return [[env.step(action) for action in script(env, i)] for i, env in enumerate(envs)]


async def concurrently(envs: list[SearchQAEnv], merger: SearchMerger) -> list[list[StepResult]]:
    """Every episode steps on its own task, with a seeded think time of 0-4 ms before each action."""

    async def play(i: int, env: SearchQAEnv) -> list[StepResult]:
        env.search_merger = merger
        rng = random.Random(1_000 + i)
        results = []
        for action in script(env, i):
            await asyncio.sleep(rng.uniform(0.0, 0.004))
            results.append(await env.step_async(action))
        return results

    return await asyncio.gather(*(play(i, env) for i, env in enumerate(envs)))


def executed_searches(results: list[list[StepResult]]) -> int:
    return sum(r.info["action"] == "search" and "search_skipped" not in r.info for rs in results for r in rs)


def test_256_concurrent_episodes_match_one_by_one_with_few_engine_calls(world_env: SearchQAEnv) -> None:
    engine = Counting(world_env.retriever)
    expected = one_by_one(episodes(engine, 256))
    searches = executed_searches(expected)
    assert engine.calls == searches > 256  # one by one, every search is one call

    engine.calls = 0
    got = asyncio.run(concurrently(episodes(engine, 256), SearchMerger()))
    assert got == expected  # observations, rewards, end flags and infos, step by step
    assert sum(r.terminated or r.truncated for rs in got for r in rs) == 256
    assert engine.calls / searches < 0.25, (engine.calls, searches)


def test_a_bad_query_among_concurrent_ones_fails_only_its_episode(world_env: SearchQAEnv) -> None:
    engine = Counting(world_env.retriever)
    envs = episodes(engine, 32)
    actions = [f"<search>{env.episode.example.question}</search>" for env in envs]
    actions[5] = f"<search>{POISON} pill</search>"
    reference = episodes(world_env.retriever, 32)
    expected = [env.step(a) for env, a in zip(reference, actions)]

    async def run() -> list[StepResult]:
        merger = SearchMerger(wait_ms=5)
        for env in envs:
            env.search_merger = merger
        return await asyncio.gather(*(env.step_async(a) for env, a in zip(envs, actions)))

    got = asyncio.run(run())
    assert got[5].info["retrieval_error"] == "ValueError: the engine cannot parse this query"
    assert envs[5].episode.turns[-1].search == "failed"
    assert [r for i, r in enumerate(got) if i != 5] == [r for i, r in enumerate(expected) if i != 5]
    assert engine.calls < 32  # merged, and the failure narrowed down in halves, not query by query


def test_raise_mode_raises_in_the_bad_episode_only(world_env: SearchQAEnv) -> None:
    engine = Counting(world_env.retriever)
    envs = episodes(engine, 16, on_retrieval_error="raise")
    actions = [f"<search>{env.episode.example.question}</search>" for env in envs]
    actions[3] = f"<search>{POISON}</search>"

    async def run() -> list[Any]:
        steps = (env.step_async(a) for env, a in zip(envs, actions))
        return await asyncio.gather(*steps, return_exceptions=True)

    got = asyncio.run(run())
    assert isinstance(got[3], ValueError) and "cannot parse" in str(got[3])
    assert len(envs[3].episode.turns) == 0  # nothing applied to the episode whose search raised
    assert all(isinstance(r, StepResult) and r.info["passage_ids"] for i, r in enumerate(got) if i != 3)


def test_gold_answers_reach_an_engine_that_asks_for_them(world_env: SearchQAEnv) -> None:
    engine = WantsGolds(world_env.retriever)
    envs = episodes(engine, 24)

    async def run() -> None:
        await asyncio.gather(*(env.step_async(f"<search>{env.episode.example.question}</search>") for env in envs))

    asyncio.run(run())
    assert engine.calls < 24
    sent = dict(engine.golds)
    for env in envs:
        assert sent[env.episode.example.question] == list(env.episode.example.golden_answers)


def test_misuse_raises_as_step_does(world_env: SearchQAEnv) -> None:
    sync, coro = episodes(world_env.retriever, 2)
    for env in (sync, coro):
        env.reset(options={"index": 0})
    assert sync.step("<answer>x</answer>") == asyncio.run(coro.step_async("<answer>x</answer>"))
    with pytest.raises(RuntimeError) as step_error:
        sync.step("<answer>y</answer>")
    with pytest.raises(RuntimeError) as async_error:
        asyncio.run(coro.step_async("<answer>y</answer>"))
    assert str(async_error.value) == str(step_error.value)
    coro.reset(options={"index": 1})
    with pytest.raises(TypeError, match="got int"):
        asyncio.run(coro.step_async(7))  # type: ignore[arg-type]
    assert coro.episode.turns == []


class Slow(Counting):
    """Searches after a pause, so a test can act while a search is in flight."""

    def __init__(self, engine: Any):
        super().__init__(engine)
        self.searching = threading.Event()

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.searching.set()
        threading.Event().wait(0.3)
        return super().search(queries, k)


def test_a_reset_during_the_search_is_refused_and_nothing_applied(world_env: SearchQAEnv) -> None:
    engine = Slow(world_env.retriever)
    (env,) = episodes(engine, 1)

    async def run() -> None:
        step = asyncio.create_task(env.step_async("<search>capital</search>"))
        while not engine.searching.is_set():
            await asyncio.sleep(0.005)
        env.reset(options={"index": 3})
        with pytest.raises(RuntimeError, match="reset, closed or stepped"):
            await step

    asyncio.run(run())
    assert env.episode.turns == [] and env.episode.example.id == env.examples[3].id


def test_two_successive_event_loops_each_merge(world_env: SearchQAEnv) -> None:
    engine = Counting(world_env.retriever)
    merger = SearchMerger()
    for round_ in range(2):
        envs = episodes(engine, 64)
        for env in envs:
            env.search_merger = merger
        engine.calls = 0

        async def run(envs: list[SearchQAEnv] = envs) -> list[StepResult]:
            return await asyncio.gather(*(e.step_async(f"<search>{e.episode.example.question}</search>") for e in envs))

        results = asyncio.run(run())
        assert all(r.info["passage_ids"] for r in results), round_
        assert engine.calls < 64 / 4, round_


def test_step_batch_async_still_steps_a_batch_in_one_call(world_env: SearchQAEnv) -> None:
    engine = Counting(world_env.retriever)
    envs = episodes(engine, 8)
    results = asyncio.run(step_batch_async(envs, [f"<search>{e.episode.example.question}</search>" for e in envs]))
    assert engine.calls == 1 and all(r.info["passage_ids"] for r in results)


def test_a_batcher_busy_on_one_loop_refuses_another() -> None:
    started, release = threading.Event(), threading.Event()

    async def run(key: object, items: list[str]) -> list[str]:
        started.set()
        await asyncio.to_thread(release.wait, 10)
        return items

    batcher: MicroBatcher[str, str] = MicroBatcher(run, max_wait_s=0.0, max_items=8)
    worker = threading.Thread(target=lambda: asyncio.run(batcher.submit(["a"], 1)))
    worker.start()
    try:
        assert started.wait(10)
        with pytest.raises(RuntimeError, match="another event loop"):
            asyncio.run(batcher.submit(["b"], 1))
    finally:
        release.set()
        worker.join()
    assert asyncio.run(batcher.submit(["c"], 1)) == ["c"]  # idle again: it serves the new loop
