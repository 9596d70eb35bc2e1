"""What every web search backend shares: the key, the HTTP client, the retry policy, the record, opening pages.

A backend (:mod:`.brave`, :mod:`.searxng`, :mod:`.serper`) only says how one query becomes one HTTP request and
how the answer becomes passages; :class:`WebSearchRetriever` does the rest, the same way for all of them:

* one query is one request; a batch's queries run ``concurrency`` at a time, and ``min_interval`` spaces request
  starts for plans limited to N per second;
* every request goes through :mod:`searchenv.http.retry` (``Retry-After`` honoured, 429/503 retried,
  a refusal or a malformed answer not), and a query that still fails makes ``search`` raise
  :class:`~searchenv.http.retry.RetrievalUnavailable`, so no failure is mistaken for "no results";
* every request goes through the record (:mod:`.record`) when ``cache=PATH`` is given, keyed by the normalised
  query and the backend's settings (never the key);
* the key is read from the environment and checked when the retriever is built (a stray newline or space is
  refused there, naming the variable, not retried for a minute); it is sent only as the backend's header and
  scrubbed, in every rendering (escaped, URL-encoded), from every error text; ``repr`` never shows it;
* each result is a :class:`~searchenv.types.Passage` whose ``id`` is the result's URL, so ``open_documents`` (the
  :class:`~searchenv.types.DocumentOpener` capability, through :mod:`.pages`) opens exactly what was shown.
"""

from __future__ import annotations

import html
import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from searchenv.answer_store import CACHE_MODES, AnswerStore, NotRecorded
from searchenv.checks import positive_int
from searchenv.corpus import Corpus
from searchenv.http.clients import http_client
from searchenv.http.pacing import RequestPacer
from searchenv.http.retry import (
    AttemptFailed,
    Retrier,
    RetrievalUnavailable,
    RetryPolicy,
    attempt_failed_from_exception,
    attempt_failed_from_status,
)
from searchenv.retrievers.web.keys import check_key, scrub_key
from searchenv.retrievers.web.pages import PageReader
from searchenv.retrievers.web.record import normal_query, normal_url
from searchenv.retrievers.web.summary import Summariser
from searchenv.types import Document, Passage

if TYPE_CHECKING:
    import httpx

__all__ = ["CACHE_MODES", "WebRequest", "WebSearchRetriever", "clip_query", "plain_text", "result_passages"]

#: Query limits shared by the backends (Brave's, the strictest: 400 characters and 50 words).
MAX_QUERY_CHARS = 400
MAX_QUERY_WORDS = 50


def clip_query(query: str) -> str:
    """A query within the APIs' limits (400 characters, 50 words), so a long query is searched, not refused."""
    return " ".join(query.split()[:MAX_QUERY_WORDS])[:MAX_QUERY_CHARS]


@dataclass(frozen=True)
class WebRequest:
    """One search request as a backend builds it: ``GET url?params`` or ``POST url`` with a JSON body."""

    method: str
    url: str
    params: dict[str, Any] = field(default_factory=dict)
    json: dict[str, Any] | None = None


class WebSearchRetriever:
    """Web search as a retriever: ``search(queries, k)`` → top-``k`` web results per query as passages.

    Subclasses set the class attributes and implement :meth:`_request` and :meth:`_parse`.

    Args:
        corpus: ignored (the web is the corpus); accepted so the registry can call every factory alike.
        url: the backend's search URL (a SearXNG instance's base URL; a stand-in or proxy for the others).
        api_key: the key; ``None`` reads ``$<api_key_env>`` (backends without keys ignore both).
        api_key_env: the variable holding the key (each backend has its default).
        timeout: seconds per request.
        retry_window, retries, backoff, max_backoff: the retry policy (see :class:`RetryPolicy`).
        concurrency: queries of one batch in flight at once.
        min_interval: least seconds between the starts of two requests (1.0 for a 1-query-per-second plan).
        params: further request parameters sent as given (``country``, ``gl``, ``language``, ...).
        seed: seeds the backoff jitter.
        cache: a SQLite file recording every search and page (see :mod:`.record`); ``None``: no record.
        cache_mode: ``"record"``, ``"replay"`` or ``"cached"`` (the default when ``cache`` is given).
        pages: options of the :class:`~searchenv.retrievers.web.pages.PageReader` that opens results.
        summariser: options of a :class:`~searchenv.retrievers.web.summary.Summariser` (``url``, ``model``, ...)
            that turns opened pages into notes on the question; ``None`` (default): pages are returned whole.
        price_per_1k: US dollars per 1,000 requests, for the record's cost estimate (default: the backend's list
            price, see docs/web.md).
        check_on_start: whether the composition root (``gym.make``, the CLI, the trainers) calls
            :meth:`check_reachable` when it builds this retriever (never in ``cache_mode="replay"``, which is
            offline); ``False`` for a backend started later.
    """

    #: The registry name, also part of every record key.
    name: ClassVar[str] = ""
    #: The default ``url``; ``None`` when the user must give one (a SearXNG instance).
    default_url: ClassVar[str | None] = None
    #: The variable holding the key; ``None`` for a backend without keys.
    key_env: ClassVar[str | None] = None
    #: Where to get a key, for the missing-key error.
    key_help: ClassVar[str] = ""
    #: Most results one request may ask for.
    max_count: ClassVar[int] = 20
    #: List price in US dollars per 1,000 requests (docs/web.md says when it was read).
    list_price_per_1k: ClassVar[float] = 0.0
    #: What an error status usually means with this backend, added to the error's detail.
    status_hints: ClassVar[dict[int, str]] = {}

    def __init__(
        self,
        corpus: Corpus | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 10.0,
        retry_window: float = 60.0,
        retries: int | None = None,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        concurrency: int = 4,
        min_interval: float = 0.0,
        params: dict[str, Any] | None = None,
        seed: int | None = None,
        cache: str | os.PathLike[str] | None = None,
        cache_mode: str | None = None,
        pages: dict[str, Any] | None = None,
        summariser: dict[str, Any] | None = None,
        price_per_1k: float | None = None,
        check_on_start: bool = True,
    ):
        url = url or self.default_url
        if not url or not str(url).startswith(("http://", "https://")):
            raise ValueError(f"retriever {self.name!r} needs url= an http(s):// URL, got {url!r}")
        if timeout <= 0 or concurrency < 1 or min_interval < 0:
            raise ValueError(
                f"need timeout > 0, concurrency >= 1, min_interval >= 0; got timeout={timeout}, "
                f"concurrency={concurrency}, min_interval={min_interval}"
            )
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"params must be a mapping of request parameters, got {params!r}")
        self._key = self._read_key(api_key, api_key_env)
        self.url = str(url).rstrip("/")
        self.timeout = float(timeout)
        self.concurrency = int(concurrency)
        self.min_interval = float(min_interval)
        self.params = dict(params or {})
        policy = RetryPolicy.of(retry_window, retries, backoff, max_backoff)
        self._retrier = Retrier(policy, seed, unavailable=RetrievalUnavailable)
        price = self.list_price_per_1k if price_per_1k is None else float(price_per_1k)
        self.record = AnswerStore(cache, cache_mode, price_per_1k=price)
        self.check_on_start = bool(check_on_start) and self.record.mode != "replay"
        if pages is not None and not isinstance(pages, dict):
            raise ValueError(f"pages must be a mapping of PageReader options, got {pages!r}")
        # A stand-in or a self-hosted instance on this machine serves the result pages too: its host is allowed,
        # beside the hosts the user allows.
        page_options = dict(pages or {})
        user_hosts = page_options.pop("allowed_hosts", ())
        if isinstance(user_hosts, str):
            raise ValueError(f"pages.allowed_hosts takes a list of hosts, got the string {user_hosts!r}")
        allowed = [urlsplit(self.url).netloc, *user_hosts]
        self.pages = PageReader(record=self.record, allowed_hosts=allowed, **page_options)
        if summariser is not None and not isinstance(summariser, dict):
            raise ValueError(
                f"summariser must be a mapping of Summariser options (url, model, ...), got {summariser!r}"
            )
        self.summariser = None if summariser is None else Summariser(record=self.record, **summariser)
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._pacer = RequestPacer(self.min_interval)

    def __repr__(self) -> str:  # the key stays out of every printed form
        return f"{type(self).__name__}(url={self.url!r}, failures={self._retrier.failures})"

    @property
    def requests(self) -> int:
        """Search requests sent to the backend, retries included (a record's hits send none)."""
        return self._retrier.attempts

    def stats(self) -> dict[str, Any]:
        """The record's counters (hits, API calls, estimated cost, replay misses) and the page reader's."""
        return {**self.record.stats(), "search_requests": self.requests, "page_requests": self.pages.requests}

    def check_reachable(self, timeout: float = 5.0) -> None:
        """Raise ``ConnectionError`` naming the URL and the fix unless a server answers at :attr:`url`.

        One ``HEAD`` request without the key, no retries, ``timeout`` seconds: any HTTP answer will do (no search
        is spent), so a dead or mistyped address fails before work starts instead of costing every search its
        retry window."""
        import httpx

        try:
            with http_client(timeout=timeout) as client:
                client.head(self.url)
        except httpx.HTTPError as exc:
            raise ConnectionError(
                f"retriever {self.name!r}: nothing answers at {self.url} ({type(exc).__name__}: "
                f"{scrub_key(str(exc), self._key) or 'no detail'}); fix url=, replay a record offline "
                "(cache=..., cache_mode='replay'), or pass check_on_start=False for a backend started later"
            ) from None

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """The top-``k`` web results per query; blank queries get ``[]`` without a request."""
        if isinstance(queries, str):
            raise TypeError("search() takes a sequence of queries; wrap a single query in a list")
        positive_int(k, "k")
        queries = [str(q) for q in queries]
        asked = [i for i, q in enumerate(queries) if q.strip()]
        results: list[list[Passage]] = [[] for _ in queries]
        if not asked:
            return results
        count = min(k, self.max_count)
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(asked))) as pool:
            found = list(pool.map(lambda i: self._search_one(queries[i], count), asked))
        for i, passages in zip(asked, found, strict=True):
            results[i] = passages[:k]
        return results

    @property
    def wants_questions(self) -> bool:
        """With a summariser, the environment hands each opening episode's question to :meth:`open_documents`."""
        return self.summariser is not None

    def open_documents(
        self, refs: Sequence[str], questions: Sequence[str] | None = None
    ) -> list[Document | BaseException]:
        """Each result URL's page, its main text extracted (:class:`~searchenv.retrievers.web.pages.PageReader`):
        one entry per ref, a :class:`~searchenv.retrievers.web.pages.PageError` for a page that could not be read.

        With a ``summariser`` and ``questions`` (one per ref: the question of the episode opening it), each page
        comes back as the summariser's note on that question."""
        documents = self.pages.open_documents(refs)
        if self.summariser is None or questions is None:
            return documents
        if len(questions) != len(documents):
            raise ValueError(
                f"open_documents got {len(questions)} questions for {len(documents)} refs; give one per ref"
            )
        summarise = self.summariser.summarise
        return [summarise(d, q) if isinstance(d, Document) else d for d, q in zip(documents, questions, strict=True)]

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
        self.pages.close()
        self.record.close()

    # -- what a backend defines ---------------------------------------------------------------------------------
    def _request(self, query: str, count: int) -> WebRequest:
        """The request searching ``query`` for ``count`` results."""
        raise NotImplementedError

    def _parse(self, payload: Any) -> list[Passage]:
        """The results of a decoded JSON answer; raises ``ValueError``/``TypeError`` for one of the wrong shape."""
        raise NotImplementedError

    def _headers(self, key: str | None) -> dict[str, str]:
        """The request headers, the key's included."""
        return {"Accept": "application/json"}

    def _retry_after(self, response: httpx.Response) -> float | None:
        """A wait a 429 asks for in a header other than ``Retry-After`` (Brave's ``X-RateLimit-Reset``)."""
        return None

    # -- internals ----------------------------------------------------------------------------------------------
    def _read_key(self, api_key: str | None, api_key_env: str | None) -> str | None:
        if self.key_env is None:
            return api_key
        variable = api_key_env or self.key_env
        key = api_key if api_key is not None else os.environ.get(variable)
        if not key:
            raise ValueError(
                f"retriever {self.name!r} needs an API key: set ${variable} (or pass api_key=); {self.key_help}"
            )
        try:
            return check_key(key, "api_key=" if api_key is not None else f"${variable}")
        except ValueError as exc:
            raise ValueError(f"retriever {self.name!r}: {exc}") from None

    def _search_one(self, query: str, count: int) -> list[Passage]:
        request = self._request(clip_query(query), count)
        try:
            stored = self.record.through(
                "search",
                # what the answer depends on — never the API key, which travels only in a header
                {
                    "backend": self.name,
                    "url": normal_url(request.url),  # a loopback service's port is not part of the key
                    "params": self.params,
                    "count": count,
                    "query": normal_query(query),
                },
                lambda: _encode(self._retrier.run(lambda: self._attempt(request), request.url)),
            )
        except NotRecorded as miss:
            raise RetrievalUnavailable("not_recorded", request.url, 0, miss.detail, False) from None
        return _decode(stored)

    def _attempt(self, request: WebRequest) -> list[Passage]:
        import httpx

        self._pacer.wait()  # request starts spaced by min_interval, across threads
        try:
            response = self._http().request(request.method, request.url, params=request.params, json=request.json)
        except httpx.HTTPError as exc:
            raise self._scrubbed(attempt_failed_from_exception(exc, self.timeout)) from None
        if response.status_code != 200:
            failure = attempt_failed_from_status(response.status_code, response.headers, response.text)
            if response.status_code in self.status_hints:
                failure.reason += f" ({self.status_hints[response.status_code]})"
            if failure.retry_after is None and response.status_code == 429:
                failure.retry_after = self._retry_after(response)
            raise self._scrubbed(failure)
        try:
            return self._parse(response.json())
        except (ValueError, TypeError, AttributeError) as exc:
            kind = response.headers.get("content-type", "no content type")
            reason = f"not a {self.name} search answer ({kind}; {type(exc).__name__}: {str(exc)[:200]})"
            raise self._scrubbed(AttemptFailed("bad_response", reason, False)) from None

    def _scrubbed(self, failure: AttemptFailed) -> AttemptFailed:
        """The failure with any echo of the key, in any rendering, removed from its text (an error body might
        quote headers, escaped or URL-encoded)."""
        failure.reason = scrub_key(failure.reason, self._key)
        return failure

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = http_client(timeout=self.timeout, headers=self._headers(self._key))
            return self._client


def _encode(passages: list[Passage]) -> list[list[str]]:
    """Passages as the record stores them: ``[url, title, snippet]`` rows (web results have no score)."""
    return [[p.id, p.title, p.text] for p in passages]


def _decode(rows: list[list[str]]) -> list[Passage]:
    return [Passage(str(url), str(title), str(text)) for url, title, text in rows]


_TAG = re.compile(r"<[^>]{0,200}>")


def plain_text(text: Any) -> str:
    """Snippet markup (``<strong>``, entities) turned into plain text."""
    return " ".join(html.unescape(_TAG.sub("", str(text or ""))).split())


def result_passages(items: Any, url_field: str, title_field: str, text_field: str) -> list[Passage]:
    """Result objects → passages (id = URL, first occurrence of a URL kept); results without a URL are skipped."""
    if not isinstance(items, list):
        raise TypeError(f"the results are {type(items).__name__}, not a list")
    passages, seen = [], set()
    for item in items:
        if not isinstance(item, dict):
            raise TypeError(f"a result is {type(item).__name__}, not an object")
        url = str(item.get(url_field) or "").strip()
        if not url or url in seen:
            continue
        seen.add(url)
        passages.append(Passage(url, plain_text(item.get(title_field)), plain_text(item.get(text_field))))
    return passages
