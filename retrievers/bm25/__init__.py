"""``retriever="bm25"``: one retriever (:mod:`.retriever`) over a choice of engines — the native engine
(:mod:`.native`), Lucene through pyserini (:mod:`.lucene`), bm25s and rank-bm25 (:mod:`.python_engines`) — that
all see the same terms (:mod:`.analyzer`, a JVM-free copy of Anserini's English analyzer)."""

from searchenv.retrievers.bm25.retriever import BM25Retriever

__all__ = ["BM25Retriever"]
