"""Reasoning-health metrics: read from the episode's turns once (Facts), in every episode's metrics, in the
evaluation report (per-dataset search rate, a plot) and drawn from a training log."""

from __future__ import annotations

import json

import pytest

from searchenv import SearchQAEnv
from searchenv.episode import METRIC_NAMES
from searchenv.episode.health import (
    HEALTH_METRICS,
    count_passages,
    count_repeated_queries,
    repetition_ratio,
    think_text,
)
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


def test_the_text_path_reads_the_same_thinking_and_passages() -> None:
    env = SearchQAEnv(retriever="random", topk=3, max_turns=5)
    env.reset(seed=2)
    env.step(f"{LOOP}<search>q</search>")
    env.step("<answer>Paris</answer>")
    played = env.episode.facts
    read = Rollout.from_text(env.episode.response_text, ["Paris"], trust_transcript=True).facts
    assert read == played  # passages_read compared too
    assert (read.think_words, read.answer_words, read.num_searches) == (40, 1, 1)
    assert (played.passages_read, read.passages_read) == (3, 3)
    untrusted = Rollout.from_text(env.episode.response_text, ["Paris"]).facts
    assert (untrusted.num_searches, untrusted.passages_read) == (0, 0)  # uncredited blocks: no search, no passage


@pytest.mark.parametrize("protocol", ["search-r1", "r1-searcher", "tool-call"])
def test_both_paths_count_the_passages_each_search_showed(protocol) -> None:
    """Real BM25 episodes on the world, a word budget that drops and cuts passages: every path counts what the
    environment showed (its shown ids), from the transcript alone."""
    # 3 words for 5 passages: the fair share cuts three to one word each and drops two
    env = SearchQAEnv(retriever="bm25", topk=5, max_turns=4, max_information_words=3, protocol=protocol)
    _, info = env.reset(options={"index": 3})
    tags = env.protocol.search_tags

    def search(query: str) -> str:
        if env.protocol.action_format == "tool-call":
            return f'{tags[0]}{{"name": "search", "arguments": {{"query": "{query}"}}}}{tags[1]}'
        return f"{tags[0]}{query}{tags[1]}"

    env.step(search(info["question"]))
    env.step(search("founded"))
    env.step(search("the river"))
    *_, step_info = env.truncate()
    shown = sum(len(turn.shown_ids) for turn in env.episode.turns)
    assert 3 <= shown < 15  # the budget dropped passages
    played = env.episode.facts
    spans = Rollout.from_segments([(s.author, s.text) for s in env.episode.segments], ["x"], env.protocol)
    trusted = Rollout.from_text(env.episode.response_text, ["x"], env.protocol, trust_transcript=True)
    assert played.passages_read == spans.facts.passages_read == trusted.facts.passages_read == shown
    assert step_info["episode_metrics"]["passages_read"] == float(shown)


def test_passages_are_counted_by_the_rank_headers() -> None:
    template = "Doc {rank}(Title: {title}) {text}\n"
    assert count_passages("", template) == 0
    assert count_passages("Doc 1(Title: A) x\nDoc 2(Title: B) y", template) == 2
    assert count_passages("Doc 1(Title: A) see Doc 1(Title: A) again", template) == 1  # a rank counts once
    assert count_passages("[1] A: x\n[2] B: y\n[3] C: z", "[{rank}] {title}: {text}\n") == 3
    assert count_passages("A: x\nB: y", "{title}: {text}\n") is None  # nothing to count by: missing, not 0


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
