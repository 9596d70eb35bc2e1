"""A step's ``info`` is plain data: it goes as it is into the writers trainers and notebooks use.

pyarrow (and so HF ``datasets``) and orjson read a dict's storage from C; a dict subclass or a placeholder value
would fail there or be written down wrong. The terminal ``info`` must need no helper in between.
"""

from __future__ import annotations

import copy
import json
import pickle

import orjson
import pyarrow as pa
import pytest

from searchenv import SearchQAEnv
from searchenv.episode.reward_contract import RewardResult, Rollout


def _terminal_infos() -> list[dict]:
    """The terminal ``info`` of an answered episode (after a search) and of one cut by the trainer."""
    env = SearchQAEnv(retriever="random", reward="format_retrieval", max_turns=3)
    _, reset = env.reset(seed=3)
    env.step(f"<search>{reset['question']}</search>")
    *_, answered = env.step(f"<think>sure</think><answer>{reset['golden_answers'][0]}</answer>")
    env.reset(seed=4)
    env.step("no tag at all")
    *_, cut = env.truncate("context_limit")
    return [answered, cut]


INFOS = _terminal_infos()


def _plain(value: object) -> bool:
    """Only dict, list, str, float, int, bool and None, all the way down (dicts exactly ``dict``)."""
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, float, int, bool)


@pytest.mark.parametrize("info", INFOS, ids=["answered", "cut"])
def test_terminal_info_is_plain_data(info) -> None:
    assert _plain(info), info
    assert info["episode_metrics"]["reward/em"] == info["reward_parts"]["em"]


@pytest.mark.parametrize("info", INFOS, ids=["answered", "cut"])
def test_terminal_info_goes_straight_into_pyarrow_orjson_and_datasets(info) -> None:
    assert pa.Table.from_pylist([info]).to_pylist() == [info]
    assert orjson.loads(orjson.dumps(info)) == info
    datasets = pytest.importorskip("datasets")
    assert datasets.Dataset.from_list([info])[0] == info


@pytest.mark.parametrize("info", INFOS, ids=["answered", "cut"])
def test_terminal_info_pickles_copies_and_dumps_as_json(info) -> None:
    assert pickle.loads(pickle.dumps(info)) == info
    assert json.loads(json.dumps(info)) == info
    assert copy.deepcopy(info) == info and copy.copy(info) == info


def test_the_two_infos_report_what_happened() -> None:
    answered, cut = INFOS
    assert answered["end_reason"] == "answer" and answered["num_searches"] == 1 and answered["prediction"]
    assert answered["episode_metrics"]["end_reason/answer"] == 1.0
    assert cut["end_reason"] == "context_limit" and cut["prediction"] is None
    assert cut["episode_metrics"]["end_reason/context_limit"] == 1.0
    assert cut["episode_metrics"]["end_reason/answer"] == 0.0


def test_a_spec_that_reuses_its_parts_mapping_cannot_rewrite_a_finished_episode() -> None:
    shared = {"mine": 0.5}

    class Reusing:
        name = "reusing"

        def __call__(self, rollout: Rollout) -> RewardResult:
            return RewardResult(0.5, shared)

    env = SearchQAEnv(reward=Reusing())
    env.reset(seed=0)
    *_, info = env.step("<answer> x </answer>")
    shared["mine"] = 9.0
    assert info["reward_parts"] == {"mine": 0.5} and env.episode.reward_parts == {"mine": 0.5}
    assert info["episode_metrics"]["reward/mine"] == 0.5
