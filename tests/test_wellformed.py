"""The format check: every case the study and R1-Searcher name, for all three protocols, and its properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchenv.protocol import PROTOCOLS
from searchenv.reward_specs.format_check import FormatCheck, check_format, find_garbled, single_block

INFO = "\n\n<information>Doc 1(Title: Paris) Paris is the capital of France.\n</information>\n\n"
OK_ONE_SEARCH = (
    f"<think>I need facts.</think>\n<search> capital of France </search>{INFO}<think>Got it.</think>\n"
    "<answer> Paris </answer>"
)

SEARCH_R1_OK = [
    "<think>I know this.</think><answer>Paris</answer>",
    OK_ONE_SEARCH,
    OK_ONE_SEARCH.replace("<answer>", f"<search>again</search>{INFO}<think>sure</think><answer>"),
    OK_ONE_SEARCH + "<|im_end|>",  # decoder left the end-of-turn marker in
    OK_ONE_SEARCH + "\n<|endoftext|>\n",
    # retrieved text is opaque: tags inside it are not parsed
    (
        "<think>a</think><search>q</search><information>x <answer>y</answer> </think> z</information>"
        "<think>b</think><answer>c</answer>"
    ),
    "<think></think><answer></answer>",  # empty contents are not a format error (as in Search-R1)
    "<think>a\ufffd</think><answer>b</answer>",  # garbled text is an R1-Searcher rule, not Search-R1's
]

SEARCH_R1_BAD = [
    ("", "empty response"),
    ("  \n\t", "empty response"),
    ("<|im_end|>", "empty response"),
    ("Paris", "missing answer: no protocol tags"),
    ("<think>a</think>", "missing answer: the response ends after </think>"),
    (f"<think>a</think><search>q</search>{INFO}", "missing answer: the response ends after </information>"),
    ("<think>a</think> So: <answer>b</answer>", "text between </think> and <answer>"),
    ("<think>a</think><search>q</search> hmm <information>x</information>", "text between </search> and <information>"),
    (
        f"<think>a</think><search>q</search>{INFO}then<think>b</think><answer>c</answer>",
        "text between </information> and <think>",
    ),
    ("Sure! <think>a</think><answer>b</answer>", "text before <think>"),
    ("<think>a</think><answer>b</answer> Hope this helps", "text after the final </answer>"),
    # the model writes its own information block: R1-Searcher's reward hack
    (
        "<think>a</think><information>Paris</information><think>b</think><answer>Paris</answer>",
        "<information> block without a search",
    ),
    ("<think>a</think><answer>b", "unbalanced <answer>: never closed"),
    ("<think>a</think><search>q</search><information>x", "unbalanced <information>: never closed"),
    ("<think>a</think></think><answer>b</answer>", "unbalanced </think>: no open <think>"),
    ("<think>a</search></think><answer>b</answer>", "unbalanced </search> inside <think>"),
    ("<think>a<answer>b</answer></think>", "nested <answer> inside <think>"),
    ("<think>a</think><answer><answer>b</answer></answer>", "nested <answer> inside <answer>"),
    ("<think>a<think>b</think></think><answer>c</answer>", "nested <think> inside <think>"),
    ("<think>a</think><answer>b</answer><think>c</think>", "<think> after the final </answer>"),
    ("<think>a</think><answer>b</answer><answer>c</answer>", "<answer> after the final </answer>"),
    (
        "<search>q</search><information>x</information><think>a</think><answer>b</answer>",
        "unexpected <search> after the start; expected <think>",
    ),
    (
        "<think>a</think><search>q</search><information>x</information><answer>b</answer>",
        "unexpected <answer> after </information>; expected <think>",
    ),
    (
        "<think>a</think><think>b</think><answer>c</answer>",
        "unexpected <think> after </think>; expected <search> or <answer>",
    ),
    ("<answer>Paris</answer>", "unexpected <answer> after the start; expected <think>"),
]


@pytest.mark.parametrize("response", SEARCH_R1_OK)
def test_search_r1_well_formed(response: str) -> None:
    assert check_format(response, "search-r1") == FormatCheck(True, "")


@pytest.mark.parametrize(("response", "reason"), SEARCH_R1_BAD)
def test_search_r1_malformed_names_the_problem(response: str, reason: str) -> None:
    result = check_format(response, PROTOCOLS["search-r1"])
    assert not result.ok and not result
    assert reason in result.reason


Q, D = ("<|begin_of_query|>", "<|end_of_query|>"), ("<|begin_of_documents|>", "<|end_of_documents|>")
R1_OK = (
    f"<think>look up</think>{Q[0]} capital of France {Q[1]}\n{D[0]}Paris \ufffd is it{D[1]}\n"
    "<think>ok</think><answer>Paris</answer>"
)


@pytest.mark.parametrize(
    ("response", "ok", "reason"),
    [
        (R1_OK, True, ""),  # garbled characters inside retrieved documents are not the model's fault
        (
            f"<think>a</think>{D[0]}Paris{D[1]}<think>b</think><answer>Paris</answer>",
            False,
            f"{D[0]} block without a search",
        ),
        (
            "<think>the answer is \ufffd\ufffd</think><answer>Paris</answer>",
            False,
            "garbled text: replacement character U+FFFD at offset 21",
        ),
        ("<think>ok</think><answer>Par\x07is</answer>", False, "garbled text: non-printable character U+0007"),
        ("<think>a\ue000</think><answer>b</answer>", False, "garbled text: non-printable character U+E000"),
        ("<think>tabs\tand\nnewlines are fine</think><answer>b</answer>", True, ""),
        ("<think>a</think><search>q</search><answer>b</answer>", False, "text between </think> and <answer>"),
    ],
)
def test_r1_searcher_rules(response: str, ok: bool, reason: str) -> None:
    result = check_format(response, "r1-searcher")
    assert result.ok is ok
    assert reason in result.reason


def test_garbled_rule_can_be_switched() -> None:
    text = "<think>a\ufffd</think><answer>b</answer>"
    assert check_format(text, "search-r1").ok
    assert not check_format(text, "search-r1", reject_garbled=True).ok
    assert check_format(text, "r1-searcher", reject_garbled=False).ok
    assert find_garbled("clean text\n") is None


OBS = "<observation>Paris is the capital of France.</observation>"
EV = "<original_evidence>Paris is the capital of France.</original_evidence>"


@pytest.mark.parametrize(
    ("response", "ok", "reason"),
    [
        ("<answer>Paris</answer>", True, ""),
        ("I already know this. <answer>Paris</answer>", True, ""),  # no think tag; free reasoning text
        (f"Let me search. <search>capital of France</search>\n{OBS}\nSo: {EV}\n<answer>Paris</answer>", True, ""),
        (f"{EV}<answer>Paris</answer>", True, ""),  # evidence without a search is allowed
        (f"<search>q</search>{OBS}<answer>Paris</answer>", False, "missing <original_evidence> block before <answer>"),
        (f"<search>q</search>{OBS}{EV}{EV}<answer>Paris</answer>", False, "more than one <original_evidence> block"),
        (
            f"<search>q</search>{OBS}{EV}<answer>a</answer><answer>b</answer>",
            False,
            "<answer> after the final </answer>",
        ),
        (f"{OBS}<answer>Paris</answer>", False, "<observation> block without a search"),
        (f"{EV}<search>q</search>{OBS}<answer>Paris</answer>", False, "unexpected <search> after </original_evidence>"),
        ("Thinking only.", False, "missing answer"),
    ],
)
def test_r_search_rules(response: str, ok: bool, reason: str) -> None:
    result = check_format(response, "r-search")
    assert result.ok is ok
    assert reason in result.reason


@pytest.mark.parametrize(
    ("text", "ok", "reason"),
    [
        ("x <answer>Paris</answer> y", True, ""),
        ("no block", False, "no <answer> block"),
        ("<answer>a</answer><answer>b</answer>", False, "2 <answer> blocks"),
        ("<answer>a</answer></answer>", False, "unbalanced <answer>"),
        ("</answer>a<answer>", False, "</answer> comes first"),
        ("<answer>  </answer>", False, "empty <answer> block"),
        ("<answer>a <search>q</search></answer>", False, "nested <search> inside <answer>"),
    ],
)
def test_single_block(text: str, ok: bool, reason: str) -> None:
    result = single_block(text, ("<answer>", "</answer>"), "r-search")
    assert result.ok is ok
    assert reason in result.reason


def _valid_response(protocol_name: str, searches: int, filler: str) -> str:
    """A response that follows the protocol's grammar with ``searches`` search rounds."""
    p = PROTOCOLS[protocol_name]
    think = (lambda t: f"{p.think_tags[0]}{t}{p.think_tags[1]}\n") if p.think_tags else (lambda t: f"{t}\n")
    info = p.format_passages([])
    parts = [think(filler)]
    for i in range(searches):
        parts += [f"{p.search_tags[0]} q{i} {p.search_tags[1]}", info, think(filler)]
    if p.evidence_tags and searches:
        parts.append(f"{p.evidence_tags[0]}{filler}{p.evidence_tags[1]}\n")
    parts.append(f"{p.answer_tags[0]} {filler} {p.answer_tags[1]}")
    return "".join(parts)


_TAGS = sorted({t for p in PROTOCOLS.values() for t in p.all_tags})
_TAGGY_TEXT = st.lists(st.one_of(st.sampled_from(_TAGS), st.text(max_size=12)), max_size=14).map("".join)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=st.one_of(st.text(), _TAGGY_TEXT), name=st.sampled_from(sorted(PROTOCOLS)))
def test_check_format_never_raises(text: str, name: str) -> None:
    result = check_format(text, name)
    assert isinstance(result, FormatCheck)
    assert result.ok == (result.reason == "")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(sorted(PROTOCOLS)),
    searches=st.integers(0, 4),
    filler=st.text(alphabet=st.characters(categories=("L", "N", "Zs")), min_size=1, max_size=20),
)
def test_grammar_generated_responses_are_well_formed(name: str, searches: int, filler: str) -> None:
    assert check_format(_valid_response(name, searches, filler), name).ok
