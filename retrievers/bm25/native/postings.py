"""The native engine's postings codec: blocks of 128 (doc, tf) pairs, bit-packed, with per-block skip data.

A term's postings are cut into blocks of :data:`BLOCK` documents. Each block is stored as a 3-byte header
(bits per doc gap, bits per ``tf - 1``, count - 1) followed by the packed ``gap - 1`` values (gaps from the
previous block's last document, so the first gap of a term counts from -1) and the packed ``tf - 1`` values,
each run padded to a whole byte. Beside the bytes the index keeps, per block, its last document (to skip blocks
without decoding them), its byte offset, and the highest BM25 impact in it. This is the frame-of-reference
scheme Lucene's own postings use; common terms, whose gaps are small, cost one or two bytes per posting.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["BLOCK", "decode_block", "encode_terms", "impact"]

BLOCK = 128


@njit(cache=True, inline="always")
def impact(idf, tf, norm_inverse):  # pragma: no cover - jit
    """A posting's BM25 score, Lucene's float32 ``idf - idf / (1 + tf · normInverse)`` (``norm_inverse`` from the
    index's norm cache): the one rule for block bounds, the walk's scores and the decoded impacts."""
    return idf - idf / (np.float32(1.0) + np.float32(tf) * norm_inverse)


@njit(cache=True, inline="always")
def _bit_width(value):  # pragma: no cover - jit
    bits = 0
    while value > 0:
        bits += 1
        value >>= 1
    return bits


@njit(cache=True)
def _pack(values, count, bits, out, pos):  # pragma: no cover - jit
    """Append ``count`` values of ``bits`` bits each to ``out`` from byte ``pos``; return the next byte."""
    if bits == 0:
        return pos
    buffer = np.uint64(0)
    filled = 0
    for i in range(count):
        buffer |= np.uint64(values[i]) << np.uint64(filled)
        filled += bits
        while filled >= 8:
            out[pos] = np.uint8(buffer & np.uint64(0xFF))
            pos += 1
            buffer >>= np.uint64(8)
            filled -= 8
    if filled > 0:
        out[pos] = np.uint8(buffer & np.uint64(0xFF))
        pos += 1
    return pos


@njit(cache=True, inline="always")
def _unpack(data, pos, count, bits, out):  # pragma: no cover - jit
    """Read ``count`` values of ``bits`` bits (at most 32) from ``data[pos:]`` into ``out``; return the next byte.

    Each value is cut from the five bytes that hold it (a value of at most 32 bits starting at any bit of a byte
    fits in 40 bits), without a branch per byte: 1.5× faster than filling a bit buffer byte by byte, and decoding
    is most of a search's time. Five bytes may reach past the run (into the next block, which is harmless); only
    at the end of the postings, where they would reach past the data, are the values read byte by byte.
    """
    if bits == 0:
        for i in range(count):
            out[i] = 0
        return pos
    end = pos + (count * bits + 7) // 8
    mask = (np.int64(1) << bits) - 1
    if end + 4 <= data.shape[0]:
        for i in range(count):
            at = i * bits
            byte = pos + (at >> 3)
            word = (
                np.int64(data[byte])
                | (np.int64(data[byte + 1]) << 8)
                | (np.int64(data[byte + 2]) << 16)
                | (np.int64(data[byte + 3]) << 24)
                | (np.int64(data[byte + 4]) << 32)
            )
            out[i] = (word >> (at & 7)) & mask
        return end
    buffer = 0
    filled = 0
    for i in range(count):
        while filled < bits:
            buffer |= np.int64(data[pos]) << filled
            pos += 1
            filled += 8
        out[i] = buffer & mask
        buffer >>= bits
        filled -= bits
    return end


@njit(cache=True)
def decode_block(data, offset, previous_last, docs, tfs):  # pragma: no cover - jit
    """Decode the block at byte ``offset`` into ``docs``/``tfs``; returns its document count."""
    doc_bits = np.int64(data[offset])
    tf_bits = np.int64(data[offset + 1])
    count = np.int64(data[offset + 2]) + 1
    pos = _unpack(data, offset + 3, count, doc_bits, docs)
    _unpack(data, pos, count, tf_bits, tfs)
    doc = previous_last
    for i in range(count):
        doc += docs[i] + 1
        docs[i] = doc
        tfs[i] += 1
    return count


@njit(cache=True)
def encode_terms(  # pragma: no cover - jit
    indptr, docs, tfs, idf, norms, norm_cache, out, block_last, block_offset, block_max, term_blocks
):
    """Encode the term-major postings ``docs``/``tfs`` (term ``t`` owns ``indptr[t]:indptr[t+1]``, docs ascending).

    Writes the bytes into ``out``, one entry per block into ``block_last``/``block_offset``/``block_max``, and
    each term's first block into ``term_blocks``; returns (bytes written, blocks written). Impacts are Lucene's
    float32 ``idf - idf / (1 + tf · normInverse)``.
    """
    gaps = np.empty(BLOCK, np.int64)
    tf_minus = np.empty(BLOCK, np.int64)
    pos = 0
    nblocks = 0
    for t in range(indptr.shape[0] - 1):
        term_blocks[t] = nblocks
        weight = idf[t]
        previous = -1
        for lo in range(indptr[t], indptr[t + 1], BLOCK):
            hi = min(lo + BLOCK, indptr[t + 1])
            count = hi - lo
            max_gap = 0
            max_tf = 0
            best = np.float32(0.0)
            for i in range(count):
                d = docs[lo + i]
                gaps[i] = d - previous - 1
                previous = d
                tf_minus[i] = tfs[lo + i] - 1
                max_gap = max(max_gap, gaps[i])
                max_tf = max(max_tf, tf_minus[i])
                best = max(best, impact(weight, tfs[lo + i], norm_cache[norms[d]]))
            doc_bits = _bit_width(max_gap)
            tf_bits = _bit_width(max_tf)
            block_offset[nblocks] = pos
            block_last[nblocks] = previous
            block_max[nblocks] = best
            out[pos] = doc_bits
            out[pos + 1] = tf_bits
            out[pos + 2] = count - 1
            pos = _pack(gaps, count, doc_bits, out, pos + 3)
            pos = _pack(tf_minus, count, tf_bits, out, pos)
            nblocks += 1
    return pos, nblocks
