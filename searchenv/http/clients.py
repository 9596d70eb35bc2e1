"""The one HTTP client setup: every searchenv client is an ``httpx`` client built here, the same way.

A client gets a timeout, a connection pool of ``pool_size`` connections kept alive between requests, its
headers (a key travels only in a header), and redirects off unless asked. Synchronous clients serve threads
(the retrieval client, the web search backends, the page reader); asynchronous ones serve event loops (the
LLM client). An ``httpx.AsyncClient`` belongs to the event loop that first used it, so :class:`LoopClients`
keeps one per loop: every request of a loop reuses its pooled connections (keep-alive across a batch and across
batches), and a loop never touches another loop's sockets.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["LoopClients", "async_http_client", "http_client"]


def _options(
    timeout: float | httpx.Timeout, headers: Mapping[str, str] | None, pool_size: int | None, follow_redirects: bool
) -> dict[str, Any]:
    import httpx

    options: dict[str, Any] = {"timeout": timeout, "headers": dict(headers or {}), "follow_redirects": follow_redirects}
    if pool_size is not None:
        options["limits"] = httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size)
    return options


def http_client(
    *,
    timeout: float | httpx.Timeout,
    headers: Mapping[str, str] | None = None,
    pool_size: int | None = None,
    follow_redirects: bool = False,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """A pooled synchronous client (``pool_size=None``: httpx's default pool of 100 connections); ``transport``
    replaces httpx's own (the page reader's connects only to the addresses it checked)."""
    import httpx

    options = _options(timeout, headers, pool_size, follow_redirects)
    if transport is not None:
        options["transport"] = transport
    return httpx.Client(**options)


def async_http_client(
    *,
    timeout: float | httpx.Timeout,
    headers: Mapping[str, str] | None = None,
    pool_size: int | None = None,
    follow_redirects: bool = False,
) -> httpx.AsyncClient:
    """A pooled asynchronous client; use it from one event loop only (see :class:`LoopClients`)."""
    import httpx

    return httpx.AsyncClient(**_options(timeout, headers, pool_size, follow_redirects))


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
