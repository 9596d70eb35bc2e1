"""The build's tokeniser: Lucene's word breaks for plain text compiled by numba, each distinct token kept once.

Nearly every passage of an English corpus is pure ASCII, or ASCII with a few accented or Greek/Cyrillic letters,
and for such text :class:`~searchenv.retrievers.bm25.analyzer.EnglishAnalyzer`'s word breaks reduce to one rule
(``_ASCII_TOKEN`` / ``_PLAIN_TOKEN`` there): a token is a maximal run of letters, digits and ``_`` holding a letter
or digit, continued through ``.`` ``:`` ``'`` ``’`` ``·`` between two letters and ``.`` ``,`` ``;`` ``'`` ``’``
between two digits. :class:`TokenTable` scans a whole chunk of passages with that rule in one compiled loop and
looks every token up in an open-addressing table of the distinct tokens seen so far (their characters are
compared, so two tokens never share an id). Python sees only token ids, and each distinct token's text once —
which it then analyses (possessive, stopword, stem) exactly as the analyzer does. A passage holding any other
character (a combining mark, an ideograph, an emoji, a non-ASCII digit…) is left to the analyzer's full rules;
``tests/test_bm25.py`` checks that every path gives the analyzer's terms.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

__all__ = ["LETTER", "MIDDLE_DOT", "QUOTE", "SEPARATOR", "SPECIAL", "TokenTable"]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


#: What a non-ASCII character is to the plain rules: separator, letter, ``’`` (joins letters or digits, as ``'``),
#: ``·`` (joins letters, as ``:``), a character only the full Unicode rules handle, not yet classified.
SEPARATOR, LETTER, QUOTE, MIDDLE_DOT, SPECIAL, UNKNOWN = range(6)


@njit(cache=True, inline="always")
def _lower(c):  # pragma: no cover - jit
    return c + 32 if 65 <= c <= 90 else c


@njit(cache=True, inline="always")
def _is_letter(c, kinds):  # pragma: no cover - jit
    return 97 <= c <= 122 or (c >= 128 and kinds[c] == LETTER)


@njit(cache=True, inline="always")
def _is_digit(c):  # pragma: no cover - jit
    return 48 <= c <= 57


@njit(cache=True, inline="always")
def _is_word(c, kinds):  # pragma: no cover - jit
    return _is_letter(c, kinds) or _is_digit(c) or c == 95


@njit(cache=True, inline="always")
def _joins_letters(c, kinds):  # pragma: no cover - jit
    return c == 46 or c == 58 or c == 39 or (c >= 128 and (kinds[c] == QUOTE or kinds[c] == MIDDLE_DOT))


@njit(cache=True, inline="always")
def _joins_digits(c, kinds):  # pragma: no cover - jit
    return c == 46 or c == 44 or c == 59 or c == 39 or (c >= 128 and kinds[c] == QUOTE)


@njit(cache=True)
def _unclassified(text, kinds):  # pragma: no cover - jit
    """The distinct characters of ``text`` whose kind is still :data:`UNKNOWN`."""
    found = []
    for i in range(text.shape[0]):
        c = text[i]
        if c >= 128 and kinds[c] == UNKNOWN:
            kinds[c] = SPECIAL  # reported once; the caller sets the real kind
            found.append(c)
    return found


@njit(cache=True)
def _scan(  # pragma: no cover - jit
    text, kinds, starts, first_doc, slots, keys, tags, arena, arena_starts, state, out_ids, out_counts
):
    """Tokenise documents ``first_doc, …`` of ``text`` (document ``d`` is ``text[starts[d]:starts[d + 1]]``).

    Each token's id goes to ``out_ids`` (from ``state[2]``), each document's token count to ``out_counts[d]``
    (``-1``, and no tokens, for a document holding a :data:`SPECIAL` character). ``state`` holds (distinct
    tokens, arena used, ids written). Stops before a document that might not fit the table, the arena or the
    token arrays, and returns its index (the number of documents when all are done): the caller grows them and
    calls again from there.
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
        special = False
        if kinds.shape[0] > 0:
            for i in range(lo, hi):
                if text[i] >= 128 and kinds[text[i]] == SPECIAL:
                    special = True
                    break
        if special:
            out_counts[d] = -1
            continue
        before = written
        i = lo
        while i < hi:
            c = _lower(text[i])
            if not _is_word(c, kinds):
                i += 1
                continue
            begin = i
            alnum = False
            while i < hi and _is_word(_lower(text[i]), kinds):
                alnum = alnum or text[i] != 95
                i += 1
            if not alnum:  # underscores alone are no token
                continue
            while i + 1 < hi:  # mid-word punctuation between two letters or two digits
                previous, mid, following = _lower(text[i - 1]), text[i], _lower(text[i + 1])
                if (_is_letter(previous, kinds) and _is_letter(following, kinds) and _joins_letters(mid, kinds)) or (
                    _is_digit(previous) and _is_digit(following) and _joins_digits(mid, kinds)
                ):
                    i += 1
                    while i < hi and _is_word(_lower(text[i]), kinds):
                        i += 1
                else:
                    break
            length = i - begin
            # A token of up to 8 characters below 256 is its own key (flag 256); any other is keyed by its hash.
            packed = length <= 8
            key = np.uint64(0)
            for p in range(length):
                c = _lower(text[begin + p])
                if c >= 256:
                    packed = False
                    break
                key |= np.uint64(c) << np.uint64(8 * p)
            if not packed:
                key = _FNV_OFFSET
                for p in range(begin, i):
                    key = (key ^ np.uint64(_lower(text[p]))) * _FNV_PRIME
            tag = (256 if packed else 0) | min(length, 255)
            slot = np.int64((key * _FNV_PRIME) >> np.uint64(16)) & mask
            while True:
                entry = slots[slot, 1]
                if entry < 0:  # a new token: copy its lowercased characters into the arena
                    token = count
                    slots[slot, 0] = np.int64(key)
                    slots[slot, 1] = (token << 9) | tag
                    keys[token] = key
                    tags[token] = tag
                    arena_starts[token] = used
                    for p in range(begin, i):
                        arena[used] = _lower(text[p])
                        used += 1
                    count += 1
                    arena_starts[count] = used
                    break
                if slots[slot, 0] == np.int64(key) and entry & 511 == tag:
                    token = entry >> 9
                    if packed:
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
def _rehash(keys, tags, count, slots):  # pragma: no cover - jit
    mask = slots.shape[0] - 1
    for token in range(count):
        key = keys[token]
        slot = np.int64((key * _FNV_PRIME) >> np.uint64(16)) & mask
        while slots[slot, 1] >= 0:
            slot = (slot + 1) & mask
        slots[slot, 0] = np.int64(key)
        slots[slot, 1] = (token << 9) | tags[token]


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    bigger = np.empty(max(size, 2 * len(array)), dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger


class TokenTable:
    """Distinct lowercased tokens, numbered in order of first appearance; grows as passages are scanned.

    ``unicode=False``: a table for pure-ASCII texts (scanned as bytes). ``unicode=True``: for any other text,
    lowercased by the caller as Lucene does, scanned as code points with ``classify`` telling each new non-ASCII
    character's kind; a text holding a character the plain rules cannot handle is left to the caller.
    """

    def __init__(self, unicode: bool = False, classify: Callable[[str], int] | None = None, capacity: int = 1 << 16):
        if unicode and classify is None:
            raise ValueError("a unicode TokenTable needs classify, the kind of a non-ASCII character")
        self.unicode = unicode
        self._classify = classify
        self._kinds = np.full(0x110000 if unicode else 0, UNKNOWN, dtype=np.uint8)
        self._dtype, self._codec = (np.uint32, "utf-32-le") if unicode else (np.uint8, "ascii")
        self._slots = np.full((2 * capacity, 2), -1, dtype=np.int64)  # (key, token id << 9 | tag) per slot
        self._keys = np.empty(capacity, dtype=np.uint64)
        self._tags = np.empty(capacity, dtype=np.int64)
        self._arena = np.empty(8 * capacity, dtype=self._dtype)
        self._arena_starts = np.zeros(capacity + 1, dtype=np.int64)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def tokens(self, first: int, last: int) -> list[str]:
        """The texts of tokens ``first`` to ``last - 1``."""
        bounds = self._arena_starts[first : last + 1]
        text = self._arena[bounds[0] : bounds[-1]].tobytes().decode(self._codec)
        cuts = (bounds - bounds[0]).tolist()
        return [text[a:b] for a, b in zip(cuts, cuts[1:])]

    def scan(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of ``texts``, concatenated in order, and each text's token count (-1: not scanned, a
        character of it needs the full Unicode rules)."""
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        starts = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        buffer = np.frombuffer("".join(texts).encode(self._codec), dtype=self._dtype)
        if self.unicode:
            for code in _unclassified(buffer, self._kinds):
                self._kinds[code] = self._classify(chr(code))
        out_ids = np.empty(int(starts[-1]) // 2 + len(texts) + 1, dtype=np.int32)  # ≤ (length + 1) // 2 a text
        out_counts = np.zeros(len(texts), dtype=np.int64)
        state = np.array([self._count, int(self._arena_starts[self._count]), 0], dtype=np.int64)
        done = 0
        while True:
            done = _scan(
                buffer,
                self._kinds,
                starts,
                done,
                self._slots,
                self._keys,
                self._tags,
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

    def _grow(self, document_length: int) -> None:
        """Make room for at least one more document of ``document_length``: double what is short."""
        worst = (document_length + 1) // 2
        if len(self._arena_starts) < self._count + worst + 1:
            self._arena_starts = _grown(self._arena_starts, self._count + worst + 1)
            self._keys = _grown(self._keys, len(self._arena_starts) - 1)
            self._tags = _grown(self._tags, len(self._arena_starts) - 1)
        used = int(self._arena_starts[self._count])
        if len(self._arena) < used + document_length:
            self._arena = _grown(self._arena, used + document_length)
        if len(self._slots) < 2 * (self._count + worst):
            size = len(self._slots)
            while size < 2 * (self._count + worst):
                size *= 2
            self._slots = np.full((size, 2), -1, dtype=np.int64)
            _rehash(self._keys, self._tags, self._count, self._slots)
