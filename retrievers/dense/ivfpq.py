"""IVF-PQ candidates re-ranked exactly from a memory-mapped fp16 vector file: dense search that fits a CPU box.

An exact (flat) index of wiki-18 needs 64.6 GB of RAM, an HNSW graph 75.7 GB. Product-quantised codes need
64 bytes per passage (1.3 GB for 21M), but their inner products are approximate and lose top-3 neighbours
(measured: recall@3 0.125 at 1M clustered vectors, 0.87 at 19.6k real MiniLM vectors). Re-ranking repairs that:
the IVF-PQ index proposes ``candidates`` passages per query, and their true inner products are computed from
the full vectors, kept in fp16 in a memory-mapped ``.npy`` file on disk (32 GB for wiki-18, of which a query
touches only ``candidates`` rows). Recall then depends on whether the true neighbours are *among* the
candidates, not on the PQ ordering: at 1M vectors with real e5 statistics, recall@3 against exact search rose
from 0.24 (PQ order) to 0.985 (nprobe 128, 300 candidates) — see docs/benchmarks.md.

:class:`RerankedIVFPQ` looks like a faiss index to :class:`~searchenv.retrievers.dense.retriever.DenseRetriever`
(``d``, ``ntotal``, ``search(x, k)``), so the dense retriever's checks and result handling apply unchanged.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from searchenv.retrievers.dense.faiss_index import _faiss

__all__ = ["RerankedIVFPQ", "default_nlist", "default_pq_m", "train_ivfpq", "write_fp16_vectors"]

#: faiss warns below 39 training points per centroid; fewer gives poor lists and codebooks.
_POINTS_PER_CENTROID = 39
#: floats gathered per re-ranking block (128 MB of fp32), whatever the batch size and re-rank depth.
_RERANK_FLOATS = 32 * 2**20


def default_nlist(n: int) -> int:
    """Inverted lists: the power of two nearest ``sqrt(n)`` (1M → 1024, 21M → 4096), at most ``n / 39``."""
    nlist = 2 ** round(math.log2(max(math.sqrt(n), 1)))
    return int(max(1, min(nlist, n // _POINTS_PER_CENTROID)))


def default_pq_m(dim: int) -> int:
    """Sub-quantisers: 64 for 768-d e5 vectors (12 dims each), else the largest of a few that divides ``dim``."""
    return next(m for m in (64, 48, 32, 24, 16, 8, 4, 2, 1) if dim % m == 0 and m <= dim)


def train_ivfpq(sample: np.ndarray, *, nlist: int, pq_m: int, nbits: int = 8, seed: int = 0) -> Any:  # faiss.IndexIVFPQ
    """An empty, trained inner-product ``IndexIVFPQ`` (polysemous training off: we never use its Hamming filter)."""
    faiss = _faiss()
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    dim = sample.shape[1]
    if dim % pq_m:
        raise ValueError(f"pq_m={pq_m} must divide the vector dimension {dim}")
    if len(sample) < max(nlist, 2**nbits):
        raise ValueError(
            f"IVF-PQ training needs at least max(nlist, 2**nbits) = {max(nlist, 2**nbits)} vectors, got {len(sample)}; "
            "use e5-exact for a corpus this small"
        )
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(quantizer, dim, int(nlist), int(pq_m), int(nbits), faiss.METRIC_INNER_PRODUCT)
    index.do_polysemous_training = False
    index.cp.seed = int(seed)
    index.pq.cp.seed = int(seed)
    index.train(sample)
    index.own_fields = True
    quantizer.this.disown()  # the IVF index now owns its quantizer (the Python object may be collected)
    return index


def write_fp16_vectors(
    shards: Iterable[np.ndarray], path: str | os.PathLike[str], *, count: int, dim: int, progress: bool = True
) -> np.ndarray:
    """Write float32 row blocks into one ``count × dim`` fp16 ``.npy`` (atomically) and return it memory-mapped."""
    from tqdm.auto import tqdm

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(count, dim))
    row = 0
    with tqdm(total=count, desc="fp16 vectors", unit="vec", disable=not progress) as bar:
        for shard in shards:
            out[row : row + len(shard)] = shard
            row += len(shard)
            bar.update(len(shard))
    if row != count:
        raise ValueError(f"expected {count} vectors, the shards held {row}")
    out.flush()
    del out
    os.replace(tmp, path)
    return np.load(path, mmap_mode="r")


class RerankedIVFPQ:
    """IVF-PQ proposes ``candidates`` rows per query; exact inner products over fp16 vectors pick the top ``k``.

    Args:
        ivf: a filled inner-product ``faiss.IndexIVFPQ`` whose row ``i`` is vector ``i``.
        vectors: the full vectors, ``ntotal × d`` (fp16, usually ``np.load(..., mmap_mode="r")``).
        nprobe: inverted lists scanned per query (more = better candidates, slower).
        candidates: rows re-ranked per query (more = higher recall, more random reads).
    """

    def __init__(self, ivf: Any, vectors: np.ndarray, *, nprobe: int = 128, candidates: int = 300):
        if vectors.ndim != 2 or vectors.shape != (ivf.ntotal, ivf.d):
            raise ValueError(
                f"the IVF-PQ index holds {ivf.ntotal} × {ivf.d} vectors but the vector file is {vectors.shape}; "
                "both must come from the same embedding run"
            )
        self.ivf = ivf
        self.vectors = vectors
        self.d = int(ivf.d)
        self.ntotal = int(ivf.ntotal)
        self.nprobe = nprobe
        self.candidates = candidates

    @property
    def nprobe(self) -> int:
        return int(self.ivf.nprobe)

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        if int(value) < 1:
            raise ValueError(f"nprobe must be positive, got {value}")
        self.ivf.nprobe = int(value)

    @property
    def candidates(self) -> int:
        return self._candidates

    @candidates.setter
    def candidates(self, value: int) -> None:
        if int(value) < 1:
            raise ValueError(f"candidates must be positive, got {value}")
        self._candidates = int(value)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, positions)`` like faiss: exact inner products of the best ``k`` candidates, best first."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        depth = min(max(self._candidates, int(k)), self.ntotal)
        _, proposed = self.ivf.search(queries, depth)
        block = max(1, min(256, _RERANK_FLOATS // (depth * self.d)))  # bounds the gathered fp32 block
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        positions = np.full((len(queries), k), -1, dtype=np.int64)
        for start in range(0, len(queries), block):
            stop = min(start + block, len(queries))
            self._rerank(queries[start:stop], proposed[start:stop], scores[start:stop], positions[start:stop])
        return scores, positions

    def _rerank(self, queries: np.ndarray, proposed: np.ndarray, scores: np.ndarray, positions: np.ndarray) -> None:
        k = scores.shape[1]
        valid = proposed >= 0
        rows = np.unique(proposed[valid])  # sorted: the memory map is read front to back, each row once
        gathered = np.asarray(self.vectors[rows], dtype=np.float32)
        slot = np.searchsorted(rows, np.where(valid, proposed, rows[0] if len(rows) else 0))
        exact = np.einsum("qcd,qd->qc", gathered[slot], queries)
        exact[~valid] = -np.inf
        keep = min(k, exact.shape[1])
        top = np.argpartition(-exact, keep - 1, axis=1)[:, :keep]
        top_scores = np.take_along_axis(exact, top, axis=1)
        order = np.argsort(-top_scores, axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        scores[:, :keep] = np.take_along_axis(top_scores, order, axis=1)
        found = np.take_along_axis(proposed, top, axis=1)
        positions[:, :keep] = np.where(np.isfinite(scores[:, :keep]), found, -1)

    def __repr__(self) -> str:
        return f"RerankedIVFPQ({self.ntotal} × {self.d}, nlist {self.ivf.nlist}, nprobe {self.nprobe}, " + (
            f"candidates {self._candidates})"
        )
