"""A retriever that lives behind an HTTP ``/retrieve`` endpoint (searchenv's server or Search-R1's own).

``make_retriever("http://host:port")`` returns a :class:`RemoteRetriever`. Each ``search(queries, k)`` is
one batched request in Search-R1's format (``{"queries", "topk", "return_scores": true}``), which every
server in the ecosystem understands. Transient failures (connection refused or reset, timeouts, HTTP
429/5xx) are retried with exponential backoff and jitter, so a retrieval server that restarts mid-training
costs a few seconds, not the run. When the service stays down, ``on_error`` decides:

* ``"raise"`` (default): :class:`RetrievalServiceError`, naming the URL and the last error;
* ``"empty"``: every query gets ``[]``, the failure is counted in :attr:`RemoteRetriever.failures` and
  described in :attr:`RemoteRetriever.last_errors`, and training goes on.

Callers that must tell a failed batch from genuinely empty results use :meth:`RemoteRetriever.search_or_error`
(or :meth:`~RemoteRetriever.asearch_or_error`), which never raises and returns the error beside the results.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from searchenv.types import Passage, split_contents

if TYPE_CHECKING:  # httpx is imported on first use, so importing this module needs no server extra
    import httpx
    from typing_extensions import Self

__all__ = ["TOKEN_ENV", "RemoteRetriever", "RetrievalServiceError"]

log = logging.getLogger("searchenv.remote")

#: Environment variable holding the bearer token: read by the server when ``--token`` is not given and by
#: :class:`RemoteRetriever` when ``token=None``, so the secret need not appear on a command line.
TOKEN_ENV = "SEARCHENV_SERVE_TOKEN"

#: HTTP statuses worth retrying: overload and server-side failures, which a restart or a moment cures.
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class RetrievalServiceError(RuntimeError):
    """The retrieval service could not answer a batch.

    Attributes:
        url: the endpoint that failed.
        attempts: how many requests were made.
        reason: the last error, in words.
        retryable: whether the last error was transient (down, slow, overloaded) rather than a refused request.
    """

    def __init__(self, url: str, attempts: int, reason: str, retryable: bool):
        hint = (
            " Is the server running (`searchenv serve --retriever bm25 --corpus ... --port ...`)?"
            if retryable
            else " The server refused the request; fix the request or the server's limits."
        )
        super().__init__(f"retrieval service {url} failed after {attempts} attempt(s): {reason}.{hint}")
        self.url = url
        self.attempts = attempts
        self.reason = reason
        self.retryable = retryable


class _AttemptError(Exception):
    def __init__(self, reason: str, retryable: bool):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


def normalise_url(url: str) -> str:
    """``http://host:port`` → ``http://host:port/retrieve``; a URL with a path is kept as given."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"retrieval service URL must look like http://host:port[/retrieve], got {url!r}")
    path = parts.path.rstrip("/") or "/retrieve"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _parse_hit(item: Any) -> Passage:
    """One result item: ``{"document": {...}, "score": s}`` or a bare document dict."""
    if not isinstance(item, dict):
        raise TypeError(f"a result item must be an object, got {type(item).__name__}")
    document, score = (item["document"], item.get("score", 0.0)) if "document" in item else (item, 0.0)
    if "contents" in document:
        title, text = split_contents(str(document["contents"]))
    else:
        title, text = str(document.get("title", "")), str(document["text"])
    return Passage(str(document.get("id", "")), title, text, float(score if score is not None else 0.0))


def _parse_response(payload: Any, n_queries: int, k: int) -> list[list[Passage]]:
    try:
        result = payload["result"]
        if not isinstance(result, list) or len(result) != n_queries:
            got = len(result) if isinstance(result, list) else type(result).__name__
            raise ValueError(f"'result' holds {got} lists for {n_queries} queries")
        return [[_parse_hit(item) for item in hits[:k]] for hits in result]
    except (KeyError, TypeError, ValueError) as exc:
        raise _AttemptError(f"the response is not Search-R1's format ({exc!r})", retryable=False) from None


class RemoteRetriever:
    """Client of a ``/retrieve`` service with timeouts, retries, pooling and a failure policy.

    Args:
        url: ``http://host:port`` or the full ``http://host:port/retrieve``.
        timeout: seconds per request attempt (connect + read).
        retries: extra attempts after the first on transient failures.
        backoff: first retry delay in seconds; doubles each attempt (capped at ``max_backoff``), with jitter
            so that many clients do not reconnect in lockstep after a restart.
        max_backoff: cap of one retry delay.
        on_error: ``"raise"`` or ``"empty"``, what :meth:`search` does when all attempts fail.
        topk_field: name of the ``k`` field in the body (``"topk"`` for Search-R1/verl/searchenv servers).
        token: bearer token; ``None`` reads ``$SEARCHENV_SERVE_TOKEN`` (unset: no header).
        pool_size: most pooled connections, and threads serving :meth:`asearch`, per client.
        seed: seeds the backoff jitter (retrieved passages never depend on it).
    """

    name = "remote"

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        on_error: Literal["raise", "empty"] = "raise",
        topk_field: str = "topk",
        token: str | None = None,
        pool_size: int = 64,
        seed: int | None = None,
    ):
        if on_error not in ("raise", "empty"):
            raise ValueError(f"on_error must be 'raise' or 'empty', got {on_error!r}")
        if timeout <= 0 or retries < 0 or backoff < 0 or max_backoff < 0 or pool_size < 1:
            raise ValueError(
                "need timeout > 0, retries >= 0, backoff >= 0, max_backoff >= 0, pool_size >= 1; got "
                f"timeout={timeout}, retries={retries}, backoff={backoff}, max_backoff={max_backoff}, "
                f"pool_size={pool_size}"
            )
        self.url = normalise_url(url)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.on_error = on_error
        self.topk_field = topk_field
        self.token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
        self.pool_size = int(pool_size)
        self.seed = seed
        self.requests = 0
        self.retried = 0
        self.failures = 0
        self.last_errors: deque[str] = deque(maxlen=32)
        self._init_transient()

    def _init_transient(self) -> None:
        self._lock = threading.Lock()
        self._jitter = random.Random(self.seed)
        self._client: httpx.Client | None = None
        self._executor: ThreadPoolExecutor | None = None

    # -- pickling: clients hold sockets, so a copy sent to another process reconnects lazily ------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for transient in ("_lock", "_jitter", "_client", "_executor"):
            state.pop(transient, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_transient()

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.url!r}, on_error={self.on_error!r}, failures={self.failures})"

    # -- public API ------------------------------------------------------------------------------------------
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query in one request; see ``on_error`` for what happens when it fails."""
        results, error = self.search_or_error(queries, k)
        if error is not None and self.on_error == "raise":
            raise error
        return results

    async def asearch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """:meth:`search` for asyncio code: awaits the network instead of blocking the event loop."""
        results, error = await self.asearch_or_error(queries, k)
        if error is not None and self.on_error == "raise":
            raise error
        return results

    def search_or_error(
        self, queries: Sequence[str], k: int
    ) -> tuple[list[list[Passage]], RetrievalServiceError | None]:
        """Never raises for service trouble: ``(results, None)`` or ``([[]] * n, error)`` after all retries."""
        queries, payload = self._prepare(queries, k)
        if not queries:
            return [], None
        import httpx

        client = self._sync_client()
        last = _AttemptError("no attempt made", retryable=True)
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt))
            try:
                response = client.post(self.url, json=payload)
                return self._accept(response, len(queries), k), None
            except (httpx.HTTPError, _AttemptError) as exc:
                last = self._attempt_failed(exc, attempt)
                if not last.retryable:
                    break
        return self._give_up(last, len(queries), attempt + 1)

    async def asearch_or_error(
        self, queries: Sequence[str], k: int
    ) -> tuple[list[list[Passage]], RetrievalServiceError | None]:
        """Async :meth:`search_or_error`: runs on the client's own thread pool (``pool_size`` threads).

        The event loop only awaits a future. The pooled synchronous ``httpx.Client`` on threads sustained 2.4x
        the queries/s of ``httpx.AsyncClient`` at 16 concurrent clients on our 2-core machine (docs/benchmarks.md,
        "Retrieval service"), and one pool serves every event loop.
        """
        return await asyncio.get_running_loop().run_in_executor(self._pool(), self.search_or_error, queries, k)

    def health(self) -> dict[str, Any]:
        """``GET /health`` of a searchenv server (Search-R1's server has none: raises ``httpx.HTTPStatusError``)."""
        parts = urlsplit(self.url)
        response = self._sync_client().get(urlunsplit((parts.scheme, parts.netloc, "/health", "", "")))
        if response.status_code not in (200, 503):
            response.raise_for_status()
        return response.json()

    def close(self) -> None:
        """Close pooled connections and the thread pool; the next call reopens them."""
        with self._lock:
            client, executor = self._client, self._executor
            self._client = self._executor = None
        if executor is not None:
            executor.shutdown(wait=True)
        if client is not None:
            client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------------------------
    def _prepare(self, queries: Sequence[str], k: int) -> tuple[list[str], dict[str, Any]]:
        if isinstance(queries, str):
            raise TypeError("search() takes a sequence of queries; wrap a single query in a list")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        queries = [str(q) for q in queries]
        return queries, {"queries": queries, self.topk_field: k, "return_scores": True}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _sync_client(self) -> httpx.Client:
        import httpx

        with self._lock:
            if self._client is None:
                limits = httpx.Limits(max_connections=self.pool_size, max_keepalive_connections=self.pool_size)
                self._client = httpx.Client(timeout=self.timeout, limits=limits, headers=self._headers())
            return self._client

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.pool_size, thread_name_prefix="searchenv-remote")
            return self._executor

    def _accept(self, response: httpx.Response, n_queries: int, k: int) -> list[list[Passage]]:
        with self._lock:
            self.requests += 1
        if response.status_code != 200:
            detail = response.text[:300].strip()
            raise _AttemptError(
                f"HTTP {response.status_code}: {detail}", retryable=response.status_code in _RETRY_STATUSES
            )
        try:
            payload = response.json()
        except ValueError:
            raise _AttemptError(f"the response is not JSON: {response.text[:200]!r}", retryable=False) from None
        return _parse_response(payload, n_queries, k)

    def _attempt_failed(self, exc: Exception, attempt: int) -> _AttemptError:
        import httpx

        if isinstance(exc, _AttemptError):
            error = exc
        elif isinstance(exc, httpx.TimeoutException):
            error = _AttemptError(f"timed out after {self.timeout:g}s ({type(exc).__name__})", retryable=True)
        else:
            error = _AttemptError(f"{type(exc).__name__}: {exc}", retryable=isinstance(exc, httpx.TransportError))
        with self._lock:
            self.last_errors.append(f"{time.strftime('%H:%M:%S')} attempt {attempt + 1}: {error.reason}")
            if error.retryable and attempt < self.retries:
                self.retried += 1
        return error

    def _delay(self, attempt: int) -> float:
        with self._lock:
            jitter = self._jitter.uniform(0.5, 1.0)
        return min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * jitter

    def _give_up(
        self, last: _AttemptError, n_queries: int, attempts: int
    ) -> tuple[list[list[Passage]], RetrievalServiceError]:
        error = RetrievalServiceError(self.url, attempts, last.reason, last.retryable)
        with self._lock:
            self.failures += 1
        log.warning("%s", error)
        return [[] for _ in range(n_queries)], error
