"""The build's tokeniser for ASCII passages: Lucene's word breaks compiled by numba, each distinct token kept once.

Nearly every passage of an English corpus is pure ASCII, and for ASCII text :class:`EnglishAnalyzer`'s word
breaks reduce to one rule (``_ASCII_TOKEN`` there): a token is a maximal run of ``[a-z0-9_]`` holding a letter or
digit, continued through ``.`` ``:`` ``'`` between two letters and ``.`` ``,`` ``;`` ``'`` between two digits.
:class:`AsciiTokenTable` scans a whole chunk of passages with that rule in one compiled loop, lowercasing on the
fly, and looks every token up in an open-addressing table of the distinct tokens seen so far (their bytes are
compared, so two tokens never share an id). Python sees only token ids, and each distinct token's text once —
which it then analyses (possessive, stopword, stem) exactly as :class:`EnglishAnalyzer` does. Passages that are
not pure ASCII keep the analyzer's own path; ``tests/test_bm25.py`` checks that both give the same terms.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["AsciiTokenTable"]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True, inline="always")
def _lower(c):  # pragma: no cover - jit
    return c + 32 if 65 <= c <= 90 else c


@njit(cache=True, inline="always")
def _is_letter(c):  # pragma: no cover - jit
    return 97 <= c <= 122


@njit(cache=True, inline="always")
def _is_digit(c):  # pragma: no cover - jit
    return 48 <= c <= 57


@njit(cache=True, inline="always")
def _is_word(c):  # pragma: no cover - jit
    return _is_letter(c) or _is_digit(c) or c == 95


@njit(cache=True)
def _scan(  # pragma: no cover - jit
    text, starts, first_doc, slots, keys, arena, arena_starts, state, out_ids, out_counts
):
    """Tokenise documents ``first_doc, …`` of ``text`` (document ``d`` is ``text[starts[d]:starts[d + 1]]``).

    Each token's id goes to ``out_ids`` (from ``state[2]``), each document's token count to ``out_counts[d]``.
    ``state`` holds (distinct tokens, arena bytes used, ids written). Stops before a document that might not fit
    the table, the arena or the token arrays, and returns its index (the number of documents when all are done):
    the caller grows them and calls again from there.
    """
    mask = slots.shape[0] - 1
    count, used, written = state[0], state[1], state[2]
    docs = starts.shape[0] - 1
    for d in range(first_doc, docs):
        lo, hi = starts[d], starts[d + 1]
        worst = (hi - lo + 1) // 2  # new tokens this document could add at most
        if (
            (count + worst) * 2 > slots.shape[0]
            or used + hi - lo > arena.shape[0]
            or count + worst + 1 > arena_starts.shape[0]
        ):
            state[0], state[1], state[2] = count, used, written
            return d
        before = written
        i = lo
        while i < hi:
            c = _lower(text[i])
            if not _is_word(c):
                i += 1
                continue
            begin = i
            alnum = False
            while i < hi and _is_word(_lower(text[i])):
                alnum = alnum or text[i] != 95
                i += 1
            if not alnum:  # underscores alone are no token
                continue
            while i + 1 < hi:  # mid-word punctuation between two letters or two digits
                previous, mid, following = _lower(text[i - 1]), text[i], _lower(text[i + 1])
                if (_is_letter(previous) and _is_letter(following) and (mid == 46 or mid == 58 or mid == 39)) or (
                    _is_digit(previous) and _is_digit(following) and (mid == 46 or mid == 44 or mid == 59 or mid == 39)
                ):
                    i += 1
                    while i < hi and _is_word(_lower(text[i])):
                        i += 1
                else:
                    break
            length = i - begin
            key = np.uint64(0)  # a token of up to 8 bytes is its own key, a longer one is keyed by its hash
            if length <= 8:
                for p in range(length):
                    key |= np.uint64(_lower(text[begin + p])) << np.uint64(8 * p)
            else:
                key = _FNV_OFFSET
                for p in range(begin, i):
                    key = (key ^ np.uint64(_lower(text[p]))) * _FNV_PRIME
            slot = np.int64((key * _FNV_PRIME) >> np.uint64(16)) & mask
            while True:
                entry = slots[slot, 1]
                if entry < 0:  # a new token: copy its lowercased bytes into the arena
                    token = count
                    slots[slot, 0] = np.int64(key)
                    slots[slot, 1] = (token << 8) | min(length, 255)
                    keys[token] = key
                    arena_starts[token] = used
                    for p in range(begin, i):
                        arena[used] = _lower(text[p])
                        used += 1
                    count += 1
                    arena_starts[count] = used
                    break
                if slots[slot, 0] == np.int64(key) and entry & 255 == min(length, 255):
                    token = entry >> 8
                    if length <= 8:
                        break
                    same = arena_starts[token + 1] - arena_starts[token] == length
                    at = arena_starts[token]
                    for p in range(length):
                        if not same or arena[at + p] != _lower(text[begin + p]):
                            same = False
                            break
                    if same:
                        break
                slot = (slot + 1) & mask
            out_ids[written] = token
            written += 1
        out_counts[d] = written - before
    state[0], state[1], state[2] = count, used, written
    return docs


@njit(cache=True)
def _rehash(keys, arena_starts, count, slots):  # pragma: no cover - jit
    mask = slots.shape[0] - 1
    for token in range(count):
        key = keys[token]
        slot = np.int64((key * _FNV_PRIME) >> np.uint64(16)) & mask
        while slots[slot, 1] >= 0:
            slot = (slot + 1) & mask
        slots[slot, 0] = np.int64(key)
        slots[slot, 1] = (token << 8) | min(arena_starts[token + 1] - arena_starts[token], 255)


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    bigger = np.empty(max(size, 2 * len(array)), dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger


class AsciiTokenTable:
    """Distinct lowercased ASCII tokens, numbered in order of first appearance; grows as passages are scanned."""

    def __init__(self, capacity: int = 1 << 16):
        self._slots = np.full((2 * capacity, 2), -1, dtype=np.int64)  # (key, token id << 8 | length) per slot
        self._keys = np.empty(capacity, dtype=np.uint64)
        self._arena = np.empty(8 * capacity, dtype=np.uint8)
        self._arena_starts = np.zeros(capacity + 1, dtype=np.int64)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def token(self, token_id: int) -> str:
        """The text of token ``token_id``."""
        return self._arena[self._arena_starts[token_id] : self._arena_starts[token_id + 1]].tobytes().decode("ascii")

    def tokens(self, first: int, last: int) -> list[str]:
        """The texts of tokens ``first`` to ``last - 1``."""
        bounds = self._arena_starts[first : last + 1]
        text = self._arena[bounds[0] : bounds[-1]].tobytes().decode("ascii")
        cuts = (bounds - bounds[0]).tolist()
        return [text[a:b] for a, b in zip(cuts, cuts[1:])]

    def scan(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of ``texts`` (all ASCII), concatenated in order, and each text's token count."""
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        starts = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        buffer = np.frombuffer("".join(texts).encode("ascii"), dtype=np.uint8)
        out_ids = np.empty(int(starts[-1]) // 2 + len(texts) + 1, dtype=np.int32)  # ≤ (bytes + 1) // 2 a text
        out_counts = np.zeros(len(texts), dtype=np.int64)
        state = np.array([self._count, int(self._arena_starts[self._count]), 0], dtype=np.int64)
        done = 0
        while True:
            done = _scan(
                buffer,
                starts,
                done,
                self._slots,
                self._keys,
                self._arena,
                self._arena_starts,
                state,
                out_ids,
                out_counts,
            )
            self._count = int(state[0])
            if done == len(texts):
                return out_ids[: state[2]], out_counts
            self._grow(int(starts[done + 1] - starts[done]))

    def _grow(self, document_bytes: int) -> None:
        """Make room for at least one more document of ``document_bytes``: double what is short."""
        worst = (document_bytes + 1) // 2
        if len(self._arena_starts) < self._count + worst + 1:
            self._arena_starts = _grown(self._arena_starts, self._count + worst + 1)
            self._keys = _grown(self._keys, len(self._arena_starts) - 1)
        used = int(self._arena_starts[self._count])
        if len(self._arena) < used + document_bytes:
            self._arena = _grown(self._arena, used + document_bytes)
        if len(self._slots) < 2 * (self._count + worst):
            size = len(self._slots)
            while size < 2 * (self._count + worst):
                size *= 2
            self._slots = np.full((size, 2), -1, dtype=np.int64)
            _rehash(self._keys, self._arena_starts, self._count, self._slots)
