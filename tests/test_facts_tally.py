"""The facts kept one turn at a time (``FactsTally``) are the facts read from the whole transcript.

Before, every step re-read the whole transcript for the episode's facts, the think-repetition measure included, so
a step's cost grew with the episode (32 turns x 1,500 think words: ~240 ms of stepping per episode, the last
steps ~30x the first; ``python bench/bench_env.py --long-episodes 20``). The tally folds each turn in once. This
file keeps the whole-transcript computation as it was (``reference_facts``) and checks, after every step of
generated episodes on every protocol, that the tally's facts and metrics are exactly the reference's.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from searchenv import Passage, SearchQAEnv
from searchenv.episode.episode import metrics_of
from searchenv.episode.health import count_passages, count_repeated_queries, repetition_ratio, think_text
from searchenv.episode.turns import Facts, Turn
from searchenv.protocol import PROTOCOLS, Protocol
from searchenv.types import Document


def reference_facts(turns: Sequence[Turn], protocol: Protocol, *, credit_searches: bool = True) -> Facts:
    """``Facts.of`` as it was: every fact read from the whole transcript at once."""
    turns = tuple(turns)
    final = turns[-1].action if turns else None
    searches = tuple(t for t in turns if t.searched) if credit_searches else ()
    shown = (t for t in turns if t.searched or t.read) if credit_searches else ()
    bodies = (protocol.information_body(t.observation) for t in shown)
    model_text = "".join(t.action.kept for t in turns)
    thought = think_text((t.action.kept for t in turns), protocol.think_tags)
    prediction = final.content if final is not None and final.kind == "answer" else None
    counts = [
        count_passages(protocol.information_body(t.observation) or "", protocol.passage_template) for t in searches
    ]
    return Facts(
        turns=turns,
        prediction=prediction,
        searches=searches,
        num_actions=len(turns),
        num_searches=len(searches),
        num_failed_searches=sum(t.search == "failed" for t in turns) if credit_searches else 0,
        num_invalid=sum(t.action.kind == "invalid" for t in turns),
        num_opens=sum(t.read for t in turns) if credit_searches else 0,
        num_failed_opens=sum(t.opened == "failed" for t in turns) if credit_searches else 0,
        shown_texts=tuple(body for body in bodies if body is not None),
        model_text=model_text,
        response="".join(t.action.kept + t.observation for t in turns),
        response_words=len(model_text.split()),
        think_words=len(thought.split()),
        think_repetition=repetition_ratio(thought),
        answer_words=len(prediction.split()) if prediction else 0,
        num_repeated_searches=count_repeated_queries([t.action.content or "" for t in searches]),
        passages_read=None if None in counts else sum(counts),  # type: ignore[arg-type]
    )


class VaryingRetriever:
    """A few passages per query, none for some, and a failure every seventh call; results open as documents."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.calls = 0

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls += 1
        if self.calls % 7 == 0:
            raise ConnectionError("generated outage")
        return [
            [
                Passage(f"{q[:8]}-{i}", "Brosara", "word " * self.rng.randint(0, 30))
                for i in range(self.rng.randint(0, k))
            ]
            for q in queries
        ]

    def open_documents(self, refs: Sequence[str]) -> list[Document | BaseException]:
        return [Document(ref, "Brosara", "page " * 20) if ref.endswith("0") else LookupError(ref) for ref in refs]


WORDS = ["loop", "the", "same", "phrase", "again", "Brosara", "É", "东京", "x"]


def _think(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(0, 12))]
    return " ".join(words * rng.randint(1, 3))  # repeated runs: 4-grams that repeat, across turns too


def _action(rng: random.Random, protocol: Protocol) -> str:
    think_open, think_close = protocol.think_tags or ("<think>", "</think>")
    search_open, search_close = protocol.search_tags
    answer_open, answer_close = protocol.answer_tags
    parts = [
        f"{think_open}{_think(rng)}{think_close}",
        f"{think_open} {_think(rng)}\n{think_close}",
        f"{search_open} {rng.choice(['who founded it', 'Who  founded it', 'when'])} {search_close}",
        f"{answer_open} {rng.choice(['Brosara', 'a b c', ''])} {answer_close}",
        "<access> 1 </access>",
        '<tool_call>{"name": "search", "arguments": {"query": "who founded it"}}</tool_call>',
        '<tool_call>{"name": "open_page", "arguments": {"ref": "1"}}</tool_call>',
        '<tool_call>{"name": "answer", "arguments": {"answer": "Brosara"}}</tool_call>',
        rng.choice(["word", "  ", "\n", "tail", "é\u0301", ""]),
        think_open,
    ]
    return "".join(rng.choice(parts) for _ in range(rng.randint(0, 4)))


PROTOCOL_NAMES = ["search-r1", "r1-searcher", "r-search", "asearcher", "tool-call", "tool-call-open"]


@pytest.mark.parametrize("protocol", PROTOCOL_NAMES)
def test_the_tally_is_the_whole_transcript_reading_after_every_step(protocol: str) -> None:
    rng = random.Random(PROTOCOL_NAMES.index(protocol))
    proto = PROTOCOLS[protocol]
    env = SearchQAEnv(
        dataset=[{"id": "d", "question": "Who founded it?", "golden_answers": ["Brosara"]}],
        retriever=VaryingRetriever(rng.randint(0, 10**6)),
        reward="format-retrieval",
        protocol=protocol,
        max_turns=8,
        topk=3,
    )
    for _ in range(150):
        env.reset(options={"index": 0})
        while True:
            *_, terminated, truncated, info = env.step(_action(rng, proto))
            episode = env.episode
            expected = reference_facts(episode.turns, proto)
            tallied = episode.facts
            assert tallied == expected and tallied.turns == expected.turns and tallied.searches == expected.searches
            assert episode.metrics() == metrics_of(expected, episode.reward, episode.reward_parts, episode.end_reason)
            assert (episode.num_searches, episode.prediction) == (expected.num_searches, expected.prediction)
            if terminated or truncated:
                assert info["episode_metrics"] == episode.metrics()
                break
        untrusted = Facts.of(episode.turns, proto, credit_searches=False)
        assert untrusted == reference_facts(episode.turns, proto, credit_searches=False)


def test_words_that_run_across_actions_are_counted_once() -> None:
    protocol = PROTOCOLS["search-r1"]
    env = SearchQAEnv(
        dataset=[{"id": "d", "question": "q", "golden_answers": ["x"]}], retriever=VaryingRetriever(1), max_turns=4
    )
    env.reset(options={"index": 0})
    for action in ["<think>one two</think>tail", "end <think>two three four</think>", "x"]:
        env.step(action)
    facts = env.episode.facts
    assert facts == reference_facts(env.episode.turns, protocol)
    assert facts.response_words == len(facts.model_text.split())


def test_a_refused_or_rewritten_turn_list_is_read_again() -> None:
    """The tally follows ``episode.turns``: a step scored but not applied, or turns replaced, are read afresh."""
    protocol = PROTOCOLS["search-r1"]
    env = SearchQAEnv(
        dataset=[{"id": "d", "question": "q", "golden_answers": ["x"]}], retriever=VaryingRetriever(1), max_turns=6
    )
    env.reset(options={"index": 0})
    env.step("<think>a b c d a b c d</think><search>q</search>")
    episode = env.episode
    from searchenv.protocol import parse_action

    scored = episode.facts_of((*episode.turns, Turn(parse_action("<answer> x </answer>", protocol))))
    assert scored.prediction == "x" and episode.prediction is None  # the scored turn was never appended
    assert episode.facts == reference_facts(episode.turns, protocol)
    episode.turns[:] = [Turn(parse_action("<think>other</think>", protocol))]
    assert episode.facts == reference_facts(episode.turns, protocol)


def test_a_late_step_reads_no_more_text_than_an_early_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's cost must not grow with the episode: count the actions the tag scanner reads per step (every
    reading of the transcript goes through it) early and late in a 30-step episode."""
    from searchenv.protocol.scan import TagScanner

    reads = [0]
    original = TagScanner.read

    def counting(self: TagScanner, text: str):  # type: ignore[no-untyped-def]
        reads[0] += 1
        return original(self, text)

    monkeypatch.setattr(TagScanner, "read", counting)
    env = SearchQAEnv(
        dataset=[{"id": "d", "question": "q", "golden_answers": ["x"]}], retriever=VaryingRetriever(2), max_turns=40
    )
    env.reset(options={"index": 0})
    per_step = []
    for i in range(30):
        before = reads[0]
        env.step(f"<think>step {i} thinks the same thing again</think><search> query {i} </search>")
        per_step.append(reads[0] - before)
    assert max(per_step[-5:]) <= max(per_step[:5]), per_step
