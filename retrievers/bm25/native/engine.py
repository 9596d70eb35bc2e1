"""Searching a native index: memory-mapped block postings, scored by a numba MaxScore kernel, exact top ``k``.

Searching memory-maps the index, its term dictionary included (:mod:`.term_lookup`). Per query, terms run from
the highest score bound (rare terms) down; once the bounds of the terms left add up to less than the current
``k``-th best score, no passage holding only those terms can still reach the top ``k``, so only the remaining
(essential) lists are walked and the long, common-term lists are probed for the surviving candidates, skipping
every block that holds none (MaxScore with block skipping; results stay exact). A small index, where no list is
long enough for skipping to pay, is searched term at a time instead (:mod:`.term_at_a_time`), with the same
impacts, heap and ties (:mod:`.heap`). Batches run in threads over the queries (the kernels release the GIL). Terms
come from
:class:`~searchenv.retrievers.bm25.analyzer.EnglishAnalyzer` (a copy of Anserini's analyzer) and scores follow
Lucene's arithmetic (:mod:`.index_format`). Ties go to the lower position.
"""

from __future__ import annotations

import collections
import itertools
import json
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from numba import njit

from searchenv.retrievers.bm25.analyzer import EnglishAnalyzer
from searchenv.retrievers.bm25.native.compile_notice import announce_compiles
from searchenv.retrievers.bm25.native.heap import heap_push, pop_best_first
from searchenv.retrievers.bm25.native.index_format import ARRAY_FILES
from searchenv.retrievers.bm25.native.postings import BLOCK, decode_block, impact
from searchenv.retrievers.bm25.native.term_at_a_time import TERM_AT_A_TIME_POSTINGS, decode_all, term_at_a_time_kernel
from searchenv.retrievers.bm25.native.term_lookup import TermTable

announce_compiles()  # one line on stderr while numba compiles the kernels (the first run after installing)

__all__ = ["JOBS_PER_THREAD", "MIN_QUERIES_PER_JOB", "SEED_FROM_BLOCKS", "NativeEngine"]


_SLACK = 1.0 + 1e-6  # float rounding margin: prune only when a bound is clearly below the cut-off
_END = 2**62  # the current document of an exhausted cursor
_SEEDS = 64  # passages scored up front to start the cut-off high
# Seeding probes every term at each seed, which decodes most blocks of a short query, and the walk decodes them
# again. Below this many blocks in all (65k postings) the seed costs more than it saves: without it, single-query
# kernel time on union.jsonl (≤ 128 blocks) falls 59 → 20 µs and a 1M-passage index is unchanged at ≤ 1,024
# blocks; at 21M (queries of 4k–1M blocks) the seed is worth 2.5–100× and stays.
SEED_FROM_BLOCKS = 512

# A batched search cuts its queries into jobs of consecutive queries, which the threads (the caller's among them)
# take from a shared queue as they come free. Query costs differ by 50× (p50 0.1 ms, p99 5.5 ms on the 1M world), so
# the fixed split this replaced (every second query to each of 2 threads) left one thread finishing alone, with
# 60 % of the work on the 1M world. About 32 jobs a thread keep them busy to the end; a job costs ~1.5 µs to take
# and call, so 2 queries a job are enough even beside union-sized queries (20 µs).
JOBS_PER_THREAD = 32
MIN_QUERIES_PER_JOB = 2


def _job_size(num_queries: int, threads: int) -> int:
    """Queries per job of a batched search over ``threads`` threads (all of them in one job for one thread)."""
    if threads <= 1:
        return max(1, num_queries)
    return max(MIN_QUERIES_PER_JOB, -(-num_queries // (threads * JOBS_PER_THREAD)))


@njit(cache=True)
def _seed_cutoff(
    data, term_blocks, block_last, block_offset, idf, norms, norm_cache, terms, weights, k, seed_from_blocks
):  # pragma: no cover
    """A lower bound on the final ``k``-th best score: the ``k``-th best exact score among the first passages of
    the highest-bound terms (``terms`` ascending by bound). Starting the document-at-a-time walk with it makes
    most common terms non-essential from the first document instead of after a long warm-up. ``-1`` (no bound)
    for a query of at most ``seed_from_blocks`` blocks, or with fewer than ``k`` seeds."""
    blocks = 0
    for j in range(terms.shape[0]):
        blocks += term_blocks[terms[j] + 1] - term_blocks[terms[j]]
    if blocks <= seed_from_blocks:
        return -1.0
    docs = np.empty(BLOCK, np.int64)
    tfs = np.empty(BLOCK, np.int64)
    seeds = np.empty(_SEEDS + BLOCK, np.int64)
    count = 0
    for j in range(terms.shape[0] - 1, -1, -1):
        blk, end = term_blocks[terms[j]], term_blocks[terms[j] + 1]
        previous = -1
        while blk < end and count < _SEEDS:
            m = decode_block(data, block_offset[blk], previous, docs, tfs)
            previous = docs[m - 1]
            seeds[count : count + m] = docs[:m]
            count += m
            blk += 1
        if count >= _SEEDS:
            break
    seeds = np.unique(seeds[:count])
    if seeds.shape[0] < k:
        return -1.0
    scores = np.zeros(seeds.shape[0])
    for j in range(terms.shape[0]):
        t = terms[j]
        w = idf[t]
        blk, end = term_blocks[t], term_blocks[t + 1]
        decoded = -1
        m = 0
        pos = 0
        for c in range(seeds.shape[0]):
            d = seeds[c]
            while blk < end and block_last[blk] < d:
                blk += 1
            if blk >= end:
                break
            if decoded != blk:
                m = decode_block(
                    data, block_offset[blk], block_last[blk - 1] if blk > term_blocks[t] else -1, docs, tfs
                )
                decoded = blk
                pos = 0
            while docs[pos] < d:
                pos += 1
            if docs[pos] == d:
                scores[c] += weights[j] * impact(w, tfs[pos], norm_cache[norms[d]])
    ranked = np.sort(scores.astype(np.float32))
    return np.float64(ranked[ranked.shape[0] - k])


@njit(cache=True, inline="always")
def _load(
    data, block_offset, block_last, term_start, j, blk, docs, tfs, counts, positions, current
):  # pragma: no cover
    """Decode block ``blk`` into cursor ``j``'s buffer and point the cursor at its first posting."""
    previous = block_last[blk - 1] if blk > term_start[j] else -1
    counts[j] = decode_block(data, block_offset[blk], previous, docs[j], tfs[j])
    positions[j] = 0
    current[j] = docs[j, 0]


@njit(nogil=True, cache=True)
def _search_kernel(
    data,
    term_blocks,
    block_last,
    block_offset,
    block_max,
    idf,
    norms,
    norm_cache,
    term_max,
    qptr,
    qterms,
    qweights,
    k,
    seed_from_blocks,
    start,
    stop,
    out_docs,
    out_scores,
    out_found,
):  # pragma: no cover - jit
    """Exact top-``k`` for queries ``start`` to ``stop - 1``: document-at-a-time MaxScore over the block postings.

    Terms are ordered by their score bound. Once ``k`` hits are held, the terms whose bounds add up to less than
    the ``k``-th best score are *non-essential*: a passage that has none of the other (essential) terms cannot
    enter the top ``k``, so only the essential lists are walked, and the non-essential ones are probed for each
    candidate — skipping whole blocks by their last document, and giving up on a candidate as soon as its score
    so far plus what the remaining terms (by their block maxima) could add falls below the cut-off. The rare
    terms of a question are essential and the long lists of common words mostly are not, so most of the long
    lists is never decoded. A query of more than ``seed_from_blocks`` blocks starts from :func:`_seed_cutoff`'s
    bound instead of from nothing.
    """
    heap_scores = np.empty(k, np.float32)
    heap_docs = np.empty(k, np.int64)
    for q in range(start, stop):
        first, n = qptr[q], qptr[q + 1] - qptr[q]
        if n == 0:
            continue
        bounds = np.empty(n)
        for j in range(n):
            bounds[j] = qweights[first + j] * term_max[qterms[first + j]]
        order = np.argsort(bounds)  # ascending: cursor j has the j-th smallest bound
        terms = np.empty(n, np.int64)
        weights = np.empty(n)
        below = np.zeros(n + 1)  # below[j]: the most cursors 0..j-1 together can add
        for j in range(n):
            terms[j] = qterms[first + order[j]]
            weights[j] = qweights[first + order[j]]
            below[j + 1] = below[j] + bounds[order[j]]
        term_start = np.empty(n, np.int64)
        block = np.empty(n, np.int64)
        block_end = np.empty(n, np.int64)
        docs = np.empty((n, BLOCK), np.int64)
        tfs = np.empty((n, BLOCK), np.int64)
        counts = np.zeros(n, np.int64)
        positions = np.zeros(n, np.int64)
        current = np.empty(n, np.int64)
        for j in range(n):
            term_start[j] = term_blocks[terms[j]]
            block[j] = term_start[j]
            block_end[j] = term_blocks[terms[j] + 1]
            _load(data, block_offset, block_last, term_start, j, block[j], docs, tfs, counts, positions, current)
        size = 0
        seeded = _seed_cutoff(
            data, term_blocks, block_last, block_offset, idf, norms, norm_cache, terms, weights, k, seed_from_blocks
        )
        cutoff = seeded
        essential = 0  # cursors essential..n-1 are essential
        while essential < n and below[essential + 1] * _SLACK < cutoff:
            essential += 1
        while True:
            d = _END
            for j in range(essential, n):
                d = min(d, current[j])
            if d == _END:
                break
            score = 0.0
            for j in range(essential, n):
                if current[j] == d:
                    p = positions[j]
                    w = idf[terms[j]]
                    score += weights[j] * impact(w, tfs[j, p], norm_cache[norms[d]])
                    if p + 1 < counts[j]:
                        positions[j] = p + 1
                        current[j] = docs[j, p + 1]
                    elif block[j] + 1 < block_end[j]:
                        block[j] += 1
                        _load(
                            data,
                            block_offset,
                            block_last,
                            term_start,
                            j,
                            block[j],
                            docs,
                            tfs,
                            counts,
                            positions,
                            current,
                        )
                    else:
                        current[j] = _END
            alive = True
            for j in range(essential - 1, -1, -1):
                if (score + below[j + 1]) * _SLACK < cutoff:
                    alive = False
                    break
                if current[j] < d:  # advance cursor j to its first posting >= d
                    if block_last[block[j]] < d:
                        blk = block[j] + 1
                        while blk < block_end[j] and block_last[blk] < d:
                            blk += 1
                        if blk == block_end[j]:
                            block[j] = blk - 1
                            current[j] = _END
                            continue
                        block[j] = blk
                        # The block holding d (if it does) cannot lift the candidate enough: drop it undecoded.
                        if (score + weights[j] * block_max[blk] + below[j]) * _SLACK < cutoff:
                            current[j] = -1  # not decoded: the next probe decodes it
                            positions[j] = -1
                            alive = False
                            break
                        _load(data, block_offset, block_last, term_start, j, blk, docs, tfs, counts, positions, current)
                    elif positions[j] < 0:  # the block was skipped undecoded above
                        _load(
                            data,
                            block_offset,
                            block_last,
                            term_start,
                            j,
                            block[j],
                            docs,
                            tfs,
                            counts,
                            positions,
                            current,
                        )
                    p = positions[j]
                    while docs[j, p] < d:
                        p += 1
                    positions[j] = p
                    current[j] = docs[j, p]
                if current[j] == d:
                    w = idf[terms[j]]
                    p = positions[j]
                    score += weights[j] * impact(w, tfs[j, p], norm_cache[norms[d]])
            if not alive:
                continue
            if score * _SLACK < cutoff:
                continue
            if size < k or np.float32(score) > heap_scores[0]:  # a later document loses a tie
                size = heap_push(heap_scores, heap_docs, size, k, np.float32(score), d)
                if size == k:
                    cutoff = max(seeded, np.float64(heap_scores[0]))
                    while essential < n and below[essential + 1] * _SLACK < cutoff:
                        essential += 1
        out_found[q] = size
        pop_best_first(heap_scores, heap_docs, size, out_docs[q], out_scores[q])


class NativeEngine:
    """The ``native`` engine over an index directory written by :func:`~.build.build_native_index` (memory-mapped)."""

    def __init__(self, directory: str | Path, threads: int, scratch: tempfile.TemporaryDirectory | None = None):
        directory = Path(directory)
        self.directory = directory
        meta_path = directory / "native.json"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            arrays = {name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in ARRAY_FILES}
            data = np.memmap(directory / "postings.bin", dtype=np.uint8, mode="r")
            terms = TermTable(directory, int(meta["terms"]))
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(
                f"{directory} is not a complete native BM25 index ({exc}); delete it (or pass rebuild=True) and "
                "build it again"
            ) from None
        self.num_docs = int(meta["num_docs"])
        self.k1, self.b = float(meta["k1"]), float(meta["b"])
        consistent = (
            len(terms) == len(arrays["idf"]) == len(arrays["term_blocks"]) - 1
            and len(arrays["norms"]) == self.num_docs
            and int(arrays["block_offset"][-1]) == len(data)
            and int(arrays["term_blocks"][-1]) == len(arrays["block_max"]) == len(arrays["block_offset"]) - 1
        )
        if not consistent:
            raise ValueError(f"{directory} holds a corrupt native BM25 index (its files disagree in size); rebuild it")
        self.analyzer = EnglishAnalyzer()
        self.terms = terms
        self._arrays = tuple(  # plain ndarray views of the maps: numba types an np.memmap argument on a slow path
            np.asarray(array)
            for array in (
                data,
                arrays["term_blocks"],
                arrays["block_last"],
                arrays["block_offset"],
                arrays["block_max"],
                arrays["idf"],
                arrays["norms"],
                arrays["norm_cache"],
                # each term's score bound: its highest block maximum (every term has at least one block)
                np.maximum.reduceat(arrays["block_max"], arrays["term_blocks"][:-1])
                if len(terms)
                else np.zeros(0, np.float32),
            )
        )
        self.threads = max(1, int(threads))
        self.seed_from_blocks = SEED_FROM_BLOCKS  # queries of more blocks start from a seeded cut-off
        # A small index is searched term at a time over all its postings, decoded on the first search
        # (:mod:`.term_at_a_time`); the build records how many postings it wrote.
        self.term_at_a_time = int(meta["postings"]) <= TERM_AT_A_TIME_POSTINGS
        self._decoded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.scratch = scratch  # the temporary directory of an in-memory build, removed with the engine
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the helper threads of batched search; a later search starts them again.

        The index stays mapped: its pages belong to the page cache, and an in-memory build's scratch folder goes
        with the engine.
        """
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def search(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-``k`` (positions, scores) per query, best first; only passages sharing a term with the query."""
        k = max(1, min(int(k), self.num_docs))
        count = len(queries)
        out_docs = np.full((count, k), -1, dtype=np.int64)
        out_scores = np.zeros((count, k), dtype=np.float32)
        out_found = np.zeros(count, dtype=np.int64)  # the kernel's count of hits per query
        terms = self._query_terms(queries)
        decoded = self._decoded_postings() if self.term_at_a_time else None
        if decoded is not None:
            kernel, arguments = term_at_a_time_kernel, (*decoded, self.num_docs, *terms, k)
        else:
            kernel, arguments = _search_kernel, (*self._arrays, *terms, k, self.seed_from_blocks)
        size = _job_size(count, self.threads)
        if size >= count:  # one job: no hand-off (a single query, or one thread)
            kernel(*arguments, 0, count, out_docs, out_scores, out_found)
        else:
            self._run_jobs_in_threads(kernel, arguments, count, size, out_docs, out_scores, out_found)
        return [(out_docs[i, :n], out_scores[i, :n]) for i, n in enumerate(out_found.tolist())]

    def _query_terms(self, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kernel's view of ``queries``: term ids and weights of query ``q`` at ``qptr[q]:qptr[q + 1]``."""
        analysed = self.analyzer.analyze_many(queries)
        ids = iter(self.terms.ids([term for terms in analysed for term in terms]))  # all looked up at once
        qptr = [0]
        qterms: list[int] = []
        qweights: list[float] = []
        for terms in analysed:
            weights: dict[int, float] = {}
            for tid in itertools.islice(ids, len(terms)):
                if tid >= 0:
                    weights[tid] = weights.get(tid, 0.0) + 1.0  # Anserini boosts a repeated term by its count
            qterms.extend(weights)
            qweights.extend(weights.values())
            qptr.append(len(qterms))
        return (
            np.asarray(qptr, dtype=np.int64),
            np.asarray(qterms, dtype=np.int64),
            np.asarray(qweights, dtype=np.float64),
        )

    def _decoded_postings(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Every posting with its impact, decoded once (two threads' first searches may both decode: harmless)."""
        if self._decoded is None:
            data, term_blocks, _, block_offset, _, idf, norms, norm_cache, _ = self._arrays
            decoded = decode_all(data, term_blocks, block_offset, idf, norms, norm_cache)
            if len(decoded[2]) and not decoded[2].min() > 0:  # the kernel's "not yet touched" test needs them > 0
                self.term_at_a_time = False
                return None
            self._decoded = decoded
        return self._decoded

    def _run_jobs_in_threads(self, kernel, arguments, count, size, out_docs, out_scores, out_found) -> None:
        """Run the batch's jobs on this thread and the helper threads, each taking the next job as it comes free."""
        pending = collections.deque(range(0, count, size))  # job starts; popleft is thread-safe

        def run_jobs() -> None:
            while pending:
                try:
                    start = pending.popleft()
                except IndexError:  # another thread took the last job
                    return
                kernel(*arguments, start, min(start + size, count), out_docs, out_scores, out_found)

        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads - 1, thread_name_prefix="bm25-native")
        helpers = [self._pool.submit(run_jobs) for _ in range(min(self.threads, len(pending)) - 1)]
        run_jobs()
        for helper in helpers:
            helper.result()
