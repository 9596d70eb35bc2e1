"""Reasoning-health metrics: read from the episode's turns once (Facts), in every episode's metrics, in the
evaluation report (per-dataset search rate, a plot) and drawn from a training log."""

from __future__ import annotations

import json

import pytest

from searchenv import SearchQAEnv
from searchenv.episode import METRIC_NAMES
from searchenv.episode.health import HEALTH_METRICS, count_repeated_queries, repetition_ratio, think_text
from searchenv.evaluation.report import markdown_report, summarize
from searchenv.reward_specs import Rollout

LOOP = "<think>" + "I should search again " * 10 + "</think>"


def test_the_measurements() -> None:
    assert repetition_ratio("the cat sat on the mat today") == 0.0
    assert repetition_ratio("a b c d " * 5) == pytest.approx(13 / 17)  # 17 4-grams, 4 distinct: 13 repeat one
    assert repetition_ratio("too short") == 0.0
    assert count_repeated_queries(["Who founded it", "who  founded it", "when"]) == 1
    actions = ["<think> one two </think><search>q</search>", "no think here", "<think>three</think>"]
    assert think_text(actions, ("<think>", "</think>")) == "one two\nthree"


def test_every_episode_reports_its_health() -> None:
    assert set(HEALTH_METRICS) <= set(METRIC_NAMES)
    env = SearchQAEnv(retriever="random", topk=3, max_turns=5)
    _, info = env.reset(seed=1)
    env.step("<think>I do not know, I should search.</think><search>abbey founder</search>")
    env.step(f"{LOOP}<search>Abbey  founder</search>")
    env.step(f"<think>It says so.</think><answer>{info['golden_answers'][0]} of old</answer>")
    metrics = env.episode.metrics()
    assert metrics["think_words"] == 7 + 40 + 3
    assert metrics["think_repetition"] > 0.5
    assert metrics["answer_words"] == len(info["golden_answers"][0].split()) + 2
    assert metrics["duplicate_search_rate"] == 0.5  # the second search repeats the first
    assert metrics["passages_read"] == 6.0  # three shown per search


def test_the_text_path_reads_the_same_thinking_but_no_passages() -> None:
    env = SearchQAEnv(retriever="random", topk=3, max_turns=5)
    env.reset(seed=2)
    env.step(f"{LOOP}<search>q</search>")
    env.step("<answer>Paris</answer>")
    played = env.episode.facts
    read = Rollout.from_text(env.episode.response_text, ["Paris"], trust_transcript=True).facts
    assert read == played  # passages_read is not compared: a transcript cannot say what its blocks held
    assert (read.think_words, read.answer_words, read.num_searches) == (40, 1, 1)
    assert (played.passages_read, read.passages_read) == (3, 0)


def _record(dataset: str, searches: int, think: float) -> dict:
    return {
        "policy": "p",
        "method": "agent",
        "retriever": "bm25",
        "dataset": dataset,
        "em": 1.0,
        "f1": 1.0,
        "cem": 1.0,
        "retrieval_hit": 1.0,
        "num_searches": searches,
        "num_invalid": 0,
        "response_tokens": 10,
        "end_reason": "answer",
        "think_words": think,
        "think_repetition": 0.0,
        "duplicate_search_rate": 0.0,
    }


def test_the_report_has_the_search_rate_per_dataset_and_a_health_plot(tmp_path) -> None:
    records = [_record("nq", 2, 10.0), _record("nq", 0, 20.0), _record("hotpotqa", 1, 30.0)]
    old = {k: v for k, v in _record("popqa", 1, 0.0).items() if k not in ("think_words", "think_repetition")}
    rows = {r["dataset"]: r for r in summarize([*records, old])}
    assert (rows["nq"]["search_rate"], rows["hotpotqa"]["search_rate"]) == (0.5, 1.0)
    assert rows["nq"]["think_words"] == 15.0 and rows["popqa"]["think_words"] is None  # an old record: no value
    assert "search rate" in markdown_report(list(rows.values()))
    pytest.importorskip("matplotlib")
    from searchenv.evaluation.report import plot_health

    assert plot_health(list(rows.values()), tmp_path / "health.png").stat().st_size > 1000


def test_training_logs_draw_the_health_curves(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from searchenv.adapters.ppo.train import HEALTH_PLOTTED, health_plot_path, plot_log

    log = tmp_path / "train.jsonl"
    rows = [{"step": s, "reward": 0.1 * s, **dict.fromkeys(HEALTH_METRICS, float(s))} for s in range(1, 6)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = health_plot_path(tmp_path / "curves.png")
    assert png.name == "curves_health.png"
    plot_log(log, png, panels=HEALTH_PLOTTED)
    assert png.stat().st_size > 1000
