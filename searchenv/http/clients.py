"""The one HTTP client setup: every searchenv client is an ``httpx`` client built here, the same way.

A client gets a timeout — a number is one overall deadline per request, connect to last byte
(:mod:`searchenv.http.deadline`; httpx alone bounds each read, and a dripping server is never done) — a
connection pool of ``pool_size`` connections kept alive between requests, its
headers (a key travels only in a header), and redirects off unless asked. Synchronous clients serve threads
(the retrieval client, the web search backends, the page reader); asynchronous ones serve event loops (the
LLM client). An ``httpx.AsyncClient`` belongs to the event loop that first used it, so :class:`LoopClients`
keeps one per loop: every request of a loop reuses its pooled connections (keep-alive across a batch and across
batches), and a loop never touches another loop's sockets.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from searchenv.http.deadline import deadline, with_deadlines

if TYPE_CHECKING:
    import httpx

__all__ = ["LoopClients", "async_http_client", "http_client"]


def _options(
    timeout: float | httpx.Timeout, headers: Mapping[str, str] | None, follow_redirects: bool
) -> dict[str, Any]:
    return {"timeout": timeout, "headers": dict(headers or {}), "follow_redirects": follow_redirects}


def _limits(pool_size: int | None) -> dict[str, Any]:
    import httpx

    if pool_size is None:
        return {}
    return {"limits": httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size)}


def _overall(timeout: float | httpx.Timeout) -> float | None:
    """The request deadline a client's ``timeout`` sets: a number is one; an ``httpx.Timeout`` keeps httpx's
    per-operation meaning (its caller bounds the whole, as the page reader does)."""
    return float(timeout) if isinstance(timeout, (int, float)) else None


@functools.cache
def _client_classes() -> tuple[type, type]:
    """``httpx.Client`` and ``httpx.AsyncClient`` whose ``send`` (every request method goes through it) runs
    inside the client's request deadline (made on first use: importing this module needs no httpx)."""
    import httpx

    class Client(httpx.Client):
        def __init__(self, *, deadline_s: float | None, **options: Any):
            super().__init__(**options)
            self.deadline_s = deadline_s

        def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            with deadline(self.deadline_s):
                return super().send(request, **kwargs)

    class AsyncClient(httpx.AsyncClient):
        def __init__(self, *, deadline_s: float | None, **options: Any):
            super().__init__(**options)
            self.deadline_s = deadline_s

        async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            with deadline(self.deadline_s):
                return await super().send(request, **kwargs)

    return Client, AsyncClient


def http_client(
    *,
    timeout: float | httpx.Timeout,
    headers: Mapping[str, str] | None = None,
    pool_size: int | None = None,
    follow_redirects: bool = False,
    transport: httpx.HTTPTransport | None = None,
) -> httpx.Client:
    """A pooled synchronous client (``pool_size=None``: httpx's default pool); ``transport`` replaces httpx's own
    (the page reader's connects only to the addresses it checked). A number ``timeout`` is each request's
    deadline, whatever the transport."""
    import httpx

    client_class, _ = _client_classes()
    transport = transport if transport is not None else httpx.HTTPTransport(**_limits(pool_size))
    options = _options(timeout, headers, follow_redirects)
    return client_class(deadline_s=_overall(timeout), transport=with_deadlines(transport), **options)


def async_http_client(
    *,
    timeout: float | httpx.Timeout,
    headers: Mapping[str, str] | None = None,
    pool_size: int | None = None,
    follow_redirects: bool = False,
) -> httpx.AsyncClient:
    """A pooled asynchronous client, each request within a number ``timeout``; use it from one event loop only
    (see :class:`LoopClients`)."""
    import httpx

    _, client_class = _client_classes()
    transport = with_deadlines(httpx.AsyncHTTPTransport(**_limits(pool_size)))
    options = _options(timeout, headers, follow_redirects)
    return client_class(deadline_s=_overall(timeout), transport=transport, **options)


class LoopClients:
    """One pooled :func:`async_http_client` per event loop, built on first use in that loop.

    A loop's client goes with the loop (weakly keyed); :meth:`aclose_current` closes the running loop's client
    (a synchronous caller that ran its own ``asyncio.run`` closes it before the loop ends). Pickled copies start
    with no client.
    """

    def __init__(
        self, *, timeout: float, headers: Mapping[str, str] | None = None, pool_size: int | None = None
    ) -> None:
        self.timeout = timeout
        self.headers = dict(headers or {})
        self.pool_size = pool_size
        self._lock = threading.Lock()
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> httpx.AsyncClient:
        """The running loop's client."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None or client.is_closed:
                client = async_http_client(timeout=self.timeout, headers=self.headers, pool_size=self.pool_size)
                self._clients[loop] = client
            return client

    async def aclose_current(self) -> None:
        """Close the running loop's client, if it has one."""
        with self._lock:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.timeout, self.headers, self.pool_size))


def _rebuild(timeout: float, headers: dict[str, str], pool_size: int | None) -> LoopClients:
    return LoopClients(timeout=timeout, headers=headers, pool_size=pool_size)
