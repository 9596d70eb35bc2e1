"""Property-based robustness of ``step``: arbitrary text never breaks an episode or the budget."""

from __future__ import annotations

import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toyworld import CORPUS, QUESTIONS

from searchenv import PROTOCOLS, SearchQAEnv, parse_action
from searchenv.episode.turns import facts
from searchenv.protocol import ParsedAction, Protocol
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
        # The step reads its counts and end flags on a fast path; the episode's own properties must agree.
        record = facts(ENV.episode.turns, ENV.protocol)
        assert info["num_searches"] == ENV.episode.num_searches == record.num_searches == len(record.searches)
        assert info["num_actions"] == ENV.episode.num_actions == record.num_actions
        assert (terminated, truncated) == (ENV.episode.terminated, ENV.episode.truncated)
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


def _first_complete_pair(text: str, protocol: Protocol) -> ParsedAction:
    """The rule as the docs state it, written the plain way: the reference for parse_action's scanner. The block
    is the first closing tag (of either kind) with an opening tag of its kind before it, and that nearest opener."""
    pairs = {"search": protocol.search_tags, "answer": protocol.answer_tags}
    closings = sorted(
        (i, kind) for kind, (_, close) in pairs.items() for i in range(len(text)) if text.startswith(close, i)
    )
    for close, kind in closings:
        open_tag, close_tag = pairs[kind]
        start = text.rfind(open_tag, 0, close)
        if start >= 0:
            end, content = close + len(close_tag), text[start + len(open_tag) : close].strip()
            if kind == "search" and not content:
                return ParsedAction("invalid", None, text[:end], text[end:])
            return ParsedAction(kind, content, text[:end], text[end:])
    return ParsedAction("invalid", None, text, "")


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["search-r1", "r1-searcher"]),
    st.lists(
        st.sampled_from(["<search>", "</search>", "<answer>", "</answer>", "<|begin_of_query|>", "<|end_of_query|>"])
        | st.sampled_from(["x", " ", "", "\n"]),
        max_size=14,
    ).map("".join),
)
def test_parse_action_agrees_with_the_plain_reading_of_its_rule(protocol, text):
    assert parse_action(text, PROTOCOLS[protocol]) == _first_complete_pair(text, PROTOCOLS[protocol])
