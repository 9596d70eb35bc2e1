"""The native BM25 engine, and its front: :func:`build`, :func:`open`, :func:`search` and :func:`shard`.

Code outside this package — the BM25 retriever (:mod:`searchenv.retrievers.bm25.retriever`), the sharded Ray Serve
deployment (:mod:`searchenv.retrievers.server.ray_serve`) — goes through these four functions and
:data:`FORMAT_VERSION`, not into the modules behind them: bit-packed block postings on disk (:mod:`.postings`) in
the layout of :mod:`.index_format`, built in bounded memory by worker processes (:mod:`.token_table`,
:mod:`.segments`, :mod:`.builder`) and searched by numba MaxScore kernels (:mod:`.engine`, and
:mod:`.term_at_a_time` for small indexes) through a memory-mapped term dictionary (:mod:`.term_lookup`). Each
function imports what it needs when called, so importing the package loads no compiled code.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from searchenv.corpus import Corpus
    from searchenv.retrievers.bm25.native.engine import NativeEngine

__all__ = ["FORMAT_VERSION", "build", "open", "search", "shard"]


def __getattr__(name: str) -> Any:
    if name == "FORMAT_VERSION":  # the on-disk layout's version, recorded in the index manifest
        from searchenv.retrievers.bm25.native.index_format import FORMAT_VERSION

        return FORMAT_VERSION
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build(
    passages: Corpus | Iterable[str],
    directory: str | Path,
    *,
    k1: float,
    b: float,
    threads: int = 1,
    segment_docs: int | None = None,
    num_docs: int | None = None,
    show_progress: bool = True,
) -> int:
    """Build an index of ``passages`` (a corpus, or its search texts in order) into ``directory``; returns the
    passage count. Memory stays bounded by ``segment_docs`` passages per worker, whatever the corpus size."""
    from searchenv.retrievers.bm25.native.builder import DEFAULT_SEGMENT_DOCS, build_native_index

    return build_native_index(
        passages,
        directory,
        k1,
        b,
        workers=threads,
        segment_docs=segment_docs or DEFAULT_SEGMENT_DOCS,
        num_docs=num_docs,
        show_progress=show_progress,
    )


def open(  # noqa: A001 - the front's verb, as bm25s's ``load``
    directory: str | Path, *, threads: int = 1, scratch: tempfile.TemporaryDirectory | None = None
) -> NativeEngine:
    """The engine over a built index, memory-mapped; ``scratch`` is a temporary directory the engine owns (removed
    with it), for an index built only for this process."""
    from searchenv.retrievers.bm25.native.engine import NativeEngine

    return NativeEngine(directory, threads, scratch=scratch)


def search(engine: NativeEngine, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The top-``k`` ``(positions, scores)`` of each query, best first (ties: the lower position first); only
    passages that share a term with the query."""
    return engine.search(queries, k)


def shard(
    whole: str | Path,
    texts: Iterable[str],
    num_docs: int,
    directory: str | Path | None = None,
    *,
    threads: int = 1,
) -> NativeEngine:
    """An index of a part of a corpus (``texts``, ``num_docs`` of them) scored exactly as the ``whole`` index
    scores those passages: built with the whole index's collection statistics and BM25 parameters, so idf, length
    norms and block bounds are the whole's while the shard holds only its own postings. ``directory=None`` builds
    into a temporary directory the engine owns."""
    from searchenv.retrievers.bm25.native.builder import build_native_index
    from searchenv.retrievers.bm25.native.index_format import CollectionStats

    whole_engine = open(whole)
    scratch = None if directory is not None else tempfile.TemporaryDirectory(prefix="searchenv-shard-")
    target = Path(scratch.name if scratch is not None else directory)  # type: ignore[arg-type]
    build_native_index(
        texts,
        target,
        whole_engine.k1,
        whole_engine.b,
        num_docs=num_docs,
        show_progress=False,
        collection=CollectionStats.of_index(whole),
    )
    return open(target, threads=threads, scratch=scratch)
