"""The *E5 (Exact)* and *E5 (HNSW)* engines of the search-engine study (SPEC §3).

:func:`exact_retriever` and :func:`hnsw_retriever` are the registry factories behind
``make_retriever("e5-exact" | "e5-hnsw", corpus, ...)``. Each returns a :class:`DenseRetriever` whose
``search(queries, k)`` encodes the whole batch of queries in one call and ranks passages by inner product
(scores are the inner products themselves — cosine similarities for unit vectors).

Where the index comes from, in order of preference:

1. ``index_path=`` — a prebuilt faiss file (e.g. FlashRAG's ``e5_flat.index``, row ``i`` = corpus
   position ``i``). ``hnsw_retriever`` given a *flat* file builds its graph from the stored vectors.
2. ``index_dir=`` — a cache directory: passage vectors are embedded there in resumable shards
   (:mod:`searchenv.retrievers.embed`), the index is built once and saved with a ``<kind>.json`` record of
   encoder recipe, dimension, corpus checksum, index type and parameters; reopening it with another
   encoder, corpus or HNSW parameters raises :class:`~searchenv.retrievers.embed.IndexMismatchError`.
3. neither — vectors are embedded in memory and the index lives as long as the retriever.

The query encoder is loaded lazily, on the first text search: a prebuilt index can be searched by vector
(:meth:`DenseRetriever.search_vectors`) without the model at hand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from searchenv.retrievers.embed import ShardedVectors, check_same, embed_corpus, encoder_key
from searchenv.retrievers.encoder import DEFAULT_ENCODER, Encoder, load_encoder
from searchenv.retrievers.faiss_index import (
    IndexKind,
    add_vectors,
    index_kind,
    new_index,
    read_index,
    to_gpu,
    write_index,
)
from searchenv.types import Corpus, Passage

__all__ = ["DenseRetriever", "exact_retriever", "hnsw_retriever"]

EncoderSpec = str | os.PathLike[str] | Encoder | None


class DenseRetriever:
    """Inner-product search over a faiss index whose row ``i`` is corpus position ``i``.

    Build it with :func:`exact_retriever` or :func:`hnsw_retriever`.
    """

    def __init__(
        self,
        corpus: Corpus,
        index: Any,
        *,
        kind: IndexKind,
        encoder: EncoderSpec,
        encoder_options: dict[str, Any] | None = None,
        expected_encoder: dict[str, Any] | None = None,
        ef_search: int | None = None,
    ):
        if index.ntotal != len(corpus):
            raise ValueError(
                f"the index holds {index.ntotal} vectors but the corpus has {len(corpus)} passages; row i of the "
                "index must be passage i of the corpus — rebuild the index for this corpus"
            )
        self.corpus = corpus
        self.index = index
        self.kind = kind
        self.name = f"e5-{kind}"
        self._encoder_spec = encoder
        self._encoder_options = dict(encoder_options or {})
        self._expected_encoder = expected_encoder
        self._encoder: Encoder | None = encoder if isinstance(encoder, Encoder) else None
        self._encoder_checked = False
        if ef_search is not None:
            self.ef_search = ef_search

    @property
    def ef_search(self) -> int | None:
        """HNSW beam width at query time (``None`` for exact search); larger = higher recall, slower."""
        return int(self.index.hnsw.efSearch) if self.kind == "hnsw" else None

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        if self.kind != "hnsw":
            raise ValueError("ef_search applies to HNSW indexes only")
        if int(value) < 1:
            raise ValueError(f"ef_search must be positive, got {value}")
        self.index.hnsw.efSearch = int(value)

    @property
    def encoder(self) -> Encoder:
        """The query encoder, loaded on first use and checked against the index's recorded recipe."""
        if not self._encoder_checked:
            encoder = self._encoder or load_encoder(self._encoder_spec, **self._encoder_options)
            self._check_encoder(encoder)
            self._encoder, self._encoder_checked = encoder, True
        assert self._encoder is not None
        return self._encoder

    def _check_encoder(self, encoder: Encoder) -> None:
        if encoder.dim != self.index.d:
            raise ValueError(
                f"encoder {encoder.describe().get('name')!r} makes {encoder.dim}-d vectors but the index holds "
                f"{self.index.d}-d vectors; use the encoder the index was built with"
            )
        if self._expected_encoder is not None:
            check_same("encoder", Path("this index"), self._expected_encoder, encoder_key(encoder.describe()))

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first; ``k`` larger than the corpus returns the whole corpus."""
        queries = list(queries)
        if not queries:
            return []
        bad = [i for i, q in enumerate(queries) if not isinstance(q, str)]
        if bad:
            raise TypeError(f"queries must be strings; query #{bad[0]} is {type(queries[bad[0]]).__name__}")
        scores, positions = self.search_vectors(self.encoder.encode_queries(queries), k)
        return [
            [self.corpus.passage(int(p), float(s)) for s, p in zip(row_s, row_p, strict=True) if p >= 0]
            for row_s, row_p in zip(scores, positions, strict=True)
        ]

    def search_vectors(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw faiss search: ``(scores, positions)``, each ``len(vectors) × min(k, N)``; position -1 = none."""
        if int(k) < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.index.d:
            raise ValueError(f"query vectors must have shape (n, {self.index.d}), got {vectors.shape}")
        k = min(int(k), int(self.index.ntotal))
        if len(vectors) == 0:
            return np.empty((0, k), dtype=np.float32), np.empty((0, k), dtype=np.int64)
        return self.index.search(vectors, k)

    def __repr__(self) -> str:
        return f"DenseRetriever({self.name}, {self.index.ntotal} passages, {self.index.d}-d)"


def exact_retriever(corpus: Corpus, encoder: EncoderSpec = DEFAULT_ENCODER, **options: Any) -> DenseRetriever:
    """Exact inner-product search (faiss ``IndexFlatIP``); on GPU when faiss-gpu sees one.

    Options: ``index_dir``, ``index_path``, ``use_gpu`` (default: when available), ``shard_size``,
    ``progress``, and encoder options (``family``, ``max_length``, ``batch_size``, ``device``, ``fp16``).
    """
    return _build(corpus, "exact", encoder, {}, **options)


def hnsw_retriever(
    corpus: Corpus,
    encoder: EncoderSpec = DEFAULT_ENCODER,
    *,
    m: int = 64,
    ef_construction: int = 40,
    ef_search: int = 16,
    **options: Any,
) -> DenseRetriever:
    """Approximate search over an ``IndexHNSWFlat(d, m, METRIC_INNER_PRODUCT)`` graph (CPU).

    The defaults (``m=64``, ``efConstruction=40``, ``efSearch=16``) are what ``faiss.index_factory(d,
    "HNSW64", METRIC_INNER_PRODUCT)`` gives — the index the Search-R1 study searched. Raise ``ef_search``
    (64-256) for recall closer to exact search; see docs/benchmarks.md for the trade-off. Other options as
    for :func:`exact_retriever`.
    """
    params = {"m": int(m), "ef_construction": int(ef_construction)}
    retriever = _build(corpus, "hnsw", encoder, params, **options)
    retriever.ef_search = ef_search
    return retriever


_ENCODER_OPTIONS = ("family", "max_length", "batch_size", "device", "fp16", "variant", "num_threads")


def _build(
    corpus: Corpus,
    kind: IndexKind,
    encoder: EncoderSpec,
    params: dict[str, int],
    *,
    index_dir: str | os.PathLike[str] | None = None,
    index_path: str | os.PathLike[str] | None = None,
    use_gpu: bool | None = None,
    shard_size: int = 8192,
    progress: bool = True,
    **encoder_options: Any,
) -> DenseRetriever:
    unknown = sorted(set(encoder_options) - set(_ENCODER_OPTIONS))
    if unknown:
        raise TypeError(f"unknown dense-retriever option(s) {unknown}; encoder options are {list(_ENCODER_OPTIONS)}")
    if len(corpus) == 0:
        raise ValueError("dense retrieval needs a non-empty corpus")
    if index_path is not None and index_dir is not None:
        raise ValueError("pass either index_path (a prebuilt faiss file) or index_dir (a cache to build in), not both")
    expected: dict[str, Any] | None = None
    if index_path is not None:
        index = _from_file(Path(index_path), kind, params, progress)
    else:
        enc = load_encoder(encoder, **encoder_options)
        encoder, expected = enc, encoder_key(enc.describe())
        if index_dir is not None:
            index = _from_dir(Path(index_dir), corpus, enc, kind, params, shard_size, progress)
        else:
            vectors = enc.encode_passages([corpus.search_text(i) for i in range(len(corpus))])
            index = add_vectors(new_index(kind, enc.dim, **params), [vectors], total=len(corpus), progress=progress)
    if use_gpu is None or use_gpu:
        moved = to_gpu(index)
        if use_gpu and moved is index:
            raise RuntimeError("use_gpu=True but faiss sees no GPU (or the index is HNSW, which faiss runs on CPU)")
        index = moved
    return DenseRetriever(
        corpus, index, kind=kind, encoder=encoder, encoder_options=encoder_options, expected_encoder=expected
    )


def _from_file(path: Path, kind: IndexKind, params: dict[str, int], progress: bool) -> Any:
    """Load a prebuilt index; a flat file can seed an HNSW graph, the reverse is refused."""
    index = read_index(path)
    found = index_kind(index)
    if found == kind:
        return index
    if kind == "hnsw" and found == "exact":
        vectors = index.reconstruct_n(0, index.ntotal)
        return add_vectors(new_index("hnsw", index.d, **params), [vectors], total=index.ntotal, progress=progress)
    raise ValueError(
        f"{path} holds a {found!r} index but an {kind!r} retriever was asked for; exact search needs a flat "
        "inner-product index (faiss IndexFlatIP)"
    )


def _from_dir(
    directory: Path,
    corpus: Corpus,
    encoder: Encoder,
    kind: IndexKind,
    params: dict[str, int],
    shard_size: int,
    progress: bool,
) -> Any:
    """Load ``<kind>.faiss`` from a cache directory after checking its record, or embed and build it there."""
    record = {
        "index_type": kind,
        "params": params,
        "metric": "inner_product",
        "encoder": encoder_key(encoder.describe()),
        "dim": int(encoder.dim),
        "corpus_checksum": corpus.checksum,
        "corpus_size": len(corpus),
    }
    index_file, record_file = directory / f"{kind}.faiss", directory / f"{kind}.json"
    if record_file.exists() and index_file.exists():
        stored = json.loads(record_file.read_text())
        for key in ("corpus_checksum", "corpus_size", "encoder", "dim", "index_type", "metric", "params"):
            check_same(key.replace("_", " "), directory, stored.get(key), record[key])
        index = read_index(index_file)
        check_same("faiss index type", index_file, index_kind(index), kind)
        return index
    vectors: ShardedVectors = embed_corpus(
        corpus, encoder, directory / "vectors", shard_size=shard_size, progress=progress
    )
    index = add_vectors(
        new_index(kind, vectors.dim, **params), vectors.shards(), total=vectors.count, progress=progress
    )
    write_index(index, index_file)
    tmp = record_file.with_name(record_file.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    os.replace(tmp, record_file)
    return index
