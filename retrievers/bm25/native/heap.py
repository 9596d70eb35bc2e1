"""The top-``k`` heap both ways of searching keep: a min-heap whose root is the *worst* hit held.

One tie rule for every search of a native index: a lower score loses, and between equal scores the higher
position loses (Lucene's order). Hits leave the heap best first.
"""

from __future__ import annotations

from numba import njit

__all__ = ["heap_push", "pop_best_first", "sift_down"]


@njit(cache=True)
def sift_down(scores, docs, i, size):  # pragma: no cover - jit
    """Restore a min-heap whose root is the *worst* hit: lowest score, then highest position."""
    while True:
        child = 2 * i + 1
        if child >= size:
            return
        right = child + 1
        if right < size and (
            scores[right] < scores[child] or (scores[right] == scores[child] and docs[right] > docs[child])
        ):
            child = right
        if scores[child] < scores[i] or (scores[child] == scores[i] and docs[child] > docs[i]):
            scores[i], scores[child] = scores[child], scores[i]
            docs[i], docs[child] = docs[child], docs[i]
            i = child
        else:
            return


@njit(cache=True)
def heap_push(scores, docs, size, k, s, d):  # pragma: no cover - jit
    """Offer hit (s, d) to a heap of at most ``k`` best hits; returns the new size."""
    if size < k:
        c = size
        scores[c] = s
        docs[c] = d
        while c > 0:
            parent = (c - 1) // 2
            if scores[c] < scores[parent] or (scores[c] == scores[parent] and docs[c] > docs[parent]):
                scores[c], scores[parent] = scores[parent], scores[c]
                docs[c], docs[parent] = docs[parent], docs[c]
                c = parent
            else:
                break
        return size + 1
    if s > scores[0] or (s == scores[0] and d < docs[0]):
        scores[0] = s
        docs[0] = d
        sift_down(scores, docs, 0, size)
    return size


@njit(cache=True)
def pop_best_first(scores, docs, size, row_docs, row_scores):  # pragma: no cover - jit
    """Empty a heap of ``size`` hits into ``row_docs``/``row_scores``, best first (worst popped into the tail)."""
    for r in range(size - 1, -1, -1):
        row_scores[r] = scores[0]
        row_docs[r] = docs[0]
        scores[0] = scores[r]
        docs[0] = docs[r]
        sift_down(scores, docs, 0, r)
