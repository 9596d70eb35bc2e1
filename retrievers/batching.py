"""Merging concurrent searches into few engine calls: searchenv's one micro-batching policy.

Engines answer one batch of queries far faster per query than the same queries one call at a time (one matrix
product, one pass over the postings, one HTTP round trip). Two places receive searches one by one although many
are in flight at once: the retrieval service (concurrent HTTP requests, :mod:`searchenv.retrievers.server.app`)
and the environment under an asynchronous trainer (concurrent ``SearchQAEnv.step_async`` calls,
:mod:`searchenv.env.merged_search`). Both merge them with :class:`MicroBatcher`, so both follow the same rules;
what one merged call *does* (a thread hand-off and HTTP errors for the service, the step rules' failure
isolation for the environment) is the ``run`` coroutine each passes in.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["BatchersPerLoop", "MicroBatcher", "check_merge_window"]

log = logging.getLogger("searchenv.batching")

Item = TypeVar("Item", bound=Hashable)
Result = TypeVar("Result")


@dataclass(eq=False)
class _Request(Generic[Item, Result]):
    items: list[Item]
    key: Hashable
    future: asyncio.Future[list[Result]]


class MicroBatcher(Generic[Item, Result]):
    """Merges concurrent requests into few calls of ``run(key, items)``, which returns one result per item.

    An item is one query (with whatever the caller's ``run`` needs beside it); a request is the items of one
    caller. The policy, stated here once:

    - **One call at a time.** A request that finds no call running starts one at once; requests arriving while
      a call runs queue up and form the next one. So merging costs nothing at low load, and under load each call
      takes everything that arrived during the previous one.
    - **Wait window.** Once a call has merged more than one request (so concurrent callers exist), the next call
      waits up to ``max_wait_s`` for stragglers before it starts, or less if ``max_items`` items are queued.
    - **Size.** A call takes whole requests until it holds ``max_items`` items or more.
    - **Keys.** Requests of different keys (e.g. different ``k``) never share a call: a merged batch makes one
      call per key. Within a key, an item asked for twice is searched once.
    - **Failure.** If a merged call raises, each of its requests is run again alone, so one bad request fails
      only itself; a request whose caller has gone (cancelled) is not run again. (The environment's ``run``
      never raises for a bad query: it isolates failures query by query itself.)
    - **Inline.** Given ``run_inline`` (a synchronous ``run``) and ``inline_budget_s > 0``, a request that finds
      the engine idle for longer than its last call took is run on the event loop at once, when that last call
      took at most ``inline_budget_s``. Handing one query to a worker thread and back costs about as much as a
      quick engine's search, and such a request could neither have merged with another nor delayed one: under
      concurrent load requests arrive back to back, find no idle gap, and queue for merged calls as before.
      Only the service uses it, for engines that compute in-process; the environment never runs a search on
      the loop.
    - **Event loops.** A batcher serves one event loop at a time. It moves to another loop only while idle
      (nothing queued, no call running) — between two ``asyncio.run`` calls, say; a request from a second loop
      while the first has work raises ``RuntimeError``. Idle, it holds no reference to any loop.
    """

    def __init__(
        self,
        run: Callable[[Any, list[Item]], Awaitable[Sequence[Result]]],
        *,
        max_wait_s: float,
        max_items: int,
        run_inline: Callable[[Any, list[Item]], Sequence[Result]] | None = None,
        inline_budget_s: float = 0.0,
    ):
        self._run = run
        self._run_inline = run_inline
        self.max_wait_s = max(0.0, float(max_wait_s))
        self.max_items = max(1, int(max_items))
        self.inline_budget_s = max(0.0, float(inline_budget_s))
        self._queue: deque[_Request[Item, Result]] = deque()
        self._batch: list[_Request[Item, Result]] = []  # the requests of the call being gathered or run
        self._task: asyncio.Task[None] | None = None
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._arrived: asyncio.Future[None] | None = None  # set when a request arrives during the wait window
        self._concurrent = False
        self._last_call_s = math.inf  # how long the last call took (unknown until one ran)
        self._idle_since = 0.0  # perf_counter when the last call ended
        self.batches = 0
        self.calls = 0
        self.requests = 0
        self.queries = 0
        self.inline = 0

    async def submit(self, items: Sequence[Item], key: Hashable) -> list[Result]:
        """The results of ``items`` (one per item, in order) from the next merged call of ``key``; raises what
        ``run`` raised for this request alone."""
        loop = asyncio.get_running_loop()
        self._bind(loop)
        if self._may_run_inline():
            return self._inline(list(items), key)
        future: asyncio.Future[list[Result]] = loop.create_future()
        self._queue.append(_Request(list(items), key, future))
        if self._task is None:
            self._task = loop.create_task(self._drain(), name="searchenv-micro-batcher")
        elif self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)
        return await future

    async def close(self) -> None:
        """Stop the call in progress, if any; its requests and the queued ones are cancelled."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def stats(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "calls": self.calls,
            "requests": self.requests,
            "queries": self.queries,
            "mean_requests_per_batch": round(self.requests / self.batches, 3) if self.batches else 0.0,
            "inline_requests": self.inline,
            "max_wait_ms": self.max_wait_s * 1000,
            "inline_budget_ms": self.inline_budget_s * 1000,
        }

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        bound = self._loop() if self._loop is not None else None
        if bound is loop:
            return
        busy = self._task is not None or bool(self._queue)
        if busy and bound is not None and not bound.is_closed():
            raise RuntimeError(
                "this MicroBatcher is serving another event loop; make one batcher per event loop "
                "(searchenv.env.merged_search.SearchMerger keeps one per loop)"
            )
        # Idle, or its loop is gone with work it will never finish: start afresh on this loop.
        self._queue.clear()
        self._batch = []
        self._task = None
        self._arrived = None
        self._loop = weakref.ref(loop)

    def _may_run_inline(self) -> bool:
        if self._run_inline is None or self._last_call_s > self.inline_budget_s:
            return False
        if self._task is not None or self._queue:
            return False
        return time.perf_counter() - self._idle_since >= self._last_call_s

    def _inline(self, items: list[Item], key: Hashable) -> list[Result]:
        assert self._run_inline is not None
        started = time.perf_counter()
        try:
            return _one_per_item(self._run_inline(key, items), items)
        finally:
            self._call_ended(started)
            self.batches += 1
            self.calls += 1
            self.requests += 1
            self.queries += len(items)
            self.inline += 1

    async def _drain(self) -> None:
        """Run merged calls until nothing is queued; the task exists only while there is work."""
        try:
            while self._queue:
                await self._gather()
                await self._execute(self._batch)
                self._batch = []
        except BaseException:  # cancelled (close, or the loop shutting down): nobody will answer these requests
            for request in (*self._batch, *self._queue):
                request.future.cancel()
            self._batch = []
            self._queue.clear()
            raise
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _gather(self) -> None:
        loop = asyncio.get_running_loop()
        self._batch = batch = []
        n = 0
        deadline = loop.time() + (self.max_wait_s if self._concurrent else 0.0)
        while True:
            while self._queue and n < self.max_items:
                request = self._queue.popleft()
                batch.append(request)
                n += len(request.items)
            remaining = deadline - loop.time()
            if n >= self.max_items or remaining <= 0:
                break
            self._arrived = loop.create_future()
            try:
                await asyncio.wait((self._arrived,), timeout=remaining)
            finally:
                self._arrived = None
        self._concurrent = len(batch) > 1
        self.batches += 1
        self.requests += len(batch)
        self.queries += n

    async def _execute(self, batch: list[_Request[Item, Result]]) -> None:
        by_key: dict[Hashable, list[_Request[Item, Result]]] = {}
        for request in batch:
            by_key.setdefault(request.key, []).append(request)
        for key, requests in by_key.items():
            try:
                await self._merged(key, [r for r in requests if not r.future.done()])
            except Exception as exc:  # a bug here must fail these requests, not stop the batcher
                log.exception("micro-batch failed")
                for request in requests:
                    _settle(request.future, exc=exc)

    async def _merged(self, key: Hashable, requests: list[_Request[Item, Result]]) -> None:
        if not requests:
            return
        unique = list(dict.fromkeys(item for request in requests for item in request.items))
        try:
            found = dict(zip(unique, await self._call(key, unique)))
        except Exception as exc:  # noqa: BLE001 - isolate the failing request below
            if len(requests) == 1:
                _settle(requests[0].future, exc=exc)
                return
            for request in requests:  # one bad request must not fail its neighbours
                if request.future.done():
                    continue
                try:
                    _settle(request.future, result=await self._call(key, request.items))
                except Exception as request_exc:  # noqa: BLE001
                    _settle(request.future, exc=request_exc)
            return
        for request in requests:
            _settle(request.future, result=[found[item] for item in request.items])

    async def _call(self, key: Hashable, items: list[Item]) -> list[Result]:
        started = time.perf_counter()
        self.calls += 1
        try:
            results = await self._run(key, items)
        finally:
            self._call_ended(started)
        return _one_per_item(results, items)

    def _call_ended(self, started: float) -> None:
        """Note when the engine fell idle and how long its call (begun at ``started``) took."""
        self._idle_since = time.perf_counter()
        self._last_call_s = self._idle_since - started


def _one_per_item(results: Sequence[Result], items: Sequence[Any]) -> list[Result]:
    if len(results) != len(items):
        raise RuntimeError(f"a merged search returned {len(results)} results for {len(items)} queries")
    return list(results)


def _settle(future: asyncio.Future[Any], result: Any = None, exc: BaseException | None = None) -> None:
    if future.done():  # the caller went away and its request was cancelled
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class BatchersPerLoop(Generic[Item, Result]):
    """One :class:`MicroBatcher` per (event loop, shared object): what the environment's mergers keep
    (:class:`~searchenv.env.merged_search.SearchMerger` per retriever, :class:`~searchenv.env.merged_scoring.
    ScoreMerger` per reward spec), since a batcher serves one loop and merges only what shares one object.

    ``make(owner)`` builds the batcher of ``owner``. A loop's batchers go with the loop (weakly keyed); each entry
    holds its owner, so the owner's ``id`` is not reused while the loop lives. Thread-safe.
    """

    def __init__(self, make: Callable[[Any], MicroBatcher[Item, Result]]):
        self._make = make
        self._lock = threading.Lock()
        self._batchers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[int, tuple[Any, MicroBatcher[Item, Result]]]
        ] = weakref.WeakKeyDictionary()

    def get(self, owner: Any) -> MicroBatcher[Item, Result]:
        """The running loop's batcher for ``owner``, built on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            per_loop = self._batchers.setdefault(loop, {})
            entry = per_loop.get(id(owner))
            if entry is None:
                entry = per_loop[id(owner)] = (owner, self._make(owner))
        return entry[1]

    def totals(self, names: Sequence[str]) -> dict[str, int]:
        """The batchers' counters ``names`` (``batches``, ``calls``, ...) summed over the loops alive now."""
        with self._lock:
            batchers = [b for per_loop in list(self._batchers.values()) for _, b in per_loop.values()]
        return {name: sum(getattr(b, name) for b in batchers) for name in names}


def check_merge_window(wait_ms: Any, max_items: Any, items: str) -> None:
    """Refuse a wait window that is not a finite number of milliseconds >= 0, or a size that is not a positive
    integer (``items`` names the size's argument)."""
    if not (isinstance(wait_ms, (int, float)) and 0 <= wait_ms < float("inf")):
        raise ValueError(f"wait_ms must be a finite number of milliseconds >= 0, got {wait_ms!r}")
    if not isinstance(max_items, int) or max_items < 1:
        raise ValueError(f"{items} must be a positive integer, got {max_items!r}")
