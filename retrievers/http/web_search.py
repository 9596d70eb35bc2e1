"""Online search through the Brave Search API (the search-engine study's "online" engine, Table 5).

``make_retriever("web")`` (or ``searchenv serve --retriever web``) returns a :class:`BraveSearchRetriever`:
every query is one ``GET`` of Brave's Web Search endpoint, and each web result becomes a passage whose ``id`` is
its URL, ``title`` its page title and ``text`` its snippet. Brave was chosen because its wire format is public,
versioned (``/res/v1``) and documented:

* request — https://api-dashboard.search.brave.com/app/documentation/web-search/get-started and
  https://api-dashboard.search.brave.com/app/documentation/web-search/query : ``GET /res/v1/web/search?q=…&count=…``
  with headers ``Accept: application/json`` and ``X-Subscription-Token: <key>``; ``q`` is at most 400 characters
  and 50 words, ``count`` at most 20;
* response — https://api-dashboard.search.brave.com/app/documentation/web-search/responses : a ``WebSearchApiResponse``
  whose ``web.results`` lists ``SearchResult`` objects with ``title``, ``url`` and ``description`` (the snippet,
  with ``<strong>`` highlighting unless ``text_decorations=false``);
* errors — 401/403 for a missing or wrong key, 422 for bad parameters, 429 when the plan's rate limit is hit
  (with ``Retry-After`` / ``X-RateLimit-Reset`` headers), 5xx on the service's side.

The key is read from ``$BRAVE_SEARCH_API_KEY`` (or the variable named by ``api_key_env``); it is sent only as
that header and never appears in a log line, an error or ``repr``. Rate limits, timeouts and retries follow
:mod:`~searchenv.retrievers.http.retry` (``Retry-After`` honoured; ``min_interval`` spaces requests for plans
limited to N per second). A query that still fails makes the whole ``search`` call raise
:class:`~searchenv.retrievers.http.retry.RetrievalUnavailable`, so no failed query is mistaken for "no results".
"""

from __future__ import annotations

import html
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from searchenv.corpus import Corpus
from searchenv.retrievers.http.retry import (
    AttemptFailed,
    Retrier,
    RetrievalUnavailable,
    RetryPolicy,
    attempt_failed_from_exception,
    attempt_failed_from_status,
)
from searchenv.types import Passage

if TYPE_CHECKING:
    import httpx

__all__ = ["BRAVE_ENDPOINT", "KEY_ENV", "BraveSearchRetriever", "RetrievalUnavailable"]

#: Brave's Web Search endpoint.
BRAVE_ENDPOINT = "https://api.search.brave.com/res/v1/web/search"
#: Environment variable holding the subscription token.
KEY_ENV = "BRAVE_SEARCH_API_KEY"
#: Brave's limits on one request.
MAX_QUERY_CHARS = 400
MAX_QUERY_WORDS = 50
MAX_COUNT = 20

_TAG = re.compile(r"<[^>]{0,200}>")


def _plain(text: Any) -> str:
    """Snippet markup (``<strong>``, entities) turned into plain text."""
    return " ".join(html.unescape(_TAG.sub("", str(text or ""))).split())


def clip_query(query: str) -> str:
    """A query within Brave's limits (400 characters, 50 words), so a long query is searched, not refused."""
    return " ".join(query.split()[:MAX_QUERY_WORDS])[:MAX_QUERY_CHARS]


class BraveSearchRetriever:
    """Web search as a retriever: ``search(queries, k)`` → top-``k`` web results per query as passages.

    Args:
        corpus: ignored (the web is the corpus); accepted so the registry can call every factory alike.
        api_key: the subscription token; ``None`` reads ``$<api_key_env>``.
        api_key_env: the variable to read the key from (default ``BRAVE_SEARCH_API_KEY``).
        endpoint: the Web Search URL (a proxy or a test server speaking the same format).
        timeout: seconds per request.
        retry_window, retries, backoff, max_backoff: the retry policy (see :class:`RetryPolicy`).
        concurrency: queries of one batch in flight at once.
        min_interval: least seconds between the starts of two requests (1.0 for a 1-query-per-second plan).
        params: further query parameters sent as given (``country``, ``search_lang``, ``safesearch``, ...).
        seed: seeds the backoff jitter.
    """

    name = "web"

    def __init__(
        self,
        corpus: Corpus | None = None,
        *,
        api_key: str | None = None,
        api_key_env: str = KEY_ENV,
        endpoint: str = BRAVE_ENDPOINT,
        timeout: float = 10.0,
        retry_window: float = 60.0,
        retries: int | None = None,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        concurrency: int = 4,
        min_interval: float = 0.0,
        params: dict[str, Any] | None = None,
        seed: int | None = None,
    ):
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        if not key:
            raise ValueError(
                f"web search needs a Brave Search API key: set ${api_key_env} (or pass api_key=); "
                "get one at https://brave.com/search/api/"
            )
        if timeout <= 0 or concurrency < 1 or min_interval < 0:
            raise ValueError(
                f"need timeout > 0, concurrency >= 1, min_interval >= 0; got timeout={timeout}, "
                f"concurrency={concurrency}, min_interval={min_interval}"
            )
        self._key = key
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.concurrency = int(concurrency)
        self.min_interval = float(min_interval)
        self.params = dict(params or {})
        policy = RetryPolicy(
            window=float(retry_window),
            max_attempts=None if retries is None else int(retries) + 1,
            backoff=float(backoff),
            max_backoff=float(max_backoff),
        )
        self._retrier = Retrier(policy, seed)
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._next_start = 0.0

    def __repr__(self) -> str:  # the key stays out of every printed form
        return f"BraveSearchRetriever(endpoint={self.endpoint!r}, failures={self._retrier.failures})"

    @property
    def requests(self) -> int:
        """HTTP requests made, retries included."""
        return self._retrier.attempts

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """The top-``k`` (at most 20) web results per query; blank queries get ``[]`` without a request."""
        if isinstance(queries, str):
            raise TypeError("search() takes a sequence of queries; wrap a single query in a list")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        queries = [str(q) for q in queries]
        asked = [i for i, q in enumerate(queries) if q.strip()]
        results: list[list[Passage]] = [[] for _ in queries]
        if not asked:
            return results
        count = min(k, MAX_COUNT)
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(asked))) as pool:
            found = list(pool.map(lambda i: self._search_one(queries[i], count), asked))
        for i, passages in zip(asked, found, strict=True):
            results[i] = passages[:k]
        return results

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- internals -------------------------------------------------------------------------------------------
    def _search_one(self, query: str, count: int) -> list[Passage]:
        params = {**self.params, "q": clip_query(query), "count": count, "text_decorations": "false"}
        return self._retrier.run(lambda: self._attempt(params), self.endpoint)

    def _attempt(self, params: dict[str, Any]) -> list[Passage]:
        import httpx

        self._wait_turn()
        try:
            response = self._http().get(self.endpoint, params=params)
        except httpx.HTTPError as exc:
            raise self._scrubbed(attempt_failed_from_exception(exc, self.timeout)) from None
        if response.status_code != 200:
            failure = attempt_failed_from_status(response.status_code, response.headers, response.text)
            if failure.retry_after is None and response.status_code == 429:
                failure.retry_after = _rate_limit_reset(response.headers)
            raise self._scrubbed(failure)
        try:
            payload = response.json()
            items = (payload.get("web") or {}).get("results") or []
            if not isinstance(items, list):
                raise TypeError(f"'web.results' is {type(items).__name__}, not a list")
            return _passages(items)
        except (ValueError, TypeError, AttributeError) as exc:
            reason = f"not a Brave Web Search response ({type(exc).__name__}: {str(exc)[:200]})"
            raise self._scrubbed(AttemptFailed("bad_response", reason, False)) from None

    def _wait_turn(self) -> None:
        """Space request starts by ``min_interval`` across threads (client-side rate limit)."""
        if not self.min_interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + self.min_interval
        if start > now:
            time.sleep(start - now)

    def _scrubbed(self, failure: AttemptFailed) -> AttemptFailed:
        """The failure with any echo of the key removed from its text (an error body might quote headers)."""
        failure.reason = failure.reason.replace(self._key, "<key>")
        return failure

    def _http(self) -> httpx.Client:
        import httpx

        with self._lock:
            if self._client is None:
                headers = {"Accept": "application/json", "X-Subscription-Token": self._key}
                self._client = httpx.Client(timeout=self.timeout, headers=headers)
            return self._client


def _rate_limit_reset(headers: Any) -> float | None:
    """Brave's ``X-RateLimit-Reset`` (seconds until each window resets, comma-separated): the shortest wait."""
    value = headers.get("x-ratelimit-reset")
    try:
        return min(float(v) for v in value.split(",")) if value else None
    except ValueError:
        return None


def _passages(items: list[Any]) -> list[Passage]:
    """Web results → passages (id = URL, first occurrence of a URL kept); results without a URL are skipped."""
    passages, seen = [], set()
    for item in items:
        if not isinstance(item, dict):
            raise TypeError(f"a web result is {type(item).__name__}, not an object")
        url = str(item.get("url") or "").strip()
        if not url or url in seen:
            continue
        seen.add(url)
        passages.append(Passage(url, _plain(item.get("title")), _plain(item.get("description"))))
    return passages
