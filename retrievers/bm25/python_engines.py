"""The two pure-Python BM25 libraries as engines: ``bm25s`` and ``rank-bm25`` (the simple reference).

Both are fed the terms of :class:`~searchenv.retrievers.bm25.analyzer.EnglishAnalyzer` instead of their own
tokenisers, and are set to Lucene's BM25 variant, so that any disagreement with Lucene measures the engine and
not the text processing. bm25s supports that variant natively (``method="lucene"``); rank-bm25's ``BM25Okapi``
gets Lucene's idf (its own floors negative idf differently) and its scores are divided by ``k1 + 1``, a constant
factor Lucene dropped, so scores are on Lucene's scale. Neither rounds document lengths the way Lucene's norms do.
"""

from __future__ import annotations

import math
import pickle
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from searchenv.corpus import Corpus
from searchenv.retrievers.bm25.analyzer import EnglishAnalyzer

__all__ = ["Bm25sEngine", "RankBm25Engine", "analyse_corpus"]


def analyse_corpus(corpus: Corpus, analyzer: EnglishAnalyzer, desc: str, show_progress: bool) -> list[list[str]]:
    progress = tqdm(range(len(corpus)), desc=desc, unit="doc", disable=not show_progress)
    return [analyzer.analyze(corpus.search_text(i)) for i in progress]


def _top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best-first positions and scores of the ``k`` highest positive scores (ties: lower position first)."""
    k = min(k, len(scores))
    candidates = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = np.lexsort((candidates, -scores[candidates]))
    best = candidates[order]
    best = best[scores[best] > 0]
    return best.astype(np.int64), scores[best].astype(np.float32)


class Bm25sEngine:
    """bm25s with eager sparse scoring (its ``lucene`` method) over our analyzer's terms, run as its users run it:
    the numba backend with its own threaded ``retrieve(n_threads=...)`` (the numpy default is several times slower,
    and a comparison against it measured the wrong thing)."""

    def __init__(self, model, threads: int):
        self.model = model
        self.analyzer = EnglishAnalyzer()
        self.threads = threads

    @classmethod
    def build(cls, corpus: Corpus, k1: float, b: float, threads: int, show_progress: bool = True) -> Bm25sEngine:
        import bm25s

        terms = analyse_corpus(corpus, EnglishAnalyzer(), "bm25s: analysing", show_progress)
        model = bm25s.BM25(k1=k1, b=b, method="lucene", backend=_backend())
        model.index(terms, show_progress=show_progress)
        return cls(model, threads)

    def save(self, directory: Path) -> None:
        self.model.save(str(directory / "bm25s"), show_progress=False)

    @classmethod
    def load(cls, directory: Path, threads: int) -> Bm25sEngine:
        import bm25s

        path = str(directory / "bm25s")
        model = bm25s.BM25.load(path, mmap=True, show_progress=False, override_params={"backend": _backend()})
        return cls(model, threads)

    def search(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        vocab = self.model.vocab_dict
        token_ids = [[vocab[t] for t in self.analyzer.analyze(q) if t in vocab] for q in queries]
        results: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0, np.int64), np.empty(0, np.float32))] * len(queries)
        asked = [i for i, ids in enumerate(token_ids) if ids]
        if not asked:
            return results
        k = min(k, self.model.scores["num_docs"])
        docs, scores = self.model.retrieve(
            [token_ids[i] for i in asked], k=k, show_progress=False, n_threads=self.threads if len(asked) > 1 else 0
        )
        for row, i in enumerate(asked):
            keep = scores[row] > 0
            results[i] = (docs[row][keep].astype(np.int64), scores[row][keep].astype(np.float32))
        return results


def _backend() -> str:
    """bm25s's numba backend where numba is installed (the ``bm25`` extra brings it), else its numpy one."""
    import importlib.util

    return "numba" if importlib.util.find_spec("numba") is not None else "numpy"


class RankBm25Engine:
    """rank-bm25's ``BM25Okapi`` with Lucene's idf: slow (it scans every passage per query term) but obvious."""

    def __init__(self, model, k1: float):
        self.model = model
        self.analyzer = EnglishAnalyzer()
        self.scale = 1.0 / (k1 + 1.0)

    @classmethod
    def build(cls, corpus: Corpus, k1: float, b: float, show_progress: bool = True) -> RankBm25Engine:
        from rank_bm25 import BM25Okapi

        terms = analyse_corpus(corpus, EnglishAnalyzer(), "rank-bm25: analysing", show_progress)
        model = BM25Okapi(terms, k1=k1, b=b)
        doc_freq = Counter(term for doc in terms for term in set(doc))
        docs = sum(1 for doc in terms if doc)
        model.idf = {t: math.log(1.0 + (docs - n + 0.5) / (n + 0.5)) for t, n in doc_freq.items()}
        return cls(model, k1)

    def save(self, directory: Path) -> None:
        # Our own file in our own index directory; rank-bm25 has no format of its own.
        with open(directory / "rank_bm25.pkl", "wb") as handle:
            pickle.dump(self.model, handle, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def load(cls, directory: Path, k1: float) -> RankBm25Engine:
        with open(directory / "rank_bm25.pkl", "rb") as handle:
            return cls(pickle.load(handle), k1)

    def search(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        results = []
        for query in queries:
            terms = [t for t in self.analyzer.analyze(query) if t in self.model.idf]
            if not terms:
                results.append((np.empty(0, np.int64), np.empty(0, np.float32)))
                continue
            scores = np.asarray(self.model.get_scores(terms), dtype=np.float64) * self.scale
            results.append(_top_k(scores, k))
        return results
