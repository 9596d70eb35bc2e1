"""One build segment's passages → its postings, as a build worker process computes them.

A worker keeps, for its whole life, every distinct token it has met and the term each one analyses to — in two
compiled token tables (:class:`~.token_table.TokenTable`: one for ASCII passages, one for
passages whose other characters are plain letters and separators) and in a dictionary for the few passages that
need the analyzer's full Unicode rules — so a token is analysed once per worker, not once per occurrence. A
segment's passages are tokenised chunk by chunk into a stream of term ids, and one compiled pass turns the stream
into (passage, term, tf) postings, numbering the segment's own terms in order of first appearance: exactly the
numbering a token-by-token walk would give, so the index files do not depend on which path analysed a passage.
"""

from __future__ import annotations

import uuid
from itertools import compress, filterfalse
from typing import NamedTuple

import numpy as np
from numba import njit

from searchenv.retrievers.bm25.analyzer import EnglishAnalyzer, is_plain_char, java_lower
from searchenv.retrievers.bm25.native.token_table import LETTER, MIDDLE_DOT, QUOTE, SEPARATOR, SPECIAL, TokenTable

__all__ = ["DEFAULT_MAX_TOKENS", "SegmentAnalyser", "SegmentPostings", "scatter"]

_CHUNK = 20_000  # passages tokenised per compiled pass
#: Distinct tokens a worker remembers before starting afresh (about 190 bytes each, terms included). Past about a
#: million, remembering more saves no time: a 2-worker build of 5M generated passages took 372 s of CPU and 1.36 GB
#: summed PSS remembering 1,000,000, against 383 s and 2.64 GB remembering 4,000,000 (docs/benchmarks.md).
DEFAULT_MAX_TOKENS = 1_000_000


class SegmentPostings(NamedTuple):
    """One analysed segment, term-major, its terms numbered by the worker that analysed it.

    A worker numbers every term it meets once for its whole life; a segment's result names only the terms new to
    the worker (``new_terms``, worker ids ``first_new`` on), so the parent maps each term's text to its global id
    once per worker, not once per segment.
    """

    analyser: str  # the worker state that numbered the terms (a fresh one after :meth:`SegmentAnalyser._forget`)
    replaces: str  # the worker state this one replaced, whose numbering is no longer used ("" for none)
    first_new: int  # the worker id of ``new_terms[0]``
    new_terms: list[str]  # the terms this segment showed the worker for the first time, by worker id
    terms: np.ndarray  # the worker id of each of the segment's terms, in order of first appearance
    starts: np.ndarray  # term ``i``'s postings are ``docs[starts[i]:starts[i + 1]]`` (int64)
    docs: np.ndarray  # segment-local passages, ascending within a term (int32)
    tfs: np.ndarray  # term frequencies, capped at 65,535 (uint16)
    lengths: np.ndarray  # each passage's number of terms (int32)


@njit(cache=True)
def scatter(keys, first_key, indptr, values_a, values_b, out_a, out_b):  # pragma: no cover - jit
    """Stable counting sort of (a, b) pairs by ``keys - first_key`` into the slots ``indptr`` gives each key."""
    fill = indptr[:-1].copy()
    for i in range(keys.shape[0]):
        slot = keys[i] - first_key
        p = fill[slot]
        out_a[p] = values_a[i]
        out_b[p] = values_b[i]
        fill[slot] = p + 1


@njit(cache=True)
def _postings(  # pragma: no cover - jit
    is_ascii, counts, ascii_terms, other_terms, first_doc, local_of, local_terms, state, out
):
    """Postings of one chunk: ``out`` rows (passage, local term, tf) from ``state[1]``; returns each passage's length.

    Passage ``i`` of the chunk has ``counts[i]`` term ids (worker-wide, ``-1`` for a stopword), read in order from
    ``ascii_terms`` when ``is_ascii[i]``, else from ``other_terms``. A worker term gets the segment's next local id
    (``state[0]``) on its first appearance: ``local_of`` maps worker → local ids, ``local_terms`` back.
    """
    lengths = np.zeros(is_ascii.shape[0], np.int32)
    tf = np.zeros(local_terms.shape[0], np.int32)
    touched = np.empty(local_terms.shape[0], np.int64)
    at_ascii = 0
    at_other = 0
    rows = state[1]
    for i in range(is_ascii.shape[0]):
        if is_ascii[i]:
            stream, lo = ascii_terms, at_ascii
            at_ascii += counts[i]
        else:
            stream, lo = other_terms, at_other
            at_other += counts[i]
        distinct = 0
        for p in range(lo, lo + counts[i]):
            worker_term = stream[p]
            if worker_term < 0:
                continue
            local = local_of[worker_term]
            if local < 0:
                local = state[0]
                local_of[worker_term] = local
                local_terms[local] = worker_term
                state[0] = local + 1
            if tf[local] == 0:
                touched[distinct] = local
                distinct += 1
            tf[local] += 1
            lengths[i] += 1
        for j in range(distinct):
            local = touched[j]
            out[rows, 0] = first_doc + i
            out[rows, 1] = local
            out[rows, 2] = tf[local]
            tf[local] = 0
            rows += 1
    state[1] = rows
    return lengths


def _character_kind(char: str) -> int:
    """What a (lowercased) non-ASCII character is to the plain rules of :class:`TokenTable`."""
    if not is_plain_char(char):
        return SPECIAL
    if char == "’":
        return QUOTE
    if char == "·":
        return MIDDLE_DOT
    return LETTER if char.isalpha() else SEPARATOR


class SegmentAnalyser:
    """A build worker's analysis state: the analyzer, and the term of every distinct token met so far."""

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self.analyzer = EnglishAnalyzer()
        self.max_tokens = max_tokens
        self._name = ""
        self._forget()

    def _forget(self) -> None:
        """Start the token tables afresh (what they hold only saves work, never changes a result)."""
        self._replaced, self._name = self._name, uuid.uuid4().hex
        self._reported = 0  # worker terms already named in a result
        self._ascii = TokenTable()
        self._unicode = TokenTable(unicode=True, classify=_character_kind)
        # token id → worker term id (-1: a stopword), per table; the analyzer's own tokens in a dictionary
        self._table_terms = {self._ascii: np.zeros(0, np.int32), self._unicode: np.zeros(0, np.int32)}
        self._other_terms: dict[str, int] = {}
        self._term_ids: dict[str, int] = {}
        self._terms: list[str] = []

    def _term_ids_of(self, tokens: list[str]) -> list[int]:
        """The worker term id of each new token (-1 for a stopword); new terms get the next ids."""
        ids = []
        for term in self.analyzer.analyse_tokens(tokens):
            if term is None:
                ids.append(-1)
                continue
            term_id = self._term_ids.setdefault(term, len(self._terms))
            if term_id == len(self._terms):
                self._terms.append(term)
            ids.append(term_id)
        return ids

    def _table_stream(self, table: TokenTable, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Worker term ids of ``texts`` through ``table`` and each text's count (-1: left to the analyzer)."""
        known = len(table)
        token_ids, counts = table.scan(texts)
        if len(table) > known:
            new = np.array(self._term_ids_of(table.tokens(known, len(table))), dtype=np.int32)
            self._table_terms[table] = np.concatenate([self._table_terms[table], new])
        return self._table_terms[table][token_ids], counts

    def _analyzer_stream(self, text: str) -> np.ndarray:
        """Worker term ids of one text through the analyzer's full Unicode rules."""
        tokens = self.analyzer.tokens(text)
        new = [token for token in dict.fromkeys(tokens) if token not in self._other_terms]
        self._other_terms.update(zip(new, self._term_ids_of(new)))
        return np.array([self._other_terms[token] for token in tokens], dtype=np.int32)

    def _non_ascii_stream(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Worker term ids of non-ASCII texts: the Unicode table where the plain rules apply, else the analyzer."""
        stream, counts = self._table_stream(self._unicode, [java_lower(text) for text in texts])
        special = np.flatnonzero(counts < 0)
        if len(special):
            pieces = np.split(stream, np.cumsum(np.maximum(counts, 0))[:-1])
            for i in special.tolist():
                pieces[i] = self._analyzer_stream(texts[i])
                counts[i] = len(pieces[i])
            stream = np.concatenate(pieces)
        return stream, counts

    def analyse(self, texts: list[str]) -> SegmentPostings:
        """The postings of one segment, with a vocabulary of its own, its terms numbered by first appearance."""
        if len(self._ascii) + len(self._unicode) + len(self._other_terms) > self.max_tokens:
            self._forget()  # memory stays bounded on a corpus of unbounded vocabulary
        local_of = np.full(0, -1, dtype=np.int64)
        state = np.zeros(2, dtype=np.int64)  # (local terms, rows written)
        parts: list[np.ndarray] = []
        lengths: list[np.ndarray] = []
        local_terms = np.zeros(0, dtype=np.int64)
        for lo in range(0, len(texts), _CHUNK):
            chunk = texts[lo : lo + _CHUNK]
            flags = list(map(str.isascii, chunk))
            is_ascii = np.array(flags, dtype=np.bool_)
            ascii_terms, ascii_counts = self._table_stream(self._ascii, list(compress(chunk, flags)))
            other_terms, other_counts = self._non_ascii_stream(list(filterfalse(str.isascii, chunk)))
            counts = np.empty(len(chunk), dtype=np.int64)
            counts[is_ascii] = ascii_counts
            counts[~is_ascii] = other_counts
            if len(local_of) < len(self._terms):  # room for every worker term
                local_of = np.concatenate([local_of, np.full(len(self._terms) - len(local_of), -1, np.int64)])
                local_terms = np.concatenate([local_terms, np.zeros(len(self._terms) - len(local_terms), np.int64)])
            out = np.empty((int(counts.sum()), 3), dtype=np.int32)
            state[1] = 0
            lengths.append(_postings(is_ascii, counts, ascii_terms, other_terms, lo, local_of, local_terms, state, out))
            parts.append(out[: state[1]])
        rows = np.concatenate(parts) if parts else np.zeros((0, 3), np.int32)
        count = int(state[0])
        starts = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[:, 1], minlength=count), out=starts[1:])
        docs, tfs = np.empty(len(rows), np.int32), np.empty(len(rows), np.int32)
        scatter(rows[:, 1], 0, starts, rows[:, 0], rows[:, 2], docs, tfs)  # stable: passages stay ascending
        first_new, self._reported = self._reported, len(self._terms)
        replaced, self._replaced = self._replaced, ""
        return SegmentPostings(
            self._name,
            replaced,
            first_new,
            self._terms[first_new:],
            local_terms[:count].copy(),
            starts,
            docs,
            np.minimum(tfs, 65535).astype(np.uint16),
            np.concatenate(lengths) if lengths else np.zeros(0, np.int32),
        )
