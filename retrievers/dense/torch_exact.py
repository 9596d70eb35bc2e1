"""Exact inner-product search as a torch matrix product plus top-k: the GPU path where faiss-gpu is absent.

faiss-gpu is not on PyPI for current CUDA and many GPU machines have only torch. Exact search is a matrix
product (queries × passages) followed by a top-k, which torch runs at the GPU's fp16 tensor-core rate. The
vectors are held in row shards (``shard_rows`` each) so that the score matrix of one query block against one
shard stays within ``score_bytes``; per-shard top-k lists are merged into the global top-k.

Memory: wiki-18 in fp16 is 21.0M × 768 × 2 B = 32.3 GB, which fits one 80 GB GPU beside nothing else large;
shards let the same code run over less memory by moving them in turn (not implemented: every shard stays on
``device``). **This path has only been run on CPU** (the test suite compares it with faiss there); its GPU
speed is unmeasured.

:class:`TorchFlatIndex` has the faiss surface the dense retriever uses (``d``, ``ntotal``, ``search``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["TorchFlatIndex"]


class TorchFlatIndex:
    """Row-sharded vectors on a torch device; ``search`` = fp16/fp32 matrix product + merged top-k.

    Args:
        blocks: float32 row blocks in corpus order (memory-mapped shards are fine: each is copied once).
        dim: vector dimension.
        device: ``"cuda"``, ``"cuda:1"``, ``"cpu"``…; CUDA when torch sees a GPU by default.
        dtype: ``"float16"`` (default on CUDA: half the memory, tensor cores) or ``"float32"`` (default on CPU,
            where fp16 matrix products are slow).
        shard_rows: rows per shard.
        score_bytes: the most memory one block of scores may take (sets the query block size).
    """

    def __init__(
        self,
        blocks: Iterable[np.ndarray],
        dim: int,
        *,
        device: str | None = None,
        dtype: str | None = None,
        shard_rows: int = 2**20,
        score_bytes: int = 2**31,
    ):
        import torch

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        name = dtype or ("float16" if self.device.type == "cuda" else "float32")
        if name not in ("float16", "float32", "bfloat16"):
            raise ValueError(f"dtype must be 'float16', 'bfloat16' or 'float32', got {name!r}")
        self.dtype = getattr(torch, name)
        self.d = int(dim)
        self.shard_rows = int(shard_rows)
        self.score_bytes = int(score_bytes)
        self.shards: list[Any] = []
        pending: list[np.ndarray] = []
        pending_rows = 0
        for block in blocks:
            if block.ndim != 2 or block.shape[1] != self.d:
                raise ValueError(f"vector blocks must be (n, {self.d}), got {block.shape}")
            pending.append(block)
            pending_rows += len(block)
            while pending_rows >= self.shard_rows:
                pending, pending_rows = self._flush(pending, self.shard_rows)
        while pending_rows:
            pending, pending_rows = self._flush(pending, min(pending_rows, self.shard_rows))
        self.ntotal = sum(int(s.shape[0]) for s in self.shards)

    def _flush(self, pending: list[np.ndarray], rows: int) -> tuple[list[np.ndarray], int]:
        """Move the first ``rows`` pending rows to the device as one shard; return what is left."""
        import torch

        stacked = np.concatenate([np.asarray(b, dtype=np.float32) for b in pending])
        self.shards.append(torch.from_numpy(np.ascontiguousarray(stacked[:rows])).to(self.device, self.dtype))
        rest = stacked[rows:]
        return ([rest] if len(rest) else []), len(rest)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, positions)``, each ``len(queries) × min(k, ntotal)``, best first (faiss's layout)."""
        import torch

        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(int(k), self.ntotal)
        scores = np.empty((len(queries), k), dtype=np.float32)
        positions = np.empty((len(queries), k), dtype=np.int64)
        item = torch.finfo(self.dtype).bits // 8
        block = max(1, self.score_bytes // (max(self.shard_rows, 1) * item))
        with torch.inference_mode():
            for start in range(0, len(queries), block):
                q = torch.from_numpy(queries[start : start + block]).to(self.device, self.dtype)
                best_s, best_i = self._search_block(q, k)
                scores[start : start + len(q)] = best_s.float().cpu().numpy()
                positions[start : start + len(q)] = best_i.cpu().numpy()
        return scores, positions

    def _search_block(self, q: Any, k: int) -> tuple[Any, Any]:
        import torch

        best_s = best_i = None
        offset = 0
        for shard in self.shards:
            s, i = torch.topk(q @ shard.T, min(k, shard.shape[0]), dim=1)
            i = i + offset
            offset += shard.shape[0]
            if best_s is not None:
                s, i = torch.cat([best_s, s], dim=1), torch.cat([best_i, i], dim=1)
                s, pick = torch.topk(s, k, dim=1)
                i = torch.gather(i, 1, pick)
            best_s, best_i = s, i
        return best_s, best_i

    def __repr__(self) -> str:
        return f"TorchFlatIndex({self.ntotal} × {self.d}, {len(self.shards)} shards, {self.dtype}, {self.device})"
