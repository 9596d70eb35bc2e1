"""Small indexes, scored term at a time: every posting decoded once, on the first search, beside its impact.

Why two ways to search one index: the MaxScore walk of :mod:`.search` wins by *not* reading most of a long list,
and in a small corpus no list is long. On ``union.jsonl`` (19.6k passages) a query reads ~23 blocks and scores
~700 candidates, yet the walk's per-document bookkeeping (the smallest cursor, the probes, the bounds) cost
55 µs a query, while bm25s, which only adds ready-made scores into one accumulator, took 45 µs. So an index of at
most :data:`TERM_AT_A_TIME_POSTINGS` postings is decoded whole on its first search (8 bytes a posting: the passage
as int32 and Lucene's float32 impact), and a query adds each of its terms' impacts into one accumulator per passage,
then keeps the top ``k`` with the walk's heap and tie rule (the lower position wins a tie). Impacts come from
:func:`.postings.impact`, the rule the index's block bounds were written with; a passage's score is the same
float32 impacts summed in double, so both ways agree (``tests/test_bm25.py`` checks it on 300 NQ questions).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from searchenv.retrievers.bm25.native.heap import heap_push, pop_best_first
from searchenv.retrievers.bm25.native.postings import BLOCK, decode_block, impact

__all__ = ["TERM_AT_A_TIME_POSTINGS", "decode_all", "term_at_a_time_kernel"]

#: Indexes of at most this many postings (16 MB decoded; ~40k Wikipedia passages) are searched term at a time.
#: Measured per query, one thread (docs/benchmarks.md): on union.jsonl (19.6k Wikipedia passages, 0.95M postings,
#: NQ questions) term at a time is 1.4-2.3x faster than the walk in every band of query length; on the generated
#: world, whose templated passages let the walk prune early, it is even with the walk at 20k passages (1.2M
#: postings) and 0.5-0.8x from 40k (2.3M) up, where the walk's skipping pays.
TERM_AT_A_TIME_POSTINGS = 2_000_000


@njit(cache=True)
def decode_all(data, term_blocks, block_offset, idf, norms, norm_cache):  # pragma: no cover - jit
    """Every posting of the index: term ``t`` owns ``docs[starts[t]:starts[t + 1]]`` (ascending) and their impacts."""
    num_terms = term_blocks.shape[0] - 1
    num_blocks = block_offset.shape[0] - 1
    total = 0
    for blk in range(num_blocks):
        total += np.int64(data[block_offset[blk] + 2]) + 1  # a block header's third byte: count - 1
    starts = np.empty(num_terms + 1, np.int64)
    docs = np.empty(total, np.int32)
    impacts = np.empty(total, np.float32)
    block_docs = np.empty(BLOCK, np.int64)
    block_tfs = np.empty(BLOCK, np.int64)
    at = 0
    for t in range(num_terms):
        starts[t] = at
        w = idf[t]
        previous = -1
        for blk in range(term_blocks[t], term_blocks[t + 1]):
            m = decode_block(data, block_offset[blk], previous, block_docs, block_tfs)
            previous = block_docs[m - 1]
            for i in range(m):
                d = block_docs[i]
                docs[at] = d
                impacts[at] = impact(w, block_tfs[i], norm_cache[norms[d]])
                at += 1
    starts[num_terms] = at
    return starts, docs, impacts


@njit(nogil=True, cache=True)
def term_at_a_time_kernel(
    starts, docs, impacts, num_docs, qptr, qterms, qweights, k, start, stop, out_docs, out_scores, out_found
):  # pragma: no cover - jit
    """Exact top-``k`` for queries ``start`` to ``stop - 1`` over :func:`decode_all`'s arrays.

    The accumulator is kept between queries: only the passages a query touched are read back and reset. A
    passage is new to the query while its sum is 0, which needs every impact positive (:func:`decode_all`'s
    caller checks); the test is folded into the count rather than branched on, which halves the kernel's time
    (branches on random passages mispredict)."""
    scores = np.zeros(num_docs)
    touched = np.empty(num_docs + 1, np.int64)  # each posting is written at the end, kept only if new
    heap_scores = np.empty(k, np.float32)
    heap_docs = np.empty(k, np.int64)
    for q in range(start, stop):
        count = 0
        for j in range(qptr[q], qptr[q + 1]):
            t = qterms[j]
            weight = qweights[j]
            for p in range(starts[t], starts[t + 1]):
                d = docs[p]
                touched[count] = d
                count += scores[d] == 0.0
                scores[d] += weight * impacts[p]
        size = 0
        for i in range(count):
            d = touched[i]
            s = np.float32(scores[d])
            scores[d] = 0.0
            if size < k or s > heap_scores[0] or (s == heap_scores[0] and d < heap_docs[0]):
                size = heap_push(heap_scores, heap_docs, size, k, s, d)
        out_found[q] = size
        pop_best_first(heap_scores, heap_docs, size, out_docs[q], out_scores[q])
