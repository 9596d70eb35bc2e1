"""What a native index directory holds: its files, its format version, and the numbers BM25 scores with.

Why scores agree with Lucene: document lengths are stored as Lucene's one-byte norm (``SmallFloat.intToByte4``),
and idf and the 256-entry norm cache are computed in Lucene's precision and operation order
(:func:`lucene_weights`); the search kernel (:mod:`.search`) then scores each term in float32 from that cache and
sums clauses in double, so scores usually equal Lucene's to the last bit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "ARRAY_FILES",
    "FORMAT_VERSION",
    "CollectionStats",
    "lucene_length",
    "lucene_weights",
    "norm_byte",
]

FORMAT_VERSION = "searchenv-native-2"
# What a term's score bound and document frequency are is not stored: both follow from the blocks (a term's
# highest block maximum, the sum of its block counts), which keeps small indexes small (most terms are rare).
#: The ``.npy`` arrays of an index, besides ``postings.bin``, ``terms.txt``, the term table and ``native.json``.
ARRAY_FILES = ("idf", "norms", "norm_cache", "term_blocks", "block_last", "block_offset", "block_max")


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


def lucene_weights(
    doc_freq: np.ndarray, doc_count: int, total_length: int, k1: float, b: float
) -> tuple[np.ndarray, np.ndarray]:
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
