"""One overall deadline per HTTP request, for every searchenv client.

``httpx`` applies a timeout to each network operation — connect, each write, each read — not to a request: a
server that drips its answer a byte at a time, each byte inside the read timeout, holds a request for as long as
it likes (with ``timeout=2``: the judge 69 s, the remote retriever 104 s, Serper 107 s). A request needs an end.

The clients of :mod:`searchenv.http.clients` run every request inside :func:`deadline`, and their connections
use :func:`with_deadlines`' network backend: each connect, TLS handshake, write and read is given what is left of
the request's deadline (or its own timeout, if smaller), and one that would start after the deadline raises the
``httpcore`` timeout ``httpx`` maps to ``httpx.ReadTimeout`` (or ``ConnectTimeout``/``WriteTimeout``), which the
retry policy treats as any timeout. A request therefore ends within its timeout plus one read's wait at worst,
and a retry window, which starts no attempt past its end, within window plus one request.

The deadline is a context variable: a thread's requests and an event loop task's requests each see their own.
A body read after ``send(..., stream=True)`` returns is outside the request (the page reader keeps its own page
deadline for that).
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["deadline", "with_deadlines"]

_END: contextvars.ContextVar[float | None] = contextvars.ContextVar("searchenv_http_deadline", default=None)


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Every network operation of a searchenv client inside ends ``seconds`` from now (an enclosing deadline that
    ends sooner still holds); ``None`` adds none."""
    if seconds is None:
        yield
        return
    end = time.monotonic() + seconds
    outer = _END.get()
    token = _END.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _END.reset(token)


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """An operation's timeout, cut to what is left of the deadline; ``expired`` is raised when nothing is."""
    end = _END.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed (searchenv.http.deadline)")
    return left if timeout is None else min(timeout, left)


@functools.cache
def _classes() -> tuple[type, type]:
    """The sync and async network backends that bound each operation by the deadline (made on first use, so
    importing this module needs no httpcore)."""
    import httpcore

    class Stream(httpcore.NetworkStream):
        def __init__(self, inner: Any):
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
            return Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class Backend(httpcore.NetworkBackend):
        def __init__(self, inner: Any):
            self._inner = inner

        def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> Any:
            bounded = _left(timeout, httpcore.ConnectTimeout)
            return Stream(self._inner.connect_tcp(host, port, bounded, local_address, socket_options))

        def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
            bounded = _left(timeout, httpcore.ConnectTimeout)
            return Stream(self._inner.connect_unix_socket(path, bounded, socket_options))

        def sleep(self, seconds: float) -> None:
            self._inner.sleep(seconds)

    class AsyncStream(httpcore.AsyncNetworkStream):
        def __init__(self, inner: Any):
            self._inner = inner

        async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return await self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

        async def write(self, buffer: bytes, timeout: float | None = None) -> None:
            await self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

        async def aclose(self) -> None:
            await self._inner.aclose()

        async def start_tls(
            self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
        ) -> Any:
            bounded = _left(timeout, httpcore.ConnectTimeout)
            return AsyncStream(await self._inner.start_tls(ssl_context, server_hostname, bounded))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class AsyncBackend(httpcore.AsyncNetworkBackend):
        def __init__(self, inner: Any):
            self._inner = inner

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> Any:
            bounded = _left(timeout, httpcore.ConnectTimeout)
            return AsyncStream(await self._inner.connect_tcp(host, port, bounded, local_address, socket_options))

        async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
            bounded = _left(timeout, httpcore.ConnectTimeout)
            return AsyncStream(await self._inner.connect_unix_socket(path, bounded, socket_options))

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return Backend, AsyncBackend


def with_deadlines(transport: Any) -> Any:
    """``transport`` (an ``httpx.HTTPTransport`` or ``AsyncHTTPTransport``) with its connection pool's network
    backend wrapped so that every operation honours :func:`deadline`; the backend it had (the page reader's
    address-checking one, say) still makes the connections."""
    import httpx

    backend, async_backend = _classes()
    pool = transport._pool  # httpx builds its httpcore pool without a way to pass a network backend
    wrap = async_backend if isinstance(transport, httpx.AsyncHTTPTransport) else backend
    pool._network_backend = wrap(pool._network_backend)
    return transport
