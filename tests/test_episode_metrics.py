"""``Episode.metrics()`` is THE metric vocabulary, read from one ``Facts``; ``aggregate_metrics`` averages a batch."""

from __future__ import annotations

import pytest

from searchenv import SearchQAEnv
from searchenv.episode import METRIC_NAMES, aggregate_metrics
from searchenv.episode.episode import END_REASONS


def _played(reward: str = "format") -> SearchQAEnv:
    env = SearchQAEnv(retriever="random", reward=reward, max_turns=4)
    _, info = env.reset(seed=1)
    env.step("thinking without a tag")
    env.step(f"<search>{info['question']}</search>")
    env.step(f"<answer>{info['golden_answers'][0]}</answer>")
    return env


def test_metrics_carry_the_vocabulary_then_the_reward_parts() -> None:
    env = _played()
    metrics = env.episode.metrics()
    parts = [f"reward/{k}" for k in env.episode.reward_parts]
    assert list(metrics) == [*METRIC_NAMES, *parts]
    assert all(type(v) is float for v in metrics.values())
    assert metrics["num_actions"] == 3.0 and metrics["num_searches"] == 1.0 and metrics["num_invalid"] == 1.0
    assert metrics["reward"] == env.episode.reward and metrics["reward/em"] == 1.0


def test_episode_reads_every_derived_value_from_its_facts() -> None:
    episode = _played().episode
    record = episode.facts
    assert episode.prediction == record.prediction is not None
    assert (episode.num_searches, episode.num_invalid) == (record.num_searches, record.num_invalid) == (1, 1)
    assert episode.response_text == record.response and episode.model_text == record.model_text
    assert episode.response_words == record.response_words == len(record.model_text.split())
    assert episode.retrieved == [list(t.passages) for t in record.searches]


@pytest.mark.parametrize("how", ["answer", "action_budget", "trainer_cut", "context_limit"])
def test_end_reason_is_one_hot(how) -> None:
    env = SearchQAEnv(retriever="random", reward="em", max_turns=2)
    env.reset(seed=0)
    assert all(env.episode.metrics()[f"end_reason/{r}"] == 0.0 for r in END_REASONS)  # running: none yet
    if how == "answer":
        *_, info = env.step("<answer>x</answer>")
    elif how == "action_budget":
        env.step("no tag")
        *_, info = env.step("still no tag")
    else:
        *_, info = env.truncate(how)
    metrics = info["episode_metrics"]
    assert {r: metrics[f"end_reason/{r}"] for r in END_REASONS} == {r: float(r == how) for r in END_REASONS}
    assert env.episode.metrics() == metrics


def test_aggregate_metrics_averages_each_key_over_the_rows_that_have_it() -> None:
    rows = [{"reward": 1.0, "reward/em": 1.0}, {"reward": 0.0}, {"reward": 0.5, "reward/em": 0.0}]
    assert aggregate_metrics(rows) == {"reward": 0.5, "reward/em": 0.5}
    assert aggregate_metrics([]) == {}
    cut = SearchQAEnv(retriever="random", reward="format")
    cut.reset(seed=2)
    *_, info = cut.truncate()
    means = aggregate_metrics([_played().episode.metrics(), info["episode_metrics"]])
    assert means["end_reason/answer"] == means["end_reason/trainer_cut"] == 0.5 and means["num_searches"] == 0.5
