"""The composition root: one shared instance per distinct plain argument set, every check before any load."""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest
from toyworld import CORPUS, QUESTIONS

import searchenv
from searchenv import components
from searchenv.components import (
    DEFAULT_SPLIT,
    build_retriever,
    build_reward,
    check_components,
    clear_cache,
    load_corpus,
    load_examples,
)
from searchenv.corpus import Corpus
from searchenv.retrievers import REMOTE_OPTIONS, RETRIEVER_OPTIONS, make_retriever
from searchenv.retrievers.random_retriever import RandomRetriever


@pytest.fixture()
def corpus_file(tmp_path):
    path = tmp_path / "corpus.jsonl"
    CORPUS.to_jsonl(path)
    return path


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_cache()
    yield
    clear_cache()


def built_kinds() -> set[str]:
    """Which kinds of shared instances exist (the cache's keys start with the kind)."""
    return {key.split('"')[1] for key in components._SHARED._items}


def test_equal_plain_arguments_share_one_instance(corpus_file):
    first = build_retriever("bm25", str(corpus_file), {"engine": "native"})
    assert build_retriever("bm25", corpus_file, {"engine": "native"}) is first  # str and Path name one file
    assert build_retriever("bm25", str(corpus_file)) is not first  # other options, other instance
    assert build_retriever("bm25", str(corpus_file), {"engine": "native"}, shared=False) is not first
    assert load_corpus(str(corpus_file)) is first.corpus
    assert build_reward("f1") is build_reward("f1")
    assert build_reward({"base": "format", "lambda_f": 0.4}) is build_reward({"lambda_f": 0.4, "base": "format"})
    clear_cache()
    assert build_retriever("bm25", str(corpus_file), {"engine": "native"}) is not first


def test_objects_are_used_as_given_and_never_cached():
    in_memory = Corpus(list(CORPUS.ids), list(CORPUS.titles), list(CORPUS.texts))
    assert load_corpus(in_memory) is in_memory
    assert build_retriever("random", in_memory) is not build_retriever("random", in_memory)
    ready = RandomRetriever(in_memory)
    assert build_retriever(ready) is ready and build_retriever(ready, options={"seed": 1}) is ready
    assert "retriever" not in built_kinds()


def test_environments_built_from_equal_arguments_share_their_parts(corpus_file):
    a = gym.make(searchenv.ENV_ID, dataset=QUESTIONS, corpus=str(corpus_file), retriever="bm25").unwrapped
    b = gym.make(searchenv.ENV_ID, dataset=QUESTIONS, corpus=str(corpus_file), retriever="bm25").unwrapped
    assert a.retriever is b.retriever and a.reward_spec is b.reward_spec
    world_a, world_b = gym.make(searchenv.ENV_ID).unwrapped, gym.make(searchenv.ENV_ID).unwrapped
    assert world_a.retriever is world_b.retriever  # the world's corpus is a plain name too
    assert world_a.examples == world_b.examples and world_a.examples is not world_b.examples


def test_examples_are_read_once_and_each_caller_gets_its_own_list():
    first, second = load_examples("world"), load_examples("world")
    assert first == second and first is not second and first[0] is second[0]
    assert load_examples("world", limit=5) == first[:5]
    with pytest.raises(ValueError, match="positive integer"):
        load_examples("world", limit=0)


def test_default_split_is_train_everywhere():
    assert DEFAULT_SPLIT == "train"
    assert inspect.signature(searchenv.SearchQAEnv).parameters["split"].default == DEFAULT_SPLIT
    env = gym.make(searchenv.ENV_ID).unwrapped
    assert {e.metadata["split"] for e in env.examples} == {"train"}


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"reward": "emm"}, ValueError, "did you mean 'em'"),
        ({"protocol": "search-r2"}, ValueError, "unknown protocol"),
        ({"retriever": "bm52"}, ValueError, "did you mean 'bm25'"),
        ({"retriever": "random", "retriever_options": {"sed": 1}}, ValueError, "did you mean 'seed'"),
        ({"retriever": "random", "retriever_options": {"seed": "one"}}, ValueError, "'seed' must be int"),
        ({"retriever": "bm25", "retriever_options": {"engine": "lucine"}}, ValueError, "unknown BM25 engine"),
        ({"retriever": "e5-exact", "retriever_options": {"encoder": "/no/such/model"}}, FileNotFoundError, "not found"),
        (
            {"retriever": "e5-hnsw", "retriever_options": {"encoder": "minilm", "index_path": "/no/e5_flat.index"}},
            FileNotFoundError,
            "prebuilt faiss",
        ),
        ({"dataset": "no_such.jsonl"}, FileNotFoundError, "neither a file nor a known name"),
        ({"dataset": "hotpotqa", "split": "test"}, ValueError, "has splits ['train', 'dev']"),
        ({"dataset": "world", "split": "dev"}, ValueError, "the embedded world has splits"),
        ({"dataset": QUESTIONS}, ValueError, "needs a corpus"),
        ({"dataset": QUESTIONS, "corpus": "/no/corpus.jsonl"}, FileNotFoundError, "corpus file"),
        ({"retriever": "http://127.0.0.1:9", "retriever_options": {"timeout_s": 3}}, ValueError, "'timeout'"),
        ({"retriever": "no_such_module:factory", "corpus": "x"}, ValueError, "no module 'no_such_module'"),
    ],
)
def test_every_argument_is_checked_before_anything_loads(arguments, error, message):
    with pytest.raises(error, match=__import__("re").escape(message)):
        check_components(**arguments)
    with pytest.raises(error):
        gym.make(searchenv.ENV_ID, **arguments)
    assert built_kinds() <= {"reward"}  # no corpus, dataset, encoder or retriever was built


def test_encoder_must_be_found_when_the_hub_is_off(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="hub is switched off"):
        check_components(retriever="e5-exact", retriever_options={"encoder": "nobody/no-such-encoder"})
    check_components(retriever="e5-exact", retriever_options={"encoder": "minilm"})


def _parameters(func, skip=("self", "corpus", "url")) -> set[str]:
    return {
        name
        for name, p in inspect.signature(func).parameters.items()
        if name not in skip and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def test_option_table_matches_the_engines_signatures():
    """The checks must accept exactly what the engines accept: a new engine option fails here until it is listed."""
    from searchenv.retrievers.bm25.retriever import BM25Retriever
    from searchenv.retrievers.dense import retriever as dense
    from searchenv.retrievers.remote import retriever as remote

    assert set(RETRIEVER_OPTIONS["random"]) == _parameters(RandomRetriever.__init__)
    assert set(RETRIEVER_OPTIONS["bm25"]) == _parameters(BM25Retriever.__init__)
    dense_options = {"encoder"} | _parameters(dense._build, skip=("corpus", "kind", "encoder", "params"))
    dense_options |= set(dense._ENCODER_OPTIONS)
    assert set(RETRIEVER_OPTIONS["e5-exact"]) == dense_options
    assert set(RETRIEVER_OPTIONS["e5-hnsw"]) == dense_options | _parameters(dense.hnsw_retriever) - {"encoder"}
    assert set(REMOTE_OPTIONS) == _parameters(remote.RemoteRetriever.__init__)


def test_random_engine_ranking_does_not_depend_on_k_or_on_other_queries():
    retriever = make_retriever("random", load_corpus("world"), seed=3)
    queries = [f"question {i}" for i in range(50)]
    top5 = retriever.search(queries, 5)
    for k in (1, 2, 3):
        assert [[p.id for p in hits] for hits in retriever.search(queries, k)] == [
            [p.id for p in hits[:k]] for hits in top5
        ]
    alone = [retriever.search([q], 5)[0] for q in reversed(queries)]
    assert [[p.id for p in hits] for hits in reversed(alone)] == [[p.id for p in hits] for hits in top5]
    assert all(len({p.id for p in hits}) == 5 for hits in top5)
    small = make_retriever("random", CORPUS, seed=3)
    assert sorted(p.id for p in small.search(["q"], 10)[0]) == sorted(CORPUS.ids)  # k > corpus: every passage once
