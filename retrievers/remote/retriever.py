"""A retriever that lives behind an HTTP ``/retrieve`` endpoint (searchenv's server or Search-R1's own).

``make_retriever("http://host:port")`` returns a :class:`RemoteRetriever`. Each ``search(queries, k)`` is
one batched request in Search-R1's format (``{"queries", "topk", "return_scores": true}``), which every
server in the ecosystem understands. Transient failures are retried under :mod:`~searchenv.http.retry`'s
rules — ``Retry-After`` honoured, only what can succeed later, for a window (60 s) that outlasts a server restart.
When the service stays down, ``on_error`` decides:

* ``"raise"`` (default): :class:`~searchenv.http.retry.RetrievalUnavailable` (``.kind``, ``.detail``);
* ``"empty"``: a :class:`FailedResults` — one ``[]`` per query, which still *says* it failed: its
  ``retrieval_error`` attribute holds the error, so the environment can flag the failure and not count a search.

:meth:`RemoteRetriever.search_or_error` (and ``asearch_or_error``) never raise for service trouble and return the
error beside the results.

Passages without an ``id`` (a Search-R1 index built with ``--storeRaw`` returns ``contents`` only) get a stable id
derived from their contents (``sha1:`` + 16 hex digits), with one warning per client.
"""

from __future__ import annotations

import asyncio
import os
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from searchenv.checks import positive_int
from searchenv.http.clients import http_client
from searchenv.http.retry import (
    AttemptFailed,
    Retrier,
    RetrievalUnavailable,
    RetryPolicy,
    attempt_failed_from_exception,
    attempt_failed_from_status,
)
from searchenv.retrievers.remote.wire import WireError, content_id, parse_hits, request_payload
from searchenv.types import Passage

if TYPE_CHECKING:  # httpx is imported on first use, so importing this module needs no server extra
    import httpx
    from typing_extensions import Self

__all__ = ["TOKEN_ENV", "FailedResults", "RemoteRetriever", "RetrievalUnavailable", "content_id"]

#: Environment variable holding the bearer token: read by the server when ``--token`` is not given and by
#: :class:`RemoteRetriever` when ``token=None``, so the secret need not appear on a command line.
TOKEN_ENV = "SEARCHENV_SERVE_TOKEN"


class FailedResults(list):  # type: ignore[type-arg]
    """``search()``'s answer with ``on_error="empty"`` when the service could not answer: one ``[]`` per query.

    It compares equal to ``[[], ...]`` but carries the failure, so a caller never mistakes it for "nothing
    found": ``getattr(results, "retrieval_error", None)`` is the :class:`RetrievalUnavailable`.
    """

    def __init__(self, n_queries: int, error: RetrievalUnavailable):
        super().__init__([] for _ in range(n_queries))
        self.retrieval_error = error


def normalise_url(url: str) -> str:
    """``http://host:port`` → ``http://host:port/retrieve``; a URL with a path is kept as given."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"retrieval service URL must look like http://host:port[/retrieve], got {url!r}")
    path = parts.path.rstrip("/") or "/retrieve"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class RemoteRetriever:
    """Client of a ``/retrieve`` service with timeouts, retries, pooling and a failure policy.

    Args:
        url: ``http://host:port`` or the full ``http://host:port/retrieve``.
        timeout: seconds per request attempt (connect + read).
        retry_window: seconds after the first attempt during which transient failures are retried (default 60,
            longer than a retrieval-server restart); 0 tries once.
        retries: optional cap on extra attempts within the window (``None``: the window alone limits them).
        backoff, max_backoff: first retry delay (doubling, capped), with jitter; ``Retry-After`` wins when longer.
        on_error: ``"raise"`` or ``"empty"``, what :meth:`search` does when the service cannot answer.
        topk_field: name of the ``k`` field in the body (``"topk"`` for Search-R1/verl/searchenv servers).
        token: bearer token; ``None`` reads ``$SEARCHENV_SERVE_TOKEN`` (unset: no header).
        pool_size: most pooled connections, and threads serving :meth:`asearch`, per client.
        seed: seeds the backoff jitter (retrieved passages never depend on it).
        check_on_start: whether the composition root (``gym.make``, the CLI, the trainers) calls
            :meth:`check_reachable` when it builds this client; ``False`` for a service started after the env.
    """

    name = "remote"

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        retry_window: float = 60.0,
        retries: int | None = None,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        on_error: Literal["raise", "empty"] = "raise",
        topk_field: str = "topk",
        token: str | None = None,
        pool_size: int = 64,
        seed: int | None = None,
        check_on_start: bool = True,
    ):
        if on_error not in ("raise", "empty"):
            raise ValueError(f"on_error must be 'raise' or 'empty', got {on_error!r}")
        if timeout <= 0 or pool_size < 1 or (retries is not None and retries < 0):
            raise ValueError(
                f"need timeout > 0, pool_size >= 1 and retries >= 0 (or None); got timeout={timeout}, "
                f"pool_size={pool_size}, retries={retries}"
            )
        self.url = normalise_url(url)
        self.timeout = float(timeout)
        self.policy = RetryPolicy.of(retry_window, retries, backoff, max_backoff)
        self.on_error = on_error
        self.topk_field = topk_field
        self.token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
        self.pool_size = int(pool_size)
        self.seed = seed
        self.check_on_start = bool(check_on_start)
        self._init_transient()

    def _init_transient(self) -> None:
        self._lock = threading.Lock()
        self._retrier = Retrier(self.policy, self.seed, unavailable=RetrievalUnavailable)
        self._client: httpx.Client | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._warned_missing_id = False

    # -- pickling: clients hold sockets, so a copy sent to another process reconnects lazily ------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for transient in ("_lock", "_retrier", "_client", "_executor", "_warned_missing_id"):
            state.pop(transient, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_transient()

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.url!r}, on_error={self.on_error!r}, failures={self.failures})"

    # -- counters (for dashboards; per client, across threads) -------------------------------------------------
    @property
    def requests(self) -> int:
        """HTTP requests made, retries included."""
        return self._retrier.attempts

    @property
    def retried(self) -> int:
        """Attempts that were retried after a transient failure."""
        return self._retrier.retried

    @property
    def failures(self) -> int:
        """Calls that ended without an answer."""
        return self._retrier.failures

    @property
    def last_errors(self) -> list[str]:
        """The latest failed attempts, one line each (operator text: never shown to the model)."""
        return list(self._retrier.last_errors)

    # -- public API ------------------------------------------------------------------------------------------
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query in one request; see ``on_error`` for what happens when it fails."""
        results, error = self.search_or_error(queries, k)
        if error is not None:
            if self.on_error == "raise":
                raise error
            return FailedResults(len(results), error)
        return results

    async def asearch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """:meth:`search` for asyncio code: awaits the network instead of blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._pool(), self.search, queries, k)

    def search_or_error(
        self, queries: Sequence[str], k: int
    ) -> tuple[list[list[Passage]], RetrievalUnavailable | None]:
        """Never raises for service trouble: ``(results, None)`` or ``([[]] * n, error)`` after all retries."""
        queries, payload = self._prepare(queries, k)
        if not queries:
            return [], None
        try:
            return self._retrier.run(lambda: self._attempt(payload, len(queries), k), self.url), None
        except RetrievalUnavailable as error:
            return [[] for _ in queries], error

    async def asearch_or_error(
        self, queries: Sequence[str], k: int
    ) -> tuple[list[list[Passage]], RetrievalUnavailable | None]:
        """Async :meth:`search_or_error`: runs on the client's own thread pool (``pool_size`` threads).

        The event loop only awaits a future. The pooled synchronous ``httpx.Client`` on threads sustained 2.4x
        the queries/s of ``httpx.AsyncClient`` at 16 concurrent clients on our 2-core machine (docs/benchmarks.md,
        "Retrieval service"), and one pool serves every event loop.
        """
        return await asyncio.get_running_loop().run_in_executor(self._pool(), self.search_or_error, queries, k)

    def check_reachable(self, timeout: float = 5.0) -> None:
        """Raise ``ConnectionError`` naming the URL and the fix unless a retrieval service answers at :attr:`url`.

        One tiny search, no retries, ``timeout`` seconds: called before work starts (``gym.make``, ``play``,
        ``eval``, the trainers), so a wrong URL or a server that is not up fails at once instead of every search
        stalling for the whole retry window before the model is told "unavailable". A server still loading its
        index (503) counts as reachable.
        """
        import httpx

        fix = "start one with `searchenv serve --corpus PATH` (or Search-R1's retrieval_server.py) or fix the URL"
        payload = request_payload(["searchenv reachability check"], 1, self.topk_field)
        try:
            with http_client(timeout=timeout, headers=self._headers()) as client:  # the whole check in `timeout`
                response = client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise ConnectionError(
                f"no retrieval service answers at {self.url} ({type(exc).__name__}: {exc}); {fix}"
            ) from None
        if response.status_code in (401, 403):
            raise ConnectionError(
                f"the retrieval service at {self.url} refused the request (HTTP {response.status_code}); pass "
                f"its token with retriever_options={{'token': ...}} or ${TOKEN_ENV}"
            )
        if response.status_code == 404:
            raise ConnectionError(f"{self.url} has no /retrieve endpoint (HTTP 404); {fix}")

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
        k = positive_int(k, "k")
        queries = [str(q) for q in queries]
        return queries, request_payload(queries, k, self.topk_field)

    def _attempt(self, payload: dict[str, Any], n_queries: int, k: int) -> list[list[Passage]]:
        import httpx

        try:
            response = self._sync_client().post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise attempt_failed_from_exception(exc, self.timeout) from None
        if response.status_code != 200:
            raise attempt_failed_from_status(response.status_code, response.headers, response.text)
        try:
            decoded = response.json()
        except ValueError:
            raise AttemptFailed("bad_response", f"the response is not JSON: {response.text[:200]!r}", False) from None
        try:
            results, derived = parse_hits(decoded, n_queries, k)
        except WireError as error:
            raise AttemptFailed("bad_response", f"the response is not Search-R1's format: {error}", False) from None
        if derived and not self._warned_missing_id:
            self._warned_missing_id = True
            warnings.warn(
                f"the retrieval service at {self.url} returns passages without an 'id' (a Search-R1 index built "
                "with --storeRaw?); using 'sha1:' + a hash of their contents as the id",
                stacklevel=4,
            )
        return results

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = http_client(timeout=self.timeout, headers=self._headers(), pool_size=self.pool_size)
            return self._client

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.pool_size, thread_name_prefix="searchenv-remote")
            return self._executor
