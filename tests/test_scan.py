"""The one tag scanner: the block rule, environment texts, and every reader of model text agreeing on it."""

from __future__ import annotations

import json

import pytest
from toyworld import QUESTIONS, ScriptedRetriever

from searchenv import SearchQAEnv
from searchenv.episode.readers import turns_from_text
from searchenv.episode.turns import facts
from searchenv.protocol import PROTOCOLS, Protocol, parse_action
from searchenv.protocol.base import SEARCH_R1_ORIGINAL_HINT
from searchenv.protocol.scan import ENV_TEXT, Block, TagScanner
from searchenv.protocol.tool_calls import chat_messages
from searchenv.reward_specs.blocks import block_content

PAIRS = {"search": ("<search>", "</search>"), "answer": ("<answer>", "</answer>")}
HINT = "\nUse <search> and </search>.\n"
SEARCH_R1 = PROTOCOLS["search-r1"]


def test_a_block_is_the_first_closing_tag_with_its_nearest_opening_tag() -> None:
    text = "<answer> a <answer> b </answer> <search> c </search>"
    block = TagScanner(PAIRS).read(text).first()
    assert block == Block("answer", 11, 19, 22, 31) and text[block.body_start : block.body_end] == " b "


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("</answer> x <answer> y </answer>", ("answer", " y ")),  # a closing tag with no opener before it is text
        ("<search> q <answer> a </answer> </search>", ("answer", " a ")),  # the first closing tag wins
        ("<answer> a <search> q </search> </answer>", ("search", " q ")),
        ("<search> q </answer> </search>", ("search", " q </answer> ")),  # a closing tag of another kind is text
        ("<answer> a", None),
        ("", None),
    ],
)
def test_the_rule_on_mixed_tags(text: str, expected: tuple[str, str] | None) -> None:
    block = TagScanner(PAIRS).read(text).first()
    assert (None if block is None else (block.kind, text[block.body_start : block.body_end])) == expected


def test_an_environment_text_is_opaque_and_no_block_spans_it() -> None:
    scanner = TagScanner(PAIRS, ["\nother hint\n", HINT])
    text = "x" + HINT + "<answer>y</answer>\nother hint\n"
    assert scanner.read(text).first() == Block(ENV_TEXT, 1, 1, 1 + len(HINT), 1 + len(HINT))
    assert scanner.read(text).first_block().kind == "answer"
    assert scanner.read("<answer> y" + HINT + "</answer>").first_block() is None  # the opener before it is gone
    assert scanner.read(HINT + "<search>").first_block() is None  # tags inside it are not read
    assert scanner.read(text).env_text_at(1) == 1 + len(HINT) and scanner.read(text).env_text_at(2) == -1


def test_blocks_are_read_one_after_another() -> None:
    scanner = TagScanner({"evidence": ("<e>", "</e>")})
    assert [b.start for b in scanner.read("<e>1</e> </e> <e><e>2</e>").blocks()] == [0, 17]
    assert block_content("<e> first </e> <e> stray <e> last </e>", ("<e>", "</e>")) == "last"
    assert block_content("no blocks </e>", ("<e>", "</e>")) is None


@pytest.mark.parametrize(
    ("pairs", "env_texts", "message"),
    [
        ({"a": ("<a>", "<a>")}, (), "two different non-empty strings"),
        ({"a": ("<a>", "")}, (), "two different non-empty strings"),
        ({"a": ("<a>", "</a>"), "b": ("<a>", "</b>")}, (), "used twice"),
        ({"a": ("<a>", "</a>")}, ("</a>",), "not a tag"),
        ({}, (), "at least one"),
    ],
)
def test_a_bad_scanner_is_refused_with_the_reason(pairs, env_texts, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TagScanner(pairs, env_texts)


def test_a_protocol_knows_its_own_hint_and_search_r1s() -> None:
    assert SEARCH_R1.env_hints == (SEARCH_R1.invalid_hint, SEARCH_R1_ORIGINAL_HINT)
    assert "<search> and </search>" in SEARCH_R1_ORIGINAL_HINT
    with pytest.raises(ValueError, match="other_hints must be non-empty"):
        Protocol(name="p", other_hints=(" ",))


@pytest.mark.parametrize("name", ["search-r1", "r1-searcher", "r-search"])
def test_every_tag_protocol_reads_past_an_opener_mentioned_earlier(name: str) -> None:
    protocol = PROTOCOLS[name]
    (s_open, s_close), (a_open, a_close) = protocol.search_tags, protocol.answer_tags
    searched = parse_action(f"I could write {s_open} here. {s_open} the query {s_close} rest", protocol)
    assert (searched.kind, searched.content, searched.dropped) == ("search", "the query", " rest")
    answered = parse_action(f"{a_open} is the tag. {a_open} Paris {a_close}", protocol)
    assert (answered.kind, answered.content) == ("answer", "Paris")


def test_a_tool_call_mentioned_before_the_real_one_is_text() -> None:
    protocol = PROTOCOLS["tool-call"]
    call = json.dumps({"name": "search", "arguments": {"query": "Brosara"}})
    action = f"I will write <tool_call> now. <tool_call>{call}</tool_call>"
    parsed = parse_action(action, protocol)
    assert (parsed.kind, parsed.content) == ("search", "Brosara")
    env = SearchQAEnv(dataset=QUESTIONS, retriever=ScriptedRetriever(), protocol=protocol)
    env.reset(options={"index": 0})
    assert env.step(action)[4]["query"] == "Brosara"
    assert chat_messages(env.episode)[1]["content"] == "I will write <tool_call> now."


def test_search_r1s_hint_ends_an_invalid_action_in_a_transcript() -> None:
    response = "I do not know." + SEARCH_R1_ORIGINAL_HINT + "<answer> Paris </answer>"
    turns = turns_from_text(response, SEARCH_R1)
    assert [t.action.kind for t in turns] == ["invalid", "answer"]
    assert turns[0].observation == SEARCH_R1_ORIGINAL_HINT
    assert facts(turns, SEARCH_R1).prediction == "Paris"


# Megabyte adversarial responses: read correctly and in one pass (speed is measured in bench/bench_rewards.py).
MB = 1_000_000


@pytest.mark.parametrize(
    ("response", "kinds", "prediction"),
    [
        ("<answer>" * (MB // 8), ["invalid"], None),
        ("</answer>" * (MB // 9), ["invalid"], None),
        ("<answer> x " * (MB // 11) + "</answer>", ["answer"], "x"),
        (("<answer> x" + SEARCH_R1_ORIGINAL_HINT) * 4000 + "</answer>", ["invalid"] * 4001, None),
        ("<answer>" + SEARCH_R1_ORIGINAL_HINT * 4000 + "y" * MB + "<a> z </answer>", ["invalid"] * 4001, None),
        ("<answer>" + SEARCH_R1_ORIGINAL_HINT * 4000 + "<answer> z </answer>", ["invalid"] * 4000 + ["answer"], "z"),
    ],
)
def test_megabyte_adversarial_responses_are_read_by_the_rule(response: str, kinds: list[str], prediction) -> None:
    turns = turns_from_text(response, SEARCH_R1)
    assert [t.action.kind for t in turns] == kinds
    assert facts(turns, SEARCH_R1).prediction == prediction
