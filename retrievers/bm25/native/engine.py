"""``native``: a JVM-free BM25 engine — compressed postings on disk, built in bounded memory, searched by numba.

Building streams the passages in segments of ``segment_docs``: worker processes analyse a segment (reading a
disk corpus's rows themselves; :mod:`searchenv.retrievers.bm25.native.segments`) into term-major postings, which go to
a scratch file; once every passage is seen (and so every idf and the average length are known) the segments are
merged term range by term range into bit-packed blocks (:mod:`.postings`) with each block's
highest BM25 impact. Memory is bounded by the segment size, the merge range and the tokens a worker remembers, not
by the corpus: what grows with N is the vocabulary, one norm byte and one length per passage.

Searching memory-maps the index, its term dictionary included (:mod:`.term_lookup`). Per query,
terms run from the highest score bound (rare terms) down, scoring postings into a dense accumulator
(term-at-a-time); once the bounds of the terms left add up to less than the current ``k``-th best partial score,
no untouched passage can still reach the top ``k``, and the remaining (long, common-term) lists are only probed for
the surviving candidates, skipping every block that holds none (MaxScore with block skipping; results stay exact).
Batches run in threads over the queries (the kernel releases the GIL).

Why it agrees with Lucene: terms come from :class:`~searchenv.retrievers.bm25.analyzer.EnglishAnalyzer` (a copy of
Anserini's analyzer), document lengths are stored as Lucene's one-byte norm (``SmallFloat.intToByte4``), each
term's score is computed in float32 in Lucene's operation order from the same 256-entry norm cache, and clause
scores are summed in double — so scores usually equal Lucene's to the last bit. Ties go to the lower position.
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import json
import multiprocessing
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

try:
    from numba import njit
except ImportError:  # pragma: no cover - depends on the install
    raise ImportError("the native BM25 engine needs numba: pip install 'searchenv[bm25]'") from None

from searchenv.corpus import Corpus, DiskCorpus
from searchenv.retrievers.bm25.analyzer import EnglishAnalyzer
from searchenv.retrievers.bm25.native.postings import BLOCK, decode_block, encode_terms
from searchenv.retrievers.bm25.native.segments import SegmentAnalyser, SegmentPostings
from searchenv.retrievers.bm25.native.term_lookup import TermTable, write_term_table
from searchenv.types import split_contents

__all__ = [
    "DEFAULT_MERGE_POSTINGS",
    "DEFAULT_SEGMENT_DOCS",
    "FORMAT_VERSION",
    "NativeEngine",
    "build_native_index",
    "jsonl_search_texts",
    "lucene_length",
    "norm_byte",
]

FORMAT_VERSION = "searchenv-native-2"
#: Passages per build segment: with two workers, peak build memory is a few hundred MB per 100,000 passages.
DEFAULT_SEGMENT_DOCS = 100_000
#: Postings merged per step (about 14 bytes each while merging).
DEFAULT_MERGE_POSTINGS = 16_000_000
_PARALLEL_MIN_DOCS = 50_000  # below this a worker pool costs more than it saves
# What a term's score bound and document frequency are is not stored: both follow from the blocks (a term's
# highest block maximum, the sum of its block counts), which keeps small indexes small (most terms are rare).
_FILES = ("idf", "norms", "norm_cache", "term_blocks", "block_last", "block_offset", "block_max")


@dataclass(frozen=True)
class CollectionStats:
    """The counts BM25's weights come from: document frequency per term, passages with a term, total length.

    An index built over a *part* of a corpus with the whole corpus's statistics scores every passage exactly as
    the whole index does (idf, average length and therefore every block bound are the whole's): how a sharded
    index stays identical to the unsharded one (:mod:`searchenv.retrievers.server.ray_serve`).
    """

    doc_freq: Mapping[str, int]
    doc_count: int
    total_length: int

    @classmethod
    def of_index(cls, directory: str | Path) -> CollectionStats:
        """The statistics of the passages a native index directory was built over."""
        directory = Path(directory)
        meta = json.loads((directory / "native.json").read_text(encoding="utf-8"))
        terms = (directory / "terms.txt").read_text(encoding="utf-8")
        data = np.memmap(directory / "postings.bin", dtype=np.uint8, mode="r")
        offsets = np.load(directory / "block_offset.npy", mmap_mode="r")[:-1]
        block_counts = data[offsets.astype(np.int64) + 2].astype(np.int64) + 1  # a block header's third byte: count - 1
        term_blocks = np.load(directory / "term_blocks.npy")
        doc_freq = np.add.reduceat(block_counts, term_blocks[:-1]) if len(term_blocks) > 1 else np.zeros(0, np.int64)
        return cls(
            dict(zip(terms.split("\n") if terms else [], doc_freq.tolist())), meta["doc_count"], meta["total_length"]
        )


# ------------------------------------------------------------------------------------------------ Lucene norms
_FREE = 24  # SmallFloat.NUM_FREE_VALUES: lengths below it are stored exactly


def _long_to_int4(value: np.ndarray) -> np.ndarray:
    """Lucene ``SmallFloat.longToInt4``: keep the 4 most significant bits and the shift."""
    value = value.astype(np.int64)
    bits = np.zeros_like(value)
    nz = value > 0
    bits[nz] = np.floor(np.log2(value[nz])).astype(np.int64) + 1
    shift = np.maximum(bits - 4, 0)
    normal = ((value >> shift) & 0x07) | ((shift + 1) << 3)
    return np.where(bits < 4, value, normal)


def _int4_to_long(encoded: np.ndarray) -> np.ndarray:
    """Lucene ``SmallFloat.int4ToLong``."""
    mantissa = encoded & 0x07
    shift = (encoded >> 3) - 1
    return np.where(shift == -1, mantissa, (mantissa | 0x08) << np.maximum(shift, 0))


def norm_byte(lengths: np.ndarray) -> np.ndarray:
    """Lucene's one-byte norm of each document length (``SmallFloat.intToByte4``), as ``uint8``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    encoded = np.where(lengths < _FREE, lengths, _FREE + _long_to_int4(np.maximum(lengths - _FREE, 0)))
    return encoded.astype(np.uint8)


def _norm_length(encoded: np.ndarray) -> np.ndarray:
    """``SmallFloat.byte4ToInt``: the length a norm byte stands for."""
    encoded = np.asarray(encoded, dtype=np.int64)
    return np.where(encoded < _FREE, encoded, _FREE + _int4_to_long(np.maximum(encoded - _FREE, 0)))


def lucene_length(lengths: np.ndarray) -> np.ndarray:
    """Document lengths as Lucene's BM25 sees them after its one-byte norm (``intToByte4`` then ``byte4ToInt``)."""
    return _norm_length(norm_byte(lengths))


def _lucene_weights(doc_freq: np.ndarray, doc_count: int, total_length: int, k1: float, b: float):
    """Per-term idf and the 256-entry ``1 / (k1 · (1 - b + b · dl / avgdl))`` cache, exactly as BM25Similarity.

    Lucene computes idf in double and rounds it to float, and the norm cache in float arithmetic; doing the
    same keeps scores bit-identical. Passages with no indexable term do not count in Lucene's ``docCount``.
    """
    doc_count = max(1, doc_count)
    avgdl = np.float32(total_length / doc_count) if total_length else np.float32(1.0)
    idf = np.log(1.0 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5)).astype(np.float32)
    k1f, bf = np.float32(k1), np.float32(b)
    decoded = _norm_length(np.arange(256)).astype(np.float32)
    cache = np.float32(1.0) / (k1f * ((np.float32(1.0) - bf) + bf * decoded / avgdl))
    return idf, cache.astype(np.float32)


# ---------------------------------------------------------------------------------------------------- building
_worker_analyser: SegmentAnalyser | None = None


@dataclass(frozen=True)
class _CorpusRange:
    """Passages ``start:stop`` of a disk corpus: what a worker is sent instead of their texts (it reads them)."""

    corpus: DiskCorpus
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start

    def texts(self) -> list[str]:
        """Their search texts (:meth:`DiskCorpus.search_text`): the rows read in one piece and parsed in one
        ``json.loads`` call (row by row where blank lines lie between them)."""
        store = self.corpus.store
        begin = int(store.offsets[self.start])
        end = int(store.offsets[self.stop - 1]) + len(store.line(self.stop - 1))
        with open(store.path, "rb") as handle:
            handle.seek(begin)
            block = handle.read(end - begin)
        try:
            rows = json.loads(b"[" + block.replace(b"\n", b",") + b"]")
        except json.JSONDecodeError:
            rows = []
        if len(rows) != len(self):
            rows = json.loads(b"[" + b",".join(map(store.line, range(self.start, self.stop))) + b"]")
        return list(map(_row_search_text, rows))


def _row_search_text(row: dict) -> str:
    """A corpus row's search text, as :meth:`Corpus.search_text` composes it."""
    title, text = split_contents(row["contents"]) if "contents" in row else (str(row["title"]), str(row["text"]))
    return f"{title}\n{text}"


def _keep_freed_memory() -> None:
    """Start-up of a build worker: have glibc keep large freed blocks for reuse rather than unmap them.

    A worker allocates and frees arrays of tens of MB for every chunk of passages; unmapped, each comes back as
    fresh pages whose faults cost about a sixth of the worker's CPU. Kept, they raise the worker's peak memory a
    little (990 instead of 830 MB in segments of 100,000 passages). Elsewhere than glibc this does nothing.
    """
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: blocks below 1 GB come from the heap
    mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: up to 1 GB of freed heap is kept


def _analyse_segment(segment: list[str] | _CorpusRange) -> SegmentPostings:
    """Postings of one segment (:meth:`SegmentAnalyser.analyse`), in a worker process whose analysis state lives
    as long as the worker."""
    global _worker_analyser
    if _worker_analyser is None:
        _worker_analyser = SegmentAnalyser()
    return _worker_analyser.analyse(segment if isinstance(segment, list) else segment.texts())


@njit(cache=True)
def _copy_runs(terms, starts, docs, tfs, first_doc, t0, fill, out_docs, out_tfs):  # pragma: no cover - jit
    """Append one segment's postings of the global terms ``terms`` (all in the merge range from ``t0``; term ``i``
    owns ``docs[starts[i] - starts[0]:starts[i + 1] - starts[0]]``) to each term's slot (``fill``) in the output."""
    base = starts[0]
    for i in range(terms.shape[0]):
        p = fill[terms[i] - t0]
        for j in range(starts[i] - base, starts[i + 1] - base):
            out_docs[p] = docs[j] + first_doc
            out_tfs[p] = tfs[j]
            p += 1
        fill[terms[i] - t0] = p


@njit(cache=True)
def _runs_in_order(order, starts, docs, tfs, out_starts, out_docs, out_tfs):  # pragma: no cover - jit
    """Reorder term-major postings so that run ``order[i]`` comes ``i``-th; ``out_starts`` gets the new bounds."""
    p = 0
    for i in range(order.shape[0]):
        out_starts[i] = p
        for j in range(starts[order[i]], starts[order[i] + 1]):
            out_docs[p] = docs[j]
            out_tfs[p] = tfs[j]
            p += 1
    out_starts[order.shape[0]] = p


#: A scratch segment's files: its global term ids (ascending), their run bounds, the runs' passages and tfs.
_SCRATCH = {"terms": np.int32, "starts": np.int64, "docs": np.int32, "tfs": np.uint16}


class _SegmentWriter:
    """Turns analysed segments into scratch files with global term ids, and keeps the global counts."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.term_ids: dict[str, int] = {}
        self.doc_freq = np.zeros(0, dtype=np.int64)
        self.lengths: list[np.ndarray] = []
        self.segments: list[int] = []  # the first document of each
        self._global_of: dict[str, np.ndarray] = {}  # per worker analyser: its term ids → global ids

    def _scratch_file(self, segment: int, part: str) -> Path:
        return self.scratch / f"seg{segment}-{part}.bin"

    def _read(self, segment: int, part: str, lo: int, hi: int) -> np.ndarray:
        """Entries ``lo:hi`` of one of a segment's scratch files, read (not mapped: the touched pages of a mapped file
        would count in the build's resident memory until the merge ends)."""
        dtype = _SCRATCH[part]
        return np.fromfile(self._scratch_file(segment, part), dtype, hi - lo, offset=lo * np.dtype(dtype).itemsize)

    def _cuts(self, bounds: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per segment: where each merge range ``bounds[c]:bounds[c + 1]`` of global terms starts in its term list
        and in its postings."""
        cuts = []
        for segment in range(len(self.segments)):
            terms = np.fromfile(self._scratch_file(segment, "terms"), np.int32)
            at = np.searchsorted(terms, bounds)
            cuts.append((at, np.fromfile(self._scratch_file(segment, "starts"), np.int64)[at]))
        return cuts

    def add(self, analysed: SegmentPostings) -> None:
        """Give the segment's terms global ids — new terms the next ids, in the segment's order of first
        appearance, as walking its terms one by one would — and write its postings to the scratch directory."""
        self._global_of.pop(analysed.replaces, None)
        known = self._global_of.get(analysed.analyser, np.zeros(0, np.int64))
        if len(known) != analysed.first_new:
            raise RuntimeError(f"segment {len(self.segments)} skips terms of its worker; this is a bug")
        get = self.term_ids.get
        new = np.fromiter((get(t, -1) for t in analysed.new_terms), np.int64, len(analysed.new_terms))
        known = np.concatenate([known, new])
        terms = known[analysed.terms]
        fresh = np.flatnonzero(terms < 0)
        if len(fresh):
            ids = np.arange(len(self.term_ids), len(self.term_ids) + len(fresh))
            worker_ids = analysed.terms[fresh]
            for worker_id, term_id in zip((worker_ids - analysed.first_new).tolist(), ids.tolist(), strict=True):
                self.term_ids[analysed.new_terms[worker_id]] = term_id
            terms[fresh] = ids
            known[worker_ids] = ids
        if np.any(known[analysed.first_new :] < 0):  # every term new to the worker occurs in the segment
            raise RuntimeError(f"segment {len(self.segments)} names terms it does not hold; this is a bug")
        self._global_of[analysed.analyser] = known
        grown = np.zeros(len(self.term_ids), dtype=np.int64)
        grown[: len(self.doc_freq)] = self.doc_freq
        grown[terms] += np.diff(analysed.starts)
        self.doc_freq = grown
        # Sorted by global term id, a merge range is one contiguous slice of each segment's files.
        order = np.argsort(terms, kind="stable")
        starts = np.empty(len(terms) + 1, np.int64)
        docs, tfs = np.empty_like(analysed.docs), np.empty_like(analysed.tfs)
        _runs_in_order(order, analysed.starts, analysed.docs, analysed.tfs, starts, docs, tfs)
        for (part, dtype), array in zip(_SCRATCH.items(), (terms[order], starts, docs, tfs), strict=True):
            array.astype(dtype, copy=False).tofile(self._scratch_file(len(self.segments), part))
        self.segments.append(sum(len(x) for x in self.lengths))
        self.lengths.append(analysed.lengths)

    def merge(
        self,
        directory: Path,
        k1: float,
        b: float,
        merge_postings: int,
        show_progress: bool,
        collection: CollectionStats | None = None,
    ) -> None:
        """Write the final index: idf and norms from the global counts, then bit-packed blocks term range by range.

        ``collection`` replaces this build's own counts in the weights (a shard of a bigger corpus).
        """
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int32)
        vocab_size = len(self.term_ids)
        doc_count, total_length = int(np.count_nonzero(lengths)), int(lengths.sum(dtype=np.int64))
        if collection is None:
            idf, cache = _lucene_weights(self.doc_freq, doc_count, total_length, k1, b)
        else:
            whole = np.fromiter((collection.doc_freq[t] for t in self.term_ids), np.int64, vocab_size)
            idf, cache = _lucene_weights(whole, collection.doc_count, collection.total_length, k1, b)
        norms = norm_byte(lengths)
        bounds = [0]
        while bounds[-1] < vocab_size:
            bounds.append(_term_range_end(self.doc_freq, bounds[-1], merge_postings))
        cuts = self._cuts(np.asarray(bounds, np.int64))
        total = int(self.doc_freq.sum())
        term_blocks = np.zeros(vocab_size + 1, dtype=np.int64)
        block_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        written = blocks = 0
        progress = tqdm(total=total, desc="native: merging", unit="posting", disable=not show_progress)
        with open(directory / "postings.bin", "wb") as postings:
            for c, (t0, t1) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
                chunk_indptr = np.zeros(t1 - t0 + 1, dtype=np.int64)
                np.cumsum(self.doc_freq[t0:t1], out=chunk_indptr[1:])
                docs, tfs = np.empty(chunk_indptr[-1], np.int32), np.empty(chunk_indptr[-1], np.int32)
                fill = chunk_indptr[:-1].copy()
                for segment, (first_doc, (at, posting_at)) in enumerate(zip(self.segments, cuts, strict=True)):
                    if at[c] == at[c + 1]:
                        continue
                    terms = self._read(segment, "terms", at[c], at[c + 1])
                    starts = self._read(segment, "starts", at[c], at[c + 1] + 1)
                    seg_docs = self._read(segment, "docs", posting_at[c], posting_at[c + 1])
                    seg_tfs = self._read(segment, "tfs", posting_at[c], posting_at[c + 1])
                    _copy_runs(terms, starts, seg_docs, seg_tfs, first_doc, t0, fill, docs, tfs)
                nblocks = int(np.sum(-(-self.doc_freq[t0:t1] // BLOCK)))
                out = np.empty(len(docs) * 6 + nblocks * 3 + 8, dtype=np.uint8)
                last = np.empty(nblocks, np.int32)
                offset = np.empty(nblocks, np.int64)
                best = np.empty(nblocks, np.float32)
                starts = np.empty(t1 - t0, np.int64)
                size, count = encode_terms(
                    chunk_indptr, docs, tfs, idf[t0:t1], norms, cache, out, last, offset, best, starts
                )
                postings.write(out[:size].tobytes())
                block_parts.append((last[:count], offset[:count] + written, best[:count]))
                term_blocks[t0:t1] = starts + blocks
                written += size
                blocks += count
                progress.update(len(docs))
        progress.close()
        term_blocks[vocab_size] = blocks
        block_last, block_offset, block_max = (
            np.concatenate([part[i] for part in block_parts]) if block_parts else np.zeros(0, dtype)
            for i, dtype in enumerate((np.int32, np.int64, np.float32))
        )
        # Narrow indices where they fit (every index below 4 GB of postings and 2**31 blocks): smaller on disk.
        block_offset = np.append(block_offset, written).astype(np.uint32 if written < 2**32 else np.int64)
        term_blocks = term_blocks.astype(np.int32 if blocks < 2**31 else np.int64)
        arrays = (idf, norms, cache, term_blocks, block_last, block_offset, block_max)
        for name, array in zip(_FILES, arrays, strict=True):
            np.save(directory / f"{name}.npy", array)
        (directory / "terms.txt").write_text("\n".join(self.term_ids), encoding="utf-8")
        write_term_table(directory, self.term_ids)
        meta = {
            "num_docs": len(lengths),
            "postings": total,
            "terms": vocab_size,
            "k1": k1,
            "b": b,
            "doc_count": doc_count,
            "total_length": total_length,
        }
        (directory / "native.json").write_text(json.dumps(meta), encoding="utf-8")


def _term_range_end(doc_freq: np.ndarray, t0: int, budget: int) -> int:
    """The end of the longest term range from ``t0`` holding at most ``budget`` postings (at least one term)."""
    cumulative = np.cumsum(doc_freq[t0 : t0 + max(1, budget)])
    return t0 + max(1, int(np.searchsorted(cumulative, budget, side="right")))


def _segments(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    segment: list[str] = []
    for text in texts:
        segment.append(text)
        if len(segment) == size:
            yield segment
            segment = []
    if segment:
        yield segment


def jsonl_search_texts(path: str | Path) -> Iterator[str]:
    """The search texts of a corpus jsonl, streamed in file order: what :meth:`Corpus.search_text` gives for
    ``Corpus.from_jsonl(path)``, without holding the corpus — for building a wiki-18-sized index."""
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield _row_search_text(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"{path}:{line_no}: not a corpus row ({exc!r})") from None


def build_native_index(
    passages: Corpus | Iterable[str] | Iterable[tuple[str, str]],
    directory: str | Path,
    k1: float,
    b: float,
    workers: int = 1,
    segment_docs: int = DEFAULT_SEGMENT_DOCS,
    merge_postings: int = DEFAULT_MERGE_POSTINGS,
    num_docs: int | None = None,
    show_progress: bool = True,
    collection: CollectionStats | None = None,
) -> int:
    """Build a native index of ``passages`` into the (new or empty) ``directory``; returns the passage count.

    ``passages`` is a :class:`~searchenv.corpus.Corpus` (its ``search_text``), or any iterable of search texts or
    of ``(id, search_text)`` pairs, read once, in order: a hit's position is its place in that order. Memory is
    bounded by ``segment_docs`` (passages analysed at once per worker) and ``merge_postings`` (postings merged
    at once), whatever the corpus size; ``workers`` processes analyse segments in parallel. ``num_docs`` only
    sizes the progress bar of an iterable. Scratch files live in ``directory`` and are removed at the end.
    """
    if segment_docs < 1 or merge_postings < 1:
        raise ValueError(f"segment_docs and merge_postings must be positive, got {segment_docs}, {merge_postings}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    segments: Iterable[list[str] | _CorpusRange]
    if isinstance(passages, DiskCorpus):  # workers read their own passages: no texts through the parent
        num_docs = len(passages)
        bounds = range(0, num_docs, segment_docs)
        segments = (_CorpusRange(passages, lo, min(lo + segment_docs, num_docs)) for lo in bounds)
    elif isinstance(passages, Corpus):
        num_docs = len(passages)
        segments = _segments(map(passages.search_text, range(num_docs)), segment_docs)
    else:
        segments = _segments((p if isinstance(p, str) else p[1] for p in passages), segment_docs)
    scratch = Path(tempfile.mkdtemp(prefix=".segments-", dir=directory))
    try:
        writer = _SegmentWriter(scratch)
        progress = tqdm(total=num_docs, desc="native: indexing", unit="doc", disable=not show_progress)
        parallel = workers > 1 and (num_docs is None or num_docs >= _PARALLEL_MIN_DOCS)
        if parallel:
            # fork: workers start at once and a script need no ``__main__`` guard; they only run Python and numpy,
            # never a JVM or thread pool the parent may hold.
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            context = multiprocessing.get_context(method)
            with ProcessPoolExecutor(workers, mp_context=context, initializer=_keep_freed_memory) as pool:
                pending: list[Future] = []
                for segment in segments:
                    pending.append(pool.submit(_analyse_segment, segment))
                    del segment
                    while len(pending) > workers:  # bounded read-ahead: memory does not grow with the corpus
                        writer.add(pending.pop(0).result())
                        progress.update(len(writer.lengths[-1]))
                for job in pending:
                    writer.add(job.result())
                    progress.update(len(writer.lengths[-1]))
        else:
            analyser = SegmentAnalyser()
            for segment in segments:
                writer.add(analyser.analyse(segment if isinstance(segment, list) else segment.texts()))
                progress.update(len(segment))
        progress.close()
        writer.merge(directory, k1, b, merge_postings, show_progress, collection)
        return sum(len(x) for x in writer.lengths)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --------------------------------------------------------------------------------------------------- searching
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
    one = np.float32(1.0)
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
                scores[c] += weights[j] * (w - w / (one + np.float32(tfs[pos]) * norm_cache[norms[d]]))
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
    one = np.float32(1.0)
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
                    score += weights[j] * (w - w / (one + np.float32(tfs[j, p]) * norm_cache[norms[d]]))
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
                    score += weights[j] * (w - w / (one + np.float32(tfs[j, p]) * norm_cache[norms[d]]))
            if not alive:
                continue
            if score * _SLACK < cutoff:
                continue
            if size < k or np.float32(score) > heap_scores[0]:  # a later document loses a tie
                size = _heap_push(heap_scores, heap_docs, size, k, np.float32(score), d)
                if size == k:
                    cutoff = max(seeded, np.float64(heap_scores[0]))
                    while essential < n and below[essential + 1] * _SLACK < cutoff:
                        essential += 1
        # Pop worst-first into the tail: the row ends up best-first.
        for r in range(size - 1, -1, -1):
            out_scores[q, r] = heap_scores[0]
            out_docs[q, r] = heap_docs[0]
            heap_scores[0] = heap_scores[r]
            heap_docs[0] = heap_docs[r]
            _sift_down(heap_scores, heap_docs, 0, r)


class NativeEngine:
    """The ``native`` engine over an index directory written by :func:`build_native_index` (memory-mapped)."""

    def __init__(self, directory: str | Path, threads: int, scratch: tempfile.TemporaryDirectory | None = None):
        directory = Path(directory)
        self.directory = directory
        meta_path = directory / "native.json"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            arrays = {name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in _FILES}
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
        out_docs = np.full((len(queries), k), -1, dtype=np.int64)
        out_scores = np.zeros((len(queries), k), dtype=np.float32)
        arguments = (
            *self._arrays,
            np.asarray(qptr, dtype=np.int64),
            np.asarray(qterms, dtype=np.int64),
            np.asarray(qweights, dtype=np.float64),
            k,
            self.seed_from_blocks,
        )
        count = len(queries)
        size = _job_size(count, self.threads)
        pending = collections.deque(range(0, count, size))  # job starts; popleft is thread-safe

        def run_jobs() -> None:
            while True:
                try:
                    start = pending.popleft()
                except IndexError:  # no job left
                    return
                _search_kernel(*arguments, start, min(start + size, count), out_docs, out_scores)

        spare = min(self.threads, len(pending)) - 1  # threads beside this one that would find a job
        helpers = []
        if spare > 0:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.threads - 1, thread_name_prefix="bm25-native")
            helpers = [self._pool.submit(run_jobs) for _ in range(spare)]
        run_jobs()
        for helper in helpers:
            helper.result()
        results = []
        for row_docs, row_scores in zip(out_docs, out_scores, strict=True):
            found = row_docs >= 0
            results.append((row_docs[found], row_scores[found]))
        return results
