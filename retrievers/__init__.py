"""Search backends behind one contract: ``search(queries, k) -> list[list[Passage]]``.

:func:`make_retriever` turns a name (``"random"``, ``"bm25"``, ``"e5-exact"``, ``"e5-hnsw"``, ``"e5-ivfpq"``) or a
URL of a running retrieval service into a retriever over a corpus. Engines are imported only when asked for,
so ``import searchenv`` never pulls in torch, faiss or a JVM.
"""

from __future__ import annotations

import importlib
from typing import Any

from searchenv.types import Corpus, Retriever

__all__ = ["RETRIEVERS", "make_retriever"]

#: name → "module:factory"; a factory is called as ``factory(corpus, **options)``.
RETRIEVERS: dict[str, str] = {
    "random": "searchenv.retrievers.random_retriever:RandomRetriever",
    "bm25": "searchenv.retrievers.bm25:BM25Retriever",
    "e5-exact": "searchenv.retrievers.dense:exact_retriever",
    "e5-hnsw": "searchenv.retrievers.dense:hnsw_retriever",
    "e5-ivfpq": "searchenv.retrievers.dense:ivfpq_retriever",
}


def make_retriever(spec: str | Retriever, corpus: Corpus | None = None, **options: Any) -> Retriever:
    """Build a retriever from a name, a service URL, or pass a ready retriever object through.

    Args:
        spec: a name from :data:`RETRIEVERS`, an ``http(s)://`` URL of a ``/retrieve`` service, or any object
            with a ``search(queries, k)`` method.
        corpus: the passages to search (not needed for a URL or a ready object).
        **options: engine options (``seed`` for ``random``, ``engine``/``index_dir`` for ``bm25``, …).
    """
    if not isinstance(spec, str):
        if isinstance(spec, Retriever):
            return spec
        raise TypeError(f"retriever must be a name, a URL or an object with search(queries, k); got {type(spec)!r}")
    if spec.startswith(("http://", "https://")):
        from searchenv.retrievers.remote import RemoteRetriever

        return RemoteRetriever(spec, **options)
    try:
        target = RETRIEVERS[spec]
    except KeyError:
        raise ValueError(
            f"unknown retriever {spec!r}; choose one of {sorted(RETRIEVERS)}, an http(s):// URL of a "
            "retrieval server, or an object with search(queries, k)"
        ) from None
    if corpus is None:
        raise ValueError(f"retriever {spec!r} needs a corpus to search")
    module_name, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(corpus, **options)
