"""The record of a web run: every search and page answer in one SQLite file, replayable without calling anything.

Web search costs money per request and its answers drift, so a training run or an evaluation on the web is
neither cheap nor repeatable (the peers' users say so: quotas against thousands of questions, results that
cannot be reproduced). A :class:`Record` sits between a web retriever and the network:

* ``cache_mode="record"`` calls the API for every request and stores the answer (a fresh snapshot);
* ``"cached"`` answers from the file and calls the API only on a miss, storing the answer;
* ``"replay"`` never calls anything: a miss raises :class:`NotRecorded`, which the retriever turns into a failed
  search (``RetrievalUnavailable`` of kind ``not_recorded``) or page (``PageError``) for that query alone, and is
  counted. ``"cached"`` is the fallback for a replay that may call the API.

Keys are the SHA-256 of the request's canonical JSON: the backend, its URL and parameters, the normalised query
(:func:`normal_query`) or page URL (:func:`normal_url`) — never the API key. Answers are stored as canonical JSON
and every answer, fresh or stored, is returned decoded from that text, so a recorded run and its replays see the
same bytes. The first answer stored for a key wins (``INSERT OR IGNORE`` then read back), so many threads and
processes recording one file at once agree. The file is in WAL mode with a busy timeout: readers never wait for a
writer, writers queue. Ship it beside a paper's results; ``sqlite3 web.sqlite 'select kind, request from
answers'`` lists what it holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["CACHE_MODES", "NotRecorded", "Record", "normal_query", "normal_url"]

#: The record's modes (see the module docstring).
CACHE_MODES = ("record", "replay", "cached")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    request TEXT NOT NULL,
    answer TEXT NOT NULL,
    recorded_at TEXT NOT NULL
)
"""


class NotRecorded(LookupError):
    """A replay asked for something the record does not hold; ``detail`` names it (query or URL)."""

    kind = "not_recorded"

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def normal_query(query: str) -> str:
    """A query as the key reads it: Unicode NFKC, case-folded, whitespace collapsed (web engines ignore these)."""
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


def normal_url(url: str) -> str:
    """A URL as the key reads it: scheme and host lower-cased, default port and fragment dropped, ``/`` for an
    empty path; the path and query are kept as they are (servers may tell their case apart)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(scheme)
    netloc = host if parts.port in (None, default) else f"{host}:{parts.port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Record:
    """One record file (or none: ``path=None`` passes every request through and only counts).

    Args:
        path: the SQLite file (created with its folder); ``None``: no record.
        mode: one of :data:`CACHE_MODES`; ``None`` means ``"cached"`` when a path is given.
        price_per_1k: US dollars per 1,000 search requests, for :meth:`stats`' cost estimate.
    """

    def __init__(self, path: str | os.PathLike[str] | None, mode: str | None = None, *, price_per_1k: float = 0.0):
        if mode is not None and mode not in CACHE_MODES:
            raise ValueError(f"cache_mode must be one of {', '.join(CACHE_MODES)}; got {mode!r}")
        if path is None and mode is not None:
            raise ValueError(f"cache_mode={mode!r} needs cache=PATH, the SQLite file that holds the record")
        if price_per_1k < 0:
            raise ValueError(f"price_per_1k must be >= 0, got {price_per_1k}")
        self.path = None if path is None else Path(path)
        self.mode = mode or ("cached" if path is not None else None)
        self.price_per_1k = float(price_per_1k)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._counts = {"hits": 0, "stored": 0, "replay_misses": 0}
        self._calls: dict[str, int] = {}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._connection()  # create the file and its table now, so a bad path fails at construction

    def __repr__(self) -> str:
        return f"Record(path={str(self.path) if self.path else None!r}, mode={self.mode!r})"

    def through(self, kind: str, request: dict[str, Any], call: Callable[[], Any]) -> Any:
        """The answer to ``request``: from the record, or from ``call()`` (stored), as the mode says.

        ``call`` returns a JSON-serialisable answer; an exception it raises is never stored. In ``replay`` a miss
        raises :class:`NotRecorded`. What is returned is always the stored JSON decoded.
        """
        if self.path is None:
            return json.loads(_canonical(self._call(kind, call)))
        text = _canonical({"kind": kind, **request})
        key = hashlib.sha256(text.encode()).hexdigest()
        if self.mode != "record":
            stored = self._read(key)
            if stored is not None:
                self._count("hits")
                return json.loads(stored)
            if self.mode == "replay":
                self._count("replay_misses")
                what = request.get("query") or request.get("url") or text
                raise NotRecorded(f"{kind} {what!r} is not in the record {self.path.name} (cache_mode='replay')")
        answer = _canonical(self._call(kind, call))
        connection = self._connection()
        verb = "INSERT OR REPLACE" if self.mode == "record" else "INSERT OR IGNORE"
        with connection:
            connection.execute(
                f"{verb} INTO answers (key, kind, request, answer, recorded_at) VALUES (?, ?, ?, ?, ?)",
                (key, kind, text, answer, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
            )
        self._count("stored")
        return json.loads(self._read(key) or answer)  # another process may have stored this key first

    def stats(self) -> dict[str, Any]:
        """Counters of this process: ``hits``, ``api_calls`` (per kind and in all), ``replay_misses``, ``stored``,
        ``hit_rate`` (hits over lookups) and ``estimated_cost_usd`` (search calls times the price)."""
        with self._lock:
            counts, calls = dict(self._counts), dict(self._calls)
        lookups = counts["hits"] + counts["replay_misses"] + (0 if self.mode == "record" else sum(calls.values()))
        return {
            "mode": self.mode,
            **counts,
            "api_calls": sum(calls.values()),
            **{f"api_calls_{kind}": n for kind, n in sorted(calls.items())},
            "hit_rate": counts["hits"] / lookups if lookups else 0.0,
            "estimated_cost_usd": round(calls.get("search", 0) * self.price_per_1k / 1000, 6),
        }

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
            self._local = threading.local()
        for connection in connections:
            connection.close()

    def __getstate__(self) -> dict[str, Any]:  # picklable for worker processes: connections reopen lazily
        state = self.__dict__.copy()
        state.update(_lock=None, _local=None, _connections=[])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- internals ----------------------------------------------------------------------------------------------
    def _call(self, kind: str, call: Callable[[], Any]) -> Any:
        with self._lock:
            self._calls[kind] = self._calls.get(kind, 0) + 1
        return call()

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _read(self, key: str) -> str | None:
        row = self._connection().execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (SQLite connections are not shared across threads)."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(str(self.path), timeout=60.0, check_same_thread=False)
            connection.execute("PRAGMA busy_timeout = 60000")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
            with connection:
                connection.execute(_SCHEMA)
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection
