"""Answer metrics: normalisation, EM, cover-EM, token F1 and the whole-token answer-in-passage check."""

from __future__ import annotations

import json
import string
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchenv.reward_specs.metrics import (
    _drop_articles,
    _strip_punctuation,
    answer_in_passages,
    cover_exact_match,
    exact_match,
    f1_score,
    normalize_answer,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The  Quick, brown FOX!", "quick brown fox"),
        ("an apple a day", "apple day"),
        ("Theatre Anna Thea", "theatre anna thea"),  # articles only as whole words
        ("U.S.", "us"),  # punctuation is deleted, not replaced by a space (SQuAD / Search-R1 convention)
        ("rock-and-roll", "rockandroll"),
        ("  \t\n ", ""),
        ("", ""),
        (None, ""),
        ("“Zürich” — «ok»", "zürich ok"),  # Unicode punctuation goes like ASCII punctuation
        ("ＡＢＣ １２３", "abc 123"),  # full-width forms fold to ASCII (NFKC)
        ("The A", ""),
    ],
)
def test_normalize_answer(raw: str | None, expected: str) -> None:
    assert normalize_answer(raw) == expected


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127)) | st.text(alphabet=" .,-'\"theTHEaAnN!?x1"))
def test_normalize_answers_ascii_path_agrees_with_the_general_one(text: str) -> None:
    # normalize_answer writes _strip_punctuation's ASCII branch out (every reward runs it): the two must agree.
    assert normalize_answer(text) == _drop_articles(_strip_punctuation(text))


def test_normalize_composed_and_decomposed_accents_agree() -> None:
    composed = unicodedata.normalize("NFC", "Café Ångström")
    decomposed = unicodedata.normalize("NFD", "Café Ångström")
    assert composed != decomposed
    assert normalize_answer(composed) == normalize_answer(decomposed) == "café ångström"


@pytest.mark.parametrize(
    ("pred", "golds", "em", "cem", "f1"),
    [
        ("Paris", ["Paris"], 1.0, 1.0, 1.0),
        ("the paris.", ["Paris"], 1.0, 1.0, 1.0),
        ("Paris, France", ["Paris"], 0.0, 1.0, 2 / 3),
        ("London", ["Paris", "london"], 1.0, 1.0, 1.0),  # best over several golds
        ("Paris", "Paris", 1.0, 1.0, 1.0),  # one gold as a bare string, not its characters
        ("P", "Paris", 0.0, 0.0, 0.0),
        ("bus", ["us"], 0.0, 1.0, 0.0),  # CEM is plain substring containment, as published
        ("paris paris", ["paris"], 0.0, 1.0, 2 / 3),
        ("Barack Obama", ["Obama Barack"], 0.0, 0.0, 1.0),
        (None, ["Paris"], 0.0, 0.0, 0.0),
        ("", ["Paris"], 0.0, 0.0, 0.0),
        ("the", ["the"], 0.0, 0.0, 0.0),  # normalises to nothing on both sides: no free point
        ("anything", ["The"], 0.0, 0.0, 0.0),  # an empty gold must not cover every prediction
        ("Paris", [], 0.0, 0.0, 0.0),
        ("Zürich", ["zurich", "ZÜRICH"], 1.0, 1.0, 1.0),
    ],
)
def test_answer_metrics(pred: str | None, golds: list[str] | str, em: float, cem: float, f1: float) -> None:
    assert exact_match(pred, golds) == em
    assert cover_exact_match(pred, golds) == cem
    assert f1_score(pred, golds) == pytest.approx(f1)


def test_metrics_accept_numpy_gold_arrays() -> None:
    golds = np.array(["Paris", "City of Light"])  # what a parquet file hands over
    assert exact_match("city of light", golds) == 1.0
    assert answer_in_passages(golds, ["Paris is large."])


@pytest.mark.parametrize(
    ("golds", "texts", "hit"),
    [
        (["us"], ["Business as usual."], False),  # whole tokens only
        (["U.S."], ["Business as usual.", "He joined the U.S. Army."], True),
        (["New York"], ["I love new  york city"], True),
        (["end start"], ["the end", "start of it"], False),  # never across two passages
        (["Paris"], [], False),
        ([], ["Paris"], False),
        (["The"], ["the the the"], False),
        (["1990"], ["In 1990s", "born in 1990."], True),
        (["zürich"], ["“Zürich” is a city"], True),
        (["1990"], ["He served 1990–1995."], True),  # punctuation between words also reads as a space
        (["Paris"], ["Doc 1 <answer>Paris</answer>"], True),
        (["us"], ["U.S.-based firms"], False),
    ],
)
def test_answer_in_passages(golds: list[str], texts: list[str], hit: bool) -> None:
    assert answer_in_passages(golds, texts) is hit


def _readings(texts: list[str]) -> list[str]:
    """Both readings of every passage (punctuation deleted / turned into spaces), normalised in full."""

    def spaced(text: str) -> str:
        return "".join(" " if unicodedata.category(c).startswith("P") or c in string.punctuation else c for c in text)

    return [f" {normalize_answer(r)} " for t in texts for r in (t, spaced(t))]


def test_answer_in_passages_matches_per_passage_check_on_real_hotpotqa(shared_data: Path) -> None:
    """The single-pass join agrees with a per-passage check, and finds every non yes/no HotpotQA answer."""
    questions = [json.loads(line) for line in (shared_data / "qa" / "hotpotqa_100.jsonl").open()][:25]
    passages = [json.loads(line)["contents"] for line in (shared_data / "corpus" / "hotpotqa_hipporag.jsonl").open()]
    readings = _readings(passages)
    for q in questions:
        golds = q["golden_answers"]
        expected = any(f" {normalize_answer(g)} " in r for r in readings for g in golds if normalize_answer(g))
        assert answer_in_passages(golds, passages) is expected
        if normalize_answer(golds[0]) not in {"yes", "no"}:
            assert expected, q["question"]  # the data README: 100% findable
    # and a miss stays a miss on real text
    assert not answer_in_passages(["zzqx unfindable answer"], passages)


def test_ascii_metrics_agree_with_search_r1_convention(shared_data: Path) -> None:
    """On ASCII text, EM / cover-EM / normalisation equal Search-R1's (as vendored by skyrl-gym) on real NQ answers."""
    peer = pytest.importorskip("skyrl_gym.envs.search.utils", reason="the peer ships with the skyrl extra")
    rows = [json.loads(line) for line in (shared_data / "qa" / "nq_test_1000.jsonl").open()][:300]
    golds = [r["golden_answers"] for r in rows if all(g.isascii() and normalize_answer(g) for g in r["golden_answers"])]
    predictions = []
    for i, gold in enumerate(golds):
        answer = gold[0]
        predictions += [answer, f"The {answer.upper()}.", f"{answer}, probably", golds[i - 1][0], f"an {answer}!"]
    for i, prediction in enumerate(predictions):
        gold = golds[i // 5]
        assert normalize_answer(prediction) == peer.normalize_answer(prediction)
        assert exact_match(prediction, gold) == peer.em_check(prediction, gold)
        assert cover_exact_match(prediction, gold) == peer.subem_check(prediction, gold)
    for row in rows:
        assert normalize_answer(row["question"]) == peer.normalize_answer(row["question"])


def _reference_normalize(text: str, replacement: str = "") -> str:
    """The definition, character by character: NFKC, lower-case, punctuation out, articles out, spaces collapsed."""
    folded = unicodedata.normalize("NFKC", text).lower()
    stripped = "".join(
        replacement if c in string.punctuation or unicodedata.category(c).startswith("P") else c for c in folded
    )
    return " ".join(w for w in stripped.split() if w not in {"a", "an", "the"})


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(max_size=40) | st.text(alphabet=st.characters(categories=("Cs", "P", "Lu", "Zs")), max_size=20))
def test_fast_normalisation_equals_the_definition(text: str) -> None:
    assert normalize_answer(text) == _reference_normalize(text)
    gold = _reference_normalize(text)
    if gold:
        assert answer_in_passages([text], [f"x {text} y"])  # a gold is always found in a passage quoting it
