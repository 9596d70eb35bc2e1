"""Serving many requests with few engine calls: an LRU of answers and a micro-batcher that merges requests.

GRPO groups send the same question several times and rollout workers send small batches at once; engines are
far faster per query on one large batch. Both classes run on the server's event loop (the engine itself on one
worker thread, or on the loop for a quick lone request), so neither needs a lock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from searchenv.types import Passage

__all__ = ["MicroBatcher", "QueryCache"]

log = logging.getLogger("searchenv.server")


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


@dataclass
class _Job:
    queries: list[str]
    k: int
    future: asyncio.Future[list[list[Passage]]]


class MicroBatcher:
    """Merges concurrent requests into one ``retriever.search`` call on a single worker thread.

    One batch runs at a time; requests that arrive meanwhile queue up and form the next batch, so batching
    costs nothing at low load. Once a batch has held more than one request (concurrent clients exist), the
    batcher also waits up to ``max_wait_s`` for stragglers. Within a batch, requests are grouped by ``k`` and
    duplicate queries are searched once. If a merged call fails, each request is retried alone so one bad
    query fails only its own request.

    A request that finds the engine idle for longer than the engine's last call took is searched at once on
    the event loop instead, when the last call took at most ``inline_budget_s`` (0 until the server sets it,
    which it does only for engines that compute in-process). Handing a single query to the worker thread and
    back costs about as much as a quick engine's search, and such a request could neither have merged with
    another nor have delayed one: under concurrent load requests arrive back to back, find no idle gap, and
    queue for merged batches as before.
    """

    def __init__(
        self, search: Callable[[Sequence[str], int], list[list[Passage]]], max_wait_s: float, max_queries: int
    ):
        self._search = search
        self.max_wait_s = max(0.0, float(max_wait_s))
        self.max_queries = max(1, int(max_queries))
        self.inline_budget_s = 0.0
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="searchenv-retrieve")
        self._concurrent = False
        self._running = False  # a batch is gathering or searching
        self._last_call_s = math.inf  # how long the last engine call took (unknown until one ran)
        self._idle_since = 0.0  # perf_counter when the last engine call ended
        self.batches = 0
        self.requests = 0
        self.queries = 0
        self.inline = 0

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="searchenv-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Search ``queries`` at ``k`` as part of the next batch; raises what the engine raised."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.start() was not called")
        if self._may_search_inline():
            return self._search_inline(queries, k)
        future: asyncio.Future[list[list[Passage]]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Job(queries, k, future))
        return await future

    def stats(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "requests": self.requests,
            "queries": self.queries,
            "mean_requests_per_batch": round(self.requests / self.batches, 3) if self.batches else 0.0,
            "inline_requests": self.inline,
            "max_wait_ms": self.max_wait_s * 1000,
            "inline_budget_ms": self.inline_budget_s * 1000,
        }

    def _may_search_inline(self) -> bool:
        assert self._queue is not None
        if self._last_call_s > self.inline_budget_s or self._running or not self._queue.empty():
            return False
        return time.perf_counter() - self._idle_since >= self._last_call_s

    def _search_inline(self, queries: list[str], k: int) -> list[list[Passage]]:
        started = time.perf_counter()
        try:
            return _checked(self._search(queries, k), queries, k)
        finally:
            self._call_ended(started)
            self.batches += 1
            self.requests += 1
            self.queries += len(queries)
            self.inline += 1

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            self._running = False
            jobs = [await self._queue.get()]
            self._running = True
            n = len(jobs[0].queries)
            deadline = loop.time() + (self.max_wait_s if self._concurrent else 0.0)
            while n < self.max_queries:
                if self._queue.empty():
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        job = await asyncio.wait_for(self._queue.get(), remaining)
                    except asyncio.TimeoutError:
                        break
                else:
                    job = self._queue.get_nowait()
                jobs.append(job)
                n += len(job.queries)
            self._concurrent = len(jobs) > 1
            self.batches += 1
            self.requests += len(jobs)
            self.queries += n
            by_k: dict[int, list[_Job]] = {}
            for job in jobs:
                by_k.setdefault(job.k, []).append(job)
            for k, group in by_k.items():
                try:
                    await self._execute(group, k)
                except Exception as exc:  # a bug here must fail these requests, not stop the batcher
                    log.exception("micro-batch failed")
                    for job in group:
                        _settle(job.future, exc=exc)

    async def _execute(self, jobs: list[_Job], k: int) -> None:
        unique = list(dict.fromkeys(q for job in jobs for q in job.queries))
        try:
            found = dict(zip(unique, await self._call(unique, k), strict=True))
        except Exception as exc:  # noqa: BLE001 - isolate the failing request below
            if len(jobs) == 1:
                _settle(jobs[0].future, exc=exc)
                return
            for job in jobs:  # one bad query must not fail its neighbours' requests
                try:
                    _settle(job.future, result=await self._call(job.queries, k))
                except Exception as job_exc:  # noqa: BLE001
                    _settle(job.future, exc=job_exc)
            return
        for job in jobs:
            _settle(job.future, result=[found[q] for q in job.queries])

    async def _call(self, queries: list[str], k: int) -> list[list[Passage]]:
        started = time.perf_counter()
        try:
            results = await asyncio.get_running_loop().run_in_executor(self._executor, self._search, queries, k)
        finally:
            self._call_ended(started)
        return _checked(results, queries, k)

    def _call_ended(self, started: float) -> None:
        """Note when the engine fell idle and how long its call (begun at ``started``) took."""
        self._idle_since = time.perf_counter()
        self._last_call_s = self._idle_since - started


def _checked(results: list[list[Passage]], queries: list[str], k: int) -> list[list[Passage]]:
    """The engine's answer, one list of at most ``k`` passages per query, or an error that says what is wrong."""
    if len(results) != len(queries):
        raise RuntimeError(f"the retriever returned {len(results)} result lists for {len(queries)} queries")
    return [list(r[:k]) for r in results]


def _settle(future: asyncio.Future[Any], result: Any = None, exc: BaseException | None = None) -> None:
    if future.done():  # the client went away and its request was cancelled
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
