"""The answer store: every non-deterministic remote answer of a run in one SQLite file, replayable without calling
anything.

Web search costs money per request and its answers drift; an LLM judge's verdicts and a simulated engine's
documents come from a model that may be sampled, updated or simply gone. So a run that asks any of them is
neither cheap nor repeatable. An :class:`AnswerStore` sits between such a caller and the service — the web
search backends and the page reader (``kind`` ``search``, ``page``, ``summary``), the judge reward
(``judge``) and the simulated engine (``simulated``), each with ``cache=PATH, cache_mode=...``:

* ``cache_mode="record"`` builds a record: every answer is stored, and every caller gets the stored answer;
* ``"cached"`` (the default when a path is given) does the same on a file that may already hold answers: those
  are used, the service is called only on a miss;
* ``"replay"`` never calls anything: a miss raises :class:`NotRecorded`, which the caller turns into that
  query's failure (a failed search, a ``PageError``, a judge fallback), counted.

The first answer stored for a key wins everywhere: a key is written once (``INSERT OR IGNORE``) and every
answer, fresh or stored, is returned decoded from the stored text, so all the episodes of a recording run —
in any number of threads and processes sharing the file — see what its replays will see: a recorded run and its
replay are the same run. ``record`` and ``cached`` therefore differ only in intent (``record`` notes in the log
when its file already holds answers, which win for their keys); take a fresh snapshot by recording into a new file.

Keys are the SHA-256 of the request's canonical JSON (``kind`` and what the answer depends on, never a key or
token). Answers are canonical JSON. The file is in WAL mode with a busy timeout: readers never wait for a writer,
writers queue. When it is opened, the file is checked (SQLite's ``quick_check`` and the table's shape): a damaged
record fails the run at once with the file named, instead of turning every lookup into a failed search.
``sqlite3 answers.sqlite 'select kind, request from answers'`` lists what a file holds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CACHE_MODES", "AnswerStore", "NotRecorded", "StoreDamaged"]

log = logging.getLogger("searchenv.answer_store")

#: The store's modes (see the module docstring).
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
_COLUMNS = ("key", "kind", "request", "answer", "recorded_at")
_MISSING: Any = object()  # no answer stored (``None`` could be one)


class NotRecorded(LookupError):
    """A replay asked for something the store does not hold; ``detail`` names it (query, URL or prompt)."""

    kind = "not_recorded"

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class StoreDamaged(RuntimeError):
    """The store file cannot be read as a record: the message names the file, what is wrong and the fix."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class AnswerStore:
    """One store file (or none: ``path=None`` passes every request through and only counts).

    Args:
        path: the SQLite file (created with its folder); ``None``: no store.
        mode: one of :data:`CACHE_MODES`; ``None`` means ``"cached"`` when a path is given.
        price_per_1k: US dollars per 1,000 ``search`` requests, for :meth:`stats`' cost estimate.
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
            if self.mode == "replay" and not (self.path.is_file() and self.path.stat().st_size):
                state = "is empty (0 bytes)" if self.path.is_file() else "does not exist"
                raise FileNotFoundError(
                    f"cache_mode='replay' needs an existing record; {self.path} {state} (make one with "
                    "cache_mode='record')"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._check_file()  # a bad path or a damaged file fails here, before any request

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={str(self.path) if self.path else None!r}, mode={self.mode!r})"

    #: What :meth:`lookup` returns when nothing is stored for a key (``None`` could be an answer).
    MISSING: Any = _MISSING

    def through(self, kind: str, request: dict[str, Any], call: Callable[[], Any]) -> Any:
        """The answer to ``request``: from the store, or from ``call()`` (stored), as the mode says.

        ``call`` returns a JSON-serialisable answer; an exception it raises is never stored. In ``replay`` a miss
        raises :class:`NotRecorded`. What is returned is always the stored JSON decoded.
        """
        found = self.lookup(kind, request)
        if found is not _MISSING:
            return found
        self.count_call(kind)
        return self.keep(kind, request, call())

    def lookup(self, kind: str, request: dict[str, Any]) -> Any:
        """The stored answer to ``request``, or :attr:`MISSING`; in ``replay`` a miss raises :class:`NotRecorded`.
        (With :meth:`keep` and :meth:`count_call`: the steps of :meth:`through`, for a caller that asks its
        service for many answers at once.)"""
        if self.path is None:
            return _MISSING
        stored = self._read(self._key(kind, request)[0])
        if stored is not _MISSING:
            self._count("hits")
            return stored
        if self.mode == "replay":
            self._count("replay_misses")
            what = request.get("query") or request.get("url") or request.get("prompt") or _canonical(request)
            raise NotRecorded(f"{kind} {str(what)[:200]!r} is not in the record {self.path.name} (cache_mode='replay')")
        return _MISSING

    def keep(self, kind: str, request: dict[str, Any], answer: Any) -> Any:
        """Store a fresh answer unless the key already has one; return the key's stored answer (the first one
        stored wins), decoded from its stored text."""
        answer_text = _canonical(answer)
        if self.path is None:
            return json.loads(answer_text)
        key, text = self._key(kind, request)
        connection = self._connection()
        with connection:
            connection.execute(
                "INSERT OR IGNORE INTO answers (key, kind, request, answer, recorded_at) VALUES (?, ?, ?, ?, ?)",
                (key, kind, text, answer_text, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
            )
        self._count("stored")
        stored = self._read(key)  # the first answer stored for the key: this one, or another writer's
        return stored if stored is not _MISSING else json.loads(answer_text)

    def count_call(self, kind: str) -> None:
        """Count one request made to the service (failed ones too: :meth:`stats` reports them)."""
        with self._lock:
            self._calls[kind] = self._calls.get(kind, 0) + 1

    def stats(self) -> dict[str, Any]:
        """Counters of this process: ``hits``, ``api_calls`` (per kind and in all), ``replay_misses``, ``stored``,
        ``hit_rate`` (hits over lookups) and ``estimated_cost_usd`` (search calls times the price)."""
        with self._lock:
            counts, calls = dict(self._counts), dict(self._calls)
        lookups = counts["hits"] + counts["replay_misses"] + sum(calls.values())
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
    @staticmethod
    def _key(kind: str, request: dict[str, Any]) -> tuple[str, str]:
        """``(key, request text)``: the SHA-256 of the request's canonical JSON, and that JSON."""
        text = _canonical({"kind": kind, **request})
        return hashlib.sha256(text.encode()).hexdigest(), text

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _read(self, key: str) -> Any:
        """The decoded answer stored for ``key``, or ``_MISSING``."""
        try:
            row = self._connection().execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
            return _MISSING if row is None else json.loads(row[0])
        except sqlite3.OperationalError:  # locked past the busy timeout, or the file went away: not damage
            raise
        except (sqlite3.DatabaseError, json.JSONDecodeError, TypeError) as exc:
            raise self._damaged(f"the answer stored for key {key[:12]}… cannot be read ({exc})") from None

    def _check_file(self) -> None:
        """Open the file and check it: SQLite's ``quick_check`` and the answers table's columns. Another process
        opening or writing the file at the same moment can make a statement report the file locked: that is
        waited out (up to a minute), never taken for damage."""
        deadline = time.monotonic() + 60.0
        while True:
            try:
                connection = self._connection()
                problems = [row[0] for row in connection.execute("PRAGMA quick_check").fetchall()]
                columns = tuple(row[1] for row in connection.execute("PRAGMA table_info(answers)").fetchall())
                count = connection.execute("SELECT count(*) FROM answers").fetchone()[0] if columns else 0
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    raise
                self.close()  # a fresh connection on the next try
                time.sleep(0.05)
            except sqlite3.DatabaseError as exc:
                raise self._damaged(str(exc)) from None
        if problems != ["ok"]:
            raise self._damaged("; ".join(" ".join(p.split()) for p in problems)[:300])
        if columns != _COLUMNS:
            raise self._damaged(f"its answers table has columns {list(columns)}, not {list(_COLUMNS)}")
        if count and self.mode == "record":
            log.warning(
                "recording into %s, which already holds %d answers: those answers win for their keys (record "
                "into a new file for a fresh snapshot)",
                self.path,
                count,
            )

    def _damaged(self, why: str) -> StoreDamaged:
        return StoreDamaged(
            f"the record {self.path} is damaged: {why}; restore it from a copy, or record again into a new file "
            "(cache_mode='record')"
        )

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (SQLite connections are not shared across threads)."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(str(self.path), timeout=60.0, check_same_thread=False)
            connection.execute("PRAGMA busy_timeout = 60000")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
            if self.mode != "replay":  # a replay reads a record; a file without one is refused, not made one
                with connection:
                    connection.execute(_SCHEMA)
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection
