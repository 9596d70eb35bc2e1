"""Reward specs: every formula's values on hand-made responses, spec loading and its errors, text-only rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchenv.protocol import PROTOCOLS
from searchenv.reward_specs import REWARD_SPECS, RewardResult, Rollout, load_reward
from searchenv.reward_specs.answerers import lexical_overlap
from searchenv.types import Passage

LEXICAL = "searchenv.reward_specs.answerers:lexical_overlap"
GOLDS = ["Paris"]
QUESTION = "What is the capital of France?"
# Transcripts below are written the way the environment writes them (its own block layout), and are read
# with trust_transcript=True: they test the formulas. What an untrusted transcript earns is tested at the end.
HIT_INFO = PROTOCOLS["search-r1"].format_passages([Passage("1", "Paris", "Paris is the capital of France.")])
MISS_INFO = PROTOCOLS["search-r1"].format_passages([Passage("2", "Lyon", "Lyon is a city on the Rhone.")])


def search_r1_response(*, correct: bool, well_formed: bool, hit: bool) -> str:
    """One search round; the answer, the retrieved passage and one stray word vary."""
    answer = "Paris" if correct else "Lyon"
    stray = "" if well_formed else "So the answer is: "  # text between </think> and <answer>
    info = HIT_INFO if hit else MISS_INFO
    return (
        f"<think>I need facts.</think>\n<search> capital of France </search>{info}"
        f"<think>Done.</think>\n{stray}<answer> {answer} </answer>"
    )


CASES = [(c, w, h) for c in (True, False) for w in (True, False) for h in (True, False)]
# (correct, well-formed, retrieval hit) -> reward; written out, not recomputed, so a formula slip shows.
EQ3 = {
    0.2: {
        (1, 1, 1): 1.0,
        (1, 1, 0): 1.0,
        (1, 0, 1): 0.8,
        (1, 0, 0): 0.8,
        (0, 1, 1): 0.2,
        (0, 1, 0): 0.2,
        (0, 0, 1): 0,
        (0, 0, 0): 0,
    },
    0.4: {
        (1, 1, 1): 1.0,
        (1, 1, 0): 1.0,
        (1, 0, 1): 0.6,
        (1, 0, 0): 0.6,
        (0, 1, 1): 0.4,
        (0, 1, 0): 0.4,
        (0, 0, 1): 0,
        (0, 0, 0): 0,
    },
}
EQ4 = {
    0.2: {
        (1, 1, 1): 1.0,
        (1, 1, 0): 1.0,
        (1, 0, 1): 0.8,
        (1, 0, 0): 0.8,
        (0, 1, 1): 0.3,
        (0, 1, 0): 0.2,
        (0, 0, 1): 0,
        (0, 0, 0): 0,
    },
    0.4: {
        (1, 1, 1): 1.0,
        (1, 1, 0): 1.0,
        (1, 0, 1): 0.6,
        (1, 0, 0): 0.6,
        (0, 1, 1): 0.5,
        (0, 1, 0): 0.4,
        (0, 0, 1): 0,
        (0, 0, 0): 0,
    },
}


@pytest.mark.parametrize("lambda_f", [0.2, 0.4])
@pytest.mark.parametrize(("correct", "well_formed", "hit"), CASES)
def test_outcome_format_and_retrieval_rewards(lambda_f: float, correct: bool, well_formed: bool, hit: bool) -> None:
    response = search_r1_response(correct=correct, well_formed=well_formed, hit=hit)
    rollout = Rollout.from_text(response, GOLDS, trust_transcript=True)
    key = (int(correct), int(well_formed), int(hit))
    em = load_reward("em")(rollout)
    eq3 = load_reward("format", lambda_f=lambda_f)(rollout)
    eq4 = load_reward("format_retrieval", lambda_f=lambda_f, lambda_r=0.1)(rollout)
    assert em.reward == float(correct)
    assert eq3.reward == pytest.approx(EQ3[lambda_f][key])
    assert eq4.reward == pytest.approx(EQ4[lambda_f][key])
    for result in (em, eq3, eq4):
        assert result.parts["em"] == result.parts["answer_score"] == float(correct)
        assert result.parts["format_ok"] == float(well_formed)
        assert result.parts["retrieval_hit"] == float(hit)
        assert result.parts["num_searches"] == 1.0
        assert {"f1", "cem"} <= set(result.parts)


Q, D = ("<|begin_of_query|>", "<|end_of_query|>"), ("<|begin_of_documents|>", "<|end_of_documents|>")
R1_DOCS = PROTOCOLS["r1-searcher"].format_passages([Passage("1", "Paris", "Paris is the capital of France.")])


@pytest.mark.parametrize(
    ("response", "stage1", "stage2"),
    [
        (f"<think>look</think>{Q[0]}capital of France{Q[1]}{R1_DOCS}<think>ok</think><answer>Paris</answer>", 1.0, 1.0),
        (f"<think>look</think>{Q[0]}capital of France{Q[1]}{R1_DOCS}so <answer>Paris</answer>", 0.5, -1.0),
        ("<think>I know it</think><answer>Paris France</answer>", 0.5, 2 / 3),
        # text after the first complete answer is dropped by the environment, so it cannot spoil (or fix) the format
        ("<think>I know it</think> <answer>Paris France</answer> done", 0.5, 2 / 3),
        ("<think>I know it</think><answer>Lyon</answer>", 0.5, 0.0),
        # the model writes its own documents: no retrieval credit, malformed (R1-Searcher's reward hack)
        (f"<think>a</think>{D[0]}Paris{D[1]}<think>b</think><answer>Paris</answer>", 0.0, -1.0),
        # garbled model text is malformed under R1-Searcher's rules
        (f"<think>lo\ufffdok</think>{Q[0]}capital{Q[1]}{R1_DOCS}<think>ok</think><answer>Paris</answer>", 0.5, -1.0),
    ],
)
def test_r1_searcher_stages(response: str, stage1: float, stage2: float) -> None:
    rollout = Rollout.from_text(response, GOLDS, protocol="r1-searcher", trust_transcript=True)
    assert load_reward("r1-searcher-stage1")(rollout).reward == pytest.approx(stage1)
    assert load_reward("r1_searcher_stage2")(rollout).reward == pytest.approx(stage2)


OBS = PROTOCOLS["r-search"].format_passages([Passage("1", "Paris", "Paris is the capital of France. It is large.")])
EV_GOOD = "<original_evidence>Paris is the capital of France.</original_evidence>"
EV_BAD = "<original_evidence>France is in Europe.</original_evidence>"


@pytest.mark.parametrize(
    ("response", "reward", "evidence_score", "evidence_ok", "answer_ok"),
    [
        (f"<search>capital of France</search>{OBS} {EV_GOOD} <answer>Paris</answer>", 2.4, 1.0, 1.0, 1.0),
        (f"<search>capital of France</search>{OBS} {EV_BAD} <answer>Paris</answer>", 1.4, 0.0, 1.0, 1.0),
        (f"<search>capital of France</search>{OBS} <answer>Paris</answer>", 1.2, 0.0, 0.0, 1.0),  # evidence owed
        ("I know this. <answer>Paris</answer>", 1.4, 0.0, 1.0, 1.0),  # no search: the evidence format is free
        (f"<search>q</search>{OBS} {EV_GOOD}{EV_GOOD} <answer>Paris France</answer>", 2 / 3 + 1 + 0.2, 1.0, 0.0, 1.0),
        # only the first complete answer of the final action is accepted; the rest is dropped, never scored
        (f"<search>q</search>{OBS} {EV_GOOD} <answer>Lyon</answer><answer>Paris</answer>", 1 + 0.4, 1.0, 1.0, 1.0),
        (f"<search>q</search>{OBS} {EV_GOOD} <answer> </answer>", 1 + 0.2, 1.0, 1.0, 0.0),
    ],
)
def test_r_search(response: str, reward: float, evidence_score: float, evidence_ok: float, answer_ok: float) -> None:
    spec = load_reward("r-search", answerer=LEXICAL)
    result = spec(Rollout.from_text(response, GOLDS, protocol="r-search", question=QUESTION, trust_transcript=True))
    assert result.reward == pytest.approx(reward)
    assert result.parts["evidence_score"] == evidence_score
    assert result.parts["evidence_format_ok"] == evidence_ok
    assert result.parts["answer_format_ok"] == answer_ok


def test_r_search_answerer_sees_question_and_evidence_and_cache_wins() -> None:
    seen: list[tuple[str, str]] = []

    def answerer(question: str, evidence: str) -> str:
        seen.append((question, evidence))
        return "paris"

    spec = load_reward({"formula": "r_search", "answerer": answerer, "gamma_e": 0.1, "gamma_a": 0.3})
    response = f"<search>q</search>{OBS} {EV_BAD} <answer>Paris</answer>"
    rollout = Rollout.from_text(response, GOLDS, protocol="r-search", question=QUESTION, trust_transcript=True)
    assert spec(rollout).reward == pytest.approx(1 + 1 + 0.1 + 0.3)
    assert seen == [(QUESTION, "France is in Europe.")]
    cached = Rollout.from_text(
        response, GOLDS, "r-search", QUESTION, extras={"evidence_answer": "Lyon"}, trust_transcript=True
    )
    assert spec(cached).parts["evidence_score"] == 0.0 and len(seen) == 1


def test_r_search_needs_evidence_tags() -> None:
    spec = load_reward("r-search", answerer=lexical_overlap)
    with pytest.raises(ValueError, match="evidence tags"):
        spec(Rollout.from_text("<think>a</think><answer>b</answer>", GOLDS))


def test_answer_inside_retrieved_text_is_never_the_prediction() -> None:
    forged = "\n\n<information>Doc 1(Title: X) <answer>Paris</answer> is written here.</information>\n\n"
    with_answer = f"<think>a</think><search>q</search>{forged}<think>b</think><answer>Lyon</answer>"
    without_answer = f"<think>a</think><search>q</search>{forged}"
    for response in (with_answer, without_answer):
        rollout = Rollout.from_text(response, GOLDS, trust_transcript=True)
        assert "<answer>Paris</answer>" not in rollout.model_text
        result = load_reward("em")(rollout)
        assert result.reward == 0.0 and result.parts["cem"] == 0.0
        assert result.parts["retrieval_hit"] == 1.0  # trusted: it counts as retrieved text
        untrusted = load_reward("em")(Rollout.from_text(response, GOLDS))
        assert untrusted.parts["retrieval_hit"] == 0.0 and untrusted.parts["num_searches"] == 0.0
    assert load_reward("format")(Rollout.from_text(without_answer, GOLDS)).parts["format_ok"] == 0.0


def test_from_text_reads_actions_by_the_environment_rule() -> None:
    protocol = PROTOCOLS["search-r1"]
    response = (
        "<think>a</think><information>forged Paris</information>"
        f"<think>b</think><search>q1</search>{HIT_INFO}<think>c</think>{protocol.invalid_hint}"
        f"<search>q2</search>\n\n<information>cut off by the trainer"
    )
    rollout = Rollout.from_text(response, ("Paris",), protocol=protocol, question="Q?", trust_transcript=True)
    assert [t.action.kind for t in rollout.turns] == ["search", "invalid", "search"]
    assert rollout.num_searches == 2
    assert rollout.retrieved_texts == ("Doc 1(Title: Paris) Paris is the capital of France.", "cut off by the trainer")
    assert "forged Paris" in rollout.model_text  # model-written, so not retrieved
    assert protocol.invalid_hint.strip() not in rollout.model_text  # the hint quotes <answer> … </answer>
    assert rollout.golden_answers == ("Paris",) and rollout.question == "Q?" and rollout.protocol is protocol
    with pytest.raises(TypeError, match="decode"):
        Rollout.from_text(b"<answer>x</answer>", GOLDS)  # type: ignore[arg-type]


def test_hint_is_not_read_as_an_answer() -> None:
    hint = PROTOCOLS["search-r1"].invalid_hint
    assert "<answer>" in hint
    rollout = Rollout.from_text(f"<think>a</think>I am lost.{hint}", ["and"])
    assert load_reward("em")(rollout).reward == 0.0


@pytest.mark.parametrize("name", REWARD_SPECS)
def test_builtin_names_load_in_both_spellings(name: str) -> None:
    extra = {"answerer": LEXICAL} if name == "r-search" else {}
    extra = {"url": "http://127.0.0.1:9", "model": "judge-model", "check_on_start": False} if name == "judge" else extra
    dashed, underscored = load_reward(name, **extra), load_reward(name.replace("-", "_").upper(), **extra)
    assert dashed == underscored and dashed.name == name


def test_r_search_without_answerer_fails_at_load() -> None:
    with pytest.raises(ValueError, match="no 'answerer' configured.*lexical_overlap"):
        load_reward("r-search")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("emm", r"unknown reward spec 'emm' \(did you mean 'em'\?\); choose one of \['em', 'f1'"),
        (
            {"formula": "format", "lamda_f": 0.3},
            r"unknown key 'lamda_f' for formula 'format' \(did you mean 'lambda_f'\?\)",
        ),
        ({"formula": "format", "lambda_f": 1.5}, r"lambda_f must be in \[0, 1\), got 1.5"),
        ({"formula": "format", "lambda_f": "0.2"}, "lambda_f must be a number"),
        ({"formula": "format", "lambda_f": True}, "lambda_f must be a number"),
        ({"formula": "format", "metric": "f1"}, r"metric must be one of \['em', 'cem'\]"),
        ({"formula": "format_retrieval", "lambda_f": 0.6, "lambda_r": 0.4}, "lambda_f \\+ lambda_r must be below 1"),
        ({"formula": "format_retrieval", "lambda_r": -0.1}, r"lambda_r must be in \[0, 1\)"),
        ({"formula": "r1_searcher_stage2", "format_penalty": -2}, "format_penalty must be in"),
        ({"formula": "outcome", "metric": "bleu"}, r"metric must be one of \['em', 'f1', 'cem'\]"),
        ({"metric": "em"}, "no 'formula' key; choose one of"),
        ({"formula": "exact"}, r"unknown reward formula 'exact'; choose one of \['format', 'format_retrieval'"),
        ({"formula": "r_search", "answerer": "lexical_overlap"}, "answerer must be 'package.module:attr'"),
        ({"formula": "r_search", "answerer": "no_such_module_x:f"}, "cannot import module 'no_such_module_x'"),
        ({"formula": "r_search", "answerer": "searchenv.reward_specs.loader:REWARD_SPECS"}, "is not callable"),
        (
            {"formula": "r_search", "answerer": LEXICAL, "answerer_options": {"a": 1}},
            "only apply when the answerer names a class",
        ),
        ({"base": "nonexistent-spec-zz"}, "unknown reward spec"),
        ({"formula": ["outcome"]}, "unknown reward formula"),
        ({"formula": "outcome", "name": 3}, "'name' must be a string"),
        (42, "cannot make a reward from int"),
    ],
)
def test_bad_specs_fail_with_a_clear_error(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_reward(spec)  # type: ignore[arg-type]


def test_spec_files_from_the_user(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("base: format\nlambda_f: 0.4\ndescription: the 7B setting\n")
    (tmp_path / "child.json").write_text(json.dumps({"base": "mine.yaml", "formula": "format_retrieval"}))
    mine = load_reward(tmp_path / "mine.yaml")
    assert (mine.name, mine.lambda_f, mine.description) == ("mine", 0.4, "the 7B setting")
    child = load_reward(str(tmp_path / "child.json"), lambda_r=0.05)
    assert (child.name, child.lambda_f, child.lambda_r) == ("child", 0.4, 0.05)
    response = search_r1_response(correct=False, well_formed=True, hit=True)
    assert child(Rollout.from_text(response, GOLDS, trust_transcript=True)).reward == pytest.approx(0.45)

    (tmp_path / "list.yaml").write_text("- formula\n- outcome\n")
    (tmp_path / "broken.yaml").write_text("formula: [outcome\n")
    (tmp_path / "loop.yaml").write_text("base: loop.yaml\n")
    with pytest.raises(ValueError, match="must hold a mapping"):
        load_reward(tmp_path / "list.yaml")
    with pytest.raises(ValueError, match="not valid YAML/JSON"):
        load_reward(tmp_path / "broken.yaml")
    with pytest.raises(ValueError, match="deeper than"):
        load_reward(tmp_path / "loop.yaml")
    with pytest.raises(ValueError, match="reward spec file not found"):
        load_reward(tmp_path / "missing.yaml")


def test_ready_objects_pass_through() -> None:
    class Constant:
        name = "constant"

        def __call__(self, rollout: Rollout) -> RewardResult:
            return RewardResult(0.5, {})

    spec = Constant()
    assert load_reward(spec) is spec
    with pytest.raises(ValueError, match="cannot apply overrides"):
        load_reward(spec, lambda_f=0.1)


_TAGS = sorted({t for p in PROTOCOLS.values() for t in p.all_tags})
_ODD = st.sampled_from(["Paris", " the ", "\udce9", "\ufffd", "É"])  # gold, article, surrogate, U+FFFD, capital
_TEXT = st.lists(st.one_of(st.sampled_from(_TAGS), st.text(max_size=10), _ODD), max_size=12)
_SPECS = {
    name: load_reward(name, **({"answerer": LEXICAL} if name == "r-search" else {}))
    for name in REWARD_SPECS
    if name != "judge"  # asks a model: tests/test_judge.py
}


@settings(max_examples=120, deadline=None, derandomize=True)
@given(pieces=_TEXT, protocol=st.sampled_from(sorted(PROTOCOLS)), golds=st.lists(st.text(max_size=8), max_size=3))
def test_every_spec_stays_in_range_on_any_text(pieces: list[str], protocol: str, golds: list[str]) -> None:
    hops = {"hop_answers": ["France", "Paris"]}  # for hop-credit
    rollout = Rollout.from_text(
        "".join(pieces), golds or ["Paris"], protocol=protocol, question="capital of France", metadata=hops
    )
    for name, spec in _SPECS.items():
        if name == "r-search" and protocol != "r-search":
            continue
        result = spec(rollout)
        low, high = spec.reward_range
        assert low - 1e-9 <= result.reward <= high + 1e-9, (name, result)
        assert all(isinstance(v, float) for v in result.parts.values())
        assert {"answer_score", "em", "f1", "cem", "format_ok", "retrieval_hit", "num_searches"} <= set(result.parts)


@pytest.mark.slow
def test_hf_answerer_judges_evidence_with_a_real_model(smollm2_dir: Path) -> None:
    """R-Search's faithful setting: a frozen local LM answers from the evidence alone (greedy, so repeatable)."""
    spec = load_reward(
        "r-search",
        answerer="searchenv.reward_specs.answerers:HFAnswerer",
        answerer_options={"model": str(smollm2_dir), "max_new_tokens": 12},
    )
    good = Rollout.from_text(
        f"<search>capital of France</search>{OBS} {EV_GOOD} <answer>Paris</answer>",
        GOLDS,
        "r-search",
        QUESTION,
        trust_transcript=True,
    )
    first, second = spec(good), spec(good)
    assert first == second
    assert 0.0 < first.parts["evidence_score"] <= 1.0
    assert first.reward == pytest.approx(1.0 + first.parts["evidence_score"] + 0.4)
