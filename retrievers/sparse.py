"""``native``: a JVM-free BM25 engine — an impact-scored inverted index searched by a numba kernel.

Why it is fast: every posting stores its final BM25 contribution
(``idf · tf / (tf + k1 · (1 - b + b · dl / avgdl))``, computed once at build time), so a query is a sum of a few
posting lists into an accumulator followed by a heap top-k over the documents it touched, and MaxScore pruning
skips most of the long lists of common terms. The kernel keeps one accumulator per worker thread for the life
of the engine and runs the queries of a batch in parallel threads (it releases the GIL).

Why it agrees with Lucene: terms come from :class:`~searchenv.retrievers.analysis.EnglishAnalyzer` (a copy of
Anserini's analyzer), document lengths are rounded through Lucene's one-byte norm encoding (``SmallFloat``), each
term's score is computed in float32 in Lucene's operation order, and clause scores are summed in double — so
scores usually equal Lucene's to the last bit. Ties go to the lower corpus position.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import compress, repeat
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

try:
    from numba import njit
except ImportError:  # pragma: no cover - depends on the install
    raise ImportError("the native BM25 engine needs numba: pip install 'searchenv[bm25]'") from None

from searchenv.retrievers.analysis import EnglishAnalyzer
from searchenv.types import Corpus

__all__ = ["FORMAT_VERSION", "NativeEngine", "lucene_length"]

FORMAT_VERSION = "searchenv-native-1"
_CHUNK = 20_000  # passages analysed per vectorised step while building


def _int_to_4bit_float(value: np.ndarray) -> np.ndarray:
    """Lucene ``SmallFloat.longToInt4``: keep the 4 most significant bits and the shift."""
    value = value.astype(np.int64)
    bits = np.zeros_like(value)
    nz = value > 0
    bits[nz] = np.floor(np.log2(value[nz])).astype(np.int64) + 1
    shift = np.maximum(bits - 4, 0)
    normal = ((value >> shift) & 0x07) | ((shift + 1) << 3)
    return np.where(bits < 4, value, normal)


def _4bit_float_to_int(encoded: np.ndarray) -> np.ndarray:
    """Lucene ``SmallFloat.int4ToLong``."""
    mantissa = encoded & 0x07
    shift = (encoded >> 3) - 1
    return np.where(shift == -1, mantissa, (mantissa | 0x08) << np.maximum(shift, 0))


_FREE = 24  # SmallFloat.NUM_FREE_VALUES: lengths below it are stored exactly


def lucene_length(lengths: np.ndarray) -> np.ndarray:
    """Document lengths as Lucene's BM25 sees them after its one-byte norm (``intToByte4`` then ``byte4ToInt``)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    rounded = _FREE + _4bit_float_to_int(_int_to_4bit_float(np.maximum(lengths - _FREE, 0)))
    return np.where(lengths < _FREE, lengths, rounded)


@njit(cache=True)
def _scatter_impacts(terms, docs, tfs, indptr, idf, norm_inverse, out_docs, out_impacts):  # pragma: no cover - jit
    """Counting-sort (doc, term, tf) triples into term-major postings with float32 Lucene BM25 impacts."""
    fill = indptr[:-1].copy()
    one = np.float32(1.0)
    for i in range(terms.shape[0]):
        t = terms[i]
        d = docs[i]
        weight = idf[t]
        p = fill[t]
        out_docs[p] = d
        out_impacts[p] = weight - weight / (one + np.float32(tfs[i]) * norm_inverse[d])
        fill[t] = p + 1


@njit(cache=True)
def _sift_down(scores, docs, i, size):  # pragma: no cover - jit
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
def _heap_push(scores, docs, size, k, s, d):  # pragma: no cover - jit
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
        _sift_down(scores, docs, 0, size)
    return size


@njit(cache=True)
def _kth_best(acc, docs, count, k, heap_scores, heap_docs):  # pragma: no cover - jit
    """The ``k``-th highest partial score among ``docs[:count]`` (a lower bound on the final top-k cut-off)."""
    size = 0
    for i in range(count):
        size = _heap_push(heap_scores, heap_docs, size, k, np.float32(acc[docs[i]]), docs[i])
    return np.float64(heap_scores[0])


@njit(cache=True)
def _gallop(post_docs, pos, hi, d):  # pragma: no cover - jit
    """First index in ``post_docs[pos:hi]`` (sorted) whose value is >= ``d``."""
    step = 1
    while pos + step < hi and post_docs[pos + step] < d:
        step *= 2
    lo = pos + step // 2 if step > 1 else pos
    top = min(pos + step, hi)
    while lo < top:
        mid = (lo + top) // 2
        if post_docs[mid] < d:
            lo = mid + 1
        else:
            top = mid
    return lo


_SLACK = 1.0 + 1e-6  # float rounding margin: prune only when a bound is clearly below the cut-off


@njit(cache=True)
def _prune(acc, docs, count, rest, cutoff):  # pragma: no cover - jit
    """Keep (in order) the candidates in ``docs[:count]`` that the remaining terms could lift to ``cutoff``;
    zero the accumulators of the others. Returns the new count."""
    kept = 0
    for c in range(count):
        d = docs[c]
        if (acc[d] + rest) * _SLACK >= cutoff:
            docs[kept] = d
            kept += 1
        else:
            acc[d] = 0.0
    return kept


@njit(nogil=True, cache=True)
def _search_kernel(
    indptr, post_docs, impacts, max_impacts, qptr, qterms, qweights, k, acc, touched, start, step, out_docs, out_scores
):  # pragma: no cover - jit
    """Exact top-``k`` for queries ``start, start + step, …`` with MaxScore-style pruning, using one accumulator.

    Terms run from the highest score bound (rare terms) down. Once the bounds of the remaining terms add up to
    less than the current ``k``-th best partial score, no untouched passage can still enter the top ``k``: the
    remaining (long, common-term) posting lists are then only probed, by galloping search, for the few
    candidates that can still make it. ``acc`` is left all-zero for the next call. Runs without the GIL, so
    one Python thread per worker gives parallel batches.
    """
    num_queries = qptr.shape[0] - 1
    heap_scores = np.empty(k, np.float32)
    heap_docs = np.empty(k, np.int64)
    for q in range(start, num_queries, step):
        first, nterms = qptr[q], qptr[q + 1] - qptr[q]
        bounds = np.empty(nterms)
        for j in range(nterms):
            bounds[j] = qweights[first + j] * max_impacts[qterms[first + j]]
        order = np.argsort(-bounds)
        rest = np.zeros(nterms + 1)  # rest[i]: the most terms order[i:] can add to any passage
        for i in range(nterms - 1, -1, -1):
            rest[i] = rest[i + 1] + bounds[order[i]]
        count = 0
        cutoff = -1.0
        i = 0
        while i < nterms and not (count >= k and rest[i] * _SLACK < cutoff):
            t = qterms[first + order[i]]
            weight = qweights[first + order[i]]
            for p in range(indptr[t], indptr[t + 1]):
                d = post_docs[p]
                if acc[d] == 0.0:
                    touched[count] = d
                    count += 1
                acc[d] += weight * impacts[p]
            i += 1
            # The cut-off can only prune once the terms left could add less than the terms done.
            if count >= k and i < nterms and rest[i] < rest[0] - rest[i]:
                cutoff = _kth_best(acc, touched, count, k, heap_scores, heap_docs)
        if i < nterms:
            count = _prune(acc, touched, count, rest[i], cutoff)
            touched[:count].sort()  # ascending, for galloping through the remaining posting lists
            for ii in range(i, nterms):
                t = qterms[first + order[ii]]
                weight = qweights[first + order[ii]]
                pos, hi = indptr[t], indptr[t + 1]
                for c in range(count):
                    d = touched[c]
                    pos = _gallop(post_docs, pos, hi, d)
                    if pos >= hi:
                        break
                    if post_docs[pos] == d:
                        acc[d] += weight * impacts[pos]
                if ii + 1 < nterms and count > k:  # scores grew: raise the cut-off, drop hopeless candidates
                    cutoff = _kth_best(acc, touched, count, k, heap_scores, heap_docs)
                    count = _prune(acc, touched, count, rest[ii + 1], cutoff)
        size = 0
        for c in range(count):
            d = touched[c]
            size = _heap_push(heap_scores, heap_docs, size, k, np.float32(acc[d]), d)
            acc[d] = 0.0
        # Pop worst-first into the tail: the row ends up best-first.
        for r in range(size - 1, -1, -1):
            out_scores[q, r] = heap_scores[0]
            out_docs[q, r] = heap_docs[0]
            heap_scores[0] = heap_scores[r]
            heap_docs[0] = heap_docs[r]
            _sift_down(heap_scores, heap_docs, 0, r)


@njit(cache=True)
def _max_per_term(indptr, impacts):  # pragma: no cover - jit
    out = np.zeros(indptr.shape[0] - 1, np.float32)
    for t in range(out.shape[0]):
        for p in range(indptr[t], indptr[t + 1]):
            out[t] = max(out[t], impacts[p])
    return out


class NativeEngine:
    """The ``native`` engine: build from a corpus or load from a directory, then :meth:`search` batches."""

    _FILES = ("indptr.npy", "docs.npy", "impacts.npy", "max_impacts.npy")

    def __init__(
        self,
        vocabulary: list[str],
        indptr: np.ndarray,
        docs: np.ndarray,
        impacts: np.ndarray,
        max_impacts: np.ndarray,
        num_docs: int,
        threads: int,
    ):
        self.analyzer = EnglishAnalyzer()
        self.vocabulary = vocabulary
        self._term_ids = {term: i for i, term in enumerate(vocabulary)}
        self.indptr, self.docs, self.impacts, self.max_impacts = indptr, docs, impacts, max_impacts
        self.num_docs = int(num_docs)
        self.threads = max(1, int(threads))
        self._pool: ThreadPoolExecutor | None = None
        self._buffers: tuple[np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------------------------- building
    @classmethod
    def build(cls, corpus: Corpus, k1: float, b: float, threads: int, show_progress: bool = True) -> NativeEngine:
        """Analyse the corpus in chunks and assemble term-major postings with BM25 impacts."""
        analyzer = EnglishAnalyzer()
        token_ids: dict[str, int] = {}  # raw token → term id, -1 for stopwords
        term_ids: dict[str, int] = {}
        parts_docs, parts_terms, parts_tfs = [], [], []
        lengths = np.zeros(len(corpus), dtype=np.int64)
        progress = tqdm(total=len(corpus), desc="native: indexing", unit="doc", disable=not show_progress)
        for lo in range(0, len(corpus), _CHUNK):
            hi = min(len(corpus), lo + _CHUNK)
            tokens: list[str] = []
            per_doc = np.empty(hi - lo, dtype=np.int64)
            for i in range(lo, hi):
                doc_tokens = analyzer.tokens(corpus.search_text(i))
                per_doc[i - lo] = len(doc_tokens)
                tokens.extend(doc_tokens)
            ids = list(map(token_ids.get, tokens))
            if None in ids:
                for token in set(compress(tokens, map(operator.is_, ids, repeat(None)))):
                    term = analyzer.term_of(token)
                    token_ids[token] = -1 if term is None else term_ids.setdefault(term, len(term_ids))
                ids = list(map(token_ids.get, tokens))
            term_arr = np.array(ids, dtype=np.int64)
            doc_arr = np.repeat(np.arange(lo, hi, dtype=np.int64), per_doc)
            kept = term_arr >= 0
            term_arr, doc_arr = term_arr[kept], doc_arr[kept]
            lengths[lo:hi] = np.bincount(doc_arr - lo, minlength=hi - lo)
            keys, tfs = np.unique((doc_arr << 32) | term_arr, return_counts=True)
            parts_docs.append((keys >> 32).astype(np.int32))
            parts_terms.append((keys & 0xFFFFFFFF).astype(np.int32))
            parts_tfs.append(tfs.astype(np.int32))
            progress.update(hi - lo)
        progress.close()
        docs = np.concatenate(parts_docs)
        terms = np.concatenate(parts_terms)
        tfs = np.concatenate(parts_tfs)
        del parts_docs, parts_terms, parts_tfs
        vocabulary = list(term_ids)
        doc_freq = np.bincount(terms, minlength=len(vocabulary))
        indptr = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(doc_freq, out=indptr[1:])
        idf, norm_inverse = _lucene_weights(doc_freq, lengths, k1, b)
        out_docs = np.empty(len(docs), dtype=np.int32)
        impacts = np.empty(len(docs), dtype=np.float32)
        _scatter_impacts(terms, docs, tfs, indptr, idf, norm_inverse, out_docs, impacts)
        max_impacts = _max_per_term(indptr, impacts)
        return cls(vocabulary, indptr, out_docs, impacts, max_impacts, len(corpus), threads)

    def save(self, directory: Path) -> None:
        arrays = (self.indptr, self.docs, self.impacts, self.max_impacts)
        for name, array in zip(self._FILES, arrays, strict=True):
            np.save(directory / name, array)
        (directory / "terms.txt").write_text("\n".join(self.vocabulary), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, num_docs: int, threads: int) -> NativeEngine:
        """Memory-map the postings, so reloading takes well under a second even at a million passages.

        Copy-on-write mode gives the same (writable) array type as a fresh build, so numba compiles the search
        kernel once rather than again for read-only arrays; nothing is ever written to them.
        """
        arrays = [np.load(directory / name, mmap_mode="c") for name in cls._FILES]
        text = (directory / "terms.txt").read_text(encoding="utf-8")
        vocabulary = text.split("\n") if text else []
        return cls(vocabulary, *arrays, num_docs=num_docs, threads=threads)

    # ---------------------------------------------------------------------------------------------- searching
    def _query_terms(self, query: str) -> dict[int, float]:
        weights: dict[int, float] = {}
        for term in self.analyzer.analyze(query):
            tid = self._term_ids.get(term)
            if tid is not None:
                weights[tid] = weights.get(tid, 0.0) + 1.0  # Anserini boosts a repeated term by its count
        return weights

    def search(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-``k`` (positions, scores) per query, best first; only passages sharing a term with the query."""
        k = max(1, min(int(k), self.num_docs))
        qptr = [0]
        qterms: list[int] = []
        qweights: list[float] = []
        for query in queries:
            weights = self._query_terms(query)
            qterms.extend(weights)
            qweights.extend(weights.values())
            qptr.append(len(qterms))
        out_docs = np.full((len(queries), k), -1, dtype=np.int64)
        out_scores = np.zeros((len(queries), k), dtype=np.float32)
        workers = max(1, min(self.threads, len(queries)))
        arrays = (
            self.indptr,
            self.docs,
            self.impacts,
            self.max_impacts,
            np.asarray(qptr, dtype=np.int64),
            np.asarray(qterms, dtype=np.int64),
            np.asarray(qweights, dtype=np.float64),
            k,
        )
        with self._lock:  # the accumulators are shared state
            acc, touched = self._work_buffers(workers)
            if workers == 1:
                _search_kernel(*arrays, acc[0], touched[0], 0, 1, out_docs, out_scores)
            else:
                jobs = [
                    self._pool.submit(_search_kernel, *arrays, acc[w], touched[w], w, workers, out_docs, out_scores)
                    for w in range(workers)
                ]
                for job in jobs:
                    job.result()
        results = []
        for row_docs, row_scores in zip(out_docs, out_scores, strict=True):
            found = row_docs >= 0
            results.append((row_docs[found], row_scores[found]))
        return results

    def _work_buffers(self, workers: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-worker accumulators, allocated once: zeroing a corpus-sized array per query would cost more than
        the query itself at a million passages."""
        if self._buffers is None or self._buffers[0].shape[0] < workers:
            if workers > 1 and self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="bm25-native")
            self._buffers = (
                np.zeros((workers, self.num_docs), dtype=np.float64),
                np.empty((workers, self.num_docs), dtype=np.int32),
            )
        acc, touched = self._buffers
        return acc[:workers], touched[:workers]


def _lucene_weights(doc_freq: np.ndarray, lengths: np.ndarray, k1: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-term idf and per-document ``1 / (k1 · (1 - b + b · dl / avgdl))`` exactly as Lucene's BM25Similarity.

    Lucene computes idf in double and rounds it to float, and the norm cache in float arithmetic; doing the
    same keeps scores bit-identical. Passages with no indexable term do not count in Lucene's ``docCount``.
    """
    doc_count = max(1, int(np.count_nonzero(lengths)))
    avgdl = np.float32(lengths.sum() / doc_count) if lengths.sum() else np.float32(1.0)
    idf = np.log(1.0 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5)).astype(np.float32)
    k1f, bf = np.float32(k1), np.float32(b)
    decoded = lucene_length(lengths).astype(np.float32)
    norm_inverse = np.float32(1.0) / (k1f * ((np.float32(1.0) - bf) + bf * decoded / avgdl))
    return idf, norm_inverse.astype(np.float32)
