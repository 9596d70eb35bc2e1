"""Scale the retrieval service out with Ray Serve: replicas of one index, or one index sharded across processes.

uvicorn workers (``searchenv serve --workers N``) scale on one machine. When retrieval needs more than that,
Ray Serve runs the very app of :func:`searchenv.retrievers.server.app.create_app`, so clients and the wire format
do not change. Two layouts (``pip install 'searchenv[ray]'``):

* :func:`build_application` — N identical replicas, each with the whole index (a GPU per replica for dense
  search, or replicas on several nodes); Ray routes each ``/retrieve`` to one of them.
* :func:`build_sharded_application` — an index too big for one process split by passage ranges: one deployment
  per shard holds only its range's postings and passages, and a merge deployment (the HTTP app) sends every
  batch to all shards and keeps the global top-k. Results are identical to the unsharded index: each shard's
  postings are cut out of the *whole* index, so BM25's collection statistics (idf, average length) and therefore
  every score are the unsharded ones, and the merge orders by (score descending, corpus position ascending) —
  the same deterministic order the unsharded :class:`ShardedRetriever` reference applies to ties.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from searchenv.corpus import Corpus
from searchenv.retrievers.bm25 import native
from searchenv.retrievers.server.app import ServerConfig, build_retriever, create_app
from searchenv.types import Passage

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "IndexShard",
    "ShardedRetriever",
    "build_application",
    "build_sharded_application",
    "merge_shard_hits",
    "serve_with_ray",
    "shard_bounds",
]

#: One hit of a shard: (score, corpus position, passage).
ShardHit = tuple[float, int, Passage]


def shard_bounds(num_passages: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` position ranges of near-equal size covering ``0..num_passages``."""
    if shards < 1 or shards > num_passages:
        raise ValueError(f"shards must be in [1, {num_passages}] (the number of passages), got {shards}")
    edges = [round(i * num_passages / shards) for i in range(shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


class IndexShard:
    """Passages ``[lo, hi)`` of a corpus with their part of the whole corpus's native BM25 index.

    The shard's own index is built over its passages with the *whole* index's collection statistics
    (native BM25's ``CollectionStats``: document frequencies, passage count, total length),
    so its idf, length norms and block bounds — and every score — are the unsharded index's, while it holds only
    its own postings.
    """

    def __init__(self, config: ServerConfig, lo: int, hi: int):
        from searchenv.retrievers.bm25.retriever import BM25Retriever

        full = build_retriever(config)
        if not isinstance(full, BM25Retriever) or full.native_index is None:
            raise ValueError(
                f"sharding needs the native BM25 engine (retriever='bm25'), got {config.retriever!r} "
                f"{config.options}; replicate other engines with build_application instead"
            )
        corpus = full.corpus
        self.lo, self.hi = lo, hi
        self.corpus = Corpus(corpus.ids[lo:hi], corpus.titles[lo:hi], corpus.texts[lo:hi], source=corpus.source)
        texts = (corpus.search_text(i) for i in range(lo, hi))
        self._engine = native.shard(full.native_index, texts, hi - lo, threads=full.threads)
        full.close()

    def search(self, queries: Sequence[str], k: int) -> list[list[ShardHit]]:
        """This shard's top-``k`` per query as (score, global position, passage); blank queries find nothing."""
        results: list[list[ShardHit]] = [[] for _ in queries]
        asked = [i for i, q in enumerate(queries) if q.strip()]
        if not asked:
            return results
        hits = native.search(self._engine, [queries[i] for i in asked], min(k, len(self.corpus)))
        for i, (positions, scores) in zip(asked, hits, strict=True):
            results[i] = [
                (float(s), self.lo + int(p), self.corpus.passage(int(p), float(s)))
                for p, s in zip(positions, scores, strict=True)
            ]
        return results


def merge_shard_hits(per_shard: Sequence[list[list[ShardHit]]], k: int) -> list[list[Passage]]:
    """The global top-``k`` per query from every shard's top-``k``: score descending, then corpus position."""
    merged = []
    for hits in zip(*per_shard, strict=True):
        pool = sorted((hit for shard_hits in hits for hit in shard_hits), key=lambda h: (-h[0], h[1]))
        merged.append([passage for _, _, passage in pool[:k]])
    return merged


class ShardedRetriever:
    """A retriever over shards called in parallel: Ray deployment handles, or :class:`IndexShard` objects in-process.

    ``shards`` are objects with ``search(queries, k) -> list[list[ShardHit]]`` (in-process) or Ray handles whose
    ``search.remote`` returns a response (they are all sent the batch before any answer is awaited).
    """

    name = "bm25-sharded"

    def __init__(self, shards: Sequence[Any], num_passages: int | None = None):
        self.shards = list(shards)
        self.num_passages = num_passages

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries = list(queries)
        if all(hasattr(getattr(shard, "search", None), "remote") for shard in self.shards):
            pending = [shard.search.remote(queries, k) for shard in self.shards]
            per_shard = [response.result() for response in pending]
        else:
            per_shard = [shard.search(queries, k) for shard in self.shards]
        return merge_shard_hits(per_shard, k)


def build_application(config: ServerConfig, replicas: int = 1, num_cpus: float = 1.0, num_gpus: float = 0.0) -> Any:
    """A bound Ray Serve application of the retrieval app (pass it to ``ray.serve.run``).

    Args:
        config: what each replica serves (the corpus and index paths must exist on every node).
        replicas: number of replicas Ray places on the cluster.
        num_cpus, num_gpus: resources reserved per replica (e.g. ``num_gpus=1`` for a GPU faiss index).
    """
    from ray import serve

    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")

    def build() -> FastAPI:  # runs inside each replica, so the app (and its index) is never pickled
        return create_app(config)

    @serve.deployment(
        name="searchenv-retrieval",
        num_replicas=replicas,
        ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus},
        max_ongoing_requests=256,
    )
    @serve.ingress(build)
    class RetrievalReplica:
        """One copy of the service; the ASGI app does all the work."""

    return RetrievalReplica.bind()


def build_sharded_application(
    config: ServerConfig, shards: int, num_cpus: float = 1.0, app_name: str = "searchenv"
) -> Any:
    """A bound Ray Serve application: ``shards`` :class:`IndexShard` deployments and a merging HTTP app.

    Args:
        config: a ``bm25`` configuration (native engine); ``config.index_dir`` lets every shard memory-map the
            whole index instead of building it (build it once first, e.g. by constructing ``BM25Retriever``).
        shards: number of passage ranges, one deployment each (``searchenv-shard-0``, ...).
        num_cpus: CPUs reserved per shard deployment (the merge deployment reserves none: it mostly waits).
        app_name: the name the application will be run under (the merge app finds its shards by it).
    """
    from ray import serve

    with open(config.corpus, encoding="utf-8") as handle:
        num_passages = sum(1 for line in handle if line.strip())
    names = [f"searchenv-shard-{i}" for i in range(shards)]

    @serve.deployment(ray_actor_options={"num_cpus": num_cpus})
    class ShardDeployment:
        """One passage range of the index."""

        def __init__(self, lo: int, hi: int):
            self.shard = IndexShard(config, lo, hi)

        def search(self, queries: list[str], k: int) -> list[list[ShardHit]]:
            return self.shard.search(queries, k)

    def build() -> FastAPI:  # runs inside the merge replica, where the shards' handles can be looked up
        handles = [serve.get_deployment_handle(name, app_name=app_name) for name in names]
        return create_app(config, retriever=ShardedRetriever(handles, num_passages))

    @serve.deployment(name="searchenv-merge", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
    @serve.ingress(build)
    class MergeDeployment:
        """The HTTP app; the shards are bound here so Ray deploys them with it."""

        def __init__(self, *shard_handles: Any):
            pass

    bound = [
        ShardDeployment.options(name=name).bind(lo, hi)
        for name, (lo, hi) in zip(names, shard_bounds(num_passages, shards), strict=True)
    ]
    return MergeDeployment.bind(*bound)


def serve_with_ray(
    config: ServerConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    replicas: int = 1,
    address: str | None = None,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
) -> None:
    """Start (or join, with ``address="auto"`` or ``"ray://..."``) a Ray cluster and serve until interrupted."""
    import ray
    from ray import serve

    build_retriever(config)  # fail fast with the cause (and build an index directory once, not per replica)
    ray.init(address=address, ignore_reinit_error=True)
    serve.start(http_options={"host": host, "port": port})
    serve.run(
        build_application(config, replicas, num_cpus, num_gpus), name="searchenv", route_prefix="/", blocking=True
    )
