"""Lazy reward parts: nothing is computed until read, and every way of reading gives the eager values."""

from __future__ import annotations

import copy
import json
import pickle

import gymnasium as gym
import numpy as np
import pytest

import searchenv  # noqa: F401 - registers SearchQA-v0
from searchenv import SearchQAEnv
from searchenv.episode.rollout import Rollout
from searchenv.lazy import LazyDict, LazyKeys, computed_once
from searchenv.reward_specs import formulas as spec_module
from searchenv.reward_specs import load_reward

VALUES = {"em": 1.0, "f1": 0.5, "format_ok": 0.0}


def lazy(calls: list[int] | None = None) -> LazyDict:
    def compute() -> dict[str, float]:
        if calls is not None:
            calls.append(1)
        return dict(VALUES)

    return LazyDict.of(tuple(VALUES), compute)


def test_size_membership_and_keys_compute_nothing() -> None:
    calls: list[int] = []
    parts = lazy(calls)
    assert len(parts) == 3 and "em" in parts and "nope" not in parts and bool(parts)
    assert list(parts) == list(VALUES) and list(parts.keys()) == list(VALUES)
    assert not parts.computed and calls == []


def test_names_announce_the_keys_and_a_dict_built_lazydict_has_nothing_to_compute() -> None:
    assert lazy().names == tuple(VALUES)
    assert lazy().key_set is lazy().key_set is LazyKeys.of(tuple(VALUES))  # one key set per names tuple
    assert LazyKeys.of(("em",)) is not LazyKeys.of(("f1",))
    plain = LazyDict(VALUES)  # called like dict: an ordinary dict
    assert plain.computed and plain == VALUES and plain["em"] == 1.0 and pickle.loads(pickle.dumps(plain)) == VALUES


@pytest.mark.parametrize(
    "read",
    [
        lambda d: dict(d),
        lambda d: {**d},
        lambda d: dict(d.items()),
        lambda d: {k: d[k] for k in d},
        lambda d: {k: d.get(k) for k in d},
        lambda d: dict(zip(d.keys(), d.values())),
        lambda d: json.loads(json.dumps(d)),
        lambda d: pickle.loads(pickle.dumps(d)),
        lambda d: copy.copy(d),
        lambda d: copy.deepcopy(d),
        lambda d: d.copy(),
        lambda d: d | {},
        lambda d: {} | d,
        lambda d: eval(repr(d)),  # noqa: S307 - a repr of floats
    ],
)
def test_every_way_of_reading_gives_the_values(read) -> None:
    calls: list[int] = []
    parts = lazy(calls)
    assert read(parts) == VALUES
    assert calls == [1]
    assert read(parts) == VALUES and calls == [1]  # computed once


def test_equality_both_ways_and_mutation_after_fill() -> None:
    assert lazy() == VALUES and VALUES == lazy() and not (lazy() != VALUES)
    other = LazyDict.of(tuple(VALUES), lambda: {**VALUES, "em": 0})
    assert lazy() == lazy() and not (lazy() != lazy()) and lazy() != other
    parts = lazy()
    parts["extra"] = 2.0
    assert parts == {**VALUES, "extra": 2.0}
    assert type(pickle.loads(pickle.dumps(lazy()))) is dict  # pickles as a plain dict (no closure to pickle)


def test_announced_keys_must_match() -> None:
    parts = LazyDict.of(("em", "f1"), lambda: {"em": 1.0})
    with pytest.raises(KeyError, match="announced"):
        parts["em"]


def test_gymnasium_vector_info_merges_lazy_parts() -> None:
    """Gymnasium's own vector env merges a dict ``info`` per key; the lazy parts must arrive as numbers."""
    venv = gym.make_vec("SearchQA-v0", num_envs=2, retriever="random", vectorization_mode="sync")
    _, infos = venv.reset(seed=0)
    actions = [f"<answer>{golds[0]}</answer>" for golds in infos["golden_answers"]]
    _, rewards, terminated, _, infos = venv.step(actions)
    assert terminated.all()
    np.testing.assert_array_equal(infos["reward_parts"]["em"], rewards)
    assert infos["episode_metrics"]["reward/format_ok"].dtype == np.float64
    venv.close()


def test_computed_once_stores_the_value() -> None:
    class Thing:
        calls = 0

        @computed_once
        def value(self) -> int:
            Thing.calls += 1
            return 41 + Thing.calls

    thing = Thing()
    assert thing.value == 42 and thing.value == 42 and Thing.calls == 1
    assert isinstance(Thing.value, computed_once)


def test_answer_step_runs_the_format_grammar_only_when_read(monkeypatch) -> None:
    """The `em` spec's terminal step leaves the format check and the passage scan for whoever reads them."""
    runs: list[str] = []
    for name in ("check_format", "answer_in_passages"):
        real = getattr(spec_module, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            runs.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(spec_module, name, counted)
    env = SearchQAEnv(retriever="random", reward="em")
    _, info = env.reset(seed=3)
    env.step(f"<search>{info['question']}</search>")
    _, reward, terminated, _, info = env.step(f"<think>sure</think><answer>{info['golden_answers'][0]}</answer>")
    assert terminated and reward == 1.0 and runs == []
    eager = Rollout.from_episode(env.episode)
    expected = dict(load_reward("em")(eager).parts)
    assert dict(info["reward_parts"]) == expected
    assert sorted(runs) == ["answer_in_passages", "answer_in_passages", "check_format", "check_format"]
    assert info["episode_metrics"]["reward/format_ok"] == expected["format_ok"]
    assert env.episode.metrics() == info["episode_metrics"]


@pytest.mark.parametrize("library", ["pyarrow", "orjson"])
def test_c_level_readers_fail_loudly_and_filled_gives_them_the_values(library) -> None:
    """pyarrow and orjson read a dict's storage directly, bypassing the methods that fill it: they must fail
    naming the placeholder, never record a reward as missing, and ``searchenv.filled`` must hand them the values."""
    module = pytest.importorskip(library)
    write = (lambda value: module.array([value]).to_pylist()[0]) if library == "pyarrow" else module.dumps
    env = SearchQAEnv(retriever="random", reward="format")
    _, info = env.reset(seed=3)
    step = env.step(f"<answer>{info['golden_answers'][0]}</answer>")
    with pytest.raises(Exception, match="NotComputedLazyValue|searchenv.filled"):
        write(step.info["reward_parts"])
    plain = searchenv.filled(step)
    assert type(plain) is type(step) and type(plain.info["reward_parts"]) is dict
    written = write(plain.info["reward_parts"])
    assert (json.loads(written) if library == "orjson" else written) == dict(step.info["reward_parts"])
    assert not any(isinstance(v, LazyDict) for v in plain.info.values())


@pytest.mark.parametrize("make_parts", [dict, LazyDict, lambda v: LazyDict.of(tuple(v), lambda: v)])
def test_episode_metrics_name_the_parts_of_any_mapping_a_spec_returns(make_parts) -> None:
    # A custom spec may return a plain dict, a dict-built LazyDict (no announced keys) or a lazy one.
    class Custom:
        name = "custom"

        def __call__(self, rollout: Rollout):
            return spec_module.RewardResult(0.5, make_parts({"mine": 0.5, "other": 1.0}))

    env = SearchQAEnv(reward=Custom())
    env.reset(seed=0)
    *_, info = env.step("<answer> x </answer>")
    metrics = info["episode_metrics"]
    assert list(metrics)[-2:] == ["reward/mine", "reward/other"]
    assert metrics["reward/mine"] == 0.5 and metrics["reward"] == 0.5 and metrics["num_actions"] == 1.0
