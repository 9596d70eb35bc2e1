"""How web requests are keyed in the answer store: queries and URLs normalised the way web engines read them.

The store itself — one SQLite file of every search, page and note, ``cache_mode="record" | "replay" |
"cached"`` — is :class:`searchenv.answer_store.AnswerStore`, which the judge reward and the simulated engine use
too.

A record must hit in a new process against the same service: a service on this machine (the loopback web
stand-in, a SearXNG in a container) is often on a port picked at random, so a loopback host's port is not part
of a key.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from urllib.parse import urlsplit, urlunsplit

__all__ = ["normal_query", "normal_url"]


def normal_query(query: str) -> str:
    """A query as the key reads it: Unicode NFKC, case-folded, whitespace collapsed (web engines ignore these)."""
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normal_url(url: str) -> str:
    """A URL as the key reads it: scheme and host lower-cased, fragment dropped, ``/`` for an empty path, the
    default port dropped — and a loopback host's port too (see the module docstring); the path and query are
    kept as they are (servers may tell their case apart)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(scheme)
    keep_port = parts.port not in (None, default) and not _loopback(host)
    netloc = f"[{host}]" if ":" in host else host
    if keep_port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
