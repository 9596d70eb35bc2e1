"""Ray Serve on a local two-CPU Ray cluster: replicas of one app, and one BM25 index sharded across two processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from servers import free_port

from searchenv.corpus import Corpus
from searchenv.retrievers.bm25.retriever import BM25Retriever
from searchenv.retrievers.random_retriever import RandomRetriever
from searchenv.retrievers.server.app import ServerConfig
from searchenv.retrievers.server.ray_serve import (
    IndexShard,
    ShardedRetriever,
    build_application,
    build_sharded_application,
    shard_bounds,
)
from searchenv.types import Passage

pytestmark = pytest.mark.slow


def as_wire(passages: list[Passage]) -> list[dict[str, object]]:
    return [{"document": {"id": p.id, "contents": p.contents}, "score": p.score} for p in passages]


@pytest.fixture(scope="module")
def corpus_path(shared_data: Path) -> Path:
    return shared_data / "corpus" / "hotpotqa_hipporag.jsonl"  # every title quoted, as Passage.contents spells it


@pytest.fixture(scope="module")
def questions(shared_data: Path) -> list[str]:
    return [json.loads(line)["question"] for line in (shared_data / "qa" / "hotpotqa_100.jsonl").open()]


@pytest.fixture(scope="module")
def serve_on_port() -> Iterator[tuple[object, str]]:
    ray = pytest.importorskip("ray")
    serve = pytest.importorskip("ray.serve")
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield serve, f"http://127.0.0.1:{port}"
    finally:
        ray.shutdown()  # stops the local cluster we started, Serve's controller, proxy and replicas included


def test_shard_bounds_cover_the_corpus() -> None:
    assert shard_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    with pytest.raises(ValueError, match="shards must be in"):
        shard_bounds(2, 3)


def test_in_process_shards_equal_the_unsharded_index(corpus_path: Path, questions: list[str]) -> None:
    full = BM25Retriever(Corpus.from_jsonl(corpus_path), show_progress=False)
    config = ServerConfig(retriever="bm25", corpus=str(corpus_path), options={"show_progress": False})
    shards = [IndexShard(config, lo, hi) for lo, hi in shard_bounds(len(full.corpus), 3)]
    sharded = ShardedRetriever(shards)
    for k in (1, 3, 10):
        assert sharded.search(questions, k) == full.search(questions, k)  # ids, order and float scores
    assert sharded.search(["", "zzzzunknownterm"], 3) == [[], []]


def test_replicas_answer_like_the_app(serve_on_port: tuple[object, str], corpus_path: Path) -> None:
    serve, base = serve_on_port
    engine = RandomRetriever(Corpus.from_jsonl(corpus_path), seed=7)
    config = ServerConfig(retriever="random", corpus=str(corpus_path), options={"seed": 7})
    serve.run(build_application(config, replicas=2, num_cpus=0.5), name="replicas", route_prefix="/")  # type: ignore[attr-defined]
    queries = ["ray one", "ray two"]
    expected = {"result": [as_wire(hits) for hits in engine.search(queries, 2)]}
    for _ in range(8):  # Ray routes each request to one of the replicas; all answer identically
        response = httpx.post(
            f"{base}/retrieve", json={"queries": queries, "topk": 2, "return_scores": True}, timeout=60
        )
        assert response.json() == expected
    assert httpx.post(f"{base}/retrieve", content=b"not json", timeout=30).status_code == 400
    deployment = serve.status().applications["replicas"].deployments["searchenv-retrieval"]  # type: ignore[attr-defined]
    assert deployment.replica_states.get("RUNNING") == 2
    serve.delete("replicas")  # type: ignore[attr-defined]


def test_two_shards_over_ray_equal_the_unsharded_index(
    serve_on_port: tuple[object, str], corpus_path: Path, questions: list[str], tmp_path: Path
) -> None:
    serve, base = serve_on_port
    full = BM25Retriever(Corpus.from_jsonl(corpus_path), index_dir=tmp_path / "index", show_progress=False)
    config = ServerConfig(
        retriever="bm25", corpus=str(corpus_path), index_dir=str(tmp_path / "index"), options={"show_progress": False}
    )
    app = build_sharded_application(config, shards=2, num_cpus=0.5, app_name="sharded")
    serve.run(app, name="sharded", route_prefix="/")  # type: ignore[attr-defined]
    for k in (1, 5):
        body = {"queries": questions[:40], "topk": k, "return_scores": True}
        response = httpx.post(f"{base}/retrieve", json=body, timeout=120)
        assert response.status_code == 200, response.text
        assert response.json() == {"result": [as_wire(hits) for hits in full.search(questions[:40], k)]}
    deployments = serve.status().applications["sharded"].deployments  # type: ignore[attr-defined]
    assert {name for name in deployments} == {"searchenv-merge", "searchenv-shard-0", "searchenv-shard-1"}
    assert all(d.replica_states.get("RUNNING") == 1 for d in deployments.values())
    serve.delete("sharded")  # type: ignore[attr-defined]
