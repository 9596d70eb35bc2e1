"""The native index's term dictionary, memory-mapped: a term's id by binary search, without Python objects per term.

``terms.txt`` holds the terms in id order, one a line. Beside it the index keeps ``term_starts.npy`` (where each
term's line starts; one more entry past the end) and ``term_order.npy`` (the term ids in the byte order of their
UTF-8 text, which is their code point order). A lookup is a binary search over ``term_order`` comparing bytes in
``terms.txt`` — about twenty probes of mapped pages, a few microseconds — where a Python dictionary of wiki-18's
12 million terms would hold about 2 GB in every searching process.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from numba import njit

__all__ = ["TermTable", "write_term_table"]

_STARTS, _ORDER = "term_starts.npy", "term_order.npy"
_SEEN_TERMS = 1 << 17  # most term ids remembered (a few MB); the memo starts afresh when full


def write_term_table(directory: str | Path, terms: Sequence[str] | Mapping[str, int]) -> None:
    """Write the lookup files of ``directory/terms.txt``, whose lines are ``terms``: in id order, or each with its id
    (ids ``0 … n - 1``, as a build holds them)."""
    directory = Path(directory)
    size = (directory / "terms.txt").stat().st_size
    if terms:
        text = np.memmap(directory / "terms.txt", dtype=np.uint8, mode="r")
        starts = np.concatenate([[0], np.flatnonzero(text == ord("\n")) + 1, [size + 1]])
        del text
    else:
        starts = np.array([size + 1])
    if len(starts) != len(terms) + 1:
        raise ValueError(f"{directory}/terms.txt has {len(starts) - 1} lines for {len(terms)} terms; rebuild the index")
    if isinstance(terms, Mapping):
        order = np.fromiter(map(terms.__getitem__, sorted(terms)), np.int64, len(terms))
    else:
        order = np.array(sorted(range(len(terms)), key=terms.__getitem__), dtype=np.int64)
    _save(directory / _STARTS, starts.astype(np.uint32 if size + 1 < 2**32 else np.int64))
    _save(directory / _ORDER, order.astype(np.int32 if len(terms) < 2**31 else np.int64))  # last: marks it complete


def _save(path: Path, array: np.ndarray) -> None:
    """Save atomically: a reader never sees a half-written file, and two writers do not clash."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        with open(temporary, "xb") as out:  # the usual permissions (a mkstemp file would be owner-only)
            np.save(out, array)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@njit(cache=True, inline="always")
def _compare(text, lo, hi, keys, key_lo, key_hi):  # pragma: no cover - jit
    """-1, 0 or 1 as the bytes ``text[lo:hi]`` sort before, equal or after ``keys[key_lo:key_hi]``."""
    n = min(hi - lo, key_hi - key_lo)
    for i in range(n):
        a, b = text[lo + i], keys[key_lo + i]
        if a != b:
            return -1 if a < b else 1
    if hi - lo == key_hi - key_lo:
        return 0
    return -1 if hi - lo < key_hi - key_lo else 1


@njit(cache=True)
def _find(text, starts, order, keys, key_starts, out):  # pragma: no cover - jit
    """``out[q]``: the id of the term whose bytes are ``keys[key_starts[q]:key_starts[q + 1]]``, or -1."""
    for q in range(key_starts.shape[0] - 1):
        out[q] = -1
        lo, hi = 0, order.shape[0]
        while lo < hi:
            mid = (lo + hi) // 2
            term = order[mid]
            c = _compare(text, starts[term], starts[term + 1] - 1, keys, key_starts[q], key_starts[q + 1])
            if c < 0:
                lo = mid + 1
            elif c > 0:
                hi = mid
            else:
                out[q] = term
                break


class TermTable:
    """Term text → term id over an index directory's mapped ``terms.txt`` and lookup files.

    An index written before the lookup files existed gets them derived once, on first open (reading
    ``terms.txt`` into memory that one time).
    """

    def __init__(self, directory: str | Path, count: int) -> None:
        directory = Path(directory)
        if not (directory / _ORDER).is_file():
            text = (directory / "terms.txt").read_text(encoding="utf-8")
            try:
                write_term_table(directory, text.split("\n") if text else [])
            except OSError as exc:
                raise ValueError(
                    f"{directory} predates the term lookup files and they cannot be written there ({exc}); "
                    "open it once where it is writable, or rebuild the index"
                ) from None
            del text
        self.starts = np.load(directory / _STARTS, mmap_mode="r")
        self.order = np.load(directory / _ORDER, mmap_mode="r")
        size = (directory / "terms.txt").stat().st_size
        self.text = np.memmap(directory / "terms.txt", dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
        if not len(self.order) == len(self.starts) - 1 == count or int(self.starts[-1]) != size + 1:
            raise ValueError(f"{directory} holds a corrupt native BM25 index (its term files disagree); rebuild it")
        # plain ndarray views of the maps for the kernel: numba types an np.memmap argument on a slow path
        self._tables = (np.asarray(self.text), np.asarray(self.starts), np.asarray(self.order))
        self._seen: dict[str, int] = {}  # ids of recently asked terms: query words recur, a lookup is µs

    def __len__(self) -> int:
        return len(self.order)

    def ids(self, terms: Sequence[str]) -> list[int]:
        """Each term's id, -1 where the index does not hold it."""
        seen = self._seen
        ids = [seen.get(term) for term in terms]
        if None not in ids:
            return ids  # type: ignore[return-value]
        missing = list(dict.fromkeys(term for term, i in zip(terms, ids, strict=True) if i is None))
        found = dict(zip(missing, self._look_up(missing), strict=True))
        if len(seen) + len(found) > _SEEN_TERMS:
            self._seen = seen = {}  # replaced, not cleared: a search on another thread keeps its own view
        seen.update(found)
        return [found[term] if i is None else i for term, i in zip(terms, ids, strict=True)]

    def _look_up(self, terms: list[str]) -> list[int]:
        encoded = [term.encode("utf-8") for term in terms]
        key_starts = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(key) for key in encoded], out=key_starts[1:])
        keys = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        out = np.empty(len(encoded), np.int64)
        _find(*self._tables, keys, key_starts, out)
        return out.tolist()
