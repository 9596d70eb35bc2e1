"""The degraded engines (noisy, empty, shuffled, distractor) on real parts: the embedded world and native BM25."""

from __future__ import annotations

import gymnasium as gym
import pytest

import searchenv  # noqa: F401 - registers SearchQA-v0
from searchenv.components import build_retriever, load_corpus, load_examples
from searchenv.retrievers import make_retriever
from searchenv.retrievers.degraded.schedule import parse_schedule
from searchenv.reward_specs.metrics import answer_in_passages

K = 3


@pytest.fixture(scope="module")
def questions() -> list[str]:
    return [example.question for example in load_examples("world", limit=40)]


@pytest.fixture(scope="module")
def base():
    return build_retriever("bm25")


def ids(results) -> list[list[str]]:
    return [[passage.id for passage in found] for found in results]


def test_wrappers_share_the_base_engine_the_composition_root_builds(base):
    for name, options in [("noisy", {"p": 0.5}), ("empty", {}), ("shuffled", {}), ("distractor", {})]:
        wrapper = build_retriever(name, None, {"base": "bm25", **options})
        assert wrapper.base is base
        assert build_retriever(name, None, {"base": "bm25", **options}) is wrapper


def test_noisy_p0_is_the_base_and_p1_shares_no_passage_with_it(base, questions):
    expected = ids(base.search(questions, K))
    assert ids(build_retriever("noisy", None, {"base": "bm25", "p": 0.0}).search(questions, K)) == expected
    noisy = ids(build_retriever("noisy", None, {"base": "bm25", "p": 1.0}).search(questions, K))
    assert all(len(found) == K for found in noisy)
    assert all(not set(got) & set(want) for got, want in zip(noisy, expected))


def test_noisy_half_replaces_about_half_and_keeps_ranks(base, questions):
    expected = ids(base.search(questions, K))
    noisy = ids(build_retriever("noisy", None, {"base": "bm25", "p": 0.5}).search(questions, K))
    kept = sum(g == w for got, want in zip(noisy, expected) for g, w in zip(got, want))
    assert 0.3 < kept / (K * len(questions)) < 0.7


def test_shuffled_returns_the_same_passages_in_another_order(base, questions):
    expected = ids(base.search(questions, K))
    shuffled = ids(build_retriever("shuffled", None, {"base": "bm25"}).search(questions, K))
    for got, want in zip(shuffled, expected):
        assert sorted(got) == sorted(want)
        assert len(want) < 2 or got != want


def test_empty_returns_no_passages(questions):
    assert build_retriever("empty", None, {"base": "bm25"}).search(questions, K) == [[] for _ in questions]


def test_distractor_never_shows_a_passage_holding_the_gold_in_the_env(base):
    env = gym.make("SearchQA-v0", retriever="distractor", retriever_options={"base": "bm25"}, topk=K)
    plain = gym.make("SearchQA-v0", retriever="bm25", topk=K)
    corpus = load_corpus("world")
    contents = {corpus.ids[i]: corpus.passage(i).contents for i in range(len(corpus))}
    gold_in_plain = full = 0
    for index in range(40):
        _, info = env.reset(options={"index": index})
        plain.reset(options={"index": index})
        action = f"<search>{info['question']}</search>"
        shown = env.step(action)[4]["passage_ids"]
        plain_shown = plain.step(action)[4]["passage_ids"]
        assert not answer_in_passages(info["golden_answers"], [contents[i] for i in shown])
        gold_in_plain += answer_in_passages(info["golden_answers"], [contents[i] for i in plain_shown])
        full += len(shown) == K
    assert gold_in_plain > 10  # the test means something: plain BM25 often shows the gold
    assert full > 30  # over-fetching refills the places of the dropped passages


def test_distractor_without_golds_needs_answers(base, questions):
    distractor = build_retriever("distractor", None, {"base": "bm25"})
    with pytest.raises(ValueError, match="needs the gold answers"):
        distractor.search(questions[:1], K)
    golds = load_examples("world", limit=40)
    answers = [gold for example in golds for gold in example.golden_answers]
    fixed = build_retriever("distractor", None, {"base": "bm25", "answers": answers[:20]})
    for found in fixed.search(questions, K):
        assert not any(answer_in_passages(answers[:20], [passage.contents]) for passage in found)


def test_seeds_reproduce_and_differ(questions):
    def run(seed: int, shared: bool = True):
        return ids(
            build_retriever("noisy", None, {"base": "bm25", "p": 0.5, "seed": seed}, shared=shared).search(questions, K)
        )

    assert run(1) == run(1, shared=False)
    assert run(1) != run(2)
    assert ids(build_retriever("shuffled", None, {"base": "bm25", "seed": 1}).search(questions[::-1], K)) == list(
        reversed(ids(build_retriever("shuffled", None, {"base": "bm25", "seed": 1}).search(questions, K)))
    )  # a query's draw does not depend on its place in the batch


def test_schedule_interpolates_and_set_step_moves_it(base, questions):
    schedule = parse_schedule([[0, 0.0], [100, 1.0], [200, 0.5]])
    assert [schedule.at(s) for s in (0, 50, 100, 150, 300)] == [0.0, 0.5, 1.0, 0.75, 0.5]
    noisy = build_retriever("noisy", None, {"base": "bm25", "p": [[0, 0.0], [10, 1.0]]})
    expected = ids(base.search(questions, K))
    assert ids(noisy.search(questions, K)) == expected
    noisy.set_step(10)
    assert noisy.p == 1.0
    assert all(not set(got) & set(want) for got, want in zip(ids(noisy.search(questions, K)), expected))
    noisy.set_step(0)  # the instance is shared: leave it as found
    with pytest.raises(ValueError, match="non-negative integer"):
        noisy.set_step(-1)


@pytest.mark.parametrize("name", ["noisy", "empty", "shuffled", "distractor"])
def test_one_batched_base_call_per_vector_step(name, base, monkeypatch):
    calls = []
    search = base.search
    monkeypatch.setattr(base, "search", lambda queries, k: calls.append(len(queries)) or search(queries, k))
    options = {"base": "bm25", "p": 0.5}
    venv = gym.make_vec("SearchQA-v0", num_envs=4, retriever=name, retriever_options=options)
    _, infos = venv.reset(seed=0)
    venv.step([f"<search>{q}</search>" for q in infos["question"]])
    assert calls == [4]


def test_make_retriever_builds_the_base_by_name(base, questions):
    wrapper = make_retriever("noisy", load_corpus("world"), base="bm25", p=0.0)
    assert ids(wrapper.search(questions, K)) == ids(base.search(questions, K))


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("noisy", {"base": "bm25"}, "needs p"),
        ("empty", {}, "'base' is missing"),
        ("noisy", {"base": "bm52", "p": 0.1}, "did you mean 'bm25'"),
        ("shuffled", {"base": "bm25", "p": 1.5}, r"probability in \[0, 1\]"),
        ("noisy", {"base": "bm25", "p": [[5, 0.1], [5, 0.2]]}, "increase strictly"),
        ("noisy", {"base": "bm25", "p": [[0, 0.1, 3]]}, r"list of \(step, p\) pairs"),
        ("empty", {"base": "noisy", "base_options": {"p": 0.1}}, "not another degraded wrapper"),
        ("empty", {"base": "bm25", "base_options": {"k2": 1.0}}, "retriever 'bm25' has no option 'k2'"),
        ("empty", {"base": "bm25", "base_options": [1]}, "must be a mapping"),
        ("empty", {"base": "bm25", "prob": 0.5}, "has no option 'prob'"),
        ("distractor", {"base": "bm25", "fetch": 0}, "fetch must be a positive integer"),
        ("distractor", {"base": "bm25", "answers": "Paris"}, "answers must be a list of strings"),
    ],
)
def test_bad_options_fail_before_anything_loads(name, options, message):
    with pytest.raises(ValueError, match=message):
        gym.make("SearchQA-v0", retriever=name, retriever_options=options)
