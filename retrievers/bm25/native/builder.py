"""Building a native index: the passages streamed in segments, analysed by worker processes, merged into blocks.

Building streams the passages in segments of ``segment_docs``: worker processes analyse a segment (reading a
disk corpus's rows themselves; :mod:`.segments`) into term-major postings, which go to a scratch file; once every
passage is seen (and so every idf and the average length are known) the segments are merged term range by term
range into bit-packed blocks (:mod:`.postings`) with each block's highest BM25 impact. Memory is bounded by the
segment size, the merge range and the tokens a worker remembers, not by the corpus: what grows with N is the
vocabulary, one norm byte and one length per passage.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit
from tqdm.auto import tqdm

from searchenv.corpus import Corpus, DiskCorpus
from searchenv.retrievers.bm25.native.compile_notice import announce_compiles
from searchenv.retrievers.bm25.native.index_format import ARRAY_FILES, CollectionStats, lucene_weights, norm_byte
from searchenv.retrievers.bm25.native.postings import BLOCK, encode_terms
from searchenv.retrievers.bm25.native.segments import SegmentAnalyser, SegmentPostings
from searchenv.retrievers.bm25.native.term_lookup import write_term_table
from searchenv.types import split_contents

announce_compiles()  # one line on stderr while numba compiles the kernels (the first run after installing)

__all__ = ["DEFAULT_MERGE_POSTINGS", "DEFAULT_SEGMENT_DOCS", "build_native_index", "jsonl_search_texts"]

#: Passages per build segment. Build memory grows with it (each worker holds a segment's texts and the arrays of its
#: analysis, the parent the segments in flight), build time does not: a 2-worker build of 1M generated passages
#: took 947 MB summed PSS in segments of 25,000 and 712–785 MB in segments of 10,000, for the same CPU time, beside
#: Lucene's 690–1,340 MB (bench/bench_bm25_build_memory.py; docs/benchmarks.md).
DEFAULT_SEGMENT_DOCS = 10_000
#: Postings merged per step (about 14 bytes each while merging).
DEFAULT_MERGE_POSTINGS = 16_000_000
_PARALLEL_MIN_DOCS = 50_000  # below this a worker pool costs more than it saves
_worker_analyser: SegmentAnalyser | None = None  # a build worker's, kept for the worker's life


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


def _load_analysis_kernels() -> None:
    """Load the workers' compiled analysis code in the parent, before it forks them, so they share its pages.

    Each worker otherwise loads its own copy (85 MB of one process's memory, measured with ``psutil``'s USS); a
    forked worker finds the code already loaded and its pages are shared copy-on-write, never written. The
    analyser used here is thrown away: workers number terms with their own.
    """
    SegmentAnalyser().analyse(["warm up", "wärm ūp"])  # ASCII and plain-Unicode passages: both compiled scanners


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
            idf, cache = lucene_weights(self.doc_freq, doc_count, total_length, k1, b)
        else:
            whole = np.fromiter((collection.doc_freq[t] for t in self.term_ids), np.int64, vocab_size)
            idf, cache = lucene_weights(whole, collection.doc_count, collection.total_length, k1, b)
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
        for name, array in zip(ARRAY_FILES, arrays, strict=True):
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
            if method == "fork":
                _load_analysis_kernels()
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
