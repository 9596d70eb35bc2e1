"""Faiss index construction, persistence and GPU placement for the dense engines.

Two index types, matching the Search-R1 study: ``exact`` = ``IndexFlatIP`` (brute-force inner product)
and ``hnsw`` = ``IndexHNSWFlat(d, M, METRIC_INNER_PRODUCT)`` (graph search, approximate). Vectors are
added shard by shard so an index can be built from memory-mapped shards without first concatenating them.

GPU: with faiss-gpu and at least one visible GPU, :func:`to_gpu` moves a flat index to every GPU with
``index_cpu_to_all_gpus`` — ``useFloat16`` halves memory (wiki-18 e5-base: 64 GB fp32 → 32 GB fp16) and
``shard=True`` splits the rows across GPUs instead of replicating them. Faiss has no GPU HNSW, so HNSW
stays on the CPU. faiss-cpu builds expose ``get_num_gpus() == 0`` and everything stays on the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from searchenv.retrievers.index_store import replacing

__all__ = [
    "IndexKind",
    "add_vectors",
    "flat_vectors",
    "gpu_count",
    "index_kind",
    "new_index",
    "read_index",
    "to_gpu",
    "write_index",
]

IndexKind = Literal["exact", "hnsw", "ivfpq"]


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise ImportError(
            "dense retrieval needs faiss: pip install 'searchenv[dense]' (faiss-cpu or faiss-gpu)"
        ) from None
    return faiss


def new_index(kind: IndexKind, dim: int, *, m: int = 64, ef_construction: int = 40) -> Any:
    """An empty inner-product index of the given kind."""
    faiss = _faiss()
    if kind == "exact":
        return faiss.IndexFlatIP(dim)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, int(m), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(ef_construction)
        return index
    raise ValueError(f"unknown index kind {kind!r}; expected 'exact' or 'hnsw'")


def index_kind(index: Any) -> str:
    """``"exact"`` for a flat inner-product index, ``"hnsw"`` for an HNSW one, else the faiss class name."""
    faiss = _faiss()
    if isinstance(index, faiss.IndexFlat) and index.metric_type == faiss.METRIC_INNER_PRODUCT:
        return "exact"
    if isinstance(index, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(index, faiss.IndexIVFPQ):
        return "ivfpq"
    return type(index).__name__


def add_vectors(index: Any, shards: Iterable[np.ndarray], *, total: int | None = None, progress: bool = True) -> Any:
    """Add float32 row blocks to ``index`` in order (row ``i`` of the concatenation gets id ``i``)."""
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=f"indexing ({type(index).__name__})", unit="vec", disable=not progress) as bar:
        for shard in shards:
            index.add(np.ascontiguousarray(shard, dtype=np.float32))
            bar.update(len(shard))
    return index


def read_index(path: str | os.PathLike[str], *, mmap: bool = False) -> Any:
    """Read a faiss file; ``mmap=True`` maps a flat index's vectors from disk instead of copying them into RAM.

    A memory-mapped flat index costs no RAM of its own (the page cache holds what searches touch), opens in
    milliseconds whatever its size — so its dimension and row count can be checked before a long load — and
    serves exact search from disk on machines whose RAM it exceeds.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"faiss index file not found: {path}")
    faiss = _faiss()
    if mmap:
        try:
            return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError:  # index types whose storage faiss cannot map: read them whole
            pass
    try:
        return faiss.read_index(str(path))
    except RuntimeError as exc:
        raise ValueError(f"{path} is not a readable faiss index ({str(exc).splitlines()[0]})") from None


def flat_vectors(index: Any) -> np.ndarray:
    """The ``ntotal × d`` float32 rows of a flat index as a numpy view (no copy; memory-mapped if the index is)."""
    faiss = _faiss()
    flat = faiss.downcast_index(index)
    if not isinstance(flat, faiss.IndexFlat):
        raise ValueError(f"expected a flat faiss index, got {type(flat).__name__}")
    return faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(flat.ntotal, flat.d)


def write_index(index: Any, path: str | os.PathLike[str]) -> None:
    """Write atomically (temporary file, then rename) so a kill never leaves a truncated index behind."""
    with replacing(path) as tmp:
        _faiss().write_index(index, str(tmp))


def gpu_count() -> int:
    """Number of GPUs faiss can use (0 with faiss-cpu)."""
    faiss = _faiss()
    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def to_gpu(index: Any, *, fp16: bool = True, shard: bool = True) -> Any:
    """Move a flat index onto all visible GPUs (fp16 storage, rows sharded across GPUs).

    Returns ``index`` unchanged when no GPU is usable or the index is not flat (faiss has no GPU HNSW).
    """
    faiss = _faiss()
    if gpu_count() == 0 or index_kind(index) != "exact" or not hasattr(faiss, "index_cpu_to_all_gpus"):
        return index
    options = faiss.GpuMultipleClonerOptions()
    options.useFloat16 = bool(fp16)
    options.shard = bool(shard)
    return faiss.index_cpu_to_all_gpus(index, co=options)
