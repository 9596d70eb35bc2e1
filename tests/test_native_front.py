"""The native BM25 engine's front (build / open / search / shard): what the retriever and the Ray shards use."""

from __future__ import annotations

from searchenv.components import load_corpus
from searchenv.retrievers.bm25 import native
from searchenv.retrievers.server.app import ServerConfig
from searchenv.retrievers.server.ray_serve import IndexShard, ShardedRetriever, shard_bounds

QUERIES = ["In what year was Brosara founded?", "Who founded the guild of Stervumark?", "river", ""]


def test_build_open_and_search_through_the_front(tmp_path):
    corpus = load_corpus("world")
    assert native.build(corpus, tmp_path / "index", k1=0.9, b=0.4, show_progress=False) == len(corpus)
    engine = native.open(tmp_path / "index")
    (positions, scores), *_ = native.search(engine, QUERIES[:1], 3)
    assert corpus.ids[int(positions[0])] == "718" and list(scores) == sorted(scores, reverse=True)


def test_shards_score_as_the_whole_index(tmp_path):
    corpus = load_corpus("world")
    native.build(corpus, tmp_path / "whole", k1=0.9, b=0.4, show_progress=False)
    whole = native.open(tmp_path / "whole")
    lo, hi = 700, 900
    part = native.shard(tmp_path / "whole", (corpus.search_text(i) for i in range(lo, hi)), hi - lo)
    for (whole_positions, whole_scores), (positions, scores) in zip(
        native.search(whole, QUERIES, len(corpus)), native.search(part, QUERIES, hi - lo), strict=True
    ):
        inside = [(int(p), float(s)) for p, s in zip(whole_positions, whole_scores) if lo <= p < hi]
        assert [(lo + int(p), float(s)) for p, s in zip(positions, scores)] == inside


def test_in_process_shards_of_the_service_equal_the_unsharded_index(tmp_path):
    corpus = load_corpus("world")
    path = tmp_path / "world.jsonl"
    corpus.to_jsonl(path)
    config = ServerConfig(retriever="bm25", corpus=str(path), options={"show_progress": False})
    shards = [IndexShard(config, lo, hi) for lo, hi in shard_bounds(len(corpus), 3)]
    from searchenv.components import build_retriever

    full = build_retriever("bm25", str(path), {"show_progress": False}, shared=False)
    assert ShardedRetriever(shards).search(QUERIES, 5) == full.search(QUERIES, 5)
