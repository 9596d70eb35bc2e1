"""Web search through a SearXNG instance (self-hosted metasearch: free, no key, no quota but your own).

``make_retriever("searxng", url="http://localhost:8080")``: ``url`` is the instance's base URL. The wire format
(https://docs.searxng.org/dev/search_api.html): ``GET {url}/search?q=…&format=json`` answers
``{"query", "number_of_results", "results": [{"url", "title", "content", "engine", "score", …}], "answers",
"infoboxes", "suggestions", "unresponsive_engines"}``, best first. The JSON format must be enabled in the
instance's ``settings.yml`` (``search: formats: [html, json]``); an instance without it answers 403, which is
reported as ``unauthorized`` with that hint. SearXNG has no result count: a page holds about 20 results and
``search`` keeps the first ``k``. Extra request parameters (``language``, ``categories``, ``engines``,
``safesearch``, ``time_range``) go in ``params``.
"""

from __future__ import annotations

from typing import Any

from searchenv.retrievers.web.search import WebRequest, WebSearchRetriever, result_passages
from searchenv.types import Passage

__all__ = ["SearxngRetriever"]


class SearxngRetriever(WebSearchRetriever):
    """A SearXNG instance's JSON API as a retriever (options:
    :class:`~searchenv.retrievers.web.search.WebSearchRetriever`; ``url`` is required)."""

    name = "searxng"
    default_url = None
    key_env = None
    max_count = 20
    list_price_per_1k = 0.0
    status_hints = {403: "is the JSON format enabled? settings.yml: search: formats: [html, json]"}

    def _request(self, query: str, count: int) -> WebRequest:
        return WebRequest("GET", f"{self.url}/search", {**self.params, "q": query, "format": "json"})

    def _parse(self, payload: Any) -> list[Passage]:
        return result_passages(payload.get("results"), "url", "title", "content")
