"""The one client-side rate limiter: request starts spaced by a least interval, per key.

Web search plans are sold as N requests per second, and a polite page reader leaves a gap between two requests
to one host. Both are the same rule — a request to key ``k`` starts no sooner than ``interval`` seconds after the
previous start to ``k`` — so both use :class:`RequestPacer`: the web search backends with one key for the whole
API (``min_interval``), the page reader with one key per host (``host_interval``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

__all__ = ["RequestPacer"]


class RequestPacer:
    """Spaces request starts by at least ``interval`` seconds per key, across threads and coroutines.

    A caller reserves the next free start of its key (so concurrent callers queue in order, none skipped) and
    then waits until it comes (:meth:`wait`; the web backends and the page reader request from threads).
    ``interval=0`` never waits.
    """

    def __init__(self, interval: float):
        if not interval >= 0:
            raise ValueError(f"the interval between request starts must be >= 0 seconds, got {interval!r}")
        self.interval = float(interval)
        self._lock = threading.Lock()
        self._next_start: dict[Hashable, float] = {}

    def reserve(self, key: Hashable = "") -> float:
        """Take the next start of ``key``: the seconds to wait before it (0 when the key is free now)."""
        if not self.interval:
            return 0.0
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start.get(key, 0.0))
            self._next_start[key] = start + self.interval
        return start - now

    def wait(self, key: Hashable = "") -> None:
        """Block this thread until ``key``'s next start."""
        delay = self.reserve(key)
        if delay > 0:
            time.sleep(delay)
