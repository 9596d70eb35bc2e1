"""The *Random* engine of the search-engine study: passages drawn regardless of relevance."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from searchenv.types import Corpus, Passage

__all__ = ["RandomRetriever"]


class RandomRetriever:
    """Returns ``k`` distinct random passages per query.

    The draw is a pure function of ``(seed, query)``: the same query always gets the same passages, in any
    batch and any order, so seeded episodes replay exactly and no hidden call counter leaks between
    episodes. Scores are 0.0 — this engine has no notion of relevance.
    """

    name = "random"

    def __init__(self, corpus: Corpus, seed: int = 0):
        if len(corpus) == 0:
            raise ValueError("RandomRetriever needs a non-empty corpus")
        self.corpus = corpus
        self.seed = int(seed)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        k = min(int(k), len(self.corpus))
        results = []
        for query in queries:
            digest = hashlib.blake2b(f"{self.seed}\x00{query}".encode(), digest_size=8).digest()
            rng = np.random.default_rng(int.from_bytes(digest, "little"))
            positions = rng.choice(len(self.corpus), size=k, replace=False)
            results.append([self.corpus.passage(int(i)) for i in positions])
        return results
