"""The service's answer cache: an LRU of ``(query, k) -> passages``.

GRPO groups send the same question several times, so repeats are answered without the engine. The cache lives
on the server's event loop, so it needs no lock. Concurrent requests that do reach the engine are merged by
:class:`searchenv.retrievers.batching.MicroBatcher`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from searchenv.types import Passage

__all__ = ["QueryCache"]


class QueryCache:
    """A least-recently-used map ``(query, k) -> passages`` with hit statistics.

    Only the event-loop thread touches it, so it needs no lock. Passages are frozen dataclasses, so cached
    lists are shared between answers safely.
    """

    def __init__(self, capacity: int):
        self.capacity = max(0, int(capacity))
        self._data: OrderedDict[tuple[str, int], list[Passage]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, query: str, k: int) -> list[Passage] | None:
        if not self.capacity:
            self.misses += 1
            return None
        found = self._data.get((query, k))
        if found is None:
            self.misses += 1
            return None
        self._data.move_to_end((query, k))
        self.hits += 1
        return found

    def put(self, query: str, k: int, passages: list[Passage]) -> None:
        if not self.capacity:
            return
        self._data[(query, k)] = passages
        self._data.move_to_end((query, k))
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def stats(self) -> dict[str, Any]:
        looked_up = self.hits + self.misses
        return {
            "size": len(self._data),
            "capacity": self.capacity,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hits / looked_up, 4) if looked_up else 0.0,
        }
