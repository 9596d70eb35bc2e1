"""Web search through the Brave Search API (the search-engine study's "online" engine, Table 5).

``make_retriever("brave")`` (also registered as ``"web"``, its first name) returns a :class:`BraveSearchRetriever`.
Brave's wire format is public, versioned (``/res/v1``) and documented:

* request — https://api-dashboard.search.brave.com/app/documentation/web-search/query :
  ``GET /res/v1/web/search?q=…&count=…`` with headers ``Accept: application/json`` and
  ``X-Subscription-Token: <key>``; ``q`` is at most 400 characters and 50 words, ``count`` at most 20;
* response — https://api-dashboard.search.brave.com/app/documentation/web-search/responses : a
  ``WebSearchApiResponse`` whose ``web.results`` lists objects with ``title``, ``url`` and ``description`` (the
  snippet, with ``<strong>`` highlighting unless ``text_decorations=false``);
* errors — 401/403 for a missing or wrong key, 422 for bad parameters, 429 when the plan's rate limit is hit
  (``Retry-After``, or ``X-RateLimit-Reset``: seconds until each window resets), 5xx on the service's side.

The key is read from ``$BRAVE_SEARCH_API_KEY``; everything else (retries, record, pages) is
:class:`~searchenv.retrievers.web.search.WebSearchRetriever`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from searchenv.retrievers.web.search import WebRequest, WebSearchRetriever, result_passages
from searchenv.types import Passage

if TYPE_CHECKING:
    import httpx

__all__ = ["BRAVE_ENDPOINT", "KEY_ENV", "BraveSearchRetriever"]

#: Brave's Web Search endpoint.
BRAVE_ENDPOINT = "https://api.search.brave.com/res/v1/web/search"
#: Environment variable holding the subscription token.
KEY_ENV = "BRAVE_SEARCH_API_KEY"


class BraveSearchRetriever(WebSearchRetriever):
    """The Brave Search API as a retriever (options: :class:`~searchenv.retrievers.web.search.WebSearchRetriever`;
    ``endpoint`` is the older spelling of ``url``)."""

    name = "brave"
    default_url = BRAVE_ENDPOINT
    key_env = KEY_ENV
    key_help = "get one at https://brave.com/search/api/"
    max_count = 20
    list_price_per_1k = 5.0

    def __init__(self, corpus: Any = None, *, endpoint: str | None = None, url: str | None = None, **options: Any):
        if endpoint is not None and url is not None and endpoint != url:
            raise ValueError(f"endpoint= and url= name the same option and disagree ({endpoint!r}, {url!r}); give one")
        super().__init__(corpus, url=url or endpoint, **options)

    @property
    def endpoint(self) -> str:
        """The search URL (the name this option had before ``url``)."""
        return self.url

    def _request(self, query: str, count: int) -> WebRequest:
        params = {**self.params, "q": query, "count": count, "text_decorations": "false"}
        return WebRequest("GET", self.url, params)

    def _headers(self, key: str | None) -> dict[str, str]:
        return {"Accept": "application/json", "X-Subscription-Token": key or ""}

    def _parse(self, payload: Any) -> list[Passage]:
        return result_passages((payload.get("web") or {}).get("results") or [], "url", "title", "description")

    def _retry_after(self, response: httpx.Response) -> float | None:
        """Brave's ``X-RateLimit-Reset`` (seconds until each window resets, comma-separated): the shortest wait."""
        value = response.headers.get("x-ratelimit-reset")
        try:
            return min(float(v) for v in value.split(",")) if value else None
        except ValueError:
            return None
