"""Property-based robustness of ``step``: arbitrary text never breaks an episode or the budget."""

from __future__ import annotations

import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toyworld import CORPUS, QUESTIONS

from searchenv import SearchQAEnv
from searchenv.retrievers.random_retriever import RandomRetriever

TAGS = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>", "<information>", "</information>"]
fragments = st.one_of(st.text(max_size=40), st.sampled_from(TAGS), st.sampled_from(["\n", " ", "\x00", "\ud7ff", "🙂"]))
actions = st.lists(fragments, max_size=12).map("".join)

ENV = SearchQAEnv(dataset=QUESTIONS, retriever=RandomRetriever(CORPUS, seed=0), reward="format", max_turns=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(actions, min_size=1, max_size=8), st.integers(0, 2))
def test_any_text_ends_within_budget_without_errors(turns, index):
    ENV.reset(options={"index": index})
    done, steps = False, 0
    for action in turns:
        obs, reward, terminated, truncated, info = ENV.step(action)
        steps += 1
        assert isinstance(obs, str) and info["action"] in {"search", "answer", "invalid"}
        done = terminated or truncated
        if done:
            assert 0.0 <= reward <= 1.0 and "reward_parts" in info
            break
        assert reward == 0.0
    assert steps <= ENV.max_turns
    if steps == ENV.max_turns:
        assert done


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["<search>", "</search>", "<answer>", "</answer>", "x", " "]), max_size=20).map("".join)
)
def test_unbalanced_and_nested_tags(action):
    ENV.reset(options={"index": 0})
    obs, reward, terminated, truncated, info = ENV.step(action)
    if info["action"] == "answer":
        assert terminated and info["prediction"] is not None
    else:
        assert not terminated


def test_megabyte_actions_keep_memory_bounded():
    big = "a" * 1_000_000
    tracemalloc.start()
    for round_ in range(3):
        ENV.reset(options={"index": 0})
        for action in (big, f"<search>{big}</search>", big + "<answer>x</answer>" + big, big):
            _, _, terminated, truncated, info = ENV.step(action)
            if terminated or truncated:
                break
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 64 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB in round {round_}"
    tracemalloc.stop()
    assert info.get("query_clipped") in (None, True, False)
