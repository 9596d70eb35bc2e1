"""Which hosts the page reader may connect to — checked on the very address it connects to.

A model may write any URL, so a page reader must not become a way into the machine's own network (cloud metadata
at 169.254.169.254, services on 127.0.0.1 or 10.x). Checking a host's addresses and then letting the HTTP client
resolve the name again to connect leaves a gap: a DNS answer that changes in between (DNS rebinding: public for
the check, private for the connection) gets through. So the check lives in the connection itself: a
:func:`checked_transport` connection resolves the host once, refuses it if any address is not public (unless the
host is allowed), and connects to those same addresses. TLS is untouched: the client still verifies the certificate
against the host name of the URL (it is the origin's name, not the address, that goes into SNI and the check).

Through a proxy from the environment (``HTTP_PROXY``/``HTTPS_PROXY``, honoured by httpx) the proxy resolves and
connects, so there the reader's own check before the request (:meth:`Reach.addresses`) is all that runs.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Reach", "ReachRefused", "checked_transport"]

_DEFAULT_PORTS = (80, 443)


class ReachRefused(Exception):
    """A host the reader may not open (``kind="blocked"``) or cannot resolve (``"unreachable"``)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class Reach:
    """The reach settings of a page reader.

    Args:
        allowed_hosts: ``host`` or ``host:port`` values that may resolve to private or loopback addresses (a host
            without a port allows ports 80 and 443).
        allow_private: allow every private, loopback or link-local address.
    """

    def __init__(self, allowed_hosts: Iterable[str] = (), allow_private: bool = False):
        if isinstance(allowed_hosts, str):
            raise TypeError(f"allowed_hosts takes a list of hosts, got the string {allowed_hosts!r}")
        self.allowed_hosts = frozenset(str(h).strip().lower() for h in allowed_hosts if str(h).strip())
        self.allow_private = bool(allow_private)
        self._allowed = {_host_port(entry) for entry in self.allowed_hosts}

    def settings(self) -> dict[str, Any]:
        """The settings as plain data, for what depends on them (a page record's key)."""
        return {"allow_private": self.allow_private, "allowed_hosts": sorted(self.allowed_hosts)}

    def allows(self, host: str, port: int | None) -> bool:
        """Whether ``host:port`` may be opened whatever it resolves to."""
        host = host.strip("[]").lower()
        if self.allow_private or (host, port) in self._allowed:
            return True
        return (host, None) in self._allowed and port in (None, *_DEFAULT_PORTS)

    def addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for ``host:port``, resolved once; :class:`ReachRefused` if the name does
        not resolve or any address is not public (unless :meth:`allows` it)."""
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise ReachRefused("unreachable", f"cannot resolve {host!r} ({exc})") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        if self.allows(host, port):
            return addresses
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_unspecified:
                netloc = host if port in _DEFAULT_PORTS else f"{host}:{port}"
                raise ReachRefused(
                    "blocked",
                    f"{host} resolves to the non-public address {ip}; list {netloc!r} in allowed_hosts (or set "
                    "allow_private) to open it",
                )
        return addresses


def _host_port(entry: str) -> tuple[str, int | None]:
    parts = urlsplit(f"//{entry}")
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.hostname or entry).lower(), port


@functools.cache
def _checked_backend() -> type:
    """The httpcore network backend that connects only to addresses :meth:`Reach.addresses` checked (made on
    first use, so importing this module needs no httpcore)."""
    import httpcore

    class CheckedBackend(httpcore.SyncBackend):
        def __init__(self, reach: Reach):
            self.reach = reach

        def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Sequence[Any] | None = None,
        ) -> Any:
            last: Exception | None = None
            for address in self.reach.addresses(host, port):
                try:
                    return super().connect_tcp(address, port, timeout, local_address, socket_options)
                except httpcore.ConnectError as exc:  # the next address, as socket.create_connection would
                    last = exc
            raise last or httpcore.ConnectError(f"no address for {host!r}")

    return CheckedBackend


def checked_transport(reach: Reach) -> Any:
    """An ``httpx.HTTPTransport`` whose direct connections are checked by ``reach`` on the address they connect
    to (TLS verified as usual, with the environment's trust store settings)."""
    import httpcore
    import httpx

    transport = httpx.HTTPTransport()
    limits = httpx.Limits()
    transport._pool = httpcore.ConnectionPool(  # the pool httpx built, with the checking backend
        ssl_context=httpx.create_ssl_context(trust_env=True),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_checked_backend()(reach),
    )
    return transport
