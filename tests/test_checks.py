"""searchenv.checks: the one rule for integers, numbers, probabilities and choices, and the places that use it."""

from __future__ import annotations

import numpy as np
import pytest

from searchenv.checks import (
    choice,
    did_you_mean,
    integer,
    matches_type,
    non_negative_int,
    number,
    positive_int,
    probability,
)


def test_a_bool_is_never_an_integer_or_a_number():
    for check in (lambda v: positive_int(v, "k"), lambda v: non_negative_int(v, "k"), lambda v: number(v, "x")):
        with pytest.raises(ValueError, match="got True"):
            check(True)
    with pytest.raises(ValueError, match="probability"):
        probability(False, "p")
    assert not matches_type(True, int) and not matches_type(True, float) and matches_type(True, bool)


def test_numpy_integers_count_and_come_back_as_python_ints():
    value = positive_int(np.int64(3), "k")
    assert value == 3 and type(value) is int
    assert type(number(np.float32(0.5), "x", 0, 1)) is float


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: positive_int(0, "k"), "k must be a positive integer, got 0"),
        (lambda: positive_int("3", "k"), "k must be a positive integer, got '3'"),
        (lambda: non_negative_int(-1, "words"), "words must be a non-negative integer, got -1"),
        (lambda: integer(5, "seed", 0, 3), "seed must be between 0 and 3, got 5"),
        (lambda: integer(2.0, "n", 0, 3, fix="pass e.g. n=2"), "n must be an integer, got 2.0; pass e.g. n=2"),
        (lambda: number(1.0, "lambda_f", 0, 1, high_open=True), r"lambda_f must be in \[0, 1\), got 1.0"),
        (lambda: number(float("nan"), "t", 0, 2), r"t must be in \[0, 2\], got nan"),
        (lambda: probability(1.5, "p"), r"p must be a probability in \[0, 1\], got 1.5"),
        (lambda: choice("bm52", "engine", ["bm25", "random"]), r"one of \['bm25', 'random'\].*did you mean 'bm25'"),
    ],
)
def test_each_refusal_names_the_value_what_it_must_be_and_what_it_got(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_choice_and_did_you_mean():
    assert choice("chat", "mode", ("chat", "completions")) == "chat"
    assert did_you_mean("seeed", ["seed", "p"]) == " (did you mean 'seed'?)"
    assert did_you_mean("zzz", ["seed"]) == ""


def test_the_error_class_is_the_callers():
    class SpecError(ValueError):
        pass

    with pytest.raises(SpecError):
        number("x", "lambda_f", 0, 1, error=SpecError)


def test_the_environment_refuses_a_bool_budget():
    """``topk=True`` and ``max_turns=True`` were taken as 1 (bool is an int subclass)."""
    from searchenv.env.search_qa import SearchQAEnv

    for kwargs in ({"topk": True}, {"max_turns": True}):
        with pytest.raises(ValueError, match="must be a positive integer, got True"):
            SearchQAEnv(retriever="random", **kwargs)
