"""The *Random* engine of the search-engine study: passages drawn regardless of relevance."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from searchenv.corpus import Corpus
from searchenv.types import Passage

__all__ = ["RandomRetriever"]

#: Positions are drawn this many at a time; a fixed chunk keeps the random stream the same whatever ``k`` is.
_DRAW = 16


class RandomRetriever:
    """Returns ``k`` distinct random passages per query.

    The ranking is a pure function of ``(seed, query)``: the same query gets the same passages in any batch
    and any order, and the top ``j`` passages are the same whatever ``k >= j`` is asked for (a study that
    searches once at ``max(k)`` scores recall@1 exactly as a search at ``k=1`` would). No hidden call
    counter leaks between episodes. Scores are 0.0 — this engine has no notion of relevance.
    """

    name = "random"
    compute_only = True  # see Retriever: a server may run a quick call on its event loop

    def __init__(self, corpus: Corpus, seed: int = 0):
        if len(corpus) == 0:
            raise ValueError("RandomRetriever needs a non-empty corpus")
        self.corpus = corpus
        self.seed = int(seed)

    def _ranking(self, query: str, k: int) -> list[int]:
        """The first ``k`` positions of this query's random ranking: uniform draws, duplicates skipped."""
        digest = hashlib.blake2b(f"{self.seed}\x00{query}".encode(), digest_size=8).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        chosen: dict[int, None] = {}
        while len(chosen) < k:
            for position in rng.integers(len(self.corpus), size=_DRAW).tolist():
                chosen.setdefault(position)
                if len(chosen) == k:
                    break
        return list(chosen)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        k = min(int(k), len(self.corpus))
        return [[self.corpus.passage(i) for i in self._ranking(query, k)] for query in queries]
