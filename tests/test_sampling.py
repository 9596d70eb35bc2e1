"""One type for sampling settings (issue 40 item 13): one set of checks, read by the rollout, evaluation, the LLM
client and the trainers."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from searchenv.sampling import SamplingConfig


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_new_tokens": True}, "max_new_tokens must be a positive integer, got True"),
        ({"max_total_tokens": False}, "max_total_tokens must be an integer >= 2, got"),
        ({"max_response_tokens": True}, "max_response_tokens must be a positive integer"),
        ({"seed": True}, "seed must be an integer, got True"),
        ({"temperature": True}, "temperature must be a number, got True"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer"),
        ({"max_new_tokens": -5}, "max_new_tokens must be a positive integer"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be a positive integer"),
        ({"max_total_tokens": 1}, "max_total_tokens must be an integer >= 2, got"),
        ({"max_response_tokens": 0}, "max_response_tokens must be a positive integer"),
        ({"temperature": -0.1}, "temperature must be in [0, inf), got -0.1; 0 is greedy"),
        ({"top_p": 0}, "top_p must be in (0, 1] (1 = off), got 0"),
        ({"top_p": "0.9"}, "top_p must be in (0, 1] (1 = off), got '0.9'"),
        ({"top_p": float("nan")}, "top_p must be in (0, 1] (1 = off), got nan"),
        ({"chat_template": "off"}, "chat_template must be True, False or None"),
        ({"chat_template": 1}, "chat_template must be True, False or None"),
    ],
)
def test_a_bad_setting_is_refused_naming_it_and_its_range(settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        SamplingConfig(**settings)


def test_a_changed_copy_is_checked_again():
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        dataclasses.replace(SamplingConfig(), max_new_tokens=0)


def test_numpy_integers_and_floats_are_numbers():
    config = SamplingConfig(temperature=np.float32(0.5), max_new_tokens=np.int64(8), seed=np.int64(3))
    assert config.max_new_tokens == 8 and config.seed == 3


def test_greedy_is_temperature_zero_and_keeps_the_rest():
    assert SamplingConfig().temperature == 1.0  # a rollout samples
    greedy = SamplingConfig.greedy(max_new_tokens=4, seed=7)
    assert (greedy.temperature, greedy.max_new_tokens, greedy.seed, greedy.top_p) == (0.0, 4, 7, 1.0)


def test_budget_is_the_smaller_of_the_total_and_the_response_cap():
    config = SamplingConfig(max_total_tokens=100, max_response_tokens=30)
    assert config.budget(prompt_tokens=60, response_tokens=10) == 20  # response cap: 30 - 10
    assert config.budget(prompt_tokens=85, response_tokens=10) == 5  # total: 100 - 95


def test_one_type_under_one_name():
    import importlib

    for module in ("searchenv.llm.sampling", "searchenv.rollout.sampling"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(module)
    from searchenv.rollout import SamplingConfig as from_rollout

    assert from_rollout is SamplingConfig  # the trainers' import


def test_a_trainer_config_refuses_what_the_sampling_type_refuses():
    pytest.importorskip("torch")
    from searchenv.adapters.ppo.trainer import PPOConfig

    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        PPOConfig(max_new_tokens=True)
    with pytest.raises(ValueError, match="top_p must be in"):
        PPOConfig(top_p=0.0)
